// Package sqlite is the embedded durable store.Store: the sessions of one
// or several processes in a single SQLite file, written through
// modernc.org/sqlite (pure Go, no cgo).
//
// # The file
//
// The file is an ordinary SQLite 3 database in WAL mode; any SQLite client
// can audit it while loopchart runs, e.g.
//
//	select seq, kind, payload from events where session = ? order by seq;
//	select seq, payload ->> '$.status' from events
//	 where session = ? and kind = 'agent/status' order by seq;
//	select session, head, datetime(updated / 1e9, 'unixepoch') from sessions
//	 order by updated desc;
//	select kind, seq from latest where session = ?;
//
// Schema version 1 (the statements as stored in the file, so that
// ".schema" in the sqlite3 shell shows them with their comments):
//
//	CREATE TABLE loopchart_schema (
//	  version INTEGER NOT NULL -- the schema version of this file
//	);
//	CREATE TABLE sessions (
//	  session TEXT PRIMARY KEY,  -- the session id
//	  head    INTEGER NOT NULL,  -- seq of the last event, 0 when none
//	  created INTEGER,           -- unix nanos of the first event, NULL when none
//	  updated INTEGER,           -- unix nanos of the last event, NULL when none
//	  run     TEXT NOT NULL,     -- the run of the last claim
//	  epoch   INTEGER NOT NULL,  -- the epoch of the last claim (only grows)
//	  holder  TEXT NOT NULL,     -- the Store holding the claim, '' when released
//	  status  TEXT NOT NULL      -- the last agent/status logged, '' when none
//	) WITHOUT ROWID;
//	CREATE TABLE events (
//	  session TEXT NOT NULL,     -- a session of the table sessions
//	  seq     INTEGER NOT NULL,  -- 1, 2, 3 ... with no gap
//	  at      INTEGER,           -- unix nanos, NULL for the zero time
//	  kind    TEXT NOT NULL,     -- e.g. 'turn/end', 'input/submit'
//	  turn    INTEGER NOT NULL,  -- 0 outside a turn
//	  step    INTEGER NOT NULL,  -- 0 outside a step
//	  v       INTEGER NOT NULL,  -- the envelope's schema version (store.SchemaVersion)
//	  payload TEXT,              -- the payload's JSON, NULL when none
//	  PRIMARY KEY (session, seq)
//	) WITHOUT ROWID;
//	CREATE TABLE latest (
//	  session TEXT NOT NULL,     -- a session of the table sessions
//	  kind    TEXT NOT NULL,     -- an event kind the session logged
//	  seq     INTEGER NOT NULL,  -- the seq of its last event of that kind
//	  PRIMARY KEY (session, kind)
//	) WITHOUT ROWID;
//
// Every table is keyed by session first, so that a session's rows sit
// together. The events and latest of a session exist only while its row
// in sessions does; the writer keeps it so (Verify checks it) rather than
// a FOREIGN KEY clause, whose lookup of the session for every inserted
// event cost a third of the writer's time. The table latest is what Latest reads: the last sequence
// number of each kind a session logged, kept by every append. (An index
// on events (session, kind, seq) would answer the same question, but it
// scatters each append's entries over one index page per kind, and made
// group commits three times slower.)
//
// Beside the file live SQLite's <db>-wal and <db>-shm, and the directory
// <db>-holders of the Stores' lock files (see below).
//
// The file's application_id is 0x4c4f4f50 ("LOOP"); its auto_vacuum mode
// is INCREMENTAL, set before the first table. Open creates the schema in a
// new (empty) file, migrates an older one under an exclusive transaction,
// and refuses with store.ErrSchema a file whose schema version is newer
// than this package knows, or that is not a loopchart store at all.
//
// # Writing: one writer, group commit
//
// Every write of a Store goes through one goroutine that owns one
// connection. An Append encodes its events in the caller's goroutine and
// queues them; the writer writes every append queued (up to
// Options.MaxBatch events) in one transaction: appends of all sessions
// share one commit and its fsync, and the appends that arrive while it is
// written and synced form the next transaction. The writer never waits on
// a timer. Each append is checked (its claim, its first sequence
// number) against the heads and epochs the writer keeps in memory, which
// it loads again whenever another connection changed the file (PRAGMA
// data_version), and is written under its own SAVEPOINT: a failing
// append rolls back only itself. A failed COMMIT fails every append of
// the transaction, and the writer loads the heads again. An Append
// returns once its transaction is committed; with Synchronous "FULL" (the
// default) that commit is on disk.
//
// # Claims between processes
//
// A claim (run, epoch) is stored with its session and checked inside each
// append's transaction (epoch fencing). Each Store has a random holder id
// and holds, for its lifetime, an exclusive flock on the file
// <db>-holders/<holder>.lock. A Claim of a session that another holder
// holds tries to lock that holder's file: when it can, the holder is dead
// (its process exited, so the kernel dropped its lock) and the claim takes
// the session over with the next epoch; when it cannot, the claim fails
// with store.ErrClaimed. Release and Close give claims up explicitly.
//
// # Reading
//
// Read pages through a session in short queries (512 events each), so a
// long reader never holds a read transaction open and checkpoints proceed.
// A session that does not exist is store.ErrNoSession; one that exists but
// cannot be read (a damaged page, a gap) is store.ErrLoad naming it.
//
// # Maintenance and damage
//
// The writer asks for a PASSIVE checkpoint every Options.CheckpointEvery
// commits, which a checkpointer goroutine runs on a connection of its own
// while commits go on (a passive checkpoint never blocks a writer). Such a
// checkpoint copies the log into the database but cannot reset it while
// commits go on, so the writer runs one itself, between two transactions,
// when the log has grown by about Options.JournalSizeLimit: the log stays
// within about twice that. It runs a TRUNCATE checkpoint on Close. Verify runs PRAGMA
// integrity_check (never done on Open); Prune deletes old sessions and
// returns their pages to the file system. Copy a live store with Backup
// (VACUUM INTO), never with cp: a copy of the database file without its
// -wal file silently loses the commits not yet checkpointed.
package sqlite
