// Package storetest is the conformance suite of store.Store: every
// implementation runs Run in its tests. Fixture makes realistic events
// for other packages' tests and benchmarks.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/vocab"
)

// Session and run ids of the suite: well-formed ULIDs.
const (
	sessA = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	sessB = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAW")
	sessC = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAX")
	sessD = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAY")
	runA  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB3")
	runB  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB4")
	runC  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB5")
)

// t0 is the time of the suite's first events: in a zone other than UTC,
// with nanoseconds, so that a store that keeps the zone or loses precision
// shows it.
var t0 = time.Date(2025, 3, 1, 13, 0, 0, 123456789, time.FixedZone("CET", 3600))

// Run runs the conformance suite against the stores open makes: one fresh,
// empty store per subtest. Run closes every store it opens when the
// subtest ends (open need not), and reports an error of that Close.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, st store.Store)
	}{
		{"ClaimCreate", testClaimCreate},
		{"ClaimEpochs", testClaimEpochs},
		{"AppendRead", testAppendRead},
		{"ReadStopsAtHead", testReadStopsAtHead},
		{"EventRoundTrip", testEventRoundTrip},
		{"WrongFirstSeq", testWrongFirstSeq},
		{"GapInsideBatch", testGapInsideBatch},
		{"ForeignSession", testForeignSession},
		{"Takeover", testTakeover},
		{"Latest", testLatest},
		{"Sessions", testSessions},
		{"Release", testRelease},
		{"Concurrent", testConcurrent},
		{"NoRetain", testNoRetain},
		{"Canceled", testCanceled},
		{"Closed", testClosed},
		{"EmptyBatch", testEmptyBatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() {
				if err := st.Close(); err != nil && !errors.Is(err, vocab.CodeClosed.Err()) {
					t.Errorf("Close: %v", err)
				}
			})
			tc.f(t, st)
		})
	}
}

// claim claims session for run, failing the test on an error.
func claim(t *testing.T, st store.Store, session, run vocab.ID, create bool) (store.Claim, uint64) {
	t.Helper()
	c, head, err := st.Claim(t.Context(), session, run, create)
	if err != nil {
		t.Fatalf("Claim(%s, %s, create=%v): %v", session, run, create, err)
	}
	return c, head
}

// mustAppend appends batch, failing the test on an error.
func mustAppend(t *testing.T, st store.Store, session vocab.ID, c store.Claim, batch []vocab.Event) {
	t.Helper()
	if err := st.Append(t.Context(), session, c, batch); err != nil {
		t.Fatalf("Append(%s, seqs %v): %v", session, seqs(batch), err)
	}
}

// seqs lists the sequence numbers of batch, for messages.
func seqs(batch []vocab.Event) []uint64 {
	out := make([]uint64, len(batch))
	for i, e := range batch {
		out[i] = e.Seq
	}
	return out
}

// read collects the records Read yields (their payloads copied) up to the
// first error, which it returns. It checks that an error comes with a zero
// Record and ends the stream.
func read(t *testing.T, st store.Store, session vocab.ID, from uint64) ([]store.Record, error) {
	t.Helper()
	var out []store.Record
	var failed error
	for r, err := range st.Read(t.Context(), session, from) {
		if failed != nil {
			t.Errorf("Read(%s, %d) yielded %d after its error %v", session, from, r.Seq, failed)
			break
		}
		if err != nil {
			if !reflect.DeepEqual(r, store.Record{}) {
				t.Errorf("Read(%s, %d) yielded record %+v with its error %v", session, from, r, err)
			}
			failed = err
			continue
		}
		r.Payload = bytes.Clone(r.Payload)
		out = append(out, r)
	}
	return out, failed
}

// mustRead is read that fails the test on an error.
func mustRead(t *testing.T, st store.Store, session vocab.ID, from uint64) []store.Record {
	t.Helper()
	recs, err := read(t, st, session, from)
	if err != nil {
		t.Fatalf("Read(%s, %d): %v", session, from, err)
	}
	return recs
}

// wantErr fails the test unless errors.Is(err, target).
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, target)
	}
}

