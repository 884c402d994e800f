package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/vocab"
)

// watchClock is a fake clock that tells the tests about the timers armed
// for at most short: during a stream only the watchdog's (the run's
// timeout is armed for far longer), and after a cut the retry wait. It
// counts those armed and those still pending, and reports each arming on
// arms.
type watchClock struct {
	*clock.Fake
	short       time.Duration
	arms        chan time.Duration
	armed, live atomic.Int32
}

func (c *watchClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	if d > c.short {
		return c.Fake.AfterFunc(d, f)
	}
	t := &shortTimer{c: c}
	c.armed.Add(1)
	c.live.Add(1)
	t.Timer = c.Fake.AfterFunc(d, func() { t.gone(); f() })
	c.arms <- d
	return t
}

type shortTimer struct {
	clock.Timer
	c    *watchClock
	done atomic.Bool
}

func (t *shortTimer) gone() {
	if t.done.CompareAndSwap(false, true) {
		t.c.live.Add(-1)
	}
}

func (t *shortTimer) Stop() bool {
	if t.Timer.Stop() {
		t.gone()
		return true
	}
	return false
}

// startWatched is start on a watchClock (short: an hour).
func startWatched(t *testing.T, opt Options) (*harness, *watchClock) {
	t.Helper()
	clk := &watchClock{Fake: clock.NewFake(epoch), short: time.Hour, arms: make(chan time.Duration, 1<<14)}
	log := eventlog.NewMemory()
	opt.Clock, opt.IDs, opt.Sink, opt.Jitter = clk, &vocab.SeqSource{}, log, func() float64 { return 0 }
	e, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &harness{t: t, e: e, clk: clk.Fake, log: log}, clk
}

// oneTimer checks that the watchdog holds exactly one pending timer.
func oneTimer(t *testing.T, clk *watchClock, when string) {
	t.Helper()
	if n := clk.live.Load(); n != 1 {
		t.Fatalf("%s: %d watchdog timers pending, want 1", when, n)
	}
}

// stallThenAnswer is a provider whose first request runs first (given the
// request's context and the yield function) and whose later requests
// answer "done" at once. calls counts the requests.
func stallThenAnswer(calls *atomic.Int32, first func(ctx context.Context, yield func(vocab.StreamPart, error) bool)) providerFunc {
	return func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		n := calls.Add(1)
		return func(yield func(vocab.StreamPart, error) bool) {
			if n == 1 {
				first(ctx, yield)
				return
			}
			answer("done")(yield)
		}
	}
}

// alive fails the test if the stream's context was cut.
func alive(t *testing.T, ctx context.Context, when string) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s: the stream was cut: %v", when, context.Cause(ctx))
	}
}

// cut checks that the stream's context was cancelled by the watchdog.
func cut(t *testing.T, ctx context.Context, limit string) {
	t.Helper()
	if ctx.Err() == nil {
		t.Fatalf("the %s did not cut the stream", limit)
	}
	var ve *vocab.Error
	if cause := context.Cause(ctx); !errors.As(cause, &ve) || ve.Code != vocab.CodeStreamIdle || !ve.Retryable || !strings.Contains(ve.Message, limit) {
		t.Fatalf("the stream's cause is %v, want a retryable %s naming the %s", cause, vocab.CodeStreamIdle, limit)
	}
}

// retried lets the retry wait fire once it is armed (the watchdog's
// timers are armed for a minute or more, the first retry wait for less),
// and checks that the prompt then completes with "done" after exactly one
// failure, llm.stream_idle naming limit.
func retried(t *testing.T, h *harness, clk *watchClock, p *Pending, calls *atomic.Int32, limit string) {
	t.Helper()
	ctx := testCtx(t)
	for armed := false; !armed; {
		select {
		case d := <-clk.arms:
			armed = d < time.Minute
		case <-ctx.Done():
			t.Fatal("no retry wait was armed")
		}
	}
	h.clk.AdvanceToNext()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt ended %s, want completed after a retry", res)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d model requests, want 2 (the cut one and its retry)", n)
	}
	failed := inputs(h.log.Events(), vocab.InModelFailed)
	if len(failed) != 1 {
		t.Fatalf("%d model.failed inputs, want 1", len(failed))
	}
	if e := failed[0].Err; e == nil || e.Code != vocab.CodeStreamIdle || !e.Retryable || !strings.Contains(e.Message, limit) {
		t.Errorf("model.failed with %v, want a retryable %s naming the %s", e, vocab.CodeStreamIdle, limit)
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := hist.Messages(); len(msgs) == 0 || msgs[len(msgs)-1].Text() != "done" {
		t.Errorf("history ends %v, want the retry's answer", msgs)
	}
}

