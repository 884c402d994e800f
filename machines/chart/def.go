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
type Out struct {
	Effects     []Effect
	Transitions []Record
}

// Emit appends an effect.
func (o *Out) Emit(e Effect) { o.Effects = append(o.Effects, e) }

// Reset empties o, keeping its storage.
func (o *Out) Reset() {
	clear(o.Effects)
	o.Effects = o.Effects[:0]
	o.Transitions = o.Transitions[:0]
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
