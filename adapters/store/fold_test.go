package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

const script = `{"steps": [
	{"parts": [{"thinking": "look"}, {"text": "Reading."}], "tool_calls": [{"id": "c1", "name": "read_file", "args": {"path": "notes.txt"}}]},
	{"parts": [{"text": "It says hi."}]},
	{"error": {"code": "llm.rate_limited", "message": "slow down", "retryable": true}},
	{"parts": [{"text": "Second answer."}]}
]}`

// record runs a session with a tool call and a retry into a memory store
// and returns the store.
func record(t testing.TB, every int) *memory.Store {
	t.Helper()
	s, err := scripted.Parse([]byte(script), "fold")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := memory.New()
	svc, err := agentsvc.Open(context.Background(), st, "s", agentsvc.Options{Provider: scripted.New(s, clk), Clock: clk,
		IDs: &vocab.SeqSource{}, Tools: tools.FileTools(fstest.MapFS{"notes.txt": {Data: []byte("hi")}}), CheckpointEvery: every, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { // the retry waits on the virtual clock
		for ctx.Err() == nil {
			if clk.WaitForDue(ctx, 2*time.Minute) != nil { // not the run's timeout or the stream watchdog
				return
			}
			clk.AdvanceToNextWithin(2 * time.Minute)
		}
	}()
	for _, text := range []string{"read notes.txt", "again"} {
		p, err := svc.Submit(vocab.UserText(text))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := p.Wait(ctx); err != nil || r.Kind != vocab.PromptCompleted {
			t.Fatalf("%q: %v %v", text, r, err)
		}
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// records reads the session's records, copied.
func records(t testing.TB, st store.Store) []store.Record {
	t.Helper()
	var rs []store.Record
	for r, err := range st.Read(context.Background(), "s", 0) {
		if err != nil {
			t.Fatal(err)
		}
		r.Payload = bytes.Clone(r.Payload)
		rs = append(rs, r)
	}
	return rs
}

// sliceStore serves fixed records, unchecked: what a damaged or forged
// database would hand a reader.
type sliceStore struct {
	store.Store
	recs []store.Record
}

func (s *sliceStore) Read(_ context.Context, id vocab.ID, from uint64) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		if len(s.recs) == 0 {
			yield(store.Record{}, vocab.Errorf(vocab.CodeNoSession, "no session %s", id))
			return
		}
		for _, r := range s.recs {
			if r.Seq >= from && !yield(r, nil) {
				return
			}
		}
	}
}

func (s *sliceStore) Latest(_ context.Context, _ vocab.ID, kind vocab.EventKind) (uint64, error) {
	var seq uint64
	for _, r := range s.recs {
		if r.Kind == kind {
			seq = r.Seq
		}
	}
	return seq, nil
}

func TestFoldAndVerifyARecordedSession(t *testing.T) {
	st := record(t, 0)
	ctx := context.Background()
	f, err := store.Fold(ctx, st, "s")
	if err != nil {
		t.Fatal(err)
	}
	rs := records(t, st)
	if f.Head != uint64(len(rs)) || f.Events != len(rs) || f.Snapshot != 0 || f.Inputs == 0 {
		t.Errorf("fold: head %d events %d snapshot %d inputs %d; the log has %d", f.Head, f.Events, f.Snapshot, f.Inputs, len(rs))
	}
	if !f.Core.Closed() {
		t.Error("the folded session is not closed, the log closed it")
	}
	if _, err := store.Verify(ctx, st, "s"); err != nil {
		t.Fatal(err)
	}
}

// Verify names the first event that the replay does not derive; Fold
// refuses logs with gaps or forged inputs with log.load_failed.
func TestVerifyReportsTheFirstDivergence(t *testing.T) {
	ctx := context.Background()
	rs := records(t, record(t, 0))
	var victim int
	for i, r := range rs {
		if r.Kind == vocab.EventAssistant && bytes.Contains(r.Payload, []byte("It says hi.")) {
			victim = i
			break
		}
	}
	forged := append([]store.Record(nil), rs...)
	forged[victim].Payload = bytes.Replace(forged[victim].Payload, []byte("It says hi."), []byte("It says bye"), 1)
	_, err := store.Verify(ctx, &sliceStore{recs: forged}, "s")
	var d *store.Divergence
	if !errors.Is(err, vocab.CodeDiverged.Err()) || !errors.As(err, &d) || d.Seq != rs[victim].Seq {
		t.Fatalf("Verify of a forged assistant message: %v, want a divergence at %d", err, rs[victim].Seq)
	}
	// Fold decodes only inputs, so the forgery of a derived event passes
	// it; a gap does not.
	if _, err := store.Fold(ctx, &sliceStore{recs: forged}, "s"); err != nil {
		t.Errorf("Fold of a log with a changed derived event: %v", err)
	}
	gap := append(append([]store.Record(nil), rs[:victim]...), rs[victim+1:]...)
	if _, err := store.Fold(ctx, &sliceStore{recs: gap}, "s"); !errors.Is(err, store.ErrLoad) {
		t.Errorf("Fold of a log with a gap: %v, want %s", err, vocab.CodeLoadFailed)
	}
	future := append([]store.Record(nil), rs...)
	for i, r := range future {
		if r.Kind == vocab.EventKind("input/submit") {
			future[i].Kind = "input/from-the-future"
			break
		}
	}
	if _, err := store.Fold(ctx, &sliceStore{recs: future}, "s"); !errors.Is(err, store.ErrLoad) {
		t.Errorf("Fold of a log with an unknown input kind: %v, want %s", err, vocab.CodeLoadFailed)
	}
	if _, err := store.Fold(ctx, &sliceStore{}, "s"); !errors.Is(err, store.ErrNoSession) {
		t.Errorf("Fold of no session: %v", err)
	}
}

// With checkpoints, Fold starts at the last snapshot and gives the same
// core as folding the whole log.
func TestFoldFromASnapshotEqualsTheWholeFold(t *testing.T) {
	ctx := context.Background()
	st := record(t, 10)
	f, err := store.Fold(ctx, st, "s")
	if err != nil {
		t.Fatal(err)
	}
	if f.Snapshot == 0 {
		t.Fatal("no snapshot in a log checkpointed every 10 events")
	}
	v, err := store.Verify(ctx, st, "s") // replays from the first event
	if err != nil {
		t.Fatal(err)
	}
	a, b := snapshot(t, f), snapshot(t, v)
	if !bytes.Equal(a, b) {
		t.Errorf("folding from the snapshot gives another core than the whole log:\n%s\n%s", a, b)
	}
}

func snapshot(t *testing.T, f *store.Folded) []byte {
	t.Helper()
	f.Core.Use(session.NewMachines())
	defer f.Core.Use(nil)
	b, err := f.Core.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzFold folds forged logs (JSON lines of records, seeded with real
// sessions): it never panics, and every error is typed.
func FuzzFold(f *testing.F) {
	for _, every := range []int{0, 10} {
		var buf bytes.Buffer
		for _, r := range records(f, record(f, every)) {
			line, _ := json.Marshal(wireRecord{Seq: r.Seq, At: r.At, Kind: r.Kind, Turn: r.Turn, Step: r.Step, V: r.V, Payload: r.Payload})
			buf.Write(line)
			buf.WriteByte('\n')
		}
		f.Add(buf.Bytes())
	}
	corpus, _ := filepath.Glob("testdata/fold/*.jsonl")
	for _, name := range corpus {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []store.Record
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var w wireRecord
			if json.Unmarshal(sc.Bytes(), &w) != nil {
				continue
			}
			recs = append(recs, store.Record{Session: "s", Seq: w.Seq, At: w.At, Kind: w.Kind, Turn: w.Turn, Step: w.Step, V: w.V, Payload: w.Payload})
		}
		st := &sliceStore{recs: recs}
		for _, fold := range []func(context.Context, store.Store, vocab.ID) (*store.Folded, error){store.Fold, store.Verify} {
			if _, err := fold(context.Background(), st, "s"); err != nil {
				switch vocab.CodeOf(err) {
				case vocab.CodeLoadFailed, vocab.CodeNoSession, vocab.CodeDiverged, vocab.CodeSchema:
				default:
					t.Fatalf("untyped error %v (code %s)", err, vocab.CodeOf(err))
				}
			}
		}
	})
}

type wireRecord struct {
	Seq     uint64          `json:"seq"`
	At      time.Time       `json:"at"`
	Kind    vocab.EventKind `json:"kind"`
	Turn    int             `json:"turn,omitempty"`
	Step    int             `json:"step,omitempty"`
	V       int             `json:"v"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// A snapshot that does not restore costs time, not the session: Fold
// replays the whole log instead.
func TestFoldFallsBackFromABadSnapshot(t *testing.T) {
	ctx := context.Background()
	rs := records(t, record(t, 10))
	broken := 0
	for i, r := range rs {
		if r.Kind == vocab.EventSnapshot {
			rs[i].Payload = []byte(`{"seq":1,"core":{"version":99}}`)
			broken++
		}
	}
	if broken == 0 {
		t.Fatal("no snapshot to break")
	}
	f, err := store.Fold(ctx, &sliceStore{recs: rs}, "s")
	if err != nil {
		t.Fatalf("Fold with a broken snapshot: %v", err)
	}
	if f.Snapshot != 0 || f.Head != uint64(len(rs)) {
		t.Errorf("fold from snapshot %d to head %d; want the whole log of %d", f.Snapshot, f.Head, len(rs))
	}
}
