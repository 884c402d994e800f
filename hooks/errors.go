package hooks

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap one of these (or the
// context cause) and can be tested with [errors.Is].
var (
	// ErrEmptyID reports a registration with an empty ID.
	ErrEmptyID = errors.New("empty hook id")
	// ErrNilHandler reports a registration with a nil handler.
	ErrNilHandler = errors.New("nil hook handler")
	// ErrConflictingOrder reports a registration given more than one ordering
	// option (for example both Before and After).
	ErrConflictingOrder = errors.New("conflicting order options")
	// ErrUnknownTarget reports a Before or After option whose target ID is
	// not currently registered in the slot (ignoring the entry being
	// replaced, see [Slot.Register]).
	ErrUnknownTarget = errors.New("unknown order target")
	// ErrNextCalledTwice reports a second call of a waterfall [Next]
	// continuation by the same handler invocation.
	ErrNextCalledTwice = errors.New("next called more than once")
)

// Error is the error type returned for registration failures and for misuse
// of [Next]. Err is one of the package's sentinel errors, so
// errors.Is(err, ErrUnknownTarget) and similar checks work.
type Error struct {
	// Slot is the name of the slot involved.
	Slot string
	// Op is the operation that failed: "register" or "next".
	Op string
	// ID is the hook ID being registered, or whose next was misused.
	ID string
	// Target is the ID named by the Before or After option, if exactly one
	// was given; it is empty otherwise.
	Target string
	// Err is the sentinel describing the failure.
	Err error
}

// Error implements the error interface. The message names the slot, the ID
// and, when set, the order target.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hooks: slot %q: %s %q", e.Slot, e.Op, e.ID)
	if e.Target != "" {
		fmt.Fprintf(&b, " (target %q)", e.Target)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// PanicError reports a panic recovered from a handler or terminal. It is
// returned in place of the panic; use [errors.As] to retrieve it.
type PanicError struct {
	// Slot is the name of the slot whose handler panicked.
	Slot string
	// ID is the ID of the handler that panicked; it is empty when the
	// waterfall terminal panicked.
	ID string
	// Value is the value passed to panic.
	Value any
	// Stack is the stack trace captured at the point of recovery.
	Stack []byte
}

// Error implements the error interface.
func (e *PanicError) Error() string {
	who := fmt.Sprintf("hook %q", e.ID)
	if e.ID == "" {
		who = "terminal"
	}
	return fmt.Sprintf("hooks: slot %q: %s panicked: %v", e.Slot, who, e.Value)
}

// Unwrap returns the panic value if it is an error, so that
// errors.Is(err, target) sees through panic(target). Otherwise it returns nil.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}
