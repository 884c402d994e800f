package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// ---- harness ----

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testCtx bounds a test's waits, so that a bug hangs one test for a while
// instead of the whole run. Nothing waits on it to synchronise.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type harness struct {
	t   *testing.T
	e   *Engine
	clk *clock.Fake
	log *MemoryLog
}

// start builds an engine on a fake clock, deterministic ids, zero jitter
// and a fresh MemoryLog, and closes it when the test ends.
func start(t *testing.T, opt Options) *harness {
	t.Helper()
	clk, _ := opt.Clock.(*clock.Fake)
	if clk == nil {
		clk = clock.NewFake(epoch)
		opt.Clock = clk
	}
	if opt.IDs == nil {
		opt.IDs = &vocab.SeqSource{}
	}
	log, _ := opt.Sink.(*MemoryLog)
	if opt.Sink == nil {
		log = NewMemoryLog()
		opt.Sink = log
	}
	if opt.Jitter == nil {
		opt.Jitter = func() float64 { return 0 }
	}
	e, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &harness{t: t, e: e, clk: clk, log: log}
}

// autoAdvance moves the fake clock to the next deadline whenever something
// waits on it, until the test ends (and waits for the mover to stop).
func (h *harness) autoAdvance() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if h.clk.WaitForPending(ctx, 1) != nil {
				return
			}
			h.clk.AdvanceToNext()
		}
	}()
	h.t.Cleanup(func() { cancel(); <-done })
}

// settle waits until the session cannot move without the clock: nothing
// queued for the lane and every worker asleep on the fake clock (the
// scenario harness's condition). It yields the processor; it never sleeps.
func (h *harness) settle() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := h.e.Stats()
		if st.Inflight == 0 && st.Workers == h.clk.Pending()-st.Timers {
			runtime.Gosched()
			if st2 := h.e.Stats(); st2 == st && st.Workers == h.clk.Pending()-st.Timers {
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("session did not settle: %+v, clock pending %d", st, h.clk.Pending())
		}
		runtime.Gosched()
	}
}

func (h *harness) submit(text string) *Pending {
	h.t.Helper()
	p, err := h.e.Submit(vocab.UserText(text))
	if err != nil {
		h.t.Fatalf("Submit(%q): %v", text, err)
	}
	return p
}

func (h *harness) wait(p *Pending) vocab.PromptResult {
	h.t.Helper()
	res, err := p.Wait(testCtx(h.t))
	if err != nil {
		h.t.Fatalf("Wait: %v", err)
	}
	return res
}

func (h *harness) events(kind vocab.EventKind) []vocab.Event {
	var out []vocab.Event
	for _, ev := range h.log.Events() {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func mustScript(t *testing.T, src string) *scripted.Script {
	t.Helper()
	s, err := scripted.Parse([]byte(src), t.Name())
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	return s
}

func mustRegistry(t *testing.T, ts ...vocab.Tool) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	return r
}

// providerFunc adapts a function to vocab.Provider.
type providerFunc func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error]

func (f providerFunc) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return f(ctx, req)
}

// answer streams one text reply.
func answer(text string) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: text}, nil) {
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	}
}

// toolFunc is a vocab.Tool made of a function that sees the progress
// callback.
type toolFunc struct {
	name string
	run  func(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error)
}

func (f toolFunc) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: f.name} }
func (f toolFunc) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	return f.run(ctx, call, progress)
}

// progressTool reports progress before running the tool it wraps, under the
// same name.
type progressTool struct{ vocab.Tool }

func (p progressTool) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	if progress != nil {
		progress("working on " + call.ID)
	}
	return p.Tool.Run(ctx, call, progress)
}

// sleepTool sleeps d on clk (honouring ctx) and answers "slept".
func sleepTool(name string, clk clock.Clock, d time.Duration) vocab.Tool {
	return toolFunc{name: name, run: func(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		if err := clk.Sleep(ctx, d); err != nil {
			return vocab.ToolResult{}, err
		}
		return vocab.ToolResult{Content: "slept"}, nil
	}}
}

func isCode(err error, c vocab.Code) bool { return errors.Is(err, c.Err()) }

// ---- MemoryLog ----

func ev(seq uint64) vocab.Event {
	return vocab.Event{Seq: seq, Kind: vocab.EventStatus, Payload: vocab.StatusPayload{Status: fmt.Sprint(seq)}}
}

