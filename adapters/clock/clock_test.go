package clock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

var errCause = errors.New("test cancelled")

func cancelledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errCause)
	return ctx
}

func TestRealSleep(t *testing.T) {
	c := clock.Real()
	if err := c.Sleep(cancelledCtx(t), time.Hour); !errors.Is(err, errCause) {
		t.Fatalf("Sleep(cancelled) = %v, want %v", err, errCause)
	}
	if err := c.Sleep(cancelledCtx(t), 0); !errors.Is(err, errCause) {
		t.Fatalf("Sleep(cancelled, 0) = %v, want %v", err, errCause)
	}
	if err := c.Sleep(t.Context(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := c.Sleep(t.Context(), time.Microsecond); err != nil {
		t.Fatalf("Sleep(1µs) = %v", err)
	}
	// Cancellation while sleeping.
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, time.Hour) }()
	cancel(errCause)
	if err := <-done; !errors.Is(err, errCause) {
		t.Fatalf("Sleep = %v, want %v", err, errCause)
	}
}

func TestRealAfterFunc(t *testing.T) {
	c := clock.Real()
	if c.Now().IsZero() {
		t.Fatal("Real().Now() is zero")
	}
	fired := make(chan struct{})
	tm := c.AfterFunc(0, func() { close(fired) })
	<-fired
	if tm.Stop() {
		t.Error("Stop after firing = true")
	}
	tm = c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	if !tm.Stop() {
		t.Error("Stop before firing = false")
	}
}

func TestFakeNowAdvanceSet(t *testing.T) {
	c := clock.NewFake(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now = %v, want %v", got, t0)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
	c.Advance(-time.Hour) // treated as zero
	if got, want := c.Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("Now after negative Advance = %v, want %v", got, want)
	}
	later := t0.Add(24 * time.Hour)
	c.Set(later)
	if got := c.Now(); !got.Equal(later) {
		t.Fatalf("Now = %v, want %v", got, later)
	}
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now after Set backwards = %v, want %v", got, t0)
	}
}

// TestFakeAfterFuncOrder checks deadline order, arming order for equal
// deadlines, Now during a callback, and that callbacks run synchronously in
// the advancing goroutine (the unsynchronised append would be a data race
// otherwise).
func TestFakeAfterFuncOrder(t *testing.T) {
	c := clock.NewFake(t0)
	type fire struct {
		Name string
		At   time.Duration
	}
	var got []fire
	at := func(name string) func() {
		return func() { got = append(got, fire{name, c.Now().Sub(t0)}) }
	}
	c.AfterFunc(3*time.Second, at("3s"))
	c.AfterFunc(1*time.Second, at("1s"))
	c.AfterFunc(2*time.Second, at("2s-a"))
	c.AfterFunc(2*time.Second, at("2s-b"))
	c.AfterFunc(10*time.Second, at("10s"))
	if n := c.Pending(); n != 5 {
		t.Fatalf("Pending = %d, want 5", n)
	}
	c.Advance(5 * time.Second)
	want := []fire{{"1s", time.Second}, {"2s-a", 2 * time.Second}, {"2s-b", 2 * time.Second}, {"3s", 3 * time.Second}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("fired (-want +got):\n%s", diff)
	}
	if got, want := c.Now(), t0.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending = %d, want 1", n)
	}
}

func TestFakeAfterFuncRearm(t *testing.T) {
	c := clock.NewFake(t0)
	var fired []time.Duration
	var tick func()
	tick = func() {
		fired = append(fired, c.Now().Sub(t0))
		c.AfterFunc(time.Second, tick)
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(3500 * time.Millisecond)
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, fired); diff != "" {
		t.Fatalf("fired (-want +got):\n%s", diff)
	}
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending = %d, want 1 (the 4s tick)", n)
	}
}

