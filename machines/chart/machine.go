package chart

import (
	"context"
	"fmt"

	"github.com/qmuntal/stateless"
)

// Instance is one running copy of a machine kind: the current leaf state and
// the context. It is plain data; a Machine drives it.
type Instance[C any] struct {
	state int
	names []State
	Ctx   C
}

// State returns the instance's current leaf state. A zero Instance (never
// started) has state "".
func (i *Instance[C]) State() State {
	if i == nil || i.state == 0 {
		return ""
	}
	return i.names[i.state]
}

type stateInfo struct {
	name    State
	parent  int // 0: none
	initial int // 0: none
	final   bool
	depth   int
}

// stateKey and triggerKey are what stateless sees of states and
// triggers: pointers, one per state and per transition, made once per
// machine kind. A pointer in an interface is stored as is (boxing costs
// nothing), compares as a word and hashes as one (stateless keys its maps
// by interface values and compares states at every level of an exit or
// entry), where a small integer type would go through the generic hash
// and equality functions.
type stateKey = *stateSlot
type triggerKey = *triggerSlot

type stateSlot struct{ id int }
type triggerSlot struct{ id int }

// Machine is a built machine kind. Build it once and drive any number of
// instances with it, one Fire at a time: a Machine is not safe for
// concurrent use (give each goroutine its own, or serialise, as the
// session lane does).
type Machine[C any] struct {
	def      *Def[C]
	sm       *stateless.StateMachine
	states   []stateInfo // index 0 unused
	stateIdx map[State]int
	trigIdx  map[Trigger]int
	// table[state][trigger] lists the transitions declared directly on
	// state for trigger, in definition order.
	table [][][]int
	names []State
	// skeys[id] and tkeys[i] are the stateless keys of state id and of
	// transition i.
	skeys []stateKey
	tkeys []triggerKey
	// dstOf[i] is transition i's target state (0: internal), reentryOf[i]
	// whether it re-enters its source; byLen[n] lists the triggers whose
	// name is n bytes long (index 0 of trigs unused), so resolving an
	// event's trigger compares a few strings instead of hashing one.
	dstOf     []int
	reentryOf []bool
	trigs     []Trigger
	byLen     [][]int

	// per-fire scratch, valid only inside Fire
	cur         *Instance[C]
	ev          Event
	out         *Out
	chosen      int
	actionDone  bool
	src, dst    int // the fire's leaf state and its transition's target
	reentry     bool
	exitsDone   bool
	entriesDone bool
	guarding    *Guard[C] // the guard resolve is running
}

// Def returns the definition the machine was built from.
func (m *Machine[C]) Def() *Def[C] { return m.def }

// Name returns the machine's name.
func (m *Machine[C]) Name() string { return m.def.Name }

// Build validates def and configures a stateless machine for it. All
// definition mistakes are returned as errors wrapping ErrBadDefinition;
// stateless is never handed a configuration that can make it panic.
func Build[C any](def *Def[C]) (m *Machine[C], err error) {
	m = &Machine[C]{def: def, stateIdx: map[State]int{}, trigIdx: map[Trigger]int{}}
	if err := m.index(); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, defErr(def.Name, "stateless refused the configuration: %v", r)
		}
	}()
	m.configure()
	return m, nil
}

// MustBuild is Build for package-level definitions known to be valid; it
// panics on a bad definition (a programming error caught by the package's
// own tests).
func MustBuild[C any](def *Def[C]) *Machine[C] {
	m, err := Build(def)
	if err != nil {
		panic(err)
	}
	return m
}

