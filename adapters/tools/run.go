package tools

import (
	"context"
	"sync"
)

// runKey is the context key of a call's run state.
type runKey struct{}

// runState is what a running call can reach through its context: where
// its progress goes and, when the caller offers it, how to detach.
type runState struct {
	progress func(string)
	detach   *detacher // nil: detaching is not offered
}

// detacher lets a call detach at most once.
type detacher struct {
	mu   sync.Mutex
	to   Detacher
	done bool
}

// try asks the caller to detach; it reports whether the call is now
// detached by this attempt.
func (d *detacher) try(ack string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return false
	}
	if d.to.Detach(ack) {
		d.done = true
		return true
	}
	return false
}

// Detacher is what a running call asks to detach from its turn (see
// WithRun and RunCtx.Init): Detach returns true when the call is now
// detached, false when the caller refused.
type Detacher interface {
	Detach(ack string) bool
}

// DetachFunc adapts a function to Detacher.
type DetachFunc func(ack string) bool

// Detach implements Detacher.
func (f DetachFunc) Detach(ack string) bool { return f(ack) }

// WithRun returns a copy of ctx through which a running tool call reports
// progress (Progress) and may detach from its turn (Detach).
//
// progress receives each progress text; nil means progress is dropped.
// detach is called at most once successfully: it returns true when the
// call is now detached (it goes on in the background and ack stands in for
// its result meanwhile), false when the caller refused. A nil detach means
// the caller offers no detaching. Both must be safe to call from the
// tool's goroutines.
func WithRun(ctx context.Context, progress func(string), detach func(ack string) bool) context.Context {
	// One allocation for the context, its run state and the detacher
	// (this runs for every tool call).
	rc := new(RunCtx)
	if detach == nil {
		return rc.Init(ctx, progress, nil)
	}
	return rc.Init(ctx, progress, DetachFunc(detach))
}

// RunCtx is the context WithRun makes, for a caller that keeps it in a
// value of its own (a record it allocates per call anyway): Init readies
// it. Its zero value is ready for Init; it must not be copied once
// initialised.
type RunCtx struct{ c runCtx }

// Init readies c as WithRun(ctx, progress, detach) would make it, with
// detach (nil: no detaching offered) a Detacher, and returns the context.
// It is called once per call, before the context is used.
func (c *RunCtx) Init(ctx context.Context, progress func(string), detach Detacher) context.Context {
	c.c = runCtx{Context: ctx, st: runState{progress: progress}}
	if detach != nil {
		c.c.d.to = detach
		c.c.st.detach = &c.c.d
	}
	return &c.c
}

// runCtx is the context WithRun returns: ctx with the run state as the
// value of runKey (what context.WithValue would make, in the same
// allocation as the state). Everything else, cancellation and its cause
// included, is its parent's.
type runCtx struct {
	context.Context
	st runState
	d  detacher
}

// Value implements context.Context.
func (c *runCtx) Value(key any) any {
	if key == (runKey{}) {
		return &c.st
	}
	return c.Context.Value(key)
}

// withProgress returns ctx with its progress func replaced by progress,
// keeping the detaching ctx already offers (and its once-only state). A
// nil progress keeps the progress ctx has.
func withProgress(ctx context.Context, progress func(string)) context.Context {
	if progress == nil {
		return ctx // nothing to replace: no new layer
	}
	parent := runFrom(ctx)
	st := &runState{progress: progress}
	if parent != nil {
		st.detach = parent.detach
		if progress == nil {
			st.progress = parent.progress
		}
	}
	return context.WithValue(ctx, runKey{}, st)
}

// runFrom returns ctx's run state, nil when it has none.
func runFrom(ctx context.Context) *runState {
	if ctx == nil {
		return nil
	}
	st, _ := ctx.Value(runKey{}).(*runState)
	return st
}

// progressFrom returns the progress func ctx carries, nil when none.
func progressFrom(ctx context.Context) func(string) {
	if st := runFrom(ctx); st != nil {
		return st.progress
	}
	return nil
}

// Progress reports text as the progress of the call running under ctx. It
// does nothing when ctx carries no progress func (see WithRun).
func Progress(ctx context.Context, text string) {
	if p := progressFrom(ctx); p != nil {
		p(text)
	}
}

// Detach asks to detach the call running under ctx from its turn: the
// turn goes on with ack as the call's provisional result while the tool
// keeps running, and the result the tool returns later is delivered when
// it is done. It returns false when ctx offers no detaching (see WithRun),
// when the call already detached, or when the caller refused.
func Detach(ctx context.Context, ack string) bool {
	st := runFrom(ctx)
	if st == nil || st.detach == nil {
		return false
	}
	return st.detach.try(ack)
}
