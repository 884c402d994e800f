package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// ReadOnlyOptions configures OpenReadOnly. The zero value is the default;
// negative numbers are errors.
type ReadOnlyOptions struct {
	// BusyTimeout is how long a query waits for a lock another process
	// holds (a checkpoint resetting the write-ahead log, a recovery)
	// before it fails; 5 s when zero.
	BusyTimeout time.Duration
	// Conns is the number of pooled read connections; 4 when zero. One
	// more connection is kept for DataVersion.
	Conns int
}

// ReadOnly reads a store file that other processes (or other Stores of
// this one) may be writing. Make one with OpenReadOnly; it is safe for
// concurrent use.
//
// It never writes: its connections are opened with mode=ro and
// query_only, it never creates a file (a missing database is an error),
// never migrates a schema, never claims a session and takes no lock file.
// Each method runs its queries in one short read transaction and copies
// what it read before it returns, so no read transaction outlives a call
// and the writer's checkpoints proceed whatever a caller does with the
// results.
//
// A database in WAL mode can be opened read-only while its writer runs
// (the -wal and -shm files exist) and after it stopped: SQLite removes
// those files when the last connection closes, and a read-only
// connection then makes them again beside the database (an empty -wal
// file and the -shm index), which stay after it closed; the directory
// must be writable, as it must for any reader of a WAL database. The
// database file itself is never written.
type ReadOnly struct {
	path string
	db   *sql.DB

	// mu guards watch, the connection DataVersion asks: PRAGMA
	// data_version is per connection, so it must always be the same one.
	mu    sync.Mutex
	watch *sql.Conn
}

// defaultReadConns is the default of ReadOnlyOptions.Conns.
const defaultReadConns = 4

// OpenReadOnly opens the store file at path for reading only. A path with
// no file is an error matching fs.ErrNotExist (code log.load_failed); a
// file that is not a loopchart store, or whose schema is not the one this
// package writes, is store.ErrSchema.
func OpenReadOnly(ctx context.Context, path string, opts ReadOnlyOptions) (*ReadOnly, error) {
	switch {
	case opts.BusyTimeout < 0:
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative BusyTimeout %v", opts.BusyTimeout)
	case opts.Conns < 0:
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: negative Conns %d", opts.Conns)
	case path == "":
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: open read-only: empty path")
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	if opts.Conns == 0 {
		opts.Conns = defaultReadConns
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite store: open read-only: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "sqlite store: open %s read-only: %w", path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s read-only: no such database: %w", abs, fs.ErrNotExist)
	case err != nil:
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s read-only: %w", abs, err)
	case !fi.Mode().IsRegular():
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s read-only: not a regular file", abs)
	}
	db, err := sql.Open("sqlite", readOnlyDSN(abs, opts.BusyTimeout))
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s read-only: %w", abs, err)
	}
	db.SetMaxOpenConns(opts.Conns + 1)
	db.SetMaxIdleConns(opts.Conns + 1)
	r := &ReadOnly{path: abs, db: db}
	if err := r.start(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

// readOnlyDSN is the data source name of a read-only connection to the
// file at path: mode=ro (SQLite opens it read-only and never creates it),
// query_only, and no journal-mode or other pragma that writes.
func readOnlyDSN(path string, busy time.Duration) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(%d)&_pragma=query_only(1)", esc, busy.Milliseconds())
}

// start pins the DataVersion connection and checks the schema on it.
func (r *ReadOnly) start(ctx context.Context) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return r.openErr(err)
	}
	var app int64
	if err := conn.QueryRowContext(ctx, "PRAGMA application_id").Scan(&app); err != nil {
		conn.Close()
		return r.openErr(err)
	}
	if app != applicationID {
		conn.Close()
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s read-only: not a loopchart store (application_id %#x)", r.path, app)
	}
	var version int
	if err := conn.QueryRowContext(ctx, "SELECT version FROM loopchart_schema").Scan(&version); err != nil {
		conn.Close()
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s read-only: no schema version: %w", r.path, err)
	}
	if version != schemaVersion {
		conn.Close()
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s read-only: schema version %d, this binary reads %d (a writer of this version migrates older files when it opens them)", r.path, version, schemaVersion)
	}
	r.watch = conn
	return nil
}

