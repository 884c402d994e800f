package chart

import (
	"errors"
	"fmt"
	"strings"
)

// Describe names transition i of d as "from --trigger[guard]--> to", the
// form coverage reports use.
func Describe[C any](d *Def[C], i int) string {
	t := &d.Transitions[i]
	r := Record{From: t.From, To: t.To, Trigger: t.On, Internal: t.To == ""}
	if t.Guard != nil {
		r.Guard = t.Guard.Name
	}
	return r.String()
}

// Untaken lists, in definition order, the transitions of d whose index is
// not in taken. Table tests use it to prove every edge is exercised.
func Untaken[C any](d *Def[C], taken map[int]bool) []string {
	var out []string
	for i := range d.Transitions {
		if !taken[i] {
			out = append(out, Describe(d, i))
		}
	}
	return out
}

// CheckMatrix fires, for every leaf state and every declared trigger the
// state does not handle, sample(trigger) at an instance restored in that
// state with context zero, and reports every pair that did not yield
// ErrUnhandledTrigger or that changed the state. It returns the number of
// pairs checked and the failures.
func CheckMatrix[C any](m *Machine[C], sample func(Trigger) Event) (checked int, failures []string) {
	var zero C
	for _, s := range m.Leaves() {
		for _, t := range m.def.Triggers {
			if m.Handles(s, t) {
				continue
			}
			checked++
			inst, err := m.Restore(Snapshot[C]{Machine: m.def.Name, Version: m.def.Version, State: s, Ctx: zero})
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s × %s: restore: %v", s, t, err))
				continue
			}
			var out Out
			err = m.Fire(inst, sample(t), &out)
			var te *TriggerError
			switch {
			case !errors.Is(err, ErrUnhandledTrigger) || !errors.As(err, &te):
				failures = append(failures, fmt.Sprintf("%s × %s: got %v, want ErrUnhandledTrigger", s, t, err))
			case te.State != s || te.Trigger != t:
				failures = append(failures, fmt.Sprintf("%s × %s: error names %s × %s", s, t, te.State, te.Trigger))
			case inst.State() != s || len(out.Effects) > 0 || len(out.Transitions) > 0:
				failures = append(failures, fmt.Sprintf("%s × %s: instance moved to %s", s, t, inst.State()))
			}
		}
	}
	return checked, failures
}

// Format renders o for table tests: one line per transition, then one line
// per effect.
func (o *Out) Format() string {
	var b strings.Builder
	for _, r := range o.Transitions {
		fmt.Fprintf(&b, "%s: %s\n", r.Machine, r)
	}
	for _, e := range o.Effects {
		if s, ok := e.(fmt.Stringer); ok {
			fmt.Fprintf(&b, "effect %s\n", s)
		} else {
			fmt.Fprintf(&b, "effect %s %+v\n", e.EffectName(), e)
		}
	}
	return b.String()
}
