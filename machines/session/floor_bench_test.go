package session_test

import (
	"context"
	"testing"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// bareMachine is a chart definition configured on a bare stateless
// machine, the way a user of stateless alone would: the same states and
// superstates with their initial substates, an entry (and exit) callback
// where the chart has an entry (exit) action, and each transition of the
// definition a Permit (a PermitReentry when it re-enters its state, an
// InternalTransition when it is internal) with a guard callback where the
// chart has a guard. Each transition has a trigger of its own, so
// stateless never has to choose between two.
//
// A lean bareMachine is the cheapest way to drive the same transitions on
// stateless, the way chart itself drives it: states and triggers are
// pointers (cheap to hash and compare, where names are strings and
// indexes go through the generic hash); entry and exit callbacks run from
// the machine's one OnTransitioning and one OnTransitioned callback
// (stateless wraps the context of every OnEntry and OnExit call in a
// context.WithValue carrying the transition, two allocations per action,
// which the per-machine callbacks do not pay); stateless sees the leaves
// only, each transition declared on every leaf under its source, to the
// leaf its target's initial substates lead to (no superstate walks, no
// initial transitions); an internal transition is an Ignore whose action
// the caller runs.
type bareMachine struct {
	sm    *stateless.StateMachine
	state stateless.State
	// initial is the leaf an instance starts in (the chart's Start).
	initial stateless.State
	// names are the states' names, by key (lean machines).
	names map[stateless.State]string
	// trigs are the stateless triggers of the definition's transitions,
	// internal says which are internal.
	trigs    []stateless.Trigger
	internal []bool
	// actions counts the actions run (entry, exit, transition).
	actions int
}

// bareTrigger is a lean machine's trigger key.
type bareTrigger struct{ idx int }

// fire fires definition transition idx on m. A lean machine runs an
// internal transition's action itself, as chart does (stateless ignores
// the trigger).
func (m *bareMachine) fire(ctx context.Context, idx int) error {
	if err := m.sm.FireCtx(ctx, m.trigs[idx]); err != nil {
		return err
	}
	if m.names != nil && m.internal[idx] {
		m.actions++
	}
	return nil
}

// bareState is a lean machine's state key: its name and whether the
// chart's state has an entry and an exit action.
type bareState struct {
	name        string
	entry, exit bool
}

// name returns the name of state s.
func (m *bareMachine) name(s stateless.State) string {
	if m.names != nil {
		return m.names[s]
	}
	return s.(string)
}

func newBareMachine[C any](def *chart.Def[C], lean bool) *bareMachine {
	m := &bareMachine{}
	m.sm = stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return m.state, nil },
		func(_ context.Context, s stateless.State) error { m.state = s; return nil },
		stateless.FiringImmediate)
	guard := func(context.Context, ...any) bool { return m.actions >= 0 }
	action := func(context.Context, ...any) error { m.actions++; return nil }
	key := func(s chart.State) stateless.State { return string(s) }
	for i, t := range def.Transitions {
		m.internal = append(m.internal, t.To == "")
		if lean {
			m.trigs = append(m.trigs, &bareTrigger{idx: i})
		} else {
			m.trigs = append(m.trigs, i)
		}
	}
	if lean {
		keys := map[chart.State]stateless.State{}
		m.names = map[stateless.State]string{}
		for _, st := range def.States {
			k := &bareState{name: string(st.Name), entry: st.Entry != nil, exit: st.Exit != nil}
			keys[st.Name], m.names[k] = k, k.name
		}
		key = func(s chart.State) stateless.State { return keys[s] }
		m.sm.OnTransitioning(func(_ context.Context, t stateless.Transition) {
			if t.Source.(*bareState).exit {
				m.actions++
			}
		})
		m.sm.OnTransitioned(func(_ context.Context, t stateless.Transition) {
			if t.Destination.(*bareState).entry {
				m.actions++
			}
		})
		flat(m, def, key, guard)
	} else {
		nested(m, def, key, guard, action)
	}
	// The leaf an instance starts in: the initial state, then its initial
	// substates.
	m.initial = key(leafOf(def, def.Initial))
	return m
}

