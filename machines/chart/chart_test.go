package chart_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// The toy machine: a door with a lock.
//
//	opened ──close──▶ closed{unlocked*, locked}
//	opened ──tick[timerDue]──▶ closed            (auto-close timer)
//	unlocked ──open──▶ opened
//	unlocked ──lock──▶ locked
//	unlocked ──kick[flimsy]──▶ opened            (leaf, guarded)
//	unlocked ──jam──▶ locked                     (action panics)
//	locked ──unlock[rightCode]──▶ unlocked
//	locked ──unlock[masterKey]──▶ unlocked       (same trigger, second guard)
//	locked ──lock──▶ locked                      (reentry)
//	locked ──jam[panicky]──▶ broken              (guard panics)
//	closed ──knock──▶ (internal)
//	closed ──kick──▶ broken                      (superstate, unguarded)
//	closed ──reset──▶ closed                     (reentry of a composite)
//	broken: final
//
// Every entry, exit and transition action appends its name to Ctx.Log so
// the tests can check the order stateless runs them in.

type door struct {
	Log    []string    `json:"log,omitempty"`
	Code   int         `json:"code"`
	Flimsy bool        `json:"flimsy,omitempty"`
	Knocks int         `json:"knocks,omitempty"`
	Seq    uint64      `json:"seq,omitempty"`
	Timer  chart.Timer `json:"timer"`
}

// Clone implements chart.Cloner.
func (d door) Clone() door { d.Log = slices.Clone(d.Log); return d }

// Validate implements chart.Validator.
func (d *door) Validate() error {
	if d.Code < 0 {
		return errors.New("negative code")
	}
	return nil
}

type ev struct {
	T    chart.Trigger
	Code int
	Name string
	Seq  uint64
}

func (e ev) Trigger() chart.Trigger { return e.T }

type beep struct{ N int }

func (beep) EffectName() string { return "beep" }

const (
	opened   chart.State = "opened"
	closed   chart.State = "closed"
	unlocked chart.State = "unlocked"
	locked   chart.State = "locked"
	broken   chart.State = "broken"
)

var doorTriggers = []chart.Trigger{"open", "close", "lock", "unlock", "knock", "kick", "jam", "tick", "reset", "ping"}

func logs(name string) *chart.Action[door] {
	return &chart.Action[door]{Run: func(c *door, _ chart.Event, _ *chart.Out) { c.Log = append(c.Log, name) }}
}

func evOf(e chart.Event) ev { v, _ := e.(ev); return v }

// doorDef returns a fresh definition, so tests may mutate it.
func doorDef() *chart.Def[door] {
	rightCode := &chart.Guard[door]{Name: "rightCode", Test: func(c *door, e chart.Event) bool { return evOf(e).Code != 0 && evOf(e).Code == c.Code }}
	masterKey := &chart.Guard[door]{Name: "masterKey", Test: func(_ *door, e chart.Event) bool { return evOf(e).Code == 999 }}
	flimsy := &chart.Guard[door]{Name: "flimsy", Test: func(c *door, _ chart.Event) bool { return c.Flimsy }}
	timerDue := &chart.Guard[door]{Name: "timerDue", Test: func(c *door, e chart.Event) bool { return c.Timer.Matches(evOf(e).Name, evOf(e).Seq) }}
	panicky := &chart.Guard[door]{Name: "panicky", Test: func(*door, chart.Event) bool { panic("guard boom") }}
	return &chart.Def[door]{
		Name:    "door",
		Initial: closed,
		Version: 3,
		States: []chart.StateSpec[door]{
			{Name: opened,
				Entry: &chart.Action[door]{Effects: []string{"start-timer"}, Run: func(c *door, _ chart.Event, out *chart.Out) {
					c.Log = append(c.Log, "entry:opened")
					c.Timer.Arm(&c.Seq, "autoclose", 30*time.Second, out)
				}},
				Exit: &chart.Action[door]{Effects: []string{"cancel-timer"}, Run: func(c *door, _ chart.Event, out *chart.Out) {
					c.Log = append(c.Log, "exit:opened")
					c.Timer.Disarm(out)
				}},
			},
			{Name: closed, Initial: unlocked, Entry: logs("entry:closed"), Exit: logs("exit:closed")},
			{Name: unlocked, Parent: closed, Entry: logs("entry:unlocked"), Exit: logs("exit:unlocked")},
			{Name: locked, Parent: closed, Entry: logs("entry:locked"), Exit: logs("exit:locked")},
			{Name: broken, Final: true, Entry: logs("entry:broken")},
		},
		Triggers: slices.Clone(doorTriggers),
		Transitions: []chart.Transition[door]{
			/* 0 */ {From: opened, On: "close", To: closed, Action: logs("act:close")},
			/* 1 */ {From: opened, On: "tick", To: closed, Guard: timerDue, Action: logs("act:autoclose")},
			/* 2 */ {From: unlocked, On: "open", To: opened, Action: logs("act:open")},
			/* 3 */ {From: unlocked, On: "lock", To: locked, Action: logs("act:lock")},
			/* 4 */ {From: unlocked, On: "kick", To: opened, Guard: flimsy, Action: logs("act:kick-open")},
			/* 5 */ {From: unlocked, On: "jam", To: locked, Action: &chart.Action[door]{Run: func(*door, chart.Event, *chart.Out) { panic("action boom") }}},
			/* 6 */ {From: locked, On: "unlock", To: unlocked, Guard: rightCode, Action: logs("act:unlock-code")},
			/* 7 */ {From: locked, On: "unlock", To: unlocked, Guard: masterKey, Action: logs("act:unlock-master")},
			/* 8 */ {From: locked, On: "lock", To: locked, Action: logs("act:relock")},
			/* 9 */ {From: locked, On: "jam", To: broken, Guard: panicky},
			/* 10 */ {From: closed, On: "knock", Action: &chart.Action[door]{Effects: []string{"beep"}, Run: func(c *door, _ chart.Event, out *chart.Out) {
				c.Log = append(c.Log, "act:knock")
				c.Knocks++
				out.Emit(beep{N: c.Knocks})
			}}},
			/* 11 */ {From: closed, On: "kick", To: broken, Action: logs("act:kick-break")},
			/* 12 */ {From: closed, On: "reset", To: closed, Action: logs("act:reset")},
		},
	}
}

func mustDoor(t testing.TB) *chart.Machine[door] {
	t.Helper()
	m, err := chart.Build(doorDef())
	if err != nil {
		t.Fatalf("Build(door): %v", err)
	}
	return m
}

// fireAll fires evs in order and fails the test on the first error.
func fireAll(t *testing.T, m *chart.Machine[door], inst *chart.Instance[door], evs ...ev) {
	t.Helper()
	for _, e := range evs {
		var out chart.Out
		if err := m.Fire(inst, e, &out); err != nil {
			t.Fatalf("prelude %s: %v", e.T, err)
		}
	}
}

// ---------------------------------------------------------------------------
// Build

