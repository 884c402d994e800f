// Package stateless is a minimal stand-in for github.com/qmuntal/stateless.
package stateless

// StateMachine is a stub state machine.
type StateMachine struct{ state any }

// NewStateMachine returns a stub state machine in the given state.
func NewStateMachine(initial any) *StateMachine { return &StateMachine{state: initial} }

// State returns the current state.
func (sm *StateMachine) State() any { return sm.state }