func TestFakeAfterFuncZeroDelay(t *testing.T) {
	c := clock.NewFake(t0)
	fired := 0
	c.AfterFunc(0, func() { fired++ })
	c.AfterFunc(-time.Second, func() { fired++ })
	if fired != 0 {
		t.Fatal("AfterFunc(0) fired inside AfterFunc")
	}
	c.Advance(0)
	if fired != 2 {
		t.Fatalf("fired = %d after Advance(0), want 2", fired)
	}
	if !c.Now().Equal(t0) {
		t.Fatalf("Now moved to %v", c.Now())
	}
}

func TestFakeStop(t *testing.T) {
	c := clock.NewFake(t0)
	fired := 0
	a := c.AfterFunc(time.Second, func() { fired++ })
	b := c.AfterFunc(2*time.Second, func() { fired++ })
	if !a.Stop() {
		t.Fatal("Stop of armed timer = false")
	}
	if a.Stop() {
		t.Fatal("second Stop = true")
	}
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending = %d, want 1", n)
	}
	c.Advance(2 * time.Second)
	if fired != 1 {
		t.Fatalf("fired = %d, want 1", fired)
	}
	if b.Stop() {
		t.Fatal("Stop of fired timer = true")
	}
}

func TestFakeStopFromCallback(t *testing.T) {
	c := clock.NewFake(t0)
	var later clock.Timer
	stopped := false
	c.AfterFunc(time.Second, func() { stopped = later.Stop() })
	later = c.AfterFunc(time.Second, func() { t.Error("stopped timer fired") })
	c.Advance(time.Second)
	if !stopped {
		t.Fatal("Stop from an earlier callback = false")
	}
}

func TestFakeAdvanceToNext(t *testing.T) {
	c := clock.NewFake(t0)
	if d, ok := c.AdvanceToNext(); ok || d != 0 {
		t.Fatalf("AdvanceToNext on idle clock = %v, %v", d, ok)
	}
	var fired []string
	c.AfterFunc(2*time.Second, func() { fired = append(fired, "a") })
	c.AfterFunc(5*time.Second, func() { fired = append(fired, "b") })
	c.AfterFunc(5*time.Second, func() { fired = append(fired, "c") })
	for _, want := range []time.Duration{2 * time.Second, 3 * time.Second} {
		d, ok := c.AdvanceToNext()
		if !ok || d != want {
			t.Fatalf("AdvanceToNext = %v, %v; want %v, true", d, ok, want)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, fired); diff != "" {
		t.Fatalf("fired (-want +got):\n%s", diff)
	}
	if got, want := c.Now(), t0.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
	if _, ok := c.AdvanceToNext(); ok {
		t.Fatal("AdvanceToNext with nothing armed = true")
	}
}

func TestFakeSetFires(t *testing.T) {
	c := clock.NewFake(t0)
	fired := 0
	c.AfterFunc(time.Minute, func() { fired++ })
	c.Set(t0.Add(-time.Hour))
	if fired != 0 || c.Pending() != 1 {
		t.Fatalf("Set backwards: fired %d, pending %d", fired, c.Pending())
	}
	c.Set(t0.Add(time.Minute))
	if fired != 1 || c.Pending() != 0 {
		t.Fatalf("Set forwards: fired %d, pending %d", fired, c.Pending())
	}
}

func TestFakeSleep(t *testing.T) {
	c := clock.NewFake(t0)
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, time.Second) }()
	if err := c.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(999 * time.Millisecond)
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending = %d before the deadline, want 1", n)
	}
	c.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	if n := c.Pending(); n != 0 {
		t.Fatalf("Pending = %d after wake, want 0", n)
	}
}

func TestFakeSleepCancel(t *testing.T) {
	c := clock.NewFake(t0)
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, time.Hour) }()
	if err := c.WaitForPending(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel(errCause)
	if err := <-done; !errors.Is(err, errCause) {
		t.Fatalf("Sleep = %v, want %v", err, errCause)
	}
	if n := c.Pending(); n != 0 {
		t.Fatalf("Pending = %d after cancel, want 0", n)
	}
	if !c.Now().Equal(t0) {
		t.Fatal("cancellation moved the clock")
	}
}

