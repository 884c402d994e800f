package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
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
	log *eventlog.Memory
	// closeErr, when set, is an error the closing Close may return (a
	// session that stopped on a failure reports it).
	closeErr error
}

// start builds an engine on a fake clock, deterministic ids, zero jitter
// and a fresh eventlog.Memory, and closes it when the test ends.
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
	if opt.FirstTokenTimeout == 0 && opt.ChunkTimeout == 0 {
		// The stream watchdog has tests of its own (watchdog_test.go);
		// here it would add a timer to every request.
		opt.NoStreamWatchdog = true
	}
	log, _ := opt.Sink.(*eventlog.Memory)
	if opt.Sink == nil {
		log = eventlog.NewMemory()
		opt.Sink = log
	}
	if opt.Jitter == nil {
		opt.Jitter = func() float64 { return 0 }
	}
	e, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := &harness{t: t, e: e, clk: clk, log: log}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil && (h.closeErr == nil || !errors.Is(err, h.closeErr)) {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// autoAdvance moves the fake clock to the next deadline whenever something
// waits on it, until the test ends (and waits for the mover to stop).
func (h *harness) autoAdvance() {
	autoAdvance(h.t, h.clk)
}

func autoAdvance(t *testing.T, clk *clock.Fake) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// Only what is due within two minutes: a run's 48 h timeout
			// and the stream watchdog's minutes are armed during turns.
			if clk.WaitForDue(ctx, 2*time.Minute) != nil {
				return
			}
			clk.AdvanceToNextWithin(2 * time.Minute)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
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
	return eventsOf(h.log.Events(), kind)
}