// firstArm waits until the request's watchdog armed its timer and
// returns for how long.
func firstArm(t *testing.T, clk *watchClock) time.Duration {
	t.Helper()
	select {
	case d := <-clk.arms:
		return d
	case <-testCtx(t).Done():
		t.Fatal("the watchdog armed no timer")
		return 0
	}
}

// A provider that never sends a part is cut FirstTokenTimeout after the
// request started, even when ChunkTimeout is shorter (the watchdog then
// re-arms its one timer until the first-token limit is reached), and the
// retry policy tries again: the second attempt answers.
func TestWatchdogFirstToken(t *testing.T) {
	var calls atomic.Int32
	streams := make(chan context.Context, 1)
	prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
		streams <- ctx
		<-ctx.Done()
		// The provider reports the cancellation as it sees it; the request
		// still fails with the watchdog's error.
		yield(vocab.StreamPart{}, ctx.Err())
	})
	h, clk := startWatched(t, Options{Provider: prov, FirstTokenTimeout: 10 * time.Minute, ChunkTimeout: time.Minute})
	p := h.submit("hi")
	ctx := <-streams
	if d := firstArm(t, clk); d != time.Minute {
		t.Errorf("the watchdog first armed for %v, want ChunkTimeout (the shorter limit)", d)
	}
	oneTimer(t, clk, "at the request's start")
	h.clk.Advance(10*time.Minute - time.Nanosecond)
	alive(t, ctx, "just before the first-token timeout")
	oneTimer(t, clk, "after the timer re-armed")
	h.clk.Advance(time.Nanosecond)
	cut(t, ctx, "first-token timeout")
	retried(t, h, clk, p, &calls, "first-token timeout")
}

// A provider that sends a part and then stalls is cut ChunkTimeout after
// that part; the part stays streamed (and is closed as a message before
// the retry's).
func TestWatchdogChunk(t *testing.T) {
	var calls atomic.Int32
	send := make(chan struct{})
	stalled := make(chan context.Context, 1)
	prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
		<-send
		if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "partial"}, nil) {
			return
		}
		stalled <- ctx
		<-ctx.Done() // then ends quietly, as if the reply were over
	})
	h, clk := startWatched(t, Options{Provider: prov, FirstTokenTimeout: 10 * time.Minute, ChunkTimeout: 5 * time.Minute})
	p := h.submit("hi")
	firstArm(t, clk)
	h.clk.Advance(2 * time.Minute) // the first part comes after 2 minutes
	close(send)
	ctx := <-stalled
	h.clk.Advance(5*time.Minute - time.Nanosecond)
	alive(t, ctx, "just before the chunk timeout")
	oneTimer(t, clk, "after the timer re-armed")
	h.clk.Advance(time.Nanosecond)
	cut(t, ctx, "chunk timeout")
	retried(t, h, clk, p, &calls, "chunk timeout")

	parts := inputs(h.log.Events(), vocab.InModelParts)
	if len(parts) == 0 || len(parts[0].Parts) == 0 || parts[0].Parts[0].Text != "partial" {
		t.Errorf("model.parts inputs %+v, want the part streamed before the stall", parts)
	}
	var ended []string
	for _, ev := range h.events(vocab.EventMessageEnd) {
		ended = append(ended, ev.Payload.(vocab.MessagePayload).Message.Text())
	}
	if len(ended) < 2 || ended[0] != "partial" {
		t.Errorf("message/end texts %q, want the cut reply's part closed first", ended)
	}
}

