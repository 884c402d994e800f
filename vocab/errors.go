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
	// CodeLoopCriticalRepeat: loop detection found a critical tool loop a
	// second time in one run; the run stopped. Not retryable.
	CodeLoopCriticalRepeat Code = "loop.critical_repeat"
	// CodeRunTimeout: a prompt's run went past its wall-clock timeout
	// (default 48 h) and was cancelled. Not retryable.
	CodeRunTimeout Code = "run.timeout"
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
	// CodeStreamIdle: a model reply's stream went silent for longer than
	// the session allows (no first part within the first-token timeout,
	// or no next part within the chunk timeout) and was cut off.
	// Retryable: the retry policy tries the request again.
	CodeStreamIdle Code = "llm.stream_idle"
	// CodeSyntax: the provider's answer could not be understood. Not retryable.
	CodeSyntax Code = "llm.syntax"
	// CodeContextOverflow: the request does not fit the model's context.
	CodeContextOverflow Code = "llm.context_overflow"
	// CodeQuotaExhausted: the account has no quota left.
	CodeQuotaExhausted Code = "llm.quota_exhausted"
	// CodeRequestRejected: the provider rejected the request (4xx).
	CodeRequestRejected Code = "llm.request_rejected"
	// CodeAuth: the provider refused the credentials (401, 403, or an
	// authentication or permission error type). Not retryable.
	CodeAuth Code = "llm.auth"
	// CodeModelNotFound: the provider does not know the model, or the key
	// may not use it (404, or a not-found error type). Not retryable.
	CodeModelNotFound Code = "llm.model_not_found"
	// CodeRefusal: the model refused to answer (finish reason refusal).
	// Not retryable.
	CodeRefusal Code = "llm.refusal"
	// CodeFiltered: the provider filtered the answer.
	CodeFiltered Code = "llm.filtered"
	// CodeProviderError: the reply ended with finish reason error.
	CodeProviderError Code = "llm.provider_error"
	// CodeAborted: the reply ended with finish reason aborted.
	CodeAborted Code = "llm.aborted"
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
	// CodeToolSkipped: the call was not run because an earlier call of its
	// batch stopped the batch.
	CodeToolSkipped Code = "tool.skipped"
	// CodeToolNoResult: the tool returned nothing usable (a nil result
	// where one was due).
	CodeToolNoResult Code = "tool.no_result"
	// CodeToolRefused: a workspace tool refused a path (outside the
	// workspace, through a symlink, not a regular file) or an input over
	// its limits.
	CodeToolRefused Code = "tool.refused"
	// CodeNotAwaiting: an approval named a call that is not awaiting one.
	CodeNotAwaiting Code = "tool.not_awaiting_approval"
	// CodeSpill: a large output could not be written to the spill store.
	CodeSpill Code = "tool.spill_failed"
	// CodeUnhandledTrigger: a machine got a trigger its current state does not
	// handle.
	CodeUnhandledTrigger Code = "machine.unhandled_trigger"
	// CodeGuardRejected: every transition for the trigger had a failing guard.
	CodeGuardRejected Code = "machine.guard_rejected"
	// CodeGuardPanicked: a guard panicked while a machine chose a transition.
	// The instance is unchanged; the guard has a bug.
	CodeGuardPanicked Code = "machine.guard_panicked"
	// CodeBadSnapshot: a snapshot could not be restored.
	CodeBadSnapshot Code = "machine.bad_snapshot"
	// CodeBadInput: a caller, file or model gave malformed input.
	CodeBadInput Code = "input.bad"
	// CodeDuplicateID: a caller re-used an id that is queued, running or
	// already used.
	CodeDuplicateID Code = "input.duplicate_id"
	// CodeNotQueued: a withdraw named an input that is not queued (already
	// claimed by a step, or never queued).
	CodeNotQueued Code = "input.not_queued"
	// CodeStale: an input names work that is no longer outstanding.
	CodeStale Code = "input.stale"
	// CodeAppendFailed: the event sink refused a batch; the session stopped.
	CodeAppendFailed Code = "log.append_failed"
	// CodeNoSession: the store holds no session with that id.
	CodeNoSession Code = "log.no_session"
	// CodeLoadFailed: the session exists but its log could not be read or
	// folded (a damaged file, an undecodable event, a gap). It is never
	// replaced by a blank session.
	CodeLoadFailed Code = "log.load_failed"
	// CodeClaimLost: the writer's claim is no longer the session's (a
	// newer writer took it over); its append was refused.
	CodeClaimLost Code = "log.claim_lost"
	// CodeClaimed: a live writer in another process holds the session.
	CodeClaimed Code = "log.claimed"
	// CodeSequence: an append did not start at the session's next
	// sequence number.
	CodeSequence Code = "log.sequence"
	// CodeSchema: the store's schema is newer than this binary knows, or
	// not a loopchart store at all.
	CodeSchema Code = "log.schema"
	// CodeDiverged: replaying a log's inputs derived an event different
	// from the recorded one.
	CodeDiverged Code = "log.diverged"
	// CodeClosed: the session or service is closed.
	CodeClosed Code = "agent.closed"
	// CodeNotIdle: the operation needs an idle agent.
	CodeNotIdle Code = "agent.not_idle"
	// CodeCancelled: the work was cancelled.
	CodeCancelled Code = "agent.cancelled"
	// CodeReentrant: a tool or hook called a blocking method of its own
	// session.
	CodeReentrant Code = "agent.reentrant"
	// CodeStuck: work ignored cancellation past the close deadline.
	CodeStuck Code = "agent.stuck"
	// CodeDropped: an event subscriber fell behind and was dropped.
	CodeDropped Code = "events.dropped"
	// CodeBlocked: a prompt was blocked by a hook.
	CodeBlocked Code = "prompt.blocked"
	// CodeHook: a hook failed or panicked.
	CodeHook Code = "hook.failed"
	// CodeInternal: a bug in loopchart; please report it.
	CodeInternal Code = "internal"
)

