package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// request is one piece of work for the writer goroutine: an append
// (session, claim, rows) or an op run in the writer's own transaction.
type request struct {
	ctx     context.Context
	session vocab.ID
	claim   store.Claim
	rows    []row
	// status is the status of the batch's last agent/status event, nil
	// when it has none.
	status *string
	// latest holds the batch's kinds, each with its last sequence number.
	latest []kindSeq
	op     func(w *writer) error
	// done receives the outcome.
	done chan error
}

// row is one event in the columns of the events table.
type row struct {
	seq           uint64
	at            any // int64 unix nanos, or nil for the zero time
	kind          string
	turn, step, v int
	payload       any // string, or nil
}

// kindSeq is a row of the latest table.
type kindSeq struct {
	kind string
	seq  uint64
}

// maxRows is the largest multi-row insert the writer prepares; a longer
// append is inserted in chunks of maxRows.
const maxRows = 16

// sessState is what the writer knows of a session: its row in sessions.
type sessState struct {
	head, epoch uint64
	run         vocab.ID
	holder      string
}

// writer owns the Store's write connection; only its goroutine uses it.
type writer struct {
	s    *Store
	conn *sql.Conn
	// ins[n-1] inserts n events; upsert[n-1] sets n rows of latest.
	ins, upsert         [maxRows]*sql.Stmt
	update, load, dataV *sql.Stmt
	// The statements of every transaction and savepoint, prepared once.
	beginTx, commitTx, savepoint, release, rollbackTo *sql.Stmt
	// cache holds the sessions this writer has checked, valid while
	// dataVersion is the file's PRAGMA data_version (no other connection
	// has committed since).
	cache       map[vocab.ID]*sessState
	dataVersion int64
	// held is an append taken from the queue that did not fit in the last
	// transaction; op is an op taken from the queue behind appends;
	// closing says the queue is closed.
	held, op  *request
	closing   bool
	batch     []*request
	errs      []error
	args      []any
	sinceCkpt int
	// ckpt asks the checkpointer for a passive checkpoint; ckptDone is
	// closed when it ended.
	ckpt, ckptDone chan struct{}
	// walBytes estimates what the commits wrote to the log since the
	// last checkpoint the writer ran itself; walFrames is the log's
	// length in frames (pages of pageSize bytes) the last background
	// checkpoint found.
	walBytes  int
	walFrames atomic.Int64
	pageSize  int64
}

func newWriter(ctx context.Context, s *Store, conn *sql.Conn) (*writer, error) {
	w := &writer{s: s, conn: conn, cache: map[vocab.ID]*sessState{}, dataVersion: -1, pageSize: 4096}
	if err := conn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&w.pageSize); err != nil {
		return nil, err
	}
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = conn.PrepareContext(ctx, q)
		return st
	}
	for n := 1; n <= maxRows; n++ {
		w.ins[n-1] = prep("INSERT INTO events (session, seq, at, kind, turn, step, v, payload) VALUES " +
			strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", n-1) + "(?, ?, ?, ?, ?, ?, ?, ?)")
		w.upsert[n-1] = prep("INSERT INTO latest (session, kind, seq) VALUES " +
			strings.Repeat("(?, ?, ?), ", n-1) + "(?, ?, ?) ON CONFLICT (session, kind) DO UPDATE SET seq = excluded.seq")
	}
	w.update = prep(`UPDATE sessions SET head = ?1, updated = coalesce(?2, updated), status = coalesce(?3, status),
		created = CASE WHEN head = 0 THEN ?4 ELSE created END WHERE session = ?5`)
	w.load = prep("SELECT head, epoch, run, holder FROM sessions WHERE session = ?")
	w.dataV = prep("PRAGMA data_version")
	w.beginTx = prep("BEGIN IMMEDIATE")
	w.commitTx = prep("COMMIT")
	w.savepoint = prep("SAVEPOINT append")
	w.release = prep("RELEASE append")
	w.rollbackTo = prep("ROLLBACK TO append")
	if err != nil {
		w.closeStmts()
		return nil, err
	}
	return w, nil
}

// closeStmts closes the prepared statements.
func (w *writer) closeStmts() {
	for _, st := range append(append(w.ins[:], w.upsert[:]...), w.update, w.load, w.dataV, w.beginTx, w.commitTx, w.savepoint, w.release, w.rollbackTo) {
		if st != nil {
			st.Close()
		}
	}
}

