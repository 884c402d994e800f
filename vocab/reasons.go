package vocab

import "fmt"

// FinishReason is why the model stopped one reply.
type FinishReason string

// Finish reasons.
const (
	FinishStop      FinishReason = "stop"
	FinishToolCalls FinishReason = "tool-calls"
	FinishMaxTokens FinishReason = "max-tokens"
	FinishError     FinishReason = "error"
	FinishAborted   FinishReason = "aborted"
	FinishFiltered  FinishReason = "filtered"
)

// Valid reports whether f is one of the defined finish reasons.
func (f FinishReason) Valid() bool {
	switch f {
	case FinishStop, FinishToolCalls, FinishMaxTokens, FinishError, FinishAborted, FinishFiltered:
		return true
	}
	return false
}

// CancelKind says who cancelled.
type CancelKind string

// Cancel kinds.
const (
	CancelUser     CancelKind = "user"
	CancelParent   CancelKind = "parent"
	CancelHook     CancelKind = "hook"
	CancelDisposed CancelKind = "disposed"
)

// CancelCause says who cancelled and, for a hook, why.
type CancelCause struct {
	Kind   CancelKind `json:"kind"`
	Reason string     `json:"reason,omitempty"`
}

// String renders the cause as "user" or "hook(reason)".
func (c CancelCause) String() string {
	if c.Reason != "" {
		return fmt.Sprintf("%s(%s)", c.Kind, c.Reason)
	}
	return string(c.Kind)
}

// Error makes CancelCause usable as the cause of a cancelled context.
func (c CancelCause) Error() string { return "cancelled by " + c.String() }

// Is matches CodeCancelled sentinels, so errors.Is(cause, CodeCancelled.Err())
// holds for a cancelled context's cause.
func (c CancelCause) Is(target error) bool {
	return target == errCancelled || errorsIsCode(target, CodeCancelled)
}

var errCancelled = CodeCancelled.Err()

func errorsIsCode(target error, c Code) bool {
	e, ok := target.(*Error)
	return ok && e.Code == c && e.Message == ""
}

// EndKind says how a turn ended.
type EndKind string

// Turn end kinds.
const (
	EndCompleted   EndKind = "completed"
	EndBlocked     EndKind = "blocked"
	EndAborted     EndKind = "aborted"
	EndError       EndKind = "error"
	EndMaxTokens   EndKind = "max-tokens"
	EndInterrupted EndKind = "interrupted"
)

// TurnEnd is why a turn ended. Cause is set for EndAborted; Code and Message
// for EndError.
type TurnEnd struct {
	Kind    EndKind      `json:"kind"`
	Cause   *CancelCause `json:"cause,omitempty"`
	Code    Code         `json:"code,omitempty"`
	Message string       `json:"message,omitempty"`
}

// String renders the end as "completed", "aborted{user}" or
// "error{code: message}".
func (e TurnEnd) String() string {
	switch {
	case e.Kind == EndAborted && e.Cause != nil:
		return "aborted{" + e.Cause.String() + "}"
	case e.Kind == EndError:
		return fmt.Sprintf("error{%s: %s}", e.Code, e.Message)
	}
	return string(e.Kind)
}