func (m *Machine[C]) index() error {
	d := m.def
	if d.Name == "" {
		return defErr("?", "machine has no name")
	}
	m.states = make([]stateInfo, 1, len(d.States)+1)
	m.names = make([]State, 1, len(d.States)+1)
	for _, s := range d.States {
		if s.Name == "" {
			return defErr(d.Name, "state with empty name")
		}
		if _, dup := m.stateIdx[s.Name]; dup {
			return defErr(d.Name, "state %q declared twice", s.Name)
		}
		m.stateIdx[s.Name] = len(m.states)
		m.states = append(m.states, stateInfo{name: s.Name, final: s.Final})
		m.names = append(m.names, s.Name)
	}
	children := map[int]int{}
	for i, s := range d.States {
		id := i + 1
		if s.Parent != "" {
			p, ok := m.stateIdx[s.Parent]
			if !ok {
				return defErr(d.Name, "state %q: unknown parent %q", s.Name, s.Parent)
			}
			m.states[id].parent = p
			children[p]++
		}
	}
	for i, s := range d.States {
		id := i + 1
		depth := 0
		for p := m.states[id].parent; p != 0; p = m.states[p].parent {
			if depth++; depth > len(d.States) {
				return defErr(d.Name, "state %q: parent cycle", s.Name)
			}
		}
		m.states[id].depth = depth
		if s.Initial != "" {
			t, ok := m.stateIdx[s.Initial]
			if !ok || m.states[t].parent != id {
				return defErr(d.Name, "state %q: initial %q is not a direct substate", s.Name, s.Initial)
			}
			m.states[id].initial = t
		} else if children[id] > 0 {
			return defErr(d.Name, "state %q has substates but no initial substate", s.Name)
		}
		if s.Final && children[id] > 0 {
			return defErr(d.Name, "final state %q has substates", s.Name)
		}
	}
	if _, ok := m.stateIdx[d.Initial]; !ok {
		return defErr(d.Name, "unknown initial state %q", d.Initial)
	}
	for _, t := range d.Triggers {
		if _, dup := m.trigIdx[t]; dup {
			return defErr(d.Name, "trigger %q declared twice", t)
		}
		m.trigIdx[t] = len(m.trigIdx) + 1
	}
	m.trigs = make([]Trigger, len(m.trigIdx)+1)
	for _, t := range d.Triggers {
		i := m.trigIdx[t]
		m.trigs[i] = t
		for len(m.byLen) <= len(t) {
			m.byLen = append(m.byLen, nil)
		}
		m.byLen[len(t)] = append(m.byLen[len(t)], i)
	}
	m.dstOf = make([]int, len(d.Transitions))
	m.reentryOf = make([]bool, len(d.Transitions))
	m.table = make([][][]int, len(m.states))
	for i := range m.table {
		m.table[i] = make([][]int, len(m.trigIdx)+1)
	}
	for i, t := range d.Transitions {
		from, ok := m.stateIdx[t.From]
		if !ok {
			return defErr(d.Name, "transition %d: unknown source %q", i, t.From)
		}
		if m.states[from].final {
			return defErr(d.Name, "transition %d: final state %q cannot have transitions", i, t.From)
		}
		tr, ok := m.trigIdx[t.On]
		if !ok {
			return defErr(d.Name, "transition %d: undeclared trigger %q", i, t.On)
		}
		if t.To != "" {
			to, ok := m.stateIdx[t.To]
			if !ok {
				return defErr(d.Name, "transition %d: unknown destination %q", i, t.To)
			}
			if to != from && m.isAncestor(from, to) {
				return defErr(d.Name, "transition %d: %q -> %q targets a substate of its own source; declare it on the leaf", i, t.From, t.To)
			}
		}
		if t.Guard != nil && (t.Guard.Name == "" || t.Guard.Test == nil) {
			return defErr(d.Name, "transition %d: guard needs a name and a test", i)
		}
		if t.Action != nil && t.Action.Run == nil {
			return defErr(d.Name, "transition %d: action without Run", i)
		}
		if t.To != "" {
			m.dstOf[i], m.reentryOf[i] = m.stateIdx[t.To], t.To == t.From
		}
		prev := m.table[from][tr]
		if len(prev) > 0 && d.Transitions[prev[len(prev)-1]].Guard == nil {
			return defErr(d.Name, "transition %d: unreachable, an unguarded transition for %q on %q comes first", i, t.On, t.From)
		}
		m.table[from][tr] = append(prev, i)
	}
	return nil
}

// isAncestor reports whether a is a proper ancestor of s.
func (m *Machine[C]) isAncestor(a, s int) bool {
	for p := m.states[s].parent; p != 0; p = m.states[p].parent {
		if p == a {
			return true
		}
	}
	return false
}