// run is the writer goroutine: it takes requests until the queue is
// closed. An append starts a transaction that takes in every append
// queued behind it (see commit); an op runs alone.
func (w *writer) run() {
	defer close(w.s.done)
	w.ckpt, w.ckptDone = make(chan struct{}, 1), make(chan struct{})
	go w.checkpointer()
	for {
		r := w.held
		w.held = nil
		if r == nil && !w.closing {
			var ok bool
			if r, ok = <-w.s.reqs; !ok {
				w.closing = true
			}
		}
		switch {
		case r == nil:
			w.shutdown()
			return
		case r.op != nil:
			r.done <- r.op(w)
		default:
			w.commit(r)
			if op := w.op; op != nil {
				w.op = nil
				op.done <- op.op(w)
			}
		}
	}
}

// take returns the next queued append without waiting, or nil when there
// is none, when the transaction holds n events and the append would take
// it past MaxBatch (it is held for the next one), or when an op or the
// queue's end comes first (they wait for the transaction's end).
func (w *writer) take(n int) *request {
	if w.held != nil || w.op != nil || w.closing {
		return nil
	}
	select {
	case r, ok := <-w.s.reqs:
		switch {
		case !ok:
			w.closing = true
		case r.op != nil:
			w.op = r
		case n+len(r.rows) > w.s.opts.MaxBatch:
			w.held = r
		default:
			return r
		}
	default:
	}
	return nil
}

// exec runs a statement on the writer's connection.
func (w *writer) exec(ctx context.Context, q string, args ...any) error {
	_, err := w.conn.ExecContext(ctx, q, args...)
	return err
}

// begin starts a write transaction and drops the cache when another
// connection has committed since the writer last looked.
func (w *writer) begin(ctx context.Context) error {
	if _, err := w.beginTx.ExecContext(ctx); err != nil {
		return err
	}
	var v int64
	if err := w.dataV.QueryRowContext(ctx).Scan(&v); err != nil {
		w.rollback()
		return err
	}
	if v != w.dataVersion {
		clear(w.cache)
		w.dataVersion = v
	}
	return nil
}

// rollback ends the transaction under way, if any, and drops the cache:
// it may hold what the transaction wrote.
func (w *writer) rollback() {
	w.exec(context.Background(), "ROLLBACK")
	clear(w.cache)
}

// state returns what the writer knows of session, loading it in the
// transaction under way; nil when there is no such session.
func (w *writer) state(ctx context.Context, session vocab.ID) (*sessState, error) {
	if st := w.cache[session]; st != nil {
		return st, nil
	}
	var st sessState
	var run string
	err := w.load.QueryRowContext(ctx, session).Scan(&st.head, &st.epoch, &run, &st.holder)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st.run = vocab.ID(run)
	w.cache[session] = &st
	return &st, nil
}

// appendFailed types a failure of the SQL of an append.
func (w *writer) appendFailed(session vocab.ID, err error) error {
	return vocab.Errorf(vocab.CodeAppendFailed, "sqlite store: append to %s in %s: %w", session, w.s.path, err)
}

