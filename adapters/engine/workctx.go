package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// workCtx is the context of one piece of work: a child of the engine's
// work context (which marks it with the engine, see reentrant) that the
// lane cancels with a cause. It is part of its worker, so starting work
// costs no allocation for it: the cancellable context behind it (a
// context.WithCancelCause, whose Done, Value and cause are the ones every
// caller gets) is made only when something asks for more than Err or the
// engine mark, which a step whose provider and tool never look at their
// context does not. A cancel that comes first is recorded and applied to
// that context as it is made, cause included.
type workCtx struct {
	e *Engine
	// id is the work's id (for a tool call's Detach).
	id uint64
	mu sync.Mutex
	// real is the cancellable context once made, stop its cancel func.
	real context.Context
	stop context.CancelCauseFunc
	// cause is the cause of a cancel that came before real was made
	// (nil: context.Canceled).
	cause error
	// state says whether real was made (ctxMade, set under mu after
	// real) and whether a cancel came before (ctxCancelled). Err, which
	// a model request asks for with every part, reads it instead of
	// taking mu, and the cancel of work that ended, whose context nobody
	// made, is one compare-and-swap from 0.
	state atomic.Uint32
}

// The bits of workCtx.state.
const (
	ctxMade uint32 = 1 << iota
	ctxCancelled
)

var _ context.Context = (*workCtx)(nil)

// init readies c for work id of e.
func (c *workCtx) init(e *Engine, id uint64) { c.e, c.id = e, id }

// ctx returns the cancellable context, making it (cancelled already when
// a cancel came first).
func (c *workCtx) ctx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		c.real, c.stop = context.WithCancelCause(c.e.workCtx)
		for {
			st := c.state.Load()
			if st&ctxCancelled != 0 {
				cause := c.cause
				if cause == nil {
					cause = context.Canceled
				}
				c.stop(cause)
				c.cause = nil
				c.state.Store(st | ctxMade) // a state not 0 changes only under mu
				break
			}
			if c.state.CompareAndSwap(0, ctxMade) {
				break
			}
			// A cancel's compare-and-swap came first: apply it.
		}
	}
	return c.real
}

// cancel cancels the work with cause (context.Canceled when nil).
func (c *workCtx) cancel(cause error) {
	if cause == nil && c.state.CompareAndSwap(0, ctxCancelled) {
		return // nobody made the context, nor cancelled it: now cancelled
	}
	c.mu.Lock()
	if c.real != nil {
		stop := c.stop
		c.mu.Unlock()
		stop(cause)
		return
	}
	if c.state.Load()&ctxCancelled == 0 {
		c.cause = cause
		c.state.Store(ctxCancelled)
	}
	c.mu.Unlock()
}

// Deadline implements context.Context: work has no deadline of its own.
func (c *workCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *workCtx) Done() <-chan struct{} { return c.ctx().Done() }

// Err implements context.Context.
func (c *workCtx) Err() error {
	st := c.state.Load()
	switch {
	case st&ctxMade != 0:
		return c.real.Err() // written before the bit, never again
	case st&ctxCancelled != 0:
		return context.Canceled
	}
	return nil
}

// Value implements context.Context. The engine mark is answered here;
// anything else (context.Cause asks for the cancellable context behind
// it) is the cancellable context's.
func (c *workCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c.e
	}
	return c.ctx().Value(key)
}
