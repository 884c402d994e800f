// Package memory is a store.Store that keeps every session in memory: for
// tests, and for embedding loopchart without durability.
//
// It behaves like a durable store in everything but surviving the process:
// payloads are encoded with store.RecordOf when appended, so readers see
// exactly the bytes a durable store would give back, and nothing a caller
// passes in or gets out aliases the store's own data. Claims are fenced
// within the process; there is no other process, so Claim never fails
// with store.ErrClaimed.
//
// FailAfter injects append failures, for tests of what a writer does when
// its log refuses a batch.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Store is an in-memory store.Store. Make one with New; it is safe for
// concurrent use.
type Store struct {
	mu       sync.RWMutex
	closed   bool
	sessions map[vocab.ID]*session
	// failAfter is how many more non-empty appends succeed before every
	// later one fails; negative when no failure is injected.
	failAfter int
}

// session is one stored session. Its records only grow: a reader may keep
// a prefix of records without holding the lock.
type session struct {
	records []store.Record
	// claim is the session's last claim; held says whether it still
	// stands (Release ends it).
	claim store.Claim
	held  bool
	// latest maps each kind to the sequence number of its last event.
	latest map[vocab.EventKind]uint64
	status string
}

var _ store.Store = (*Store)(nil)

// New returns an empty, open Store that injects no failures.
func New() *Store {
	return &Store{sessions: map[vocab.ID]*session{}, failAfter: -1}
}

// FailAfter makes the store accept n more non-empty appends; every
// non-empty Append after those fails with a vocab.CodeAppendFailed error
// and stores nothing of its batch, until FailAfter is called again. Only
// appends that succeed count. A negative n turns failure injection off.
func (s *Store) FailAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAfter = max(n, -1)
}

// usable reports ctx's end or the store's closing as an error, nil when
// the store can serve op. The caller holds s.mu.
func (s *Store) usable(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %s: %w", op, err)
	}
	if s.closed {
		return vocab.Errorf(vocab.CodeClosed, "memory store: %s: the store is closed", op)
	}
	return nil
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, id, run vocab.ID, create bool) (store.Claim, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx, "claim"); err != nil {
		return store.Claim{}, 0, err
	}
	ss := s.sessions[id]
	if ss == nil {
		if !create {
			return store.Claim{}, 0, vocab.Errorf(vocab.CodeNoSession, "memory store: claim: no session %s", id)
		}
		ss = &session{latest: map[vocab.EventKind]uint64{}}
		s.sessions[id] = ss
	}
	ss.claim, ss.held = store.Claim{Run: run, Epoch: ss.claim.Epoch + 1}, true
	return ss.claim, uint64(len(ss.records)), nil
}

// Append implements store.Store. The batch is encoded before anything is
// checked against the session, so a payload that cannot be encoded fails
// the whole batch with vocab.CodeInternal.
func (s *Store) Append(ctx context.Context, id vocab.ID, claim store.Claim, batch []vocab.Event) error {
	if len(batch) == 0 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.usable(ctx, "append")
	}
	recs := make([]store.Record, len(batch))
	for i, e := range batch {
		if e.Session != id {
			return vocab.Errorf(vocab.CodeBadInput, "memory store: append to %s: event %d belongs to session %q", id, e.Seq, e.Session)
		}
		if i > 0 && e.Seq != batch[0].Seq+uint64(i) {
			return vocab.Errorf(vocab.CodeSequence, "memory store: append to %s: event %d of the batch has sequence %d, want %d", id, i, e.Seq, batch[0].Seq+uint64(i))
		}
		r, err := store.RecordOf(e)
		if err != nil {
			return err
		}
		r.At = r.At.UTC() // no monotonic reading, no location: what a durable store gives back
		recs[i] = r
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx, "append"); err != nil {
		return err
	}
	ss := s.sessions[id]
	switch {
	case ss == nil:
		return vocab.Errorf(vocab.CodeNoSession, "memory store: append: no session %s", id)
	case !ss.held || claim != ss.claim:
		return vocab.Errorf(vocab.CodeClaimLost, "memory store: append to %s: claim %s/%d is not the session's", id, claim.Run, claim.Epoch)
	case batch[0].Seq != uint64(len(ss.records))+1:
		return vocab.Errorf(vocab.CodeSequence, "memory store: append to %s: batch starts at %d, want %d", id, batch[0].Seq, len(ss.records)+1)
	case s.failAfter == 0:
		return vocab.Errorf(vocab.CodeAppendFailed, "memory store: append to %s: injected failure", id)
	}
	if s.failAfter > 0 {
		s.failAfter--
	}
	ss.records = append(ss.records, recs...)
	for _, r := range recs {
		ss.latest[r.Kind] = r.Seq
		if r.Kind == vocab.EventStatus {
			var p vocab.StatusPayload
			if json.Unmarshal(r.Payload, &p) == nil {
				ss.status = p.Status
			}
		}
	}
	return nil
}

