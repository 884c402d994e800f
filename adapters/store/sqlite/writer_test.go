package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	sqlite "modernc.org/sqlite"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// gate is a Failpoint that blocks the writer at one named point until
// released, so that a test can queue appends behind a commit.
type gate struct {
	name    string
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	names   []string
}

func newGate(name string) *gate {
	return &gate{name: name, reached: make(chan struct{}), release: make(chan struct{})}
}

// arm makes the gate block the next time its point is reached.
func (g *gate) arm() { g.armed.Store(true) }

// failpoint records name and, the first time name is the gate's after
// arm, blocks.
func (g *gate) failpoint(name string) {
	g.mu.Lock()
	g.names = append(g.names, name)
	g.mu.Unlock()
	if name == g.name && g.armed.Load() {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
}

func (g *gate) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.names)
}

// waitQueued waits until n requests wait in st's queue. It spins: the
// writer is blocked in a failpoint, so the queue only grows.
func waitQueued(t *testing.T, st *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(st.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", len(st.reqs), n)
		}
		runtime.Gosched()
	}
}

// onWriter runs f on st's writer goroutine.
func onWriter(t *testing.T, st *Store, f func(w *writer) error) {
	t.Helper()
	if err := st.do(context.Background(), "test", f); err != nil {
		t.Fatalf("on the writer: %v", err)
	}
}

// TestGroupCommit queues appends of several sessions behind a blocked
// commit: they are written in one transaction, with one mid-batch
// failpoint between each two.
func TestGroupCommit(t *testing.T) {
	g := newGate("before-commit")
	st, _ := openTemp(t, Options{Failpoint: g.failpoint})
	const n = 8
	ids := make([]vocab.ID, n)
	claims := make([]store.Claim, n)
	var src vocab.SeqSource
	for i := range ids {
		ids[i] = src.NewID(t0)
		claims[i] = mustClaim(t, st, ids[i], runA, true)
	}
	first := make(chan error, 1)
	g.arm()
	go func() { first <- st.Append(context.Background(), ids[0], claims[0], storetest.Fixture(ids[0], 1, t0)) }()
	<-g.reached
	before := st.stats.commits.Load()
	errs := make(chan error, n-1)
	for i := 1; i < n; i++ {
		go func() { errs <- st.Append(context.Background(), ids[i], claims[i], storetest.Fixture(ids[i], 10, t0)) }()
	}
	waitQueued(t, st, n-1)
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := st.stats.commits.Load() - before; got != 2 {
		t.Fatalf("%d commits for the blocked append and %d queued ones, want 2", got, n-1)
	}
	mid := 0
	for _, name := range g.seen() {
		if name == "mid-batch" {
			mid++
		}
	}
	if mid != n-2 {
		t.Fatalf("%d mid-batch failpoints for a batch of %d appends, want %d (seen %v)", mid, n-1, n-2, g.seen())
	}
	for i := 1; i < n; i++ {
		if seqs, err := readAll(st, ids[i]); err != nil || len(seqs) != 10 {
			t.Fatalf("session %d: %v, %v", i, seqs, err)
		}
	}
}