func (m *Machine[C]) configure() {
	m.skeys = make([]stateKey, len(m.states))
	for id := range m.skeys {
		m.skeys[id] = &stateSlot{id: id}
	}
	m.tkeys = make([]triggerKey, len(m.def.Transitions))
	for i := range m.tkeys {
		m.tkeys[i] = &triggerSlot{id: i}
	}
	m.sm = stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return m.skeys[m.cur.state], nil },
		func(_ context.Context, s stateless.State) error { m.cur.state = s.(stateKey).id; return nil },
		stateless.FiringImmediate,
	)
	// Entry and exit actions run from stateless' transition callbacks, in
	// the order stateless would run them (exits, the transition's action,
	// entries down to the initial leaf), not as stateless actions: those
	// cost two allocations each (stateless puts the transition in a fresh
	// context for every action it runs). stateless still carries out every
	// transition and reports it; enter and exit follow its rules exactly.
	m.sm.OnTransitioning(func(context.Context, stateless.Transition) {
		if !m.exitsDone {
			m.exitsDone = true
			m.exit(m.src, m.src, m.dst)
			if m.reentry && m.src != m.dst {
				// A reentry declared on a superstate: after the leaf's
				// chain, the state itself is left and entered again.
				m.exit(m.dst, m.dst, m.dst)
			}
		}
		m.runTransitionAction()
	})
	m.sm.OnTransitioned(func(context.Context, stateless.Transition) {
		if m.entriesDone {
			return
		}
		m.entriesDone = true
		src := m.src
		if m.reentry {
			src = m.dst
		}
		m.enter(m.dst, src, m.dst, false)
		for s := m.dst; m.states[s].initial != 0; {
			s = m.states[s].initial
			m.enter(s, src, s, true)
		}
	})
	// stateless sees the leaves only, flat: chart has already done what a
	// hierarchy would make stateless do again on every fire (resolve walks
	// up from the leaf to the transition's source, enter follows the
	// initial substates down, exit and enter run the superstates'
	// actions). A transition declared on a superstate is declared on each
	// leaf under it, to the leaf its target's initial substates lead to.
	// stateless still carries out every transition: it finds the
	// trigger's handler on the current leaf, stores the new leaf and calls
	// OnTransitioning and OnTransitioned, which run the exit, transition
	// and entry actions in its order.
	//
	// resolve has already chosen the transition when stateless runs, so
	// stateless only carries it out. Each definition transition gets a
	// stateless trigger of its own (tkeys[i]): stateless never has to
	// choose between transitions — no guards, so no guard allocations and
	// no "multiple permitted transitions" panic.
	for id := 1; id < len(m.states); id++ {
		m.sm.Configure(m.skeys[id])
	}
	for i, t := range m.def.Transitions {
		key := m.tkeys[i]
		from := m.stateIdx[t.From]
		to := 0
		if t.To != "" {
			to = m.leafOf(m.stateIdx[t.To])
		}
		for leaf := 1; leaf < len(m.states); leaf++ {
			if m.states[leaf].initial != 0 || !m.within(leaf, from) {
				continue
			}
			sc := m.sm.Configure(m.skeys[leaf])
			switch {
			case to == 0:
				// An internal transition leaves the state as it is:
				// stateless takes the trigger and stays (Ignore), and Fire
				// runs the action itself — an InternalTransition action
				// would cost two allocations inside stateless, like entry
				// and exit actions.
				sc.Ignore(key)
			case to == leaf:
				sc.PermitReentry(key)
			default:
				sc.Permit(key, m.skeys[to])
			}
		}
	}
}

// leafOf returns the leaf that entering state s ends in: s, or the leaf
// its initial substates lead to.
func (m *Machine[C]) leafOf(s int) int {
	for m.states[s].initial != 0 {
		s = m.states[s].initial
	}
	return s
}

// within reports whether state s is a or a descendant of a (stateless'
// IncludeState of a, IsIncludedInState of s).
func (m *Machine[C]) within(s, a int) bool {
	for ; s != 0; s = m.states[s].parent {
		if s == a {
			return true
		}
	}
	return false
}

