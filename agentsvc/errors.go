package agentsvc

import (
	"context"
	"slices"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// ErrorHandler handles a failed model request. The first registered handler
// (in slot order) whose Match returns true decides: Handle may call
// ErrorContext.Retry to rebuild the history and continue at once; returning
// without Retry leaves the failure to the retry policy.
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
	// History is a copy of the conversation the failed request was built
	// from.
	History []vocab.Message
	retry   bool
	rebuilt []vocab.Message
}

// Retry asks for another request at once with history (nil: the current
// history unchanged).
func (c *ErrorContext) Retry(history []vocab.Message) {
	c.retry = true
	if history == nil {
		history = c.History
	}
	c.rebuilt = slices.Clone(history)
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

func (s *Service) requestError(ctx context.Context, f engine.FailureContext) ([]vocab.Message, bool, error) {
	if s.errors.Len() == 0 {
		return nil, false, nil
	}
	c := &ErrorContext{StepInfo: f.StepInfo, Attempt: f.Attempt, Err: f.Err, History: f.History}
	c, err := s.errors.RunWaterfall(ctx, c, nil)
	if err != nil || c == nil {
		return nil, false, err
	}
	return c.rebuilt, c.retry, nil
}