func seqs(evs []vocab.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func drain(ch <-chan vocab.Event) []vocab.Event {
	var out []vocab.Event
	for e := range ch {
		out = append(out, e)
	}
	return out
}

func (l *MemoryLog) subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

func TestMemoryLogKeepsOrder(t *testing.T) {
	l := NewMemoryLog()
	for i := uint64(1); i <= 100; i++ {
		if err := l.Append(ev(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := l.Events()
	if l.Len() != 100 || len(got) != 100 {
		t.Fatalf("Len %d, Events %d, want 100", l.Len(), len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	// Events is a copy.
	got[0].Seq = 999
	if l.Events()[0].Seq != 1 {
		t.Fatal("Events shares memory with the log")
	}
}

func TestMemoryLogDropsSlowSubscriber(t *testing.T) {
	l := NewMemoryLog()
	slow := l.Subscribe(2, false)
	fast := l.Subscribe(16, false)
	// Nobody reads slow: Append must never block on it.
	for i := uint64(1); i <= 5; i++ {
		if err := l.Append(ev(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := seqs(drain(slow.C())); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("slow subscriber got %v, want [1 2] then the end", got)
	}
	if !slow.Dropped() {
		t.Fatal("slow subscriber not reported dropped")
	}
	if fast.Dropped() {
		t.Fatal("fast subscriber reported dropped")
	}
	if l.Len() != 5 {
		t.Fatalf("log has %d events, want all 5", l.Len())
	}
	if n := l.subscribers(); n != 1 {
		t.Fatalf("%d live subscribers, want 1 (the dropped one removed)", n)
	}
	fast.Cancel()
	if got := seqs(drain(fast.C())); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("fast subscriber got %v", got)
	}
	if fast.Dropped() {
		t.Fatal("a cancelled subscription is not dropped")
	}
}

func TestMemoryLogReplay(t *testing.T) {
	l := NewMemoryLog()
	for i := uint64(1); i <= 3; i++ {
		_ = l.Append(ev(i))
	}
	s := l.Subscribe(8, true)
	live := l.Subscribe(8, false)
	_ = l.Append(ev(4))
	_ = l.Append(ev(5))
	l.Close()
	if got := seqs(drain(s.C())); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("replaying subscriber got %v, want history then live", got)
	}
	if got := seqs(drain(live.C())); !slices.Equal(got, []uint64{4, 5}) {
		t.Fatalf("live subscriber got %v, want only new events", got)
	}
	if s.Dropped() || live.Dropped() {
		t.Fatal("subscriptions ended by Close reported dropped")
	}

	t.Run("history larger than buffer", func(t *testing.T) {
		l := NewMemoryLog()
		for i := uint64(1); i <= 3; i++ {
			_ = l.Append(ev(i))
		}
		s := l.Subscribe(2, true)
		if got := drain(s.C()); len(got) != 0 {
			t.Fatalf("got %d events, want a closed stream", len(got))
		}
		if !s.Dropped() {
			t.Fatal("not reported dropped")
		}
		if l.subscribers() != 0 {
			t.Fatal("dropped subscription still registered")
		}
	})
	t.Run("default buffer", func(t *testing.T) {
		l := NewMemoryLog()
		s := l.Subscribe(0, false)
		if cap(s.ch) != DefaultBuffer {
			t.Fatalf("buffer %d, want %d", cap(s.ch), DefaultBuffer)
		}
		s.Cancel()
	})
}

func TestMemoryLogCancelAndClose(t *testing.T) {
	l := NewMemoryLog()
	a := l.Subscribe(8, false)
	b := l.Subscribe(8, false)
	_ = l.Append(ev(1))
	a.Cancel()
	a.Cancel() // idempotent
	_ = l.Append(ev(2))
	if got := seqs(drain(a.C())); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("cancelled subscription got %v, want [1] then the end", got)
	}
	if a.Dropped() {
		t.Fatal("cancelled subscription reported dropped")
	}

	l.Close()
	l.Close() // idempotent
	if got := seqs(drain(b.C())); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("subscription ended by Close got %v", got)
	}
	b.Cancel() // after Close: a no-op
	if err := l.Append(ev(3)); !isCode(err, vocab.CodeClosed) {
		t.Fatalf("Append after Close: %v, want %s", err, vocab.CodeClosed)
	}
	if l.Len() != 2 {
		t.Fatalf("Len %d after a refused append, want 2", l.Len())
	}
	// Subscribing to a closed log replays its history and ends.
	if got := seqs(drain(l.Subscribe(8, true).C())); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("subscription to a closed log got %v", got)
	}
	if got := drain(l.Subscribe(8, false).C()); len(got) != 0 {
		t.Fatalf("live subscription to a closed log got %d events", len(got))
	}
}

func TestSubscriptionAllStopsOnCtxCancel(t *testing.T) {
	l := NewMemoryLog()
	s := l.Subscribe(8, false)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan vocab.Event)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range s.All(ctx) {
			got <- e
		}
	}()
	_ = l.Append(ev(1))
	if e := <-got; e.Seq != 1 {
		t.Fatalf("got seq %d", e.Seq)
	}
	cancel()
	<-done
	if l.subscribers() != 0 {
		t.Fatal("the iterator ended but its subscription is still registered")
	}
	_ = l.Append(ev(2)) // nobody listens: must not block or panic
	if s.Dropped() {
		t.Fatal("ctx cancel reported as dropped")
	}
}

func TestSubscriptionAllBreakCancels(t *testing.T) {
	l := NewMemoryLog()
	s := l.Subscribe(8, false)
	for i := uint64(1); i <= 3; i++ {
		_ = l.Append(ev(i))
	}
	var seen []uint64
	for e := range s.All(context.Background()) {
		seen = append(seen, e.Seq)
		if e.Seq == 2 {
			break
		}
	}
	if !slices.Equal(seen, []uint64{1, 2}) {
		t.Fatalf("iterated %v", seen)
	}
	if l.subscribers() != 0 {
		t.Fatal("break did not cancel the subscription")
	}
	_ = l.Append(ev(4))
	// Only what was buffered before the break is left; the stream is closed.
	if got := seqs(drain(s.C())); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("left in the channel after break: %v, want [3]", got)
	}

	t.Run("ends with the log", func(t *testing.T) {
		l := NewMemoryLog()
		s := l.Subscribe(8, true)
		_ = l.Append(ev(1))
		l.Close()
		var n int
		for range s.All(context.Background()) {
			n++
		}
		if n != 1 {
			t.Fatalf("iterated %d events, want 1", n)
		}
	})
}

// ---- event envelope invariants over the demo ----