// TestBatchFailuresIsolated puts failing appends (a wrong sequence, a
// lost claim, a missing session, an append whose SQL fails) in one
// transaction with good ones: only the failing ones fail, and they write
// nothing.
func TestBatchFailuresIsolated(t *testing.T) {
	g := newGate("before-commit")
	st, _ := openTemp(t, Options{Failpoint: g.failpoint})
	var src vocab.SeqSource
	ids := make([]vocab.ID, 6)
	claims := make([]store.Claim, len(ids))
	for i := range ids {
		ids[i] = src.NewID(t0)
		claims[i] = mustClaim(t, st, ids[i], runA, true)
		mustAppend(t, st, ids[i], claims[i], storetest.Fixture(ids[i], 2, t0))
	}
	// A trigger of the writer's connection makes the SQL of events of kind
	// test/fail fail, after the in-memory checks pass.
	onWriter(t, st, func(w *writer) error {
		return w.exec(context.Background(), `CREATE TEMP TRIGGER fail_kind BEFORE INSERT ON main.events
			WHEN NEW.kind = 'test/fail' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
	})
	stale := claims[2]
	claims[2] = mustClaim(t, st, ids[2], runB, false) // fences stale

	g0 := src.NewID(t0)
	c0 := mustClaim(t, st, g0, runA, true)
	first := make(chan error, 1)
	g.arm()
	go func() { first <- st.Append(context.Background(), g0, c0, storetest.Fixture(g0, 1, t0)) }()
	<-g.reached

	next := func(i, n int) []vocab.Event { return storetest.Fixture(ids[i], 2+n, t0)[2:] }
	failing := next(4, 3)
	failing[1].Kind = "test/fail"
	cases := []struct {
		session vocab.ID
		claim   store.Claim
		batch   []vocab.Event
		want    vocab.Code
	}{
		{ids[0], claims[0], next(0, 5), ""},
		{ids[1], claims[1], storetest.Fixture(ids[1], 5, t0)[3:], vocab.CodeSequence},
		{ids[2], stale, next(2, 2), vocab.CodeClaimLost},
		{sessC, claims[3], storetest.Fixture(sessC, 1, t0), vocab.CodeNoSession},
		{ids[4], claims[4], failing, vocab.CodeAppendFailed},
		{ids[5], claims[5], next(5, 4), ""},
		{ids[4], claims[4], next(4, 1), ""}, // after its failed append, at the same head
	}
	results := make([]chan error, len(cases))
	for i, c := range cases {
		results[i] = make(chan error, 1)
		go func() { results[i] <- st.Append(context.Background(), c.session, c.claim, c.batch) }()
		waitQueued(t, st, i+1) // in this order
	}
	before := st.stats.commits.Load()
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		err := <-results[i]
		if vocab.CodeOf(err) != c.want {
			t.Errorf("case %d (%s): got %v, want code %q", i, c.session, err, c.want)
		}
	}
	if got := st.stats.commits.Load() - before; got != 2 {
		t.Errorf("%d commits, want 2 (the blocked one and the batch)", got)
	}
	for i, want := range []int{7, 2, 2, 2, 3, 6} {
		if seqs, err := readAll(st, ids[i]); err != nil || len(seqs) != want {
			t.Errorf("session %d after the batch: %v, %v; want %d events", i, seqs, err, want)
		}
	}
	if _, err := readAll(st, sessC); !errors.Is(err, store.ErrNoSession) {
		t.Errorf("the missing session after the batch: %v", err)
	}
	// The heads the writer keeps are right: each session appends on.
	for _, i := range []int{0, 1, 4, 5} {
		head := map[int]int{0: 7, 1: 2, 4: 3, 5: 6}[i]
		mustAppend(t, st, ids[i], claims[i], storetest.Fixture(ids[i], head+1, t0)[head:])
	}
}

// TestFailedCommit fails a COMMIT (a commit hook refuses it): every append
// of the transaction fails, nothing of it is stored, and the writer's
// heads are loaded again, so the sessions append on from their true heads.
func TestFailedCommit(t *testing.T) {
	g := newGate("before-commit")
	st, _ := openTemp(t, Options{Failpoint: g.failpoint})
	var refuse atomic.Bool
	onWriter(t, st, func(w *writer) error {
		return w.conn.Raw(func(dc any) error {
			dc.(interface{ RegisterCommitHook(sqlite.CommitHookFn) }).RegisterCommitHook(func() int32 {
				if refuse.Load() {
					return 1
				}
				return 0
			})
			return nil
		})
	})
	ca := mustClaim(t, st, sessA, runA, true)
	cb := mustClaim(t, st, sessB, runA, true)
	a, b := storetest.Fixture(sessA, 10, t0), storetest.Fixture(sessB, 10, t0)
	mustAppend(t, st, sessA, ca, a[:2])
	mustAppend(t, st, sessB, cb, b[:3])

	refuse.Store(true)
	g.arm()
	errs := make(chan error, 2)
	go func() { errs <- st.Append(context.Background(), sessA, ca, a[2:5]) }()
	<-g.reached
	go func() { errs <- st.Append(context.Background(), sessB, cb, b[3:4]) }()
	waitQueued(t, st, 1)
	close(g.release) // the first commit fails, then the second
	for range 2 {
		wantCode(t, <-errs, vocab.CodeAppendFailed, "an append whose commit failed")
	}
	refuse.Store(false)
	for s, want := range map[vocab.ID]int{sessA: 2, sessB: 3} {
		if seqs, err := readAll(st, s); err != nil || len(seqs) != want {
			t.Fatalf("%s after failed commits: %v, %v; want %d events", s, seqs, err, want)
		}
	}
	wantCode(t, st.Append(context.Background(), sessA, ca, a[5:6]), vocab.CodeSequence, "an append after the head the failed commit would have made")
	mustAppend(t, st, sessA, ca, a[2:])
	mustAppend(t, st, sessB, cb, b[3:])
}

// TestFailpoints checks the names and order of the failpoints of a
// commit and a checkpoint.
func TestFailpoints(t *testing.T) {
	var mu sync.Mutex
	var names []string
	checkpointed := make(chan struct{})
	var once sync.Once
	st, _ := openTemp(t, Options{CheckpointEvery: 2, Failpoint: func(name string) {
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
		if name == "checkpoint" {
			once.Do(func() { close(checkpointed) })
		}
	}})
	c := mustClaim(t, st, sessA, runA, true) // a commit of its own, no failpoint
	evs := storetest.Fixture(sessA, 4, t0)
	mustAppend(t, st, sessA, c, evs[:2])
	mustAppend(t, st, sessA, c, evs[2:])
	// The checkpoint runs after the appenders are told: wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-checkpointed:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"before-commit", "after-commit", "before-commit", "after-commit", "checkpoint"}
	if !slices.Equal(names, want) {
		t.Fatalf("failpoints %v, want %v", names, want)
	}
}

// TestCheckpointEvery counts the writer's passive checkpoints.
func TestCheckpointEvery(t *testing.T) {
	st, path := openTemp(t, Options{CheckpointEvery: 3})
	c := mustClaim(t, st, sessA, runA, true)
	evs := storetest.Fixture(sessA, 10, t0)
	for i := range evs {
		mustAppend(t, st, sessA, c, evs[i:i+1])
	}
	// A checkpoint every 3 commits at most: asked of the checkpointer
	// (which runs them beside the writer), or run by the writer itself
	// when the one before could not catch up (each resets the count).
	due, inline := st.stats.ckptDue.Load(), st.stats.ckptInline.Load()
	if due+inline < 3 || due+inline > 10 {
		t.Fatalf("%d checkpoints asked for and %d run inline after 10 commits, every 3; want 3 or more", due, inline)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got := st.stats.checkpoints.Load(); got < 1+inline {
		t.Fatalf("%d checkpoints ran, %d of them inline, and one at close", got, inline)
	}
	_ = path
}

// TestCloseStopsWriter checks that no goroutine outlives Close and that
// queued appends are written first.
func TestCloseStopsWriter(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	st, _ := openTemp(t, Options{})
	c := mustClaim(t, st, sessA, runA, true)
	mustAppend(t, st, sessA, c, storetest.Fixture(sessA, 3, t0))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.done:
	default:
		t.Fatal("the writer goroutine still runs after Close")
	}
	wantCode(t, st.Close(), vocab.CodeClosed, "a second Close")
}

// TestPragmasEveryConnection checks the DSN's pragmas on every connection
// of the pool, the writer's included, for each Synchronous setting.
func TestPragmasEveryConnection(t *testing.T) {
	for _, sync := range []struct {
		name string
		want int
	}{{"FULL", 2}, {"NORMAL", 1}, {"OFF", 0}} {
		t.Run(sync.name, func(t *testing.T) {
			st, _ := openTemp(t, Options{Synchronous: sync.name, BusyTimeout: 1234 * time.Millisecond, JournalSizeLimit: 1 << 20})
			ctx := context.Background()
			check := func(what string, q func(string) *sql.Row) {
				t.Helper()
				var mode string
				var syn, busy, fk, limit, autockpt int
				for name, dst := range map[string]any{
					"journal_mode": &mode, "synchronous": &syn, "busy_timeout": &busy,
					"foreign_keys": &fk, "journal_size_limit": &limit, "wal_autocheckpoint": &autockpt,
				} {
					if err := q("PRAGMA " + name).Scan(dst); err != nil {
						t.Fatalf("%s: PRAGMA %s: %v", what, name, err)
					}
				}
				if mode != "wal" || syn != sync.want || busy != 1234 || fk != 1 || limit != 1<<20 || autockpt != 0 {
					t.Errorf("%s: journal_mode %s synchronous %d busy_timeout %d foreign_keys %d journal_size_limit %d wal_autocheckpoint %d",
						what, mode, syn, busy, fk, limit, autockpt)
				}
			}
			// Hold every reader connection of the pool at once, so that
			// each is a different one.
			conns := make([]*sql.Conn, readers)
			for i := range conns {
				c, err := st.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns[i] = c
			}
			for i, c := range conns {
				check("reader "+string(rune('0'+i)), func(q string) *sql.Row { return c.QueryRowContext(ctx, q) })
			}
			for _, c := range conns {
				c.Close()
			}
			onWriter(t, st, func(w *writer) error {
				check("writer", func(q string) *sql.Row { return w.conn.QueryRowContext(ctx, q) })
				return nil
			})
			var av int
			if err := st.db.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&av); err != nil || av != 2 {
				t.Errorf("auto_vacuum %d, %v; want 2 (incremental)", av, err)
			}
		})
	}
}

// TestMaxBatch caps the events of one transaction: appends queued behind
// a blocked commit are split into transactions of at most MaxBatch
// events (an append is never split).
func TestMaxBatch(t *testing.T) {
	g := newGate("before-commit")
	st, _ := openTemp(t, Options{MaxBatch: 7, Failpoint: g.failpoint})
	var src vocab.SeqSource
	const n = 6
	ids := make([]vocab.ID, n+1)
	claims := make([]store.Claim, n+1)
	for i := range ids {
		ids[i] = src.NewID(t0)
		claims[i] = mustClaim(t, st, ids[i], runA, true)
	}
	g.arm()
	first := make(chan error, 1)
	go func() { first <- st.Append(context.Background(), ids[n], claims[n], storetest.Fixture(ids[n], 1, t0)) }()
	<-g.reached
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- st.Append(context.Background(), ids[i], claims[i], storetest.Fixture(ids[i], 3, t0)) }()
	}
	waitQueued(t, st, n)
	before := st.stats.commits.Load()
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// 1 blocked, then 6 appends of 3 events in pairs (6 ≤ 7 < 9).
	if got := st.stats.commits.Load() - before; got != 1+n/2 {
		t.Fatalf("%d commits, want %d", got, 1+n/2)
	}
}
