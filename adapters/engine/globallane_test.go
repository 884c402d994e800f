package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sync/atomic"
	"testing"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// holder is a session of the global lane tests: its model calls tool
// "hold" once, which reports its start on started and returns once
// release is closed; then the model answers.
type holder struct {
	h        *harness
	started  chan struct{}
	release  chan struct{}
	requests atomic.Int32
}

func newHolder(t *testing.T, lane *GlobalLane, name string) *holder {
	t.Helper()
	hd := &holder{started: make(chan struct{}, 1), release: make(chan struct{})}
	hold := toolFunc{name: "hold", run: func(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		hd.started <- struct{}{}
		select {
		case <-hd.release:
			return vocab.ToolResult{Content: "held"}, nil
		case <-ctx.Done():
			return vocab.ToolResult{}, context.Cause(ctx)
		}
	}}
	provider := providerFunc(func(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		hd.requests.Add(1)
		if last := req.Messages[len(req.Messages)-1]; last.Role == vocab.RoleTool {
			return answer("done")
		}
		return func(yield func(vocab.StreamPart, error) bool) {
			call := vocab.ToolCall{ID: name + "-c1", Name: "hold"}
			if yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &call}, nil) {
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
			}
		}
	})
	hd.h = start(t, Options{Session: vocab.ID(name), Provider: provider, Tools: mustRegistry(t, hold), Lane: lane, NoRunTimeout: true})
	return hd
}

// laneOps lists the session's lane decisions in order: "wait", "granted",
// "release".
func laneOps(evs []vocab.Event) []string {
	var ops []string
	for _, ev := range evs {
		switch p := ev.Payload.(type) {
		case vocab.LanePayload:
			ops = append(ops, p.Op)
		case vocab.Input:
			if p.Kind == vocab.InSlotGranted {
				ops = append(ops, "granted")
			}
		}
	}
	return ops
}

// foldsBack re-feeds the log's inputs to a fresh core and compares every
// derived event with the logged one, as `loopchart log verify` does.
func foldsBack(t *testing.T, evs []vocab.Event) {
	t.Helper()
	open, ok := evs[0].Payload.(vocab.Input)
	if !ok || open.Kind != vocab.InOpen {
		t.Fatalf("the log starts with %s", evs[0].Kind)
	}
	cfg, err := session.ConfigOf(open)
	if err != nil {
		t.Fatal(err)
	}
	core, err := session.New(cfg, session.NewMachines())
	if err != nil {
		t.Fatal(err)
	}
	var derived []vocab.Event
	for _, ev := range evs {
		in, ok := ev.Payload.(vocab.Input)
		if !ok {
			if p, stale := ev.Payload.(vocab.StalePayload); stale {
				in, ok = vocab.Input{Kind: p.Input, Work: p.Work, At: ev.At}, true
			}
		}
		if !ok {
			continue
		}
		if err := core.Step(in); err != nil {
			t.Fatalf("fold: input %d (%s): %v", ev.Seq, in.Kind, err)
		}
		rd, _ := core.Ready()
		derived = append(derived, rd.Events...)
		core.Advance(rd)
	}
	if len(derived) != len(evs) {
		t.Fatalf("the fold derived %d events, the log has %d", len(derived), len(evs))
	}
	for i := range evs {
		a, _ := json.Marshal(evs[i])
		b, _ := json.Marshal(derived[i])
		if string(a) != string(b) {
			t.Fatalf("event %d differs:\nlog  %s\nfold %s", evs[i].Seq, a, b)
		}
	}
}

