package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// rawDB opens the file at path with the driver alone, for tests that
// change or inspect it behind the store's back.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// filled makes a store file at path holding session A (n events) and B (5
// events), closed (so checkpointed).
func filled(t *testing.T, path string, n int) {
	t.Helper()
	st := open(t, path, Options{})
	ca := mustClaim(t, st, sessA, runA, true)
	cb := mustClaim(t, st, sessB, runA, true)
	evs := storetest.Fixture(sessA, n, t0)
	for i := 0; i < n; i += 500 {
		mustAppend(t, st, sessA, ca, evs[i:min(i+500, n)])
	}
	mustAppend(t, st, sessB, cb, storetest.Fixture(sessB, 5, t0))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantOpenRefused checks that Open of path fails with ErrSchema or ErrLoad
// and leaves no lock file behind.
func wantOpenRefused(t *testing.T, path string, codes ...vocab.Code) error {
	t.Helper()
	st, err := Open(context.Background(), path, Options{})
	if err == nil {
		st.Close()
		t.Fatalf("Open of %s succeeded", filepath.Base(path))
	}
	ok := false
	for _, c := range codes {
		ok = ok || vocab.CodeOf(err) == c
	}
	if !ok {
		t.Fatalf("Open of %s: got %v (code %q), want one of %v", filepath.Base(path), err, vocab.CodeOf(err), codes)
	}
	locks, _ := filepath.Glob(path + "-holders/*.lock")
	locks = slices.DeleteFunc(locks, func(name string) bool {
		return !validHolder(strings.TrimSuffix(filepath.Base(name), ".lock"))
	})
	if len(locks) > 0 {
		t.Errorf("a refused Open left lock files %v", locks)
	}
	return err
}

func TestOpenRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	t.Run("BadHeader", func(t *testing.T) {
		p := filepath.Join(dir, "header.db")
		filled(t, p, 100)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("not a database!!"), 0)
		f.Close()
		err = wantOpenRefused(t, p, vocab.CodeSchema)
		if !strings.Contains(err.Error(), p) {
			t.Errorf("the error does not name the file: %v", err)
		}
	})
	t.Run("RandomBytes", func(t *testing.T) {
		for _, n := range []int{10, 100, 4096, 65536} {
			wantOpenRefused(t, write("random.db", random(n)), vocab.CodeSchema, vocab.CodeLoadFailed)
		}
	})
	t.Run("TextFile", func(t *testing.T) {
		wantOpenRefused(t, write("notes.txt", []byte(strings.Repeat("a text file, not a database\n", 500))), vocab.CodeSchema, vocab.CodeLoadFailed)
	})
	t.Run("OtherSQLite", func(t *testing.T) {
		p := filepath.Join(dir, "other.db")
		db := rawDB(t, p)
		if _, err := db.Exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hi')"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		wantOpenRefused(t, p, vocab.CodeSchema)
	})
	t.Run("OtherApplication", func(t *testing.T) {
		p := filepath.Join(dir, "app.db")
		db := rawDB(t, p)
		if _, err := db.Exec("PRAGMA application_id = 1234"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		wantOpenRefused(t, p, vocab.CodeSchema)
	})
	t.Run("NewerSchema", func(t *testing.T) {
		p := filepath.Join(dir, "newer.db")
		filled(t, p, 10)
		db := rawDB(t, p)
		if _, err := db.Exec("UPDATE loopchart_schema SET version = ?", schemaVersion+1); err != nil {
			t.Fatal(err)
		}
		db.Close()
		err := wantOpenRefused(t, p, vocab.CodeSchema)
		if !errors.Is(err, store.ErrSchema) || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("Open of a newer file: %v", err)
		}
	})
	t.Run("Directory", func(t *testing.T) {
		p := filepath.Join(dir, "adir")
		os.Mkdir(p, 0o755)
		wantOpenRefused(t, p, vocab.CodeLoadFailed)
	})
	t.Run("EmptyFile", func(t *testing.T) {
		st := open(t, write("empty.db", nil), Options{})
		mustClaim(t, st, sessA, runA, true)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReopen opens a store again: the schema is not created twice and the
// sessions are all there.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	filled(t, path, 40)
	st := open(t, path, Options{})
	defer st.Close()
	if seqs, err := readAll(st, sessA); err != nil || len(seqs) != 40 {
		t.Fatalf("after reopening: %d events, %v", len(seqs), err)
	}
	var v, app int
	st.db.QueryRow("SELECT version FROM loopchart_schema").Scan(&v)
	st.db.QueryRow("PRAGMA application_id").Scan(&app)
	if v != schemaVersion || app != applicationID {
		t.Fatalf("schema version %d application_id %#x", v, app)
	}
}

// TestDamagedEventsPage damages pages in the middle of a session's events:
// Open works (it checks nothing), the session cannot be read and says so
// (store.ErrLoad naming it, never an empty session), Verify reports the
// file damaged, and the other session still reads.
func TestDamagedEventsPage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	filled(t, path, 3000)
	// Find the leaf pages of the events table, in key order: session A's
	// come first (its id sorts first), B's last.
	db := rawDB(t, path)
	var pageSize int64
	db.QueryRow("PRAGMA page_size").Scan(&pageSize)
	rows, err := db.Query("SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY path")
	if err != nil {
		t.Fatal(err)
	}
	var leaves []int64
	for rows.Next() {
		var p int64
		rows.Scan(&p)
		leaves = append(leaves, p)
	}
	rows.Close()
	db.Close()
	if len(leaves) < 20 {
		t.Fatalf("only %d leaf pages", len(leaves))
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Flip the b-tree page header (type, freeblock, cell count, content
	// start) of three of A's leaves in the middle.
	for _, p := range leaves[len(leaves)/3 : len(leaves)/3+3] {
		off := (p - 1) * pageSize
		hdr := make([]byte, 8)
		f.ReadAt(hdr, off)
		for i := range hdr {
			hdr[i] ^= 0xff
		}
		f.WriteAt(hdr, off)
	}
	f.Close()

	st := open(t, path, Options{})
	defer st.Close()
	seqs, err := readAll(st, sessA)
	if !errors.Is(err, store.ErrLoad) || !strings.Contains(err.Error(), string(sessA)) {
		t.Fatalf("Read of the damaged session: %d events, then %v; want store.ErrLoad naming %s", len(seqs), err, sessA)
	}
	if errors.Is(err, store.ErrNoSession) {
		t.Fatal("a damaged session reads as a missing one")
	}
	t.Logf("read %d events of A, then: %v", len(seqs), err)
	if seqs, err := readAll(st, sessB); err != nil || len(seqs) != 5 {
		t.Errorf("Read of the other session: %v, %v", seqs, err)
	}
	err = st.Verify(context.Background())
	if !errors.Is(err, store.ErrLoad) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Verify of a damaged file: %v; want store.ErrLoad naming the file", err)
	}
	t.Logf("Verify: %v", err)
}

// TestMissingEvent deletes an event behind the store's back: Read ends
// with store.ErrLoad at the gap, Verify names the session.
func TestMissingEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	filled(t, path, 1200)
	db := rawDB(t, path)
	if _, err := db.Exec("DELETE FROM events WHERE session = ? AND seq = 700", string(sessA)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st := open(t, path, Options{})
	defer st.Close()
	seqs, err := readAll(st, sessA)
	if !errors.Is(err, store.ErrLoad) || len(seqs) != 699 || !strings.Contains(err.Error(), string(sessA)) {
		t.Fatalf("Read across a gap: %d events, then %v", len(seqs), err)
	}
	err = st.Verify(context.Background())
	if !errors.Is(err, store.ErrLoad) || !strings.Contains(err.Error(), string(sessA)) {
		t.Fatalf("Verify with a gap: %v", err)
	}
}

// TestDeletedWAL: the write-ahead log of a store closed without a
// checkpoint (another Store kept the file open, so SQLite did not
// checkpoint either) is lost, e.g. by copying the database file alone.
// The copy opens, and holds exactly the commits up to the last
// checkpoint: whole transactions, heads that match their events.
func TestDeletedWAL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "loop.db")
	a := open(t, path, Options{NoCheckpointOnClose: true, CheckpointEvery: 1 << 20})
	b := open(t, path, Options{})
	defer b.Close()
	c := mustClaim(t, a, sessA, runA, true)
	evs := storetest.Fixture(sessA, 30, t0)
	for i := 0; i < 20; i += 5 {
		mustAppend(t, a, sessA, c, evs[i:i+5])
	}
	if err := a.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 30; i += 5 {
		mustAppend(t, a, sessA, c, evs[i:i+5])
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("no write-ahead log after a Close without checkpoint: %v", err)
	}
	copyPath := filepath.Join(dir, "copy.db")
	copyFile(t, path, copyPath)

	st := open(t, copyPath, Options{})
	defer st.Close()
	wantLostTail(t, st, 20)
	// The original, with its log, has everything.
	if seqs, err := readAll(b, sessA); err != nil || len(seqs) != 30 {
		t.Fatalf("the original: %d events, %v", len(seqs), err)
	}
}

