package temporal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"github.com/loopchart/loopchart/vocab"
)

// SQLiteContent is a ContentStore in an SQLite file that every worker
// process on a machine can share (WAL mode; writers wait for each other).
// Workers on several machines need a store they can all reach: implement
// ContentStore over it.
type SQLiteContent struct {
	db *sql.DB
}

// OpenSQLiteContent opens (creating if needed) the content store at path.
func OpenSQLiteContent(ctx context.Context, path string) (*SQLiteContent, error) {
	if path == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "temporal: content store: no path")
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("temporal: content store %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS loopchart_content (ref TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("temporal: content store %s: %w", path, err)
	}
	return &SQLiteContent{db: db}, nil
}

// Put implements ContentStore: one transaction for all of blobs.
func (s *SQLiteContent) Put(ctx context.Context, blobs [][]byte) (err error) {
	if len(blobs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	st, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO loopchart_content (ref, data) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, b := range blobs {
		if _, err = st.ExecContext(ctx, string(RefOf(b)), b); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Get implements ContentStore.
func (s *SQLiteContent) Get(ctx context.Context, ref Ref) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, `SELECT data FROM loopchart_content WHERE ref = ?`, string(ref)).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, vocab.Errorf(CodeContentMissing, "content %s not found", ref)
	}
	if err != nil {
		return nil, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// Close closes the store.
func (s *SQLiteContent) Close() error { return s.db.Close() }
