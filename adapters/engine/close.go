package engine

import (
	"context"
	"errors"
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// Close aborts what runs with cause disposed, cancels every piece of work
// and waits until all of it has ended. When ctx ends first, Close stops
// waiting: every prompt is resolved, every event stream ended, and the
// work that ignored its cancellation is reported by name (work/stuck
// events, and an error matching ErrStuck). A tool or hook that calls Close
// with the context it was given gets ErrReentrant.
func (e *Engine) Close(ctx context.Context) error {
	if reentrant(ctx, e) {
		return vocab.Errorf(vocab.CodeReentrant, "Close called from a tool or hook of its own session")
	}
	err := e.callCtx(ctx, item{in: vocab.Input{Kind: vocab.InClose, At: e.opt.Clock.Now(), ID: e.newID()}})
	if ctx.Err() != nil && err != nil && errors.Is(err, context.Cause(ctx)) {
		// The lane did not take the close in time (a sink that hangs in
		// Append, say): cancel everything, the append's context included.
		cause := vocab.Errorf(vocab.CodeStuck, "close deadline passed")
		e.stopAll(cause)
		e.cancelAll(cause)
		e.forceMu.Do(func() { close(e.force) })
		return vocab.Errorf(vocab.CodeStuck, "close deadline passed before the session took the close (the lane was busy: a hung event sink append?): %w", err)
	}
	if err != nil && vocab.CodeOf(err) != vocab.CodeClosed {
		// The session had already stopped on a failure: wait for its work.
		e.waitWorkers(ctx)
		return err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		e.forceMu.Do(func() { close(e.force) })
		<-e.done
	}
	e.quiesce(ctx)
	if len(e.stuck) > 0 {
		names := make([]string, len(e.stuck))
		for i, s := range e.stuck {
			names[i] = s.What
		}
		return vocab.Errorf(vocab.CodeStuck, "closed with work that ignored its cancellation: %s", strings.Join(names, ", "))
	}
	return nil
}

// quiesce waits, at most until ctx ends, for the goroutine that stepped
// the stop to leave the lane: e.done is closed inside its drive, and
// Close returns only once nothing drives the lane any more (a caller that
// reads Stats after Close sees it at rest).
func (e *Engine) quiesce(ctx context.Context) {
	e.mu.Lock()
	if !e.driving {
		e.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	e.waiters = append(e.waiters, ch) // the drive wakes them on its way out: e.err is set
	e.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// BeginClose starts the close Close does and returns once the session
// took it: from then on it takes no input and starts no work, and its
// work is being cancelled. A later Close waits for the rest. Closing many
// sessions at once, a caller begins every close before it waits for any,
// so none of them starts work while another is still closing.
func (e *Engine) BeginClose(ctx context.Context) error {
	if reentrant(ctx, e) {
		return vocab.Errorf(vocab.CodeReentrant, "BeginClose called from a tool or hook of its own session")
	}
	err := e.callCtx(ctx, item{in: vocab.Input{Kind: vocab.InClose, At: e.opt.Clock.Now(), ID: e.newID()}})
	if err != nil && vocab.CodeOf(err) == vocab.CodeClosed {
		return nil
	}
	return err
}

// stopper waits for every piece of work to end (or the close deadline),
// then tells the core the session's work has stopped.
func (e *Engine) stopper() {
	all := e.workDone()
	select {
	case <-all:
	case <-e.force:
	}
	e.mu.Lock()
	var stuck []vocab.StuckWork
	e.running.Each(func(id uint64, wk *worker) {
		stuck = append(stuck, vocab.StuckWork{Work: id, What: wk.what()})
	})
	e.mu.Unlock()
	sortStuck(stuck)
	e.stuck = stuck
	growStack() // this goroutine drives the lane through the close
	_ = e.post(&item{in: vocab.Input{Kind: vocab.InStopped, At: e.opt.Clock.Now(), Stuck: stuck}}, nil, nil)
}

func sortStuck(s []vocab.StuckWork) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Work < s[j-1].Work; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// waitWorkers waits for every piece of work to end, or ctx.
func (e *Engine) waitWorkers(ctx context.Context) {
	select {
	case <-e.workDone():
	case <-ctx.Done():
	}
}
