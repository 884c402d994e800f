package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// indexKinds are the events a session index reads: the transitions, the
// starts of turns (a new turn instance), the tool calls (a new tool
// instance) and the core snapshots (which record the machines' versions).
var indexKinds = []string{string(vocab.EventTransition), string(vocab.EventTurnStart), string(vocab.EventToolCall), string(vocab.EventSnapshot)}

// indexPage is how many events one query of an index catch-up reads.
const indexPage = 4096

// change is one logged transition.
type change struct {
	seq  uint64
	turn int
	p    vocab.TransitionPayload
	// tr is the transition's index in its machine's chosen definition,
	// -1 when no definition is chosen.
	tr int
}

// toolCall is one tool machine instance.
type toolCall struct {
	id, name   string
	turn, step int
	seq        uint64 // the event that made it known
	changes    []int  // indexes into sessionIndex.changes
}

// fit is the definition chosen to draw a machine of a session.
type fit struct {
	def     int // index into Handler.defs, -1: none
	problem string
}

// sessionIndex is a session's state changes, read once from its
// transition events and extended with the events logged since: the
// states as of any event are a binary search away, not a replay.
type sessionIndex struct {
	id vocab.ID

	mu   sync.Mutex
	upto uint64 // every indexed event up to this seq is in
	// changes are every transition, in order; agent and turn list the
	// indexes of their machine's.
	changes     []change
	agent, turn []int
	// turnStarts are the seqs of the turn/start events, turnNos their
	// turns.
	turnStarts []uint64
	turnNos    []int
	calls      []*toolCall
	callByID   map[string]*toolCall
	// versions are the machines' versions recorded by core snapshots.
	versions map[string]int
	fits     map[string]fit
	// checked[m] is how many of machine m's changes the fit has
	// matched.
	checked map[string]int
}

func newSessionIndex(id vocab.ID) *sessionIndex {
	return &sessionIndex{id: id, callByID: map[string]*toolCall{}, versions: map[string]int{},
		fits: map[string]fit{}, checked: map[string]int{}}
}

// catchUp reads the indexed events logged after upto, each page in its
// own short read transaction, and chooses the definitions again.
func (x *sessionIndex) catchUp(ctx context.Context, db *sqlite.ReadOnly, defs []*compiled) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		page, err := db.Events(ctx, x.id, sqlite.EventQuery{From: x.upto + 1, Limit: indexPage, KindPrefixes: indexKinds})
		if err != nil {
			return err
		}
		for _, r := range page.Records {
			if err := x.add(r.Seq, r.Turn, r.Step, r.Kind, r.Payload); err != nil {
				return err
			}
		}
		if !page.More {
			x.upto = max(x.upto, page.Head)
			break
		}
		x.upto = page.Records[len(page.Records)-1].Seq
	}
	for _, m := range machineNames {
		x.refit(m, defs)
	}
	return nil
}

// indexed is the seq the index reaches.
func (x *sessionIndex) indexed() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.upto
}

// add indexes one event.
func (x *sessionIndex) add(seq uint64, turn, step int, kind vocab.EventKind, payload []byte) error {
	bad := func(err error) error {
		return vocab.Errorf(vocab.CodeLoadFailed, "inspect: session %s event %d (%s): %w", x.id, seq, kind, err)
	}
	switch kind {
	case vocab.EventTransition:
		var p vocab.TransitionPayload
		if err := json.Unmarshal(payload, &p); err != nil {
			return bad(err)
		}
		i := len(x.changes)
		x.changes = append(x.changes, change{seq: seq, turn: turn, p: p, tr: -1})
		switch p.Machine {
		case "agent":
			x.agent = append(x.agent, i)
		case "turn":
			x.turn = append(x.turn, i)
		case "tool":
			c := x.call(p.Instance, seq, turn, step)
			c.changes = append(c.changes, i)
		}
	case vocab.EventTurnStart:
		x.turnStarts = append(x.turnStarts, seq)
		x.turnNos = append(x.turnNos, turn)
	case vocab.EventToolCall:
		var p vocab.ToolPayload
		if err := json.Unmarshal(payload, &p); err != nil {
			return bad(err)
		}
		c := x.call(p.Call.ID, seq, turn, step)
		if c.name == "" {
			c.name = p.Call.Name
		}
	case vocab.EventSnapshot:
		var p struct {
			Core struct {
				Agent *struct {
					Version int `json:"version"`
				} `json:"agent"`
				Turn *struct {
					Version int `json:"version"`
				} `json:"turn"`
				Batch []struct {
					Inst *struct {
						Version int `json:"version"`
					} `json:"inst"`
				} `json:"batch"`
			} `json:"core"`
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			return bad(err)
		}
		if p.Core.Agent != nil {
			x.versions["agent"] = p.Core.Agent.Version
		}
		if p.Core.Turn != nil {
			x.versions["turn"] = p.Core.Turn.Version
		}
		for _, b := range p.Core.Batch {
			if b.Inst != nil {
				x.versions["tool"] = b.Inst.Version
			}
		}
	}
	return nil
}

