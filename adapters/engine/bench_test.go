package engine

import (
	"context"
	"encoding/json"
	"iter"
	"testing"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// stepProvider answers every odd request with one call to the no-op tool and
// every even request with a final text: each turn is two steps.
type stepProvider struct{ n int }

var (
	noopCall   = vocab.ToolCall{ID: "c1", Name: "noop", Args: json.RawMessage(`{}`)}
	usagePart  = vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 10, OutputTokens: 2}}
	toolParts  = []vocab.StreamPart{{Kind: vocab.StreamToolCall, Call: &noopCall}, usagePart, {Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}}
	finalParts = []vocab.StreamPart{{Kind: vocab.StreamText, Text: "done"}, usagePart, {Kind: vocab.StreamFinish, Finish: vocab.FinishStop}}
)

func (p *stepProvider) Stream(_ context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	p.n++
	parts := finalParts
	if p.n%2 == 1 {
		parts = toolParts
	}
	return func(yield func(vocab.StreamPart, error) bool) {
		for _, part := range parts {
			if !yield(part, nil) {
				return
			}
		}
	}
}

// BenchmarkEngineStep measures the engine's own cost per step: a turn of
// two steps (a no-op tool call, then an answer) through the public path
// (Submit, Wait), every event written to the in-memory log, machines built
// once per lane. Compare with machines/turn BenchmarkTurnBareStateless (the
// bare stateless floor for the 4 turn transitions of a step) in the same
// run: go test -bench 'EngineStep|TurnBare' ./adapters/engine ./machines/turn
//
// A session is replaced every 100 turns (outside the timer), so the
// in-memory log stays the size of a real session instead of growing with
// b.N and turning the benchmark into a GC benchmark.
func BenchmarkEngineStep(b *testing.B) {
	noop := tools.Func("noop", "does nothing", `{}`, func(context.Context, struct{}) (string, error) { return "ok", nil })
	reg, _ := tools.NewRegistry(noop)
	var e *Engine
	events := 0
	fresh := func() {
		if e != nil {
			events += e.opt.Sink.(*eventlog.Memory).Len()
			e.Close(context.Background())
		}
		var err error
		e, err = New(Options{Provider: &stepProvider{}, Tools: reg, IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }})
		if err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	msg := vocab.UserText("go")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%100 == 0 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		msg.ID = ""
		p, err := e.Submit(msg)
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Wait(ctx)
		if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
			b.Fatalf("%v %v", res, err)
		}
	}
	b.StopTimer()
	perStep := float64(b.Elapsed().Nanoseconds()) / float64(2*b.N)
	b.ReportMetric(perStep, "ns/step")
	events += e.opt.Sink.(*eventlog.Memory).Len()
	b.ReportMetric(float64(events)/float64(b.N), "events/turn")
	e.Close(context.Background())
}
