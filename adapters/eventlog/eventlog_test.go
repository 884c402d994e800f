package eventlog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/loopchart/loopchart/vocab"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: a
// subscriber runs on its consumer's goroutine and must leave nothing
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ev returns an event numbered seq.
func ev(seq uint64) vocab.Event {
	return vocab.Event{Session: "s1", Seq: seq, Kind: vocab.EventUsage}
}

// events returns the events numbered from..to (inclusive).
func events(from, to uint64) []vocab.Event {
	var out []vocab.Event
	for s := from; s <= to; s++ {
		out = append(out, ev(s))
	}
	return out
}

// seqRange returns from..to (inclusive).
func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// result is what a consumer of a stream saw.
type result struct {
	seqs []uint64
	err  error
}

// collect reads a stream to its end. It records an error the stream yields
// and reports (as an error) anything yielded after it, or an error paired
// with a non-zero event.
func collect(stream iter.Seq2[vocab.Event, error]) result {
	var r result
	for e, err := range stream {
		if r.err != nil {
			r.err = fmt.Errorf("stream yielded (seq %d, %v) after its final error %w", e.Seq, err, r.err)
			return r
		}
		if err != nil {
			r.err = err
			if e != (vocab.Event{}) {
				r.err = fmt.Errorf("error %w paired with event seq %d", err, e.Seq)
			}
			continue
		}
		r.seqs = append(r.seqs, e.Seq)
	}
	return r
}

// checkGapless asserts the property every subscriber has: it saw a gapless
// run starting at from, and then either no error or an ErrDropped that names
// the seq right after the last one it saw.
func checkGapless(t *testing.T, name string, r result, from uint64) {
	t.Helper()
	for i, s := range r.seqs {
		if s != from+uint64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d (gap or disorder)", name, i, s, from+uint64(i))
		}
	}
	if r.err == nil {
		return
	}
	missed := from + uint64(len(r.seqs))
	checkDropped(t, name, r.err, missed)
}

// checkDropped asserts that err matches ErrDropped and names seq.
func checkDropped(t *testing.T, name string, err error, seq uint64) {
	t.Helper()
	if !errors.Is(err, ErrDropped) {
		t.Fatalf("%s: error %v does not match ErrDropped", name, err)
	}
	if got := vocab.CodeOf(err); got != vocab.CodeDropped {
		t.Fatalf("%s: code %q, want %s", name, got, vocab.CodeDropped)
	}
	var de *DroppedError
	if !errors.As(err, &de) || de.Seq != seq {
		t.Fatalf("%s: error %v does not name seq %d", name, err, seq)
	}
}

// newFeed returns a Feed or fails the test.
func newFeed(t testing.TB, window int, backing Reader) *Feed {
	t.Helper()
	f, err := NewFeed(window, backing)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// appendPublish makes batch durable in mem, then publishes it: the lane's
// order.
func appendPublish(t testing.TB, mem *Memory, f *Feed, batch []vocab.Event) {
	t.Helper()
	if err := mem.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	f.Publish(batch)
}

func TestNewFeedWindow(t *testing.T) {
	if _, err := NewFeed(-1, nil); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Fatalf("NewFeed(-1): %v, want code %s", err, vocab.CodeBadInput)
	}
	if f := newFeed(t, 0, nil); f.window != DefaultWindow {
		t.Fatalf("window %d, want DefaultWindow", f.window)
	}
}

