package sqlite

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// TestSchemaDocumented checks that the schema in the package
// documentation is the one Open creates, word for word.
func TestSchemaDocumented(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "//\tCREATE TABLE loopchart_schema")
	if start < 0 {
		t.Fatal("doc.go does not show the schema")
	}
	var lines []string
	for _, l := range strings.Split(doc[start:], "\n") {
		l, ok := strings.CutPrefix(l, "//\t")
		if !ok {
			break
		}
		lines = append(lines, l)
	}
	want, ok := strings.CutSuffix(migrations[0], "\nINSERT INTO loopchart_schema (version) VALUES (0);")
	if !ok {
		t.Fatal("the first migration does not end with its version row")
	}
	if got := strings.Join(lines, "\n"); got != want {
		t.Fatalf("doc.go shows the schema\n%s\nOpen creates\n%s", got, want)
	}
	// And SQLite keeps it as written, comments included.
	st, _ := openTemp(t, Options{})
	var sqlText string
	if err := st.db.QueryRow("SELECT sql FROM sqlite_schema WHERE name = 'events'").Scan(&sqlText); err != nil || !strings.Contains(want, sqlText) {
		t.Fatalf("sqlite_schema holds %q, %v", sqlText, err)
	}
}

// TestAuditSQL runs the queries of the package documentation: payloads
// are JSON text that SQLite's JSON functions read.
func TestAuditSQL(t *testing.T) {
	st, _ := openTemp(t, Options{})
	c := mustClaim(t, st, sessA, runA, true)
	mustAppend(t, st, sessA, c, storetest.Fixture(sessA, 24, t0))
	rows, err := st.db.Query(`select seq, payload ->> '$.status' from events
		where session = ? and kind = 'agent/status' order by seq`, string(sessA))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var seq int
		var status string
		rows.Scan(&seq, &status)
		got = append(got, status)
	}
	rows.Close()
	if strings.Join(got, ",") != "running,idle,running,idle" {
		t.Fatalf("statuses %v", got)
	}
	var types string
	st.db.QueryRow("select group_concat(distinct typeof(payload)) from events where payload is not null").Scan(&types)
	if types != "text" {
		t.Fatalf("payloads are stored as %s, want text", types)
	}
	rows, err = st.db.Query("explain query plan select seq from latest where session = ? and kind = ?", "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		rows.Scan(&id, &parent, &notused, &detail)
		plan = append(plan, detail)
	}
	rows.Close()
	if !strings.Contains(strings.Join(plan, "\n"), "PRIMARY KEY (session=? AND kind=?)") {
		t.Fatalf("Latest's query plan is not a lookup by key: %s", plan)
	}
	var kinds int
	st.db.QueryRow("select count(*) from latest where session = ?", string(sessA)).Scan(&kinds)
	if kinds != 11 {
		t.Fatalf("latest holds %d kinds of a session that logged 11", kinds)
	}
}

// TestReadPages reads a session longer than a page, from the start and
// from the middle, and a zero time.
func TestReadPages(t *testing.T) {
	st, _ := openTemp(t, Options{})
	c := mustClaim(t, st, sessA, runA, true)
	evs := storetest.Fixture(sessA, 3*pageSize+7, t0)
	evs[5].At = time.Time{}
	mustAppend(t, st, sessA, c, evs)
	for _, from := range []uint64{0, 1, pageSize, pageSize + 1, 2*pageSize + 3, uint64(len(evs)), uint64(len(evs)) + 1} {
		next := max(from, 1)
		for r, err := range st.Read(context.Background(), sessA, from) {
			if err != nil {
				t.Fatalf("Read from %d: %v", from, err)
			}
			e := evs[next-1]
			if r.Seq != next || r.Kind != e.Kind || !r.At.Equal(e.At) {
				t.Fatalf("Read from %d: got #%d %s %v, want #%d %s %v", from, r.Seq, r.Kind, r.At, next, e.Kind, e.At)
			}
			next++
		}
		if next != uint64(len(evs))+1 {
			t.Fatalf("Read from %d stopped before %d", from, next)
		}
	}
	wantCode(t, st.Append(context.Background(), sessA, c, storetest.Fixture(sessA, len(evs)+1, time.Unix(0, 0).AddDate(-400, 0, 0))[len(evs):]),
		vocab.CodeBadInput, "an event of the year 1570")
}