func TestBuildRejectsBadDefinitions(t *testing.T) {
	yes := func(*door, chart.Event) bool { return true }
	tests := []struct {
		name   string
		mutate func(d *chart.Def[door])
		want   string // fragment of the error message
	}{
		{"no name", func(d *chart.Def[door]) { d.Name = "" }, "machine has no name"},
		{"empty state name", func(d *chart.Def[door]) { d.States = append(d.States, chart.StateSpec[door]{}) }, "state with empty name"},
		{"duplicate state", func(d *chart.Def[door]) {
			d.States = append(d.States, chart.StateSpec[door]{Name: opened})
		}, `state "opened" declared twice`},
		{"unknown parent", func(d *chart.Def[door]) {
			d.States = append(d.States, chart.StateSpec[door]{Name: "ajar", Parent: "nowhere"})
		}, `state "ajar": unknown parent "nowhere"`},
		{"parent cycle", func(d *chart.Def[door]) {
			d.States = append(d.States,
				chart.StateSpec[door]{Name: "a", Parent: "b", Initial: "b"},
				chart.StateSpec[door]{Name: "b", Parent: "a", Initial: "a"})
		}, `state "a": parent cycle`},
		{"self parent", func(d *chart.Def[door]) {
			d.States = append(d.States, chart.StateSpec[door]{Name: "a", Parent: "a", Initial: "a"})
		}, `state "a": parent cycle`},
		{"composite without initial", func(d *chart.Def[door]) { d.States[1].Initial = "" }, `state "closed" has substates but no initial substate`},
		{"initial not a substate", func(d *chart.Def[door]) { d.States[1].Initial = opened }, `state "closed": initial "opened" is not a direct substate`},
		{"initial a grandchild", func(d *chart.Def[door]) {
			d.States[2].Initial = "deep"
			d.States = append(d.States, chart.StateSpec[door]{Name: "deep", Parent: unlocked})
			d.States[1].Initial = "deep"
		}, `state "closed": initial "deep" is not a direct substate`},
		{"initial unknown", func(d *chart.Def[door]) { d.States[1].Initial = "nowhere" }, `state "closed": initial "nowhere" is not a direct substate`},
		{"initial on a leaf", func(d *chart.Def[door]) { d.States[0].Initial = unlocked }, `state "opened": initial "unlocked" is not a direct substate`},
		{"final with substates", func(d *chart.Def[door]) {
			d.States[4].Initial = "shards"
			d.States = append(d.States, chart.StateSpec[door]{Name: "shards", Parent: broken})
		}, `final state "broken" has substates`},
		{"final with transitions", func(d *chart.Def[door]) {
			d.Transitions = append(d.Transitions, chart.Transition[door]{From: broken, On: "reset", To: closed})
		}, `transition 13: final state "broken" cannot have transitions`},
		{"unknown machine initial", func(d *chart.Def[door]) { d.Initial = "nowhere" }, `unknown initial state "nowhere"`},
		{"empty machine initial", func(d *chart.Def[door]) { d.Initial = "" }, `unknown initial state ""`},
		{"duplicate trigger", func(d *chart.Def[door]) { d.Triggers = append(d.Triggers, "open") }, `trigger "open" declared twice`},
		{"unknown source", func(d *chart.Def[door]) {
			d.Transitions = append(d.Transitions, chart.Transition[door]{From: "nowhere", On: "open", To: opened})
		}, `transition 13: unknown source "nowhere"`},
		{"unknown destination", func(d *chart.Def[door]) { d.Transitions[2].To = "nowhere" }, `transition 2: unknown destination "nowhere"`},
		{"undeclared trigger", func(d *chart.Def[door]) { d.Transitions[0].On = "fly" }, `transition 0: undeclared trigger "fly"`},
		{"unreachable after unguarded", func(d *chart.Def[door]) {
			d.Transitions = append(d.Transitions, chart.Transition[door]{From: unlocked, On: "open", To: broken})
		}, `transition 13: unreachable, an unguarded transition for "open" on "unlocked" comes first`},
		{"unreachable guarded after unguarded", func(d *chart.Def[door]) {
			d.Transitions = append(d.Transitions, chart.Transition[door]{From: locked, On: "lock", To: broken, Guard: &chart.Guard[door]{Name: "g", Test: yes}})
		}, `transition 13: unreachable, an unguarded transition for "lock" on "locked" comes first`},
		{"guard without name", func(d *chart.Def[door]) { d.Transitions[6].Guard = &chart.Guard[door]{Test: yes} }, "transition 6: guard needs a name and a test"},
		{"guard without test", func(d *chart.Def[door]) { d.Transitions[6].Guard = &chart.Guard[door]{Name: "g"} }, "transition 6: guard needs a name and a test"},
		{"action without Run", func(d *chart.Def[door]) { d.Transitions[0].Action = &chart.Action[door]{Effects: []string{"x"}} }, "transition 0: action without Run"},
		{"target own substate", func(d *chart.Def[door]) {
			d.Transitions = append(d.Transitions, chart.Transition[door]{From: closed, On: "open", To: locked})
		}, `transition 13: "closed" -> "locked" targets a substate of its own source`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := doorDef()
			tt.mutate(d)
			m, err := chart.Build(d)
			if err == nil {
				t.Fatalf("Build accepted the definition")
			}
			if m != nil {
				t.Errorf("Build returned a machine with error %v", err)
			}
			if !errors.Is(err, chart.ErrBadDefinition) {
				t.Errorf("error %v does not wrap ErrBadDefinition", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
			if d.Name != "" && !strings.Contains(err.Error(), d.Name+":") {
				t.Errorf("error %q does not name the machine", err)
			}
			defer func() {
				if recover() == nil {
					t.Errorf("MustBuild did not panic")
				}
			}()
			chart.MustBuild(d)
		})
	}
}

func TestBuildAcceptsDoor(t *testing.T) {
	d := doorDef()
	m, err := chart.Build(d)
	if err != nil {
		t.Fatal(err)
	}
	if m.Def() != d || m.Name() != "door" {
		t.Errorf("Def/Name = %p %q, want %p door", m.Def(), m.Name(), d)
	}
	if got, want := m.Leaves(), []chart.State{opened, unlocked, locked, broken}; !slices.Equal(got, want) {
		t.Errorf("Leaves = %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------
// New / Start

func TestNewEntersInitialSubstate(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{Code: 42}, &out)
	if inst.State() != unlocked {
		t.Errorf("state = %s, want unlocked", inst.State())
	}
	if diff := cmp.Diff([]string{"entry:closed", "entry:unlocked"}, inst.Ctx.Log); diff != "" {
		t.Errorf("entry order (-want +got):\n%s", diff)
	}
	if inst.Ctx.Code != 42 {
		t.Errorf("New dropped the context: %+v", inst.Ctx)
	}
	if len(out.Transitions) != 0 || len(out.Effects) != 0 {
		t.Errorf("New recorded %s", out.Format())
	}
	if !m.In(inst, closed) || !m.In(inst, unlocked) || m.In(inst, locked) || m.In(inst, opened) || m.In(inst, "nowhere") {
		t.Errorf("In is wrong for an instance in unlocked")
	}

	// Start resets to the initial state, keeping the context.
	fireAll(t, m, inst, ev{T: "open"})
	inst.Ctx.Log = nil
	m.Start(inst, &out)
	if inst.State() != unlocked || !slices.Equal(inst.Ctx.Log, []string{"entry:closed", "entry:unlocked"}) || inst.Ctx.Code != 42 {
		t.Errorf("after Start: state %s ctx %+v", inst.State(), inst.Ctx)
	}

	// The entry actions of an initial state that is itself a substate run
	// outermost first.
	dl := doorDef()
	dl.Initial = locked
	inst3 := chart.MustBuild(dl).New(door{}, &out)
	if inst3.State() != locked || !slices.Equal(inst3.Ctx.Log, []string{"entry:closed", "entry:locked"}) {
		t.Errorf("New(locked): state %s, log %v", inst3.State(), inst3.Ctx.Log)
	}

	// Entry effects reach out.
	d := doorDef()
	d.Initial = opened
	m2 := chart.MustBuild(d)
	out.Reset()
	inst2 := m2.New(door{}, &out)
	if inst2.State() != opened || out.Format() != "effect start-timer autoclose#1 after 30s\n" {
		t.Errorf("New(opened): state %s, out %q", inst2.State(), out.Format())
	}
}

// ---------------------------------------------------------------------------
// Fire

func TestFire(t *testing.T) {
	tests := []struct {
		name    string
		ctx     door
		prelude []ev
		fire    ev
		state   chart.State
		log     []string     // Ctx.Log written by this Fire only
		rec     chart.Record // Machine is filled in
		format  string       // out.Format() of this Fire
	}{
		{
			name: "leaving a composite exits leaf then parent",
			fire: ev{T: "open"}, state: opened,
			log:    []string{"exit:unlocked", "exit:closed", "act:open", "entry:opened"},
			rec:    chart.Record{From: unlocked, To: opened, Trigger: "open", Index: 2},
			format: "door: unlocked --open--> opened\neffect start-timer autoclose#1 after 30s\n",
		},
		{
			name:    "entering a composite enters parent then initial leaf",
			prelude: []ev{{T: "open"}},
			fire:    ev{T: "close"}, state: unlocked,
			log:    []string{"exit:opened", "act:close", "entry:closed", "entry:unlocked"},
			rec:    chart.Record{From: opened, To: unlocked, Trigger: "close", Index: 0},
			format: "door: opened --close--> unlocked\neffect cancel-timer autoclose#1\n",
		},
		{
			name: "sibling transition keeps the parent",
			fire: ev{T: "lock"}, state: locked,
			log: []string{"exit:unlocked", "act:lock", "entry:locked"},
			rec: chart.Record{From: unlocked, To: locked, Trigger: "lock", Index: 3},
		},
		{
			name: "first passing guard in definition order wins",
			ctx:  door{Code: 999}, prelude: []ev{{T: "lock"}},
			fire: ev{T: "unlock", Code: 999}, state: unlocked,
			log: []string{"exit:locked", "act:unlock-code", "entry:unlocked"},
			rec: chart.Record{From: locked, To: unlocked, Trigger: "unlock", Guard: "rightCode", Index: 6},
		},
		{
			name: "second guard when the first fails",
			ctx:  door{Code: 42}, prelude: []ev{{T: "lock"}},
			fire: ev{T: "unlock", Code: 999}, state: unlocked,
			log: []string{"exit:locked", "act:unlock-master", "entry:unlocked"},
			rec: chart.Record{From: locked, To: unlocked, Trigger: "unlock", Guard: "masterKey", Index: 7},
		},
		{
			name: "first guard only",
			ctx:  door{Code: 42}, prelude: []ev{{T: "lock"}},
			fire: ev{T: "unlock", Code: 42}, state: unlocked,
			log: []string{"exit:locked", "act:unlock-code", "entry:unlocked"},
			rec: chart.Record{From: locked, To: unlocked, Trigger: "unlock", Guard: "rightCode", Index: 6},
		},
		{
			name: "leaf before superstate",
			ctx:  door{Flimsy: true},
			fire: ev{T: "kick"}, state: opened,
			log:    []string{"exit:unlocked", "exit:closed", "act:kick-open", "entry:opened"},
			rec:    chart.Record{From: unlocked, To: opened, Trigger: "kick", Guard: "flimsy", Index: 4},
			format: "door: unlocked --kick[flimsy]--> opened\neffect start-timer autoclose#1 after 30s\n",
		},
		{
			// stateless looks at the leaf first; the leaf's lone kick
			// transition must not be taken when its guard failed.
			name: "superstate not shadowed by the leaf's lone transition",
			fire: ev{T: "kick"}, state: broken,
			log:    []string{"exit:unlocked", "exit:closed", "act:kick-break", "entry:broken"},
			rec:    chart.Record{From: unlocked, To: broken, Trigger: "kick", Index: 11},
			format: "door: unlocked --kick--> broken\n",
		},
		{
			name:    "superstate transition from a leaf without its own",
			ctx:     door{Flimsy: true},
			prelude: []ev{{T: "lock"}},
			fire:    ev{T: "kick"}, state: broken,
			log: []string{"exit:locked", "exit:closed", "act:kick-break", "entry:broken"},
			rec: chart.Record{From: locked, To: broken, Trigger: "kick", Index: 11},
		},
		{
			name: "internal transition on the superstate runs no exit or entry",
			fire: ev{T: "knock"}, state: unlocked,
			log:    []string{"act:knock"},
			rec:    chart.Record{From: unlocked, To: unlocked, Trigger: "knock", Internal: true, Index: 10},
			format: "door: unlocked --knock--> (internal)\neffect beep {N:1}\n",
		},
		{
			name:    "internal transition from the other substate",
			prelude: []ev{{T: "lock"}, {T: "knock"}},
			fire:    ev{T: "knock"}, state: locked,
			log:    []string{"act:knock"},
			rec:    chart.Record{From: locked, To: locked, Trigger: "knock", Internal: true, Index: 10},
			format: "door: locked --knock--> (internal)\neffect beep {N:2}\n",
		},
		{
			name:    "reentry of a leaf runs exit and entry",
			prelude: []ev{{T: "lock"}},
			fire:    ev{T: "lock"}, state: locked,
			log: []string{"exit:locked", "act:relock", "entry:locked"},
			rec: chart.Record{From: locked, To: locked, Trigger: "lock", Index: 8},
		},
		{
			name:    "reentry of a composite restarts at its initial substate",
			prelude: []ev{{T: "lock"}},
			fire:    ev{T: "reset"}, state: unlocked,
			log: []string{"exit:locked", "exit:closed", "act:reset", "entry:closed", "entry:unlocked"},
			rec: chart.Record{From: locked, To: unlocked, Trigger: "reset", Index: 12},
		},
		{
			name:    "guarded timer event",
			prelude: []ev{{T: "open"}},
			fire:    ev{T: "tick", Name: "autoclose", Seq: 1}, state: unlocked,
			log:    []string{"exit:opened", "act:autoclose", "entry:closed", "entry:unlocked"},
			rec:    chart.Record{From: opened, To: unlocked, Trigger: "tick", Guard: "timerDue", Index: 1},
			format: "door: opened --tick[timerDue]--> unlocked\neffect cancel-timer autoclose#1\n",
		},
	}
	m := mustDoor(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out chart.Out
			inst := m.New(tt.ctx, &out)
			fireAll(t, m, inst, tt.prelude...)
			inst.Ctx.Log = nil
			out.Reset()
			if err := m.Fire(inst, tt.fire, &out); err != nil {
				t.Fatalf("Fire(%s): %v", tt.fire.T, err)
			}
			if inst.State() != tt.state {
				t.Errorf("state = %s, want %s", inst.State(), tt.state)
			}
			if diff := cmp.Diff(tt.log, inst.Ctx.Log); diff != "" {
				t.Errorf("action order (-want +got):\n%s", diff)
			}
			tt.rec.Machine = "door"
			if diff := cmp.Diff([]chart.Record{tt.rec}, out.Transitions); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if tt.format != "" && out.Format() != tt.format {
				t.Errorf("Format:\n%s\nwant:\n%s", out.Format(), tt.format)
			}
		})
	}
}

func TestOutAccumulatesAndResets(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{}, &out)
	for _, e := range []ev{{T: "knock"}, {T: "open"}, {T: "close"}} {
		if err := m.Fire(inst, e, &out); err != nil {
			t.Fatal(err)
		}
	}
	want := "door: unlocked --knock--> (internal)\n" +
		"door: unlocked --open--> opened\n" +
		"door: opened --close--> unlocked\n" +
		"effect beep {N:1}\n" +
		"effect start-timer autoclose#1 after 30s\n" +
		"effect cancel-timer autoclose#1\n"
	if got := out.Format(); got != want {
		t.Errorf("Format:\n%s\nwant:\n%s", got, want)
	}
	ce, ct := cap(out.Effects), cap(out.Transitions)
	out.Reset()
	if len(out.Effects) != 0 || len(out.Transitions) != 0 || out.Format() != "" {
		t.Errorf("Reset left %q", out.Format())
	}
	if cap(out.Effects) != ce || cap(out.Transitions) != ct {
		t.Errorf("Reset dropped storage: caps %d,%d want %d,%d", cap(out.Effects), cap(out.Transitions), ce, ct)
	}
	// Reset clears the effects it keeps, so they can be collected.
	if full := out.Effects[:ce]; full[0] != nil {
		t.Errorf("Reset kept a reference to effect %v", full[0])
	}
}