// commit writes first and every append queued behind it (up to MaxBatch
// events) in one transaction, and tells each its outcome. The appends
// that arrive while it is written and committed form the next one: with
// every session waiting on its append, the sessions split into two groups
// that take turns, each commit holding about half of them. (Taking in
// appends that arrive while the transaction is written makes commits
// larger but no faster, and makes the first appends of a commit wait for
// the last: measured, p99 latency went from under 3 to about 4 times the
// mean.)
func (w *writer) commit(first *request) {
	ctx := context.Background()
	batch, errs := w.batch[:0], w.errs[:0]
	defer func() {
		clear(batch)
		w.batch, w.errs = batch[:0], errs[:0]
	}()
	tell := func() {
		for i, r := range batch {
			r.done <- errs[i]
		}
	}
	failAll := func(err error) {
		for i, r := range batch {
			if errs[i] == nil {
				errs[i] = w.appendFailed(r.session, err)
			}
		}
		tell()
	}
	batch, errs = append(batch, first), append(errs, nil)
	for n := len(first.rows); ; {
		r := w.take(n)
		if r == nil {
			break
		}
		batch, errs = append(batch, r), append(errs, nil)
		n += len(r.rows)
	}
	if err := w.begin(ctx); err != nil {
		failAll(err)
		return
	}
	written, rows := 0, 0
	for i := 0; ; i++ {
		if i == len(batch) {
			// Appends that arrived while this transaction was written
			// join it: they commit now, not one commit later (no wait:
			// only what is already queued).
			r := w.take(rows)
			if r == nil {
				break
			}
			batch, errs = append(batch, r), append(errs, nil)
		}
		r := batch[i]
		rows += len(r.rows)
		if i > 0 {
			w.s.opts.Failpoint("mid-batch")
		}
		if err := r.ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("sqlite store: append to %s: %w", r.session, context.Cause(r.ctx))
		} else {
			var fatal error
			errs[i], fatal = w.appendOne(ctx, r)
			if fatal != nil {
				// The transaction cannot go on (SQLite may have rolled it
				// back whole): nothing of it is written.
				w.s.log.Error("sqlite store: transaction aborted", "session", r.session, "err", fatal)
				w.rollback()
				failAll(fatal)
				return
			}
			if errs[i] == nil {
				written += len(r.rows)
			}
		}
	}
	w.s.opts.Failpoint("before-commit")
	if _, err := w.commitTx.ExecContext(ctx); err != nil {
		// Not retried: every append of the transaction fails, and the
		// heads are loaded again from the file.
		w.s.log.Error("sqlite store: commit failed", "appends", len(batch), "err", err)
		w.rollback()
		failAll(err)
		return
	}
	w.s.opts.Failpoint("after-commit")
	w.s.stats.commits.Add(1)
	w.s.stats.events.Add(int64(written))
	w.s.stats.appends.Add(int64(len(batch)))
	tell()
	w.walBytes += written * rowOverhead
	for _, r := range batch {
		for _, rw := range r.rows {
			if p, ok := rw.payload.(string); ok {
				w.walBytes += len(p)
			}
		}
	}
	if int64(w.walBytes) >= w.s.opts.JournalSizeLimit || w.walFrames.Load()*w.pageSize >= 2*w.s.opts.JournalSizeLimit {
		// The commits since the writer's last checkpoint wrote about a
		// journal's worth, or the log holds twice that: background
		// checkpoints, which run while commits go on, copy the log but
		// cannot reset it, so this one runs between two transactions and
		// the log is reset (it stays bounded, at about twice
		// JournalSizeLimit); most of it is copied already, so it is short.
		w.s.stats.ckptInline.Add(1)
		w.checkpoint(ctx, "PASSIVE")
	} else if w.sinceCkpt++; w.sinceCkpt >= w.s.opts.CheckpointEvery {
		// The checkpointer runs it beside the writer: commits go on while
		// the log is copied into the database (a passive checkpoint never
		// blocks a writer), so a checkpoint is no latency spike for the
		// appends behind it. One due while one runs is merged into it.
		w.sinceCkpt = 0
		w.s.stats.ckptDue.Add(1)
		select {
		case w.ckpt <- struct{}{}:
		default:
		}
	}

}

// appendOne writes the append r in the transaction under way, under its
// own savepoint. It returns the append's error, or a fatal error when the
// transaction cannot go on.
func (w *writer) appendOne(ctx context.Context, r *request) (err, fatal error) {
	st, err := w.state(ctx, r.session)
	switch {
	case err != nil:
		return nil, err
	case st == nil:
		return vocab.Errorf(vocab.CodeNoSession, "sqlite store: append: no session %s", r.session), nil
	case st.holder != w.s.holder || st.epoch != r.claim.Epoch || st.run != r.claim.Run:
		return vocab.Errorf(vocab.CodeClaimLost, "sqlite store: append to %s: claim %s/%d is not the session's", r.session, r.claim.Run, r.claim.Epoch), nil
	case r.rows[0].seq != st.head+1:
		return vocab.Errorf(vocab.CodeSequence, "sqlite store: append to %s: batch starts at %d, want %d", r.session, r.rows[0].seq, st.head+1), nil
	}
	if _, err := w.savepoint.ExecContext(ctx); err != nil {
		return nil, err
	}
	if err := w.write(ctx, r); err != nil {
		if code := sqliteCode(err); code != sqlite3.SQLITE_CONSTRAINT && code != sqlite3.SQLITE_MISMATCH && code != sqlite3.SQLITE_TOOBIG {
			return nil, err // I/O, full disk, damage: the transaction may be gone
		}
		if _, rerr := w.rollbackTo.ExecContext(ctx); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		if _, rerr := w.release.ExecContext(ctx); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return w.appendFailed(r.session, err), nil
	}
	if _, err := w.release.ExecContext(ctx); err != nil {
		return nil, err
	}
	st.head = r.rows[len(r.rows)-1].seq
	return nil, nil
}