// openErr types an error of OpenReadOnly: a file that is not a database
// is store.ErrSchema, anything else store.ErrLoad.
func (r *ReadOnly) openErr(err error) error {
	if sqliteCode(err) == sqlite3.SQLITE_NOTADB {
		return vocab.Errorf(vocab.CodeSchema, "sqlite store: open %s read-only: not a loopchart store: %w", r.path, err)
	}
	return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: open %s read-only: %w", r.path, err)
}

// loadErr types an error of reading like Store.loadErr.
func (r *ReadOnly) loadErr(ctx context.Context, op string, session vocab.ID, err error) error {
	return loadErr(ctx, op, r.path, session, err, func() bool { return false })
}

// Path is the absolute path of the database file.
func (r *ReadOnly) Path() string { return r.path }

// Close closes the connections. Later calls fail with vocab.CodeClosed.
func (r *ReadOnly) Close() error {
	r.mu.Lock()
	w := r.watch
	r.watch = nil
	r.mu.Unlock()
	if w == nil {
		return closedErr("close")
	}
	return errors.Join(w.Close(), r.db.Close())
}

// DataVersion returns SQLite's PRAGMA data_version of the file, asked on
// the same connection every time: it changes when another connection (a
// writer in this process or another) committed since the last call. Poll
// it to notice new events; each call is one short query.
func (r *ReadOnly) DataVersion(ctx context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watch == nil {
		return 0, closedErr("data version")
	}
	var v int64
	if err := r.watch.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
		return 0, r.loadErr(ctx, "data version", "", err)
	}
	return v, nil
}

// readTx runs f in one read transaction, ended before readTx returns.
func (r *ReadOnly) readTx(ctx context.Context, op string, session vocab.ID, f func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite store: %s: %w", op, context.Cause(ctx))
	}
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return r.loadErr(ctx, op, session, err)
	}
	defer tx.Rollback() // a read transaction has nothing to commit
	return r.loadErr(ctx, op, session, f(tx))
}

// Session returns the Info of session; a missing one is
// store.ErrNoSession.
func (r *ReadOnly) Session(ctx context.Context, session vocab.ID) (store.Info, error) {
	var in store.Info
	err := r.readTx(ctx, "session", session, func(tx *sql.Tx) error {
		var err error
		in, err = scanInfo(tx.QueryRowContext(ctx, `SELECT session, head, created, updated, run, epoch, holder, status
			FROM sessions WHERE session = ?`, string(session)))
		if errors.Is(err, sql.ErrNoRows) {
			return vocab.Errorf(vocab.CodeNoSession, "sqlite store: no session %s in %s", session, r.path)
		}
		return err
	})
	return in, err
}

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// scanInfo scans the columns session, head, created, updated, run, epoch,
// holder, status into an Info (a released claim has no run).
func scanInfo(row rowScanner) (store.Info, error) {
	var (
		in               store.Info
		created, updated *int64
		run, holder      string
	)
	if err := row.Scan(&in.Session, &in.Head, &created, &updated, &run, &in.Claim.Epoch, &holder, &in.Status); err != nil {
		return in, err
	}
	in.Created, in.Updated = timeOf(created), timeOf(updated)
	if holder != "" {
		in.Claim.Run = vocab.ID(run)
	}
	return in, nil
}

