package eventlog

import (
	"context"
	"fmt"
	"iter"
	"sync"

	"github.com/loopchart/loopchart/vocab"
)

// DefaultWindow is the number of recent events a Feed keeps in memory when
// NewFeed is given a window of 0.
const DefaultWindow = 1024

// readAhead is the most events a subscriber copies out of the window per
// visit under the lock. It bounds how long a reader can hold up Publish;
// it is a transient copy, not a queue that Publish fills.
const readAhead = 16

// Feed fans one session's events out, live, to any number of subscribers,
// and keeps the most recent events (its window) in memory. It is safe for
// concurrent use.
//
// Subscribers are cursors over the window, not channels: Publish never
// waits for them and there is no per-subscriber buffer to fill. A
// subscriber whose next event has already left the window reads the
// missing range from the Feed's backing Reader; with no backing, its
// stream ends with an error matching ErrDropped. A subscriber never
// silently skips an event.
//
// The window is a ring that grows on demand up to its size, so a Feed that
// has published nothing holds no event storage.
type Feed struct {
	mu sync.Mutex
	// ring holds the window: n events starting at index head, with
	// sequence numbers last-n+1 .. last. It grows up to window.
	ring    []vocab.Event
	head    int
	n       int
	window  int
	last    uint64 // seq of the last event published; 0 before any
	backing Reader
	// resident is set when the backing holds every event in memory (a
	// *Memory): the window would only copy it, so the Feed keeps none and
	// subscribers read the backing.
	resident bool
	// wake is closed by the next Publish or by Close. It is made by the
	// first subscriber that waits, so publishing to a Feed nobody waits on
	// allocates nothing.
	wake   chan struct{}
	closed bool

	// onWait, when set (by tests), runs each time a subscriber is about to
	// wait for a Publish, after it has registered for the wake-up.
	onWait func()
}

// NewFeed returns a Feed that keeps the last window events in memory (0
// means DefaultWindow; a negative window is an error with code
// vocab.CodeBadInput). A backing that holds every event in memory itself
// (a *Memory) makes the window redundant: that Feed keeps no copy of its
// own, and its subscribers read the backing. backing, which may be nil, is where a subscriber
// that is behind the window reads from: normally the session's durable
// log, which holds every published event because the lane appends a batch
// before it publishes it.
func NewFeed(window int, backing Reader) (*Feed, error) {
	if window < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "eventlog: feed window %d is negative", window)
	}
	if window == 0 {
		window = DefaultWindow
	}
	_, resident := backing.(*Memory)
	return &Feed{window: window, backing: backing, resident: resident}, nil
}