// write inserts the rows of r, records their kinds in latest and moves
// the session's head.
func (w *writer) write(ctx context.Context, r *request) error {
	for rows := r.rows; len(rows) > 0; {
		n := min(len(rows), maxRows)
		args := w.args[:0]
		for _, e := range rows[:n] {
			args = append(args, string(r.session), int64(e.seq), e.at, e.kind, e.turn, e.step, e.v, e.payload)
		}
		w.args = args
		_, err := w.ins[n-1].ExecContext(ctx, args...)
		clear(args)
		if err != nil {
			return err
		}
		rows = rows[n:]
	}
	for ks := r.latest; len(ks) > 0; {
		n := min(len(ks), maxRows)
		args := w.args[:0]
		for _, k := range ks[:n] {
			args = append(args, string(r.session), k.kind, int64(k.seq))
		}
		w.args = args
		_, err := w.upsert[n-1].ExecContext(ctx, args...)
		clear(args)
		if err != nil {
			return err
		}
		ks = ks[n:]
	}
	first, last := r.rows[0], r.rows[len(r.rows)-1]
	var status any
	if r.status != nil {
		status = *r.status
	}
	_, err := w.update.ExecContext(ctx, int64(last.seq), last.at, status, first.at, string(r.session))
	return err
}

// checkpoint copies the write-ahead log into the database file.
// rowOverhead is what a row costs in the log beyond its payload (an
// estimate: page headers, the row's other columns, the index).
const rowOverhead = 128

// checkpointer runs the passive checkpoints the writer asks for, on a
// connection of the pool, until the writer shuts down.
func (w *writer) checkpointer() {
	defer close(w.ckptDone)
	for range w.ckpt {
		w.s.opts.Failpoint("checkpoint")
		var busy, log, done int
		start := time.Now()
		err := w.s.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done)
		if err != nil {
			w.s.log.Warn("sqlite store: checkpoint failed", "mode", "PASSIVE", "err", err)
			continue
		}
		w.walFrames.Store(int64(log))
		w.s.stats.checkpoints.Add(1)
		w.s.log.Debug("sqlite store: checkpoint", "mode", "PASSIVE", "busy", busy, "walFrames", log, "checkpointed", done, "took", time.Since(start))
	}
}

func (w *writer) checkpoint(ctx context.Context, mode string) error {
	w.sinceCkpt = 0
	w.s.opts.Failpoint("checkpoint")
	var busy, log, done int
	start := time.Now()
	err := w.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &log, &done)
	if err != nil {
		// (The log's growth still counts: the next commit tries again.)
		w.s.log.Warn("sqlite store: checkpoint failed", "mode", mode, "err", err)
		return err
	}
	w.walBytes = 0
	w.walFrames.Store(0)
	w.s.stats.checkpoints.Add(1)
	w.s.log.Debug("sqlite store: checkpoint", "mode", mode, "busy", busy, "walFrames", log, "checkpointed", done, "took", time.Since(start))
	return nil
}

// do runs op on the writer goroutine and returns its error, or the
// Store's closing.
func (s *Store) do(ctx context.Context, what string, op func(w *writer) error) error {
	if err := s.usable(ctx, what); err != nil {
		return err
	}
	r := &request{ctx: ctx, op: op, done: make(chan error, 1)}
	if err := s.submit(r, what); err != nil {
		return err
	}
	return <-r.done
}

// submit queues r for the writer, unless the Store is closed.
func (s *Store) submit(r *request, what string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return closedErr(what)
	}
	s.reqs <- r
	return nil
}

// tx runs f in a write transaction of the writer's connection, committing
// when it returns nil. A failure drops the writer's cache.
func (w *writer) tx(ctx context.Context, f func() error) error {
	if err := w.begin(ctx); err != nil {
		return err
	}
	if err := f(); err != nil {
		w.rollback()
		return err
	}
	if _, err := w.commitTx.ExecContext(ctx); err != nil {
		w.rollback()
		return err
	}
	return nil
}

// shutdown gives up the Store's claims and checkpoints; the writer's
// last work.
func (w *writer) shutdown() {
	ctx := context.Background()
	close(w.ckpt)
	<-w.ckptDone
	var errs []error
	if err := w.tx(ctx, func() error {
		return w.exec(ctx, "UPDATE sessions SET holder = '' WHERE holder = ?", w.s.holder)
	}); err != nil {
		errs = append(errs, fmt.Errorf("release claims: %w", err))
	}
	if !w.s.opts.NoCheckpointOnClose {
		if err := w.checkpoint(ctx, "TRUNCATE"); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint: %w", err))
		}
	}
	w.closeStmts()
	errs = append(errs, w.conn.Close())
	w.s.closeErr = errors.Join(errs...)
}
