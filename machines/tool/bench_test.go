package tool_test

import (
	"context"
	"testing"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/vocab"
)

// The benchmarks come in pairs: BenchmarkToolTransition drives the tool
// machine, BenchmarkToolBareStateless drives a bare qmuntal/stateless
// machine of the same shape (same states and substates, the same guarded
// transitions, entry actions, FiringImmediate, int states in external
// storage) through the same transitions. Sub-benchmarks:
//
//	internal   one internal transition: exec.update while running
//	proceed    reset to before, then before.proceed (enters executing.running)
//	lifecycle  reset, then before.proceed, exec.done, after.done[resultOK]

var (
	evProceed = chart.Event(tool.BeforeProceed{})
	evUpdate  = chart.Event(tool.ExecUpdate{Text: "50%"})
	evDone    = chart.Event(tool.ExecDone{Result: &vocab.ToolResult{Content: "ok"}})
	evAfter   = chart.Event(tool.AfterDone{Result: &vocab.ToolResult{Content: "ok"}})
)

func BenchmarkToolTransition(b *testing.B) {
	m := tool.New()
	base := tool.NewCtx(vocab.ToolCall{ID: "c1", Name: "read"}, tool.Config{})
	out := chart.Out{Effects: make([]chart.Effect, 0, 8), Transitions: make([]chart.Record, 0, 8)}
	fire := func(b *testing.B, inst *tool.Instance, ev chart.Event) {
		if err := m.Fire(inst, ev, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("internal", func(b *testing.B) {
		inst := m.New(base, &out)
		fire(b, inst, evProceed)
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			fire(b, inst, evUpdate)
		}
	})
	b.Run("proceed", func(b *testing.B) {
		inst := m.New(base, &out)
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			inst.Ctx = base
			m.Start(inst, &out)
			fire(b, inst, evProceed)
		}
	})
	b.Run("lifecycle", func(b *testing.B) {
		inst := m.New(base, &out)
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			inst.Ctx = base
			m.Start(inst, &out)
			fire(b, inst, evProceed)
			fire(b, inst, evDone)
			fire(b, inst, evAfter)
		}
		if inst.State() != tool.Succeeded {
			b.Fatalf("ended in %s", inst.State())
		}
	})
}

// Bare states and triggers: small ints, so boxing them allocates nothing.
const (
	bBefore = iota + 1
	bAwaiting
	bExecuting
	bRunning
	bAborting
	bAfter
	bDetached
	bSucceeded
	bFailed
	bAborted
)

const (
	tProceed = iota + 1
	tDeny
	tAsk
	tBeforeFailed
	tApprove
	tReject
	tStarted
	tUpdate
	tDone
	tExecFailed
	tDetached
	tAbort
	tTimer
	tAfterDone
	tAfterFailed
)

// bare is the tool machine's shape on a bare stateless machine.
type bare struct {
	sm                 *stateless.StateMachine
	state              int
	started, resultOK  bool
	timerSeq, firedSeq uint64
	entries, actions   int
}

func newBare() *bare {
	x := &bare{state: bBefore}
	sm := stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return x.state, nil },
		func(_ context.Context, s stateless.State) error { x.state = s.(int); return nil },
		stateless.FiringImmediate)
	entry := func(context.Context, ...any) error { x.entries++; return nil }
	act := func(context.Context, ...any) error { x.actions++; return nil }
	notStarted := func(context.Context, ...any) bool { return !x.started }
	started := func(context.Context, ...any) bool { return x.started }
	ok := func(context.Context, ...any) bool { return x.resultOK }
	notOK := func(context.Context, ...any) bool { return !x.resultOK }
	grace := func(context.Context, ...any) bool { return x.timerSeq != 0 && x.firedSeq == x.timerSeq }

	sm.Configure(bBefore).OnEntry(entry).
		Permit(tProceed, bExecuting).Permit(tDeny, bAfter).Permit(tAsk, bAwaiting).
		Permit(tBeforeFailed, bFailed).Permit(tAbort, bAborted)
	sm.Configure(bAwaiting).OnEntry(entry).
		Permit(tApprove, bExecuting).Permit(tReject, bAfter).Permit(tAbort, bAborted)
	sm.Configure(bExecuting).OnEntry(entry).InitialTransition(bRunning).
		InternalTransition(tUpdate, act)
	sm.Configure(bRunning).SubstateOf(bExecuting).
		InternalTransition(tStarted, act).
		Permit(tDone, bAfter).Permit(tExecFailed, bFailed).Permit(tDetached, bDetached).
		Permit(tAbort, bAborted, notStarted).Permit(tAbort, bAborting, started)
	sm.Configure(bAborting).SubstateOf(bExecuting).
		Permit(tDone, bAfter).Permit(tExecFailed, bAborted).Permit(tTimer, bAborted, grace).
		Permit(tAbort, bAborted)
	sm.Configure(bAfter).OnEntry(entry).
		Permit(tAfterDone, bSucceeded, ok).Permit(tAfterDone, bFailed, notOK).Permit(tAfterFailed, bFailed)
	sm.Configure(bDetached).OnEntry(entry).
		Permit(tDone, bSucceeded, ok).Permit(tDone, bFailed, notOK).
		Permit(tExecFailed, bFailed).Permit(tAbort, bAborted)
	for _, s := range []int{bSucceeded, bFailed, bAborted} {
		sm.Configure(s).OnEntry(entry)
	}
	x.sm = sm
	return x
}

func (x *bare) fire(b *testing.B, t int) {
	if err := x.sm.Fire(t); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkToolBareStateless(b *testing.B) {
	x := newBare()
	x.resultOK = true
	b.Run("internal", func(b *testing.B) {
		x.state = bBefore
		x.fire(b, tProceed)
		b.ReportAllocs()
		for b.Loop() {
			x.fire(b, tUpdate)
		}
	})
	b.Run("proceed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			x.state = bBefore
			x.entries++ // the initial entry, as Start runs it
			x.fire(b, tProceed)
		}
	})
	b.Run("lifecycle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			x.state = bBefore
			x.entries++
			x.fire(b, tProceed)
			x.fire(b, tDone)
			x.fire(b, tAfterDone)
		}
		if x.state != bSucceeded {
			b.Fatalf("ended in %d", x.state)
		}
	})
}
