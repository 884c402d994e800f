package chart

import (
	"errors"
	"fmt"
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrUnhandledTrigger: the current state (and its superstates) defines no
	// transition for the trigger. The instance is unchanged.
	ErrUnhandledTrigger = errors.New("unhandled trigger")
	// ErrGuardRejected: transitions exist for the trigger but every guard
	// failed. The instance is unchanged.
	ErrGuardRejected = errors.New("guard rejected")
	// ErrBadDefinition: a Def is inconsistent; Build refuses it.
	ErrBadDefinition = errors.New("bad machine definition")
	// ErrBadSnapshot: a snapshot cannot be restored.
	ErrBadSnapshot = errors.New("bad snapshot")
	// ErrGuardPanicked: a guard panicked while Fire chose a transition. No
	// transition was taken and the instance is unchanged (unless the
	// guard itself wrote to the context before it panicked). The error is
	// a *GuardPanicError.
	ErrGuardPanicked = errors.New("guard panicked")
	// ErrActionPanicked: an entry, exit or transition action panicked; the
	// instance may be partially updated and should be discarded. Its vocab
	// code is CodeInternal (vocab.CodeOf's answer for errors without a
	// code): a panicking action is a bug.
	ErrActionPanicked = errors.New("action panicked")
)

// TriggerError is returned by Fire when a trigger cannot be taken. It
// matches ErrUnhandledTrigger or ErrGuardRejected, and the vocab codes
// CodeUnhandledTrigger or CodeGuardRejected.
type TriggerError struct {
	Machine string
	State   State
	Trigger Trigger
	// Guards names the guards that failed (ErrGuardRejected only).
	Guards []string
	kind   error
}

// Error implements error.
func (e *TriggerError) Error() string {
	if e.kind == ErrGuardRejected {
		return fmt.Sprintf("%s: state %q, trigger %q: guard rejected: [%s]", e.Machine, e.State, e.Trigger, strings.Join(e.Guards, " "))
	}
	return fmt.Sprintf("%s: state %q does not handle trigger %q", e.Machine, e.State, e.Trigger)
}

// Is matches the sentinel of its kind and the matching vocab code.
func (e *TriggerError) Is(target error) bool {
	if target == e.kind {
		return true
	}
	var ve *vocab.Error
	if errors.As(target, &ve) && ve != nil && ve.Message == "" {
		return ve.Code == e.Code()
	}
	return false
}

// Code returns the stable vocab code of the error.
func (e *TriggerError) Code() vocab.Code {
	if e.kind == ErrGuardRejected {
		return vocab.CodeGuardRejected
	}
	return vocab.CodeUnhandledTrigger
}

// ErrorCode returns Code; it is how vocab.CodeOf finds the code of a
// TriggerError anywhere in an error chain.
func (e *TriggerError) ErrorCode() vocab.Code { return e.Code() }

// GuardPanicError is returned by Fire when a guard panics. It matches
// ErrGuardPanicked and the vocab code CodeGuardPanicked. The instance is
// unchanged and nothing was appended to the Out.
type GuardPanicError struct {
	Machine string
	// State is the instance's current leaf state.
	State   State
	Trigger Trigger
	// Guard names the guard that panicked.
	Guard string
	// Value is the value the guard panicked with.
	Value any
}

// Error implements error.
func (e *GuardPanicError) Error() string {
	return fmt.Sprintf("%s: state %q, trigger %q: guard %q panicked: %v", e.Machine, e.State, e.Trigger, e.Guard, e.Value)
}

// Is matches ErrGuardPanicked and the CodeGuardPanicked sentinel.
func (e *GuardPanicError) Is(target error) bool {
	if target == ErrGuardPanicked {
		return true
	}
	var ve *vocab.Error
	if errors.As(target, &ve) && ve != nil && ve.Message == "" {
		return ve.Code == vocab.CodeGuardPanicked
	}
	return false
}

// ErrorCode returns vocab.CodeGuardPanicked.
func (e *GuardPanicError) ErrorCode() vocab.Code { return vocab.CodeGuardPanicked }

func defErr(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadDefinition, name, fmt.Sprintf(format, args...))
}