func TestRecordString(t *testing.T) {
	tests := []struct {
		r    chart.Record
		want string
	}{
		{chart.Record{From: "a", To: "b", Trigger: "go"}, "a --go--> b"},
		{chart.Record{From: "a", To: "b", Trigger: "go", Guard: "ok"}, "a --go[ok]--> b"},
		{chart.Record{From: "a", To: "a", Trigger: "go", Internal: true}, "a --go--> (internal)"},
		{chart.Record{From: "a", To: "a", Trigger: "go", Guard: "g", Internal: true}, "a --go[g]--> (internal)"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.r, got, tt.want)
		}
		if tt.r.On() != tt.r.Trigger {
			t.Errorf("On() = %q", tt.r.On())
		}
	}
}

// nested is a three-level chart where the leaf, its parent and the top
// state all handle "go"; flags select which guards pass. It pins that a
// transition declared on a superstate is taken when the guards below it
// fail, however many levels down stateless starts looking.
type nested struct{ Leaf, Mid, Top bool }

type goEv struct{}

func (goEv) Trigger() chart.Trigger { return "go" }

func nestedDef() *chart.Def[nested] {
	g := func(name string, f func(*nested) bool) *chart.Guard[nested] {
		return &chart.Guard[nested]{Name: name, Test: func(c *nested, _ chart.Event) bool { return f(c) }}
	}
	return &chart.Def[nested]{
		Name: "nested", Initial: "top", Triggers: []chart.Trigger{"go"},
		States: []chart.StateSpec[nested]{
			{Name: "top", Initial: "mid"}, {Name: "mid", Parent: "top", Initial: "leaf"}, {Name: "leaf", Parent: "mid"},
			{Name: "x"}, {Name: "y"}, {Name: "z"},
		},
		Transitions: []chart.Transition[nested]{
			{From: "leaf", On: "go", To: "x", Guard: g("leafOK", func(c *nested) bool { return c.Leaf })},
			{From: "mid", On: "go", To: "y", Guard: g("midOK", func(c *nested) bool { return c.Mid })},
			{From: "top", On: "go", To: "z", Guard: g("topOK", func(c *nested) bool { return c.Top })},
		},
	}
}

func TestSuperstateNotShadowed(t *testing.T) {
	t.Run("agent shape", func(t *testing.T) {
		// Moved from machines/agent (TestSuperstateTransitionNotShadowed).
		// The shape of the agent machine (ready --submit[gateNext]--> gating
		// beside idle --submit[startTurn]--> running), reduced to a toy: the
		// leaf's only transition is rejected by its guard, so the
		// superstate's is taken, not the leaf's. stateless looks at the leaf
		// first, so the leaf's lone transition must still carry a stateless
		// guard.
		type C struct{}
		no := &chart.Guard[C]{Name: "no", Test: func(*C, chart.Event) bool { return false }}
		d := &chart.Def[C]{Name: "x", Initial: "idle", Triggers: []chart.Trigger{"go"},
			States: []chart.StateSpec[C]{{Name: "idle", Initial: "ready"}, {Name: "ready", Parent: "idle"},
				{Name: "gating", Parent: "idle"}, {Name: "running"}},
			Transitions: []chart.Transition[C]{{From: "ready", On: "go", To: "gating", Guard: no}, {From: "idle", On: "go", To: "running"}},
		}
		m := chart.MustBuild(d)
		var out chart.Out
		inst := m.New(C{}, &out)
		if err := m.Fire(inst, goEv{}, &out); err != nil || inst.State() != "running" {
			t.Fatalf("got %s, %v; want running (%s)", inst.State(), err, out.Format())
		}
		if want := "x: ready --go--> running\n"; out.Format() != want {
			t.Errorf("Format = %q, want %q", out.Format(), want)
		}
	})

	tests := []struct {
		ctx   nested
		state chart.State
		guard string
		index int
	}{
		{nested{Leaf: true, Mid: true, Top: true}, "x", "leafOK", 0},
		{nested{Mid: true, Top: true}, "y", "midOK", 1},
		{nested{Top: true}, "z", "topOK", 2},
		{nested{Leaf: true}, "x", "leafOK", 0},
		{nested{Mid: true}, "y", "midOK", 1},
	}
	m := chart.MustBuild(nestedDef())
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.ctx), func(t *testing.T) {
			var out chart.Out
			inst := m.New(tt.ctx, &out)
			if err := m.Fire(inst, goEv{}, &out); err != nil {
				t.Fatal(err)
			}
			want := []chart.Record{{Machine: "nested", From: "leaf", To: tt.state, Trigger: "go", Guard: tt.guard, Index: tt.index}}
			if inst.State() != tt.state || !cmp.Equal(want, out.Transitions) {
				t.Errorf("state %s, records %v; want %s %v", inst.State(), out.Transitions, tt.state, want)
			}
		})
	}
	t.Run("all guards fail across levels", func(t *testing.T) {
		var out chart.Out
		inst := m.New(nested{}, &out)
		err := m.Fire(inst, goEv{}, &out)
		var te *chart.TriggerError
		if !errors.As(err, &te) || !errors.Is(err, chart.ErrGuardRejected) {
			t.Fatalf("err = %v, want a guard-rejected TriggerError", err)
		}
		if want := []string{"leafOK", "midOK", "topOK"}; !slices.Equal(te.Guards, want) {
			t.Errorf("Guards = %v, want %v (leaf first)", te.Guards, want)
		}
		if inst.State() != "leaf" {
			t.Errorf("state moved to %s", inst.State())
		}
	})
}

// shapes pairs, for one trigger each, a guarded transition on the leaf "a"
// with a transition of another shape (internal, re-entry, plain) on its
// superstate "top", so that every way stateless can be configured for a
// (state, trigger) group meets a competing superstate.
type shapes struct {
	Pass bool
	Log  []string
}

type trig chart.Trigger

func (t trig) Trigger() chart.Trigger { return chart.Trigger(t) }

