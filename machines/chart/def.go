// Package chart is the shared definition layer of loopchart's statecharts.
//
// A machine is written once, as a declarative Def: its states (with
// substates, initial substates and finals), its triggers, and its
// transitions with named guards and actions that declare the effects they
// may request. From that single value chart builds:
//
//   - the qmuntal/stateless configuration that runs it (Build), configured
//     once per machine kind; instances are plain values swapped in through
//     stateless' external storage, so a new turn or tool call costs no
//     configuration;
//   - deterministic DOT and Mermaid diagrams (DOT, Mermaid);
//   - the data the table tests need (every transition, every state ×
//     trigger pair).
//
// chart adds what stateless leaves out: typed errors for unhandled triggers
// and unmet guards (ErrUnhandledTrigger, ErrGuardRejected), guards ordered by
// the definition (the first passing guard wins, so overlapping guards cannot
// panic), and recovery of any panic into an error.
//
// The package is pure: no I/O, no clock, no goroutines. Time and identifiers
// arrive inside events.
package chart

// State names a state of a machine.
type State string

// Trigger names an input kind of a machine.
type Trigger string

// Event is a trigger with its typed payload. Each machine defines its own
// event types.
type Event interface {
	Trigger() Trigger
}

// Effect is work a machine asks its adapter to do. The machine never does
// it; the adapter executes effects in order and feeds their results back as
// events.
type Effect interface {
	// EffectName is the kebab-case name used in diagrams and tables.
	EffectName() string
}

// Guard is a named, pure predicate over the instance context and the event.
type Guard[C any] struct {
	Name string
	Test func(c *C, ev Event) bool
}

// Action is the work done by a transition or a state's entry or exit: it
// may update the context and emit effects. Effects lists the names of the
// effects it may emit, for diagrams.
type Action[C any] struct {
	Effects []string
	Run     func(c *C, ev Event, out *Out)
}

// StateSpec declares one state.
type StateSpec[C any] struct {
	Name State
	// Parent is the superstate; empty for a top-level state.
	Parent State
	// Initial is the substate entered when this state is entered; required
	// for a state with substates.
	Initial State
	// Final marks a terminal state: it handles no trigger.
	Final bool
	Entry *Action[C]
	Exit  *Action[C]
}

// Transition declares one edge. A transition whose To is empty is internal:
// the action runs, no state is left or entered. A transition whose To equals
// From re-enters the state (exit and entry actions run again).
type Transition[C any] struct {
	From   State
	On     Trigger
	To     State
	Guard  *Guard[C]
	Action *Action[C]
}

// Internal reports whether t changes no state.
func (t Transition[C]) Internal() bool { return t.To == "" }

// Def is the single declarative definition of a machine kind.
type Def[C any] struct {
	Name    string
	Initial State
	// Version is the snapshot format version of this machine's context.
	Version     int
	States      []StateSpec[C]
	Triggers    []Trigger
	Transitions []Transition[C]
}

// Out collects the effects requested by one Fire, in order. Reuse one Out
// across fires (Reset) to avoid allocations.
//
// An effect emitted through a Store is a pointer into storage the Out
// keeps for its type, reused from the next Reset on: read (or copy) an
// Out's effects before resetting it.
type Out struct {
	Effects     []Effect
	Transitions []Record

	// stores[slot] is the storage of Store slot (nil until used); used
	// lists the stores written since the last Reset.
	stores []effectStore
	used   []effectStore
}

// Emit appends an effect.
func (o *Out) Emit(e Effect) { o.Effects = append(o.Effects, e) }

// Reset empties o, keeping its storage: the effects it held are dropped
// and the storage of those emitted through a Store is reused.
func (o *Out) Reset() {
	// A loop down, not clear: an Out holds a few effects, and clear (like
	// the loop up, which the compiler makes into it) calls the runtime's
	// typed memclr, several times the cost of the stores for so few.
	for i := len(o.Effects) - 1; i >= 0; i-- {
		o.Effects[i] = nil
	}
	o.Effects = o.Effects[:0]
	o.Transitions = o.Transitions[:0]
	for i, s := range o.used {
		s.reset()
		o.used[i] = nil
	}
	o.used = o.used[:0]
}

// Store emits effects of type T by pointer, from storage each Out keeps
// for T: boxing a T into an Effect would cost an allocation per effect,
// a *T in storage the Out reuses costs none once the Out has grown. The
// effect is *T (which has T's methods); it is the Out's until its next
// Reset. Make a Store with NewStore (P is *T), once per type, in a
// package-level variable.
type Store[T any, P interface {
	*T
	Effect
}] struct{ slot int }

// stores counts the Stores made; NewStore runs during package
// initialization only, which is sequential.
var stores int

// NewStore returns the Store of a new slot. Call it only to initialize a
// package-level variable.
func NewStore[T any, P interface {
	*T
	Effect
}]() Store[T, P] {
	stores++
	return Store[T, P]{slot: stores}
}

// effectStore is the storage of one Store in one Out.
type effectStore interface{ reset() }

type storeOf[T any] struct {
	vals []T
	n    int  // vals[:n] are handed out
	used bool // listed in the Out's used
}

func (s *storeOf[T]) reset() {
	// What the effects pointed to can be collected (a loop down, as in
	// Out.Reset: a store hands out one or two values between resets).
	var zero T
	for i := s.n - 1; i >= 0; i-- {
		s.vals[i] = zero
	}
	s.n, s.used = 0, false
}

// Emit appends v to o's effects as a *T in o's storage for T.
func (st Store[T, P]) Emit(o *Out, v T) {
	if st.slot == 0 { // a zero Store: no storage
		p := new(T)
		*p = v
		o.Effects = append(o.Effects, P(p))
		return
	}
	if st.slot >= len(o.stores) {
		o.stores = append(o.stores, make([]effectStore, st.slot+1-len(o.stores))...)
	}
	s, _ := o.stores[st.slot].(*storeOf[T])
	if s == nil {
		s = new(storeOf[T])
		o.stores[st.slot] = s
	}
	if !s.used {
		s.used = true
		o.used = append(o.used, s)
	}
	if s.n == len(s.vals) {
		// Full: a larger array. The effects handed out keep the old one
		// until the Reset; from then on only the new one is used.
		s.vals, s.n = make([]T, max(2, 2*len(s.vals))), 0
	}
	p := &s.vals[s.n]
	s.n++
	*p = v
	o.Effects = append(o.Effects, P(p))
}

// Record is one transition taken: the leaf state before and after, the
// trigger, the guard that admitted it ("" when unguarded) and its index in
// the definition's Transitions.
type Record struct {
	Machine  string
	From, To State
	Trigger  Trigger
	Guard    string
	Internal bool
	Index    int
}

// String renders r as "from --trigger[guard]--> to" (internal: "from
// --trigger[guard]--> (internal)").
func (r Record) String() string {
	g := ""
	if r.Guard != "" {
		g = "[" + r.Guard + "]"
	}
	to := string(r.To)
	if r.Internal {
		to = "(internal)"
	}
	return string(r.From) + " --" + string(r.On()) + g + "--> " + to
}

// On returns the record's trigger.
func (r Record) On() Trigger { return r.Trigger }