// exit runs the exit actions of a transition src → dst from state sr up,
// by stateless' rules: a state that includes dst is not left; a reentry
// (src == dst) leaves src only.
func (m *Machine[C]) exit(sr, src, dst int) {
	reentry := src == dst
	if !reentry && m.within(dst, sr) {
		return
	}
	if a := m.def.States[sr-1].Exit; a != nil {
		a.Run(&m.cur.Ctx, m.ev, m.out)
	}
	p := m.states[sr].parent
	if reentry || p == 0 {
		return
	}
	if m.within(sr, dst) && p == dst {
		return // dst is the parent being returned to: it is not left
	}
	m.exit(p, src, dst)
}

// enter runs the entry actions of state sr for a transition src → dst, by
// stateless' rules: a reentry enters sr alone; a state that includes src
// was never left; otherwise its superstates are entered first (not on an
// initial transition).
func (m *Machine[C]) enter(sr, src, dst int, initial bool) {
	if src != dst {
		if m.within(src, sr) {
			return
		}
		if p := m.states[sr].parent; p != 0 && !initial {
			m.enter(p, src, dst, initial)
		}
	}
	if a := m.def.States[sr-1].Entry; a != nil {
		a.Run(&m.cur.Ctx, m.ev, m.out)
	}
}

// runTransitionAction runs the chosen transition's action once per Fire,
// between the exit actions and the entry actions.
func (m *Machine[C]) runTransitionAction() {
	if m.actionDone {
		return
	}
	m.actionDone = true
	if a := m.def.Transitions[m.chosen].Action; a != nil {
		a.Run(&m.cur.Ctx, m.ev, m.out)
	}
}

// New returns an instance in the machine's initial state with context c and
// runs the entry actions of the initial state chain (outermost first); their
// effects are appended to out. The entry sees a nil event.
func (m *Machine[C]) New(c C, out *Out) *Instance[C] {
	inst := &Instance[C]{Ctx: c}
	m.Start(inst, out)
	return inst
}

// Start resets inst to the initial state, keeping inst.Ctx, and runs the
// initial entry actions like New. It reuses inst's storage.
func (m *Machine[C]) Start(inst *Instance[C], out *Out) {
	id := m.stateIdx[m.def.Initial]
	var chain []int
	for s := id; s != 0; s = m.states[s].parent {
		chain = append(chain, s)
	}
	for k := len(chain) - 1; k >= 0; k-- {
		if a := m.def.States[chain[k]-1].Entry; a != nil {
			a.Run(&inst.Ctx, nil, out)
		}
	}
	for m.states[id].initial != 0 {
		id = m.states[id].initial
		if a := m.def.States[id-1].Entry; a != nil {
			a.Run(&inst.Ctx, nil, out)
		}
	}
	inst.state = id
	inst.names = m.names
}

// Fire feeds ev to inst. On success the transition taken is appended to
// out.Transitions and the requested effects to out.Effects. On failure the
// error is a *TriggerError (ErrUnhandledTrigger or ErrGuardRejected) or a
// *GuardPanicError (ErrGuardPanicked), with inst unchanged and nothing
// appended to out, or it wraps ErrActionPanicked.
func (m *Machine[C]) Fire(inst *Instance[C], ev Event, out *Out) (err error) {
	if ev == nil {
		return &TriggerError{Machine: m.def.Name, State: inst.State(), Trigger: "<nil event>", kind: ErrUnhandledTrigger}
	}
	if inst.state == 0 {
		return &TriggerError{Machine: m.def.Name, State: "<not started>", Trigger: ev.Trigger(), kind: ErrUnhandledTrigger}
	}
	from := inst.state
	// One deferred recover serves the guards (resolve marks the guard it
	// runs) and the actions: a defer per guard test cost more than the
	// test.
	defer func() {
		if r := recover(); r != nil {
			if g := m.guarding; g != nil {
				err = &GuardPanicError{Machine: m.def.Name, State: m.states[from].name, Trigger: ev.Trigger(), Guard: g.Name, Value: r}
			} else {
				err = fmt.Errorf("%s: state %q, trigger %q: %w: %v", m.def.Name, m.states[from].name, ev.Trigger(), ErrActionPanicked, r)
			}
		}
		m.cur, m.ev, m.out, m.guarding = nil, nil, nil, nil
	}()
	idx, err := m.resolve(inst, ev)
	if err != nil {
		return err
	}
	m.cur, m.ev, m.out, m.chosen, m.actionDone = inst, ev, out, idx, false
	m.src, m.exitsDone, m.entriesDone = from, false, false
	if m.dstOf[idx] != 0 {
		m.dst, m.reentry = m.dstOf[idx], m.reentryOf[idx]
	}
	t := &m.def.Transitions[idx]
	if err := m.sm.FireCtx(context.Background(), m.tkeys[idx]); err != nil {
		return fmt.Errorf("%s: stateless: %w", m.def.Name, err)
	}
	m.runTransitionAction() // internal transitions without OnTransitioning
	rec := Record{Machine: m.def.Name, From: m.states[from].name, To: m.states[inst.state].name, Trigger: t.On, Internal: t.To == "", Index: idx}
	if t.Guard != nil {
		rec.Guard = t.Guard.Name
	}
	out.Transitions = append(out.Transitions, rec)
	return nil
}