func shapesDef() *chart.Def[shapes] {
	lg := func(s string) *chart.Action[shapes] {
		return &chart.Action[shapes]{Run: func(c *shapes, _ chart.Event, _ *chart.Out) { c.Log = append(c.Log, s) }}
	}
	pass := &chart.Guard[shapes]{Name: "pass", Test: func(c *shapes, _ chart.Event) bool { return c.Pass }}
	never := &chart.Guard[shapes]{Name: "never", Test: func(*shapes, chart.Event) bool { return false }}
	return &chart.Def[shapes]{
		Name: "shapes", Initial: "top",
		Triggers: []chart.Trigger{"plain/internal", "plain/reentry", "internal/plain", "reentry/plain", "group/internal", "plain/plain", "mixed"},
		States: []chart.StateSpec[shapes]{
			{Name: "top", Initial: "a", Entry: lg("entry:top"), Exit: lg("exit:top")},
			{Name: "a", Parent: "top", Entry: lg("entry:a"), Exit: lg("exit:a")},
			{Name: "b", Parent: "top", Entry: lg("entry:b"), Exit: lg("exit:b")},
			{Name: "out", Entry: lg("entry:out"), Exit: lg("exit:out")},
		},
		Transitions: []chart.Transition[shapes]{
			/* 0 */ {From: "a", On: "plain/internal", To: "b", Guard: pass, Action: lg("act:a")},
			/* 1 */ {From: "top", On: "plain/internal", Action: lg("act:top")},
			/* 2 */ {From: "a", On: "plain/reentry", To: "b", Guard: pass, Action: lg("act:a")},
			/* 3 */ {From: "top", On: "plain/reentry", To: "top", Action: lg("act:top")},
			/* 4 */ {From: "a", On: "internal/plain", Guard: pass, Action: lg("act:a")},
			/* 5 */ {From: "top", On: "internal/plain", To: "out", Action: lg("act:top")},
			/* 6 */ {From: "a", On: "reentry/plain", To: "a", Guard: pass, Action: lg("act:a")},
			/* 7 */ {From: "top", On: "reentry/plain", To: "out", Action: lg("act:top")},
			/* 8 */ {From: "a", On: "group/internal", To: "b", Guard: never, Action: lg("act:a-never")},
			/* 9 */ {From: "a", On: "group/internal", To: "out", Guard: pass, Action: lg("act:a")},
			/* 10 */ {From: "top", On: "group/internal", Action: lg("act:top")},
			/* 11 */ {From: "a", On: "plain/plain", To: "b", Guard: pass, Action: lg("act:a")},
			/* 12 */ {From: "top", On: "plain/plain", To: "out", Action: lg("act:top")},
			/* 13 */ {From: "a", On: "mixed", Guard: pass, Action: lg("act:a-internal")},
			/* 14 */ {From: "a", On: "mixed", To: "b", Action: lg("act:a")},
		},
	}
}

func TestGroupShapes(t *testing.T) {
	tests := []struct {
		on    trig
		pass  bool
		state chart.State
		log   []string
		index int
	}{
		{"plain/internal", true, "b", []string{"exit:a", "act:a", "entry:b"}, 0},
		{"plain/internal", false, "a", []string{"act:top"}, 1},
		{"plain/reentry", true, "b", []string{"exit:a", "act:a", "entry:b"}, 2},
		{"plain/reentry", false, "a", []string{"exit:a", "exit:top", "act:top", "entry:top", "entry:a"}, 3},
		{"internal/plain", true, "a", []string{"act:a"}, 4},
		{"internal/plain", false, "out", []string{"exit:a", "exit:top", "act:top", "entry:out"}, 5},
		{"reentry/plain", true, "a", []string{"exit:a", "act:a", "entry:a"}, 6},
		{"reentry/plain", false, "out", []string{"exit:a", "exit:top", "act:top", "entry:out"}, 7},
		{"group/internal", true, "out", []string{"exit:a", "exit:top", "act:a", "entry:out"}, 9},
		{"group/internal", false, "a", []string{"act:top"}, 10},
		{"plain/plain", true, "b", []string{"exit:a", "act:a", "entry:b"}, 11},
		{"plain/plain", false, "out", []string{"exit:a", "exit:top", "act:top", "entry:out"}, 12},
		{"mixed", true, "a", []string{"act:a-internal"}, 13},
		{"mixed", false, "b", []string{"exit:a", "act:a", "entry:b"}, 14},
	}
	d := shapesDef()
	m := chart.MustBuild(d)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/pass=%v", tt.on, tt.pass), func(t *testing.T) {
			var out chart.Out
			inst := m.New(shapes{Pass: tt.pass}, &out)
			inst.Ctx.Log = nil
			if err := m.Fire(inst, tt.on, &out); err != nil {
				t.Fatal(err)
			}
			tr := d.Transitions[tt.index]
			want := chart.Record{Machine: "shapes", From: "a", To: tt.state, Trigger: chart.Trigger(tt.on), Internal: tr.To == "", Index: tt.index}
			if tr.Guard != nil {
				want.Guard = tr.Guard.Name
			}
			if inst.State() != tt.state {
				t.Errorf("state = %s, want %s", inst.State(), tt.state)
			}
			if diff := cmp.Diff(tt.log, inst.Ctx.Log); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]chart.Record{want}, out.Transitions); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Errors

func TestFireErrors(t *testing.T) {
	tests := []struct {
		name    string
		ctx     door
		prelude []ev
		fire    ev
		kind    error      // ErrUnhandledTrigger or ErrGuardRejected
		code    vocab.Code // the matching vocab code
		state   chart.State
		guards  []string
		msg     string
	}{
		{
			name: "unhandled trigger", prelude: []ev{{T: "open"}}, fire: ev{T: "lock"},
			kind: chart.ErrUnhandledTrigger, code: vocab.CodeUnhandledTrigger, state: opened,
			msg: `door: state "opened" does not handle trigger "lock"`,
		},
		{
			name: "declared trigger no state handles", fire: ev{T: "ping"},
			kind: chart.ErrUnhandledTrigger, code: vocab.CodeUnhandledTrigger, state: unlocked,
			msg: `door: state "unlocked" does not handle trigger "ping"`,
		},
		{
			name: "unknown trigger name", fire: ev{T: "fly"},
			kind: chart.ErrUnhandledTrigger, code: vocab.CodeUnhandledTrigger, state: unlocked,
			msg: `door: state "unlocked" does not handle trigger "fly"`,
		},
		{
			name: "every guard fails", ctx: door{Code: 42}, prelude: []ev{{T: "lock"}}, fire: ev{T: "unlock", Code: 7},
			kind: chart.ErrGuardRejected, code: vocab.CodeGuardRejected, state: locked,
			guards: []string{"rightCode", "masterKey"},
			msg:    `door: state "locked", trigger "unlock": guard rejected: [rightCode masterKey]`,
		},
		{
			name: "stale timer", prelude: []ev{{T: "open"}}, fire: ev{T: "tick", Name: "autoclose", Seq: 2},
			kind: chart.ErrGuardRejected, code: vocab.CodeGuardRejected, state: opened,
			guards: []string{"timerDue"},
		},
		{
			name: "final state", prelude: []ev{{T: "kick"}}, fire: ev{T: "reset"},
			kind: chart.ErrUnhandledTrigger, code: vocab.CodeUnhandledTrigger, state: broken,
		},
	}
	m := mustDoor(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out chart.Out
			inst := m.New(tt.ctx, &out)
			fireAll(t, m, inst, tt.prelude...)
			out.Reset()
			before := inst.Ctx.Clone()
			err := m.Fire(inst, tt.fire, &out)
			var te *chart.TriggerError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v (%T), want *TriggerError", err, err)
			}
			other, otherCode := chart.ErrGuardRejected, vocab.CodeGuardRejected
			if tt.kind == chart.ErrGuardRejected {
				other, otherCode = chart.ErrUnhandledTrigger, vocab.CodeUnhandledTrigger
			}
			if !errors.Is(err, tt.kind) || errors.Is(err, other) {
				t.Errorf("errors.Is(%v): want %v only", err, tt.kind)
			}
			if !errors.Is(err, tt.code.Err()) || errors.Is(err, otherCode.Err()) || te.Code() != tt.code {
				t.Errorf("code of %v: Code()=%s, want %s only", err, te.Code(), tt.code)
			}
			// vocab.CodeOf sees the code through ErrorCode, wrapped or not.
			wrapped := fmt.Errorf("session: %w", err)
			if te.ErrorCode() != tt.code || vocab.CodeOf(err) != tt.code || vocab.CodeOf(wrapped) != tt.code {
				t.Errorf("CodeOf(%v) = %s, wrapped %s; want %s", err, vocab.CodeOf(err), vocab.CodeOf(wrapped), tt.code)
			}
			if !errors.Is(wrapped, tt.kind) || !errors.Is(wrapped, tt.code.Err()) {
				t.Errorf("wrapped %v lost its kind or code", wrapped)
			}
			// A vocab error with a message is not a sentinel.
			if errors.Is(err, vocab.Errorf(tt.code, "something")) {
				t.Errorf("%v matches a non-sentinel vocab error", err)
			}
			if errors.Is(err, chart.ErrBadSnapshot) || errors.Is(err, chart.ErrActionPanicked) || errors.Is(err, chart.ErrGuardPanicked) || errors.Is(err, vocab.CodeGuardPanicked.Err()) {
				t.Errorf("%v matches an unrelated sentinel", err)
			}
			if te.Machine != "door" || te.State != tt.state || te.Trigger != tt.fire.T || !slices.Equal(te.Guards, tt.guards) {
				t.Errorf("TriggerError = %+v, want state %s trigger %s guards %v", te, tt.state, tt.fire.T, tt.guards)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("message %q, want %q", err.Error(), tt.msg)
			}
			if inst.State() != tt.state {
				t.Errorf("state moved to %s", inst.State())
			}
			if diff := cmp.Diff(before, inst.Ctx); diff != "" {
				t.Errorf("context changed (-before +after):\n%s", diff)
			}
			if len(out.Effects) != 0 || len(out.Transitions) != 0 {
				t.Errorf("failed Fire produced %s", out.Format())
			}
		})
	}
}