// Error is loopchart's typed error. Match it by code with errors.Is against a
// Code-only sentinel made by (Code).Err, or inspect it with errors.As.
//
// Every method is safe on a nil *Error, which behaves as an internal error:
// a typed nil returned as an error is a bug, but it must not panic.
//
// Error encodes to JSON as {"code", "message", "retryable", "retryAfter",
// "status"}; Cause is not encoded (an error interface cannot be decoded),
// so a decoded Error has no cause.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Retryable reports whether the retry policy may try the request again.
	Retryable bool `json:"retryable,omitempty"`
	// RetryAfter is a provider-suggested delay; zero when absent.
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// Status is the provider's HTTP status when there is one.
	Status int `json:"status,omitempty"`
	// Cause is the underlying error, if any. It is not encoded.
	Cause error `json:"-"`
}

// nilErrorText is what a nil *Error says about itself.
const nilErrorText = string(CodeInternal) + ": nil *vocab.Error"

// Error implements error.
func (e *Error) Error() string {
	if e == nil {
		return nilErrorText
	}
	msg := e.Message
	if msg == "" && e.Cause != nil {
		msg = e.Cause.Error()
	}
	if msg == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + msg
}

// Unwrap returns the cause; nil for a nil *Error.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Cause
}

// ErrorCode returns the error's code, CodeInternal for a nil *Error. It is
// the method CodeOf looks for.
func (e *Error) ErrorCode() Code {
	if e == nil {
		return CodeInternal
	}
	return e.Code
}

// Is matches another *Error with the same code; a target with an empty
// message and no cause (a sentinel) matches every error of its code. A nil
// *Error matches the CodeInternal sentinel only.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) || t == nil {
		return false
	}
	if e == nil {
		return t.Code == CodeInternal && t.Message == "" && t.Cause == nil
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

// coder is implemented by errors that carry a stable code: *Error, and
// typed errors of packages vocab cannot import (such as the machines'
// trigger errors).
type coder interface{ ErrorCode() Code }

// CodeOf returns the stable code of err: the code of the first error in
// err's chain that has an ErrorCode method (every *Error has one), else
// CodeCancelled for context cancellation (context.Canceled,
// context.DeadlineExceeded, or a CancelCause), else CodeInternal. It
// returns "" for a nil err. An ErrorCode method that returns "" counts as
// no code.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var c coder
	if errors.As(err, &c) {
		if code := c.ErrorCode(); code != "" {
			return code
		}
	}
	var e *Error
	if errors.As(err, &e) && e.ErrorCode() != "" {
		return e.ErrorCode()
	}
	if isCancellation(err) {
		return CodeCancelled
	}
	return CodeInternal
}

// isCancellation reports whether err's chain holds context.Canceled,
// context.DeadlineExceeded or a CodeCancelled error (a CancelCause).
func isCancellation(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, CodeCancelled.Err())
}

// nilErrorMessage is the message AsError gives a nil *Error.
const nilErrorMessage = "a nil *vocab.Error was returned as an error"

// AsError says what a provider's error means to the retry policy: it
// returns err as an *Error.
//
//   - A nil err gives nil.
//   - If err's chain holds an *Error, the first one is returned as is.
//   - If that *Error is a typed nil, the result is a CodeInternal error
//     (not retryable): a bug in whoever returned it.
//   - Context cancellation (context.Canceled, context.DeadlineExceeded or
//     a CancelCause anywhere in the chain) gives CodeCancelled, not
//     retryable, with err as its cause.
//   - Any other error gives CodeTransport, retryable, with err's text as
//     its message and err as its cause: an error the provider did not
//     classify is taken to be the network's.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e == nil {
			return &Error{Code: CodeInternal, Message: nilErrorMessage}
		}
		return e
	}
	if isCancellation(err) {
		return &Error{Code: CodeCancelled, Message: err.Error(), Cause: err}
	}
	return &Error{Code: CodeTransport, Message: err.Error(), Retryable: true, Cause: err}
}

// retryableStatus lists the HTTP statuses the retry policy retries.
var retryableStatus = map[int]bool{408: true, 409: true, 429: true, 500: true, 502: true, 503: true, 504: true, 529: true}

// StatusError classifies a provider's HTTP status into an *Error: 408, 409,
// 429, 500, 502, 503, 504 and 529 are retryable, everything else is not;
// 401 and 403 are CodeAuth, 404 CodeModelNotFound, 413 CodeContextOverflow,
// 402 CodeQuotaExhausted. A provider adapter classifies by the provider's
// own error type first and falls back on this.
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
	case status == 401 || status == 403:
		code = CodeAuth
	case status == 404:
		code = CodeModelNotFound
	}
	return &Error{Code: code, Message: message, Status: status, RetryAfter: retryAfter, Retryable: retryableStatus[status]}
}
