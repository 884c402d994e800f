// Package clock is the injectable clock of loopchart's adapters.
//
// Code that waits, times out or stamps times takes a [Clock] instead of
// calling package time directly. Production code passes [Real]; tests pass a
// [Fake] and move virtual time forward explicitly, so nothing in a test ever
// sleeps to synchronise.
//
// A typical test starts the code under test in a goroutine, waits with
// [Fake.WaitForPending] until that code has armed its timer or is sleeping,
// and then calls [Fake.Advance]:
//
//	clk := clock.NewFake(start)
//	done := make(chan error, 1)
//	go func() { done <- clk.Sleep(ctx, time.Second) }()
//	if err := clk.WaitForPending(ctx, 1); err != nil { ... }
//	clk.Advance(time.Second) // the Sleep returns nil
package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. Implementations are safe for concurrent
// use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc runs f in its own goroutine after d; Stop cancels it if it has
	// not fired. ([Fake] runs f in the goroutine that advances the clock; see
	// [Fake.Advance].)
	AfterFunc(d time.Duration, f func()) Timer
	// Sleep waits d or until ctx is done, whichever comes first. It returns
	// nil after d and context.Cause(ctx) when ctx is done first. If ctx is
	// already done, Sleep returns its cause at once, even for d <= 0; with a
	// live ctx and d <= 0 it returns nil at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call from running. It reports whether it stopped the
	// call: false means the call had already fired or been stopped.
	Stop() bool
}

// Real returns the wall clock, backed by package time.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	// A cancellation that has happened by the time the sleeper wakes wins,
	// as it does for Fake.
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}