// wantRecords checks that got are exactly the stored forms of want.
func wantRecords(t *testing.T, got []store.Record, want []vocab.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records (seqs %v), want %d (seqs %v)", len(got), recordSeqs(got), len(want), seqs(want))
	}
	for i, e := range want {
		r := got[i]
		if r.Session != e.Session || r.Seq != e.Seq || r.Kind != e.Kind || r.Turn != e.Turn || r.Step != e.Step {
			t.Errorf("record %d: got %s #%d %s turn %d step %d, want %s #%d %s turn %d step %d",
				i, r.Session, r.Seq, r.Kind, r.Turn, r.Step, e.Session, e.Seq, e.Kind, e.Turn, e.Step)
		}
		if !r.At.Equal(e.At) || r.At.Location() != time.UTC {
			t.Errorf("record %d (#%d): at %v (%s), want %v in UTC", i, r.Seq, r.At, r.At.Location(), e.At.UTC())
		}
		if r.V != store.SchemaVersion {
			t.Errorf("record %d (#%d): V = %d, want %d", i, r.Seq, r.V, store.SchemaVersion)
		}
		var wantPayload []byte
		if e.Payload != nil {
			var err error
			if wantPayload, err = json.Marshal(e.Payload); err != nil {
				t.Fatalf("encode payload of %d: %v", e.Seq, err)
			}
		}
		if !bytes.Equal(r.Payload, wantPayload) {
			t.Errorf("record %d (#%d %s): payload\n%s\nwant\n%s", i, r.Seq, r.Kind, r.Payload, wantPayload)
		}
	}
}

func recordSeqs(recs []store.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// unchanged checks that session's log is still before.
func unchanged(t *testing.T, st store.Store, session vocab.ID, before []store.Record, what string) {
	t.Helper()
	after := mustRead(t, st, session, 0)
	if d := cmp.Diff(before, after); d != "" {
		t.Fatalf("%s changed the log of %s (-before +after):\n%s", what, session, d)
	}
}

func testClaimCreate(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, _, err := st.Claim(ctx, sessA, runA, false)
	wantErr(t, err, store.ErrNoSession, "Claim of a missing session without create")
	_, err = read(t, st, sessA, 0)
	wantErr(t, err, store.ErrNoSession, "Read of a missing session")
	_, err = read(t, st, sessA, 5)
	wantErr(t, err, store.ErrNoSession, "Read from 5 of a missing session")
	for in, err := range st.Sessions(ctx) {
		t.Fatalf("Sessions after a failed claim yielded %+v, %v; want nothing", in, err)
	}

	c, head := claim(t, st, sessA, runA, true)
	if want := (store.Claim{Run: runA, Epoch: 1}); c != want || head != 0 {
		t.Fatalf("Claim with create: got %+v head %d, want %+v head 0", c, head, want)
	}
	if recs := mustRead(t, st, sessA, 0); len(recs) != 0 {
		t.Fatalf("a new session holds %d records", len(recs))
	}
	c, head = claim(t, st, sessA, runB, false)
	if want := (store.Claim{Run: runB, Epoch: 2}); c != want || head != 0 {
		t.Fatalf("Claim of the created session: got %+v head %d, want %+v head 0", c, head, want)
	}
	_, err = read(t, st, sessB, 0)
	wantErr(t, err, store.ErrNoSession, "Read of another missing session")
}

func testClaimEpochs(t *testing.T, st store.Store) {
	var prev store.Claim
	for i, run := range []vocab.ID{runA, runB, runA, runC, runC} {
		c, head := claim(t, st, sessA, run, i == 0)
		if c.Epoch != prev.Epoch+1 || c.Run != run {
			t.Fatalf("claim %d: got %+v, want run %s epoch %d", i, c, run, prev.Epoch+1)
		}
		if want := uint64(3 * i); head != want {
			t.Fatalf("claim %d: head %d, want %d", i, head, want)
		}
		evs := Fixture(sessA, 3*(i+1), t0)
		mustAppend(t, st, sessA, c, evs[3*i:])
		prev = c
	}
	// The epochs of one session do not depend on another's.
	if c, _ := claim(t, st, sessB, runA, true); c.Epoch != 1 {
		t.Fatalf("first claim of a second session: epoch %d, want 1", c.Epoch)
	}
}

func testAppendRead(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 24, t0)
	mustAppend(t, st, sessA, c, evs[:1])
	mustAppend(t, st, sessA, c, evs[1:6])
	mustAppend(t, st, sessA, c, evs[6:])

	all := mustRead(t, st, sessA, 0)
	wantRecords(t, all, evs)
	wantRecords(t, mustRead(t, st, sessA, 1), evs)
	wantRecords(t, mustRead(t, st, sessA, 10), evs[9:])
	wantRecords(t, mustRead(t, st, sessA, 24), evs[23:])
	wantRecords(t, mustRead(t, st, sessA, 25), nil)
	wantRecords(t, mustRead(t, st, sessA, 1000), nil)

	// Stopping early is allowed and stops the stream.
	n := 0
	for _, err := range st.Read(t.Context(), sessA, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	if _, head := claim(t, st, sessA, runB, false); head != 24 {
		t.Fatalf("head after 24 events: %d", head)
	}
}

// testReadStopsAtHead appends while a Read is under way: the read yields
// the records up to the head when it started, and does not block the
// append.
func testReadStopsAtHead(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 12, t0)
	mustAppend(t, st, sessA, c, evs[:6])
	var got []uint64
	for r, err := range st.Read(t.Context(), sessA, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq == 1 {
			mustAppend(t, st, sessA, c, evs[6:])
		}
		got = append(got, r.Seq)
	}
	if want := []uint64{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("a read started at head 6 yielded %v, want %v", got, want)
	}
	wantRecords(t, mustRead(t, st, sessA, 0), evs)
}