// Read implements store.Store. It yields copies: a caller may keep or
// change what it gets.
func (s *Store) Read(ctx context.Context, id vocab.ID, from uint64) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		s.mu.RLock()
		err := s.usable(ctx, "read")
		var recs []store.Record
		if ss := s.sessions[id]; err == nil && ss == nil {
			err = vocab.Errorf(vocab.CodeNoSession, "memory store: read: no session %s", id)
		} else if err == nil {
			recs = ss.records[:len(ss.records):len(ss.records)]
		}
		s.mu.RUnlock()
		if err != nil {
			yield(store.Record{}, err)
			return
		}
		for _, r := range recs[min(max(from, 1)-1, uint64(len(recs))):] {
			if err := ctx.Err(); err != nil {
				yield(store.Record{}, fmt.Errorf("memory store: read: %w", err))
				return
			}
			r.Payload = bytes.Clone(r.Payload)
			if !yield(r, nil) {
				return
			}
		}
	}
}

// Latest implements store.Store. A missing session is store.ErrNoSession.
func (s *Store) Latest(ctx context.Context, id vocab.ID, kind vocab.EventKind) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(ctx, "latest"); err != nil {
		return 0, err
	}
	ss := s.sessions[id]
	if ss == nil {
		return 0, vocab.Errorf(vocab.CodeNoSession, "memory store: latest: no session %s", id)
	}
	return ss.latest[kind], nil
}

// Sessions implements store.Store. Sessions updated at the same time (or
// holding no event) come in the order of their ids.
func (s *Store) Sessions(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		s.mu.RLock()
		err := s.usable(ctx, "sessions")
		infos := make([]store.Info, 0, len(s.sessions))
		for id, ss := range s.sessions {
			infos = append(infos, ss.info(id))
		}
		s.mu.RUnlock()
		if err != nil {
			yield(store.Info{}, err)
			return
		}
		slices.SortFunc(infos, func(a, b store.Info) int {
			return cmp.Or(b.Updated.Compare(a.Updated), cmp.Compare(a.Session, b.Session))
		})
		for _, in := range infos {
			if !yield(in, nil) {
				return
			}
		}
	}
}

// info describes ss, stored as id.
func (ss *session) info(id vocab.ID) store.Info {
	in := store.Info{Session: id, Head: uint64(len(ss.records)), Claim: ss.claim, Status: ss.status}
	if !ss.held {
		in.Claim.Run = ""
	}
	if n := len(ss.records); n > 0 {
		in.Created, in.Updated = ss.records[0].At, ss.records[n-1].At
	}
	return in
}

// Release implements store.Store. A released session keeps its epoch (the
// next claim is one above it) but has no writer: no append succeeds until
// it is claimed again, and Sessions shows its claim without a run.
// Releasing a session that does not exist is
// store.ErrNoSession.
func (s *Store) Release(ctx context.Context, id vocab.ID, claim store.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(ctx, "release"); err != nil {
		return err
	}
	ss := s.sessions[id]
	if ss == nil {
		return vocab.Errorf(vocab.CodeNoSession, "memory store: release: no session %s", id)
	}
	if claim == ss.claim {
		ss.held = false
	}
	return nil
}

// Close implements store.Store: it releases every claim and closes the
// store. Every later call, Close included, fails with vocab.CodeClosed.
// The sessions are dropped.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return vocab.Errorf(vocab.CodeClosed, "memory store: close: the store is closed")
	}
	s.closed = true
	s.sessions = nil
	return nil
}