func demoRun(t *testing.T, progress bool) *harness {
	t.Helper()
	s, err := scripted.Load("../../testdata/scripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	ts := tools.FileTools(fstest.MapFS{"notes.txt": {Data: []byte("one two three four")}})
	if progress {
		for i, tl := range ts {
			ts[i] = progressTool{tl}
		}
	}
	h := start(t, Options{Provider: scripted.New(s, clk), Tools: mustRegistry(t, ts...), Clock: clk, Model: "scripted"})
	h.autoAdvance()
	res := h.wait(h.submit("how long is notes.txt?"))
	if res.Kind != vocab.PromptCompleted || res.Steps != 3 {
		t.Fatalf("demo ended %s, want completed{steps=3}", res)
	}
	if err := h.e.WhenIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestEventInvariantsDemo(t *testing.T) {
	for _, progress := range []bool{false, true} {
		t.Run(fmt.Sprintf("progress=%v", progress), func(t *testing.T) {
			h := demoRun(t, progress)
			evs := h.log.Events()
			checkEnvelope(t, h.e.Session(), evs)
			checkLifecycle(t, evs, progress)
		})
	}
}

// checkEnvelope checks what every event log must satisfy.
func checkEnvelope(t *testing.T, session vocab.ID, evs []vocab.Event) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	ids := map[vocab.ID]bool{}
	var prevID vocab.ID
	turn := 0 // the open turn, 0 outside one
	turns := map[int]int{}
	var calls, results = map[string]int{}, map[string]int{}
	msgOpen := false
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: not dense from 1", i, e.Seq)
		}
		if e.Session != session {
			t.Errorf("seq %d: session %q, want %q", e.Seq, e.Session, session)
		}
		if e.ID == "" || ids[e.ID] {
			t.Errorf("seq %d: id %q empty or repeated", e.Seq, e.ID)
		}
		ids[e.ID] = true
		if e.ID <= prevID {
			t.Errorf("seq %d: id %s does not sort after %s", e.Seq, e.ID, prevID)
		}
		prevID = e.ID
		if i > 0 && e.At.Before(evs[i-1].At) {
			t.Errorf("seq %d: time goes back", e.Seq)
		}
		switch e.Kind {
		case vocab.EventTurnStart:
			if turn != 0 {
				t.Errorf("seq %d: turn %d starts inside turn %d", e.Seq, e.Turn, turn)
			}
			if e.Turn <= 0 {
				t.Errorf("seq %d: turn/start without a turn number", e.Seq)
			}
			turn = e.Turn
			turns[e.Turn]++
		case vocab.EventToolCall:
			calls[e.Payload.(vocab.ToolPayload).Call.ID]++
		case vocab.EventToolResult:
			p := e.Payload.(vocab.ToolPayload)
			if p.Result == nil {
				t.Errorf("seq %d: tool/result without a result", e.Seq)
			}
			results[p.Call.ID]++
		case vocab.EventMessageStart:
			if msgOpen {
				t.Errorf("seq %d: message/start while a message is open", e.Seq)
			}
			msgOpen = true
		case vocab.EventMessageUpdate:
			if !msgOpen {
				t.Errorf("seq %d: message/update outside a message", e.Seq)
			}
		case vocab.EventMessageEnd:
			if !msgOpen {
				t.Errorf("seq %d: message/end without message/start", e.Seq)
			}
			msgOpen = false
		}
		if turn != 0 && e.Turn != turn {
			t.Errorf("seq %d (%s): turn %d inside turn %d", e.Seq, e.Kind, e.Turn, turn)
		}
		if turn == 0 && e.Kind != vocab.EventTurnEnd && e.Kind != vocab.EventPrompt && e.Turn != 0 {
			// prompt/state may name the turn that just ended.
			t.Errorf("seq %d (%s): turn %d outside any turn", e.Seq, e.Kind, e.Turn)
		}
		if e.Kind == vocab.EventTurnEnd {
			if turn == 0 || e.Turn != turn {
				t.Errorf("seq %d: turn/end of turn %d, open turn %d", e.Seq, e.Turn, turn)
			}
			turns[e.Turn]--
			turn = 0
		}
	}
	if turn != 0 {
		t.Errorf("turn %d never ended", turn)
	}
	for n, c := range turns {
		if c != 0 {
			t.Errorf("turn %d: %d more turn/start than turn/end", n, c)
		}
	}
	if msgOpen {
		t.Error("a message/start has no message/end")
	}
	for id, n := range calls {
		if n != 1 || results[id] != 1 {
			t.Errorf("call %s: %d tool/call, %d tool/result; want one each", id, n, results[id])
		}
	}
	for id := range results {
		if calls[id] == 0 {
			t.Errorf("tool/result for %s without a tool/call", id)
		}
	}
}