// Publish adds batch to the feed and wakes the subscribers waiting for it.
// It never waits for subscribers to read (the only lock it shares with
// them is held by a reader just long enough to copy at most 16 events out
// of the window); it copies batch and keeps only the last window events.
//
// The batch is what the Sink has just accepted: sequence numbers continuing
// from Last without a gap. An event whose Seq is not after Last is ignored
// (it was published already). A jump forward restarts the window at the
// jump, so a subscriber still positioned before it reads the missing range
// from the backing or gets ErrDropped. After Close, Publish does nothing.
func (f *Feed) Publish(batch []vocab.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	published := false
	if f.resident {
		// The backing log holds every event: only the last seq moves, to
		// the batch's last (a batch is in order).
		if n := len(batch); n > 0 && batch[n-1].Seq > f.last {
			f.last, published = batch[n-1].Seq, true
		}
		batch = nil
	}
	for i := range batch {
		ev := &batch[i]
		if ev.Seq <= f.last {
			continue
		}
		published = true
		if ev.Seq != f.last+1 {
			clear(f.ring) // drop the old window and its payloads
			f.head, f.n = 0, 0
		}
		f.push(ev)
		f.last = ev.Seq
	}
	if published && f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// push appends ev to the window, growing the ring up to window or
// overwriting the oldest event when it is full. f.mu must be held.
func (f *Feed) push(ev *vocab.Event) {
	if f.n == len(f.ring) {
		if len(f.ring) == f.window {
			f.ring[f.head] = *ev
			f.head = (f.head + 1) % len(f.ring)
			return
		}
		grown := make([]vocab.Event, min(max(2*len(f.ring), 16), f.window))
		k := copy(grown, f.ring[f.head:])
		copy(grown[k:], f.ring[:f.head])
		f.ring, f.head = grown, 0
	}
	f.ring[(f.head+f.n)%len(f.ring)] = *ev
	f.n++
}

// Skip marks every event up to sequence number to as published without
// keeping any of them: a feed that continues a log whose events are
// already in its backing (subscribers read them from there). A to not
// after Last does nothing.
func (f *Feed) Skip(to uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || to <= f.last {
		return
	}
	clear(f.ring)
	f.head, f.n, f.last = 0, 0, to
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// Last returns the sequence number of the last event published, or 0 if
// none was.
func (f *Feed) Last() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Close ends every stream once it has delivered what was published; later
// Publish calls are ignored. Close is idempotent.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// Subscribe returns the stream of every event with Seq ≥ from (0 and 1 both
// mean from the start), in order and without a gap, followed by live events
// as they are published.
//
// The stream ends:
//   - when ctx is done: it yields one final (zero Event, context.Cause(ctx));
//   - when the Feed is closed and the subscriber has read everything
//     published: it just ends, with no error;
//   - when the next event has left the window (the subscriber fell behind,
//     or asked for a replay older than the window) and the backing cannot
//     supply it (there is none, or it lacks that event): it yields one final
//     (zero Event, err) with err matching ErrDropped and naming the first
//     missed sequence number;
//   - when the backing fails: it yields that error, wrapped.
//
// With a backing, a replay of any length is complete. Subscribe starts no
// goroutine: the stream runs on the consumer's goroutine, and breaking out
// of the range loop simply stops it.
func (f *Feed) Subscribe(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		next := max(from, 1)
		// stalled is the value of next at which the backing last delivered
		// nothing; reading it again from there would not help.
		var stalled uint64
		var buf [readAhead]vocab.Event
		for {
			select {
			case <-ctx.Done():
				yield(vocab.Event{}, context.Cause(ctx))
				return
			default:
			}
			f.mu.Lock()
			lo, hi := f.last-uint64(f.n)+1, f.last // the window; empty when lo > hi
			switch {
			case next >= lo && next <= hi:
				k := min(int(hi-next+1), len(buf))
				start := (f.head + int(next-lo)) % len(f.ring)
				m := copy(buf[:k], f.ring[start:])
				copy(buf[m:k], f.ring[:k-m])
				f.mu.Unlock()
				for i := range buf[:k] {
					if !yield(buf[i], nil) {
						return
					}
				}
				clear(buf[:k]) // hold no payload longer than needed
				next += uint64(k)

			case next > hi:
				if f.closed {
					f.mu.Unlock()
					return
				}
				if f.wake == nil {
					f.wake = make(chan struct{})
				}
				wake, onWait := f.wake, f.onWait
				f.mu.Unlock()
				if onWait != nil {
					onWait()
				}
				select {
				case <-wake:
				case <-ctx.Done():
					yield(vocab.Event{}, context.Cause(ctx))
					return
				}

			default: // next < lo: the event has left the window
				f.mu.Unlock()
				if f.backing == nil {
					yield(vocab.Event{}, dropped(next, "the window holds seq %d..%d and there is no backing", lo, hi))
					return
				}
				if stalled == next {
					yield(vocab.Event{}, dropped(next, "the window holds seq %d..%d and the backing does not have it", lo, hi))
					return
				}
				start := next
				var ok bool
				if next, ok = f.fromBacking(ctx, next, yield); !ok {
					return
				}
				if next == start {
					stalled = next
				}
			}
		}
	}
}

// fromBacking yields the events the backing holds from seq next onwards
// and returns the seq after the last one yielded. It stops early, with
// more set, at a gap in the backing (the window is looked at again). more
// is false when the stream has ended: the consumer stopped, ctx is done
// or the backing failed (the final pair has then been yielded).
func (f *Feed) fromBacking(ctx context.Context, next uint64, yield func(vocab.Event, error) bool) (_ uint64, more bool) {
	for ev, err := range f.backing.Since(ctx, next) {
		select {
		case <-ctx.Done():
			yield(vocab.Event{}, context.Cause(ctx))
			return next, false
		default:
		}
		if err != nil {
			yield(vocab.Event{}, fmt.Errorf("eventlog: reading seq %d from the backing: %w", next, err))
			return next, false
		}
		if ev.Seq < next {
			continue // delivered already
		}
		if ev.Seq > next {
			return next, true
		}
		if !yield(ev, nil) {
			return next, false
		}
		next++
	}
	return next, true
}