// A reply that keeps sending parts within the limits is never cut, though
// it takes far longer than either limit in all; its one timer is re-armed
// at most once per silence, never per part.
func TestWatchdogSteadyStreamNotCut(t *testing.T) {
	var calls atomic.Int32
	streams := make(chan context.Context, 1)
	tick, ack := make(chan struct{}), make(chan struct{})
	const bursts, burst = 12, 25
	prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
		streams <- ctx
		for range bursts {
			select {
			case <-tick:
			case <-ctx.Done():
				return
			}
			for range burst {
				if !yield(vocab.StreamPart{Kind: vocab.StreamThinking, Text: "hmm "}, nil) {
					return
				}
			}
			ack <- struct{}{}
		}
		if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "slow but sure"}, nil) {
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	})
	h, clk := startWatched(t, Options{Provider: prov, FirstTokenTimeout: 10 * time.Minute, ChunkTimeout: 5 * time.Minute})
	p := h.submit("hi")
	ctx := <-streams
	firstArm(t, clk)
	// The first burst just within the first-token limit (past the chunk
	// limit), then one just within the chunk limit after each.
	wait := 10*time.Minute - time.Nanosecond
	for i := range bursts {
		h.clk.Advance(wait)
		alive(t, ctx, fmt.Sprintf("before burst %d", i+1))
		oneTimer(t, clk, "while streaming")
		tick <- struct{}{}
		<-ack
		wait = 5*time.Minute - time.Nanosecond
	}
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt ended %s", res)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
	if failed := inputs(h.log.Events(), vocab.InModelFailed); len(failed) != 0 {
		t.Errorf("model.failed inputs %+v, want none", failed)
	}
	if elapsed := h.clk.Now().Sub(epoch); elapsed < time.Hour {
		t.Errorf("the reply took %v, meant to take over an hour", elapsed)
	}
	// Armed once, re-armed once before the first part and once per burst
	// after it.
	if n := clk.armed.Load(); n > bursts+1 {
		t.Errorf("the watchdog armed %d timers for %d parts in %d bursts, want at most %d", n, bursts*burst, bursts, bursts+1)
	}
	if n := clk.live.Load(); n != 0 {
		t.Errorf("%d watchdog timers outlived the request", n)
	}
}

// Negative limits are refused; zero means the defaults.
func TestWatchdogOptions(t *testing.T) {
	prov := answering("x")
	for name, opt := range map[string]Options{
		"negative FirstTokenTimeout":          {Provider: prov, FirstTokenTimeout: -time.Second},
		"negative ChunkTimeout":               {Provider: prov, ChunkTimeout: -time.Nanosecond},
		"negative even with the watchdog off": {Provider: prov, ChunkTimeout: -time.Second, NoStreamWatchdog: true},
	} {
		t.Run(name, func(t *testing.T) {
			e, err := New(opt)
			if e != nil {
				_ = e.Close(context.Background())
			}
			if e != nil || !isCode(err, vocab.CodeBadInput) {
				t.Errorf("engine %v, err %v; want nil and %s", e != nil, err, vocab.CodeBadInput)
			}
		})
	}
	e, err := New(Options{Provider: prov, Clock: clock.NewFake(epoch)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if e.opt.FirstTokenTimeout != DefaultFirstTokenTimeout || e.opt.ChunkTimeout != DefaultChunkTimeout || e.opt.NoStreamWatchdog {
		t.Errorf("defaults: first token %v, chunk %v, off %v; want %v, %v, false",
			e.opt.FirstTokenTimeout, e.opt.ChunkTimeout, e.opt.NoStreamWatchdog, DefaultFirstTokenTimeout, DefaultChunkTimeout)
	}
	if DefaultFirstTokenTimeout != 10*time.Minute || DefaultChunkTimeout != 5*time.Minute {
		t.Errorf("defaults %v and %v, want 10m and 5m", DefaultFirstTokenTimeout, DefaultChunkTimeout)
	}
}

// NoStreamWatchdog arms no timer at all; a limit of math.MaxInt64 switches
// that one limit off while the other still holds.
func TestWatchdogOff(t *testing.T) {
	t.Run("NoStreamWatchdog", func(t *testing.T) {
		var calls atomic.Int32
		streams := make(chan context.Context, 1)
		release := make(chan struct{})
		prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
			streams <- ctx
			<-release
			answer("late")(yield)
		})
		h, clk := startWatched(t, Options{Provider: prov, FirstTokenTimeout: time.Minute, ChunkTimeout: time.Minute, NoStreamWatchdog: true})
		p := h.submit("hi")
		ctx := <-streams
		h.clk.Advance(20 * time.Hour)
		alive(t, ctx, "20 hours later")
		close(release)
		if res := h.wait(p); res.Kind != vocab.PromptCompleted || calls.Load() != 1 {
			t.Fatalf("prompt ended %s after %d requests", res, calls.Load())
		}
		if n := clk.armed.Load(); n != 0 {
			t.Errorf("%d watchdog timers armed, want none", n)
		}
	})
	t.Run("first token off", func(t *testing.T) {
		var calls atomic.Int32
		streams, stalled := make(chan context.Context, 1), make(chan struct{})
		send := make(chan struct{})
		prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
			streams <- ctx
			<-send
			if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "at last"}, nil) {
				close(stalled)
				<-ctx.Done()
			}
		})
		h, clk := startWatched(t, Options{Provider: prov, FirstTokenTimeout: math.MaxInt64, ChunkTimeout: 5 * time.Minute})
		p := h.submit("hi")
		ctx := <-streams
		h.clk.Advance(20 * time.Hour)
		alive(t, ctx, "20 hours without a first part")
		close(send)
		<-stalled
		h.clk.Advance(5 * time.Minute)
		cut(t, ctx, "chunk timeout")
		retried(t, h, clk, p, &calls, "chunk timeout")
	})
	t.Run("chunk off", func(t *testing.T) {
		var calls atomic.Int32
		streams, sent := make(chan context.Context, 1), make(chan struct{})
		release := make(chan struct{})
		prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
			streams <- ctx
			if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "first "}, nil) {
				close(sent)
				<-release
				answer("then the rest")(yield)
			}
		})
		h, _ := startWatched(t, Options{Provider: prov, FirstTokenTimeout: 10 * time.Minute, ChunkTimeout: math.MaxInt64})
		p := h.submit("hi")
		ctx := <-streams
		<-sent
		h.clk.Advance(20 * time.Hour)
		alive(t, ctx, "20 hours after the first part")
		close(release)
		if res := h.wait(p); res.Kind != vocab.PromptCompleted || calls.Load() != 1 {
			t.Fatalf("prompt ended %s after %d requests", res, calls.Load())
		}
	})
}