func checkLifecycle(t *testing.T, evs []vocab.Event, progress bool) {
	t.Helper()
	kinds := map[vocab.EventKind]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	for _, k := range []vocab.EventKind{vocab.EventAgentStart, vocab.EventAgentEnd, vocab.EventTurnStart, vocab.EventTurnEnd,
		vocab.EventMessageStart, vocab.EventMessageUpdate, vocab.EventMessageEnd,
		vocab.EventToolExecutionStart, vocab.EventToolExecutionEnd} {
		if kinds[k] == 0 {
			t.Errorf("no %s event", k)
		}
	}
	switch n := kinds[vocab.EventToolExecutionUpdate]; {
	case progress && n != 3:
		t.Errorf("%d tool/execution-update events, want 3 (one per call)", n)
	case !progress && n != 0:
		t.Errorf("%d tool/execution-update events from tools that report no progress", n)
	}
	if kinds[vocab.EventToolExecutionStart] != 3 || kinds[vocab.EventToolExecutionEnd] != 3 {
		t.Errorf("execution start/end: %d/%d, want 3/3", kinds[vocab.EventToolExecutionStart], kinds[vocab.EventToolExecutionEnd])
	}
	if kinds[vocab.EventRetry] != 1 {
		t.Errorf("%d llm/retry events, want 1", kinds[vocab.EventRetry])
	}

	// Per step: the usage event comes before the step's first tool runs,
	// and updates sit between their call's start and end.
	type key struct{ turn, step int }
	usage := map[key]uint64{}
	firstExec := map[key]uint64{}
	running := map[string]bool{}
	for _, e := range evs {
		k := key{e.Turn, e.Step}
		switch e.Kind {
		case vocab.EventUsage:
			if e.Step == 0 {
				t.Errorf("seq %d: usage outside a step", e.Seq)
			}
			if _, dup := usage[k]; !dup {
				usage[k] = e.Seq
			}
		case vocab.EventToolExecutionStart:
			if _, ok := firstExec[k]; !ok {
				firstExec[k] = e.Seq
			}
			running[e.Payload.(vocab.ToolPayload).Call.ID] = true
		case vocab.EventToolExecutionUpdate:
			p := e.Payload.(vocab.ToolPayload)
			if !running[p.Call.ID] || p.Update == "" {
				t.Errorf("seq %d: update %q for %s outside its execution", e.Seq, p.Update, p.Call.ID)
			}
		case vocab.EventToolExecutionEnd:
			delete(running, e.Payload.(vocab.ToolPayload).Call.ID)
		case vocab.EventMessageStart, vocab.EventMessageUpdate, vocab.EventMessageEnd, vocab.EventToolCall, vocab.EventToolResult:
			if e.Turn == 0 || e.Step == 0 {
				t.Errorf("seq %d (%s): turn %d step %d, want both set", e.Seq, e.Kind, e.Turn, e.Step)
			}
		}
	}
	if len(firstExec) != 2 {
		t.Errorf("tools ran in %d steps, want 2", len(firstExec))
	}
	for k, x := range firstExec {
		u, ok := usage[k]
		if !ok || u > x {
			t.Errorf("turn %d step %d: usage at seq %d (found %v), first tool start at seq %d", k.turn, k.step, u, ok, x)
		}
	}
}

// A reply that breaks mid-stream and is retried must still close the
// message it opened, so that message/start and message/end pair up.
func TestEventInvariantsMidStreamFailure(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"parts": [{"text": "partial"}], "error_after": {"status": 503}},
		{"parts": [{"text": "whole"}]}
	]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	h.autoAdvance()
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
	ends := h.events(vocab.EventMessageEnd)
	if len(ends) != 2 || len(h.events(vocab.EventMessageStart)) != 2 {
		t.Fatalf("%d message/end, %d message/start; want one pair per attempt", len(ends), len(h.events(vocab.EventMessageStart)))
	}
	if got := ends[0].Payload.(vocab.MessagePayload).Message.Text(); got != "partial" {
		t.Errorf("the broken attempt's message/end carries %q, want the partial reply", got)
	}
}

// ---- snapshots ----

func roundTrip(t *testing.T, s Snapshot) Snapshot {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal: %v\n%s", err, b)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatalf("unmarshal into a map: %v", err)
	}
	for _, f := range []string{"session", "seq", "status", "agent", "history"} {
		if _, ok := generic[f]; !ok {
			t.Errorf("snapshot JSON has no %q", f)
		}
	}
	if back.Session != s.Session || back.Seq != s.Seq || back.Status != s.Status || len(back.History) != len(s.History) {
		t.Errorf("round trip changed the snapshot: %+v vs %+v", back, s)
	}
	return back
}

type machineSnap struct {
	Machine string          `json:"machine"`
	Version int             `json:"version"`
	State   string          `json:"state"`
	Ctx     json.RawMessage `json:"ctx"`
}

func decodeMachine(t *testing.T, raw json.RawMessage) machineSnap {
	t.Helper()
	var m machineSnap
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("machine snapshot: %v\n%s", err, raw)
	}
	if m.Machine == "" || m.State == "" || m.Version == 0 || len(m.Ctx) == 0 {
		t.Errorf("machine snapshot incomplete: %s", raw)
	}
	return m
}