// TestFeedConcurrentGapless runs one publisher and several subscribers at
// once. Every subscriber must see a gapless sequence, then either the end
// (the Feed closed) or an ErrDropped naming the seq it missed; with a
// backing nobody is ever dropped.
func TestFeedConcurrentGapless(t *testing.T) {
	const total = 5000
	for _, tc := range []struct {
		name    string
		window  int
		backing bool
	}{
		{"small window with backing", 8, true},
		{"small window without backing", 8, false},
		{"default window without backing", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemory()
			var backing Reader
			if tc.backing {
				backing = mem
			}
			f := newFeed(t, tc.window, backing)
			froms := []uint64{0, 1, 2, 17, 1000, total, total + 1}
			results := make([]result, len(froms))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, from := range froms {
				wg.Go(func() {
					<-start
					results[i] = collect(f.Subscribe(t.Context(), from))
				})
			}
			wg.Go(func() {
				<-start
				var batch []vocab.Event // reused: neither Memory nor Feed may retain it
				for seq := uint64(1); seq <= total; {
					batch = batch[:0]
					for k := 1 + seq%20; k > 0 && seq <= total; k-- {
						batch = append(batch, ev(seq))
						seq++
					}
					if err := mem.Append(t.Context(), batch); err != nil {
						t.Error(err)
						break
					}
					f.Publish(batch)
				}
				f.Close()
			})
			close(start)
			wg.Wait()
			for i, from := range froms {
				name := fmt.Sprintf("subscriber from %d", from)
				r := results[i]
				checkGapless(t, name, r, max(from, 1))
				if tc.backing {
					if r.err != nil || len(r.seqs) != int(total+1-max(from, 1)) {
						t.Fatalf("%s: got %d events and %v, want every event to %d", name, len(r.seqs), r.err, total)
					}
				}
			}
		})
	}
}

// TestFeedReplay replays 10,000 events through a window of 64.
func TestFeedReplay(t *testing.T) {
	const total = 10_000
	mem := NewMemory()
	withBacking := newFeed(t, 64, mem)
	without := newFeed(t, 64, nil)
	for seq := uint64(1); seq <= total; seq += 10 {
		appendPublish(t, mem, withBacking, events(seq, seq+9))
		without.Publish(events(seq, seq+9))
	}
	withBacking.Close()
	without.Close()

	t.Run("backing gives all", func(t *testing.T) {
		r := collect(withBacking.Subscribe(t.Context(), 1))
		if r.err != nil || !slices.Equal(r.seqs, seqRange(1, total)) {
			t.Fatalf("got %d events and %v, want 1..%d", len(r.seqs), r.err, total)
		}
	})
	t.Run("backing from the middle", func(t *testing.T) {
		r := collect(withBacking.Subscribe(t.Context(), 4321))
		if r.err != nil || !slices.Equal(r.seqs, seqRange(4321, total)) {
			t.Fatalf("got %d events and %v, want 4321..%d", len(r.seqs), r.err, total)
		}
	})
	t.Run("no backing is dropped at the first missed seq", func(t *testing.T) {
		r := collect(without.Subscribe(t.Context(), 1))
		if len(r.seqs) != 0 {
			t.Fatalf("got %d events before the error, want none", len(r.seqs))
		}
		checkDropped(t, "from 1", r.err, 1)

		r = collect(without.Subscribe(t.Context(), total-64))
		checkDropped(t, "from just before the window", r.err, total-64)
	})
	t.Run("no backing within the window is complete", func(t *testing.T) {
		r := collect(without.Subscribe(t.Context(), total-63))
		if r.err != nil || !slices.Equal(r.seqs, seqRange(total-63, total)) {
			t.Fatalf("got %v and %v, want the 64 events of the window", r.seqs, r.err)
		}
	})
}

// TestFeedSlowSubscriberDropped: a subscriber stalls inside its loop body
// while the publisher moves a window of 4 past it. With no backing its
// stream delivers what it had already read, then ends with ErrDropped
// naming the first seq it missed.
func TestFeedSlowSubscriberDropped(t *testing.T) {
	f := newFeed(t, 4, nil)
	f.Publish(events(1, 2))

	step := make(chan []vocab.Event)
	published := make(chan struct{})
	go func() {
		for batch := range step {
			f.Publish(batch)
			published <- struct{}{}
		}
	}()
	defer close(step)

	var r result
	for e, err := range f.Subscribe(t.Context(), 1) {
		if err != nil {
			r.err = err
			break
		}
		r.seqs = append(r.seqs, e.Seq)
		if e.Seq == 1 {
			// The consumer is slow: while it handles event 1 the
			// publisher moves the window to 7..10.
			step <- events(3, 10)
			<-published
		}
	}
	if !slices.Equal(r.seqs, []uint64{1, 2}) {
		t.Fatalf("got %v, want [1 2] (read before the window moved)", r.seqs)
	}
	checkDropped(t, "slow subscriber", r.err, 3)

	// With a backing the same slow subscriber is complete.
	mem := NewMemory()
	g := newFeed(t, 4, mem)
	appendPublish(t, mem, g, events(1, 2))
	var seqs []uint64
	for e, err := range g.Subscribe(t.Context(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, e.Seq)
		if e.Seq == 1 {
			appendPublish(t, mem, g, events(3, 10))
		}
		if e.Seq == 10 {
			break
		}
	}
	if !slices.Equal(seqs, seqRange(1, 10)) {
		t.Fatalf("with backing got %v, want 1..10", seqs)
	}
}

