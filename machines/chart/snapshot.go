package chart

import "fmt"

// Snapshot is the versioned, serialisable value of an instance. It holds the
// leaf state and the context (pending timers, collected outcomes, queues:
// whatever the machine keeps lives in its context). Encode it with
// encoding/json.
type Snapshot[C any] struct {
	Machine string `json:"machine"`
	Version int    `json:"version"`
	State   State  `json:"state"`
	Ctx     C      `json:"ctx"`
}

// Cloner is implemented by contexts that hold slices or maps, so that a
// snapshot does not share memory with the live instance.
type Cloner[C any] interface {
	Clone() C
}

// Validator is implemented by contexts that can check themselves after a
// restore (indexes in range, required fields present).
type Validator interface {
	Validate() error
}

// Snapshot captures inst.
func (m *Machine[C]) Snapshot(inst *Instance[C]) Snapshot[C] {
	c := inst.Ctx
	if cl, ok := any(&c).(Cloner[C]); ok {
		c = cl.Clone()
	}
	return Snapshot[C]{Machine: m.def.Name, Version: m.def.Version, State: inst.State(), Ctx: c}
}

// Restore rebuilds an instance from s without running any action. It
// refuses snapshots of another machine or version, and states that are not
// leaves of this machine, with errors wrapping ErrBadSnapshot.
func (m *Machine[C]) Restore(s Snapshot[C]) (*Instance[C], error) {
	if s.Machine != m.def.Name {
		return nil, fmt.Errorf("%w: snapshot of machine %q given to %q", ErrBadSnapshot, s.Machine, m.def.Name)
	}
	if s.Version != m.def.Version {
		return nil, fmt.Errorf("%w: %s snapshot version %d, want %d", ErrBadSnapshot, m.def.Name, s.Version, m.def.Version)
	}
	id, ok := m.stateIdx[s.State]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no state %q", ErrBadSnapshot, m.def.Name, s.State)
	}
	if m.states[id].initial != 0 {
		return nil, fmt.Errorf("%w: %s state %q is not a leaf", ErrBadSnapshot, m.def.Name, s.State)
	}
	inst := &Instance[C]{state: id, names: m.names, Ctx: s.Ctx}
	if v, ok := any(&inst.Ctx).(Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadSnapshot, m.def.Name, err)
		}
	}
	return inst, nil
}