// nested configures m as a user of stateless would: states with their
// superstates and initial substates, entry and exit actions, each
// transition on its source state.
func nested[C any](m *bareMachine, def *chart.Def[C], key func(chart.State) stateless.State, guard stateless.GuardFunc, action stateless.ActionFunc) {
	for _, st := range def.States {
		sc := m.sm.Configure(key(st.Name))
		if st.Parent != "" {
			sc.SubstateOf(key(st.Parent))
		}
		if st.Initial != "" {
			sc.InitialTransition(key(st.Initial))
		}
		if st.Entry != nil {
			sc.OnEntry(action)
		}
		if st.Exit != nil {
			sc.OnExit(action)
		}
	}
	for i, t := range def.Transitions {
		sc := m.sm.Configure(key(t.From))
		var guards []stateless.GuardFunc
		if t.Guard != nil {
			guards = append(guards, guard)
		}
		switch {
		case t.To == "":
			sc.InternalTransition(m.trigs[i], action, guards...)
		case t.To == t.From:
			sc.PermitReentry(m.trigs[i], guards...)
		default:
			sc.Permit(m.trigs[i], key(t.To), guards...)
		}
	}
}

// flat configures m as chart does: the leaves only, each transition on
// every leaf under its source, to the leaf its target leads to.
func flat[C any](m *bareMachine, def *chart.Def[C], key func(chart.State) stateless.State, guard stateless.GuardFunc) {
	parent := map[chart.State]chart.State{}
	for _, st := range def.States {
		parent[st.Name] = st.Parent
		m.sm.Configure(key(st.Name))
	}
	under := func(s, a chart.State) bool {
		for ; s != ""; s = parent[s] {
			if s == a {
				return true
			}
		}
		return false
	}
	for i, t := range def.Transitions {
		var guards []stateless.GuardFunc
		if t.Guard != nil {
			guards = append(guards, guard)
		}
		to := leafOf(def, t.To)
		for _, st := range def.States {
			if st.Initial != "" || !under(st.Name, t.From) {
				continue
			}
			sc := m.sm.Configure(key(st.Name))
			switch {
			case t.To == "":
				sc.Ignore(m.trigs[i], guards...)
			case to == st.Name:
				sc.PermitReentry(m.trigs[i], guards...)
			default:
				sc.Permit(m.trigs[i], key(to), guards...)
			}
		}
	}
}

// leafOf returns the leaf entering state s ends in: s, or the leaf its
// initial substates lead to.
func leafOf[C any](def *chart.Def[C], s chart.State) chart.State {
	for {
		next := chart.State("")
		for _, st := range def.States {
			if st.Name == s {
				next = st.Initial
			}
		}
		if next == "" {
			return s
		}
		s = next
	}
}

// bareIndex finds the definition transition a logged transition took, as
// the chart resolves it: from the leaf up through its superstates, the
// transition on the trigger whose guard is the one logged.
func bareIndex[C any](def *chart.Def[C], p vocab.TransitionPayload) int {
	parent := map[chart.State]chart.State{}
	for _, st := range def.States {
		parent[st.Name] = st.Parent
	}
	for s := chart.State(p.From); s != ""; s = parent[s] {
		for i, t := range def.Transitions {
			g := ""
			if t.Guard != nil {
				g = t.Guard.Name
			}
			if t.From == s && string(t.On) == p.Trigger && g == p.Guard {
				return i
			}
		}
	}
	return -1
}

// bareFire is one transition of the recorded sequence: on which machine,
// by which trigger (a definition index), and whether an instance starts
// there first (the core makes a turn or a tool instance, which starts in
// its initial leaf).
type bareFire struct {
	m     *bareMachine
	idx   int
	start bool
}

// BenchmarkCoreSameShapeStateless is the floor of BenchmarkCoreStep made
// of the same transitions: the agent, turn and tool definitions
// configured on bare stateless machines (see bareMachine), firing, per op,
// the transitions the core logs for one turn of BenchmarkCoreStep, in the
// same order, on the machines they were logged on. What it leaves out is
// everything loopchart adds on top of stateless: choosing the transition,
// the actions' work, effects, events, history, scheduling.
func BenchmarkCoreSameShapeStateless(b *testing.B) { benchSameShape(b, false) }