// TestSlowReaderDoesNotHoldLog pauses a Read in the middle of a session:
// no read transaction stays open, so a TRUNCATE checkpoint empties the
// write-ahead log meanwhile.
func TestSlowReaderDoesNotHoldLog(t *testing.T) {
	st, path := openTemp(t, Options{BusyTimeout: 100 * time.Millisecond, CheckpointEvery: 1 << 20})
	c := mustClaim(t, st, sessA, runA, true)
	evs := storetest.Fixture(sessA, 2*pageSize, t0)
	mustAppend(t, st, sessA, c, evs[:pageSize+10])
	next, stop := iter.Pull2(st.Read(context.Background(), sessA, 0))
	defer stop()
	if r, err, ok := next(); !ok || err != nil || r.Seq != 1 {
		t.Fatalf("first record: %d, %v, %v", r.Seq, err, ok)
	}
	mustAppend(t, st, sessA, c, evs[pageSize+10:])
	if err := st.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() != 0 {
		t.Fatalf("the log after a checkpoint under a paused reader: %v bytes, %v", fi.Size(), err)
	}
	n := 1
	for {
		r, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n++; r.Seq != uint64(n) {
			t.Fatalf("record %d after the pause: #%d", n, r.Seq)
		}
	}
	if n != pageSize+10 {
		t.Fatalf("the paused read yielded %d records, want the %d up to its head", n, pageSize+10)
	}
}

// TestPrune deletes old sessions that no live writer holds, and gives
// their pages back to the file system.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	st, path := openTemp(t, Options{})
	other := open(t, path, Options{})
	defer other.Close()
	old, recent := t0, t0.Add(48*time.Hour)
	var src vocab.SeqSource
	mk := func(s store.Store, at time.Time, n int, release bool) vocab.ID {
		id := src.NewID(t0)
		c := mustClaim(t, s, id, runA, true)
		if n > 0 {
			mustAppend(t, s, id, c, storetest.Fixture(id, n, at))
		}
		if release {
			s.Release(ctx, id, c)
		}
		return id
	}
	oldReleased := mk(st, old, 2000, true)
	oldHeld := mk(st, old, 10, false)
	recentReleased := mk(st, recent, 10, true)
	emptyReleased := mk(st, old, 0, true)
	oldOtherLive := mk(other, old, 10, false)
	oldDead := mk(st, old, 10, false)
	// oldDead's holder is a Store that died: its claim names a holder
	// whose lock file nobody holds.
	dead := "0123456789abcdef0123456789abcdef"
	os.WriteFile(st.holderFile(dead), nil, 0o644)
	db := rawDB(t, path)
	if _, err := db.Exec("UPDATE sessions SET holder = ? WHERE session = ?", dead, string(oldDead)); err != nil {
		t.Fatal(err)
	}
	var pagesBefore int
	st.db.QueryRow("PRAGMA page_count").Scan(&pagesBefore)

	n, err := st.Prune(ctx, t0.Add(time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("Prune: %d, %v; want 3", n, err)
	}
	for id, want := range map[vocab.ID]bool{
		oldReleased: false, oldHeld: true, recentReleased: true, emptyReleased: false, oldOtherLive: true, oldDead: false,
	} {
		_, err := readAll(st, id)
		if kept := err == nil; kept != want {
			t.Errorf("session %s: kept %v, want %v (%v)", id, kept, want, err)
		} else if !kept && !errors.Is(err, store.ErrNoSession) {
			t.Errorf("pruned session %s: %v", id, err)
		}
	}
	var orphans, free, pagesAfter int
	st.db.QueryRow(`SELECT (SELECT count(*) FROM events WHERE session NOT IN (SELECT session FROM sessions))
		+ (SELECT count(*) FROM latest WHERE session NOT IN (SELECT session FROM sessions))`).Scan(&orphans)
	st.db.QueryRow("PRAGMA freelist_count").Scan(&free)
	st.db.QueryRow("PRAGMA page_count").Scan(&pagesAfter)
	if orphans != 0 || free != 0 || pagesAfter >= pagesBefore {
		t.Fatalf("after Prune: %d orphan events, %d free pages, %d pages (before %d)", orphans, free, pagesAfter, pagesBefore)
	}
	if err := st.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBackup copies a live store with VACUUM INTO.
func TestBackup(t *testing.T) {
	ctx := context.Background()
	st, path := openTemp(t, Options{CheckpointEvery: 1 << 20})
	c := mustClaim(t, st, sessA, runA, true)
	mustAppend(t, st, sessA, c, storetest.Fixture(sessA, 100, t0)) // in the log only
	backup := filepath.Join(filepath.Dir(path), "backup.db")
	if err := st.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	wantCode(t, st.Backup(ctx, backup), vocab.CodeBadInput, "Backup over an existing file")
	cp := open(t, backup, Options{})
	defer cp.Close()
	if seqs, err := readAll(cp, sessA); err != nil || len(seqs) != 100 {
		t.Fatalf("the backup: %d events, %v", len(seqs), err)
	}
	if err := cp.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentOpen opens one new file from several Stores at once: one
// creates the schema, the others find it.
func TestConcurrentOpen(t *testing.T) {
	for range 20 {
		concurrentOpen(t)
	}
}

func concurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	for i := range stores {
		wg.Go(func() {
			st, err := Open(context.Background(), path, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = st
		})
	}
	wg.Wait()
	var av int
	for _, st := range stores {
		if st != nil {
			st.db.QueryRow("PRAGMA auto_vacuum").Scan(&av)
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	if av != 2 {
		t.Errorf("auto_vacuum %d after concurrent creation, want 2 (incremental)", av)
	}
}
