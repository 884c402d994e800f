package store

import (
	"context"
	"iter"

	"github.com/loopchart/loopchart/vocab"
)

// Log is one session of a Store under one writer claim, in the shape the
// session lane writes to and reads back from (an eventlog.Sink and
// eventlog.Reader).
type Log struct {
	st    Store
	id    vocab.ID
	claim Claim
}

// NewLog binds session id of st under claim.
func NewLog(st Store, id vocab.ID, claim Claim) *Log { return &Log{st: st, id: id, claim: claim} }

// Append appends a batch of the session's events under the log's claim.
func (l *Log) Append(ctx context.Context, batch []vocab.Event) error {
	return l.st.Append(ctx, l.id, l.claim, batch)
}

// AppendAsync starts appending a batch under the log's claim (at once
// when the store can, else it appends now) and returns the wait for it.
func (l *Log) AppendAsync(ctx context.Context, batch []vocab.Event) func(context.Context) error {
	if a, ok := l.st.(AsyncAppender); ok {
		return a.AppendAsync(ctx, l.id, l.claim, batch)
	}
	err := l.st.Append(ctx, l.id, l.claim, batch)
	return func(context.Context) error { return err }
}

// Since yields the session's events from sequence number from on.
func (l *Log) Since(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	return Events(ctx, l.st, l.id, from)
}

// Claim is the writer claim the log appends under.
func (l *Log) Claim() Claim { return l.claim }

// Session is the session id.
func (l *Log) Session() vocab.ID { return l.id }

// Release gives up the claim.
func (l *Log) Release(ctx context.Context) error { return l.st.Release(ctx, l.id, l.claim) }
