package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Options configures a Store. The zero value is the durable default.
// Negative numbers are errors.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "FULL" (the default:
	// an Append returns once its commit is on disk), "NORMAL" (a commit
	// reaches the disk at the next checkpoint: a power loss may lose the
	// last commits but never damages the file) or "OFF" (no fsync at all;
	// for benchmarks only).
	Synchronous string
	// BusyTimeout is how long a statement waits for a lock that another
	// connection (another process) holds before it fails; 5 s when zero.
	BusyTimeout time.Duration
	// MaxBatch caps the number of events one group commit writes; 8192
	// when zero. An append larger than the cap is committed alone.
	MaxBatch int
	// CheckpointEvery is the number of commits between two PASSIVE
	// checkpoints of the write-ahead log into the database file; 64 when
	// zero.
	CheckpointEvery int
	// JournalSizeLimit is the size in bytes the write-ahead log is
	// truncated to when a checkpoint resets it (PRAGMA
	// journal_size_limit); 64 MiB when zero.
	JournalSizeLimit int64
	// Logger receives the store's diagnostics (checkpoints, takeovers of
	// dead holders, failed commits); nothing is logged when nil.
	Logger *slog.Logger
	// NoCheckpointOnClose skips the TRUNCATE checkpoint of Close, for
	// crash tests. SQLite itself still checkpoints when the last
	// connection to the file closes, unless another connection (another
	// Store, another process) still has the file open.
	NoCheckpointOnClose bool
	// Failpoint, when set, is called by the writer goroutine at named
	// points of a group commit, so that a crash test can kill the process
	// there: "mid-batch" (between two appends of one transaction),
	// "before-commit", "after-commit" (before the appenders are told) and
	// "checkpoint" (before a checkpoint). It must not call the Store.
	Failpoint func(name string)
}

// Defaults of Options.
const (
	defaultBusyTimeout      = 5 * time.Second
	defaultMaxBatch         = 8192
	defaultCheckpointEvery  = 64
	defaultJournalSizeLimit = 64 << 20
)

// readers is the number of pooled connections besides the writer's.
const readers = 4

// applicationID marks a loopchart file (PRAGMA application_id): "LOOP".
const applicationID = 0x4c4f4f50

// withDefaults checks o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	switch s := strings.ToUpper(o.Synchronous); s {
	case "":
		o.Synchronous = "FULL"
	case "FULL", "NORMAL", "OFF":
		o.Synchronous = s
	default:
		return o, vocab.Errorf(vocab.CodeBadInput, "sqlite store: Synchronous %q is not FULL, NORMAL or OFF", o.Synchronous)
	}
	switch {
	case o.BusyTimeout < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative BusyTimeout %v", o.BusyTimeout)
	case o.MaxBatch < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative MaxBatch %d", o.MaxBatch)
	case o.CheckpointEvery < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative CheckpointEvery %d", o.CheckpointEvery)
	case o.JournalSizeLimit < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative JournalSizeLimit %d", o.JournalSizeLimit)
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = defaultBusyTimeout
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = defaultMaxBatch
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = defaultCheckpointEvery
	}
	if o.JournalSizeLimit == 0 {
		o.JournalSizeLimit = defaultJournalSizeLimit
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Failpoint == nil {
		o.Failpoint = func(string) {}
	}
	return o, nil
}

// Store is a store.Store in one SQLite file. Make one with Open; it is
// safe for concurrent use. Close it to give up its claims.
type Store struct {
	path string
	opts Options
	log  *slog.Logger
	db   *sql.DB
	// holder is this Store's id in sessions.holder; lock is its locked
	// file in holders.
	holder  string
	holders string
	lock    *os.File

	// mu guards closed and sending on reqs: Close takes it to close reqs
	// once no sender is left.
	mu     sync.RWMutex
	closed bool
	reqs   chan *request
	// done is closed when the writer goroutine has returned; closeErr is
	// what its shutdown reports.
	done     chan struct{}
	closeErr error

	// Prepared read statements (database/sql prepares them again on each
	// pooled connection that runs them).
	readPage, readHead, latest *sql.Stmt

	stats stats
}