func TestFakeSleepImmediate(t *testing.T) {
	c := clock.NewFake(t0)
	if err := c.Sleep(cancelledCtx(t), time.Hour); !errors.Is(err, errCause) {
		t.Fatalf("Sleep(cancelled) = %v", err)
	}
	if err := c.Sleep(cancelledCtx(t), 0); !errors.Is(err, errCause) {
		t.Fatalf("Sleep(cancelled, 0) = %v", err)
	}
	if err := c.Sleep(t.Context(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := c.Sleep(t.Context(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v", err)
	}
	if n := c.Pending(); n != 0 {
		t.Fatalf("Pending = %d, want 0", n)
	}
}

func TestFakeWaitForPending(t *testing.T) {
	c := clock.NewFake(t0)
	if err := c.WaitForPending(t.Context(), 0); err != nil {
		t.Fatalf("WaitForPending(0) = %v", err)
	}
	if err := c.WaitForPending(cancelledCtx(t), 1); !errors.Is(err, errCause) {
		t.Fatalf("WaitForPending(cancelled) = %v, want %v", err, errCause)
	}
	// A waiter arms a timer from another goroutine.
	go c.AfterFunc(time.Second, func() {})
	if err := c.WaitForPending(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
}

// TestFakeManySleepers runs sleepers and timers concurrently and drains them
// with AdvanceToNext; it is meant for the race detector.
func TestFakeManySleepers(t *testing.T) {
	c := clock.NewFake(t0)
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var woke []time.Duration
	for i := range n {
		d := time.Duration(n-i) * time.Millisecond
		wg.Go(func() {
			if err := c.Sleep(t.Context(), d); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			woke = append(woke, d)
			mu.Unlock()
		})
		wg.Go(func() { c.AfterFunc(d, func() {}) })
	}
	if err := c.WaitForPending(t.Context(), 2*n); err != nil {
		t.Fatal(err)
	}
	steps := 0
	for {
		if _, ok := c.AdvanceToNext(); !ok {
			break
		}
		steps++
	}
	wg.Wait()
	if steps != n {
		t.Errorf("AdvanceToNext steps = %d, want %d", steps, n)
	}
	if len(woke) != n {
		t.Errorf("woke %d sleepers, want %d", len(woke), n)
	}
	if got, want := c.Now(), t0.Add(n*time.Millisecond); !got.Equal(want) {
		t.Errorf("Now = %v, want %v", got, want)
	}
}

func ExampleFake() {
	ctx := context.Background()
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))

	c.AfterFunc(2*time.Second, func() { fmt.Println("timer at", c.Now().Format(time.TimeOnly)) })

	done := make(chan error)
	go func() { done <- c.Sleep(ctx, time.Second) }()
	_ = c.WaitForPending(ctx, 2) // the timer and the sleeper

	c.Advance(time.Second)
	fmt.Println("sleep returned", <-done)
	c.Advance(time.Second)
	fmt.Println("pending", c.Pending())
	// Output:
	// sleep returned <nil>
	// timer at 00:00:02
	// pending 0
}

// A driver that advances "to what comes next within an hour" leaves a far
// timer alone and still fires the near ones.
func TestFakeAdvanceToNextWithin(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var fired []string
	c.AfterFunc(48*time.Hour, func() { fired = append(fired, "far") })
	if _, ok := c.AdvanceToNextWithin(time.Hour); ok || len(fired) != 0 {
		t.Fatalf("advanced to a timer 48 h away: %v", fired)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.WaitForDue(ctx, time.Hour); err == nil {
		t.Fatal("WaitForDue returned with only a far timer armed")
	}
	c.AfterFunc(time.Second, func() { fired = append(fired, "near") })
	if err := c.WaitForDue(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.AdvanceToNextWithin(time.Hour); !ok || d != time.Second || len(fired) != 1 || fired[0] != "near" {
		t.Fatalf("AdvanceToNextWithin = %v %v, fired %v", d, ok, fired)
	}
}