// TestFeedCancel: cancelling ctx ends a waiting subscriber with the cause.
func TestFeedCancel(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		f := newFeed(t, 4, nil)
		f.Publish(events(1, 2))
		waiting := make(chan struct{}, 1)
		f.onWait = func() { waiting <- struct{}{} }
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		done := make(chan result)
		go func() { done <- collect(f.Subscribe(ctx, 1)) }()

		<-waiting // the subscriber has read 1 and 2 and now waits
		cause := errors.New("user went away")
		cancel(cause)
		r := <-done
		if !slices.Equal(r.seqs, []uint64{1, 2}) || r.err != cause {
			t.Fatalf("got %v and %v, want [1 2] and the cause", r.seqs, r.err)
		}
	})
	t.Run("already done", func(t *testing.T) {
		f := newFeed(t, 4, nil)
		f.Publish(events(1, 2))
		ctx, cancel := context.WithCancelCause(t.Context())
		cause := errors.New("gone")
		cancel(cause)
		r := collect(f.Subscribe(ctx, 1))
		if len(r.seqs) != 0 || r.err != cause {
			t.Fatalf("got %v and %v, want nothing and the cause", r.seqs, r.err)
		}
	})
	t.Run("during a backing read", func(t *testing.T) {
		mem := NewMemory()
		f := newFeed(t, 4, mem)
		appendPublish(t, mem, f, events(1, 100))
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		cause := errors.New("stop replay")
		var r result
		for e, err := range f.Subscribe(ctx, 1) {
			if err != nil {
				r.err = err
				continue
			}
			r.seqs = append(r.seqs, e.Seq)
			if e.Seq == 3 {
				cancel(cause)
			}
		}
		if !slices.Equal(r.seqs, []uint64{1, 2, 3}) || r.err != cause {
			t.Fatalf("got %v and %v, want [1 2 3] and the cause", r.seqs, r.err)
		}
	})
}

// TestFeedBreakEarly: breaking out of the range loop, from the window, the
// backing or after waiting, leaves no goroutine behind and the Feed usable.
func TestFeedBreakEarly(t *testing.T) {
	mem := NewMemory()
	f := newFeed(t, 8, mem)
	appendPublish(t, mem, f, events(1, 20))

	for _, from := range []uint64{1, 15} { // backing, then window
		n := 0
		for _, err := range f.Subscribe(t.Context(), from) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == 3 {
				break
			}
		}
	}

	// A subscriber that waits, is woken, reads one event and stops.
	waiting := make(chan struct{}, 1)
	f.mu.Lock()
	f.onWait = func() { waiting <- struct{}{} }
	f.mu.Unlock()
	done := make(chan uint64)
	go func() {
		for e := range f.Subscribe(t.Context(), 21) {
			done <- e.Seq
			return
		}
		close(done)
	}()
	<-waiting
	appendPublish(t, mem, f, events(21, 21))
	if got := <-done; got != 21 {
		t.Fatalf("got seq %d, want 21", got)
	}

	// A pulled stream stopped early.
	next, stop := iter.Pull2(f.Subscribe(t.Context(), 1))
	if e, err, ok := next(); !ok || err != nil || e.Seq != 1 {
		t.Fatalf("pull: %v %v %v", e.Seq, err, ok)
	}
	stop()

	goleak.VerifyNone(t)

	f.Close()
	r := collect(f.Subscribe(t.Context(), 1))
	checkGapless(t, "after the early breaks", r, 1)
	if r.err != nil || len(r.seqs) != 21 {
		t.Fatalf("got %d events and %v, want 21", len(r.seqs), r.err)
	}
}