// stats counts the writer's work, for tests and benchmarks.
type stats struct {
	commits, appends, events, checkpoints atomic.Int64
	// ckptDue counts the passive checkpoints the writer asked the
	// checkpointer for, ckptInline those it ran itself.
	ckptDue, ckptInline atomic.Int64
}

var _ store.Store = (*Store)(nil)

// Open opens the store in the file at path, creating the file and its
// schema when it does not exist. A file that is not a loopchart store, or
// whose schema is newer than this package's, is store.ErrSchema; one that
// cannot be read is store.ErrLoad. Open does not check the whole file
// (see Verify).
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: open: %w", err)
	}
	if path == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: open: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: open %s: %w", path, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.Mode().IsRegular() {
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: not a regular file", abs)
	}
	s := &Store{
		path:    abs,
		opts:    o,
		log:     o.Logger.With("store", abs),
		holders: abs + "-holders",
		reqs:    make(chan *request, 256),
		done:    make(chan struct{}),
	}
	// Through the creation lock even when the file exists: another
	// process may be creating it right now (its schema half written, its
	// journal mode being switched), and opening it then fails busy.
	if err := s.create(ctx); err != nil {
		return nil, err
	}
	s.db, err = sql.Open("sqlite", dsn(abs, o, false))
	if err != nil {
		return nil, s.openErr(err)
	}
	s.db.SetMaxOpenConns(1 + readers)
	s.db.SetMaxIdleConns(1 + readers)
	w, err := s.start(ctx)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	go w.run()
	return s, nil
}

