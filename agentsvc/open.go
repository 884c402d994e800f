package agentsvc

import (
	"context"
	"time"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Store keeps sessions' events durably: the SQLite store
// (adapters/store/sqlite) is the embedded default, the memory store
// (adapters/store/memory) serves tests.
type Store = store.Store

// DefaultCheckpointEvery is how many events a session Open made logs
// between two snapshots of its core, when Options.CheckpointEvery is 0.
const DefaultCheckpointEvery = 10_000

// Open opens session id of st, creating it when st has no such session,
// and claims it: this service is then its only writer (a live writer in
// another process makes Open fail with log.claimed; one that died is taken
// over, and its later appends fail with log.claim_lost). opt.Sink and
// opt.Session are ignored: events go to st.
//
// An existing session is rebuilt by folding its log (from its last
// snapshot), then recovered: what the process that wrote it left open is
// closed with events — every tool call without a result gets "Tool
// execution was interrupted before its result was recorded", an open step
// ends interrupted, an open turn ends interrupted and its prompt is
// cancelled. Queued input stays queued, and the session rests: register
// hooks, then call Continue to run it. The first model request after a
// reopen logs its request header as "resume".
//
// A log that cannot be read or folded is an error with code
// log.load_failed naming the session and event; Open never replaces it
// by a blank session. Close releases the claim.
func Open(ctx context.Context, st Store, id vocab.ID, opt Options) (*Service, error) {
	if st == nil || id == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: Open needs a store and a session id")
	}
	if opt.CheckpointEvery < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: negative CheckpointEvery %d", opt.CheckpointEvery)
	}
	if opt.CheckpointEvery == 0 {
		opt.CheckpointEvery = DefaultCheckpointEvery
	}
	s := newService()
	s.id = id
	if err := s.attach(ctx, st, opt, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// runIDs makes the run ids of sessions without an IDSource of their own:
// one source for the process, where a source per session would keep its
// entropy and its first block of text alive for one id.
var runIDs = vocab.NewULIDSource(nil)

// attach claims session s.id of st, folds it (a new session when st has
// none) and starts its lane; resume says the lane before was unloaded at
// rest (see engine.Options.Resume).
func (s *Service) attach(ctx context.Context, st Store, opt Options, resume *engine.Resume) error {
	id := s.id
	ids := opt.IDs
	if ids == nil {
		ids = runIDs
	}
	run := ids.NewID(nowOf(opt))
	claim, head, err := st.Claim(ctx, id, run, true)
	if err != nil {
		return err
	}
	log := store.NewLog(st, id, claim)
	opt.Sink, opt.Session = log, id
	var e *engine.Engine
	if head == 0 {
		e, err = s.bind(opt, nil, nil)
	} else {
		var f *store.Folded
		if f, err = store.Fold(ctx, st, id); err == nil {
			e, err = s.bind(opt, f, resume)
		}
	}
	if err != nil {
		_ = log.Release(context.WithoutCancel(ctx))
		return err
	}
	s.log.Store(log)
	s.eng.Store(e)
	return nil
}

func nowOf(opt Options) time.Time {
	if opt.Clock != nil {
		return opt.Clock.Now()
	}
	return time.Now()
}
