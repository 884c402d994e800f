package engine

import (
	"context"
	"errors"
	"testing"
)

// A work context behaves as the context.WithCancelCause it stands for,
// whether it is cancelled before or after anything looked at it: Err,
// Done, Cause, children and AfterFunc, and the engine mark.
func TestWorkCtx(t *testing.T) {
	e := markedEngine()
	cause := errors.New("the cause")
	fresh := func() *workCtx {
		c := newWorkCtx(e, 1)
		if c.Err() != nil {
			t.Fatalf("a new work context is done: %v", c.Err())
		}
		if !reentrant(c, e) || reentrant(c, &Engine{}) {
			t.Fatal("the work context does not carry its engine's mark")
		}
		if _, ok := c.Deadline(); ok {
			t.Fatal("a work context has a deadline")
		}
		return c
	}
	check := func(name string, ctx context.Context, want error) {
		t.Helper()
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("%s: not done", name)
		}
		if !errors.Is(ctx.Err(), context.Canceled) || context.Cause(ctx) != want {
			t.Fatalf("%s: Err %v, Cause %v; want canceled, %v", name, ctx.Err(), context.Cause(ctx), want)
		}
	}

	// Cancelled before anything looked at it.
	c := fresh()
	c.cancel(cause)
	c.cancel(errors.New("a later cause")) // the first cause stays
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v after cancel", c.Err())
	}
	check("cancelled first", c, cause)

	// Looked at (a child, an AfterFunc), then cancelled.
	c = fresh()
	child, stop := context.WithCancel(context.WithValue(c, ctxKey{}, "x"))
	defer stop()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	if c.Err() != nil {
		t.Fatalf("Err %v once looked at, before any cancel", c.Err())
	}
	c.cancel(cause)
	check("cancelled after", c, cause)
	check("its child", child, cause)
	<-ran

	// Cancelled without a cause: context.Canceled is the cause.
	c = fresh()
	c.cancel(nil)
	check("no cause", c, context.Canceled)
}

// Err is read without the lock while the lane cancels and a tool makes
// the context behind it: it never reports a live context done, and it
// reports it done once cancel returned (checked under -race too).
func TestWorkCtxErrConcurrent(t *testing.T) {
	e := markedEngine()
	for i := range 200 {
		c := newWorkCtx(e, uint64(i))
		start := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-start
			if i%2 == 0 {
				_ = c.Done() // makes the context behind it
			}
			for range 50 {
				_ = c.Err()
			}
		}()
		close(start)
		if i%3 == 0 {
			if err := c.Err(); err != nil {
				t.Fatalf("round %d: Err %v before any cancel", i, err)
			}
		}
		c.cancel(nil)
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("round %d: Err %v after cancel", i, c.Err())
		}
		<-done
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("round %d: Err %v after the reader", i, c.Err())
		}
	}
}

// A cancel without a cause (work that ended) races a tool making the
// context behind it: whichever comes first, the context ends up made and
// cancelled with context.Canceled, its Done closed (checked under -race
// too). A cancel with a cause after the lock-free one does not change
// the cause Err reports.
func TestWorkCtxCancelRacesMake(t *testing.T) {
	e := markedEngine()
	for i := range 500 {
		c := newWorkCtx(e, uint64(i))
		start := make(chan struct{})
		made := make(chan (<-chan struct{}))
		go func() {
			<-start
			made <- c.Done()
		}()
		close(start)
		c.cancel(nil)
		if i%4 == 0 {
			c.cancel(errors.New("later"))
		}
		done := <-made
		select {
		case <-done:
		default:
			t.Fatalf("round %d: the context made while it was cancelled is not done", i)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("round %d: Err %v", i, c.Err())
		}
		if cause := context.Cause(c); cause != context.Canceled {
			t.Fatalf("round %d: cause %v, want context.Canceled (the first cancel's)", i, cause)
		}
	}
}

// markedEngine returns an engine with only its work context, marked with
// it (as New makes it).
func markedEngine() *Engine {
	e := &Engine{}
	e.workCtx = context.WithValue(context.Background(), ctxKey{}, e)
	return e
}

// newWorkCtx returns the work context of work id of e.
func newWorkCtx(e *Engine, id uint64) *workCtx {
	c := &workCtx{}
	c.init(e, id)
	return c
}