// SessionQuery selects a page of sessions for ReadOnly.Sessions.
type SessionQuery struct {
	// Contains keeps the sessions whose id contains it (ASCII letters
	// compared without case); every character is literal, % and _
	// included. Empty keeps every session.
	Contains string
	// Limit is the page size: 100 when zero, at most 1000.
	Limit int
	// Offset skips that many sessions first.
	Offset int
	// Latest names event kinds whose last event each session summary
	// carries (e.g. turn/start, prompt/state).
	Latest []vocab.EventKind
}

// SessionSummary is one session of a SessionPage.
type SessionSummary struct {
	store.Info
	// Latest holds, for each kind of SessionQuery.Latest the session
	// logged, its last event (its payload a copy).
	Latest map[vocab.EventKind]store.Record
}

// SessionPage is what ReadOnly.Sessions returns.
type SessionPage struct {
	// Sessions are the page's sessions, in order.
	Sessions []SessionSummary
	// More reports that sessions follow the page.
	More bool
}

// Page limits.
const (
	defaultSessionLimit = 100
	maxSessionLimit     = 1000
	defaultEventLimit   = 512
	maxEventLimit       = 10000
)

// Sessions returns a page of sessions in the order of Store.Sessions
// (the most recently updated first, then by id), read in one read
// transaction.
func (r *ReadOnly) Sessions(ctx context.Context, q SessionQuery) (SessionPage, error) {
	if q.Limit < 0 || q.Offset < 0 {
		return SessionPage{}, vocab.Errorf(vocab.CodeBadInput, "sqlite store: sessions: negative limit or offset")
	}
	limit := q.Limit
	if limit == 0 {
		limit = defaultSessionLimit
	}
	limit = min(limit, maxSessionLimit)
	var page SessionPage
	err := r.readTx(ctx, "sessions", "", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT session, head, created, updated, run, epoch, holder, status
			FROM sessions WHERE session LIKE ? ESCAPE '\'
			ORDER BY updated DESC NULLS LAST, session LIMIT ? OFFSET ?`,
			"%"+likeEscape(q.Contains)+"%", limit+1, q.Offset)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			in, err := scanInfo(rows)
			if err != nil {
				return err
			}
			page.Sessions = append(page.Sessions, SessionSummary{Info: in})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if len(page.Sessions) > limit {
			page.Sessions, page.More = page.Sessions[:limit], true
		}
		if len(q.Latest) == 0 || len(page.Sessions) == 0 {
			return nil
		}
		st, err := tx.PrepareContext(ctx, `SELECT e.seq, e.at, e.kind, e.turn, e.step, e.v, e.payload
			FROM latest l JOIN events e ON e.session = l.session AND e.seq = l.seq
			WHERE l.session = ? AND l.kind = ?`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i := range page.Sessions {
			s := &page.Sessions[i]
			for _, k := range q.Latest {
				rec, err := scanRecord(st.QueryRowContext(ctx, string(s.Session), string(k)), s.Session, nil)
				if errors.Is(err, sql.ErrNoRows) {
					continue
				}
				if err != nil {
					return err
				}
				if s.Latest == nil {
					s.Latest = make(map[vocab.EventKind]store.Record, len(q.Latest))
				}
				s.Latest[k] = rec
			}
		}
		return nil
	})
	if err != nil {
		return SessionPage{}, err
	}
	return page, nil
}

// likeEscape escapes the wildcards of a LIKE pattern (and the escape
// character, a backslash) so that s matches literally.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// scanRecord scans seq, at, kind, turn, step, v, payload into a Record of
// session, its payload its own copy; kinds interns kind strings when not
// nil.
func scanRecord(row rowScanner, session vocab.ID, kinds map[string]vocab.EventKind) (store.Record, error) {
	var (
		seq, turn, step, v int64
		at                 *int64
		kind, payload      []byte
	)
	if err := row.Scan(&seq, &at, &kind, &turn, &step, &v, &payload); err != nil {
		return store.Record{}, err
	}
	k, ok := kinds[string(kind)]
	if !ok {
		k = vocab.EventKind(kind)
		if kinds != nil {
			kinds[string(k)] = k
		}
	}
	return store.Record{Session: session, Seq: uint64(seq), At: timeOf(at), Kind: k, Turn: int(turn), Step: int(step), V: int(v), Payload: payload}, nil
}

// EventQuery selects a session's events for ReadOnly.Events.
type EventQuery struct {
	// From is the first sequence number (0 means 1); To the last (0: the
	// head).
	From, To uint64
	// Last selects the last Limit matching events of the range instead of
	// the first (still returned in order).
	Last bool
	// Limit is the page size: 512 when zero, at most 10,000.
	Limit int
	// Turns keeps the events of these turns (0 is outside any turn);
	// empty keeps every turn.
	Turns []int
	// KindPrefixes keeps the events whose kind starts with one of them
	// (literally: % and _ are not wildcards), e.g. "tool/" or
	// "machine/transition"; empty keeps every kind.
	KindPrefixes []string
}

// EventPage is what ReadOnly.Events returns.
type EventPage struct {
	// Records are the events found, in order, each with its own copy of
	// its payload.
	Records []store.Record
	// Head is the session's head when they were read.
	Head uint64
	// More reports that more matching events lie beyond the page (after
	// it, or before it with EventQuery.Last).
	More bool
}

// Events returns one page of session's events in one read transaction:
// the session's head and the rows are read together, copied, and the
// transaction ends before Events returns. A missing session is
// store.ErrNoSession.
func (r *ReadOnly) Events(ctx context.Context, session vocab.ID, q EventQuery) (EventPage, error) {
	if q.Limit < 0 {
		return EventPage{}, vocab.Errorf(vocab.CodeBadInput, "sqlite store: events: negative limit %d", q.Limit)
	}
	limit := q.Limit
	if limit == 0 {
		limit = defaultEventLimit
	}
	limit = min(limit, maxEventLimit)
	var page EventPage
	err := r.readTx(ctx, "events", session, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT head FROM sessions WHERE session = ?`, string(session)).Scan(&page.Head)
		if errors.Is(err, sql.ErrNoRows) {
			return vocab.Errorf(vocab.CodeNoSession, "sqlite store: no session %s in %s", session, r.path)
		}
		if err != nil {
			return err
		}
		to := page.Head
		if q.To != 0 {
			to = min(q.To, to)
		}
		var b strings.Builder
		b.WriteString(`SELECT seq, at, kind, turn, step, v, payload FROM events WHERE session = ? AND seq >= ? AND seq <= ?`)
		args := []any{string(session), int64(max(q.From, 1)), int64(to)}
		if len(q.Turns) > 0 {
			b.WriteString(` AND turn IN (?` + strings.Repeat(`, ?`, len(q.Turns)-1) + `)`)
			for _, t := range q.Turns {
				args = append(args, t)
			}
		}
		if len(q.KindPrefixes) > 0 {
			b.WriteString(` AND (`)
			for i, p := range q.KindPrefixes {
				if i > 0 {
					b.WriteString(` OR `)
				}
				b.WriteString(`kind LIKE ? ESCAPE '\'`)
				args = append(args, likeEscape(p)+"%")
			}
			b.WriteString(`)`)
		}
		if q.Last {
			b.WriteString(` ORDER BY seq DESC LIMIT ?`)
		} else {
			b.WriteString(` ORDER BY seq LIMIT ?`)
		}
		args = append(args, limit+1)
		rows, err := tx.QueryContext(ctx, b.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		kinds := map[string]vocab.EventKind{}
		for rows.Next() {
			rec, err := scanRecord(rows, session, kinds)
			if err != nil {
				return err
			}
			page.Records = append(page.Records, rec)
		}
		return rows.Err()
	})
	if err != nil {
		return EventPage{}, err
	}
	if len(page.Records) > limit {
		page.Records, page.More = page.Records[:limit], true
	}
	if q.Last {
		slices.Reverse(page.Records)
	}
	return page, nil
}
