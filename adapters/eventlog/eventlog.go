// Package eventlog is the in-process side of a session's event log: the
// Sink the session lane appends to before it starts any work, the Reader
// that reads a session's events back, an in-memory implementation of both
// (Memory), and a live fan-out of a session's events to any number of
// subscribers that keeps a bounded window in memory (Feed).
//
// The ordering contract comes from the architecture: the lane appends a
// batch of events and only when Append has returned nil does it start the
// work those events cause, hand results back, or acknowledge inputs. The
// lane then publishes the same batch to the session's Feed, which never
// blocks the lane: subscribers are cursors over the Feed's window, and one
// that falls behind the window reads the missing range from a Reader (the
// durable log) or ends with ErrDropped. No subscriber ever silently skips
// an event.
package eventlog

import (
	"context"
	"fmt"
	"iter"

	"github.com/loopchart/loopchart/vocab"
)

// Sink makes a session's events durable.
//
// The session lane calls Append once per batch, in order, with gapless
// sequence numbers, and starts no work caused by those events before Append
// returns nil. Append runs on the session lane, so it must not block for
// long. It must not retain batch: the caller may reuse the slice's array
// once Append returns, so a Sink copies what it keeps. A non-nil error stops the session: nothing of a
// batch that failed may be treated as durable, and the lane will not retry
// it.
type Sink interface {
	Append(ctx context.Context, batch []vocab.Event) error
}

// AsyncSink is a Sink that can start an append and be waited on later.
//
// The lane uses it for batches that start no work and answer no caller
// (streamed parts, mostly): it goes on stepping input while the append
// commits, and waits for every append it started, in order, before it
// starts work, delivers results, acknowledges an input, answers a query or
// rests. So the durability barrier stands where it matters, and a slow
// commit does not hold up a stream. AppendAsync must not retain batch
// after it returns (it may encode it at once), must keep the order of the
// appends it was given, and its wait func reports the append's outcome.
type AsyncSink interface {
	Sink
	AppendAsync(ctx context.Context, batch []vocab.Event) (wait func(context.Context) error)
}

// Reader reads a session's events back.
//
// Since yields the events with sequence number from (inclusive; sequence
// numbers start at 1, and 0 means 1) onwards, in order, ending at what is
// durable when the iteration starts. A failure is yielded as a final
// (zero Event, error) pair, after which the stream ends.
type Reader interface {
	Since(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error]
}

// ErrDropped matches (with errors.Is) every error of code
// vocab.CodeDropped (events.dropped): a stream could not deliver the next
// event, because it is no longer held where the stream reads from. The error names the first sequence number
// that was missed; errors.As with a *DroppedError gives it as a number.
var ErrDropped = vocab.CodeDropped.Err()

// DroppedError is the cause carried by an ErrDropped error: Seq is the first
// sequence number the stream could not deliver.
type DroppedError struct {
	// Seq is the first sequence number that was missed.
	Seq uint64
	// Reason says where the event was looked for.
	Reason string
}

// Error implements error.
func (e *DroppedError) Error() string {
	return fmt.Sprintf("missed event seq %d: %s", e.Seq, e.Reason)
}

// dropped returns an error that matches ErrDropped and carries a
// *DroppedError for seq.
func dropped(seq uint64, format string, args ...any) error {
	return vocab.Errorf(vocab.CodeDropped, "eventlog: %w", &DroppedError{Seq: seq, Reason: fmt.Sprintf(format, args...)})
}
