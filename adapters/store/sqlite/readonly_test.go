package sqlite

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// openRO opens path read-only and closes it when the test ends.
func openRO(t *testing.T, path string) *ReadOnly {
	t.Helper()
	r, err := OpenReadOnly(context.Background(), path, ReadOnlyOptions{})
	if err != nil {
		t.Fatalf("OpenReadOnly(%s): %v", filepath.Base(path), err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestReadOnlyMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.db")
	_, err := OpenReadOnly(context.Background(), path, ReadOnlyOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReadOnly of a missing file: %v, want fs.ErrNotExist", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-holders"} {
		if exists(p) {
			t.Errorf("OpenReadOnly created %s", filepath.Base(p))
		}
	}
	if _, err := OpenReadOnly(context.Background(), t.TempDir(), ReadOnlyOptions{}); vocab.CodeOf(err) != vocab.CodeLoadFailed {
		t.Errorf("OpenReadOnly of a directory: %v", err)
	}
	if _, err := OpenReadOnly(context.Background(), path, ReadOnlyOptions{Conns: -1}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("negative Conns: %v", err)
	}
}

func TestReadOnlyRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a database "), 400), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	if _, err := rawDB(t, other).Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{garbage, empty, other} {
		before, _ := os.ReadFile(p)
		_, err := OpenReadOnly(context.Background(), p, ReadOnlyOptions{})
		if !errors.Is(err, store.ErrSchema) {
			t.Errorf("%s: got %v, want ErrSchema", filepath.Base(p), err)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Errorf("%s: OpenReadOnly changed the file", filepath.Base(p))
		}
	}
}