// TestDeletedWALAfterCrash: a writer process is killed with commits only
// in its write-ahead log, which is then deleted.
func TestDeletedWALAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	ch, line := startChild(t, path, "wal")
	if line != "appended 30" {
		t.Fatalf("child said %q", line)
	}
	ch.kill()
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil {
			t.Fatal(err)
		}
	}
	st := open(t, path, Options{})
	defer st.Close()
	wantLostTail(t, st, 20)
	c, head, err := st.Claim(context.Background(), sessA, runB, false)
	if err != nil || head != 20 {
		t.Fatalf("Claim after the crash: head %d, %v", head, err)
	}
	mustAppend(t, st, sessA, c, storetest.Fixture(sessA, 21, t0)[20:])
}

// wantLostTail checks that session A holds exactly its first n events,
// and a file that verifies.
func wantLostTail(t *testing.T, st *Store, n int) {
	t.Helper()
	seqs, err := readAll(st, sessA)
	if err != nil || len(seqs) != n {
		t.Fatalf("after losing the log: %d events, %v; want %d", len(seqs), err, n)
	}
	for in, err := range st.Sessions(context.Background()) {
		if err != nil || in.Head != uint64(n) {
			t.Fatalf("Sessions after losing the log: %+v, %v", in, err)
		}
	}
	if err := st.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyLatest changes the table latest behind the store's back:
// Verify names the session.
func TestVerifyLatest(t *testing.T) {
	for _, change := range []string{
		"UPDATE latest SET seq = 5 WHERE session = ?1 AND kind = 'turn/end'",
		"DELETE FROM latest WHERE session = ?1 AND kind = 'usage'",
		"INSERT INTO latest VALUES (?1, 'no/such-kind', 3)",
		"DELETE FROM sessions WHERE session = ?1",
	} {
		path := filepath.Join(t.TempDir(), "loop.db")
		filled(t, path, 100)
		db := rawDB(t, path)
		if _, err := db.Exec(change, string(sessA)); err != nil {
			t.Fatal(err)
		}
		db.Close()
		st := open(t, path, Options{})
		err := st.Verify(context.Background())
		if !errors.Is(err, store.ErrLoad) || !strings.Contains(err.Error(), string(sessA)) {
			t.Errorf("Verify after %q: %v", change, err)
		}
		st.Close()
	}
}