func TestGuardPanicBecomesError(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{Code: 3}, &out)
	fireAll(t, m, inst, ev{T: "lock"})
	out.Reset()
	out.Emit(beep{N: 1}) // what an earlier Fire left in out stays, alone
	before := inst.Ctx.Clone()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic escaped Fire: %v", r)
			}
		}()
		err = m.Fire(inst, ev{T: "jam"}, &out)
	}()
	if !errors.Is(err, chart.ErrGuardPanicked) || !errors.Is(err, vocab.CodeGuardPanicked.Err()) {
		t.Fatalf("err = %v, want ErrGuardPanicked and CodeGuardPanicked", err)
	}
	const msg = `door: state "locked", trigger "jam": guard "panicky" panicked: guard boom`
	if err.Error() != msg {
		t.Errorf("message %q, want %q", err, msg)
	}
	var ge *chart.GuardPanicError
	if !errors.As(err, &ge) {
		t.Fatalf("err = %T, want *GuardPanicError", err)
	}
	if ge.Machine != "door" || ge.State != locked || ge.Trigger != "jam" || ge.Guard != "panicky" || ge.Value != "guard boom" {
		t.Errorf("GuardPanicError = %+v", ge)
	}
	// A bug, not a refusal: no other sentinel or code matches.
	var te *chart.TriggerError
	for _, other := range []error{chart.ErrGuardRejected, chart.ErrUnhandledTrigger, chart.ErrActionPanicked, chart.ErrBadSnapshot,
		vocab.CodeGuardRejected.Err(), vocab.CodeUnhandledTrigger.Err(), vocab.CodeInternal.Err(), vocab.Errorf(vocab.CodeGuardPanicked, "x")} {
		if errors.Is(err, other) {
			t.Errorf("%v matches %v", err, other)
		}
	}
	if errors.As(err, &te) {
		t.Errorf("a guard panic reported as a trigger error: %v", err)
	}
	// vocab.CodeOf sees the code, wrapped or not.
	wrapped := fmt.Errorf("fire: %w", err)
	if ge.ErrorCode() != vocab.CodeGuardPanicked || vocab.CodeOf(err) != vocab.CodeGuardPanicked || vocab.CodeOf(wrapped) != vocab.CodeGuardPanicked {
		t.Errorf("CodeOf = %s, wrapped %s", vocab.CodeOf(err), vocab.CodeOf(wrapped))
	}
	if !errors.Is(wrapped, chart.ErrGuardPanicked) {
		t.Errorf("wrapped %v does not match ErrGuardPanicked", wrapped)
	}
	// The instance is unchanged and nothing was appended to out.
	if inst.State() != locked {
		t.Errorf("state moved to %s", inst.State())
	}
	if diff := cmp.Diff(before, inst.Ctx); diff != "" {
		t.Errorf("context changed (-before +after):\n%s", diff)
	}
	if len(out.Transitions) != 0 || len(out.Effects) != 1 {
		t.Errorf("a failed Fire appended to out: %s", out.Format())
	}
	// The instance is still usable.
	out.Reset()
	if err := m.Fire(inst, ev{T: "unlock", Code: 3}, &out); err != nil || inst.State() != unlocked {
		t.Errorf("after a guard panic: %v, state %s", err, inst.State())
	}
}

func TestGuardPanicStopsTheSearch(t *testing.T) {
	// The first guard panics and the second would pass: Fire must report
	// the panic, not fall through to the second transition (nor to the
	// superstate's), as it did when a panicking guard counted as false.
	type C struct{ N int }
	boom := errors.New("boom")
	var calls []string
	bad := &chart.Guard[C]{Name: "bad", Test: func(*C, chart.Event) bool { calls = append(calls, "bad"); panic(boom) }}
	yes := &chart.Guard[C]{Name: "yes", Test: func(*C, chart.Event) bool { calls = append(calls, "yes"); return true }}
	d := &chart.Def[C]{Name: "p", Initial: "top", Triggers: []chart.Trigger{"go"},
		States: []chart.StateSpec[C]{{Name: "top", Initial: "a"}, {Name: "a", Parent: "top"}, {Name: "b", Parent: "top"}, {Name: "c"}},
		Transitions: []chart.Transition[C]{
			{From: "a", On: "go", To: "b", Guard: bad},
			{From: "a", On: "go", To: "b", Guard: yes},
			{From: "top", On: "go", To: "c"},
		},
	}
	m := chart.MustBuild(d)
	var out chart.Out
	inst := m.New(C{N: 1}, &out)
	err := m.Fire(inst, goEv{}, &out)
	var ge *chart.GuardPanicError
	if !errors.As(err, &ge) || ge.Guard != "bad" || ge.State != "a" || ge.Machine != "p" || ge.Value != boom {
		t.Fatalf("err = %v (%+v), want the panic of guard bad", err, ge)
	}
	if !strings.Contains(err.Error(), `guard "bad" panicked: boom`) {
		t.Errorf("message %q", err)
	}
	// The panic value is reported, not wrapped: a guard that panics with
	// an error does not turn the bug into that error.
	if errors.Is(err, boom) {
		t.Errorf("%v matches the panic value", err)
	}
	if !slices.Equal(calls, []string{"bad"}) || inst.State() != "a" || inst.Ctx.N != 1 || len(out.Transitions) != 0 {
		t.Errorf("calls %v, state %s, ctx %+v, out %s", calls, inst.State(), inst.Ctx, out.Format())
	}
}

func TestActionPanicCode(t *testing.T) {
	// An action panic is a bug in loopchart: vocab.CodeOf says internal.
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{}, &out)
	err := m.Fire(inst, ev{T: "jam"}, &out)
	if !errors.Is(err, chart.ErrActionPanicked) || vocab.CodeOf(err) != vocab.CodeInternal || vocab.CodeOf(fmt.Errorf("x: %w", err)) != vocab.CodeInternal {
		t.Errorf("err %v, CodeOf %s; want ErrActionPanicked, internal", err, vocab.CodeOf(err))
	}
	if errors.Is(err, chart.ErrGuardPanicked) {
		t.Errorf("an action panic matches ErrGuardPanicked")
	}
}

func TestFinalStateHandlesNothing(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{}, &out)
	fireAll(t, m, inst, ev{T: "kick"})
	if !m.IsFinal(inst) || inst.State() != broken {
		t.Fatalf("state %s, IsFinal %v", inst.State(), m.IsFinal(inst))
	}
	for _, tr := range doorTriggers {
		if m.Handles(broken, tr) {
			t.Errorf("Handles(broken, %s)", tr)
		}
		if err := m.Fire(inst, ev{T: tr}, &out); !errors.Is(err, chart.ErrUnhandledTrigger) {
			t.Errorf("Fire(%s) in broken: %v", tr, err)
		}
	}
	if inst.State() != broken {
		t.Errorf("left the final state for %s", inst.State())
	}
	fresh := m.New(door{}, &out)
	if m.IsFinal(fresh) {
		t.Errorf("IsFinal(unlocked)")
	}
}

func TestFireNotStarted(t *testing.T) {
	m := mustDoor(t)
	var inst chart.Instance[door]
	var out chart.Out
	if inst.State() != "" {
		t.Errorf("zero instance state %q", inst.State())
	}
	err := m.Fire(&inst, ev{T: "open"}, &out)
	if !errors.Is(err, chart.ErrUnhandledTrigger) || !strings.Contains(err.Error(), "not started") {
		t.Errorf("Fire on a zero instance: %v", err)
	}
	if inst.State() != "" || len(out.Transitions) != 0 || len(out.Effects) != 0 || inst.Ctx.Log != nil {
		t.Errorf("zero instance changed: %q %+v %s", inst.State(), inst.Ctx, out.Format())
	}
	var nilInst *chart.Instance[door]
	if nilInst.State() != "" {
		t.Errorf("nil instance state %q", nilInst.State())
	}
}

func TestActionPanicBecomesError(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{}, &out)
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic escaped Fire: %v", r)
			}
		}()
		err = m.Fire(inst, ev{T: "jam"}, &out)
	}()
	if !errors.Is(err, chart.ErrActionPanicked) {
		t.Fatalf("err = %v, want ErrActionPanicked", err)
	}
	for _, frag := range []string{"door", `state "unlocked"`, `trigger "jam"`, "action boom"} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("%q does not contain %q", err, frag)
		}
	}
	var te *chart.TriggerError
	if errors.As(err, &te) || errors.Is(err, chart.ErrUnhandledTrigger) {
		t.Errorf("a panic reported as a trigger error: %v", err)
	}
	// The machine is still usable: a fresh instance runs normally.
	out.Reset()
	fresh := m.New(door{}, &out)
	out.Reset()
	if err := m.Fire(fresh, ev{T: "open"}, &out); err != nil || fresh.State() != opened {
		t.Fatalf("after a panic: %v, state %s", err, fresh.State())
	}
	if want := "door: unlocked --open--> opened\neffect start-timer autoclose#1 after 30s\n"; out.Format() != want {
		t.Errorf("after a panic: %q, want %q", out.Format(), want)
	}
}

// ---------------------------------------------------------------------------
// Handles / In

func TestHandles(t *testing.T) {
	m := mustDoor(t)
	tests := []struct {
		s    chart.State
		tr   chart.Trigger
		want bool
	}{
		{unlocked, "kick", true}, // own, guarded
		{locked, "kick", true},   // inherited from closed
		{locked, "knock", true},  // inherited internal
		{closed, "knock", true},  // composite itself
		{opened, "knock", false}, // no
		{opened, "tick", true},   // guarded
		{unlocked, "unlock", false},
		{broken, "ping", false},
		{"nowhere", "open", false}, // unknown state
		{unlocked, "fly", false},   // unknown trigger
	}
	for _, tt := range tests {
		if got := m.Handles(tt.s, tt.tr); got != tt.want {
			t.Errorf("Handles(%s, %s) = %v, want %v", tt.s, tt.tr, got, tt.want)
		}
	}
}

// ---------------------------------------------------------------------------
// Snapshot / Restore