// TestFeedClose: Close ends every stream once it has delivered everything
// published, including subscribers that were waiting; later Publish calls
// are ignored.
func TestFeedClose(t *testing.T) {
	f := newFeed(t, 0, nil)
	f.Publish(events(1, 5))
	waiting := make(chan struct{}, 2)
	f.onWait = func() { waiting <- struct{}{} }
	done := make(chan result, 2)
	for range 2 {
		go func() { done <- collect(f.Subscribe(t.Context(), 1)) }()
	}
	<-waiting
	<-waiting
	f.mu.Lock()
	f.onWait = nil // a woken subscriber may wait again before Close
	f.mu.Unlock()
	f.Publish(events(6, 10))
	f.Close()
	f.Close() // idempotent
	f.Publish(events(11, 12))
	if got := f.Last(); got != 10 {
		t.Fatalf("Last after Close = %d, want 10", got)
	}
	for range 2 {
		r := <-done
		if r.err != nil || !slices.Equal(r.seqs, seqRange(1, 10)) {
			t.Fatalf("got %v and %v, want 1..10 and no error", r.seqs, r.err)
		}
	}
	// A subscriber arriving after Close reads what was published.
	r := collect(f.Subscribe(t.Context(), 4))
	if r.err != nil || !slices.Equal(r.seqs, seqRange(4, 10)) {
		t.Fatalf("late subscriber got %v and %v, want 4..10", r.seqs, r.err)
	}
	// One beyond the end just ends.
	if r := collect(f.Subscribe(t.Context(), 50)); r.err != nil || len(r.seqs) != 0 {
		t.Fatalf("subscriber from 50 got %v and %v, want nothing", r.seqs, r.err)
	}
}

// TestFeedPublishOrder: repeats are ignored; a jump restarts the window, so
// a subscriber before it is dropped (no backing), never silently advanced.
func TestFeedPublishOrder(t *testing.T) {
	f := newFeed(t, 8, nil)
	f.Publish(events(1, 3))
	f.Publish(events(2, 4)) // 2 and 3 again, then 4
	if got := f.Last(); got != 4 {
		t.Fatalf("Last = %d, want 4", got)
	}
	f.Publish(events(10, 11)) // 5..9 never published
	f.Close()
	r := collect(f.Subscribe(t.Context(), 1))
	checkDropped(t, "across the jump", r.err, 1)
	r = collect(f.Subscribe(t.Context(), 5))
	checkDropped(t, "at the jump", r.err, 5)
	if r := collect(f.Subscribe(t.Context(), 10)); r.err != nil || !slices.Equal(r.seqs, []uint64{10, 11}) {
		t.Fatalf("after the jump got %v and %v", r.seqs, r.err)
	}

	// A session reopened at seq 100: a subscriber from the start is told
	// that seq 1 is missing.
	g := newFeed(t, 8, nil)
	g.Publish(events(100, 101))
	g.Close()
	checkDropped(t, "reopened", collect(g.Subscribe(t.Context(), 0)).err, 1)
}

// TestFeedSubscribeAhead: a subscriber from a seq not yet published waits
// for it.
func TestFeedSubscribeAhead(t *testing.T) {
	f := newFeed(t, 8, nil)
	f.Publish(events(1, 2))
	waiting := make(chan struct{}, 1)
	f.onWait = func() { waiting <- struct{}{} }
	done := make(chan result)
	go func() { done <- collect(f.Subscribe(t.Context(), 5)) }()
	<-waiting
	f.mu.Lock()
	f.onWait = nil
	f.mu.Unlock()
	f.Publish(events(3, 6))
	f.Close()
	if r := <-done; r.err != nil || !slices.Equal(r.seqs, []uint64{5, 6}) {
		t.Fatalf("got %v and %v, want [5 6]", r.seqs, r.err)
	}
}

// fakeReader yields a fixed list of events, then err if set.
type fakeReader struct {
	events []vocab.Event
	err    error
}

