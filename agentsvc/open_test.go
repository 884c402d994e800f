package agentsvc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// gateTool blocks until released (or cancelled), reporting when it starts.
type gateTool struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "gate"} }
func (g *gateTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return vocab.ToolResult{Content: "released"}, nil
}

func openWith(t *testing.T, st store.Store, id vocab.ID, script string, tools []vocab.Tool, every int) (*agentsvc.Service, error) {
	t.Helper()
	s, err := scripted.Parse([]byte(script), "test")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return agentsvc.Open(context.Background(), st, id, agentsvc.Options{Provider: scripted.New(s, clk), Clock: clk,
		Tools: tools, CheckpointEvery: every, Model: "m"})
}

// A writer that stops while a tool runs (its process died: nothing of it
// runs on) is taken over by a second Open: the fold recovers the turn with
// interrupted events, the old writer is fenced out, the log verifies, and
// Continue runs the queued prompt to a normal end.
func TestOpenTakesOverAndRecovers(t *testing.T) {
	ctx := ctx5(t)
	st := memory.New()
	gate := &gateTool{started: make(chan struct{}, 1), release: make(chan struct{})}
	first, err := openWith(t, st, "s1", `{"steps": [{"tool_calls": [{"id": "c1", "name": "gate", "args": {}}]}]}`, []vocab.Tool{gate}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Submit(vocab.UserText("run the gate")); err != nil {
		t.Fatal(err)
	}
	<-gate.started
	if _, err := first.Submit(vocab.UserText("and then this")); err != nil {
		t.Fatal(err)
	}

	second, err := openWith(t, st, "s1", `{"steps": [{"parts": [{"text": "done"}]}]}`, nil, 0)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer second.Close(ctx)
	// The first writer's tool finishes now: its result must not reach the
	// log, whose claim it lost.
	close(gate.release)
	if err := first.Close(ctx); !errors.Is(err, agentsvc.ErrAppendFailed) && !errors.Is(err, store.ErrClaimLost) {
		t.Errorf("the fenced writer's Close: %v, want its append refused", err)
	}

	var result, stepEnd, turnEnd bool
	for ev, err := range store.Events(ctx, st, "s1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		switch p := ev.Payload.(type) {
		case vocab.ToolPayload:
			if ev.Kind == vocab.EventToolResult {
				if result || p.Result.Content != vocab.InterruptedToolText {
					t.Errorf("tool/result %q (second: %v)", p.Result.Content, result)
				}
				result = true
			}
		case vocab.StepEndPayload:
			stepEnd = stepEnd || p.Finish == vocab.FinishInterrupted
		case vocab.TurnEndPayload:
			turnEnd = turnEnd || p.Reason.Kind == vocab.EndInterrupted
		}
	}
	if !result || !stepEnd || !turnEnd {
		t.Fatalf("recovery events: tool result %v, step/end interrupted %v, turn/end interrupted %v", result, stepEnd, turnEnd)
	}
	if _, err := store.Verify(ctx, st, "s1"); err != nil {
		t.Fatalf("verify after recovery: %v", err)
	}
	if err := second.Continue(); err != nil {
		t.Fatal(err)
	}
	if err := second.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := second.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := h.At(h.Len() - 1)
	if last.Text() != "done" {
		t.Errorf("after Continue the history ends with %q, want the queued prompt answered", last.Text())
	}
	if _, err := store.Verify(ctx, st, "s1"); err != nil {
		t.Fatalf("verify at the end: %v", err)
	}
}

// With checkpoints, a reopen folds from the last snapshot and the tail
// after it, and the whole log still verifies from its first event.
func TestOpenFoldsFromCheckpoints(t *testing.T) {
	ctx := ctx5(t)
	st := memory.New()
	script := `{"steps": [{"parts": [{"text": "a"}]}, {"parts": [{"text": "b"}]}, {"parts": [{"text": "c"}]}, {"parts": [{"text": "d"}]}]}`
	svc, err := openWith(t, st, "s2", script, nil, 15)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"one", "two", "three"} {
		p, err := svc.Submit(vocab.UserText(text))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := p.Wait(ctx); err != nil || r.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %q: %v %v", text, r, err)
		}
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := store.Fold(ctx, st, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if f.Snapshot == 0 || f.Events >= int(f.Head) {
		t.Errorf("fold read %d of %d events from snapshot %d: want it to start at a snapshot", f.Events, f.Head, f.Snapshot)
	}
	if _, err := store.Verify(ctx, st, "s2"); err != nil {
		t.Fatal(err)
	}
	// The closed session reopens closed.
	if _, err := openWith(t, st, "s2", script, nil, 15); !errors.Is(err, agentsvc.ErrClosed) {
		t.Errorf("reopening a closed session: %v, want %s", err, vocab.CodeClosed)
	}
}

// A missing session is created; a log that does not fold is an error,
// never a blank session.
func TestOpenRefusesADamagedLog(t *testing.T) {
	ctx := ctx5(t)
	st := memory.New()
	claim, _, err := st.Claim(ctx, "bad", "w", true)
	if err != nil {
		t.Fatal(err)
	}
	ev := vocab.Event{Session: "bad", Seq: 1, At: time.Unix(1, 0), Kind: vocab.EventTurnStart}
	if err := st.Append(ctx, "bad", claim, []vocab.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, "bad", claim); err != nil {
		t.Fatal(err)
	}
	_, err = openWith(t, st, "bad", `{"steps": [{"parts": [{"text": "x"}]}]}`, nil, 0)
	if !errors.Is(err, store.ErrLoad) {
		t.Fatalf("Open of a log that does not start with an open input: %v, want %s", err, vocab.CodeLoadFailed)
	}
	if _, err := store.Fold(ctx, st, "missing"); !errors.Is(err, store.ErrNoSession) {
		t.Errorf("Fold of a missing session: %v, want %s", err, vocab.CodeNoSession)
	}
}
