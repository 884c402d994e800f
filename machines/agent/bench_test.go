package agent_test

import (
	"context"
	"testing"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// The benchmarks come in pairs: BenchmarkAgentTransition drives the agent
// machine, BenchmarkAgentBareStateless drives a bare qmuntal/stateless
// machine of the same shape (the same states, substates and initial
// substates, guarded transitions resolved through a superstate, entry
// actions, FiringImmediate, int states in external storage) through the
// same transitions. Each op is one transition; sub-benchmarks:
//
//	internal  a running agent alternates steer (queued on next-step) and
//	          drain (claimed): two internal transitions
//	cycle     an idle agent alternates submit (ready → running.active:
//	          claim and start a turn, status flip) and turn.ended
//	          (active → ready, status flip)

var (
	evSubmit = chart.Event(agent.Submit{Message: vocab.Message{ID: "p1", Role: vocab.RoleUser, Source: vocab.SourceInput,
		Parts: []vocab.Part{{Kind: vocab.PartText, Text: "hello"}}}})
	evSteer = chart.Event(agent.Steer{Message: vocab.Message{ID: "s1", Role: vocab.RoleUser, Source: vocab.SourceSteer,
		Parts: []vocab.Part{{Kind: vocab.PartText, Text: "use tabs"}}}})
	evDrain = chart.Event(agent.Drain{})
	evEnded = chart.Event(agent.TurnEnded{End: vocab.TurnEnd{Kind: vocab.EndCompleted}})
)

func BenchmarkAgentTransition(b *testing.B) {
	m := agent.New()
	out := chart.Out{Effects: make([]chart.Effect, 0, 8), Transitions: make([]chart.Record, 0, 8)}
	fire := func(b *testing.B, inst *agent.Instance, ev chart.Event) {
		if err := m.Fire(inst, ev, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("internal", func(b *testing.B) {
		inst := m.New(agent.NewCtx(agent.Config{}), &out)
		fire(b, inst, evSubmit)
		evs := [2]chart.Event{evSteer, evDrain}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			fire(b, inst, evs[i&1])
			i++
		}
		if inst.State() != agent.Active {
			b.Fatalf("ended in %s", inst.State())
		}
	})
	b.Run("cycle", func(b *testing.B) {
		inst := m.New(agent.NewCtx(agent.Config{}), &out)
		evs := [2]chart.Event{evSubmit, evEnded}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			fire(b, inst, evs[i&1])
			i++
		}
		if s := inst.State(); s != agent.Ready && s != agent.Active {
			b.Fatalf("ended in %s", s)
		}
	})
}

// Bare states and triggers: small ints, so boxing them allocates nothing.
const (
	bIdle = iota + 1
	bReady
	bWaiting
	bGating
	bMaintenance
	bRunning
	bActive
	bAborting
	bClosing
	bDisposed
)

const (
	tSubmit = iota + 1
	tSteer
	tDrain
	tTurnEnded
	tCancel
	tClose
	tClosed
	tMaintenanceStart
	tMaintenanceDone
)

// bare is the agent machine's shape on a bare stateless machine, with a
// context of counters standing in for the inbox.
type bare struct {
	sm                       *stateless.StateMachine
	state                    int
	nextTurn, nextStep, bg   int
	gate, paused             bool
	turn, entries, claimed   int
	statusFlips, lastStatus  int
	inserted, drainedClaimed int
}

// next is the bare rest decision: 1 gating, 2 running, 3 waiting, 4 ready.
func (x *bare) next() int {
	switch {
	case x.paused:
		if x.bg > 0 {
			return 3
		}
		return 4
	case x.gate && x.nextTurn > 0:
		return 1
	case x.nextTurn+x.nextStep > 0:
		return 2
	case x.bg > 0:
		return 3
	}
	return 4
}

func newBare() *bare {
	x := &bare{state: bReady}
	sm := stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return x.state, nil },
		func(_ context.Context, s stateless.State) error { x.state = s.(int); return nil },
		stateless.FiringImmediate)
	status := func(s int) {
		if x.lastStatus != s {
			x.lastStatus = s
			x.statusFlips++
		}
	}
	enterIdle := func(context.Context, ...any) error { x.entries++; status(0); return nil }
	enterRunning := func(context.Context, ...any) error {
		x.entries++
		status(1)
		x.claimed += x.nextStep + min(x.nextTurn, 1)
		x.nextStep, x.nextTurn = 0, max(x.nextTurn-1, 0)
		x.turn++
		return nil
	}
	queueTurn := func(context.Context, ...any) error { x.nextTurn++; x.inserted++; return nil }
	queueStep := func(context.Context, ...any) error { x.nextStep++; x.inserted++; return nil }
	drain := func(context.Context, ...any) error { x.drainedClaimed += x.nextStep; x.nextStep = 0; return nil }
	// Guards preview the event like the agent's decide: a submit adds a
	// prompt, so the decision is taken as if it had.
	submitGate := func(context.Context, ...any) bool { return !x.paused && x.gate }
	submitStart := func(context.Context, ...any) bool { return !x.paused && !x.gate }
	submitStay := func(context.Context, ...any) bool { return x.paused }
	endedGate := func(context.Context, ...any) bool { return x.next() == 1 }
	endedStart := func(context.Context, ...any) bool { return x.next() == 2 }
	endedWait := func(context.Context, ...any) bool { return x.next() == 3 }
	endedRest := func(context.Context, ...any) bool { return x.next() == 4 }
	fresh := func(context.Context, ...any) bool { return x.inserted >= 0 }

	sm.Configure(bIdle).OnEntry(enterIdle).InitialTransition(bReady).
		Permit(tSubmit, bRunning, submitStart).InternalTransition(tSubmit, queueTurn, submitStay).
		Permit(tClose, bClosing)
	sm.Configure(bReady).SubstateOf(bIdle).
		Permit(tSubmit, bGating, submitGate).Permit(tMaintenanceStart, bMaintenance)
	sm.Configure(bWaiting).SubstateOf(bIdle).
		Permit(tSubmit, bGating, submitGate)
	sm.Configure(bGating).SubstateOf(bIdle).OnEntry(enterIdle).
		InternalTransition(tSubmit, queueTurn, fresh)
	sm.Configure(bMaintenance).OnEntry(enterIdle).
		InternalTransition(tSubmit, queueTurn, fresh).
		Permit(tMaintenanceDone, bReady).Permit(tClose, bClosing)
	sm.Configure(bRunning).OnEntry(enterRunning).InitialTransition(bActive).
		Permit(tTurnEnded, bGating, endedGate).PermitReentry(tTurnEnded, endedStart).
		Permit(tTurnEnded, bWaiting, endedWait).Permit(tTurnEnded, bReady, endedRest)
	sm.Configure(bActive).SubstateOf(bRunning).
		InternalTransition(tSubmit, queueTurn, fresh).InternalTransition(tSteer, queueStep, fresh).
		InternalTransition(tDrain, drain).
		Permit(tCancel, bAborting).Permit(tClose, bClosing)
	sm.Configure(bAborting).SubstateOf(bRunning).
		InternalTransition(tSubmit, queueTurn, fresh).Permit(tClose, bClosing)
	sm.Configure(bClosing).OnEntry(enterIdle).Permit(tClosed, bDisposed)
	sm.Configure(bDisposed).OnEntry(enterIdle)
	// Every transition above runs through the submit action; a submit's
	// transition from ready needs it too.
	sm.OnTransitioning(func(_ context.Context, t stateless.Transition) {
		if t.Trigger == tSubmit && t.Destination != t.Source {
			x.nextTurn++
			x.inserted++
		}
	})
	x.sm = sm
	return x
}

func (x *bare) fire(b *testing.B, t int) {
	if err := x.sm.Fire(t); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkAgentBareStateless(b *testing.B) {
	b.Run("internal", func(b *testing.B) {
		x := newBare()
		x.fire(b, tSubmit)
		trs := [2]int{tSteer, tDrain}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			x.fire(b, trs[i&1])
			i++
		}
		if x.state != bActive {
			b.Fatalf("ended in %d", x.state)
		}
	})
	b.Run("cycle", func(b *testing.B) {
		x := newBare()
		trs := [2]int{tSubmit, tTurnEnded}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			x.fire(b, trs[i&1])
			i++
		}
		if x.state != bReady && x.state != bActive {
			b.Fatalf("ended in %d", x.state)
		}
	})
}