func (r fakeReader) Since(_ context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		for _, e := range r.events {
			if e.Seq >= from && !yield(e, nil) {
				return
			}
		}
		if r.err != nil {
			yield(vocab.Event{}, r.err)
		}
	}
}

// TestFeedBackingFaults: a backing that fails, has a gap or ends early
// never makes a subscriber skip an event.
func TestFeedBackingFaults(t *testing.T) {
	boom := vocab.Errorf(vocab.CodeInternal, "disk on fire")
	for _, tc := range []struct {
		name    string
		backing fakeReader
		want    []uint64
		check   func(t *testing.T, err error)
	}{
		{
			name:    "fails",
			backing: fakeReader{events: events(1, 3), err: boom},
			want:    seqRange(1, 3),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, boom) || vocab.CodeOf(err) != vocab.CodeInternal {
					t.Fatalf("error %v, want the backing's", err)
				}
			},
		},
		{
			name:    "gap",
			backing: fakeReader{events: append(events(1, 3), events(5, 20)...)},
			want:    seqRange(1, 3),
			check:   func(t *testing.T, err error) { checkDropped(t, "gap", err, 4) },
		},
		{
			name:    "ends early",
			backing: fakeReader{events: events(1, 5)},
			want:    seqRange(1, 5),
			check:   func(t *testing.T, err error) { checkDropped(t, "ends early", err, 6) },
		},
		{
			name:    "repeats",
			backing: fakeReader{events: append(events(1, 10), events(5, 15)...)},
			want:    seqRange(1, 20),
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(t, 8, tc.backing)
			f.Publish(events(1, 20)) // the window holds 13..20
			f.Close()
			r := collect(f.Subscribe(t.Context(), 1))
			if !slices.Equal(r.seqs, tc.want) {
				t.Fatalf("got %v, want %v", r.seqs, tc.want)
			}
			tc.check(t, r.err)
		})
	}
}

// TestFeedRingGrowsOnDemand: the window is allocated as events arrive.
func TestFeedRingGrowsOnDemand(t *testing.T) {
	f := newFeed(t, 0, nil)
	if f.ring != nil {
		t.Fatalf("an empty Feed has a ring of %d", len(f.ring))
	}
	f.Publish(events(1, 1))
	if len(f.ring) != 16 {
		t.Fatalf("ring of %d after one event, want 16", len(f.ring))
	}
	for s := uint64(2); s <= 3000; s += 7 {
		f.Publish(events(s, s+6))
	}
	if len(f.ring) != DefaultWindow || f.n != DefaultWindow {
		t.Fatalf("ring of %d holding %d, want %d", len(f.ring), f.n, DefaultWindow)
	}
	f.Close()
	r := collect(f.Subscribe(t.Context(), f.Last()-DefaultWindow+1))
	checkGapless(t, "window", r, f.Last()-DefaultWindow+1)
	if r.err != nil || len(r.seqs) != DefaultWindow {
		t.Fatalf("got %d and %v", len(r.seqs), r.err)
	}
}

