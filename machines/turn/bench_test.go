package turn_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// stepEvents are the four events of one full step with one tool call:
// gating → thinking → acting → draining → gating.
func stepEvents() []chart.Event {
	reply := vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartToolCall,
		Call: &vocab.ToolCall{ID: "c1", Name: "noop", Args: json.RawMessage(`{}`)}}}}
	return []chart.Event{
		turn.GateProceed{Claimed: 1},
		turn.ModelDone{Reply: &reply, Finish: vocab.FinishToolCalls},
		turn.ToolOutcome{Result: &vocab.ToolResult{CallID: "c1", Content: "ok"}},
		turn.Drained{},
	}
}

// BenchmarkTurnTransition drives one turn through full steps and reports
// the cost per transition (4 transitions per step).
func BenchmarkTurnTransition(b *testing.B) {
	m := turn.New()
	var out chart.Out
	inst := m.New(turn.NewCtx(turn.Config{Turn: 1}), &out)
	evs := stepEvents()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		out.Reset()
		if err := m.Fire(inst, evs[i%4], &out); err != nil {
			b.Fatal(err)
		}
	}
}

// Bare stateless floor: the same shape (open ⊃ {gating, thinking, acting ⊃
// {running}, draining}), one guard per transition, entry callbacks on the
// same states, FiringImmediate, int states and triggers.
const (
	sOpen = iota
	sGating
	sThinking
	sActing
	sRunning
	sDraining
)

const (
	tProceed = iota
	tDone
	tOutcome
	tDrained
)

func bareTurn() *stateless.StateMachine {
	state := stateless.State(sGating)
	sm := stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return state, nil },
		func(_ context.Context, s stateless.State) error { state = s; return nil },
		stateless.FiringImmediate)
	n := 0
	guard := func(context.Context, ...any) bool { return n >= 0 }
	entry := func(context.Context, ...any) error { n++; return nil }
	sm.Configure(sOpen).InitialTransition(sGating)
	sm.Configure(sGating).SubstateOf(sOpen).OnEntry(entry).Permit(tProceed, sThinking, guard)
	sm.Configure(sThinking).SubstateOf(sOpen).OnEntry(entry).Permit(tDone, sActing, guard)
	sm.Configure(sActing).SubstateOf(sOpen).InitialTransition(sRunning)
	sm.Configure(sRunning).SubstateOf(sActing).Permit(tOutcome, sDraining, guard)
	sm.Configure(sDraining).SubstateOf(sOpen).OnEntry(entry).Permit(tDrained, sGating, guard)
	return sm
}

// BenchmarkTurnBareStateless is the floor for BenchmarkTurnTransition.
func BenchmarkTurnBareStateless(b *testing.B) {
	sm := bareTurn()
	trig := []stateless.Trigger{tProceed, tDone, tOutcome, tDrained}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := sm.FireCtx(ctx, trig[i%4]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTurnNewAndStep creates a fresh turn instance and drives it
// through one full step (gating → thinking → acting → draining → gating).
func BenchmarkTurnNewAndStep(b *testing.B) {
	m := turn.New()
	var out chart.Out
	evs := stepEvents()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out.Reset()
		inst := m.New(turn.NewCtx(turn.Config{Turn: 1}), &out)
		for _, ev := range evs {
			if err := m.Fire(inst, ev, &out); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkStatelessConfigureTurnSize configures a stateless machine the
// size of the turn machine: what a naive engine would pay per turn.
func BenchmarkStatelessConfigureTurnSize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sm := stateless.NewStateMachineWithMode(stateless.State(1), stateless.FiringImmediate)
		g := func(context.Context, ...any) bool { return true }
		for s := 0; s < 11; s++ {
			c := sm.Configure(s)
			if s > 0 && s < 8 {
				c.SubstateOf(0)
			}
			c.OnEntry(func(context.Context, ...any) error { return nil })
			c.Permit(100+s, (s+1)%11, g)
			c.Permit(200+s, (s+2)%11, g)
			c.Permit(300+s, (s+3)%11, g)
		}
	}
}

// BenchmarkBuildTurn builds the whole turn machine kind (done once per
// lane, never per turn).
func BenchmarkBuildTurn(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = turn.New()
	}
}