func TestSnapshotAfterRun(t *testing.T) {
	h := demoRunOpen(t)
	s, err := h.e.Snapshot(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	s = roundTrip(t, s)
	if s.Session != h.e.Session() || s.Status != "idle" {
		t.Errorf("session %s status %q", s.Session, s.Status)
	}
	if s.Seq != uint64(h.log.Len()) {
		t.Errorf("snapshot seq %d, log has %d events", s.Seq, h.log.Len())
	}
	if s.Turn != nil || len(s.Tools) != 0 {
		t.Errorf("idle snapshot has a turn (%s) or tools (%d)", s.Turn, len(s.Tools))
	}
	// user, assistant+2 results, assistant+1 result, assistant.
	if len(s.History) != 7 {
		t.Errorf("history has %d messages, want 7", len(s.History))
	}
	if a := decodeMachine(t, s.Agent); a.Machine != "agent" || a.State != "ready" {
		t.Errorf("agent snapshot: %+v", a)
	}
	hist, err := h.e.History(testCtx(t))
	if err != nil || len(hist) != len(s.History) {
		t.Errorf("History: %d messages, %v", len(hist), err)
	}
}

// demoRunOpen runs the demo and leaves the engine open.
func demoRunOpen(t *testing.T) *harness {
	s, err := scripted.Load("../../testdata/scripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	reg := mustRegistry(t, tools.FileTools(fstest.MapFS{"notes.txt": {Data: []byte("a b c")}})...)
	h := start(t, Options{Provider: scripted.New(s, clk), Tools: reg, Clock: clk})
	h.autoAdvance()
	if res := h.wait(h.submit("how long is notes.txt?")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("demo ended %s", res)
	}
	if err := h.e.WhenIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSnapshotMidRun(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "slow"}, {"id": "c2", "name": "slow"}]},
		{"parts": [{"text": "done"}]}
	]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, sleepTool("slow", clk, 10*time.Second))})
	p := h.submit("go slow")
	ctx := testCtx(t)
	if err := clk.WaitForPending(ctx, 1); err != nil { // c1 sleeps on the clock
		t.Fatal(err)
	}
	h.settle()
	snap, err := h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Seq != uint64(h.log.Len()) {
		t.Errorf("snapshot seq %d, log has %d events", snap.Seq, h.log.Len())
	}
	snap = roundTrip(t, snap)
	if snap.Status != "running" {
		t.Errorf("status %q mid-run", snap.Status)
	}
	if snap.Turn == nil {
		t.Fatal("mid-run snapshot has no turn")
	}
	agentState, turnState, err := h.e.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tm := decodeMachine(t, snap.Turn); tm.Machine != "turn" || tm.State != turnState {
		t.Errorf("turn snapshot %s/%s, State says %q", tm.Machine, tm.State, turnState)
	}
	if am := decodeMachine(t, snap.Agent); am.State != agentState {
		t.Errorf("agent snapshot state %q, State says %q", am.State, agentState)
	}
	// c1 runs; c2 has not started yet (the executor is sequential).
	if len(snap.Tools) != 1 {
		t.Fatalf("%d tool snapshots, want 1", len(snap.Tools))
	}
	if tl := decodeMachine(t, snap.Tools[0]); tl.Machine != "tool" || !strings.Contains(string(tl.Ctx), `"c1"`) {
		t.Errorf("tool snapshot: %+v", tl)
	}
	if len(snap.History) != 2 { // the prompt and the reply with two calls
		t.Errorf("history has %d messages mid-run, want 2", len(snap.History))
	}

	h.autoAdvance()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("ended %s", res)
	}
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Turn != nil || len(after.Tools) != 0 || after.Seq != uint64(h.log.Len()) || after.Seq <= snap.Seq {
		t.Errorf("snapshot after the run: turn %s, %d tools, seq %d (log %d)", after.Turn, len(after.Tools), after.Seq, h.log.Len())
	}
}

// ---- robustness ----

func TestProviderPanicFailsPrompt(t *testing.T) {
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "half an ans"}, nil) {
				return
			}
			panic("provider bug")
		}
	})
	h := start(t, Options{Provider: prov})
	res := h.wait(h.submit("hi"))
	if res.Kind != vocab.PromptFailed || res.Err == nil {
		t.Fatalf("ended %s, want failed", res)
	}
	if res.Err.Code != vocab.CodeInternal || !strings.Contains(res.Err.Message, "provider bug") {
		t.Errorf("error %v, want %s naming the panic", res.Err, vocab.CodeInternal)
	}
	if len(h.events(vocab.EventRetry)) != 0 {
		t.Error("a provider panic was retried")
	}
	// The engine is still usable, and the log stays well formed (the
	// message the broken stream opened is closed).
	if _, _, err := h.e.State(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
}

func TestPlainProviderErrorIsRetriedAsTransport(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			return func(yield func(vocab.StreamPart, error) bool) {
				yield(vocab.StreamPart{}, errors.New("connection reset by peer"))
			}
		}
		return answer("ok")
	})
	h := start(t, Options{Provider: prov})
	h.autoAdvance()
	res := h.wait(h.submit("hi"))
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s, want completed after a retry", res)
	}
	retries := h.events(vocab.EventRetry)
	if len(retries) != 1 {
		t.Fatalf("%d retries, want 1", len(retries))
	}
	r := retries[0].Payload.(vocab.RetryPayload)
	if r.Code != vocab.CodeTransport || !strings.Contains(r.Message, "connection reset") || r.FailedAttempt != 1 || r.NextAttempt != 2 {
		t.Errorf("retry %+v", r)
	}
	if r.Delay != 500*time.Millisecond {
		t.Errorf("retry delay %s, want the base delay 500ms (jitter 0)", r.Delay)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Errorf("%d requests, want 2", calls)
	}
}