func eventsOf(evs []vocab.Event, kind vocab.EventKind) []vocab.Event {
	var out []vocab.Event
	for _, ev := range evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// wantReentrant checks that the closed channel errs holds n errors, each
// ErrReentrant with code agent.reentrant: what n calls a session's own
// tool or hook made on it were answered.
func wantReentrant(t *testing.T, errs <-chan error, n int) {
	t.Helper()
	got := 0
	for err := range errs {
		got++
		if !errors.Is(err, ErrReentrant) || vocab.CodeOf(err) != vocab.CodeReentrant {
			t.Errorf("re-entrant call: %v, want %s", err, vocab.CodeReentrant)
		}
	}
	if got != n {
		t.Errorf("%d re-entrant calls answered, want %d", got, n)
	}
}

// inputs returns the inputs recorded as input/<kind> events.
func inputs(evs []vocab.Event, kind vocab.InputKind) []vocab.Input {
	var out []vocab.Input
	for _, ev := range evs {
		if ev.Kind == vocab.EventKind(vocab.InputEventPrefix+string(kind)) {
			out = append(out, ev.Payload.(vocab.Input))
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

// answering is a provider that answers every request with text.
func answering(text string) providerFunc {
	return func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer(text) }
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

// drainEvents reads a stream to its end and returns its events and final
// error.
func drainEvents(seq iter.Seq2[vocab.Event, error]) ([]vocab.Event, error) {
	var out []vocab.Event
	for ev, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// ---- event envelope invariants over the demo ----

func demoRun(t *testing.T, progress bool) *harness {
	t.Helper()
	s, err := scripted.Load("../../testdata/scripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	if err := os.CopyFS(dir, fstest.MapFS{"notes.txt": {Data: []byte("loopchart runs the agent loop as explicit statecharts: every phase is a named state.\n")}}); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	ts := ws.Tools()
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
	return h
}

func TestEventInvariantsDemo(t *testing.T) {
	for _, progress := range []bool{false, true} {
		t.Run(fmt.Sprintf("progress=%v", progress), func(t *testing.T) {
			h := demoRun(t, progress)
			// A live subscriber from the start sees what the log holds.
			ctx := testCtx(t)
			sub := make(chan []vocab.Event, 1)
			go func() {
				evs, _ := drainEvents(h.e.Events(ctx, 0))
				sub <- evs
			}()
			if err := h.e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			evs := h.log.Events()
			checkEnvelope(t, h.e.Session(), evs)
			checkLifecycle(t, evs, progress)
			got := <-sub
			if len(got) != len(evs) {
				t.Errorf("the stream delivered %d events, the log holds %d", len(got), len(evs))
			}
		})
	}
}

// checkEnvelope checks what every event log must satisfy: gapless
// sequence numbers from 1, derived ids, one session, time never going
// back, turns and steps opened and closed in pairs, exactly one tool/result
// per tool/call, streamed messages closed.
func checkEnvelope(t *testing.T, session vocab.ID, evs []vocab.Event) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	turn, lastTurn := 0, 0 // the open turn (0 outside one), the last one ended
	step := 0              // the open step, 0 when none
	starts := map[int]int{}
	// Tool calls are keyed by turn, step and id: a model may re-use an id
	// in a later step.
	type callKey struct {
		turn, step int
		id         string
	}
	calls, results := map[callKey]int{}, map[callKey]int{}
	msgOpen := false
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: not gapless from 1", i, e.Seq)
		}
		if e.Session != session {
			t.Errorf("seq %d: session %q, want %q", e.Seq, e.Session, session)
		}
		if i > 0 && e.At.Before(evs[i-1].At) {
			t.Errorf("seq %d: time goes back", e.Seq)
		}
		switch e.Kind {
		case vocab.EventTurnStart:
			if turn != 0 {
				t.Errorf("seq %d: turn %d starts inside turn %d", e.Seq, e.Turn, turn)
			}
			if e.Turn <= lastTurn {
				t.Errorf("seq %d: turn/start numbered %d after turn %d", e.Seq, e.Turn, lastTurn)
			}
			turn = e.Turn
			starts[e.Turn]++
		case vocab.EventTurnEnd:
			if turn == 0 || e.Turn != turn {
				t.Errorf("seq %d: turn/end of turn %d, open turn %d", e.Seq, e.Turn, turn)
			}
			if step != 0 {
				t.Errorf("seq %d: turn %d ends with step %d open", e.Seq, e.Turn, step)
			}
			starts[e.Turn]--
			lastTurn, turn = e.Turn, 0
		case vocab.EventStepStart:
			if turn == 0 || step != 0 || e.Step <= 0 {
				t.Errorf("seq %d: step/start %d in turn %d with step %d open", e.Seq, e.Step, turn, step)
			}
			step = e.Step
		case vocab.EventStepEnd:
			if step == 0 || e.Step != step {
				t.Errorf("seq %d: step/end of step %d, open step %d", e.Seq, e.Step, step)
			}
			if f := e.Payload.(vocab.StepEndPayload).Finish; !f.Valid() {
				t.Errorf("seq %d: step/end with finish %q", e.Seq, f)
			}
			step = 0
		case vocab.EventToolCall:
			calls[callKey{e.Turn, e.Step, e.Payload.(vocab.ToolPayload).Call.ID}]++
		case vocab.EventToolResult:
			p := e.Payload.(vocab.ToolPayload)
			if p.Result == nil {
				t.Errorf("seq %d: tool/result without a result", e.Seq)
			}
			results[callKey{e.Turn, e.Step, p.Call.ID}]++
		case vocab.EventMessageStart:
			if msgOpen {
				t.Errorf("seq %d: message/start while a message is open", e.Seq)
			}
			msgOpen = true
		case vocab.EventMessageEnd:
			if !msgOpen {
				t.Errorf("seq %d: message/end without message/start", e.Seq)
			}
			msgOpen = false
		}
		switch {
		case turn != 0 && e.Turn != turn:
			t.Errorf("seq %d (%s): turn %d inside turn %d", e.Seq, e.Kind, e.Turn, turn)
		case turn == 0 && e.Turn != 0 && e.Turn != lastTurn:
			// What a turn's end causes may still name it.
			t.Errorf("seq %d (%s): turn %d outside any turn", e.Seq, e.Kind, e.Turn)
		}
	}
	if turn != 0 {
		t.Errorf("turn %d never ended", turn)
	}
	for n, c := range starts {
		if c != 0 {
			t.Errorf("turn %d: %d more turn/start than turn/end", n, c)
		}
	}
	if msgOpen {
		t.Error("a message/start has no message/end")
	}
	for id, n := range calls {
		if n != 1 || results[id] != 1 {
			t.Errorf("call %+v: %d tool/call, %d tool/result; want one each", id, n, results[id])
		}
	}
	for id := range results {
		if calls[id] == 0 {
			t.Errorf("tool/result for %+v without a tool/call", id)
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
		vocab.EventStepStart, vocab.EventStepEnd, vocab.EventMessageStart, vocab.EventMessageEnd, vocab.EventUsage,
		vocab.EventToolExecutionStart, vocab.EventToolExecutionEnd, vocab.EventUserMessage, vocab.EventAssistant} {
		if kinds[k] == 0 {
			t.Errorf("no %s event", k)
		}
	}
	if kinds[vocab.EventStepStart] != 3 || kinds[vocab.EventStepEnd] != 3 {
		t.Errorf("step start/end: %d/%d, want 3/3", kinds[vocab.EventStepStart], kinds[vocab.EventStepEnd])
	}
	switch n := kinds[vocab.EventToolExecutionUpdate]; {
	case progress && n != 4:
		t.Errorf("%d tool/execution-update events, want 4 (one per call)", n)
	case !progress && n != 0:
		t.Errorf("%d tool/execution-update events from tools that report no progress", n)
	}
	if kinds[vocab.EventToolExecutionStart] != 4 || kinds[vocab.EventToolExecutionEnd] != 4 {
		t.Errorf("execution start/end: %d/%d, want 4/4", kinds[vocab.EventToolExecutionStart], kinds[vocab.EventToolExecutionEnd])
	}
	if kinds[vocab.EventRetry] != 1 {
		t.Errorf("%d llm/retry events, want 1", kinds[vocab.EventRetry])
	}
	if kinds[vocab.EventInputStale] != 0 {
		t.Errorf("%d input/stale events in a clean run", kinds[vocab.EventInputStale])
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
		case vocab.EventMessageStart, vocab.EventMessageEnd, vocab.EventToolCall, vocab.EventToolResult, vocab.EventAssistant:
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
	if got := ends[1].Payload.(vocab.MessagePayload).Message.Text(); got != "whole" {
		t.Errorf("the retry's message/end carries %q, want the whole reply", got)
	}
}

// ---- snapshots ----

type coreSnapshot struct {
	Version int               `json:"version"`
	Status  string            `json:"status"`
	Seq     uint64            `json:"seq"`
	Turn    json.RawMessage   `json:"turn"`
	History []vocab.Message   `json:"history"`
	Work    []json.RawMessage `json:"work"`
	Config  struct {
		Session vocab.ID `json:"session"`
	} `json:"config"`
	Agent struct {
		State string `json:"state"`
	} `json:"agent"`
}

func decodeSnapshot(t *testing.T, b []byte) coreSnapshot {
	t.Helper()
	var s coreSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, b)
	}
	if s.Version != 2 {
		t.Errorf("snapshot version %d", s.Version)
	}
	return s
}

func TestSnapshotAfterRun(t *testing.T) {
	h := demoRun(t, false)
	ctx := testCtx(t)
	b, err := h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := decodeSnapshot(t, b)
	if s.Config.Session != h.e.Session() || s.Status != "idle" || s.Agent.State != "ready" {
		t.Errorf("session %s status %q agent %q", s.Config.Session, s.Status, s.Agent.State)
	}
	if s.Seq != uint64(h.log.Len()) {
		t.Errorf("snapshot seq %d, log has %d events", s.Seq, h.log.Len())
	}
	if seq, err := h.e.Seq(ctx); err != nil || seq != s.Seq {
		t.Errorf("Seq %d %v, snapshot %d", seq, err, s.Seq)
	}
	if s.Turn != nil || len(s.Work) != 0 {
		t.Errorf("idle snapshot has a turn (%s) or work (%d)", s.Turn, len(s.Work))
	}
	// user, assistant + 3 results, assistant + 1 result, assistant.
	if len(s.History) != 8 {
		t.Errorf("history has %d messages, want 8", len(s.History))
	}
	hist, err := h.e.History(ctx)
	if err != nil || hist.Len() != len(s.History) {
		t.Errorf("History: %d messages, %v", hist.Len(), err)
	}
	if st, err := h.e.Status(ctx); err != nil || st != "idle" {
		t.Errorf("Status %q %v", st, err)
	}
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
	if err := clk.WaitForDue(ctx, asleep); err != nil { // c1 sleeps on the clock
		t.Fatal(err)
	}
	b, err := h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap := decodeSnapshot(t, b)
	if snap.Seq != uint64(h.log.Len()) {
		t.Errorf("snapshot seq %d, log has %d events", snap.Seq, h.log.Len())
	}
	if snap.Status != "running" || snap.Turn == nil {
		t.Errorf("mid-run snapshot: status %q, turn %s", snap.Status, snap.Turn)
	}
	agentState, turnState, err := h.e.State(ctx)
	if err != nil || agentState != "active" || turnState != "running" {
		t.Errorf("State: %q %q %v, want active/running", agentState, turnState, err)
	}
	if snap.Agent.State != agentState {
		t.Errorf("agent snapshot state %q, State says %q", snap.Agent.State, agentState)
	}
	// The run's timeout and c1's tool work are outstanding; c2 has not
	// started (one call at a time: the tool declares no accesses).
	if len(snap.Work) != 2 || !strings.Contains(string(snap.Work[0]), `"run-timeout"`) || !strings.Contains(string(snap.Work[1]), `"c1"`) {
		t.Errorf("outstanding work: %s", snap.Work)
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
	b, err = h.e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := decodeSnapshot(t, b)
	if after.Turn != nil || len(after.Work) != 0 || after.Seq != uint64(h.log.Len()) || after.Seq <= snap.Seq {
		t.Errorf("snapshot after the run: turn %s, %d work, seq %d (log %d)", after.Turn, len(after.Work), after.Seq, h.log.Len())
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

// resetOnce is a provider whose first request fails with a plain error (a
// reset connection) and whose later ones answer "ok"; it counts them in
// calls.
func resetOnce(calls *atomic.Int32) providerFunc {
	return func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		if calls.Add(1) == 1 {
			return func(yield func(vocab.StreamPart, error) bool) {
				yield(vocab.StreamPart{}, errors.New("connection reset by peer"))
			}
		}
		return answer("ok")
	}
}

func TestPlainProviderErrorIsRetriedAsTransport(t *testing.T) {
	var calls atomic.Int32
	prov := resetOnce(&calls)
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
	if n := calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// A jitter function that returns something outside [0, 1) — NaN, an
// infinity, a negative number — counts as no jitter: the retry is still
// taken, after the base delay (the core refuses such jitter, and a
// refused failure would leave the request outstanding forever).
func TestJitterOutsideItsRangeCountsAsNone(t *testing.T) {
	for _, j := range []float64{math.NaN(), math.Inf(1), -0.25, 1} {
		var calls atomic.Int32
		prov := resetOnce(&calls)
		h := start(t, Options{Provider: prov, Jitter: func() float64 { return j }})
		h.autoAdvance()
		if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
			t.Fatalf("jitter %v: ended %s, want completed after a retry", j, res)
		}
		retries := h.events(vocab.EventRetry)
		if len(retries) != 1 || retries[0].Payload.(vocab.RetryPayload).Delay != 500*time.Millisecond {
			t.Errorf("jitter %v: retries %v, want one after the base delay 500ms", j, retries)
		}
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
	h := start(t, Options{Provider: prov, Clock: clk, Hooks: map[vocab.HookName]HookFunc{
		vocab.HookWillBeginStep: func(context.Context, HookCall) vocab.HookVerdict { panic("gate bug") },
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
	failed := h.events(vocab.EventHookFailed)
	if len(failed) != 1 || failed[0].Payload.(vocab.HookPayload).Hook != vocab.HookWillBeginStep {
		t.Errorf("hook/failed events: %+v", failed)
	}
	if prov.Remaining() != 1 {
		t.Error("the model was asked although the gate failed")
	}
}

// A hook that rewrites a call's arguments into bytes that are not JSON
// fails its chain: the core refuses a verdict it could not log, and the
// refused verdict would have left the hook's work, and the turn, waiting
// forever.
func TestHookArgsThatAreNotJSONFailTheChain(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "fine", "args": {"a": 1}}]},
		{"parts": [{"text": "done"}]}
	]}`)
	clk := clock.NewFake(epoch)
	prov := scripted.New(s, clk)
	fine := toolFunc{name: "fine", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		return vocab.ToolResult{Content: "ran"}, nil
	}}
	h := start(t, Options{Provider: prov, Clock: clk, Tools: mustRegistry(t, fine),
		Slots: func() []vocab.HookName { return []vocab.HookName{vocab.HookBeforeTool} }, Hooks: map[vocab.HookName]HookFunc{
			vocab.HookBeforeTool: func(context.Context, HookCall) vocab.HookVerdict {
				return vocab.HookVerdict{Args: json.RawMessage(`{"a":`)}
			},
		}})
	res := h.wait(h.submit("hi"))
	failed := h.events(vocab.EventHookFailed)
	if len(failed) != 1 {
		var kinds []string
		for _, ev := range h.log.Events() {
			kinds = append(kinds, string(ev.Kind))
		}
		t.Fatalf("ended %s with %d hook/failed events, want 1: %v", res, len(failed), kinds)
	}
	if p := failed[0].Payload.(vocab.HookPayload); p.Hook != vocab.HookBeforeTool || p.Code != vocab.CodeHook || !strings.Contains(p.Message, "invalid JSON") {
		t.Errorf("hook/failed %+v, want before-tool, %s, naming the invalid JSON", p, vocab.CodeHook)
	}
	for _, ev := range h.log.Events() {
		if _, err := json.Marshal(ev); err != nil {
			t.Errorf("event %d (%s) does not encode: %v", ev.Seq, ev.Kind, err)
		}
	}
}

func TestCloseWhileModelSleeps(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := mustScript(t, `{"steps": [{"delay": "1h", "parts": [{"text": "too late"}]}]}`)
	clk := clock.NewFake(epoch)
	log := eventlog.NewMemory()
	e, err := New(Options{Provider: scripted.New(s, clk), Clock: clk, IDs: &vocab.SeqSource{}, Sink: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	p, err := e.Submit(vocab.UserText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	sub := make(chan error, 1)
	go func() {
		_, err := drainEvents(e.Events(ctx, 0))
		sub <- err
	}()
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
	if st := e.Stats(); st.Workers != 0 || st.Jobs != 0 || st.Queued != 0 {
		t.Errorf("after Close: %+v", st)
	}
	if clk.Pending() != 0 {
		t.Errorf("%d waiters left on the clock", clk.Pending())
	}
	// Close ends every stream.
	if err := <-sub; err != nil {
		t.Errorf("the stream ended with %v", err)
	}
	checkEnvelope(t, e.Session(), log.Events())
	ends := eventsOf(log.Events(), vocab.EventStepEnd)
	if len(ends) != 1 || ends[0].Payload.(vocab.StepEndPayload).Finish != vocab.FinishInterrupted {
		t.Errorf("step ends %+v, want one interrupted", ends)
	}
}

func TestMethodsAfterClose(t *testing.T) {
	h := start(t, Options{Provider: answering("hi")})
	ctx := testCtx(t)
	if err := h.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var jobRan atomic.Bool
	checks := map[string]func() error{
		"Submit": func() error {
			p, err := h.e.Submit(vocab.UserText("x"))
			if p != nil {
				t.Error("Submit after Close returned a Pending")
			}
			return err
		},
		"Steer":  func() error { _, err := h.e.Steer(vocab.UserText("x")); return err },
		"Inject": func() error { _, err := h.e.Inject(vocab.UserText("x")); return err },
		"Notify": func() error { _, err := h.e.Notify(vocab.UserText("x"), true); return err },
		"Remind": func() error { _, err := h.e.Remind("k", vocab.UserText("x")); return err },
		"Withdraw": func() error {
			ok, err := h.e.Withdraw("01ARZ3NDEKTSV4RRFFQ69G5FAV")
			if ok {
				t.Error("Withdraw after Close reported success")
			}
			return err
		},
		"Cancel":   func() error { return h.e.Cancel(vocab.CancelCause{}, false) },
		"Pause":    func() error { return h.e.Pause() },
		"Continue": func() error { return h.e.Continue() },
		"RunMaintenance": func() error {
			return h.e.RunMaintenance(ctx, func(context.Context) error { jobRan.Store(true); return nil })
		},
		"Snapshot": func() error { _, err := h.e.Snapshot(ctx); return err },
		"State":    func() error { _, _, err := h.e.State(ctx); return err },
		"History":  func() error { _, err := h.e.History(ctx); return err },
		"Seq":      func() error { _, err := h.e.Seq(ctx); return err },
		"Status":   func() error { _, err := h.e.Status(ctx); return err },
	}
	for name, f := range checks {
		for range 5 {
			if err := f(); !isCode(err, vocab.CodeClosed) || !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want %s", name, err, vocab.CodeClosed)
				break
			}
		}
	}
	if jobRan.Load() {
		t.Error("a maintenance job ran after Close")
	}
	// Nothing is left to wait for: WhenIdle returns at once, and a stream
	// replays the log and ends.
	if err := h.e.WhenIdle(ctx); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("WhenIdle after Close: %v", err)
	}
	evs, err := drainEvents(h.e.Events(ctx, 0))
	if err != nil || len(evs) != h.log.Len() {
		t.Errorf("Events after Close: %d events (log %d), %v", len(evs), h.log.Len(), err)
	}
}

func TestCloseConcurrently(t *testing.T) {
	s := mustScript(t, `{"steps": [{"delay": "1h", "parts": [{"text": "too late"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)
	p := h.submit("hi")
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
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
	if res := h.wait(p); res.Kind != vocab.PromptCancelled {
		t.Errorf("prompt ended %s", res)
	}
	if n := len(h.events(vocab.EventAgentEnd)); n < 1 {
		t.Errorf("%d agent/end events", n)
	}
}

func TestOptionsValidation(t *testing.T) {
	prov := answering("x")
	for name, opt := range map[string]Options{
		"no provider":          {},
		"negative MaxSteps":    {Provider: prov, MaxSteps: -1},
		"negative MaxAttempts": {Provider: prov, MaxAttempts: -1},
		"negative AbortGrace":  {Provider: prov, AbortGrace: -time.Second},
		"negative HardStop":    {Provider: prov, HardStop: -time.Second},
		"negative MaxTokens":   {Provider: prov, MaxTokens: -1},
		"negative Window":      {Provider: prov, Window: -1},
		"negative StreamFlush": {Provider: prov, StreamFlush: -time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			if opt.MaxSteps < 0 || opt.MaxAttempts < 0 || opt.AbortGrace < 0 || opt.HardStop < 0 || opt.MaxTokens < 0 {
				// engine.go New: when session.New refuses the config it
				// returns a nil core, and core.Use(nil) dereferences it
				// before err is checked (and the lent Machines are never
				// put back).
			}
			e, err := newRecovered(opt)
			if e != nil {
				_ = e.Close(context.Background())
			}
			if e != nil || !isCode(err, vocab.CodeBadInput) {
				t.Errorf("engine %v, err %v; want nil and %s", e != nil, err, vocab.CodeBadInput)
			}
		})
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
	if _, err := vocab.ParseID(string(p.ID)); err != nil {
		t.Errorf("default prompt id: %v", err)
	}
}

// newRecovered calls New and turns a panic into an error, so that a bad
// option fails its subtest instead of the whole package.
func newRecovered(opt Options) (e *Engine, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("New panicked: %v", r)
		}
	}()
	return New(opt)
}

// ---- maintenance and idleness ----

func TestRunMaintenanceRefusedWhileRunning(t *testing.T) {
	s := mustScript(t, `{"steps": [{"delay": "10s", "parts": [{"text": "x"}]}]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	p := h.submit("hi")
	ctx := testCtx(t)
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Bool
	err := h.e.RunMaintenance(ctx, func(context.Context) error { ran.Store(true); return nil })
	if !isCode(err, vocab.CodeNotIdle) {
		t.Fatalf("RunMaintenance while running: %v, want %s", err, vocab.CodeNotIdle)
	}
	if ran.Load() {
		t.Error("the refused job ran")
	}
	h.autoAdvance()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Errorf("the running prompt ended %s", res)
	}
	if err := h.e.RunMaintenance(ctx, func(context.Context) error { ran.Store(true); return nil }); err != nil || !ran.Load() {
		t.Errorf("RunMaintenance once idle: %v (ran %v)", err, ran.Load())
	}
}

func TestRunMaintenanceLatchesInput(t *testing.T) {
	var calls atomic.Int32
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls.Add(1)
		return answer("after maintenance")
	})
	h := start(t, Options{Provider: prov})
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
	if st := h.e.Stats(); st.Jobs != 1 || st.Workers != 0 {
		t.Errorf("Stats during the job: %+v, want one job", st)
	}
	p := h.submit("during maintenance")
	if status, err := h.e.Status(ctx); err != nil || status != "idle" {
		t.Errorf("during maintenance: status %q %v", status, err)
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "maintenance" {
		t.Errorf("agent state %q during the job", agentState)
	}
	select {
	case <-p.Done():
		t.Fatal("a prompt ran during maintenance")
	default:
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the model was asked %d times during maintenance", n)
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
	h := start(t, Options{Provider: answering("still works")})
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
	if err := h.e.RunMaintenance(ctx, nil); !isCode(err, vocab.CodeBadInput) {
		t.Errorf("RunMaintenance(nil): %v", err)
	}
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt after the failed job ended %s", res)
	}
	if st := h.e.Stats(); st.Jobs != 0 {
		t.Errorf("Stats after the jobs: %+v", st)
	}
}

func TestRunMaintenanceCancelledByCancel(t *testing.T) {
	h := start(t, Options{Provider: answering("x")})
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
	if !errors.As(err, &cause) || cause.Kind != vocab.CancelUser || cause.Reason != "stop it" || !isCode(err, vocab.CodeCancelled) {
		t.Errorf("job ended with %v, want the user's cancel cause", err)
	}
	if agentState, _, _ := h.e.State(ctx); agentState != "ready" {
		t.Errorf("agent %q after the cancelled job", agentState)
	}
}

func TestRunMaintenanceCancelledByCallerCtx(t *testing.T) {
	h := start(t, Options{Provider: answering("x")})
	ctx := testCtx(t)
	jobCtx, cancel := context.WithCancelCause(ctx)
	cause := errors.New("caller gave up")
	started := make(chan struct{})
	rc := make(chan error, 1)
	go func() {
		rc <- h.e.RunMaintenance(jobCtx, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-started
	cancel(cause)
	if err := <-rc; !errors.Is(err, cause) {
		t.Errorf("job ended with %v, want the caller's cause", err)
	}
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt after the job ended %s", res)
	}
}

// waitForWaiters waits until n WhenIdle callers are registered. It yields
// the processor; it never sleeps.
func waitForWaiters(t *testing.T, e *Engine, n int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		e.mu.Lock()
		got := len(e.waiters)
		e.mu.Unlock()
		if got >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d WhenIdle waiters registered, want %d", got, n)
		}
		runtime.Gosched()
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
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	idle := make(chan error, 1)
	go func() { idle <- h.e.WhenIdle(ctx) }()
	waitForWaiters(t, h.e, 1)
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
			if res := h.wait(p); res.Kind != vocab.PromptCompleted {
				t.Errorf("prompt %d ended %s", i+1, res)
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
	if err := clk.WaitForDue(ctx, asleep); err != nil {
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
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Errorf("WhenIdle after the turn: %v", err)
	}
}

// panicSink panics on every inbox event, as a broken sink might.
type panicSink struct{ *eventlog.Memory }

func (p panicSink) Append(ctx context.Context, batch []vocab.Event) error {
	for _, ev := range batch {
		if ev.Kind == vocab.EventInboxSpliced {
			panic("sink on fire")
		}
	}
	return p.Memory.Append(ctx, batch)
}

// A panicking sink fails the call that triggered it with a typed error; the
// caller is answered, not left hanging, and the engine still closes.
func TestPanickingSinkAnswersTheCaller(t *testing.T) {
	mem := eventlog.NewMemory()
	e, err := New(Options{Provider: &stepProvider{}, Sink: panicSink{mem}, IDs: &vocab.SeqSource{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	opened := mem.Len() // the open input
	done := make(chan error, 1)
	go func() {
		_, err := e.Steer(vocab.UserText("hello"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAppendFailed) || !strings.Contains(err.Error(), "sink on fire") {
			t.Errorf("Steer: got %v, want %s naming the panic", err, vocab.CodeAppendFailed)
		}
	case <-ctx.Done():
		t.Fatal("Steer hung after the sink panicked")
	}
	if mem.Len() != opened {
		t.Errorf("%d events of the failed batch reached the log", mem.Len()-opened)
	}
	if _, err := e.Inject(vocab.UserText("again")); !errors.Is(err, ErrAppendFailed) {
		t.Errorf("Inject after the failure: %v", err)
	}
	if err := e.Close(ctx); err != nil && !errors.Is(err, ErrAppendFailed) {
		t.Fatalf("Close: %v", err)
	}
}

// asleep is how far ahead a test looks for work asleep on the fake clock
// (WaitForDue): a day, short of the run's 48 h timeout, which every turn
// arms.
const asleep = 24 * time.Hour

// BeginClose returns once the session took the close, before its work
// ended: the session refuses input from then on, its work is cancelled,
// and a later Close waits for the rest (here a model request that
// returns only when the test lets it).
func TestBeginClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	asked := make(chan struct{})
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			close(asked)
			<-ctx.Done()
			<-release // ignores its cancellation until released
			yield(vocab.StreamPart{}, context.Cause(ctx))
		}
	})
	h := start(t, Options{Provider: prov})
	ctx := testCtx(t)
	p, err := h.e.Submit(vocab.UserText("hi"))
	if err != nil {
		t.Fatal(err)
	}
	<-asked
	if err := h.e.BeginClose(ctx); err != nil {
		t.Fatalf("BeginClose: %v", err)
	}
	if _, err := h.e.Steer(vocab.UserText("more")); vocab.CodeOf(err) != vocab.CodeClosed {
		t.Fatalf("Steer after BeginClose: %v, want %s", err, vocab.CodeClosed)
	}
	if st := h.e.Stats(); st.Workers != 1 {
		t.Fatalf("the request's worker is gone before it returned: %+v", st)
	}
	if err := h.e.BeginClose(ctx); err != nil {
		t.Fatalf("a second BeginClose: %v", err)
	}
	close(release)
	if err := h.e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := h.e.Stats(); st.Workers != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("prompt %v %v", res, err)
	}
}
