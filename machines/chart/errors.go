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
	// ErrActionPanicked: a guard or action panicked; the instance may be
	// partially updated and should be discarded.
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
	if errors.As(target, &ve) && ve.Message == "" {
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

func defErr(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadDefinition, name, fmt.Sprintf(format, args...))
}
