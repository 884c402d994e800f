package tools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// BenchmarkExecute is one call of a Func tool with a flat argument
// object, through a registry, under a WithRun context (as the engine
// calls it).
func BenchmarkExecute(b *testing.B) {
	type args struct {
		I int `json:"i"`
	}
	noop := Func("noop", "does nothing", `{}`, func(context.Context, args) (string, error) { return "ok", nil })
	r, err := NewRegistry(noop)
	if err != nil {
		b.Fatal(err)
	}
	ctx := WithRun(context.Background(), func(string) {}, nil)
	call := vocab.ToolCall{ID: "c1", Name: "noop", Args: json.RawMessage(`{"i":7}`)}
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Execute(ctx, call, nil); res.IsError {
			b.Fatal(res.Content)
		}
	}
}