// realClockEngine starts an engine on the real clock with prov and the
// watchdog's limits, closed when the test ends.
func realClockEngine(t *testing.T, prov vocab.Provider, first, chunk time.Duration) *Engine {
	t.Helper()
	e, err := New(Options{Provider: prov, IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 },
		FirstTokenTimeout: first, ChunkTimeout: chunk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return e
}

// On the real clock the watchdog's timer is a time.Timer, re-armed with
// Reset from one request to the next; a stalled first request is cut and
// retried.
func TestWatchdogRealClock(t *testing.T) {
	var calls atomic.Int32
	prov := stallThenAnswer(&calls, func(ctx context.Context, _ func(vocab.StreamPart, error) bool) {
		<-ctx.Done()
	})
	e := realClockEngine(t, prov, 20*time.Millisecond, 20*time.Millisecond)
	ctx := testCtx(t)
	for i := range 3 {
		p, err := e.Submit(vocab.UserText("hi"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(ctx)
		if err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %d ended %s %v", i, res, err)
		}
	}
	if n := calls.Load(); n < 4 {
		t.Errorf("%d model requests, want the cut one, its retry and two more", n)
	}
}

// On the real clock the silence after a part is measured on the
// monotonic clock from when the part was handled: a stream that goes
// silent after its first part is cut by the chunk timeout (the
// first-token timeout, an hour, does not apply once a part came), with
// llm.stream_idle as the cause, and retried.
func TestWatchdogRealClockChunk(t *testing.T) {
	var calls atomic.Int32
	causes := make(chan error, 1)
	prov := stallThenAnswer(&calls, func(ctx context.Context, yield func(vocab.StreamPart, error) bool) {
		if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "partial"}, nil) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
		}
	})
	e := realClockEngine(t, prov, time.Hour, 30*time.Millisecond)
	p, err := e.Submit(vocab.UserText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(testCtx(t))
	if err != nil || res.Kind != vocab.PromptCompleted || calls.Load() != 2 {
		t.Fatalf("prompt ended %s %v after %d requests, want completed after 2", res, err, calls.Load())
	}
	if cause := <-causes; vocab.CodeOf(cause) != vocab.CodeStreamIdle || !strings.Contains(cause.Error(), "chunk timeout") {
		t.Fatalf("the stalled stream was cut with %v, want the chunk timeout's llm.stream_idle", cause)
	}
}

