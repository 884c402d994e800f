package otelchart_test

import (
	"context"
	"iter"
	"testing"

	otelchart "github.com/loopchart/loopchart/adapters/otel"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// gateTool blocks until released (or cancelled), saying when it starts.
type gateTool struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "gate"} }
func (g *gateTool) Run(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return vocab.ToolResult{Content: "released"}, nil
}

func openStore(t *testing.T, st store.Store, script string, tools []vocab.Tool) *agentsvc.Service {
	t.Helper()
	s, err := scripted.Parse([]byte(script), "test")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	svc, err := agentsvc.Open(ctxT(t), st, "s1", agentsvc.Options{Provider: &responder{inner: scripted.New(s, clk)}, Clock: clk,
		Tools: tools, Model: "claude-test", IDs: &vocab.SeqSource{}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// A session whose writer died while a tool ran, reopened by another: the
// log's recovery events end the spans the crash left open (the call, the
// step and the turn interrupted, the prompt cancelled), and the prompt
// queued before the crash runs after the reopen, its invoke_agent span
// covering both writers. The observer reads the durable store.
func TestSessionReopenedAfterACrash(t *testing.T) {
	ctx := ctxT(t)
	st := memory.New()
	gate := &gateTool{started: make(chan struct{}, 1), release: make(chan struct{})}
	first := openStore(t, st, `{"steps": [{"tool_calls": [{"id": "c1", "name": "gate", "args": {}}]}]}`, []vocab.Tool{gate})
	if _, err := first.SubmitText("run the gate"); err != nil {
		t.Fatal(err)
	}
	<-gate.started
	if _, err := first.SubmitText("and then this"); err != nil {
		t.Fatal(err)
	}
	second := openStore(t, st, `{"steps": [{"parts": [{"text": "done"}]}]}`, nil) // takes the session over
	close(gate.release)
	first.Close(ctx) // fenced out: its late events never reach the log
	if err := second.Continue(); err != nil {
		t.Fatal(err)
	}
	if err := second.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}

	tel := newTelemetry()
	o, err := otelchart.New(tel.options(otelchart.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	fromStore := func(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
		return store.Events(ctx, st, "s1", from)
	}
	if err := o.Observe(ctx, fromStore); err != nil {
		t.Fatal(err)
	}
	golden(t, "reopen.tree", tree(tel.spans(), false))
}