func TestToolPanicBecomesErrorResult(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "boom"}, {"id": "c2", "name": "fine"}]},
		{"parts": [{"text": "carried on"}]}
	]}`)
	clk := clock.NewFake(epoch)
	prov := scripted.New(s, clk)
	boom := toolFunc{name: "boom", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		panic("tool bug")
	}}
	fine := toolFunc{name: "fine", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		return vocab.ToolResult{Content: "fine"}, nil
	}}
	h := start(t, Options{Provider: prov, Clock: clk, Tools: mustRegistry(t, boom, fine)})
	res := h.wait(h.submit("hi"))
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("ended %s, want completed{steps=2}", res)
	}
	results := h.events(vocab.EventToolResult)
	if len(results) != 2 {
		t.Fatalf("%d results", len(results))
	}
	r1 := results[0].Payload.(vocab.ToolPayload).Result
	if r1.CallID != "c1" || !r1.IsError || r1.Code != vocab.CodeToolFailed || !strings.Contains(r1.Content, "tool bug") {
		t.Errorf("panicking tool's result: %+v", r1)
	}
	if r2 := results[1].Payload.(vocab.ToolPayload).Result; r2.CallID != "c2" || r2.IsError || r2.Content != "fine" {
		t.Errorf("second tool's result: %+v", r2)
	}
	// The model saw the error result.
	calls := prov.Calls()
	last := calls[len(calls)-1].Messages
	if len(last) < 2 || last[len(last)-2].Result == nil || !last[len(last)-2].Result.IsError {
		t.Errorf("second request does not carry the error result: %+v", last)
	}
}

func TestWillBeginStepPanicFailsTurn(t *testing.T) {
	s := mustScript(t, `{"steps": [{"parts": [{"text": "never asked"}]}]}`)
	clk := clock.NewFake(epoch)
	prov := scripted.New(s, clk)
	h := start(t, Options{Provider: prov, Clock: clk, Hooks: Hooks{
		WillBeginStep: func(ctx context.Context, g *GateContext) error { panic("gate bug") },
	}})
	res := h.wait(h.submit("hi"))
	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeHook {
		t.Fatalf("ended %s, want failed with %s", res, vocab.CodeHook)
	}
	if !strings.Contains(res.Err.Message, "gate bug") {
		t.Errorf("error %q does not name the panic", res.Err.Message)
	}
	ends := h.events(vocab.EventTurnEnd)
	if len(ends) != 1 {
		t.Fatalf("%d turn ends", len(ends))
	}
	if end := ends[0].Payload.(vocab.TurnEndPayload).Reason; end.Kind != vocab.EndError || end.Code != vocab.CodeHook {
		t.Errorf("turn end %s", end)
	}
	if prov.Remaining() != 1 {
		t.Error("the model was asked although the gate failed")
	}
}

func TestCloseWhileModelSleeps(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := mustScript(t, `{"steps": [{"delay": "1h", "parts": [{"text": "too late"}]}]}`)
	clk := clock.NewFake(epoch)
	log := NewMemoryLog()
	e, err := New(Options{Provider: scripted.New(s, clk), Clock: clk, IDs: &vocab.SeqSource{}, Sink: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	p, err := e.Submit(vocab.UserText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sub := log.Subscribe(0, false)
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelDisposed {
		t.Errorf("prompt ended %s, want cancelled{disposed}", res)
	}
	if st := e.Stats(); st.Workers != 0 || st.Timers != 0 {
		t.Errorf("after Close: %+v", st)
	}
	if clk.Pending() != 0 {
		t.Errorf("%d waiters left on the clock", clk.Pending())
	}
	// Close closes the log, which ends its subscriptions.
	drain(sub.C())
	checkEnvelope(t, e.Session(), log.Events())
}

func TestMethodsAfterClose(t *testing.T) {
	h := start(t, Options{Provider: providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("hi") })})
	ctx := testCtx(t)
	if err := h.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	jobRan := false
	checks := map[string]func() error{
		"Submit": func() error {
			p, err := h.e.Submit(vocab.UserText("x"))
			if p != nil {
				t.Error("Submit after Close returned a Pending")
			}
			return err
		},
		"Steer":    func() error { _, err := h.e.Steer(vocab.UserText("x")); return err },
		"Inject":   func() error { _, err := h.e.Inject(vocab.UserText("x")); return err },
		"Notify":   func() error { _, err := h.e.Notify(vocab.UserText("x"), true); return err },
		"Remind":   func() error { _, err := h.e.Remind("k", vocab.UserText("x")); return err },
		"Drop":     func() error { _, err := h.e.Drop("01ARZ3NDEKTSV4RRFFQ69G5FAV"); return err },
		"Cancel":   func() error { return h.e.Cancel(vocab.CancelCause{}, false) },
		"Pause":    func() error { return h.e.Pause() },
		"Continue": func() error { return h.e.Continue() },
		"RunMaintenance": func() error {
			return h.e.RunMaintenance(ctx, func(context.Context) error { jobRan = true; return nil })
		},
		"WhenIdle": func() error { return h.e.WhenIdle(ctx) },
		"Snapshot": func() error { _, err := h.e.Snapshot(ctx); return err },
		"State":    func() error { _, _, err := h.e.State(ctx); return err },
		"History":  func() error { _, err := h.e.History(ctx); return err },
	}
	for name, f := range checks {
		// Several times: posting races the closed lane inside the engine.
		for range 20 {
			if err := f(); !isCode(err, vocab.CodeClosed) || !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want %s", name, err, vocab.CodeClosed)
				break
			}
		}
	}
	if jobRan {
		t.Error("a maintenance job ran after Close")
	}
}

func TestCloseTwiceConcurrently(t *testing.T) {
	h := start(t, Options{Provider: providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("hi") })})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- h.e.Close(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestCloseHonoursCtx(t *testing.T) {
	// A tool that ignores cancellation keeps Close waiting; Close gives up
	// when its ctx ends and finishes once the tool returns.
	s := mustScript(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "stubborn"}]}, {"parts": [{"text": "x"}]}]}`)
	clk := clock.NewFake(epoch)
	stubborn := toolFunc{name: "stubborn", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		_ = clk.Sleep(context.Background(), time.Minute)
		return vocab.ToolResult{Content: "done anyway"}, nil
	}}
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, stubborn)})
	p := h.submit("go")
	ctx := testCtx(t)
	if err := clk.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancelCause(ctx)
	cause := errors.New("gave up")
	cancel(cause)
	if err := h.e.Close(short); !errors.Is(err, cause) {
		t.Fatalf("Close with a done ctx: %v, want its cause", err)
	}
	// The close has begun: the prompt ends cancelled at once, although the
	// tool is still running.
	if res := h.wait(p); res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelDisposed {
		t.Errorf("prompt ended %s, want cancelled{disposed}", res)
	}
	if st := h.e.Stats(); st.Workers < 1 {
		t.Errorf("workers %d while the stubborn tool runs", st.Workers)
	}
	select {
	case <-h.e.laneDone:
		t.Fatal("the lane ended while a worker still runs")
	default:
	}
	clk.Advance(time.Minute)
	if err := h.e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := h.e.Stats(); st.Workers != 0 || st.Timers != 0 {
		t.Errorf("after Close: %+v", st)
	}
}