func TestMemoryAppend(t *testing.T) {
	ctx := t.Context()
	m := NewMemory()
	if err := m.Append(ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if err := m.Append(ctx, []vocab.Event{ev(0)}); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Fatalf("seq 0: %v, want code %s", err, vocab.CodeBadInput)
	}
	if err := m.Append(ctx, events(5, 7)); err != nil { // a reopened session starts anywhere
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		batch []vocab.Event
	}{
		{"gap", events(9, 10)},
		{"repeat", events(7, 8)},
		{"gap inside the batch", []vocab.Event{ev(8), ev(9), ev(11)}},
		{"repeat inside the batch", []vocab.Event{ev(8), ev(9), ev(9)}},
	} {
		err := m.Append(ctx, tc.batch)
		if !errors.Is(err, vocab.CodeBadInput.Err()) {
			t.Fatalf("%s: %v, want code %s", tc.name, err, vocab.CodeBadInput)
		}
		if m.Len() != 3 {
			t.Fatalf("%s: Len %d after a rejected batch, want 3 (all-or-nothing)", tc.name, m.Len())
		}
	}

	// FailAfter: 4 more events succeed, the batch that would pass them
	// fails whole, and the failure sticks.
	injected := errors.New("injected")
	m.FailAfter(4, injected)
	if err := m.Append(ctx, events(8, 10)); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(ctx, events(11, 12)); err != injected {
		t.Fatalf("over the budget: %v, want the injected error", err)
	}
	if m.Len() != 6 {
		t.Fatalf("Len %d, want 6 (the failing batch appends nothing)", m.Len())
	}
	if err := m.Append(ctx, events(11, 11)); err != injected {
		t.Fatalf("after the failure: %v, want the injected error again", err)
	}
	m.FailAfter(0, nil)
	if err := m.Append(ctx, events(11, 12)); err != nil {
		t.Fatalf("after turning injection off: %v", err)
	}
	if got := seqsOf(m.Events()); !slices.Equal(got, seqRange(5, 12)) {
		t.Fatalf("Events %v, want 5..12", got)
	}

	m.Close()
	m.Close()
	if err := m.Append(ctx, events(13, 13)); !errors.Is(err, vocab.CodeClosed.Err()) {
		t.Fatalf("after Close: %v, want code %s", err, vocab.CodeClosed)
	}
	if r := collect(m.Since(ctx, 10)); r.err != nil || !slices.Equal(r.seqs, seqRange(10, 12)) {
		t.Fatalf("Since after Close: %v %v", r.seqs, r.err)
	}
	// Before the first event held: an error, not a silent later start.
	checkDropped(t, "before the first", collect(m.Since(ctx, 1)).err, 1)
}

