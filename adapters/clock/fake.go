package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a virtual clock for tests. Time stands still until the test moves
// it with [Fake.Advance], [Fake.AdvanceToNext] or [Fake.Set].
//
// Timers made by AfterFunc and goroutines blocked in Sleep are "waiters",
// each with a deadline. Moving time fires, in deadline order, every waiter
// whose deadline is reached; waiters with the same deadline fire in the order
// they were armed. While a waiter fires, Now reports its deadline.
//
// AfterFunc callbacks run synchronously in the goroutine that moves the
// clock, one after another, not in goroutines of their own as they do with
// [Real]: when Advance returns, every callback that was due has run. A
// callback may use the clock (Now, AfterFunc, Stop, even Advance); a timer it
// arms that falls due within the same move fires in that move. A sleeper is
// woken by the move but resumes in its own goroutine, so its Sleep may
// return a little after Advance does.
//
// A waiter armed with d <= 0 is due at once, but fires only on the next move
// of the clock (Advance(0) is enough); AfterFunc never calls f from within
// AfterFunc itself.
//
// Fake is safe for concurrent use. Moves made from several goroutines at once
// are race-free but interleave; a test normally moves the clock from one
// goroutine. The zero Fake is not usable: make one with [NewFake].
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters waiterHeap
	seq     uint64
	// armed is closed, and replaced, each time a waiter is armed; it wakes
	// WaitForPending without polling.
	armed chan struct{}
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock whose time is start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, armed: make(chan struct{})}
}

// waiter is an armed timer or sleeper.
type waiter struct {
	deadline time.Time
	seq      uint64
	f        func()        // AfterFunc callback; nil for a sleeper
	wake     chan struct{} // closed when a sleeper fires
	ctx      context.Context
	index    int // position in the heap; -1 once fired or stopped
}

// Now implements [Clock]: it returns the virtual time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements [Clock]. f runs in the goroutine that moves the clock
// past now+d; see [Fake].
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	if f == nil {
		panic("clock: AfterFunc with nil func")
	}
	w := &waiter{f: f}
	c.arm(w, d)
	return &fakeTimer{c: c, w: w}
}

// Sleep implements [Clock]. It returns nil when the clock is moved to now+d
// or past it, and context.Cause(ctx) if ctx is done first. A cancellation
// that has happened by the time the sleeper resumes wins over the deadline.
func (c *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	w := &waiter{wake: make(chan struct{}), ctx: ctx}
	c.arm(w, d)
	select {
	case <-w.wake:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		c.disarm(w)
		return context.Cause(ctx)
	}
	return nil
}

// Advance moves the clock forward by d, firing every waiter whose deadline
// is reached, in deadline order. AfterFunc callbacks run in the calling
// goroutine before Advance returns. A negative d is treated as zero.
func (c *Fake) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.runUntil(target)
}

// Set moves the clock to t. If t is after the current time, it fires the
// waiters whose deadline is reached, like Advance. If t is before it, time
// goes back and nothing fires: waiters keep their absolute deadlines.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	if t.Before(c.now) {
		c.now = t
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.runUntil(t)
}

// AdvanceToNext moves the clock to the earliest deadline among the armed
// waiters and fires every waiter due then. It returns how far the clock
// moved and true, or 0 and false if nothing is armed.
func (c *Fake) AdvanceToNext() (time.Duration, bool) {
	c.mu.Lock()
	if len(c.waiters) == 0 {
		c.mu.Unlock()
		return 0, false
	}
	next := c.waiters[0].deadline
	d := max(next.Sub(c.now), 0)
	c.mu.Unlock()
	c.runUntil(next)
	return d, true
}

