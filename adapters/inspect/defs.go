package inspect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// Definition is a machine definition as the inspector draws it and
// matches logged transitions against: plain data taken from a chart.Def
// (see DefinitionOf).
type Definition struct {
	// Machine is the machine's name as transition events record it:
	// "agent", "turn" or "tool".
	Machine string
	// Version is the definition's version (chart.Def.Version, the
	// snapshot format version of the machine's context).
	Version int
	// Initial is the top-level state entered first.
	Initial string
	// States are the states, superstates before or after their
	// substates.
	States []DefState
	// Transitions are the transitions in the order the machine resolves
	// them (see chart.Def).
	Transitions []DefTransition
}

// DefState is one state of a Definition.
type DefState struct {
	// Name is the state's name, as transition events record it.
	Name string
	// Parent is the superstate, empty for a top-level state.
	Parent string
	// Initial is the substate entered with this state, empty for a leaf.
	Initial string
	// Final marks a terminal state.
	Final bool
	// Notes are the entry and exit effects ("entry / run-gate").
	Notes []string
}

// DefTransition is one transition of a Definition; its index in
// Definition.Transitions is the one the SVG's ids carry.
type DefTransition struct {
	// From is the state the transition is declared on, On its trigger.
	From, On string
	// To is empty for an internal transition.
	To string
	// Guard names the guard, empty for none.
	Guard string
	// Effects name the effects its action may ask for.
	Effects []string
}

// Internal reports whether t leaves no state.
func (t DefTransition) Internal() bool { return t.To == "" }

// DefinitionOf converts a chart definition.
func DefinitionOf[C any](d *chart.Def[C]) Definition {
	out := Definition{Machine: d.Name, Version: d.Version, Initial: string(d.Initial)}
	for _, s := range d.States {
		ds := DefState{Name: string(s.Name), Parent: string(s.Parent), Initial: string(s.Initial), Final: s.Final}
		if s.Entry != nil && len(s.Entry.Effects) > 0 {
			ds.Notes = append(ds.Notes, "entry / "+strings.Join(s.Entry.Effects, ", "))
		}
		if s.Exit != nil && len(s.Exit.Effects) > 0 {
			ds.Notes = append(ds.Notes, "exit / "+strings.Join(s.Exit.Effects, ", "))
		}
		out.States = append(out.States, ds)
	}
	for _, t := range d.Transitions {
		dt := DefTransition{From: string(t.From), On: string(t.On), To: string(t.To)}
		if t.Guard != nil {
			dt.Guard = t.Guard.Name
		}
		if t.Action != nil {
			dt.Effects = append(dt.Effects, t.Action.Effects...)
		}
		out.Transitions = append(out.Transitions, dt)
	}
	return out
}

// BuiltinDefinitions returns the agent, turn and tool definitions of this
// build, in that order.
func BuiltinDefinitions() []Definition {
	return []Definition{DefinitionOf(agent.Definition), DefinitionOf(turn.Definition), DefinitionOf(tool.Definition)}
}

// machineNames are the machines the inspector draws, in page order.
var machineNames = []string{"agent", "turn", "tool"}

// compiled is a Definition with its lookups.
type compiled struct {
	Definition
	states map[string]*DefState
	// byFrom[state] lists the transitions declared on state, in
	// definition order.
	byFrom map[string][]int
	// ids maps a state to its element id, and back.
	stateID map[string]string
	idState map[string]string
}