// BenchmarkCoreSameShapeStatelessLean is BenchmarkCoreSameShapeStateless
// on lean machines (see bareMachine): the cheapest floor of the same
// transitions.
func BenchmarkCoreSameShapeStatelessLean(b *testing.B) { benchSameShape(b, true) }

func benchSameShape(b *testing.B, lean bool) {
	seq := recordTurn(b, lean)
	b.ReportAllocs()
	b.ResetTimer()
	ctx := context.Background()
	for b.Loop() {
		for _, f := range seq {
			if f.start {
				f.m.state = f.m.initial
			}
			if err := f.m.fire(ctx, f.idx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/step")
	b.ReportMetric(float64(len(seq))/2, "transitions/step")
}

// recordTurn runs one turn of BenchmarkCoreStep on a fresh core and turns
// the transitions it logs into the sequence BenchmarkCoreSameShapeStateless
// fires, checking that every one maps to a transition of its definition.
func recordTurn(tb testing.TB, lean bool) []bareFire {
	at, msg, text, res, calls := turnFixture()
	call := calls[0]
	c, err := session.New(session.Config{Session: "S"}, session.NewMachines())
	if err != nil {
		tb.Fatal(err)
	}
	am, tm, xm := newBareMachine(agent.Definition, lean), newBareMachine(turn.Definition, lean), newBareMachine(tool.Definition, lean)
	am.state = am.initial
	var seq []bareFire
	var logged []vocab.TransitionPayload
	driveTurn(tb, c, at, "p1", msg, call, text, res, func(ev *vocab.Event) {
		p, ok := ev.Payload.(vocab.TransitionPayload)
		if !ok {
			return
		}
		logged = append(logged, p)
	})
	started := map[string]bool{}
	for _, p := range logged {
		var f bareFire
		switch p.Machine {
		case agent.Definition.Name:
			f = bareFire{m: am, idx: bareIndex(agent.Definition, p)}
		case turn.Definition.Name:
			f = bareFire{m: tm, idx: bareIndex(turn.Definition, p), start: !started["turn"]}
			started["turn"] = true
		case tool.Definition.Name:
			f = bareFire{m: xm, idx: bareIndex(tool.Definition, p), start: !started["tool/"+p.Instance]}
			started["tool/"+p.Instance] = true
		}
		if f.m == nil || f.idx < 0 {
			tb.Fatalf("transition %+v: no definition transition of its machine", p)
		}
		seq = append(seq, f)
	}
	if len(seq) != 16 {
		tb.Fatalf("one turn of 2 steps logged %d transitions, want 16", len(seq))
	}
	// The sequence fires on the bare machines as it did in the core: every
	// state reached is the one logged.
	ctx := context.Background()
	for i, f := range seq {
		if f.start {
			f.m.state = f.m.initial
		}
		if err := f.m.fire(ctx, f.idx); err != nil {
			tb.Fatalf("bare fire %d (%+v): %v", i, logged[i], err)
		}
		if got := f.m.name(f.m.state); got != logged[i].To {
			tb.Fatalf("bare fire %d (%+v): reached %s, want %s", i, logged[i], got, logged[i].To)
		}
	}
	return seq
}

// TestSameShapeFloor: the same-shape floors (plain and lean) replay the
// core's transitions on bare stateless machines and reach every logged
// state (see recordTurn), twice in a row as the benchmarks do.
func TestSameShapeFloor(t *testing.T) {
	for _, lean := range []bool{false, true} {
		seq := recordTurn(t, lean)
		ctx := context.Background()
		for range 2 {
			for i, f := range seq {
				if f.start {
					f.m.state = f.m.initial
				}
				if err := f.m.fire(ctx, f.idx); err != nil {
					t.Fatalf("lean=%v: fire %d: %v", lean, i, err)
				}
			}
		}
	}
}
