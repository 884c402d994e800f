package agentsvc

import (
	"context"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// ErrorHandler handles a failed model request (or an empty reply). The
// first registered handler (in slot order) whose Match returns true
// decides: Handle may call ErrorContext.Retry to rebuild the history and
// continue at once; returning without Retry leaves the failure to the
// retry policy; an error fails the step's request with that error.
type ErrorHandler struct {
	ID     string
	Match  func(err *vocab.Error) bool
	Handle func(ctx context.Context, c *ErrorContext) error
}

// ErrorContext is what an error handler sees.
type ErrorContext struct {
	StepInfo
	Attempt int
	Err     *vocab.Error
	// History is the conversation the failed request was built from,
	// read-only.
	History vocab.History
	retry   bool
	rebuilt []vocab.Message
}

// Retry asks for another request at once with history (nil: the current
// history unchanged). The replacement is recorded as a history/replaced
// event.
func (c *ErrorContext) Retry(history []vocab.Message) {
	c.retry = true
	if history == nil {
		c.rebuilt = c.History.Messages()
		return
	}
	c.rebuilt = make([]vocab.Message, len(history))
	for i, m := range history {
		c.rebuilt[i] = vocab.CloneMessage(m)
	}
}

// RegisterLoopErrorHandler adds h with the ordering rules of hooks
// (hooks.Before / hooks.After an existing id; re-registering an id replaces
// it). The handle removes exactly this registration.
func (s *Service) RegisterLoopErrorHandler(h ErrorHandler, opts ...hooks.Option) (hooks.Handle, error) {
	if h.Match == nil || h.Handle == nil {
		return hooks.Handle{}, vocab.Errorf(vocab.CodeBadInput, "error handler %q needs Match and Handle", h.ID)
	}
	return s.errors.Register(h.ID, func(ctx context.Context, c *ErrorContext, next hooks.Next[*ErrorContext]) (*ErrorContext, error) {
		if !h.Match(c.Err) {
			return next(ctx, c)
		}
		return c, h.Handle(ctx, c)
	}, opts...)
}

func (s *Service) requestError(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	c := &ErrorContext{StepInfo: StepInfo(call.Info), Attempt: call.Attempt, Err: call.Err, History: call.History}
	c, err := s.errors.RunWaterfall(ctx, c, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil || !c.retry {
		return vocab.HookVerdict{}
	}
	return vocab.HookVerdict{Retry: true, History: c.rebuilt}
}

// Errors of a session, matched with errors.Is (each is a vocab code).
var (
	// ErrClosed: the session is closed.
	ErrClosed = vocab.CodeClosed.Err()
	// ErrAppendFailed: the session's log refused events; the session
	// stopped and can only be reopened from its log (Open).
	ErrAppendFailed = vocab.CodeAppendFailed.Err()
	// ErrClaimed: another live process holds the session (Open).
	ErrClaimed = vocab.CodeClaimed.Err()
	// ErrClaimLost: another writer took the session over; this one's
	// appends are refused.
	ErrClaimLost = vocab.CodeClaimLost.Err()
	// ErrLoadFailed: the session's log could not be read or folded (Open).
	ErrLoadFailed = vocab.CodeLoadFailed.Err()
	// ErrNotAwaiting: Approve named a tool call that is not awaiting
	// approval (never asked, answered already, or aborted).
	ErrNotAwaiting = vocab.CodeNotAwaiting.Err()
	// ErrBadInput: a caller's input is malformed (see the message).
	ErrBadInput = vocab.CodeBadInput.Err()
)
