package agentsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// rounds answers, within a prompt (after its last user message), with one
// call to tool name while fewer than k tool results are in the request,
// then with "done": synchronously.
func rounds(k int, name string) replies {
	return func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		n := 0
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != vocab.RoleUser; i-- {
			if req.Messages[i].Role == vocab.RoleTool {
				n++
			}
		}
		if n >= k {
			return "done", nil, nil
		}
		return "", []vocab.ToolCall{{ID: fmt.Sprintf("c%d", n), Name: name, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))}}, nil
	}
}

type roundArgs struct {
	I int `json:"i"`
}

// okTool answers "ok" at once.
var okTool = tools.Func("noop", "does nothing", `{}`, func(context.Context, roundArgs) (string, error) { return "ok", nil })

// runOptions are deterministic options of a session of k synchronous
// tool rounds.
func runOptions(k int, tool vocab.Tool) agentsvc.Options {
	return agentsvc.Options{Session: "s", Provider: rounds(k, "noop"), Tools: []vocab.Tool{tool},
		Clock: clock.NewFake(evictT0), IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 },
		NoStreamWatchdog: true}
}

// withHooks registers pass-through handlers on a step hook and a tool
// hook, so that hooks run too.
func withHooks(t *testing.T, svc *agentsvc.Service) {
	t.Helper()
	if _, err := svc.OnWillBeginStep.Register("pass", func(ctx context.Context, c *agentsvc.StepContext, next hooks.Next[*agentsvc.StepContext]) (*agentsvc.StepContext, error) {
		return next(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.OnBeforeTool.Register("pass", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		return next(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
}

func newRunService(t *testing.T, opt agentsvc.Options) *agentsvc.Service {
	t.Helper()
	svc, err := agentsvc.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return svc
}

// A Run of k synchronous tool rounds (with hooks) starts no goroutine;
// the same prompts through SubmitText and Wait start at least one.
func TestServiceRunStartsNoGoroutine(t *testing.T) {
	const k = 10
	ctx := ctx5(t)
	svc := newRunService(t, runOptions(k, okTool))
	withHooks(t, svc)
	for i := range 3 {
		res, err := svc.RunText(ctx, "go")
		if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
			t.Fatalf("RunText %d: %s %v, want completed{steps=%d}", i, res, err, k+1)
		}
	}
	if got := agentsvc.LaneStats(svc).Spawned; got != 0 {
		t.Errorf("3 Runs of %d rounds started %d goroutines, want 0", k, got)
	}

	sub := newRunService(t, runOptions(k, okTool))
	withHooks(t, sub)
	for i := range 3 {
		p, err := sub.SubmitText("go")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
			t.Fatalf("Submit+Wait %d: %s %v", i, res, err)
		}
	}
	// At least the first prompt's first request (a later prompt's may be
	// handed to a worker that still drives the lane when it is submitted).
	if got := agentsvc.LaneStats(sub).Spawned; got < 1 {
		t.Errorf("3 Submit+Waits started %d goroutines, want at least 1", got)
	}
}

// Run gives what Submit then Wait gives: on identical sessions, the same
// results and the same event log, event for event (a tool that panics
// included).
func TestServiceRunSameAsSubmitWait(t *testing.T) {
	panicky := tools.Func("noop", "panics", `{}`, func(context.Context, roundArgs) (string, error) { panic("boom") })
	for name, tool := range map[string]vocab.Tool{"tools": okTool, "tool panics": panicky} {
		t.Run(name, func(t *testing.T) {
			ctx := ctx5(t)
			logA, logB := eventlog.NewMemory(), eventlog.NewMemory()
			optA, optB := runOptions(3, tool), runOptions(3, tool)
			optA.Sink, optB.Sink = logA, logB
			a, b := newRunService(t, optA), newRunService(t, optB)
			withHooks(t, a)
			withHooks(t, b)
			var ra, rb []vocab.PromptResult
			for _, text := range []string{"one", "two"} {
				res, err := a.RunText(ctx, text)
				if err != nil {
					t.Fatal(err)
				}
				ra = append(ra, res)
				p, err := b.SubmitText(text)
				if err != nil {
					t.Fatal(err)
				}
				res, err = p.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rb = append(rb, res)
			}
			if !reflect.DeepEqual(ra, rb) {
				t.Errorf("results:\nRun         %v\nSubmit+Wait %v", ra, rb)
			}
			if err := b.WhenIdle(ctx); err != nil {
				t.Fatal(err)
			}
			ea, eb := logA.Events(), logB.Events()
			ja, _ := json.Marshal(ea)
			jb, _ := json.Marshal(eb)
			if len(ea) < 20 || !reflect.DeepEqual(ea, eb) || string(ja) != string(jb) {
				for i := range min(len(ea), len(eb)) {
					if !reflect.DeepEqual(ea[i], eb[i]) {
						t.Fatalf("event logs differ first at %d:\nRun         %+v\nSubmit+Wait %+v", i, ea[i], eb[i])
					}
				}
				t.Fatalf("event logs differ: %d and %d events", len(ea), len(eb))
			}
		})
	}
}

// A tool that calls Run on its own session gets agent.reentrant; nothing
// is submitted.
func TestServiceRunReentrant(t *testing.T) {
	var svc *agentsvc.Service
	errs := make(chan error, 1)
	selfish := tools.Func("noop", "runs a prompt on its own session", `{}`, func(ctx context.Context, _ roundArgs) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // still the tool's context
		defer cancel()
		_, err := svc.RunText(ctx, "again")
		errs <- err
		return "ok", nil
	})
	svc = newRunService(t, runOptions(1, selfish))
	res, err := svc.RunText(ctx5(t), "go")
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("RunText: %s %v", res, err)
	}
	if err := <-errs; vocab.CodeOf(err) != vocab.CodeReentrant {
		t.Errorf("re-entrant Run: %v, want %s", err, vocab.CodeReentrant)
	}
	h, err := svc.History(ctx5(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Len() != 4 {
		t.Errorf("history has %d messages, want 4 (the re-entrant prompt was not submitted)", h.Len())
	}
}

// Close while a Run's caller runs a tool: the tool's context is
// cancelled, Run returns the prompt cancelled (disposed) as Wait would,
// and a Run after Close is refused with ErrClosed.
func TestServiceRunClose(t *testing.T) {
	entered := make(chan struct{})
	stubborn := tools.Func("noop", "waits for its context", `{}`, func(ctx context.Context, _ roundArgs) (string, error) {
		close(entered)
		<-ctx.Done()
		return "", context.Cause(ctx)
	})
	opt := runOptions(1, stubborn)
	opt.Clock = nil // the abort grace runs on the real clock: the tool honours its context at once
	svc, err := agentsvc.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	out := runAsync(ctx5(t), svc, "go")
	<-entered
	if err := svc.Close(ctx5(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := <-out
	if r.err != nil || r.res.Kind != vocab.PromptCancelled || r.res.Reason == nil || r.res.Reason.Kind != vocab.CancelDisposed {
		t.Errorf("Run during Close: %s %v, want cancelled (disposed)", r.res, r.err)
	}
	if st := agentsvc.LaneStats(svc); st.Workers != 0 || st.Timers != 0 || st.Driving {
		t.Errorf("after Close: %+v", st)
	}
	if _, err := svc.RunText(ctx5(t), "late"); !errors.Is(err, agentsvc.ErrClosed) {
		t.Errorf("Run after Close: %v, want %s", err, vocab.CodeClosed)
	}
}

// A Host's session (on the host's global lane): Run runs its prompt on
// the caller's goroutine; after an eviction the next Run reloads the
// session and goes on; after the host closed, Run is refused.
func TestServiceRunOnHost(t *testing.T) {
	ctx := ctx5(t)
	clk := clock.NewFake(evictT0)
	h, err := agentsvc.NewHost(agentsvc.HostOptions{Store: memory.New(), Clock: clk, MaxRunning: 1,
		Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) {
			return agentsvc.Options{Provider: rounds(2, "noop"), Tools: []vocab.Tool{okTool}, Clock: clk,
				NoRunTimeout: true, NoStreamWatchdog: true}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := h.Open(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := svc.RunText(ctx, "one"); err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 3 {
		t.Fatalf("RunText: %s %v", res, err)
	}
	if got := agentsvc.LaneStats(svc).Spawned; got != 0 {
		t.Errorf("a Run on a host's session started %d goroutines, want 0", got)
	}
	if ok, err := h.Evict(ctx, "s1"); err != nil || !ok {
		t.Fatalf("Evict: %v %v", ok, err)
	}
	if res, err := svc.RunText(ctx, "two"); err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 3 {
		t.Fatalf("RunText after eviction: %s %v", res, err)
	}
	if s := h.Stats(); s.Loads != 2 {
		t.Errorf("host stats %+v, want 2 loads (the Run reloaded the session)", s)
	}
	hist, err := svc.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hist.Len() != 2*(1+2*2+1) {
		t.Errorf("history has %d messages, want %d", hist.Len(), 2*(1+2*2+1))
	}
	if got := agentsvc.LaneStats(svc).Spawned; got != 0 {
		t.Errorf("a Run on the reloaded session started %d goroutines, want 0", got)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RunText(ctx, "three"); vocab.CodeOf(err) != vocab.CodeClosed {
		t.Errorf("Run after the host closed: %v, want %s", err, vocab.CodeClosed)
	}
}

// Closing a Host while a Run's caller runs a tool of one of its sessions
// ends that Run as it ends a Wait on another session in the same state:
// the same result, and nothing left running.
func TestServiceRunHostClose(t *testing.T) {
	ctx := ctx5(t)
	entered := make(chan struct{}, 2)
	stubborn := tools.Func("noop", "waits for its context", `{}`, func(ctx context.Context, _ roundArgs) (string, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return "", context.Cause(ctx)
	})
	h, err := agentsvc.NewHost(agentsvc.HostOptions{Store: memory.New(), MaxRunning: 2,
		Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) {
			return agentsvc.Options{Provider: rounds(1, "noop"), Tools: []vocab.Tool{stubborn}, NoRunTimeout: true}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.Open(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Open(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	out := runAsync(ctx, a, "go")
	p, err := b.SubmitText("go")
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	<-entered
	if err := h.Close(ctx); err != nil {
		t.Fatalf("host Close: %v", err)
	}
	r := <-out
	want, werr := p.Wait(ctx)
	if r.err != nil || werr != nil || !reflect.DeepEqual(r.res, want) || want.Kind != vocab.PromptCancelled {
		t.Errorf("Run: %s %v; Submit+Wait: %s %v; want the same, cancelled", r.res, r.err, want, werr)
	}
	for _, svc := range []*agentsvc.Service{a, b} {
		if st := agentsvc.LaneStats(svc); st.Workers != 0 || st.Timers != 0 || st.Driving {
			t.Errorf("%s after the host closed: %+v", svc.Session(), st)
		}
	}
}

// ran is what a RunText returned.
type ran struct {
	res vocab.PromptResult
	err error
}

// runAsync runs RunText(ctx, text) on svc on a goroutine of its own and
// hands back what it returned.
func runAsync(ctx context.Context, svc *agentsvc.Service, text string) <-chan ran {
	out := make(chan ran, 1)
	go func() {
		res, err := svc.RunText(ctx, text)
		out <- ran{res, err}
	}()
	return out
}

// When Run's ctx ends while its caller runs a tool, Run returns ctx's
// cause only once the tool returned (the tool runs under its own context,
// which ctx does not end), and the prompt goes on to complete without it.
func TestServiceRunCtxEnds(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	toolCtxErr := make(chan error, 1)
	slow := tools.Func("noop", "waits for release, not for its context", `{}`, func(ctx context.Context, _ roundArgs) (string, error) {
		close(entered)
		<-release
		toolCtxErr <- ctx.Err()
		return "slow ok", nil
	})
	svc := newRunService(t, runOptions(1, slow))
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before Close (cleanups run last first): a failing test still frees the tool
	ctx, cancel := context.WithCancelCause(ctx5(t))
	cause := errors.New("caller gave up")
	out := runAsync(ctx, svc, "go")
	<-entered
	// No goroutine was started: the tool runs on Run's goroutine, so Run
	// cannot return before the tool does.
	if st := agentsvc.LaneStats(svc); st.Spawned != 0 {
		t.Fatalf("the session started %d goroutines: the tool does not run on Run's", st.Spawned)
	}
	cancel(cause)
	select {
	case r := <-out:
		t.Fatalf("Run returned %s %v while its tool still ran", r.res, r.err)
	default:
	}
	free()
	if r := <-out; !errors.Is(r.err, cause) || r.res != (vocab.PromptResult{}) {
		t.Fatalf("Run: %s %v, want ctx's cause", r.res, r.err)
	}
	if err := <-toolCtxErr; err != nil {
		t.Errorf("the tool's context ended with Run's: %v", err)
	}
	if err := svc.WhenIdle(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	// The request after the tool went to a goroutine of its own.
	if st := agentsvc.LaneStats(svc); st.Spawned != 1 {
		t.Errorf("the session started %d goroutines, want 1 (the request Run no longer took)", st.Spawned)
	}
	h, err := svc.History(ctx5(t))
	if err != nil {
		t.Fatal(err)
	}
	msgs := h.Messages()
	if len(msgs) != 4 || msgs[2].Role != vocab.RoleTool || msgs[3].Role != vocab.RoleAssistant || msgs[3].Text() == "" {
		t.Fatalf("history after Run gave up: %d messages %v, want the prompt completed (user, call, result, answer)", len(msgs), msgs)
	}
	if got := msgs[2].Result.Content; got != "slow ok" {
		t.Errorf("the tool's result: %q, want %q", got, "slow ok")
	}
}

// A handler registered on a session that has already run (so the lane's
// answer to which slots have handlers is cached) runs in its next prompt;
// one registered on another session's slot changes nothing here; a
// removed one no longer runs.
func TestLateHandlersRun(t *testing.T) {
	ctx := ctx5(t)
	svc := newRunService(t, runOptions(1, okTool))
	other := newRunService(t, runOptions(1, okTool))
	calls := 0
	count := func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		calls++
		return next(ctx, c)
	}
	run := func(what string, want int) {
		t.Helper()
		calls = 0
		if res, err := svc.RunText(ctx, "go"); err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("%s: %s %v", what, res, err)
		}
		if calls != want {
			t.Errorf("%s: the before-tool handler ran %d times, want %d", what, calls, want)
		}
	}
	run("no handler", 0)
	h, err := svc.OnBeforeTool.Register("count", count)
	if err != nil {
		t.Fatal(err)
	}
	run("after Register", 1)
	if _, err := other.OnAfterTool.Register("other", func(ctx context.Context, c *agentsvc.ToolResultContext, next hooks.Next[*agentsvc.ToolResultContext]) (*agentsvc.ToolResultContext, error) {
		return next(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	run("after another session's Register", 1)
	h.Remove()
	run("after Remove", 0)
}