// start pins the writer's connection, checks and migrates the schema,
// prepares the statements and takes the holder lock; it returns the
// writer, not yet running.
func (s *Store) start(ctx context.Context) (*writer, error) {
	conn, err := s.db.Conn(ctx) // the first connection: runs the DSN's pragmas
	if err != nil {
		return nil, s.openErr(err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, s.openErr(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: journal mode is %q, not wal", s.path, mode)
	}
	if err := s.migrate(ctx, conn); err != nil {
		return nil, err
	}
	for q, st := range map[string]**sql.Stmt{
		`SELECT seq, at, kind, turn, step, v, payload FROM events
		  WHERE session = ? AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?`: &s.readPage,
		`SELECT head FROM sessions WHERE session = ?`: &s.readHead,
		`SELECT (SELECT seq FROM latest WHERE session = ?1 AND kind = ?2),
		        EXISTS (SELECT 1 FROM sessions WHERE session = ?1)`: &s.latest,
	} {
		if *st, err = s.db.PrepareContext(ctx, q); err != nil {
			return nil, s.openErr(err)
		}
	}
	w, err := newWriter(ctx, s, conn)
	if err != nil {
		return nil, s.openErr(err)
	}
	if err := s.takeHolderLock(); err != nil {
		w.closeStmts()
		return nil, err
	}
	ok = true
	return w, nil
}

// create makes the schema in a new (or empty) file, on a connection that
// sets auto_vacuum INCREMENTAL first: the mode can only be chosen before
// the first table (or the switch to WAL) writes the file's first page.
// Setting it on every connection would make each start a write
// transaction.
//
// Creators (Stores opening the same new file at once, in this process or
// others) take turns on a lock file: two connections that create a file
// at the same time can fail with SQLITE_BUSY without waiting.
func (s *Store) create(ctx context.Context) error {
	if err := os.MkdirAll(s.holders, 0o755); err != nil {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: create %s: holders directory: %w", s.path, err)
	}
	f, err := os.OpenFile(filepath.Join(s.holders, "create.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: create %s: %w", s.path, err)
	}
	defer f.Close()
	if err := waitLockFile(f); err != nil {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: create %s: %w", s.path, err)
	}
	if !isNew(s.path) {
		return nil // created meanwhile
	}
	db, err := sql.Open("sqlite", dsn(s.path, s.opts, true))
	if err != nil {
		return s.openErr(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return s.openErr(err)
	}
	defer conn.Close()
	return s.migrate(ctx, conn)
}

// isNew reports whether the file at path is missing or empty.
func isNew(path string) bool {
	fi, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist) || err == nil && fi.Size() == 0
}

// dsn is the data source name of the file at path: every pooled
// connection runs its pragmas when it opens. With create, the connection
// sets auto_vacuum before anything else (see Store.create).
func dsn(path string, o Options, create bool) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	first := ""
	if create {
		first = "_auto_vacuum=INCREMENTAL&"
	}
	return fmt.Sprintf("file:%s?%s_pragma=busy_timeout(%d)"+
		"&_pragma=journal_mode(WAL)"+
		"&_pragma=synchronous(%s)"+
		"&_pragma=foreign_keys(1)"+
		"&_pragma=journal_size_limit(%d)"+
		"&_pragma=wal_autocheckpoint(0)"+ // the writer checkpoints, see Options.CheckpointEvery
		"&_txlock=immediate",
		esc, first, o.BusyTimeout.Milliseconds(), o.Synchronous, o.JournalSizeLimit)
}

// schemaVersion is the newest schema this package knows: the number of
// migrations.
var schemaVersion = len(migrations)

// migrations[v] takes a file from schema version v to v+1.
var migrations = []string{
	// 0 → 1: the tables of the package documentation.
	`CREATE TABLE loopchart_schema (
  version INTEGER NOT NULL -- the schema version of this file
);
CREATE TABLE sessions (
  session TEXT PRIMARY KEY,  -- the session id
  head    INTEGER NOT NULL,  -- seq of the last event, 0 when none
  created INTEGER,           -- unix nanos of the first event, NULL when none
  updated INTEGER,           -- unix nanos of the last event, NULL when none
  run     TEXT NOT NULL,     -- the run of the last claim
  epoch   INTEGER NOT NULL,  -- the epoch of the last claim (only grows)
  holder  TEXT NOT NULL,     -- the Store holding the claim, '' when released
  status  TEXT NOT NULL      -- the last agent/status logged, '' when none
) WITHOUT ROWID;
CREATE TABLE events (
  session TEXT NOT NULL,     -- a session of the table sessions
  seq     INTEGER NOT NULL,  -- 1, 2, 3 ... with no gap
  at      INTEGER,           -- unix nanos, NULL for the zero time
  kind    TEXT NOT NULL,     -- e.g. 'turn/end', 'input/submit'
  turn    INTEGER NOT NULL,  -- 0 outside a turn
  step    INTEGER NOT NULL,  -- 0 outside a step
  v       INTEGER NOT NULL,  -- the envelope's schema version (store.SchemaVersion)
  payload TEXT,              -- the payload's JSON, NULL when none
  PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE latest (
  session TEXT NOT NULL,     -- a session of the table sessions
  kind    TEXT NOT NULL,     -- an event kind the session logged
  seq     INTEGER NOT NULL,  -- the seq of its last event of that kind
  PRIMARY KEY (session, kind)
) WITHOUT ROWID;
INSERT INTO loopchart_schema (version) VALUES (0);`,
}

// migrate brings the file's schema to schemaVersion under an exclusive
// transaction, or refuses a file that is not a loopchart store or is
// newer than this package.
func (s *Store) migrate(ctx context.Context, conn *sql.Conn) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		return s.openErr(err)
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var app int64
	if err := conn.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
		return s.openErr(err)
	}
	if app != 0 && app != applicationID {
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: not a loopchart store (application_id %#x)", s.path, app)
	}
	var ours, tables int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE name = 'loopchart_schema'), count(*) FROM sqlite_schema`).Scan(&ours, &tables); err != nil {
		return s.openErr(err)
	}
	version := 0
	switch {
	case ours == 1:
		if err := conn.QueryRowContext(ctx, "SELECT version FROM loopchart_schema").Scan(&version); err != nil {
			return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: no schema version: %w", s.path, err)
		}
	case tables > 0:
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: not a loopchart store (no loopchart_schema table)", s.path)
	}
	if version > schemaVersion {
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: schema version %d is newer than %d, the newest this binary knows", s.path, version, schemaVersion)
	}
	if version == schemaVersion {
		_, err := conn.ExecContext(ctx, "COMMIT")
		return s.openErr(err)
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
			return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: migrate from schema version %d: %w", s.path, v, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "UPDATE loopchart_schema SET version = ?", schemaVersion); err != nil {
		return s.openErr(err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
		return s.openErr(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return s.openErr(err)
	}
	s.log.Info("sqlite store: schema migrated", "from", version, "to", schemaVersion)
	return nil
}

// takeHolderLock draws the Store's holder id and locks its file for the
// Store's lifetime.
func (s *Store) takeHolderLock() error {
	var b [16]byte
	rand.Read(b[:])
	s.holder = hex.EncodeToString(b[:])
	if err := os.MkdirAll(s.holders, 0o755); err != nil {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: holders directory: %w", s.path, err)
	}
	f, err := os.OpenFile(s.holderFile(s.holder), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: holder lock: %w", s.path, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: holder lock: %w", s.path, err)
	}
	s.lock = f
	return nil
}

// holderFile is the lock file of holder.
func (s *Store) holderFile(holder string) string {
	return filepath.Join(s.holders, holder+".lock")
}

// Close gives up every claim this Store holds, writes what it has
// queued, checkpoints the write-ahead log (see Options.NoCheckpointOnClose)
// and closes the file. Every later call, Close included, fails with
// vocab.CodeClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return closedErr("close")
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	errs := []error{s.closeErr}
	for _, st := range []*sql.Stmt{s.readPage, s.readHead, s.latest} {
		errs = append(errs, st.Close())
	}
	errs = append(errs, s.db.Close())
	// Remove the lock file while it is locked: a Claim that opened it
	// before may lock it after, and rightly finds this holder gone.
	rmErr := os.Remove(s.lock.Name())
	errs = append(errs, s.lock.Close())
	if rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		// Where an open file cannot be removed, remove it closed.
		if rmErr = os.Remove(s.lock.Name()); !errors.Is(rmErr, fs.ErrNotExist) {
			errs = append(errs, rmErr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return vocab.Errorf(vocab.CodeInternal, "sqlite store: close %s: %w", s.path, err)
	}
	return nil
}

// closedErr is the error of op on a closed Store.
func closedErr(op string) error {
	return vocab.Errorf(vocab.CodeClosed, "sqlite store: %s: the store is closed", op)
}

// usable reports ctx's end or the Store's closing as an error.
func (s *Store) usable(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite store: %s: %w", op, context.Cause(ctx))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return closedErr(op)
	}
	return nil
}

// sqliteCode returns the primary SQLite result code in err's chain, 0 when
// there is none.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// openErr types an error of Open: a file that is not a database is
// ErrSchema, anything else ErrLoad.
func (s *Store) openErr(err error) error {
	if err == nil {
		return nil
	}
	var ve *vocab.Error
	if errors.As(err, &ve) {
		return err
	}
	if sqliteCode(err) == sqlite3.SQLITE_NOTADB {
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s: not a loopchart store: %w", s.path, err)
	}
	return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s: %w", s.path, err)
}

// loadErr types an error of reading session (empty for the whole file):
// the end of ctx stays a context error, a closed store is CodeClosed,
// anything else is ErrLoad naming the session and the file.
func (s *Store) loadErr(ctx context.Context, op string, session vocab.ID, err error) error {
	return loadErr(ctx, op, s.path, session, err, func() bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.closed
	})
}

// loadErr types an error of reading session of the file at path (see
// Store.loadErr); closed reports whether the store was closed, and a
// driver error that says the database is closed counts as closed too.
func loadErr(ctx context.Context, op, path string, session vocab.ID, err error, closed func() bool) error {
	if err == nil {
		return nil
	}
	var ve *vocab.Error
	switch {
	case errors.As(err, &ve), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("sqlite store: %s: %w", op, context.Cause(ctx))
	case closed() || errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "database is closed"):
		return closedErr(op)
	case session == "":
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: %s %s: %w", op, path, err)
	}
	return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: %s: session %s in %s: %w", op, session, path, err)
}

// validHolder reports whether h has the form of a holder id: 32 lower-case
// hex digits (so that it is a safe file name).
func validHolder(h string) bool {
	if len(h) != 32 {
		return false
	}
	for _, c := range []byte(h) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
