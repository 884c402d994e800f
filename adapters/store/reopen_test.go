package store_test

import (
	"context"
	"encoding/json"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

var flagBigSession = flag.Int("store.big", 100_000, "TestReopenFromSnapshot: events in the big session (1000000 for the issue's figure)")

// synth writes a session of at least n events into st by driving a session
// core directly (no lane, no goroutines): prompts answered by a tool call,
// its result, then text; a checkpoint input every `every` events (0:
// none). It returns the head.
func synth(tb testing.TB, st store.Store, id vocab.ID, n, every int) uint64 {
	tb.Helper()
	ctx := context.Background()
	claim, _, err := st.Claim(ctx, id, "synth", true)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := session.Config{Session: id, Model: "m", Tools: []vocab.ToolSpec{{Name: "echo"}}}
	core, err := session.New(cfg, session.NewMachines())
	if err != nil {
		tb.Fatal(err)
	}
	cj, _ := session.ConfigJSON(cfg)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var batch []vocab.Event
	var queue []vocab.Input
	flush := func() {
		if err := st.Append(ctx, id, claim, batch); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	last := uint64(0)
	step := func(in vocab.Input) {
		at = at.Add(time.Millisecond)
		in.At = at
		if err := core.Step(in); err != nil {
			tb.Fatalf("step %s: %v", in.Kind, err)
		}
		rd, _ := core.Ready()
		batch = append(batch, rd.Events...)
		for _, w := range rd.Work {
			if w.Op != session.Start {
				continue
			}
			switch w.Kind {
			case session.WorkModel:
				reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "the answer, at some length, as models write"}}}
				if len(w.Request.Messages)%4 == 1 {
					reply.Parts = append(reply.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c", Name: "echo", Args: json.RawMessage(`{"text":"hello"}`)}})
				}
				queue = append(queue, vocab.Input{Kind: vocab.InModelDone, Work: w.ID, Reply: &reply, Usage: &vocab.Usage{InputTokens: 100, OutputTokens: 20}})
			case session.WorkTool:
				queue = append(queue, vocab.Input{Kind: vocab.InToolDone, Work: w.ID, Result: &vocab.ToolResult{CallID: w.Call.ID, Name: "echo", Content: "hello"}})
			}
		}
		core.Advance(rd)
		if len(batch) >= 512 {
			flush()
		}
	}
	step(vocab.Input{Kind: vocab.InOpen, Config: cj})
	for p := 0; int(core.Seq()) < n; p++ {
		if every > 0 && core.Seq()-last >= uint64(every) {
			flush() // a checkpoint starts a batch
			step(vocab.Input{Kind: vocab.InCheckpoint})
			last = core.Seq()
		}
		msg := vocab.UserText("question")
		step(vocab.Input{Kind: vocab.InSubmit, ID: vocab.ID("p" + itoa(p)), Message: &msg})
		for len(queue) > 0 {
			in := queue[0]
			queue = queue[1:]
			step(in)
		}
	}
	flush()
	if err := st.Release(ctx, id, claim); err != nil {
		tb.Fatal(err)
	}
	return core.Seq()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func openSQLite(tb testing.TB, sync string) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "log.db"), sqlite.Options{Synchronous: sync})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// A big session reopens from its last snapshot plus the tail: the fold
// reads at most a checkpoint interval of events, whatever the length.
func TestReopenFromSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large log")
	}
	st := openSQLite(t, "OFF")
	head := synth(t, st, "big", *flagBigSession, 10_000)
	t0 := time.Now()
	f, err := store.Fold(context.Background(), st, "big")
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Head != head || f.Snapshot == 0 || f.Events > 10_100 {
		t.Fatalf("fold of %d events: head %d, from snapshot %d, read %d events", head, f.Head, f.Snapshot, f.Events)
	}
	t.Logf("reopened a %d-event session from the snapshot at %d: %d events read in %s", head, f.Snapshot, f.Events, took)
}

// BenchmarkFold folds a 10,000-event session from the SQLite store (no
// snapshot: every input replayed) beside a scan of the same rows that
// decodes nothing; events/s and the ratio come from the same run.
func BenchmarkFold(b *testing.B) {
	st := openSQLite(b, "OFF")
	head := synth(b, st, "s10k", 10_000, 0)
	ctx := context.Background()
	b.Run("scan-raw", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for r, err := range st.Read(ctx, "s10k", 0) {
				if err != nil {
					b.Fatal(err)
				}
				n += len(r.Payload) & 1
			}
		}
		b.ReportMetric(float64(head)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("fold", func(b *testing.B) {
		for b.Loop() {
			if _, err := store.Fold(ctx, st, "s10k"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(head)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := store.Verify(ctx, st, "s10k"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(head)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkReopen opens a 10,000-event session (no snapshot: every input
// replayed) the way an application does after a restart: claim, fold,
// recover, and the open input made durable (synchronous=FULL). Each
// iteration takes the session over from the previous one.
func BenchmarkReopen(b *testing.B) {
	st := openSQLite(b, "FULL")
	synth(b, st, "s10k", 10_000, 0)
	s, err := scripted.Parse([]byte(`{"steps": [{"parts": [{"text": "x"}]}]}`), "reopen")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := agentsvc.Open(ctx, st, "s10k", agentsvc.Options{Provider: scripted.New(s, clock.Real()), Model: "m",
			Tools: []vocab.Tool{echoTool{}}}); err != nil {
			b.Fatal(err)
		}
	}
}

type echoTool struct{}

func (echoTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "echo"} }
func (echoTool) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	return vocab.ToolResult{Content: string(call.Args)}, nil
}
