package vocab

import (
	"fmt"
	"strconv"
)

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
	// FinishPause: the provider paused a long turn (Anthropic's
	// pause_turn). The model owes more: the turn takes another step with
	// the reply as it is, even without new input.
	FinishPause FinishReason = "pause"
	// FinishRefusal: the model refused to answer (a safety classifier
	// stopped it). The turn fails with CodeRefusal; not retryable.
	FinishRefusal FinishReason = "refusal"
	// FinishContextOverflow: the reply stopped because the model's
	// context window is full (a 200 with a context-window finish). The
	// turn fails with CodeContextOverflow, which an error handler may
	// answer by compacting the history and trying again.
	FinishContextOverflow FinishReason = "context-overflow"
	// FinishInterrupted ends a step that got no reply: it was cancelled,
	// its request failed, or it was cut off.
	FinishInterrupted FinishReason = "interrupted"
)

// Valid reports whether f is one of the defined finish reasons.
func (f FinishReason) Valid() bool {
	switch f {
	case FinishStop, FinishToolCalls, FinishMaxTokens, FinishError, FinishAborted, FinishFiltered, FinishInterrupted,
		FinishPause, FinishRefusal, FinishContextOverflow:
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
	// CancelInterrupted: the process running the session stopped (a
	// crash); recovery on reopen closes what it left open.
	CancelInterrupted CancelKind = "interrupted"
	// CancelTimeout: the run's wall-clock timeout ran out; the run's
	// prompt ends failed with CodeRunTimeout.
	CancelTimeout CancelKind = "timeout"
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
	// EndYielded: a tool result asked to yield (ToolResult.Yield). The
	// turn's prompt stays open; the next turn resumes it.
	EndYielded EndKind = "yielded"
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

// PromptKind says how a submitted prompt ended.
type PromptKind string

// Prompt outcomes.
const (
	PromptCompleted PromptKind = "completed"
	PromptFailed    PromptKind = "failed"
	PromptCancelled PromptKind = "cancelled"
	PromptBlocked   PromptKind = "blocked"
)

// PromptResult is how a submitted prompt ended: completed{steps, truncated,
// stopReason} | failed{steps, error} | cancelled{steps, reason} | blocked.
type PromptResult struct {
	Kind  PromptKind `json:"kind"`
	Steps int        `json:"steps"`
	// Truncated reports that the last reply hit the output token limit.
	Truncated bool `json:"truncated,omitempty"`
	// StopReason is the first reason a tool or hook gave to stop the turn.
	StopReason string `json:"stopReason,omitempty"`
	// Err is set for failed prompts.
	Err *Error `json:"error,omitempty"`
	// Reason is set for cancelled prompts.
	Reason *CancelCause `json:"reason,omitempty"`
	// Detail explains a blocked prompt.
	Detail string `json:"detail,omitempty"`
}

// completedSteps[n] is the String of a plain completed result of n steps.
var completedSteps = func() (ss [16]string) {
	for i := range ss {
		ss[i] = "completed{steps=" + strconv.Itoa(i) + "}"
	}
	return ss
}()

// String renders the result compactly, e.g. "completed{steps=2}".
func (r PromptResult) String() string {
	switch r.Kind {
	case PromptCompleted:
		// Appended, not formatted: a completed prompt's result is logged at
		// every turn's end (the plain results of short turns are made once).
		if !r.Truncated && r.StopReason == "" && r.Steps >= 0 && r.Steps < len(completedSteps) {
			return completedSteps[r.Steps]
		}
		var buf [64]byte
		b := buf[:0]
		b = append(b, "completed{steps="...)
		b = strconv.AppendInt(b, int64(r.Steps), 10)
		if r.Truncated {
			b = append(b, " truncated"...)
		}
		if r.StopReason != "" {
			b = append(b, " stop="...)
			b = append(b, r.StopReason...)
		}
		return string(append(b, '}'))
	case PromptFailed:
		return fmt.Sprintf("failed{steps=%d error=%v}", r.Steps, r.Err)
	case PromptCancelled:
		reason := ""
		if r.Reason != nil {
			reason = r.Reason.String()
		}
		return fmt.Sprintf("cancelled{steps=%d reason=%s}", r.Steps, reason)
	}
	if r.Detail != "" {
		return "blocked{" + r.Detail + "}"
	}
	return string(r.Kind)
}