// On the real clock a request does not stop its watchdog's timer: the
// next request finds it armed and, when it comes due no later than the
// request needs, leaves it so. 20 prompts in a row arm it once; Close
// stops it.
func TestWatchdogRealClockArmedOnce(t *testing.T) {
	e, err := New(Options{Provider: answering("done"), IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 20 {
		if res, err := e.Run(ctx, vocab.UserText("hi")); err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %d ended %s %v", i, res, err)
		}
	}
	w := e.dog.Load()
	if w == nil {
		t.Fatal("no spare watchdog after the prompts")
	}
	w.mu.Lock()
	arms, pending := w.arms, w.pending
	w.mu.Unlock()
	if arms != 1 || !pending {
		t.Fatalf("the watchdog armed its timer %d times for 20 requests (pending %v), want once, still pending", arms, pending)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending || w.timer.Stop() {
		t.Fatal("the watchdog's timer is still armed after Close")
	}
}

// A request that needs the timer sooner than the armed one comes due
// re-arms it; one that needs it later does not (the timer, due early,
// re-arms itself for what is left).
func TestWatchdogRealClockDue(t *testing.T) {
	e := &Engine{opt: Options{Clock: realClock, FirstTokenTimeout: time.Hour, ChunkTimeout: 2 * time.Hour}}
	wk := &worker{ctx: &workCtx{}}
	var w *watchdog
	watch := func(first time.Duration) {
		t.Helper()
		e.opt.FirstTokenTimeout = first
		r := &modelRun{e: e, wk: wk, last: time.Now(), dog: w}
		w = r.watch()
		if _, reuse := w.end(); !reuse {
			t.Fatal("a real-clock watchdog not reusable after its request")
		}
	}
	defer func() { w.disarm() }()
	for _, tc := range []struct {
		first time.Duration
		arms  uint64
	}{
		{time.Hour, 1},     // the first request arms it
		{time.Hour, 1},     // due about when the next one needs it: left armed
		{2 * time.Hour, 1}, // due before: left armed (it re-arms itself when due)
		{time.Minute, 2},   // due after: re-armed
		{time.Minute, 2},   // and kept
		{time.Second, 3},   // sooner again
		{10 * time.Hour, 3},
	} {
		watch(tc.first)
		if w.arms != tc.arms || !w.pending {
			t.Fatalf("first-token timeout %v: armed %d times (pending %v), want %d", tc.first, w.arms, w.pending, tc.arms)
		}
	}
	if w.due.After(time.Now().Add(time.Second)) {
		t.Fatalf("due %v, want within the second-long timeout of the last re-arm", time.Until(w.due))
	}
}

// On the real clock a stalled request right after a quick one is cut by
// the timer the quick one left armed: it comes due early for the stalled
// request, re-arms itself for what is left, then cuts it (first-token
// timeout), and the retry answers.
func TestWatchdogRealClockStallAfterQuick(t *testing.T) {
	var calls atomic.Int32
	prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		n := calls.Add(1)
		return func(yield func(vocab.StreamPart, error) bool) {
			if n%2 == 0 { // every second request stalls
				<-ctx.Done()
				return
			}
			answer("done")(yield)
		}
	})
	e := realClockEngine(t, prov, 20*time.Millisecond, time.Hour)
	ctx := testCtx(t)
	for i := range 4 {
		res, err := e.Run(ctx, vocab.UserText("hi"))
		if err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %d ended %s %v", i, res, err)
		}
	}
	// Prompt 1 answers at once; prompts 2-4 each stall, are cut and retried.
	if n := calls.Load(); n != 7 {
		t.Fatalf("%d model requests, want 7 (one, then a stalled one and its retry for each of three prompts)", n)
	}
}

// A request in flight when the session closes hands its watchdog back
// before its result is posted, so Close stops the timer the earlier
// request left armed; a request that hands it back only after the session
// stopped (a stuck one, released after Close gave up on it) stops it
// itself. Either way no timer is left armed.
func TestWatchdogRealClockCloseInFlight(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		t.Run(fmt.Sprintf("stuck=%v", stuck), func(t *testing.T) {
			var calls atomic.Int32
			blocked, release := make(chan struct{}), make(chan struct{})
			prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
				n := calls.Add(1)
				return func(yield func(vocab.StreamPart, error) bool) {
					if n == 2 { // the second prompt's request blocks
						close(blocked)
						if stuck {
							<-release // ignoring its context
						} else {
							<-ctx.Done()
						}
						return
					}
					answer("done")(yield)
				}
			})
			e, err := New(Options{Provider: prov, IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t)
			if res, err := e.Run(ctx, vocab.UserText("hi")); err != nil || res.Kind != vocab.PromptCompleted {
				t.Fatalf("first prompt ended %s %v", res, err)
			}
			w := e.dog.Load()
			if w == nil {
				t.Fatal("no spare watchdog after the first prompt")
			}
			if _, err := e.Submit(vocab.UserText("again")); err != nil {
				t.Fatal(err)
			}
			<-blocked
			if !stuck {
				if err := e.Close(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
				if err := e.Close(cctx); vocab.CodeOf(err) != vocab.CodeStuck {
					t.Fatalf("Close with a stuck request: %v, want code %s", err, vocab.CodeStuck)
				}
				close(release)
				<-e.workDone() // the request handed its watchdog back before it finished
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.pending || w.timer.Stop() {
				t.Fatal("the watchdog's timer is still armed once the session stopped")
			}
		})
	}
}