func TestSnapshotRoundTrip(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{Code: 42, Flimsy: true}, &out)
	fireAll(t, m, inst, ev{T: "knock"}, ev{T: "open"}, ev{T: "close"}, ev{T: "open"})

	snap := m.Snapshot(inst)
	want := chart.Snapshot[door]{Machine: "door", Version: 3, State: opened, Ctx: inst.Ctx}
	if diff := cmp.Diff(want, snap); diff != "" {
		t.Fatalf("Snapshot (-want +got):\n%s", diff)
	}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back chart.Snapshot[door]
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snap, back); diff != "" {
		t.Fatalf("JSON round trip (-want +got):\n%s\n%s", diff, data)
	}
	restored, err := m.Restore(back)
	if err != nil {
		t.Fatal(err)
	}
	if restored.State() != opened || !cmp.Equal(restored.Ctx, inst.Ctx) {
		t.Fatalf("restored %s %+v", restored.State(), restored.Ctx)
	}
	if restored.Ctx.Log[0] != "entry:closed" {
		t.Fatalf("restored log %v", restored.Ctx.Log)
	}
	// Restore runs no action.
	if len(restored.Ctx.Log) != len(inst.Ctx.Log) {
		t.Errorf("Restore ran actions: %v", restored.Ctx.Log)
	}

	// The restored instance behaves like the original: the pending timer
	// matches, and both produce the same output.
	var o1, o2 chart.Out
	tick := ev{T: "tick", Name: "autoclose", Seq: inst.Ctx.Timer.Seq}
	e1, e2 := m.Fire(inst, tick, &o1), m.Fire(restored, tick, &o2)
	if e1 != nil || e2 != nil {
		t.Fatalf("tick: %v / %v", e1, e2)
	}
	if o1.Format() != o2.Format() || !cmp.Equal(inst.Ctx, restored.Ctx) || inst.State() != restored.State() {
		t.Errorf("diverged:\n%s\n%s", o1.Format(), o2.Format())
	}
}

func TestSnapshotClones(t *testing.T) {
	m := mustDoor(t)
	var out chart.Out
	inst := m.New(door{}, &out)
	snap := m.Snapshot(inst)
	snap.Ctx.Log[0] = "mutated"
	snap.Ctx.Log = append(snap.Ctx.Log, "more")
	if inst.Ctx.Log[0] != "entry:closed" || len(inst.Ctx.Log) != 2 {
		t.Errorf("mutating the snapshot changed the live instance: %v", inst.Ctx.Log)
	}
	// And the other way round.
	snap2 := m.Snapshot(inst)
	inst.Ctx.Log[1] = "mutated"
	if snap2.Ctx.Log[1] != "entry:unlocked" {
		t.Errorf("mutating the instance changed the snapshot: %v", snap2.Ctx.Log)
	}
}