func testEventRoundTrip(t *testing.T, st store.Store) {
	submit := goldenEvent("input/submit", sessA, 1, t0)
	end := goldenEvent(vocab.EventTurnEnd, sessA, 2, t0.Add(time.Second))
	result := goldenEvent(vocab.EventToolResult, sessA, 3, t0.Add(2*time.Second+time.Nanosecond))
	start := goldenEvent(vocab.EventTurnStart, sessA, 4, t0.Add(3*time.Second))
	want := []vocab.Event{submit, end, result, start}
	// Golden files are checked here, not assumed: a typed payload of each.
	if in, ok := submit.Payload.(vocab.Input); !ok || in.Kind != vocab.InSubmit || in.Message == nil || in.Message.Text() != "Read the README." {
		t.Fatalf("golden input/submit payload: %#v", submit.Payload)
	}

	c, _ := claim(t, st, sessA, runA, true)
	mustAppend(t, st, sessA, c, want)
	recs := mustRead(t, st, sessA, 0)
	wantRecords(t, recs, want)
	for i, r := range recs {
		e, err := r.Event()
		if err != nil {
			t.Fatalf("record %d: Event: %v", r.Seq, err)
		}
		if d := cmp.Diff(want[i], e); d != "" {
			t.Errorf("record %d: Event differs (-want +got):\n%s", r.Seq, d)
		}
	}
	var got []vocab.Event
	for e, err := range store.Events(t.Context(), st, sessA, 2) {
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		got = append(got, e)
	}
	if d := cmp.Diff(want[1:], got); d != "" {
		t.Fatalf("Events from 2 (-want +got):\n%s", d)
	}

	if in, ok := mustEvent(t, recs[0]).Payload.(vocab.Input); !ok || in.Message.Text() != "Read the README." || in.Message.Role != vocab.RoleUser {
		t.Errorf("read input/submit payload: %#v", mustEvent(t, recs[0]).Payload)
	}
	if p, ok := got[0].Payload.(vocab.TurnEndPayload); !ok || p.Reason.Kind != vocab.EndAborted || p.Steps != 2 {
		t.Errorf("read turn/end payload: %#v", got[0].Payload)
	}
	if p, ok := got[1].Payload.(vocab.ToolPayload); !ok || p.Result == nil || p.Result.Code != vocab.CodeToolDenied ||
		p.Result.Delivery == nil || p.Result.Delivery.Message.Text() != "Only the first section." {
		t.Errorf("read tool/result payload: %#v", got[1].Payload)
	}
	if got[2].Payload != nil {
		t.Errorf("read turn/start payload: %#v, want none", got[2].Payload)
	}
}

func mustEvent(t *testing.T, r store.Record) vocab.Event {
	t.Helper()
	e, err := r.Event()
	if err != nil {
		t.Fatalf("record %d: Event: %v", r.Seq, err)
	}
	return e
}

