package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Append implements store.Store. The batch is checked (every event of
// session, gapless) and encoded by the caller's goroutine, then queued for
// the writer, which commits it with the appends of other sessions that
// wait at the same time. Append returns once that commit is done (on disk
// with Synchronous "FULL"). When ctx ends first, Append returns its error
// at once, and the append may still be committed: read the head to know.
func (s *Store) Append(ctx context.Context, session vocab.ID, claim store.Claim, batch []vocab.Event) error {
	return s.AppendAsync(ctx, session, claim, batch)(ctx)
}

// AppendAsync implements store.AsyncAppender: it checks, encodes and
// queues batch as Append does, and returns at once; wait returns what
// Append would have (when its context ends first, the batch may still be
// committed). Appends are committed in the order they were queued.
func (s *Store) AppendAsync(ctx context.Context, session vocab.ID, claim store.Claim, batch []vocab.Event) (wait func(context.Context) error) {
	r, err := s.queue(ctx, session, claim, batch)
	if err != nil || r == nil {
		return func(context.Context) error { return err }
	}
	return func(ctx context.Context) error {
		select {
		case err := <-r.done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("sqlite store: append to %s: %w (the batch may still be committed)", session, context.Cause(ctx))
		}
	}
}

// queue checks, encodes and queues batch for the writer (nil for an
// empty batch).
func (s *Store) queue(ctx context.Context, session vocab.ID, claim store.Claim, batch []vocab.Event) (*request, error) {
	if err := s.usable(ctx, "append"); err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return nil, nil
	}
	r := &request{ctx: ctx, session: session, claim: claim, rows: make([]row, len(batch)), done: make(chan error, 1)}
	for i, e := range batch {
		if e.Session != session {
			return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: append to %s: event %d belongs to session %q", session, e.Seq, e.Session)
		}
		if i > 0 && e.Seq != batch[0].Seq+uint64(i) {
			return nil, vocab.Errorf(vocab.CodeSequence, "sqlite store: append to %s: event %d of the batch has sequence %d, want %d", session, i, e.Seq, batch[0].Seq+uint64(i))
		}
		if e.Seq > math.MaxInt64 {
			return nil, vocab.Errorf(vocab.CodeSequence, "sqlite store: append to %s: sequence %d is out of range", session, e.Seq)
		}
		rec, err := store.RecordOf(e)
		if err != nil {
			return nil, err
		}
		at, err := nanos(e.At)
		if err != nil {
			return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: append to %s: event %d: %w", session, e.Seq, err)
		}
		var payload any
		if rec.Payload != nil {
			// The bytes are RecordOf's own and never written again.
			payload = unsafe.String(unsafe.SliceData(rec.Payload), len(rec.Payload))
		}
		r.rows[i] = row{seq: e.Seq, at: at, kind: string(e.Kind), turn: e.Turn, step: e.Step, v: rec.V, payload: payload}
		if k := slices.IndexFunc(r.latest, func(k kindSeq) bool { return k.kind == string(e.Kind) }); k >= 0 {
			r.latest[k].seq = e.Seq
		} else {
			r.latest = append(r.latest, kindSeq{kind: string(e.Kind), seq: e.Seq})
		}
		if e.Kind == vocab.EventStatus {
			if st, ok := statusOf(e.Payload, rec.Payload); ok {
				r.status = &st
			}
		}
	}
	if err := s.submit(r, "append"); err != nil {
		return nil, err
	}
	return r, nil
}

// statusOf returns the status an agent/status payload sets.
func statusOf(p any, raw json.RawMessage) (string, bool) {
	switch p := p.(type) {
	case vocab.StatusPayload:
		return p.Status, true
	case *vocab.StatusPayload:
		if p != nil {
			return p.Status, true
		}
		return "", false
	}
	var st vocab.StatusPayload
	if raw == nil || json.Unmarshal(raw, &st) != nil {
		return "", false
	}
	return st.Status, true
}

// The times an int64 of unix nanoseconds holds.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos returns the at column for t: its unix nanoseconds, nil for the
// zero time.
func nanos(t time.Time) (any, error) {
	switch {
	case t.IsZero():
		return nil, nil
	case t.Before(minTime) || t.After(maxTime):
		return nil, fmt.Errorf("time %v is outside the years 1678 to 2262", t)
	}
	return t.UnixNano(), nil
}

// timeOf is the time of an at column: UTC, the zero time for NULL.
func timeOf(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}