// resolve finds the transition ev takes from inst's state: the leaf first,
// then each superstate; within a state, the first passing guard in
// definition order wins. A panicking guard stops the search (Fire turns
// the panic into a *GuardPanicError).
func (m *Machine[C]) resolve(inst *Instance[C], ev Event) (int, error) {
	tr, ok := m.trigger(ev.Trigger())
	var failed []string
	// A final state handles nothing, not even its superstates' triggers.
	if ok && !m.states[inst.state].final {
		for s := inst.state; s != 0; s = m.states[s].parent {
			for _, i := range m.table[s][tr] {
				g := m.def.Transitions[i].Guard
				if g == nil {
					return i, nil
				}
				// A panic here is caught by Fire, which names m.guarding.
				m.guarding = g
				pass := g.Test(&inst.Ctx, ev)
				m.guarding = nil
				if pass {
					return i, nil
				}
			}
		}
		// Nothing passed: name the guards that failed (cold path).
		for s := inst.state; s != 0; s = m.states[s].parent {
			for _, i := range m.table[s][tr] {
				failed = append(failed, m.def.Transitions[i].Guard.Name)
			}
		}
	}
	e := &TriggerError{Machine: m.def.Name, State: m.states[inst.state].name, Trigger: ev.Trigger(), Guards: failed, kind: ErrUnhandledTrigger}
	if len(failed) > 0 {
		e.kind = ErrGuardRejected
	}
	return 0, e
}

// trigger returns the index of trigger t.
func (m *Machine[C]) trigger(t Trigger) (int, bool) {
	if len(t) < len(m.byLen) {
		for _, i := range m.byLen[len(t)] {
			if m.trigs[i] == t {
				return i, true
			}
		}
	}
	return 0, false
}

// Handles reports whether state s (or a superstate) declares a transition
// for trigger t, regardless of guards.
func (m *Machine[C]) Handles(s State, t Trigger) bool {
	id, ok := m.stateIdx[s]
	tr, ok2 := m.trigIdx[t]
	if !ok || !ok2 || m.states[id].final {
		return false
	}
	for ; id != 0; id = m.states[id].parent {
		if len(m.table[id][tr]) > 0 {
			return true
		}
	}
	return false
}

// Leaves returns the machine's leaf states (states without substates) in
// definition order: the states an instance can be in.
func (m *Machine[C]) Leaves() []State {
	var out []State
	for id := 1; id < len(m.states); id++ {
		if m.states[id].initial == 0 {
			out = append(out, m.states[id].name)
		}
	}
	return out
}

// IsFinal reports whether inst is in a final state.
func (m *Machine[C]) IsFinal(inst *Instance[C]) bool { return m.states[inst.state].final }

// In reports whether inst is in state s or one of its substates.
func (m *Machine[C]) In(inst *Instance[C], s State) bool {
	// A walk up from the leaf comparing names (a state is a few levels
	// deep, and equal names are usually the same constant, which compares
	// at once) costs less than hashing s.
	for id := inst.state; id != 0; id = m.states[id].parent {
		if m.states[id].name == s {
			return true
		}
	}
	return false
}