// seqsOf returns the seqs of evs.
func seqsOf(evs []vocab.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// TestMemoryChunks: events cross chunk boundaries; no chunk grows past
// chunkSize and Since reads any range back.
func TestMemoryChunks(t *testing.T) {
	ctx := t.Context()
	m := NewMemory()
	const total = 2*chunkSize + 276
	for s := uint64(1); s <= total; s += 7 {
		if err := m.Append(ctx, events(s, min(s+6, total))); err != nil {
			t.Fatal(err)
		}
	}
	// Chunks of 8, 16, ... 256 events, then of chunkSize; every chunk but
	// the last full, each allocated once with its room.
	for k, c := range m.chunks {
		if cap(c) != chunkCap(k) || k < len(m.chunks)-1 && len(c) != cap(c) {
			t.Fatalf("chunk %d: %d/%d events, want room for %d", k, len(c), cap(c), chunkCap(k))
		}
	}
	if want := geomChunks + (total-geomEvents+chunkSize-1)/chunkSize; len(m.chunks) != want {
		t.Fatalf("%d chunks for %d events, want %d", len(m.chunks), total, want)
	}
	if !slices.Equal(seqsOf(m.Events()), seqRange(1, total)) {
		t.Fatal("Events out of order")
	}
	for _, from := range []uint64{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 2 * chunkSize, total} {
		r := collect(m.Since(ctx, from))
		if r.err != nil || !slices.Equal(r.seqs, seqRange(max(from, 1), total)) {
			t.Fatalf("Since(%d): %d events, %v", from, len(r.seqs), r.err)
		}
	}
	if r := collect(m.Since(ctx, total+1)); r.err != nil || len(r.seqs) != 0 {
		t.Fatalf("Since past the end: %v %v", r.seqs, r.err)
	}
	// Breaking out early.
	for e := range m.Since(ctx, 1) {
		if e.Seq == 600 {
			break
		}
	}
	// A done ctx ends the stream with its cause.
	cctx, cancel := context.WithCancelCause(ctx)
	cause := errors.New("enough")
	cancel(cause)
	if r := collect(m.Since(cctx, 1)); r.err != cause {
		t.Fatalf("Since with a done ctx: %v", r.err)
	}
}

// TestMemoryConcurrent reads while appending (run with -race).
func TestMemoryConcurrent(t *testing.T) {
	m := NewMemory()
	const total = 3000
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := uint64(1); s <= total; s += 3 {
			if err := m.Append(t.Context(), events(s, s+2)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for range 20 {
				r := collect(m.Since(t.Context(), 1))
				if r.err != nil {
					t.Error(r.err)
					return
				}
				for i, s := range r.seqs {
					if s != uint64(i+1) {
						t.Errorf("seq %d at %d", s, i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if m.Len() != total {
		t.Fatalf("Len %d", m.Len())
	}
}

// TestEmptyCost measures what an unused Feed and an unused Memory cost,
// over 1,000 instances each.
func TestEmptyCost(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() any
	}{
		{"Feed", func() any { f, _ := NewFeed(0, nil); return f }},
		{"Memory", func() any { return NewMemory() }},
	} {
		const n = 1000
		keep := make([]any, n)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i] = tc.mk()
		}
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		per := float64(after.TotalAlloc-before.TotalAlloc) / n
		t.Logf("empty %s: %.0f bytes", tc.name, per)
		if per >= 1024 {
			t.Errorf("an empty %s costs %.0f bytes, want < 1 KB", tc.name, per)
		}
		if allocs := testing.AllocsPerRun(100, func() { _ = tc.mk() }); allocs > 1 {
			t.Errorf("an empty %s takes %.0f allocations, want 1", tc.name, allocs)
		}
	}
}

// BenchmarkPublish publishes batches of 20 events to a Feed with one
// subscriber reading on another goroutine. A subscriber that falls behind
// the window (no backing here) resubscribes at the live edge; drops/op
// reports how often that happened.
func BenchmarkPublish(b *testing.B) {
	f := newFeed(b, 0, nil)
	var drops int
	done := make(chan struct{})
	go func() {
		defer close(done)
		from := uint64(1)
		for {
			r := f.Subscribe(context.Background(), from)
			var err error
			for e, e2 := range r {
				if e2 != nil {
					err = e2
					break
				}
				from = e.Seq + 1
			}
			if err == nil {
				return // closed
			}
			drops++
			from = f.Last() + 1
		}
	}()
	batch := make([]vocab.Event, 20)
	for i := range batch {
		batch[i] = ev(0)
	}
	seq := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i].Seq = seq
		}
		f.Publish(batch)
	}
	b.StopTimer()
	f.Close()
	<-done
	b.ReportMetric(float64(drops)/float64(b.N), "drops/op")
}

// TestFeedSkip: a feed that continues a log (Skip) serves the events
// before it from its backing, then what it publishes; a Skip that does
// not move forward does nothing.
func TestFeedSkip(t *testing.T) {
	f, err := NewFeed(4, fakeReader{events: events(1, 5)})
	if err != nil {
		t.Fatal(err)
	}
	f.Skip(5)
	f.Skip(3)
	if got := f.Last(); got != 5 {
		t.Fatalf("Last = %d after Skip(5), Skip(3)", got)
	}
	f.Publish(events(6, 7))
	f.Close()
	if r := collect(f.Subscribe(context.Background(), 0)); r.err != nil || !slices.Equal(r.seqs, seqRange(1, 7)) {
		t.Fatalf("got %v and %v, want 1..7", r.seqs, r.err)
	}
}

// TestMemoryRoundTrip: an event reads back from Memory exactly as it was
// appended, every field, including what its compact record does not hold
// (another session than the log's first, a turn or step past 32 bits).
func TestMemoryRoundTrip(t *testing.T) {
	ctx := t.Context()
	m := NewMemory()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	in := []vocab.Event{
		{Session: "s1", Seq: 7, At: at, Kind: vocab.EventTurnStart, Turn: 3, Step: 2},
		{Session: "s2", Seq: 8, At: at.Add(time.Second), Kind: vocab.EventUsage, Payload: vocab.StatusPayload{Status: "x"}},
		{Session: "s1", Seq: 9, Kind: vocab.EventTurnEnd, Turn: math.MaxInt32 + 1, Step: math.MinInt32 - 1},
		{Session: "s1", Seq: 10, Kind: vocab.EventTurnEnd, Turn: -4, Step: math.MaxInt32},
	}
	if err := m.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	if got := m.Events(); !reflect.DeepEqual(got, in) {
		t.Fatalf("Events:\n got %+v\nwant %+v", got, in)
	}
	var got []vocab.Event
	for ev, err := range m.Since(ctx, 8) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if !reflect.DeepEqual(got, in[1:]) {
		t.Fatalf("Since(8):\n got %+v\nwant %+v", got, in[1:])
	}
}

// TestMemorySessionText: an event whose session id equals the log's but
// is stored elsewhere (a core that decoded its configuration holds a copy
// of its id) is of the log's session: no exception is recorded for it, and
// the log keeps that copy, so later ids compare by pointer. An id that
// differs is an exception, and reads back as itself.
func TestMemorySessionText(t *testing.T) {
	m := NewMemory()
	first := vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	copied := vocab.ID(strings.Clone(string(first)))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := []vocab.Event{
		{Session: first, Seq: 1, At: at, Kind: vocab.EventTurnStart},
		{Session: copied, Seq: 2, At: at, Kind: vocab.EventTurnEnd},
		{Session: "other", Seq: 3, At: at, Kind: vocab.EventTurnEnd},
		{Session: copied, Seq: 4, At: at, Kind: vocab.EventTurnEnd},
	}
	if err := m.Append(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	if got := m.Events(); !reflect.DeepEqual(got, in) {
		t.Fatalf("Events:\n got %+v\nwant %+v", got, in)
	}
	if len(m.others) != 1 || m.others[2] != "other" {
		t.Errorf("exceptions %v, want only index 2 (other)", m.others)
	}
	if unsafe.StringData(string(m.session)) != unsafe.StringData(string(copied)) {
		t.Error("the log did not adopt the equal id's text")
	}
}

// TestMemoryStampPages: events alternating between two stamps, across
// more pages of stamps than one, read back with their own time, turn and
// step (the log compares each event with the last stamp it added).
func TestMemoryStampPages(t *testing.T) {
	m := NewMemory()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var in []vocab.Event
	for i := range 3*stampPage + 5 {
		ev := vocab.Event{Session: "s", Seq: uint64(i + 1), At: at.Add(time.Duration(i/3) * time.Millisecond), Kind: vocab.EventStepStart, Turn: 1, Step: i / 2}
		in = append(in, ev)
	}
	for i := 0; i < len(in); i += 7 {
		if err := m.Append(t.Context(), in[i:min(i+7, len(in))]); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Events(); !reflect.DeepEqual(got, in) {
		t.Fatal("events read back differ from those appended")
	}
	if m.nstamps <= stampPage {
		t.Fatalf("%d stamps: the test wants more than a page", m.nstamps)
	}
}

// TestFeedOverMemory: a Feed backed by a Memory keeps no window of its
// own (the Memory holds every event already), and a subscriber still gets
// the replay and then the live events, in order and without a gap.
func TestFeedOverMemory(t *testing.T) {
	ctx := t.Context()
	m := NewMemory()
	f, err := NewFeed(4, m)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to uint64) {
		t.Helper()
		batch := events(from, to)
		if err := m.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		f.Publish(batch)
	}
	publish(1, 10)
	if f.ring != nil || f.n != 0 || f.Last() != 10 {
		t.Fatalf("ring %d events (n=%d), last %d: want no ring, last 10", len(f.ring), f.n, f.Last())
	}
	f.Publish(events(3, 5)) // published before: nothing moves
	if f.ring != nil || f.Last() != 10 {
		t.Fatalf("after a repeat: ring %d events, last %d; want no ring, last 10", len(f.ring), f.Last())
	}
	got := make(chan result)
	go func() {
		var r result
		for ev, err := range f.Subscribe(ctx, 3) {
			if err != nil {
				r.err = err
				break
			}
			r.seqs = append(r.seqs, ev.Seq)
		}
		got <- r
	}()
	publish(11, 20)
	publish(21, 25)
	f.Close()
	if r := <-got; r.err != nil || !slices.Equal(r.seqs, seqRange(3, 25)) {
		t.Fatalf("subscriber got %v, %v; want 3..25", r.seqs, r.err)
	}
}
