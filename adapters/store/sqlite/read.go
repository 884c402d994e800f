package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"iter"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// pageSize is the number of events one query of Read fetches.
const pageSize = 512

// Read implements store.Store. It reads the session's head, then pages
// through its events in queries of 512 events, each its own short
// read transaction: no transaction stays open while the caller holds a
// record, so a slow reader never keeps the log from being checkpointed.
// A yielded Record's Payload is reused by the next page: copy it to keep
// it. A gap in the stored sequence, or a page SQLite cannot read, ends
// the stream with store.ErrLoad naming the session.
func (s *Store) Read(ctx context.Context, session vocab.ID, from uint64) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		if err := s.usable(ctx, "read"); err != nil {
			yield(store.Record{}, err)
			return
		}
		var head uint64
		err := s.readHead.QueryRowContext(ctx, string(session)).Scan(&head)
		if errors.Is(err, sql.ErrNoRows) {
			yield(store.Record{}, vocab.Errorf(vocab.CodeNoSession, "sqlite store: read: no session %s", session))
			return
		}
		if err != nil {
			yield(store.Record{}, s.loadErr(ctx, "read", session, err))
			return
		}
		p := page{kinds: map[string]vocab.EventKind{}}
		for next := max(from, 1); next <= head; {
			if err := p.load(ctx, s, session, next, head); err != nil {
				yield(store.Record{}, s.loadErr(ctx, "read", session, err))
				return
			}
			if len(p.recs) == 0 {
				yield(store.Record{}, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: read: session %s in %s: events %d to %d (the head) are missing", session, s.path, next, head))
				return
			}
			for _, r := range p.recs {
				if r.Seq != next {
					yield(store.Record{}, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: read: session %s in %s: event %d is missing (next is %d)", session, s.path, next, r.Seq))
					return
				}
				if !yield(r, nil) {
					return
				}
				next++
			}
		}
	}
}

// page is one query's worth of records; its buffers are reused by the
// next page.
type page struct {
	recs []store.Record
	// buf holds the payloads of recs; ends[i] is where recs[i]'s ends.
	buf  []byte
	ends []int
	// kinds interns the kind strings.
	kinds map[string]vocab.EventKind
}

// load fills p with the events of session from from to at most head.
func (p *page) load(ctx context.Context, s *Store, session vocab.ID, from, head uint64) error {
	rows, err := s.readPage.QueryContext(ctx, string(session), int64(from), int64(head), pageSize)
	if err != nil {
		return err
	}
	defer rows.Close()
	p.recs, p.buf, p.ends = p.recs[:0], p.buf[:0], p.ends[:0]
	var (
		seq, turn, step, v int64
		at                 *int64
		kind, payload      sql.RawBytes
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &at, &kind, &turn, &step, &v, &payload); err != nil {
			return err
		}
		k, ok := p.kinds[string(kind)]
		if !ok {
			k = vocab.EventKind(kind)
			p.kinds[string(k)] = k
		}
		r := store.Record{Session: session, Seq: uint64(seq), At: timeOf(at), Kind: k, Turn: int(turn), Step: int(step), V: int(v)}
		if payload != nil {
			r.Payload = []byte{} // not nil: filled in below
		}
		p.buf = append(p.buf, payload...)
		p.ends = append(p.ends, len(p.buf))
		p.recs = append(p.recs, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	start := 0
	for i := range p.recs {
		if p.recs[i].Payload != nil {
			p.recs[i].Payload = p.buf[start:p.ends[i]:p.ends[i]]
		}
		start = p.ends[i]
	}
	return rows.Close()
}

// Latest implements store.Store: one lookup in the table latest. A
// missing session is store.ErrNoSession.
func (s *Store) Latest(ctx context.Context, session vocab.ID, kind vocab.EventKind) (uint64, error) {
	if err := s.usable(ctx, "latest"); err != nil {
		return 0, err
	}
	var seq sql.NullInt64
	var exists bool
	if err := s.latest.QueryRowContext(ctx, string(session), string(kind)).Scan(&seq, &exists); err != nil {
		return 0, s.loadErr(ctx, "latest", session, err)
	}
	if !exists {
		return 0, vocab.Errorf(vocab.CodeNoSession, "sqlite store: latest: no session %s", session)
	}
	return uint64(seq.Int64), nil
}

// Sessions implements store.Store: the sessions with events by their last
// event's time, newest first, then those without events; sessions of the
// same time in the order of their ids. It reads the whole list in one
// query (one snapshot) before it yields. A released session's claim has
// no run.
func (s *Store) Sessions(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		infos, err := s.sessions(ctx)
		if err != nil {
			yield(store.Info{}, err)
			return
		}
		for _, in := range infos {
			if !yield(in, nil) {
				return
			}
		}
	}
}

// sessions lists every session, in the order of Sessions.
func (s *Store) sessions(ctx context.Context) ([]store.Info, error) {
	if err := s.usable(ctx, "sessions"); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT session, head, created, updated, run, epoch, holder, status
		FROM sessions ORDER BY updated DESC NULLS LAST, session`)
	if err != nil {
		return nil, s.loadErr(ctx, "sessions", "", err)
	}
	defer rows.Close()
	var infos []store.Info
	for rows.Next() {
		var (
			in               store.Info
			created, updated *int64
			run, holder      string
		)
		if err := rows.Scan(&in.Session, &in.Head, &created, &updated, &run, &in.Claim.Epoch, &holder, &in.Status); err != nil {
			return nil, s.loadErr(ctx, "sessions", "", err)
		}
		in.Created, in.Updated = timeOf(created), timeOf(updated)
		if holder != "" {
			in.Claim.Run = vocab.ID(run)
		}
		infos = append(infos, in)
	}
	if err := rows.Err(); err != nil {
		return nil, s.loadErr(ctx, "sessions", "", err)
	}
	return infos, nil
}