func TestRestoreRejects(t *testing.T) {
	m := mustDoor(t)
	good := chart.Snapshot[door]{Machine: "door", Version: 3, State: locked, Ctx: door{Code: 1}}
	if inst, err := m.Restore(good); err != nil || inst.State() != locked || inst.Ctx.Code != 1 {
		t.Fatalf("Restore(good) = %v, %v", inst, err)
	}
	tests := []struct {
		name   string
		mutate func(s *chart.Snapshot[door])
		want   string
	}{
		{"other machine", func(s *chart.Snapshot[door]) { s.Machine = "window" }, `snapshot of machine "window" given to "door"`},
		{"empty machine", func(s *chart.Snapshot[door]) { s.Machine = "" }, `snapshot of machine "" given to "door"`},
		{"old version", func(s *chart.Snapshot[door]) { s.Version = 2 }, "door snapshot version 2, want 3"},
		{"unknown state", func(s *chart.Snapshot[door]) { s.State = "ajar" }, `door has no state "ajar"`},
		{"empty state", func(s *chart.Snapshot[door]) { s.State = "" }, `door has no state ""`},
		{"composite state", func(s *chart.Snapshot[door]) { s.State = closed }, `door state "closed" is not a leaf`},
		{"validator", func(s *chart.Snapshot[door]) { s.Ctx.Code = -1 }, "door: negative code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.mutate(&s)
			inst, err := m.Restore(s)
			if !errors.Is(err, chart.ErrBadSnapshot) {
				t.Fatalf("Restore = %v, %v; want ErrBadSnapshot", inst, err)
			}
			if inst != nil {
				t.Errorf("Restore returned an instance with an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%q does not contain %q", err, tt.want)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// CheckMatrix / Untaken / Describe

func TestCheckMatrix(t *testing.T) {
	m := mustDoor(t)
	checked, failures := chart.CheckMatrix(m, func(tr chart.Trigger) chart.Event { return ev{T: tr} })
	// Unhandled pairs: opened 8 (all but close, tick), unlocked 4 (close,
	// unlock, tick, ping), locked 4 (open, close, tick, ping), broken 10.
	if checked != 26 || len(failures) != 0 {
		t.Errorf("CheckMatrix = %d, %v; want 26, none", checked, failures)
	}

	// A sample that always answers "knock": handled in closed, so the pair
	// (unlocked, close) fires successfully, and in opened the error names
	// the wrong trigger.
	checked, failures = chart.CheckMatrix(m, func(chart.Trigger) chart.Event { return ev{T: "knock"} })
	if checked != 26 {
		t.Errorf("checked = %d, want 26", checked)
	}
	for _, want := range []string{
		"unlocked × close: got <nil>, want ErrUnhandledTrigger",
		"opened × open: error names opened × knock",
		"broken × ping: error names broken × knock",
	} {
		if !slices.Contains(failures, want) {
			t.Errorf("failures lack %q:\n%s", want, strings.Join(failures, "\n"))
		}
	}
	// The two pairs whose trigger is knock itself pass.
	if len(failures) != 24 {
		t.Errorf("%d failures, want 24:\n%s", len(failures), strings.Join(failures, "\n"))
	}

	// A sample of an undeclared trigger: unhandled everywhere, but named wrong.
	_, failures = chart.CheckMatrix(m, func(chart.Trigger) chart.Event { return ev{T: "fly"} })
	if len(failures) != 26 {
		t.Errorf("%d failures, want 26", len(failures))
	}

	nm := chart.MustBuild(nestedDef())
	checked, failures = chart.CheckMatrix(nm, func(chart.Trigger) chart.Event { return goEv{} })
	// leaf, x, y, z are leaves; only x, y, z leave "go" unhandled.
	if checked != 3 || len(failures) != 0 {
		t.Errorf("nested CheckMatrix = %d, %v", checked, failures)
	}
}

type picky struct{ N int }

func (p *picky) Validate() error {
	if p.N == 0 {
		return errors.New("zero N")
	}
	return nil
}

func TestCheckMatrixReportsRestoreFailure(t *testing.T) {
	d := &chart.Def[picky]{Name: "p", Initial: "a", Triggers: []chart.Trigger{"go"}, States: []chart.StateSpec[picky]{{Name: "a"}}}
	m := chart.MustBuild(d)
	checked, failures := chart.CheckMatrix(m, func(chart.Trigger) chart.Event { return goEv{} })
	if checked != 1 || len(failures) != 1 || !strings.Contains(failures[0], "a × go: restore:") || !strings.Contains(failures[0], "zero N") {
		t.Errorf("CheckMatrix = %d, %q", checked, failures)
	}
}

func TestUntakenAndDescribe(t *testing.T) {
	d := doorDef()
	all := []string{
		"opened --close--> closed",
		"opened --tick[timerDue]--> closed",
		"unlocked --open--> opened",
		"unlocked --lock--> locked",
		"unlocked --kick[flimsy]--> opened",
		"unlocked --jam--> locked",
		"locked --unlock[rightCode]--> unlocked",
		"locked --unlock[masterKey]--> unlocked",
		"locked --lock--> locked",
		"locked --jam[panicky]--> broken",
		"closed --knock--> (internal)",
		"closed --kick--> broken",
		"closed --reset--> closed",
	}
	for i, want := range all {
		if internal := d.Transitions[i].Internal(); internal != strings.HasSuffix(want, "(internal)") {
			t.Errorf("Transitions[%d].Internal() = %v", i, internal)
		}
		if got := chart.Describe(d, i); got != want {
			t.Errorf("Describe(%d) = %q, want %q", i, got, want)
		}
	}
	if diff := cmp.Diff(all, chart.Untaken(d, nil)); diff != "" {
		t.Errorf("Untaken(nil) (-want +got):\n%s", diff)
	}

	// Take a few edges through the machine and collect their indexes.
	m := chart.MustBuild(d)
	var out chart.Out
	inst := m.New(door{Code: 5}, &out)
	for _, e := range []ev{{T: "knock"}, {T: "open"}, {T: "close"}, {T: "lock"}, {T: "unlock", Code: 5}} {
		if err := m.Fire(inst, e, &out); err != nil {
			t.Fatal(err)
		}
	}
	taken := map[int]bool{}
	for _, r := range out.Transitions {
		taken[r.Index] = true
	}
	want := []string{all[1], all[4], all[5], all[7], all[8], all[9], all[11], all[12]}
	if diff := cmp.Diff(want, chart.Untaken(d, taken)); diff != "" {
		t.Errorf("Untaken (-want +got):\n%s", diff)
	}
	for i := range all {
		taken[i] = true
	}
	if got := chart.Untaken(d, taken); got != nil {
		t.Errorf("Untaken(all) = %v", got)
	}
}

// ---------------------------------------------------------------------------
// Diagrams

func TestDOT(t *testing.T) {
	d := doorDef()
	got := chart.DOT(d)
	if again := chart.DOT(doorDef()); again != got {
		t.Fatalf("DOT is not deterministic:\n%s\n---\n%s", got, again)
	}
	for _, want := range []string{
		"// Code generated by loopchart from the door machine definition. DO NOT EDIT.\n",
		`digraph "door" {`,
		`"__init" -> "closed.__init";`,
		`"closed.__init" -> "unlocked";`,
		`subgraph "cluster_closed" {`,
		`style="dashed";`,
		`"closed.__init" [label="", shape=point];`,
		`"broken" [label="{broken}", peripheries=2];`,
		`"opened" [label="{opened|entry / start-timer|exit / cancel-timer}"];`,
		`"locked" -> "unlocked" [label="unlock [rightCode]"];`,
		`"locked" -> "unlocked" [label="unlock [masterKey]"];`,
		`"opened" -> "closed.__init" [label="tick [timerDue]", lhead="cluster_closed"];`,
		`"closed.__init" -> "closed.__init" [label="knock / beep (internal)", style="dotted", ltail="cluster_closed"];`,
		`"closed.__init" -> "broken" [label="kick", ltail="cluster_closed"];`,
		`"closed.__init" -> "closed.__init" [label="reset", ltail="cluster_closed"];`,
		`"locked" -> "locked" [label="lock"];`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("DOT lacks %s\n%s", want, got)
		}
	}
	// The leaves are drawn inside the cluster, after its point.
	cl := strings.Index(got, `subgraph "cluster_closed"`)
	end := cl + strings.Index(got[cl:], "\t}\n")
	for _, s := range []string{`"unlocked" [label=`, `"locked" [label=`} {
		if i := strings.Index(got, s); i < cl || i > end {
			t.Errorf("%s not inside the cluster", s)
		}
	}
	if strings.Count(got, "peripheries=2") != 1 {
		t.Errorf("want exactly one final state:\n%s", got)
	}
	if !strings.HasSuffix(got, "}\n") {
		t.Errorf("DOT does not end the graph")
	}
}

func TestMermaid(t *testing.T) {
	d := doorDef()
	got := chart.Mermaid(d)
	if again := chart.Mermaid(doorDef()); again != got {
		t.Fatalf("Mermaid is not deterministic")
	}
	lines := strings.Split(got, "\n")
	if lines[0] != "%% Code generated by loopchart from the door machine definition. DO NOT EDIT." || lines[1] != "stateDiagram-v2" {
		t.Errorf("header:\n%s", got)
	}
	for _, want := range []string{
		"    [*] --> closed\n",
		"    opened : entry / start-timer\n",
		"    opened : exit / cancel-timer\n",
		"    state closed {\n        [*] --> unlocked\n        unlocked\n        locked\n    }\n",
		"    broken\n    broken --> [*]\n",
		"    locked --> unlocked : unlock [rightCode]\n    locked --> unlocked : unlock [masterKey]\n",
		"    closed --> closed : knock / beep (internal)\n",
		"    opened --> closed : tick [timerDue]\n",
		"    closed --> broken : kick\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Mermaid lacks %q\n%s", want, got)
		}
	}
	// Edges appear in definition order.
	last := -1
	for i := range d.Transitions {
		tr := d.Transitions[i]
		to := tr.To
		if to == "" {
			to = tr.From
		}
		prefix := fmt.Sprintf("    %s --> %s : %s", tr.From, to, tr.On)
		at := strings.Index(got[last+1:], prefix)
		if at < 0 {
			t.Errorf("edge %d (%s) missing or out of order", i, prefix)
			continue
		}
		last += 1 + at
	}
	// A colon in a label would end the Mermaid label; it is escaped.
	d.Transitions[0].Guard = &chart.Guard[door]{Name: "a:b", Test: func(*door, chart.Event) bool { return true }}
	if m := chart.Mermaid(d); !strings.Contains(m, "opened --> closed : close [a#58;b]\n") {
		t.Errorf("colon not escaped:\n%s", m)
	}
}

// ---------------------------------------------------------------------------
// ParseLine / Args

func TestParseLine(t *testing.T) {
	tests := []struct {
		line    string
		word    string
		args    chart.Args
		wantErr string
	}{
		{line: "open", word: "open", args: chart.Args{}},
		{line: "  unlock   code=42  ", word: "unlock", args: chart.Args{"code": "42"}},
		{line: "say loud", word: "say", args: chart.Args{"loud": "true"}},
		{line: `say text="hello world" loud`, word: "say", args: chart.Args{"text": "hello world", "loud": "true"}},
		{line: `say text="a \"q\" b"`, word: "say", args: chart.Args{"text": `a "q" b`}},
		{line: `say text="tab\there"`, word: "say", args: chart.Args{"text": "tab\there"}},
		{line: `say text="k=v"`, word: "say", args: chart.Args{"text": "k=v"}},
		{line: `x k=v=w`, word: "x", args: chart.Args{"k": "v=w"}},
		{line: `x empty= list=a,b`, word: "x", args: chart.Args{"empty": "", "list": "a,b"}},
		{line: `x a=1 a=2`, word: "x", args: chart.Args{"a": "2"}},
		{line: `x s=""`, word: "x", args: chart.Args{"s": ""}},
		{line: `x s="ü ✓"`, word: "x", args: chart.Args{"s": "ü ✓"}},
		{line: "", wantErr: "empty line"},
		{line: "   ", wantErr: "empty line"},
		{line: `say text="unterminated`, wantErr: `line "say text=\"unterminated"`},
		{line: `say text="a"b`, wantErr: "text:"},
		{line: `say text="bad \q"`, wantErr: "line"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			word, args, err := chart.ParseLine(tt.line)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseLine(%q) = %q %v %v; want error containing %q", tt.line, word, args, err, tt.wantErr)
				}
				if word != "" || args != nil {
					t.Errorf("error with results %q %v", word, args)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLine(%q): %v", tt.line, err)
			}
			if word != tt.word {
				t.Errorf("word = %q, want %q", word, tt.word)
			}
			if diff := cmp.Diff(tt.args, args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	a := chart.Args{"n": "42", "neg": "-3", "bad": "4x", "on": "true", "off": "false", "yes": "yes", "list": "a,b,,c", "empty": ""}
	ints := []struct {
		key     string
		def     int
		want    int
		wantErr string
	}{
		{"n", 7, 42, ""},
		{"neg", 7, -3, ""},
		{"absent", 7, 7, ""},
		{"bad", 7, 0, `bad="4x": not an integer`},
		{"empty", 7, 0, `empty="": not an integer`},
	}
	for _, tt := range ints {
		got, err := a.Int(tt.key, tt.def)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("Int(%s, %d) = %d, %v; want %d, %q", tt.key, tt.def, got, err, tt.want, tt.wantErr)
		}
	}
	bools := map[string]bool{"on": true, "off": false, "yes": true, "absent": false, "empty": true}
	for k, want := range bools {
		if got := a.Bool(k); got != want {
			t.Errorf("Bool(%s) = %v, want %v", k, got, want)
		}
	}
	lists := []struct {
		key  string
		want []string
	}{
		{"list", []string{"a", "b", "", "c"}},
		{"n", []string{"42"}},
		{"empty", nil},
		{"absent", nil},
	}
	for _, tt := range lists {
		if got := a.List(tt.key); !slices.Equal(got, tt.want) || (tt.want == nil) != (got == nil) {
			t.Errorf("List(%s) = %#v, want %#v", tt.key, got, tt.want)
		}
	}
	// ParseLine and Args together, as table files use them.
	_, args, err := chart.ParseLine(`new grace=5 tools="read,write" verbose`)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := args.Int("grace", 0); n != 5 || err != nil || !args.Bool("verbose") || !slices.Equal(args.List("tools"), []string{"read", "write"}) {
		t.Errorf("args %v", args)
	}
}

// ---------------------------------------------------------------------------
// Timer

func TestTimer(t *testing.T) {
	var seq uint64
	var tm chart.Timer
	var out chart.Out
	if tm.Pending() || tm.Matches("", 0) {
		t.Errorf("zero timer is pending or matches")
	}
	tm.Disarm(&out)
	if len(out.Effects) != 0 {
		t.Errorf("disarming an idle timer emitted %v", out.Effects)
	}

	tm.Arm(&seq, "idle", 5*time.Second, &out)
	if seq != 1 || tm != (chart.Timer{Name: "idle", Seq: 1, Delay: 5 * time.Second}) || !tm.Pending() {
		t.Errorf("after Arm: seq %d timer %+v", seq, tm)
	}
	tm.Arm(&seq, "idle", time.Minute, &out) // supersedes
	tests := []struct {
		name string
		seq  uint64
		want bool
	}{
		{"idle", 2, true},
		{"idle", 1, false}, // superseded
		{"other", 2, false},
		{"idle", 3, false},
		{"idle", 0, false},
	}
	for _, tt := range tests {
		if got := tm.Matches(tt.name, tt.seq); got != tt.want {
			t.Errorf("Matches(%s, %d) = %v, want %v", tt.name, tt.seq, got, tt.want)
		}
	}
	tm.Disarm(&out)
	if tm.Pending() || tm.Matches("idle", 2) || tm != (chart.Timer{}) {
		t.Errorf("after Disarm: %+v", tm)
	}
	tm.Disarm(&out) // no second cancel
	want := []chart.Effect{
		chart.StartTimer{Name: "idle", Seq: 1, Delay: 5 * time.Second},
		chart.StartTimer{Name: "idle", Seq: 2, Delay: time.Minute},
		chart.CancelTimer{Name: "idle", Seq: 2},
	}
	if diff := cmp.Diff(want, out.Effects); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	if got := out.Format(); got != "effect start-timer idle#1 after 5s\neffect start-timer idle#2 after 1m0s\neffect cancel-timer idle#2\n" {
		t.Errorf("Format = %q", got)
	}
	if (chart.StartTimer{}).EffectName() != "start-timer" || (chart.CancelTimer{}).EffectName() != "cancel-timer" {
		t.Errorf("effect names")
	}
	// A timer lives in the context, so it must survive JSON.
	tm.Arm(&seq, "t", 1500*time.Millisecond, &out)
	data, _ := json.Marshal(tm)
	var back chart.Timer
	if err := json.Unmarshal(data, &back); err != nil || back != tm {
		t.Errorf("JSON %s -> %+v, %v", data, back, err)
	}
	if string(data) != `{"name":"t","seq":3,"delay":1500000000}` {
		t.Errorf("JSON = %s", data)
	}
}

// ---------------------------------------------------------------------------
// Fuzz

func FuzzFire(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0x80, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 5, 4, 3, 3, 3, 9})
	f.Add([]byte{0x80 | 42, 2, 3, 0x20 | 3, 7, 4})
	m := mustDoor(f)
	leaves := m.Leaves()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 1024 {
			return
		}
		// The first byte seeds the context; each following byte picks a
		// trigger (low nibble; 10..15 are undeclared) and a payload.
		ctx := door{Code: int(data[0] & 0x7f), Flimsy: data[0]&0x80 != 0}
		var out chart.Out
		inst := m.New(ctx, &out)
		for _, b := range data[1:] {
			var tr chart.Trigger = "fly"
			if k := int(b & 0x0f); k < len(doorTriggers) {
				tr = doorTriggers[k]
			}
			e := ev{T: tr, Code: int(b >> 4), Name: "autoclose", Seq: uint64(b >> 4)}
			if b>>4 == 15 {
				e.Code = 999
			}
			inst.Ctx.Log = inst.Ctx.Log[:0] // keep each step O(1)
			before, beforeCtx := inst.State(), inst.Ctx.Clone()
			wasFinal := m.IsFinal(inst)
			out.Reset()
			err := m.Fire(inst, e, &out)
			switch {
			case err == nil:
				if wasFinal {
					t.Fatalf("fired %s in final state %s", tr, before)
				}
				if len(out.Transitions) != 1 {
					t.Fatalf("%d records for one Fire", len(out.Transitions))
				}
				r := out.Transitions[0]
				if r.From != before || r.To != inst.State() || r.Trigger != tr || (r.Internal && r.To != r.From) {
					t.Fatalf("record %+v for %s -> %s", r, before, inst.State())
				}
			case errors.Is(err, chart.ErrUnhandledTrigger), errors.Is(err, chart.ErrGuardRejected):
				var te *chart.TriggerError
				if !errors.As(err, &te) || te.State != before || te.Trigger != tr {
					t.Fatalf("%v: not a TriggerError for %s × %s", err, before, tr)
				}
				if inst.State() != before || !cmp.Equal(beforeCtx, inst.Ctx) || len(out.Effects) != 0 || len(out.Transitions) != 0 {
					t.Fatalf("%v changed the instance: %s -> %s", err, before, inst.State())
				}
				if m.Handles(before, tr) == errors.Is(err, chart.ErrUnhandledTrigger) {
					t.Fatalf("%v but Handles(%s, %s) = %v", err, before, tr, m.Handles(before, tr))
				}
			case errors.Is(err, chart.ErrGuardPanicked):
				// Guards run before anything changes.
				if inst.State() != before || !cmp.Equal(beforeCtx, inst.Ctx) || len(out.Effects) != 0 || len(out.Transitions) != 0 {
					t.Fatalf("%v changed the instance: %s -> %s", err, before, inst.State())
				}
			case errors.Is(err, chart.ErrActionPanicked):
				// The instance may be half updated: discard it.
				inst = m.New(ctx, &out)
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if !slices.Contains(leaves, inst.State()) {
				t.Fatalf("state %q is not a leaf", inst.State())
			}
			// Every reachable state survives a snapshot.
			if r, err := m.Restore(m.Snapshot(inst)); err != nil || r.State() != inst.State() {
				t.Fatalf("restore of %s: %v", inst.State(), err)
			}
		}
	})
}

