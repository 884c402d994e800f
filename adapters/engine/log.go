package engine

import (
	"context"
	"iter"
	"sync"

	"github.com/loopchart/loopchart/vocab"
)

// Sink receives every event of a session, in order, before the engine acts
// on it. Append must not block for long: it runs on the session lane.
type Sink interface {
	Append(ev vocab.Event) error
}

// MemoryLog is an in-memory Sink that also fans events out to live
// subscribers. It is safe for concurrent use.
//
// Subscriber policy: each subscriber has a bounded buffer. The lane never
// waits for a subscriber: when a subscriber's buffer is full it is dropped
// (its stream ends and Dropped reports true), so a slow reader can never
// stall the loop. Readers that must see everything read the log itself
// (Events), which keeps every event.
type MemoryLog struct {
	mu sync.Mutex
	// chunks hold the events in fixed-size blocks, so a long log never
	// copies what it already holds when it grows.
	chunks [][]vocab.Event
	n      int
	subs   map[*Subscription]struct{}
	closed bool
}

const chunkSize = 1024

// NewMemoryLog returns an empty log.
func NewMemoryLog() *MemoryLog {
	return &MemoryLog{subs: map[*Subscription]struct{}{}}
}

// Append implements Sink.
func (l *MemoryLog) Append(ev vocab.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return vocab.Errorf(vocab.CodeClosed, "event log is closed")
	}
	if len(l.chunks) == 0 || len(l.chunks[len(l.chunks)-1]) == chunkSize {
		l.chunks = append(l.chunks, make([]vocab.Event, 0, chunkSize))
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, ev)
	l.n++
	for s := range l.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped = true
			delete(l.subs, s)
			close(s.ch)
		}
	}
	return nil
}

// Events returns a copy of every event appended so far.
func (l *MemoryLog) Events() []vocab.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]vocab.Event, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c...)
	}
	return out
}

// Len returns the number of events appended so far.
func (l *MemoryLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Close ends every subscription; later appends fail.
func (l *MemoryLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for s := range l.subs {
		delete(l.subs, s)
		close(s.ch)
	}
}

// Subscription is a live view of a log's new events.
type Subscription struct {
	log     *MemoryLog
	ch      chan vocab.Event
	dropped bool
}

// DefaultBuffer is the subscriber buffer used when Subscribe gets 0.
const DefaultBuffer = 4096

// Subscribe starts a live subscription with room for buffer events (0:
// DefaultBuffer). When replay is set, the events already in the log are
// delivered first (as long as they fit in the buffer; otherwise the
// subscription starts dropped).
func (l *MemoryLog) Subscribe(buffer int, replay bool) *Subscription {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &Subscription{log: l, ch: make(chan vocab.Event, buffer)}
	if replay {
		if l.n > buffer {
			s.dropped = true
			close(s.ch)
			return s
		}
		for _, c := range l.chunks {
			for _, ev := range c {
				s.ch <- ev
			}
		}
	}
	if l.closed {
		close(s.ch)
		return s
	}
	l.subs[s] = struct{}{}
	return s
}

// C returns the channel of events; it is closed when the log closes, the
// subscription is cancelled, or the subscriber fell behind.
func (s *Subscription) C() <-chan vocab.Event { return s.ch }

// Dropped reports whether the subscription ended because its reader fell
// behind. Check it after C is closed.
func (s *Subscription) Dropped() bool {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.dropped
}

// Cancel ends the subscription.
func (s *Subscription) Cancel() {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	if _, ok := s.log.subs[s]; ok {
		delete(s.log.subs, s)
		close(s.ch)
	}
}

// All returns the subscription as an iterator that ends when ctx is done or
// the subscription ends. Breaking out of the loop cancels the subscription.
func (s *Subscription) All(ctx context.Context) iter.Seq[vocab.Event] {
	return func(yield func(vocab.Event) bool) {
		defer s.Cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-s.ch:
				if !ok || !yield(ev) {
					return
				}
			}
		}
	}
}
