package chart

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Table drives one instance of a machine from a transition table: it is the
// runner behind every machine's table tests (the datadriven glue stays in
// the test file; Table holds everything else, and stays pure). It records
// which definition transitions the tables took, for coverage.
type Table[C any] struct {
	M *Machine[C]
	// Parse turns one table line into an event.
	Parse func(line string) (Event, error)
	// Summary renders the instance after new and fire; nil prints
	// "state=LEAF".
	Summary func(*Instance[C]) string
	// Check, if set, runs after every accepted event; an error fails the
	// table (machine invariants).
	Check func(*Instance[C]) error
	// Inst is the instance being driven.
	Inst  *Instance[C]
	taken map[int]bool
}

func (t *Table[C]) summary() string {
	if t.Summary != nil {
		return t.Summary(t.Inst)
	}
	return fmt.Sprintf("state=%s\n", t.Inst.State())
}

// Start makes a new instance with context c and renders its entry effects
// and summary.
func (t *Table[C]) Start(c C) string {
	var out Out
	t.Inst = t.M.New(c, &out)
	return out.Format() + t.summary()
}

// Fire feeds one event per non-empty input line and renders, per line, the
// line, then the transitions and effects or the typed error; then the
// summary. It fails on a line Parse rejects, on an error that is not a
// *TriggerError (a bug, not a refusal), and on a failed Check.
func (t *Table[C]) Fire(input string) (string, error) {
	if t.taken == nil {
		t.taken = map[int]bool{}
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		ev, err := t.Parse(line)
		if err != nil {
			return "", fmt.Errorf("line %q: %w", line, err)
		}
		fmt.Fprintf(&b, "> %s\n", line)
		var out Out
		if err := t.M.Fire(t.Inst, ev, &out); err != nil {
			var te *TriggerError
			if !errors.As(err, &te) {
				return "", fmt.Errorf("line %q: untyped error: %w", line, err)
			}
			fmt.Fprintf(&b, "error [%s]: %v\n", te.Code(), err)
			continue
		}
		for _, r := range out.Transitions {
			t.taken[r.Index] = true
		}
		b.WriteString(out.Format())
		if t.Check != nil {
			if err := t.Check(t.Inst); err != nil {
				return "", fmt.Errorf("after %q: %w", line, err)
			}
		}
	}
	b.WriteString(t.summary())
	return b.String(), nil
}

// RoundTrip snapshots the instance, encodes it to JSON, decodes and
// restores it, and continues with the restored instance. diff compares the
// live and restored contexts ("" when equal). It returns the JSON.
func (t *Table[C]) RoundTrip(diff func(live, restored C) string) (string, error) {
	data, err := json.Marshal(t.M.Snapshot(t.Inst))
	if err != nil {
		return "", fmt.Errorf("marshal: %w", err)
	}
	var back Snapshot[C]
	if err := json.Unmarshal(data, &back); err != nil {
		return "", fmt.Errorf("unmarshal: %w", err)
	}
	restored, err := t.M.Restore(back)
	if err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	if d := diff(t.Inst.Ctx, restored.Ctx); d != "" || restored.State() != t.Inst.State() {
		return "", fmt.Errorf("round trip changed the instance (state %s -> %s; -live +restored):\n%s", t.Inst.State(), restored.State(), d)
	}
	t.Inst = restored
	return string(data) + "\n", nil
}

// Taken returns how many distinct transitions the tables took.
func (t *Table[C]) Taken() int { return len(t.taken) }

// Untaken lists the definition's transitions no table took.
func (t *Table[C]) Untaken() []string { return Untaken(t.M.def, t.taken) }

// Sampler returns, for the matrix, a function that gives the sample event
// of a trigger. It fails unless samples hold exactly one event per declared
// trigger of d.
func Sampler[C any](d *Def[C], samples ...Event) (func(Trigger) Event, error) {
	by := map[Trigger]Event{}
	for _, ev := range samples {
		if _, dup := by[ev.Trigger()]; dup {
			return nil, fmt.Errorf("%s: two samples for trigger %q", d.Name, ev.Trigger())
		}
		by[ev.Trigger()] = ev
	}
	for _, tr := range d.Triggers {
		if by[tr] == nil {
			return nil, fmt.Errorf("%s: no sample for trigger %q", d.Name, tr)
		}
	}
	if len(by) != len(d.Triggers) {
		return nil, fmt.Errorf("%s: %d samples for %d triggers", d.Name, len(by), len(d.Triggers))
	}
	return func(tr Trigger) Event { return by[tr] }, nil
}