// A final substate handles nothing, not even its superstate's triggers:
// work{busy*, done(final)} with work --cancel--> aborted.
func TestFinalSubstateIgnoresSuperstate(t *testing.T) {
	def := &chart.Def[shapes]{
		Name: "final-sub", Initial: "work",
		States: []chart.StateSpec[shapes]{
			{Name: "work", Initial: "busy"},
			{Name: "busy", Parent: "work"},
			{Name: "done", Parent: "work", Final: true},
			{Name: "aborted", Final: true},
		},
		Triggers: []chart.Trigger{"go", "cancel"},
		Transitions: []chart.Transition[shapes]{
			{From: "busy", On: "go", To: "done"},
			{From: "work", On: "cancel", To: "aborted"},
		},
	}
	m, err := chart.Build(def)
	if err != nil {
		t.Fatal(err)
	}
	var out chart.Out
	inst := m.New(shapes{}, &out)
	if err := m.Fire(inst, trig("go"), &out); err != nil {
		t.Fatal(err)
	}
	if !m.IsFinal(inst) || m.Handles("done", "cancel") {
		t.Fatalf("done: final=%t handles(cancel)=%t", m.IsFinal(inst), m.Handles("done", "cancel"))
	}
	if err := m.Fire(inst, trig("cancel"), &out); !errors.Is(err, chart.ErrUnhandledTrigger) || inst.State() != "done" {
		t.Fatalf("cancel in a final substate: err=%v state=%s", err, inst.State())
	}
	if err := m.Fire(inst, nil, &out); !errors.Is(err, chart.ErrUnhandledTrigger) {
		t.Fatalf("nil event: %v", err)
	}
	var never chart.Instance[shapes]
	var te *chart.TriggerError
	if err := m.Fire(&never, trig("go"), &out); !errors.As(err, &te) {
		t.Fatalf("unstarted instance: %v", err)
	}
}

// Table is the runner behind the machines' table tests: it renders fires,
// records coverage, checks invariants, and fails on bad lines and on
// round trips that change the instance.
func TestTable(t *testing.T) {
	parse := func(line string) (chart.Event, error) {
		name, a, err := chart.ParseLine(line)
		if err != nil {
			return nil, err
		}
		code, _ := a.Int("code", 0)
		return ev{T: chart.Trigger(name), Code: code}, nil
	}
	m := mustDoor(t)
	tab := &chart.Table[door]{M: m, Parse: parse}
	if got := tab.Start(door{Code: 7}); got != "state=unlocked\n" {
		t.Fatalf("Start = %q", got)
	}
	out, err := tab.Fire("lock\nunlock code=1\nunlock code=7\n\nnope")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"> lock\ndoor: unlocked --lock--> locked\n",
		"> unlock code=1\nerror [machine.guard_rejected]: ",
		"> unlock code=7\ndoor: locked --unlock[rightCode]--> unlocked\n",
		"> nope\nerror [machine.unhandled_trigger]: ",
		"state=unlocked\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Fire output lacks %q:\n%s", want, out)
		}
	}
	if tab.Taken() != 2 || len(tab.Untaken()) != len(doorDef().Transitions)-2 {
		t.Errorf("coverage: taken %d, untaken %d", tab.Taken(), len(tab.Untaken()))
	}
	if _, err := tab.Fire(`open "unterminated`); err == nil {
		t.Error("a line Parse rejects must fail the table")
	}
	if _, err := tab.Fire("jam"); !errors.Is(err, chart.ErrActionPanicked) {
		t.Errorf("a panicking action is a bug, not a refusal: got %v", err)
	}
	tab.Start(door{Code: 7})
	if _, err := tab.Fire("lock\njam"); !errors.Is(err, chart.ErrGuardPanicked) {
		t.Errorf("a panicking guard is a bug, not a refusal: got %v", err)
	}
	tab.Start(door{Code: 7})
	tab.Check = func(inst *chart.Instance[door]) error {
		if inst.State() == locked {
			return errors.New("never lock")
		}
		return nil
	}
	if _, err := tab.Fire("lock"); err == nil || !strings.Contains(err.Error(), "never lock") {
		t.Errorf("Check failure: got %v", err)
	}
	tab.Check = nil
	js, err := tab.RoundTrip(func(a, b door) string { return cmp.Diff(a, b) })
	if err != nil || !strings.Contains(js, `"machine":"door"`) {
		t.Errorf("RoundTrip = %q, %v", js, err)
	}
	if _, err := tab.RoundTrip(func(door, door) string { return "differs" }); err == nil {
		t.Error("RoundTrip must fail when the restored context differs")
	}
}

func TestSampler(t *testing.T) {
	d := doorDef()
	all := make([]chart.Event, len(d.Triggers))
	for i, tr := range d.Triggers {
		all[i] = ev{T: tr}
	}
	sample, err := chart.Sampler(d, all...)
	if err != nil || sample("knock").Trigger() != "knock" {
		t.Fatalf("Sampler: %v", err)
	}
	if _, err := chart.Sampler(d, all[1:]...); err == nil || !strings.Contains(err.Error(), "no sample") {
		t.Errorf("missing sample: %v", err)
	}
	if _, err := chart.Sampler(d, append(all, ev{T: "open"})...); err == nil || !strings.Contains(err.Error(), "two samples") {
		t.Errorf("duplicate sample: %v", err)
	}
	if _, err := chart.Sampler(d, append(all, ev{T: "stray"})...); err == nil {
		t.Error("a sample for an undeclared trigger must fail")
	}
}

var beeps = chart.NewStore[beep]()

// TestStore: effects emitted through a Store are *T pointers holding the
// values emitted, in order with the other effects; an array that fills up
// within a fire leaves the effects handed out intact; Reset drops them and
// reuses the storage (no allocation once grown); a zero Store still emits.
func TestStore(t *testing.T) {
	var out chart.Out
	for round := 0; round < 3; round++ {
		out.Reset()
		out.Emit(chart.CancelTimer{Name: "x", Seq: 1})
		for i := 0; i < 5; i++ {
			beeps.Emit(&out, beep{N: i})
		}
		if len(out.Effects) != 6 {
			t.Fatalf("round %d: %d effects", round, len(out.Effects))
		}
		for i, e := range out.Effects[1:] {
			b, ok := e.(*beep)
			if !ok || b.N != i {
				t.Fatalf("round %d: effect %d is %#v", round, i+1, e)
			}
		}
	}
	// Grown to hold five: a fire of five more costs nothing.
	if n := testing.AllocsPerRun(100, func() {
		out.Reset()
		for i := 0; i < 5; i++ {
			beeps.Emit(&out, beep{N: i})
		}
	}); n != 0 {
		t.Errorf("%v allocations per fire once grown", n)
	}
	var zero chart.Store[beep, *beep]
	out.Reset()
	zero.Emit(&out, beep{N: 7})
	if b, ok := out.Effects[0].(*beep); !ok || b.N != 7 {
		t.Errorf("zero Store emitted %#v", out.Effects[0])
	}
}