func testWrongFirstSeq(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 8, t0)
	for _, bad := range [][]vocab.Event{evs[1:3], renumber(evs[:2], 0)} {
		err := st.Append(t.Context(), sessA, c, bad)
		wantErr(t, err, store.ErrSequence, fmt.Sprintf("first append of seqs %v", seqs(bad)))
		unchanged(t, st, sessA, nil, "a refused first append")
	}
	mustAppend(t, st, sessA, c, evs[:3])
	before := mustRead(t, st, sessA, 0)
	for _, bad := range [][]vocab.Event{evs[4:6], evs[2:5], evs[0:4], evs[7:8], renumber(evs[3:5], 0)} {
		err := st.Append(t.Context(), sessA, c, bad)
		wantErr(t, err, store.ErrSequence, fmt.Sprintf("append of seqs %v at head 3", seqs(bad)))
		unchanged(t, st, sessA, before, fmt.Sprintf("a refused append of %v", seqs(bad)))
	}
	mustAppend(t, st, sessA, c, evs[3:])
	wantRecords(t, mustRead(t, st, sessA, 0), evs)
}

// renumber returns copies of evs renumbered from first on.
func renumber(evs []vocab.Event, first uint64) []vocab.Event {
	out := slices.Clone(evs)
	for i := range out {
		out[i].Seq = first + uint64(i)
	}
	return out
}

func testGapInsideBatch(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 6, t0)
	mustAppend(t, st, sessA, c, evs[:2])
	before := mustRead(t, st, sessA, 0)
	for _, order := range [][]int{{2, 3, 5}, {2, 2, 3}, {2, 4, 3}, {2, 3, 4, 3}, {2, 1}} {
		bad := make([]vocab.Event, len(order))
		for i, k := range order {
			bad[i] = evs[k]
		}
		err := st.Append(t.Context(), sessA, c, bad)
		wantErr(t, err, store.ErrSequence, fmt.Sprintf("append of seqs %v", seqs(bad)))
		unchanged(t, st, sessA, before, fmt.Sprintf("a refused append of %v", seqs(bad)))
	}
	mustAppend(t, st, sessA, c, evs[2:])
}

func testForeignSession(t *testing.T, st store.Store) {
	ca, _ := claim(t, st, sessA, runA, true)
	cb, _ := claim(t, st, sessB, runB, true)
	a, b := Fixture(sessA, 6, t0), Fixture(sessB, 6, t0)
	mustAppend(t, st, sessA, ca, a[:2])
	mustAppend(t, st, sessB, cb, b[:2])
	beforeA, beforeB := mustRead(t, st, sessA, 0), mustRead(t, st, sessB, 0)

	for _, bad := range [][]vocab.Event{
		{a[2], b[3]},       // the second belongs to b, numbered to follow
		{b[2], b[3]},       // all of b's, numbered for b's log
		{a[2], a[3], b[4]}, // the last one
	} {
		err := st.Append(t.Context(), sessA, ca, bad)
		if err == nil {
			t.Fatalf("append to %s of events of %s succeeded", sessA, sessB)
		}
		unchanged(t, st, sessA, beforeA, "an append with a foreign event")
		unchanged(t, st, sessB, beforeB, "an append with its events to another session")
	}
	orphan := a[2]
	orphan.Session = ""
	if err := st.Append(t.Context(), sessA, ca, []vocab.Event{orphan}); err == nil {
		t.Fatal("append of an event with no session succeeded")
	}
	unchanged(t, st, sessA, beforeA, "an append of an event with no session")
	mustAppend(t, st, sessA, ca, a[2:])
	mustAppend(t, st, sessB, cb, b[2:])
}

func testTakeover(t *testing.T, st store.Store) {
	old, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 12, t0)
	mustAppend(t, st, sessA, old, evs[:4])
	cur, head := claim(t, st, sessA, runB, false)
	if head != 4 || cur.Epoch != old.Epoch+1 {
		t.Fatalf("takeover: claim %+v head %d, want epoch %d head 4", cur, head, old.Epoch+1)
	}
	before := mustRead(t, st, sessA, 0)
	for _, stale := range []store.Claim{
		old,
		{Run: runB, Epoch: old.Epoch},     // the new run with the old epoch
		{Run: runA, Epoch: cur.Epoch},     // the new epoch with the old run
		{Run: runB, Epoch: cur.Epoch + 1}, // an epoch never handed out
		{},
	} {
		err := st.Append(t.Context(), sessA, stale, evs[4:6])
		wantErr(t, err, store.ErrClaimLost, fmt.Sprintf("append with claim %+v after a takeover by %+v", stale, cur))
		unchanged(t, st, sessA, before, "an append with a lost claim")
	}
	// The same run claiming again also fences its earlier claim.
	again, _ := claim(t, st, sessA, runB, false)
	err := st.Append(t.Context(), sessA, cur, evs[4:6])
	wantErr(t, err, store.ErrClaimLost, "append with a claim its own run replaced")
	mustAppend(t, st, sessA, again, evs[4:])
	wantRecords(t, mustRead(t, st, sessA, 0), evs)
}

