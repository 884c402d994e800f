package sqlite

import (
	"context"
	"fmt"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Claim implements store.Store. A session held by another Store whose
// process is alive (another process, or another Store of this process on
// the same file) is store.ErrClaimed; one held by a Store whose process
// died is taken over. A session held by this Store is taken over at once:
// its earlier claim's appends then fail with store.ErrClaimLost.
func (s *Store) Claim(ctx context.Context, session, run vocab.ID, create bool) (store.Claim, uint64, error) {
	if session == "" {
		return store.Claim{}, 0, vocab.Errorf(vocab.CodeBadInput, "sqlite store: claim: empty session id")
	}
	var c store.Claim
	var head uint64
	err := s.do(ctx, "claim", func(w *writer) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite store: claim %s: %w", session, context.Cause(ctx))
		}
		var err error
		c, head, err = w.claim(ctx, session, run, create)
		return err
	})
	if err != nil {
		return store.Claim{}, 0, s.loadErr(ctx, "claim", session, err)
	}
	return c, head, nil
}

// claim claims session for run in a transaction of its own.
func (w *writer) claim(ctx context.Context, session, run vocab.ID, create bool) (store.Claim, uint64, error) {
	var took string
	var c store.Claim
	var head uint64
	err := w.tx(ctx, func() error {
		st, err := w.state(ctx, session)
		switch {
		case err != nil:
			return err
		case st == nil && !create:
			return vocab.Errorf(vocab.CodeNoSession, "sqlite store: claim: no session %s", session)
		case st == nil:
			if err := w.exec(ctx, `INSERT INTO sessions (session, head, created, updated, run, epoch, holder, status)
				VALUES (?, 0, NULL, NULL, ?, 1, ?, '')`, string(session), string(run), w.s.holder); err != nil {
				return err
			}
			st = &sessState{}
			w.cache[session] = st
		default:
			if st.holder != "" && st.holder != w.s.holder {
				alive, err := w.s.holderAlive(st.holder)
				if err != nil {
					return fmt.Errorf("probe holder %s: %w", st.holder, err)
				}
				if alive {
					return vocab.Errorf(vocab.CodeClaimed, "sqlite store: claim: session %s is held by a live writer (holder %s, run %s)", session, st.holder, st.run)
				}
				took = st.holder
			}
			if err := w.exec(ctx, "UPDATE sessions SET run = ?, epoch = ?, holder = ? WHERE session = ?",
				string(run), int64(st.epoch+1), w.s.holder, string(session)); err != nil {
				return err
			}
		}
		st.epoch++
		st.run, st.holder = run, w.s.holder
		c, head = store.Claim{Run: run, Epoch: st.epoch}, st.head
		return nil
	})
	if err != nil {
		return store.Claim{}, 0, err
	}
	if took != "" {
		w.s.log.Info("sqlite store: took over a session from a dead holder", "session", session, "holder", took, "epoch", c.Epoch)
	}
	return c, head, nil
}

// Release implements store.Store. A released session keeps its epoch but
// has no writer: no append succeeds until it is claimed again, Sessions
// shows its claim without a run, and any process may claim it at once.
// Releasing a session that does not exist is store.ErrNoSession.
func (s *Store) Release(ctx context.Context, session vocab.ID, claim store.Claim) error {
	err := s.do(ctx, "release", func(w *writer) error {
		return w.tx(ctx, func() error {
			st, err := w.state(ctx, session)
			switch {
			case err != nil:
				return err
			case st == nil:
				return vocab.Errorf(vocab.CodeNoSession, "sqlite store: release: no session %s", session)
			case st.holder == "" || st.epoch != claim.Epoch || st.run != claim.Run:
				return nil // no longer the session's claim
			}
			if err := w.exec(ctx, "UPDATE sessions SET holder = '' WHERE session = ?", string(session)); err != nil {
				return err
			}
			st.holder = ""
			return nil
		})
	})
	return s.loadErr(ctx, "release", session, err)
}
