package engine

import (
	"context"
	"iter"
	"testing"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/vocab"
)

// TestUnloadAndResume: Unload refuses a session that does not rest and
// stops one that does; every later call fails with an error IsUnloaded
// matches. A lane resumed on the folded core with the same configuration
// logs nothing; with another configuration it reopens (an open input).
func TestUnloadAndResume(t *testing.T) {
	ctx := testCtx(t)
	clk := clock.NewFake(epoch)
	st := memory.New()
	gate := make(chan struct{})
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		if req.Messages[len(req.Messages)-1].Text() == "wait" {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return answer("ok")
	})
	lane := func(system string, resume *Resume) *Engine {
		t.Helper()
		claim, head, err := st.Claim(ctx, "u", "run", true)
		if err != nil {
			t.Fatal(err)
		}
		opt := Options{Session: "u", Provider: prov, Clock: clk, Sink: store.NewLog(st, "u", claim), System: system, NoRunTimeout: true}
		if head > 0 {
			f, err := store.Fold(ctx, st, "u")
			if err != nil {
				t.Fatal(err)
			}
			opt.Core, opt.Resume = f.Core, resume
		}
		e, err := New(opt)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	count := func() uint64 {
		var n uint64
		for _, err := range st.Read(ctx, "u", 0) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}

	e := lane("", nil)
	p, err := e.Submit(vocab.UserText("wait"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Unload(); ok {
		t.Fatal("Unload of a session whose turn runs succeeded")
	}
	if _, ok := e.Resting(); ok {
		t.Fatal("a running session rests")
	}
	close(gate)
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v %v", res, err)
	}
	if err := e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Resting(); !ok {
		t.Fatal("an idle session does not rest")
	}
	r, ok := e.Unload()
	if !ok {
		t.Fatal("Unload of a resting session failed")
	}
	if !e.Stopped() || !e.Unloaded() {
		t.Fatal("an unloaded lane is not stopped and unloaded")
	}
	if _, err := e.Submit(vocab.UserText("late")); !IsUnloaded(err) {
		t.Fatalf("Submit after Unload: %v, want the unloaded error", err)
	}
	if _, err := e.History(ctx); !IsUnloaded(err) {
		t.Fatalf("History after Unload: %v, want the unloaded error", err)
	}
	logged := count()
	if r.Seq != logged {
		t.Fatalf("Resume.Seq %d, the log has %d events", r.Seq, logged)
	}

	e = lane("", &r)
	if n := count(); n != logged {
		t.Fatalf("resuming logged %d events", n-logged)
	}
	var seen uint64
	sctx, stop := context.WithCancel(ctx)
	for ev, err := range e.Events(sctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if ev.Seq != seen {
			t.Fatalf("replay after resume: seq %d at %d", ev.Seq, seen)
		}
		if seen == logged {
			break
		}
	}
	stop()
	p, err = e.Submit(vocab.UserText("again"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v %v", res, err)
	}
	if err := e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	r, ok = e.Unload()
	if !ok {
		t.Fatal("second Unload failed")
	}
	logged = count()

	e = lane("another system prompt", &r)
	first := true
	for rec, err := range st.Read(ctx, "u", logged+1) {
		if err != nil {
			t.Fatal(err)
		}
		if first && rec.Kind != vocab.EventKind("input/"+string(vocab.InOpen)) {
			t.Fatalf("a changed configuration resumed without an open input: %s", rec.Kind)
		}
		first = false
	}
	if first {
		t.Fatal("a changed configuration logged nothing")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