func testLatest(t *testing.T, st store.Store) {
	ctx := t.Context()
	c, _ := claim(t, st, sessA, runA, true)
	if n, err := st.Latest(ctx, sessA, vocab.EventTurnEnd); err != nil || n != 0 {
		t.Fatalf("Latest of an empty session: %d, %v; want 0, nil", n, err)
	}
	evs := Fixture(sessA, 30, t0)
	mustAppend(t, st, sessA, c, evs[:20])
	mustAppend(t, st, sessA, c, evs[20:])
	want := map[vocab.EventKind]uint64{}
	for _, e := range evs {
		want[e.Kind] = e.Seq
	}
	if len(want) < 10 {
		t.Fatalf("Fixture has only %d kinds in 30 events", len(want))
	}
	for kind, seq := range want {
		if n, err := st.Latest(ctx, sessA, kind); err != nil || n != seq {
			t.Errorf("Latest(%s): %d, %v; want %d", kind, n, err, seq)
		}
	}
	for _, kind := range []vocab.EventKind{vocab.EventRetry, vocab.EventKind("input/steer"), vocab.EventKind("no/such-kind")} {
		if n, err := st.Latest(ctx, sessA, kind); err != nil || n != 0 {
			t.Errorf("Latest(%s), a kind never logged: %d, %v; want 0", kind, n, err)
		}
	}
	// Another session's events do not count.
	cb, _ := claim(t, st, sessB, runB, true)
	mustAppend(t, st, sessB, cb, Fixture(sessB, 40, t0))
	if n, err := st.Latest(ctx, sessA, vocab.EventTurnEnd); err != nil || n != want[vocab.EventTurnEnd] {
		t.Errorf("Latest(turn/end) after another session's appends: %d, %v; want %d", n, err, want[vocab.EventTurnEnd])
	}
}

func testSessions(t *testing.T, st store.Store) {
	ctx := t.Context()
	if infos := sessions(t, st); len(infos) != 0 {
		t.Fatalf("an empty store lists %+v", infos)
	}
	ca, _ := claim(t, st, sessA, runA, true)
	cb, _ := claim(t, st, sessB, runB, true)
	cc, _ := claim(t, st, sessC, runC, true)
	cd, _ := claim(t, st, sessD, runA, true)
	a := Fixture(sessA, 15, t0)
	b := Fixture(sessB, 12, t0.Add(time.Hour))
	c := Fixture(sessC, 2, t0.Add(2*time.Hour))
	mustAppend(t, st, sessA, ca, a[:10])
	mustAppend(t, st, sessB, cb, b)
	mustAppend(t, st, sessC, cc, c)
	a = append(a[:10], renumber(Fixture(sessA, 5, t0.Add(3*time.Hour)), 11)...)
	mustAppend(t, st, sessA, ca, a[10:])
	cb, _ = claim(t, st, sessB, runC, false)

	info := func(s vocab.ID, evs []vocab.Event, cl store.Claim, status string) store.Info {
		return store.Info{Session: s, Head: uint64(len(evs)), Created: evs[0].At, Updated: evs[len(evs)-1].At, Claim: cl, Status: status}
	}
	want := []store.Info{
		info(sessA, a, ca, "running"),
		info(sessC, c, cc, "running"),
		info(sessB, b, cb, "idle"),
		{Session: sessD, Claim: cd},
	}
	got := sessions(t, st)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Sessions (-want +got):\n%s", d)
	}
	for _, in := range got {
		if !in.Created.IsZero() && (in.Created.Location() != time.UTC || in.Updated.Location() != time.UTC) {
			t.Errorf("Sessions: %s created %v updated %v, want UTC", in.Session, in.Created, in.Updated)
		}
	}

	// Stopping early is allowed.
	for range st.Sessions(ctx) {
		break
	}
}