// call returns the tool call id, made known by the event seq.
func (x *sessionIndex) call(id string, seq uint64, turn, step int) *toolCall {
	c := x.callByID[id]
	if c == nil {
		c = &toolCall{id: id, seq: seq, turn: turn, step: step}
		x.callByID[id] = c
		x.calls = append(x.calls, c)
	}
	return c
}

// refit checks machine m's new changes against its chosen definition and,
// when one does not match, looks for a definition that explains every
// change of m (and agrees with the versions the snapshots recorded).
func (x *sessionIndex) refit(m string, defs []*compiled) {
	f, ok := x.fits[m]
	if ok && f.def < 0 {
		return // what no definition explained, none explains with more
	}
	if ok && f.def >= 0 && x.versionOK(m, defs[f.def]) {
		d := defs[f.def]
		fitsAll, seen := true, 0
		for i := range x.changes {
			c := &x.changes[i]
			if c.p.Machine != m {
				continue
			}
			seen++
			if seen <= x.checked[m] {
				continue
			}
			if c.tr, ok = d.match(c.p); !ok {
				fitsAll = false
				break
			}
		}
		if fitsAll {
			x.checked[m] = seen
			return
		}
	}
	// Choose again, over every change.
	first := fit{def: -1}
	for di, d := range defs {
		if d.Machine != m {
			continue
		}
		if bad, why := x.explain(m, d); bad {
			if first.problem == "" {
				first.problem = why
			}
			continue
		}
		x.fits[m] = fit{def: di}
		x.checked[m] = x.count(m)
		return
	}
	if first.problem == "" {
		first.problem = fmt.Sprintf("the inspector knows no definition of the %s machine", m)
	} else {
		first.problem += "; no definition the inspector knows explains this log, so its diagram cannot be drawn"
	}
	for i := range x.changes {
		if x.changes[i].p.Machine == m {
			x.changes[i].tr = -1
		}
	}
	x.fits[m] = first
	x.checked[m] = x.count(m)
}

// count is the number of changes of machine m.
func (x *sessionIndex) count(m string) int {
	switch m {
	case "agent":
		return len(x.agent)
	case "turn":
		return len(x.turn)
	}
	n := 0
	for _, c := range x.calls {
		n += len(c.changes)
	}
	return n
}

// versionOK reports whether d's version agrees with the one the log's
// snapshots recorded for its machine (if they recorded one).
func (x *sessionIndex) versionOK(m string, d *compiled) bool {
	v, ok := x.versions[m]
	return !ok || v == d.Version
}

// explain matches every change of m against d, setting their indexes;
// it reports a change d does not explain.
func (x *sessionIndex) explain(m string, d *compiled) (bad bool, why string) {
	if !x.versionOK(m, d) {
		return true, fmt.Sprintf("the log's snapshots record version %d of the %s machine; the inspector's definition is version %d", x.versions[m], m, d.Version)
	}
	for i := range x.changes {
		c := &x.changes[i]
		if c.p.Machine != m {
			continue
		}
		tr, ok := d.match(c.p)
		if !ok {
			return true, fmt.Sprintf("event %d (%s %s → %s on %s%s) is not a transition of the %s definition version %d",
				c.seq, m, c.p.From, c.p.To, c.p.Trigger, guardText(c.p.Guard), m, d.Version)
		}
		c.tr = tr
	}
	return false, ""
}

func guardText(g string) string {
	if g == "" {
		return ""
	}
	return " [" + g + "]"
}

// Taken is the last transition a machine instance took as of an event.
type Taken struct {
	// Seq is the transition's event.
	Seq uint64 `json:"seq"`
	// Index is the transition's index in the drawn definition (the SVG's
	// "<machine>-tr-<index>"), -1 when the log's definition is unknown.
	Index int `json:"index"`
	// From, To, Trigger, Guard and Internal are the event's.
	From     string `json:"from"`
	To       string `json:"to"`
	Trigger  string `json:"trigger"`
	Guard    string `json:"guard,omitempty"`
	Internal bool   `json:"internal,omitempty"`
}

// MachineState is where one machine instance stands as of an event.
type MachineState struct {
	// Machine is agent, turn or tool.
	Machine string `json:"machine"`
	// Instance is the tool call a tool machine shows; Turn the turn a
	// turn machine shows.
	Instance string `json:"instance,omitempty"`
	Turn     int    `json:"turn,omitempty"`
	// State is the leaf state, empty when there is no instance (no turn
	// yet, no tool call yet).
	State string `json:"state"`
	// Path is State and its superstates, innermost first.
	Path []string `json:"path,omitempty"`
	// Last is the last transition taken, nil when none.
	Last *Taken `json:"last,omitempty"`
	// Version is the version of the definition drawn, Drawable false
	// (and Problem saying why) when none explains the log.
	Version  int    `json:"version"`
	Drawable bool   `json:"drawable"`
	Problem  string `json:"problem,omitempty"`
}