// A lane of two slots runs two sessions at once; the third waits, its
// work deferred (its model is not even asked), and starts as soon as one
// of the two ends. Each session's lane decisions are in its log, which
// folds back.
func TestGlobalLaneCapsRunningSessions(t *testing.T) {
	ctx := testCtx(t)
	lane, err := NewGlobalLane(2)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newHolder(t, lane, "a"), newHolder(t, lane, "b"), newHolder(t, lane, "c")
	pa, pb := a.h.submit("go"), b.h.submit("go")
	<-a.started
	<-b.started
	if st := lane.Stats(); st.Held != 2 || st.Waiting != 0 {
		t.Fatalf("two running sessions: %+v", st)
	}
	pc := c.h.submit("go")
	if st := lane.Stats(); st.Held != 2 || st.Waiting != 1 {
		t.Fatalf("the third session: %+v, want it waiting", st)
	}
	if n := c.requests.Load(); n != 0 {
		t.Fatalf("the waiting session asked its model %d times", n)
	}
	if got := laneOps(c.h.log.Events()); fmt.Sprint(got) != "[wait]" {
		t.Fatalf("the waiting session's lane events %v", got)
	}
	close(a.release) // a answers and ends: its slot goes to c
	if res := a.h.wait(pa); res.Kind != vocab.PromptCompleted {
		t.Fatalf("a: %s", res)
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatalf("c never started after a ended: %+v", lane.Stats())
	}
	close(b.release)
	close(c.release)
	for _, x := range []struct {
		h *holder
		p *Pending
	}{{b, pb}, {c, pc}} {
		if res := x.h.h.wait(x.p); res.Kind != vocab.PromptCompleted {
			t.Fatalf("%s", res)
		}
	}
	for _, x := range []*holder{a, b, c} {
		if err := x.h.e.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lane.Wait()
	if st := lane.Stats(); st.Held != 0 || st.Waiting != 0 {
		t.Fatalf("after all ended: %+v", st)
	}
	for _, x := range []*holder{a, b, c} {
		evs := x.h.log.Events()
		if got := laneOps(evs); fmt.Sprint(got) != "[wait granted release]" {
			t.Errorf("%s: lane events %v", x.h.e.Session(), got)
		}
		foldsBack(t, evs)
	}
}

// A session that waits for a slot can be cancelled: its prompt ends
// cancelled at once (its deferred work never ran), its request leaves
// the line; closing a waiting session does the same.
func TestGlobalLaneCancelAndCloseWhileWaiting(t *testing.T) {
	lane, err := NewGlobalLane(1)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newHolder(t, lane, "a"), newHolder(t, lane, "b"), newHolder(t, lane, "c")
	pa := a.h.submit("go")
	<-a.started
	pb, pc := b.h.submit("go"), c.h.submit("go")
	if st := lane.Stats(); st.Waiting != 2 {
		t.Fatalf("%+v, want two waiting", st)
	}
	if err := b.h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, false); err != nil {
		t.Fatal(err)
	}
	if res := b.h.wait(pb); res.Kind != vocab.PromptCancelled {
		t.Fatalf("b: %s", res)
	}
	if got := laneOps(b.h.log.Events()); fmt.Sprint(got) != "[wait release]" {
		t.Fatalf("b's lane events %v", got)
	}
	ctx := testCtx(t)
	if err := c.h.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res := c.h.wait(pc); res.Kind != vocab.PromptCancelled {
		t.Fatalf("c: %s", res)
	}
	if st := lane.Stats(); st.Held != 1 || st.Waiting != 0 {
		t.Fatalf("after the cancel and the close: %+v, want a alone", st)
	}
	if b.requests.Load()+c.requests.Load() != 0 {
		t.Fatal("a session that never got a slot asked its model")
	}
	close(a.release)
	if res := a.h.wait(pa); res.Kind != vocab.PromptCompleted {
		t.Fatalf("a: %s", res)
	}
	foldsBack(t, b.h.log.Events())
	foldsBack(t, c.h.log.Events())
}

// A lane needs a slot.
func TestGlobalLaneValidates(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := NewGlobalLane(n); !isCode(err, vocab.CodeBadInput) {
			t.Errorf("NewGlobalLane(%d): %v", n, err)
		}
	}
}

// A closed lane grants nothing more: a slot given back after Close stays
// free, and a session that asks waits.
func TestGlobalLaneClose(t *testing.T) {
	l, err := NewGlobalLane(1)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := &Engine{}, &Engine{}, &Engine{}
	if !l.request(a, 1) {
		t.Fatal("the first request was not granted at once")
	}
	if l.request(b, 1) {
		t.Fatal("a second request was granted with one slot")
	}
	l.Close()
	l.release(a, 1) // would grant b's slot, were the lane open
	l.Wait()
	if st := l.Stats(); st.Held != 0 || st.Waiting != 1 {
		t.Fatalf("after Close and a release: %+v, want nothing held and b waiting", st)
	}
	if l.request(c, 1) {
		t.Fatal("a request after Close was granted")
	}
}