func TestOptionsValidation(t *testing.T) {
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("x") })
	for name, opt := range map[string]Options{
		"no provider":          {},
		"negative MaxSteps":    {Provider: prov, MaxSteps: -1},
		"negative MaxAttempts": {Provider: prov, MaxAttempts: -1},
		"negative AbortGrace":  {Provider: prov, AbortGrace: -time.Second},
		"negative HardStop":    {Provider: prov, HardStop: -time.Second},
	} {
		e, err := New(opt)
		if e != nil {
			_ = e.Close(context.Background())
		}
		if e != nil || !isCode(err, vocab.CodeBadInput) {
			t.Errorf("%s: engine %v, err %v; want nil and %s", name, e != nil, err, vocab.CodeBadInput)
		}
	}
	// The defaults work: real clock, ULIDs, own log.
	e, err := New(Options{Provider: prov})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if _, err := vocab.ParseID(string(e.Session())); err != nil {
		t.Errorf("default session id: %v", err)
	}
	p, err := e.Submit(vocab.UserText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || res.Kind != vocab.PromptCompleted {
		t.Errorf("default engine: %s %v", res, err)
	}
}

// ---- maintenance and idleness ----

func TestRunMaintenanceRefusedWhileRunning(t *testing.T) {
	s := mustScript(t, `{"steps": [{"delay": "10s", "parts": [{"text": "x"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	p := h.submit("hi")
	ctx := testCtx(t)
	if err := clk.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := h.e.RunMaintenance(ctx, func(context.Context) error { ran = true; return nil })
	if !isCode(err, vocab.CodeNotIdle) {
		t.Fatalf("RunMaintenance while running: %v, want %s", err, vocab.CodeNotIdle)
	}
	if ran {
		t.Error("the refused job ran")
	}
	h.autoAdvance()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Errorf("the running prompt ended %s", res)
	}
}

func TestRunMaintenanceLatchesInput(t *testing.T) {
	s := mustScript(t, `{"steps": [{"parts": [{"text": "after maintenance"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)
	started, release := make(chan struct{}), make(chan struct{})
	rc := make(chan error, 1)
	go func() {
		rc <- h.e.RunMaintenance(ctx, func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	p := h.submit("during maintenance")
	snap, err := h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != "idle" || snap.Turn != nil {
		t.Errorf("during maintenance: status %q, turn %s", snap.Status, snap.Turn)
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "maintenance" {
		t.Errorf("agent state %q during the job", agentState)
	}
	select {
	case <-p.Done():
		t.Fatal("a prompt ran during maintenance")
	default:
	}
	close(release)
	if err := <-rc; err != nil {
		t.Fatalf("RunMaintenance: %v", err)
	}
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Errorf("latched prompt ended %s", res)
	}
}

func TestRunMaintenanceJobPanic(t *testing.T) {
	s := mustScript(t, `{"steps": [{"parts": [{"text": "still works"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)
	err := h.e.RunMaintenance(ctx, func(context.Context) error { panic("compaction bug") })
	if !isCode(err, vocab.CodeInternal) || !strings.Contains(err.Error(), "compaction bug") {
		t.Fatalf("RunMaintenance with a panicking job: %v, want %s naming the panic", err, vocab.CodeInternal)
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "ready" {
		t.Errorf("agent %q after the job, want ready", agentState)
	}
	// A job's own error is returned as is.
	plain := errors.New("nothing to compact")
	if err := h.e.RunMaintenance(ctx, func(context.Context) error { return plain }); err != plain {
		t.Errorf("job error: %v", err)
	}
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt after the failed job ended %s", res)
	}
}

func TestRunMaintenanceCancelledByCancel(t *testing.T) {
	h := start(t, Options{Provider: providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("x") })})
	ctx := testCtx(t)
	started := make(chan struct{})
	rc := make(chan error, 1)
	go func() {
		rc <- h.e.RunMaintenance(ctx, func(jobCtx context.Context) error {
			close(started)
			<-jobCtx.Done()
			return context.Cause(jobCtx)
		})
	}()
	<-started
	if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser, Reason: "stop it"}, false); err != nil {
		t.Fatal(err)
	}
	err := <-rc
	var cause vocab.CancelCause
	if !errors.As(err, &cause) || cause.Kind != vocab.CancelUser || !isCode(err, vocab.CodeCancelled) {
		t.Errorf("job ended with %v, want the user's cancel cause", err)
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "ready" {
		t.Errorf("agent %q after the cancelled job", agentState)
	}
}

func TestWhenIdleFollowsFollowUps(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"delay": "1s", "parts": [{"text": "one"}]},
		{"delay": "1s", "parts": [{"text": "two"}]},
		{"delay": "1s", "parts": [{"text": "three"}]}
	]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)

	// Already idle: returns at once.
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	// The clock stands still: the first turn waits for its reply while the
	// other two prompts queue up as follow-ups.
	ps := []*Pending{h.submit("1"), h.submit("2"), h.submit("3")}
	if err := clk.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	idle := make(chan error, 1)
	go func() { idle <- h.e.WhenIdle(ctx) }()
	// Make sure the waiter is registered before anything moves.
	for {
		var n int
		if err := h.e.call(ctx, func() error { n = len(h.e.idleWaits); return nil }); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	select {
	case err := <-idle:
		t.Fatalf("WhenIdle returned while a turn runs: %v", err)
	default:
	}
	h.autoAdvance()
	if err := <-idle; err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		select {
		case <-p.Done():
			if p.w.result.Kind != vocab.PromptCompleted {
				t.Errorf("prompt %d ended %s", i+1, p.w.result)
			}
		default:
			t.Errorf("WhenIdle returned before prompt %d ended", i+1)
		}
	}
	if n := len(h.events(vocab.EventTurnStart)); n != 3 {
		t.Errorf("%d turns, want 3", n)
	}

}

func TestWhenIdleHonoursCtx(t *testing.T) {
	s := mustScript(t, `{"steps": [{"delay": "1s", "parts": [{"text": "one"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)
	p := h.submit("1")
	if err := clk.WaitForPending(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	cause := errors.New("stop waiting")
	cancel(cause)
	if err := h.e.WhenIdle(cctx); !errors.Is(err, cause) {
		t.Errorf("WhenIdle with a done ctx while a turn runs: %v, want its cause", err)
	}
	if _, err := p.Wait(cctx); !errors.Is(err, cause) {
		t.Errorf("Pending.Wait with a done ctx: %v, want its cause", err)
	}
	h.autoAdvance()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Errorf("ended %s", res)
	}
}

// gateSink is a MemoryLog whose Append can be held, to stop the lane at a
// known point.
type gateSink struct {
	*MemoryLog
	mu      sync.Mutex
	hold    chan struct{} // non-nil: the next Append waits for it
	entered chan struct{}
}

func (g *gateSink) Append(ev vocab.Event) error {
	g.mu.Lock()
	hold, entered := g.hold, g.entered
	g.hold = nil
	g.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return g.MemoryLog.Append(ev)
}

// arm makes the next Append wait until release is called; entered is
// closed once the lane is held.
func (g *gateSink) arm() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	hold := make(chan struct{})
	g.hold, g.entered = hold, make(chan struct{})
	return g.entered, func() { close(hold) }
}

// RunMaintenance whose ctx is done before the lane takes the request must
// not leave the agent in maintenance: the caller was told the job did not
// run, so nobody will ever end it.
func TestRunMaintenanceCtxDoneWhileQueued(t *testing.T) {
	sink := &gateSink{MemoryLog: NewMemoryLog()}
	h := start(t, Options{Sink: sink, Provider: providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("x") })})
	ctx := testCtx(t)
	entered, release := sink.arm()
	reminded := make(chan error, 1)
	go func() { _, err := h.e.Remind("k", vocab.UserText("standing context")); reminded <- err }()
	<-entered // the lane is inside Append for the reminder
	gone, cancel := context.WithCancelCause(ctx)
	cause := errors.New("caller gave up")
	cancel(cause)
	var ran atomic.Bool
	rc := make(chan error, 1)
	go func() {
		rc <- h.e.RunMaintenance(gone, func(context.Context) error { ran.Store(true); return nil })
	}()
	// Wait until the request is queued behind the held reminder.
	for h.e.Stats().Inflight < 2 {
		runtime.Gosched()
	}
	release()
	if err := <-reminded; err != nil {
		t.Fatal(err)
	}
	err := <-rc
	if !errors.Is(err, cause) || ran.Load() {
		t.Fatalf("RunMaintenance with a done ctx: %v (job ran: %v), want the ctx cause", err, ran.Load())
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "ready" {
		t.Errorf("agent %q after a maintenance request its caller abandoned, want ready", agentState)
	}
	if err := h.e.RunMaintenance(ctx, func(context.Context) error { return nil }); err != nil {
		t.Errorf("next RunMaintenance: %v", err)
	}
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt ended %s", res)
	}
}

// panicSink panics on every inbox event, as a broken sink might.
type panicSink struct{ *MemoryLog }

func (p panicSink) Append(ev vocab.Event) error {
	if ev.Kind == vocab.EventInboxSpliced {
		panic("sink on fire")
	}
	return p.MemoryLog.Append(ev)
}

// A panicking sink fails the call that triggered it with a typed error; the
// caller is answered, not left hanging, and the engine still closes.
func TestPanickingSinkAnswersTheCaller(t *testing.T) {
	e, err := New(Options{Provider: &stepProvider{}, Sink: panicSink{NewMemoryLog()}, IDs: &vocab.SeqSource{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.Steer(vocab.UserText("hello"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, vocab.CodeInternal.Err()) {
			t.Fatalf("Steer: got %v, want an internal error", err)
		}
	case <-ctx.Done():
		t.Fatal("Steer hung after the sink panicked")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