func compile(d Definition) (*compiled, error) {
	c := &compiled{Definition: d, states: map[string]*DefState{}, byFrom: map[string][]int{},
		stateID: map[string]string{}, idState: map[string]string{}}
	if d.Machine == "" {
		return nil, fmt.Errorf("inspect: a definition without a machine name")
	}
	for i := range c.States {
		s := &c.States[i]
		if _, dup := c.states[s.Name]; dup || s.Name == "" {
			return nil, fmt.Errorf("inspect: %s definition v%d: state %q declared twice or empty", d.Machine, d.Version, s.Name)
		}
		c.states[s.Name] = s
		id := d.Machine + "-state-" + idPart(s.Name)
		if _, taken := c.idState[id]; taken {
			id = d.Machine + "-state-" + strconv.Itoa(i)
		}
		c.stateID[s.Name], c.idState[id] = id, s.Name
	}
	for i := range c.States {
		s := &c.States[i]
		if s.Parent != "" && c.states[s.Parent] == nil || s.Initial != "" && c.states[s.Initial] == nil {
			return nil, fmt.Errorf("inspect: %s definition v%d: state %s names an unknown parent or initial state", d.Machine, d.Version, s.Name)
		}
	}
	if c.states[d.Initial] == nil {
		return nil, fmt.Errorf("inspect: %s definition v%d: unknown initial state %q", d.Machine, d.Version, d.Initial)
	}
	for i, t := range c.Transitions {
		if c.states[t.From] == nil || t.To != "" && c.states[t.To] == nil {
			return nil, fmt.Errorf("inspect: %s definition v%d: transition %d names an unknown state", d.Machine, d.Version, i)
		}
		c.byFrom[t.From] = append(c.byFrom[t.From], i)
	}
	return c, nil
}