// The reader sees a live writer's commits (its -wal file exists) and
// notices them through DataVersion; after the writer is gone (no -wal
// file) it reads the same file without changing it.
func TestReadOnlyWithAndWithoutWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "loop.db")
	st := open(t, path, Options{})
	c := mustClaim(t, st, sessA, runA, true)
	evs := storetest.Fixture(sessA, 40, t0)
	mustAppend(t, st, sessA, c, evs[:20])
	if !exists(path + "-wal") {
		t.Fatal("a live writer has no -wal file")
	}

	r := openRO(t, path)
	page, err := r.Events(ctx, sessA, EventQuery{})
	if err != nil || len(page.Records) != 20 || page.Head != 20 {
		t.Fatalf("Events with a live writer: %d records, head %d, %v", len(page.Records), page.Head, err)
	}
	v1, err := r.DataVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.DataVersion(ctx); v != v1 {
		t.Fatalf("data_version moved without a write: %d then %d", v1, v)
	}
	mustAppend(t, st, sessA, c, evs[20:])
	if v, _ := r.DataVersion(ctx); v == v1 {
		t.Fatal("data_version did not move after another connection's commit")
	}
	if in, err := r.Session(ctx, sessA); err != nil || in.Head != 40 || in.Claim.Run != runA {
		t.Fatalf("Session: %+v, %v", in, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DataVersion(ctx); vocab.CodeOf(err) != vocab.CodeClosed {
		t.Errorf("DataVersion after Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(path + "-wal") {
		t.Fatal("the -wal file outlived its last connection")
	}

	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r = openRO(t, path)
	page, err = r.Events(ctx, sessA, EventQuery{From: 35})
	if err != nil || len(page.Records) != 6 || page.Records[0].Seq != 35 {
		t.Fatalf("Events without a writer: %d records, %v", len(page.Records), err)
	}
	if _, err := r.Session(ctx, sessB); !errors.Is(err, store.ErrNoSession) {
		t.Errorf("Session of a missing session: %v", err)
	}
	if _, err := r.Events(ctx, sessB, EventQuery{}); !errors.Is(err, store.ErrNoSession) {
		t.Errorf("Events of a missing session: %v", err)
	}
	r.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the read-only connection changed the database file")
	}
	// SQLite made the -wal and -shm files a WAL reader needs, and a
	// read-only connection cannot remove them: the -wal file stays empty.
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() != 0 {
		t.Errorf("the read-only connection wrote %d bytes of -wal", fi.Size())
	}
	// A writer opens the file after it as usual.
	st = open(t, path, Options{})
	c, head, err := st.Claim(ctx, sessA, runB, false)
	if err != nil || head != 40 {
		t.Fatalf("Claim after the reader: head %d, %v", head, err)
	}
	mustAppend(t, st, sessA, c, storetest.Fixture(sessA, 41, t0)[40:])
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReadOnlyEventQuery(t *testing.T) {
	ctx := context.Background()
	st, path := openTemp(t, Options{})
	c := mustClaim(t, st, sessA, runA, true)
	evs := storetest.Fixture(sessA, 200, t0)
	mustAppend(t, st, sessA, c, evs)
	r := openRO(t, path)

	seqs := func(p EventPage) []uint64 {
		var out []uint64
		for _, rec := range p.Records {
			out = append(out, rec.Seq)
		}
		return out
	}
	var wantTurn2, wantTool []uint64
	for _, e := range evs {
		if e.Turn == 2 {
			wantTurn2 = append(wantTurn2, e.Seq)
		}
		if e.Kind == vocab.EventToolCall || e.Kind == vocab.EventToolResult {
			wantTool = append(wantTool, e.Seq)
		}
	}
	p, err := r.Events(ctx, sessA, EventQuery{Turns: []int{2}})
	if err != nil || !slices.Equal(seqs(p), wantTurn2) {
		t.Errorf("turn 2: %v, %v; want %v", seqs(p), err, wantTurn2)
	}
	p, err = r.Events(ctx, sessA, EventQuery{KindPrefixes: []string{"tool/call", "tool/result"}})
	if err != nil || !slices.Equal(seqs(p), wantTool) {
		t.Errorf("tool kinds: %v, %v; want %v", seqs(p), err, wantTool)
	}
	if p, _ := r.Events(ctx, sessA, EventQuery{KindPrefixes: []string{"tool_"}}); len(p.Records) != 0 {
		t.Errorf("_ matched as a wildcard: %v", seqs(p))
	}
	p, err = r.Events(ctx, sessA, EventQuery{From: 10, Limit: 5})
	if err != nil || !slices.Equal(seqs(p), []uint64{10, 11, 12, 13, 14}) || !p.More {
		t.Errorf("a page from 10: %v more=%v, %v", seqs(p), p.More, err)
	}
	p, err = r.Events(ctx, sessA, EventQuery{To: 100, Last: true, Limit: 3})
	if err != nil || !slices.Equal(seqs(p), []uint64{98, 99, 100}) || !p.More {
		t.Errorf("the last page to 100: %v more=%v, %v", seqs(p), p.More, err)
	}
	p, _ = r.Events(ctx, sessA, EventQuery{From: 199})
	if !slices.Equal(seqs(p), []uint64{199, 200}) || p.More {
		t.Errorf("the tail: %v more=%v", seqs(p), p.More)
	}
	if !bytes.Equal(p.Records[1].Payload, mustRecord(t, evs[199]).Payload) {
		t.Errorf("payload %s, want %s", p.Records[1].Payload, mustRecord(t, evs[199]).Payload)
	}
}

func mustRecord(t *testing.T, e vocab.Event) store.Record {
	t.Helper()
	r, err := store.RecordOf(e)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Search is by substring of the id, with % and _ literal.
func TestReadOnlySessionsSearch(t *testing.T) {
	ctx := context.Background()
	st, path := openTemp(t, Options{})
	ids := []vocab.ID{"a%b", "a_b", "axb", `a\b`, "AXB-2"}
	for i, id := range ids {
		c := mustClaim(t, st, id, runA, true)
		mustAppend(t, st, id, c, storetest.Fixture(id, 12, t0.Add(time.Duration(i)*time.Minute)))
	}
	r := openRO(t, path)
	search := func(q string) []vocab.ID {
		t.Helper()
		p, err := r.Sessions(ctx, SessionQuery{Contains: q, Latest: []vocab.EventKind{vocab.EventTurnStart, vocab.EventStatus}})
		if err != nil {
			t.Fatal(err)
		}
		var out []vocab.ID
		for _, s := range p.Sessions {
			out = append(out, s.Session)
			if s.Latest[vocab.EventTurnStart].Turn == 0 || s.Latest[vocab.EventStatus].Payload == nil {
				t.Errorf("%s: latest %+v", s.Session, s.Latest)
			}
		}
		return out
	}
	for _, c := range []struct {
		q    string
		want []vocab.ID
	}{
		{"", []vocab.ID{"AXB-2", `a\b`, "axb", "a_b", "a%b"}}, // newest first
		{"%", []vocab.ID{"a%b"}},
		{"_", []vocab.ID{"a_b"}},
		{`\`, []vocab.ID{`a\b`}},
		{"xb", []vocab.ID{"AXB-2", "axb"}},
		{"zz", nil},
	} {
		if got := search(c.q); !slices.Equal(got, c.want) {
			t.Errorf("search %q: %v, want %v", c.q, got, c.want)
		}
	}
	p, err := r.Sessions(ctx, SessionQuery{Limit: 2, Offset: 1})
	if err != nil || len(p.Sessions) != 2 || p.Sessions[0].Session != `a\b` || !p.More {
		t.Errorf("page 2 of 2: %+v, %v", p, err)
	}
}
