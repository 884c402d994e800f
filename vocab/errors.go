package vocab

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error code. Codes are part of the public
// contract: they appear in logs and results and never change meaning.
type Code string

// Stable error codes.
const (
	// CodeMaxStepsExceeded: a turn reached the configured max steps with
	// nothing new to say. Not retryable.
	CodeMaxStepsExceeded Code = "loop.max_steps_exceeded"
	// CodeAgentBusy: the agent cannot take this request now. Retryable.
	CodeAgentBusy Code = "turn.agent_busy"
	// CodeEmptyResponse: the model answered with no content and no tool call.
	CodeEmptyResponse Code = "llm.empty_response"
	// CodeRateLimited: the provider answered 429 or 529.
	CodeRateLimited Code = "llm.rate_limited"
	// CodeServer: the provider answered with a retryable server status.
	CodeServer Code = "llm.server"
	// CodeTransport: the request did not reach the provider or broke mid-stream.
	CodeTransport Code = "llm.transport"
	// CodeTimeout: the provider timed out (408).
	CodeTimeout Code = "llm.timeout"
	// CodeSyntax: the provider's answer could not be understood. Not retryable.
	CodeSyntax Code = "llm.syntax"
	// CodeContextOverflow: the request does not fit the model's context.
	CodeContextOverflow Code = "llm.context_overflow"
	// CodeQuotaExhausted: the account has no quota left.
	CodeQuotaExhausted Code = "llm.quota_exhausted"
	// CodeRequestRejected: the provider rejected the request (4xx).
	CodeRequestRejected Code = "llm.request_rejected"
	// CodeFiltered: the provider filtered the answer.
	CodeFiltered Code = "llm.filtered"
	// CodeToolUnknown: the model called a tool that is not registered.
	CodeToolUnknown Code = "tool.unknown"
	// CodeToolBadArguments: the tool call's arguments are not valid.
	CodeToolBadArguments Code = "tool.bad_arguments"
	// CodeToolFailed: the tool returned an error or panicked.
	CodeToolFailed Code = "tool.failed"
	// CodeToolAborted: the tool call was aborted (started or not).
	CodeToolAborted Code = "tool.aborted"
	// CodeToolDenied: a before-hook or a person denied the call.
	CodeToolDenied Code = "tool.denied"
	// CodeToolMaxTokens: the call was not executed because the reply hit the
	// output token limit.
	CodeToolMaxTokens Code = "tool.not_executed_max_tokens"
	// CodeUnhandledTrigger: a machine got a trigger its current state does not
	// handle.
	CodeUnhandledTrigger Code = "machine.unhandled_trigger"
	// CodeGuardRejected: every transition for the trigger had a failing guard.
	CodeGuardRejected Code = "machine.guard_rejected"
	// CodeBadSnapshot: a snapshot could not be restored.
	CodeBadSnapshot Code = "machine.bad_snapshot"
	// CodeBadInput: a caller, file or model gave malformed input.
	CodeBadInput Code = "input.bad"
	// CodeClosed: the session or service is closed.
	CodeClosed Code = "agent.closed"
	// CodeNotIdle: the operation needs an idle agent.
	CodeNotIdle Code = "agent.not_idle"
	// CodeCancelled: the work was cancelled.
	CodeCancelled Code = "agent.cancelled"
	// CodeBlocked: a prompt was blocked by a hook.
	CodeBlocked Code = "prompt.blocked"
	// CodeHook: a hook failed or panicked.
	CodeHook Code = "hook.failed"
	// CodeInternal: a bug in loopchart; please report it.
	CodeInternal Code = "internal"
)

// Error is loopchart's typed error. Match it by code with errors.Is against a
// Code-only sentinel made by (Code).Err, or inspect it with errors.As.
type Error struct {
	Code    Code
	Message string
	// Retryable reports whether the retry policy may try the request again.
	Retryable bool
	// RetryAfter is a provider-suggested delay; zero when absent.
	RetryAfter time.Duration
	// Status is the provider's HTTP status when there is one.
	Status int
	// Cause is the underlying error, if any.
	Cause error
}

// Error implements error.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Cause != nil {
		msg = e.Cause.Error()
	}
	if msg == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches another *Error with the same code; a target with an empty
// message and no cause (a sentinel) matches every error of its code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	if t.Message == "" && t.Cause == nil {
		return t.Code == e.Code // a sentinel: every error of its code
	}
	return t.Code == e.Code && t.Message == e.Message
}

// Err returns a sentinel for c: errors.Is(err, c.Err()) is true for every
// *Error carrying code c.
func (c Code) Err() error { return &Error{Code: c} }

// Errorf makes an *Error with code c and a formatted message. A %w verb sets
// the cause.
func Errorf(c Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	cause := errors.Unwrap(err)
	if _, multi := err.(interface{ Unwrap() []error }); multi {
		cause = err // several %w: keep them all reachable
	}
	return &Error{Code: c, Message: err.Error(), Cause: cause}
}

// CodeOf returns the code of the first *Error in err's chain, CodeCancelled
// for context cancellation, or CodeInternal for any other non-nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, CodeCancelled.Err()) {
		return CodeCancelled
	}
	return CodeInternal
}

// retryableStatus lists the HTTP statuses the retry policy retries.
var retryableStatus = map[int]bool{408: true, 409: true, 429: true, 500: true, 502: true, 503: true, 504: true, 529: true}

// StatusError classifies a provider's HTTP status into an *Error: 408, 409,
// 429, 500, 502, 503, 504 and 529 are retryable, everything else is not.
func StatusError(status int, retryAfter time.Duration, message string) *Error {
	code := CodeRequestRejected
	switch {
	case status == 408:
		code = CodeTimeout
	case status == 429 || status == 529:
		code = CodeRateLimited
	case status >= 500:
		code = CodeServer
	case status == 413:
		code = CodeContextOverflow
	case status == 402:
		code = CodeQuotaExhausted
	}
	return &Error{Code: code, Message: message, Status: status, RetryAfter: retryAfter, Retryable: retryableStatus[status]}
}