// CallState is one tool call as of an event.
type CallState struct {
	// ID is the call's id, Name its tool's.
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Turn and Step are where the call was made, Seq the event that made
	// it known.
	Turn int    `json:"turn"`
	Step int    `json:"step"`
	Seq  uint64 `json:"seq"`
	// State is the call's tool machine state.
	State string `json:"state"`
}

// States is the answer of api/sessions/{id}/states.
type States struct {
	// Session is the session id.
	Session string `json:"session"`
	// At is the event the states are as of (after it applied), Head the
	// last event the index holds.
	At   uint64 `json:"at"`
	Head uint64 `json:"head"`
	// Turn is the turn as of At (0 before the first).
	Turn int `json:"turn"`
	// Machines are the agent, the turn and the tool machines, in that
	// order.
	Machines []MachineState `json:"machines"`
	// Calls are the tool calls of Turn known as of At, in order.
	Calls []CallState `json:"calls"`
}

// statesAt answers the states as of event at (0 or past the index: its
// end), showing tool call callID when given (else the call that moved
// last).
func (x *sessionIndex) statesAt(at uint64, callID string, defs []*compiled) States {
	x.mu.Lock()
	defer x.mu.Unlock()
	if at == 0 || at > x.upto {
		at = x.upto
	}
	out := States{Session: string(x.id), At: at, Head: x.upto}
	view := func(m string) (MachineState, *compiled) {
		ms := MachineState{Machine: m}
		f, ok := x.fits[m]
		if !ok {
			f = fit{def: -1}
			for di, d := range defs {
				if d.Machine == m && x.versionOK(m, d) {
					f = fit{def: di}
					break
				}
			}
		}
		if f.def < 0 {
			ms.Problem = f.problem
			return ms, nil
		}
		d := defs[f.def]
		ms.Version, ms.Drawable = d.Version, true
		return ms, d
	}
	// place sets ms from the changes idx (of one instance) as of at;
	// initial is the state before the first of them.
	place := func(ms *MachineState, d *compiled, idx []int, since uint64, initial string) {
		n := sort.Search(len(idx), func(i int) bool { return x.changes[idx[i]].seq > at })
		k := n - 1
		if k >= 0 && x.changes[idx[k]].seq > since {
			c := x.changes[idx[k]]
			ms.State = c.p.To
			ms.Last = &Taken{Seq: c.seq, Index: c.tr, From: c.p.From, To: c.p.To, Trigger: c.p.Trigger, Guard: c.p.Guard, Internal: c.p.Internal}
		} else {
			ms.State = initial
			// The instance's first transition says where it started.
			if n < len(idx) && x.changes[idx[n]].seq > since {
				ms.State = x.changes[idx[n]].p.From
			}
		}
		if ms.State != "" {
			ms.Path = []string{ms.State}
			if d != nil {
				ms.Path = d.path(ms.State)
			}
		}
	}
	initialOf := func(d *compiled) string {
		if d == nil {
			return ""
		}
		return d.initialLeaf(d.Initial)
	}

	agent, ad := view("agent")
	place(&agent, ad, x.agent, 0, initialOf(ad))

	turn, td := view("turn")
	t := sort.Search(len(x.turnStarts), func(i int) bool { return x.turnStarts[i] > at }) - 1
	if t >= 0 {
		out.Turn, turn.Turn = x.turnNos[t], x.turnNos[t]
		place(&turn, td, x.turn, x.turnStarts[t], initialOf(td))
	}

	tool, cd := view("tool")
	var shown *toolCall
	var best uint64
	for _, c := range x.calls {
		if c.seq > at {
			continue
		}
		if callID != "" {
			if c.id == callID {
				shown = c
			}
			continue
		}
		act := c.seq
		if n := sort.Search(len(c.changes), func(i int) bool { return x.changes[c.changes[i]].seq > at }); n > 0 {
			act = max(act, x.changes[c.changes[n-1]].seq)
		}
		if shown == nil || act >= best {
			shown, best = c, act
		}
	}
	if shown != nil {
		tool.Instance = shown.id
		place(&tool, cd, shown.changes, 0, initialOf(cd))
	}
	out.Machines = []MachineState{agent, turn, tool}

	out.Calls = []CallState{}
	for _, c := range x.calls {
		if c.seq > at || c.turn != out.Turn {
			continue
		}
		var ms MachineState
		place(&ms, cd, c.changes, 0, initialOf(cd))
		out.Calls = append(out.Calls, CallState{ID: c.id, Name: c.name, Turn: c.turn, Step: c.step, Seq: c.seq, State: ms.State})
	}
	return out
}

// chosen returns the index of the definition drawn for machine m, or -1
// and why none is.
func (x *sessionIndex) chosen(m string, defs []*compiled) (int, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f, ok := x.fits[m]; ok {
		return f.def, f.problem
	}
	for di, d := range defs {
		if d.Machine == m && x.versionOK(m, d) {
			return di, ""
		}
	}
	return -1, fmt.Sprintf("the inspector knows no definition of the %s machine", m)
}
