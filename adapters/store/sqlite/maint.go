package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Verify checks the whole file: SQLite's PRAGMA integrity_check (which
// Open never runs: it reads every page), that no event belongs to a
// session the table sessions does not list, that every
// session's head is its number of events, and that the table latest
// matches the events. Damage is store.ErrLoad naming
// the file, and the sessions when it can.
func (s *Store) Verify(ctx context.Context) error {
	if err := s.usable(ctx, "verify"); err != nil {
		return err
	}
	problems, err := s.strings(ctx, "PRAGMA integrity_check(20)")
	if err != nil {
		return s.loadErr(ctx, "verify", "", err)
	}
	if len(problems) != 1 || problems[0] != "ok" {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: verify: %s is damaged: %s", s.path, strings.Join(problems, "; "))
	}
	orphans, err := s.strings(ctx, `SELECT DISTINCT session FROM (
		  SELECT session FROM events WHERE session NOT IN (SELECT session FROM sessions)
		  UNION ALL SELECT session FROM latest WHERE session NOT IN (SELECT session FROM sessions)) LIMIT 10`)
	if err != nil {
		return s.loadErr(ctx, "verify", "", err)
	}
	if len(orphans) > 0 {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: verify: %s has events of sessions it does not list: %s", s.path, strings.Join(orphans, ", "))
	}
	bad, err := s.strings(ctx, `SELECT s.session || ' (head ' || s.head || ', ' || count(e.seq) || ' events up to ' || coalesce(max(e.seq), 0) || ')'
		FROM sessions s LEFT JOIN events e ON e.session = s.session
		GROUP BY s.session HAVING count(e.seq) != s.head OR coalesce(max(e.seq), 0) != s.head LIMIT 10`)
	if err != nil {
		return s.loadErr(ctx, "verify", "", err)
	}
	if len(bad) > 0 {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: verify: %s: sessions whose events do not match their heads: %s", s.path, strings.Join(bad, ", "))
	}
	bad, err = s.strings(ctx, `WITH kinds AS (SELECT session, kind, max(seq) AS seq FROM events GROUP BY session, kind),
		     missing AS (SELECT session, kind, seq FROM kinds EXCEPT SELECT session, kind, seq FROM latest),
		     extra AS (SELECT session, kind, seq FROM latest EXCEPT SELECT session, kind, seq FROM kinds)
		SELECT DISTINCT session || ' (' || kind || ')' FROM (SELECT * FROM missing UNION ALL SELECT * FROM extra) LIMIT 10`)
	if err != nil {
		return s.loadErr(ctx, "verify", "", err)
	}
	if len(bad) > 0 {
		return vocab.Errorf(vocab.CodeLoadFailed, "sqlite store: verify: %s: sessions whose table latest does not match their events: %s", s.path, strings.Join(bad, ", "))
	}
	return nil
}

// strings runs a query of one text column on a pooled connection.
func (s *Store) strings(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// pruneChunk is the number of sessions Prune deletes per transaction, so
// that appends are not held up behind one long transaction.
const pruneChunk = 64

// Prune deletes whole sessions (their events too) whose last event is
// older than olderThan, and sessions with no event; a session held by a
// live writer (of this Store or of another live process) is kept. It then
// returns the freed pages to the file system (PRAGMA incremental_vacuum)
// and reports how many sessions it deleted.
func (s *Store) Prune(ctx context.Context, olderThan time.Time) (int, error) {
	if err := s.usable(ctx, "prune"); err != nil {
		return 0, err
	}
	cut := int64(math.MaxInt64)
	if olderThan.Before(maxTime) {
		cut = olderThan.UnixNano()
	}
	if olderThan.Before(minTime) {
		cut = math.MinInt64
	}
	candidates, err := s.strings(ctx, "SELECT session FROM sessions WHERE updated IS NULL OR updated < ? ORDER BY session", cut)
	if err != nil {
		return 0, s.loadErr(ctx, "prune", "", err)
	}
	pruned := 0
	for len(candidates) > 0 {
		chunk := candidates[:min(pruneChunk, len(candidates))]
		candidates = candidates[len(chunk):]
		err := s.do(ctx, "prune", func(w *writer) error {
			n := 0
			err := w.tx(ctx, func() error {
				for _, id := range chunk {
					var holder string
					err := w.conn.QueryRowContext(ctx, "SELECT holder FROM sessions WHERE session = ? AND (updated IS NULL OR updated < ?)", id, cut).Scan(&holder)
					if err != nil {
						if errors.Is(err, sql.ErrNoRows) {
							continue // written to since, or gone
						}
						return err
					}
					if holder == w.s.holder {
						continue
					}
					if holder != "" {
						alive, err := w.s.holderAlive(holder)
						if err != nil {
							return fmt.Errorf("probe holder %s: %w", holder, err)
						}
						if alive {
							continue
						}
					}
					for _, table := range []string{"events", "latest", "sessions"} {
						if err := w.exec(ctx, "DELETE FROM "+table+" WHERE session = ?", id); err != nil {
							return err
						}
					}
					delete(w.cache, vocab.ID(id))
					n++
				}
				return nil
			})
			if err == nil {
				pruned += n
			}
			return err
		})
		if err != nil {
			return pruned, s.loadErr(ctx, "prune", "", err)
		}
	}
	err = s.do(ctx, "prune", func(w *writer) error {
		return w.exec(ctx, "PRAGMA incremental_vacuum")
	})
	if err != nil {
		return pruned, s.loadErr(ctx, "prune", "", err)
	}
	s.log.Info("sqlite store: pruned", "sessions", pruned, "olderThan", olderThan)
	return pruned, nil
}

// Backup writes a consistent copy of the whole store to a new file at
// path with VACUUM INTO, while the store keeps working: the safe way to
// copy a live store (a plain copy of the database file misses the commits
// still in its -wal file). The copy is compact and opens with Open. A path
// that exists is an error.
func (s *Store) Backup(ctx context.Context, path string) error {
	if err := s.usable(ctx, "backup"); err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return vocab.Errorf(vocab.CodeBadInput, "sqlite store: backup to %s: %w", path, err)
	}
	if _, err := os.Lstat(abs); !errors.Is(err, fs.ErrNotExist) {
		return vocab.Errorf(vocab.CodeBadInput, "sqlite store: backup to %s: the file exists", abs)
	}
	if _, err := s.db.ExecContext(ctx, "VACUUM INTO ?", abs); err != nil {
		return s.loadErr(ctx, "backup", "", err)
	}
	return nil
}

// Checkpoint copies the whole write-ahead log into the database file and
// truncates the log (PRAGMA wal_checkpoint(TRUNCATE)), waiting up to
// Options.BusyTimeout for readers of older snapshots. The writer also
// checkpoints by itself; Checkpoint is for tests and for tools that read
// the database file alone.
func (s *Store) Checkpoint(ctx context.Context) error {
	err := s.do(ctx, "checkpoint", func(w *writer) error {
		return w.checkpoint(ctx, "TRUNCATE")
	})
	return s.loadErr(ctx, "checkpoint", "", err)
}