// AdvanceToNextWithin is AdvanceToNext for a waiter due within d of now:
// it moves the clock to the earliest deadline and fires what is due then
// only when that deadline is at most d away, and reports whether it did.
// A test that drives the clock "to whatever comes next" uses it so that a
// far timer (a run's 48 h timeout) does not fire while the code under
// test is merely busy on another goroutine.
func (c *Fake) AdvanceToNextWithin(d time.Duration) (time.Duration, bool) {
	c.mu.Lock()
	next, ok := c.nextLive()
	if !ok || next.Sub(c.now) > d {
		c.mu.Unlock()
		return 0, false
	}
	moved := max(next.Sub(c.now), 0)
	c.mu.Unlock()
	c.runUntil(next)
	return moved, true
}

// WaitForDue blocks until a waiter due within d of now is armed, or ctx
// is done, in which case it returns context.Cause(ctx).
func (c *Fake) WaitForDue(ctx context.Context, d time.Duration) error {
	for {
		c.mu.Lock()
		if next, ok := c.nextLive(); ok && next.Sub(c.now) <= d {
			c.mu.Unlock()
			return nil
		}
		armed := c.armed
		c.mu.Unlock()
		select {
		case <-armed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// nextLive returns the earliest deadline of a live waiter.
func (c *Fake) nextLive() (time.Time, bool) {
	var next time.Time
	ok := false
	for _, w := range c.waiters {
		if (w.ctx == nil || w.ctx.Err() == nil) && (!ok || w.deadline.Before(next)) {
			next, ok = w.deadline, true
		}
	}
	return next, ok
}

// Pending returns the number of armed waiters: timers that have neither
// fired nor been stopped, plus goroutines blocked in Sleep whose context is
// not done. A sleeper stops counting the moment its context is cancelled,
// before its goroutine resumes, so a test that waits for "everything asleep
// on the clock" does not mistake a cancelled sleeper for a settled one.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live()
}

func (c *Fake) live() int {
	n := 0
	for _, w := range c.waiters {
		if w.ctx == nil || w.ctx.Err() == nil {
			n++
		}
	}
	return n
}

// WaitForPending blocks until at least n waiters are armed, or ctx is done,
// in which case it returns context.Cause(ctx). Use it to let a goroutine
// reach its Sleep or AfterFunc before advancing the clock.
func (c *Fake) WaitForPending(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if c.live() >= n {
			c.mu.Unlock()
			return nil
		}
		armed := c.armed
		c.mu.Unlock()
		select {
		case <-armed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// arm sets w's deadline to now+d and adds it to the heap.
func (c *Fake) arm(w *waiter, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.deadline = c.now.Add(max(d, 0))
	c.seq++
	w.seq = c.seq
	heap.Push(&c.waiters, w)
	close(c.armed)
	c.armed = make(chan struct{})
}

// disarm removes w if it is still armed and reports whether it did.
func (c *Fake) disarm(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.index < 0 {
		return false
	}
	heap.Remove(&c.waiters, w.index)
	return true
}

// runUntil fires, one at a time and in order, every waiter due at or before
// target, then sets the time to target (unless a callback moved it further).
// The lock is released while a callback runs.
func (c *Fake) runUntil(target time.Time) {
	for {
		c.mu.Lock()
		if len(c.waiters) == 0 || c.waiters[0].deadline.After(target) {
			if c.now.Before(target) {
				c.now = target
			}
			c.mu.Unlock()
			return
		}
		w := heap.Pop(&c.waiters).(*waiter)
		if c.now.Before(w.deadline) {
			c.now = w.deadline
		}
		c.mu.Unlock()
		if w.f != nil {
			w.f()
		} else {
			close(w.wake)
		}
	}
}

type fakeTimer struct {
	c *Fake
	w *waiter
}

func (t *fakeTimer) Stop() bool { return t.c.disarm(t.w) }

// waiterHeap orders waiters by deadline, then by arming order.
type waiterHeap []*waiter

func (h waiterHeap) Len() int { return len(h) }

func (h waiterHeap) Less(i, j int) bool {
	if !h[i].deadline.Equal(h[j].deadline) {
		return h[i].deadline.Before(h[j].deadline)
	}
	return h[i].seq < h[j].seq
}

func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}

func (h *waiterHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.index = -1
	*h = old[:n-1]
	return w
}