// idPart makes name safe inside an element id: letters, digits, _ and -
// stay, anything else becomes _.
func idPart(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// path returns state and its ancestors, innermost first (just state when
// it is unknown).
func (c *compiled) path(state string) []string {
	out := []string{state}
	for s := c.states[state]; s != nil && s.Parent != ""; s = c.states[s.Parent] {
		out = append(out, s.Parent)
		if len(out) > len(c.States) {
			break // a cycle: compile does not check for them
		}
	}
	return out
}

// initialLeaf is the leaf entered when state is entered.
func (c *compiled) initialLeaf(state string) string {
	for i := 0; i <= len(c.States); i++ {
		s := c.states[state]
		if s == nil || s.Initial == "" {
			return state
		}
		state = s.Initial
	}
	return state
}

// within reports whether state is anc or one of its descendants.
func (c *compiled) within(state, anc string) bool {
	for _, s := range c.path(state) {
		if s == anc {
			return true
		}
	}
	return false
}

// match returns the index of the transition a logged transition took,
// resolved as the machine resolves it: declared on the leaf first, then
// on each superstate, the first of a state's transitions for the trigger
// whose guard the event names; the destination must agree.
func (c *compiled) match(p vocab.TransitionPayload) (int, bool) {
	if c.states[p.From] == nil {
		return -1, false
	}
	for _, s := range c.path(p.From) {
		for _, i := range c.byFrom[s] {
			t := &c.Transitions[i]
			if t.On != p.Trigger || t.Guard != p.Guard || t.Internal() != p.Internal {
				continue
			}
			if t.Internal() || c.within(p.To, t.To) {
				return i, true
			}
		}
	}
	return -1, false
}

// dotQuote quotes s as a DOT string.
func dotQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// recordEscape escapes the characters a record label gives meaning to.
func recordEscape(s string) string {
	return strings.NewReplacer(`{`, `\{`, `}`, `\}`, `|`, `\|`, `<`, `\<`, `>`, `\>`).Replace(s)
}

// edgeLabel renders "trigger [guard] / effect, effect".
func edgeLabel(t *DefTransition) string {
	var b strings.Builder
	b.WriteString(t.On)
	if t.Guard != "" {
		b.WriteString(" [" + t.Guard + "]")
	}
	if len(t.Effects) > 0 {
		b.WriteString(" / " + strings.Join(t.Effects, ", "))
	}
	if t.Internal() {
		b.WriteString(" (internal)")
	}
	return b.String()
}

// transitionID is the element id of transition i of machine.
func transitionID(machine string, i int) string { return machine + "-tr-" + strconv.Itoa(i) }

// DOT renders the definition for the inspector: the layout of
// chart.DOT, with an id and a class on every state ("<machine>-state-<name>",
// class "state"; composite states are clusters with class "state
// composite") and every transition ("<machine>-tr-<index>", class
// "transition"), so that the page can light them.
func (c *compiled) DOT() string {
	var b strings.Builder
	m := c.Machine
	fmt.Fprintf(&b, "digraph %s {\n\tcompound=true;\n\trankdir=\"LR\";\n\tfontname=\"Helvetica\";\n\tfontsize=12;\n\tid=%s;\n", dotQuote(m), dotQuote(m+"-graph"))
	b.WriteString("\tnode [shape=Mrecord, fontname=\"Helvetica\", fontsize=12];\n\tedge [fontname=\"Helvetica\", fontsize=10];\n\n")
	fmt.Fprintf(&b, "\t\"__init\" [label=\"\", shape=point, id=%s, class=\"init\"];\n", dotQuote(m+"-init"))
	hasChildren := map[string]bool{}
	for _, s := range c.States {
		if s.Parent != "" {
			hasChildren[s.Parent] = true
		}
	}
	var writeStates func(parent, indent string, depth int)
	writeStates = func(parent, indent string, depth int) {
		if depth > len(c.States) {
			return
		}
		for i := range c.States {
			s := &c.States[i]
			if s.Parent != parent {
				continue
			}
			id := c.stateID[s.Name]
			if hasChildren[s.Name] {
				fmt.Fprintf(&b, "%ssubgraph %s {\n", indent, dotQuote("cluster_"+s.Name))
				label := strings.Join(append([]string{s.Name}, s.Notes...), "\n")
				fmt.Fprintf(&b, "%s\tid=%s;\n%s\tclass=\"state composite\";\n%s\tlabel=%s;\n%s\tstyle=\"dashed\";\n",
					indent, dotQuote(id), indent, indent, dotQuote(label), indent)
				fmt.Fprintf(&b, "%s\t%s [label=\"\", shape=point, id=%s, class=\"init\"];\n", indent, dotQuote(s.Name+".__init"), dotQuote(m+"-init-"+idPart(s.Name)))
				writeStates(s.Name, indent+"\t", depth+1)
				fmt.Fprintf(&b, "%s}\n", indent)
				continue
			}
			fields := []string{recordEscape(s.Name)}
			for _, n := range s.Notes {
				fields = append(fields, recordEscape(n))
			}
			extra, class := "", "state"
			if s.Final {
				extra, class = ", peripheries=2", "state final"
			}
			fmt.Fprintf(&b, "%s%s [id=%s, class=%s, label=%s%s];\n", indent, dotQuote(s.Name), dotQuote(id), dotQuote(class),
				dotQuote("{"+strings.Join(fields, "|")+"}"), extra)
		}
	}
	writeStates("", "\t", 0)
	b.WriteString("\n")
	node := func(s string) (string, string) {
		if hasChildren[s] {
			return s + ".__init", "cluster_" + s
		}
		return s, ""
	}
	fmt.Fprintf(&b, "\t\"__init\" -> %s [id=%s, class=\"init\"];\n", dotQuote(node1(node(c.Initial))), dotQuote(m+"-init-edge"))
	for _, s := range c.States {
		if s.Initial != "" {
			fmt.Fprintf(&b, "\t%s -> %s [id=%s, class=\"init\"];\n", dotQuote(s.Name+".__init"), dotQuote(node1(node(s.Initial))), dotQuote(m+"-init-edge-"+idPart(s.Name)))
		}
	}
	for i := range c.Transitions {
		t := &c.Transitions[i]
		from, ltail := node(t.From)
		to, lhead := node(t.To)
		attrs := []string{"id=" + dotQuote(transitionID(m, i)), `class="transition"`, "label=" + dotQuote(edgeLabel(t))}
		if t.Internal() {
			to, lhead = from, ltail
			attrs = append(attrs, `style="dotted"`)
		}
		if ltail != "" {
			attrs = append(attrs, "ltail="+dotQuote(ltail))
		}
		if lhead != "" && lhead != ltail {
			attrs = append(attrs, "lhead="+dotQuote(lhead))
		}
		fmt.Fprintf(&b, "\t%s -> %s [%s];\n", dotQuote(from), dotQuote(to), strings.Join(attrs, ", "))
	}
	b.WriteString("}\n")
	return b.String()
}

// node1 returns the first of a pair.
func node1(a, _ string) string { return a }