// sessions collects what Sessions yields, failing the test on an error.
func sessions(t *testing.T, st store.Store) []store.Info {
	t.Helper()
	var out []store.Info
	for in, err := range st.Sessions(t.Context()) {
		if err != nil {
			t.Fatalf("Sessions: %v", err)
		}
		out = append(out, in)
	}
	return out
}

func testRelease(t *testing.T, st store.Store) {
	ctx := t.Context()
	evs := Fixture(sessA, 12, t0)
	c1, _ := claim(t, st, sessA, runA, true)
	mustAppend(t, st, sessA, c1, evs[:3])
	if err := st.Release(ctx, sessA, c1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	before := mustRead(t, st, sessA, 0)
	wantErr(t, st.Append(ctx, sessA, c1, evs[3:5]), store.ErrClaimLost, "append with a released claim")
	unchanged(t, st, sessA, before, "an append with a released claim")

	c2, head := claim(t, st, sessA, runB, false)
	if head != 3 || c2.Epoch != c1.Epoch+1 || c2.Run != runB {
		t.Fatalf("claim after release: %+v head %d, want run %s epoch %d head 3", c2, head, runB, c1.Epoch+1)
	}
	mustAppend(t, st, sessA, c2, evs[3:6])

	// Releasing a claim that is no longer the session's changes nothing.
	c3, _ := claim(t, st, sessA, runC, false)
	if err := st.Release(ctx, sessA, c2); err != nil {
		t.Fatalf("Release of a stale claim: %v", err)
	}
	mustAppend(t, st, sessA, c3, evs[6:9])
	if err := st.Release(ctx, sessA, c3); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := st.Release(ctx, sessA, c3); err != nil {
		t.Fatalf("Release twice: %v", err)
	}
	c4, head := claim(t, st, sessA, runA, false)
	if head != 9 || c4.Epoch != c3.Epoch+1 {
		t.Fatalf("claim after a second release: %+v head %d, want epoch %d head 9", c4, head, c3.Epoch+1)
	}
	mustAppend(t, st, sessA, c4, evs[9:])
	wantRecords(t, mustRead(t, st, sessA, 0), evs)
}

func testConcurrent(t *testing.T, st store.Store) {
	const writers, batches, size = 32, 50, 4
	var ids vocab.SeqSource
	sess := make([]vocab.ID, writers)
	for i := range sess {
		sess[i] = ids.NewID(t0)
	}
	want := make([][]vocab.Event, writers)
	for i := range want {
		want[i] = Fixture(sess[i], batches*size, t0.Add(time.Duration(i)*time.Minute))
	}
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			c, _, err := st.Claim(t.Context(), sess[i], ids.NewID(t0), true)
			if err != nil {
				t.Errorf("writer %d: Claim: %v", i, err)
				return
			}
			for b := range batches {
				if err := st.Append(t.Context(), sess[i], c, want[i][b*size:(b+1)*size]); err != nil {
					t.Errorf("writer %d: Append of batch %d: %v", i, b, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i := range writers {
		wantRecords(t, mustRead(t, st, sess[i], 0), want[i])
	}
	infos := sessions(t, st)
	if len(infos) != writers {
		t.Fatalf("Sessions lists %d sessions, want %d", len(infos), writers)
	}
	for i, in := range infos {
		// Session i's last event is the latest of all when i is the last.
		if w := sess[writers-1-i]; in.Session != w || in.Head != batches*size {
			t.Errorf("Sessions[%d]: %s head %d, want %s head %d", i, in.Session, in.Head, w, batches*size)
		}
	}
}

func testNoRetain(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	batch := Fixture(sessA, 12, t0)
	want := Fixture(sessA, 12, t0)
	mustAppend(t, st, sessA, c, batch)

	// Change everything reachable from the batch, through the payloads'
	// pointers, slices and raw JSON too.
	for i := range batch {
		e := &batch[i]
		switch p := e.Payload.(type) {
		case vocab.Input:
			p.Message.Parts[0].Text = "changed"
			p.Message.Role = vocab.RoleAssistant
		case vocab.ToolPayload:
			p.Call.Name = "changed"
			if len(p.Call.Args) > 0 {
				p.Call.Args[0] = '['
			}
			if p.Result != nil {
				p.Result.Content = "changed"
			}
		case vocab.MessagePayload:
			for i, part := range p.Message.Parts {
				p.Message.Parts[i].Text = "changed"
				if part.Call != nil && len(part.Call.Args) > 0 {
					part.Call.Name = "changed"
					part.Call.Args[0] = '['
				}
			}
		}
		e.Seq += 100
		e.Kind = vocab.EventRetry
		e.At = e.At.Add(time.Hour)
		e.Turn, e.Step = 7, 7
		e.Session = sessB
		e.Payload = vocab.StatusPayload{Status: "changed"}
	}
	copy(batch, Fixture(sessB, 3, t0)) // the caller reuses the array
	wantRecords(t, mustRead(t, st, sessA, 0), want)
}

func testCanceled(t *testing.T, st store.Store) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()

	_, _, err := st.Claim(canceled, sessA, runA, true)
	wantErr(t, err, context.Canceled, "Claim with create under a canceled context")
	_, err = read(t, st, sessA, 0)
	wantErr(t, err, store.ErrNoSession, "Read of a session whose creation was canceled")

	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 8, t0)
	mustAppend(t, st, sessA, c, evs[:2])
	before := mustRead(t, st, sessA, 0)

	wantErr(t, st.Append(canceled, sessA, c, evs[2:5]), context.Canceled, "Append under a canceled context")
	unchanged(t, st, sessA, before, "an Append under a canceled context")

	_, _, err = st.Claim(canceled, sessA, runB, false)
	wantErr(t, err, context.Canceled, "Claim under a canceled context")
	// The canceled claim took nothing over: the claim before it still
	// appends, and the next claim's epoch is one above it.
	mustAppend(t, st, sessA, c, evs[2:5])
	c2, head := claim(t, st, sessA, runB, false)
	if c2.Epoch != c.Epoch+1 || head != 5 {
		t.Fatalf("claim after a canceled claim: %+v head %d, want epoch %d head 5", c2, head, c.Epoch+1)
	}
	mustAppend(t, st, sessA, c2, evs[5:])
	wantRecords(t, mustRead(t, st, sessA, 0), evs)
}

func testClosed(t *testing.T, st store.Store) {
	ctx := t.Context()
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 6, t0)
	mustAppend(t, st, sessA, c, evs[:3])
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, vocab.CodeClosed.Err()) || vocab.CodeOf(err) != vocab.CodeClosed {
			t.Errorf("%s after Close: got %v (code %q), want code %s", what, err, vocab.CodeOf(err), vocab.CodeClosed)
		}
	}
	_, _, err := st.Claim(ctx, sessA, runB, false)
	closed("Claim", err)
	_, _, err = st.Claim(ctx, sessB, runB, true)
	closed("Claim with create", err)
	closed("Append", st.Append(ctx, sessA, c, evs[3:]))
	_, err = read(t, st, sessA, 0)
	closed("Read", err)
	_, err = st.Latest(ctx, sessA, vocab.EventTurnEnd)
	closed("Latest", err)
	err = nil
	for in, e := range st.Sessions(ctx) {
		if e == nil {
			t.Errorf("Sessions after Close yielded %+v", in)
			continue
		}
		err = e
	}
	closed("Sessions", err)
	closed("Release", st.Release(ctx, sessA, c))
	closed("Close", st.Close())
}

func testEmptyBatch(t *testing.T, st store.Store) {
	c, _ := claim(t, st, sessA, runA, true)
	evs := Fixture(sessA, 6, t0)
	if err := st.Append(t.Context(), sessA, c, nil); err != nil {
		t.Fatalf("Append of a nil batch to an empty session: %v", err)
	}
	mustAppend(t, st, sessA, c, evs[:3])
	before := mustRead(t, st, sessA, 0)
	for _, empty := range [][]vocab.Event{nil, {}, evs[3:3]} {
		if err := st.Append(t.Context(), sessA, c, empty); err != nil {
			t.Fatalf("Append of an empty batch: %v", err)
		}
		unchanged(t, st, sessA, before, "an empty Append")
	}
	if _, head := claim(t, st, sessA, runB, false); head != 3 {
		t.Fatalf("head after empty appends: %d, want 3", head)
	}
}
