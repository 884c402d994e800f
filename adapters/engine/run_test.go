package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// roundsProvider answers, within a prompt (the messages after the last
// user message), with one call to tool name while fewer than k tool
// results are in the request, then with "done". It answers synchronously.
func roundsProvider(k int, name string) providerFunc {
	return func(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		n := 0
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != vocab.RoleUser; i-- {
			if req.Messages[i].Role == vocab.RoleTool {
				n++
			}
		}
		if n >= k {
			return answer("done")
		}
		c := vocab.ToolCall{ID: fmt.Sprintf("c%d", n), Name: name, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))}
		return func(yield func(vocab.StreamPart, error) bool) {
			if yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &c}, nil) {
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
			}
		}
	}
}

// okTool answers "ok" at once.
func okTool(name string) vocab.Tool {
	return toolFunc{name: name, run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		return vocab.ToolResult{Content: "ok"}, nil
	}}
}

// passHook is a will-begin-step hook that lets every step go on.
func passHook(_ context.Context, call HookCall) vocab.HookVerdict {
	return vocab.HookVerdict{Messages: call.Messages}
}

// A Run whose provider, tool and hooks answer synchronously runs the
// whole prompt on the caller's goroutine: the lane starts no goroutine,
// while the same prompt through Submit and Wait starts one (its first
// request, which the submitting caller cannot run).
func TestRunStartsNoGoroutine(t *testing.T) {
	const k = 10
	opt := func() Options {
		return Options{Provider: roundsProvider(k, "noop"), Tools: mustRegistry(t, okTool("noop")),
			Hooks: map[vocab.HookName]HookFunc{vocab.HookWillBeginStep: passHook}}
	}
	ctx := testCtx(t)

	run := start(t, opt())
	for i := range 3 {
		res, err := run.e.Run(ctx, vocab.UserText("go"))
		if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
			t.Fatalf("Run %d: %s %v, want completed{steps=%d}", i, res, err, k+1)
		}
		if got := run.e.Stats().Spawned; got != 0 {
			t.Fatalf("after Run %d: the lane started %d goroutines, want 0", i, got)
		}
	}

	sub := start(t, opt())
	if res := sub.wait(sub.submit("go")); res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
		t.Fatalf("Submit+Wait: %s", res)
	}
	if got := sub.e.Stats().Spawned; got < 1 {
		t.Fatalf("Submit+Wait: the lane started %d goroutines, want at least 1", got)
	}
}

// Run is Submit followed by Wait: on identical sessions, the same result
// and the same event log, event for event — with tools that answer, one
// that panics, a provider that fails, a hook that blocks the step.
func TestRunSameAsSubmitWait(t *testing.T) {
	boom := toolFunc{name: "noop", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		panic("boom")
	}}
	failing := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			yield(vocab.StreamPart{}, vocab.Errorf(vocab.CodeAuth, "no key"))
		}
	})
	blocking := func(_ context.Context, call HookCall) vocab.HookVerdict {
		if call.Info.Step == 2 {
			return vocab.HookVerdict{Refuse: true, Reason: "enough"}
		}
		return vocab.HookVerdict{Messages: call.Messages}
	}
	for name, opt := range map[string]func() Options{
		"tools": func() Options {
			return Options{Provider: roundsProvider(3, "noop"), Tools: mustRegistry(t, okTool("noop")),
				Hooks: map[vocab.HookName]HookFunc{vocab.HookWillBeginStep: passHook}}
		},
		"tool panics": func() Options {
			return Options{Provider: roundsProvider(2, "noop"), Tools: mustRegistry(t, boom)}
		},
		"provider fails": func() Options {
			return Options{Provider: failing}
		},
		"hook blocks": func() Options {
			return Options{Provider: roundsProvider(3, "noop"), Tools: mustRegistry(t, okTool("noop")),
				Hooks: map[vocab.HookName]HookFunc{vocab.HookWillBeginStep: blocking}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			a, b := start(t, opt()), start(t, opt())
			var ra, rb []vocab.PromptResult
			for range 2 {
				res, err := a.e.Run(ctx, vocab.UserText("go"))
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				ra = append(ra, res)
				rb = append(rb, b.wait(b.submit("go")))
			}
			if !reflect.DeepEqual(ra, rb) {
				t.Errorf("results:\nRun         %v\nSubmit+Wait %v", ra, rb)
			}
			if err := b.e.WhenIdle(ctx); err != nil {
				t.Fatal(err)
			}
			ea, eb := a.log.Events(), b.log.Events()
			ja, _ := json.Marshal(ea)
			jb, _ := json.Marshal(eb)
			if len(ea) < 10 || !reflect.DeepEqual(ea, eb) || string(ja) != string(jb) {
				for i := range max(len(ea), len(eb)) {
					var x, y vocab.Event
					if i < len(ea) {
						x = ea[i]
					}
					if i < len(eb) {
						y = eb[i]
					}
					if !reflect.DeepEqual(x, y) {
						t.Fatalf("event logs differ (%d and %d events) first at %d:\nRun         %+v\nSubmit+Wait %+v", len(ea), len(eb), i, x, y)
					}
				}
				t.Fatalf("event logs differ: %d and %d events", len(ea), len(eb))
			}
		})
	}
}

// When Run's ctx ends while the caller runs a tool, the tool is not cut
// short (it runs under its own context): Run returns once it returned,
// with ctx's cause, and the prompt goes on without the caller — the next
// request, already handed to it, runs on a goroutine of its own.
func TestRunCtxEndsWhileCallerRunsTool(t *testing.T) {
	entered, release, answer2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	toolCtxErr := make(chan error, 1)
	var toolOn uint64
	slow := toolFunc{name: "slow", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		toolOn = goid()
		close(entered)
		<-release // not ctx: the tool ignores it
		toolCtxErr <- ctx.Err()
		return vocab.ToolResult{Content: "slow ok"}, nil
	}}
	calls := 0
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls++
		if calls == 1 {
			return roundsProvider(1, "slow")(ctx, req)
		}
		<-answer2
		return answer("done")
	})
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, slow)})
	ctx, cancel := context.WithCancelCause(testCtx(t))
	cause := errors.New("caller gave up")
	type ran struct {
		res vocab.PromptResult
		err error
	}
	out := make(chan ran, 1)
	var runOn uint64
	go func() {
		runOn = goid()
		res, err := h.e.Run(ctx, vocab.UserText("go"))
		out <- ran{res, err}
	}()
	<-entered
	cancel(cause)
	select {
	case r := <-out:
		t.Fatalf("Run returned %s %v while its tool still ran", r.res, r.err)
	default:
	}
	close(release)
	r := <-out
	if !errors.Is(r.err, cause) || r.res != (vocab.PromptResult{}) {
		t.Fatalf("Run: %s %v, want ctx's cause", r.res, r.err)
	}
	if err := <-toolCtxErr; err != nil {
		t.Errorf("the tool's context ended with Run's: %v", err)
	}
	// The tool ran on Run's goroutine: Run cannot have returned before it.
	if toolOn != runOn {
		t.Errorf("the tool ran on goroutine %d, Run's caller is goroutine %d", toolOn, runOn)
	}
	// The next request was handed to the caller before it saw ctx end:
	// it runs on a goroutine of its own, and the prompt completes.
	if got := h.e.Stats().Spawned; got != 1 {
		t.Errorf("the lane started %d goroutines, want 1 (the request Run handed back)", got)
	}
	close(answer2)
	if err := h.e.WhenIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	prompts := h.events(vocab.EventPrompt)
	if len(prompts) == 0 {
		t.Fatal("no prompt events")
	}
	if last := prompts[len(prompts)-1].Payload.(vocab.PromptPayload); last.State != "completed" || last.Detail != "completed{steps=2}" {
		t.Errorf("the prompt ended %+v, want completed{steps=2}", last)
	}
	if n := len(inputs(h.log.Events(), vocab.InToolDone)); n != 1 {
		t.Errorf("%d tool results logged, want 1", n)
	}
	hist, err := h.e.History(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if hist.Len() != 4 {
		t.Errorf("history has %d messages, want 4 (prompt, call, result, answer)", hist.Len())
	}
}

// A Run whose ctx has ended before it starts submits the prompt, as
// Submit then Wait does, and returns the cause; the prompt runs on.
func TestRunCtxEndedBeforehand(t *testing.T) {
	h := start(t, Options{Provider: roundsProvider(2, "noop"), Tools: mustRegistry(t, okTool("noop"))})
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := h.e.Run(ctx, vocab.UserText("go")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if err := h.e.WhenIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	prompts := h.events(vocab.EventPrompt)
	if len(prompts) == 0 || prompts[len(prompts)-1].Payload.(vocab.PromptPayload).Detail != "completed{steps=3}" {
		t.Errorf("prompt events %+v, want the prompt completed{steps=3}", prompts)
	}
}

// A tool or hook that calls Run on its own session with its context gets
// ErrReentrant, and nothing is submitted.
func TestRunReentrant(t *testing.T) {
	var e *Engine
	errs := make(chan error, 4)
	selfish := toolFunc{name: "noop", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		// A bound, so that a Run that waits for itself fails the test
		// instead of hanging it (the context still is the tool's).
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := e.Run(ctx, vocab.UserText("again"))
		errs <- err
		return vocab.ToolResult{Content: "ok"}, nil
	}}
	hook := func(ctx context.Context, call HookCall) vocab.HookVerdict {
		if call.Info.First {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := e.Run(ctx, vocab.UserText("again"))
			errs <- err
		}
		return vocab.HookVerdict{Messages: call.Messages}
	}
	h := start(t, Options{Provider: roundsProvider(1, "noop"), Tools: mustRegistry(t, selfish),
		Hooks: map[vocab.HookName]HookFunc{vocab.HookWillBeginStep: hook}})
	e = h.e
	res, err := h.e.Run(testCtx(t), vocab.UserText("go"))
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("Run: %s %v", res, err)
	}
	close(errs)
	wantReentrant(t, errs, 2)
	if got := len(inputs(h.log.Events(), vocab.InSubmit)); got != 1 {
		t.Errorf("%d prompts submitted, want 1", got)
	}
}

// Close while a Run's caller runs a tool: the tool is cancelled, Run
// returns the prompt's result as Wait would (cancelled, disposed), Close
// leaves nothing running; a Run after Close is refused with ErrClosed.
func TestRunCloseDuringAndAfter(t *testing.T) {
	entered := make(chan struct{})
	stubborn := toolFunc{name: "noop", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		close(entered)
		<-ctx.Done()
		return vocab.ToolResult{}, context.Cause(ctx)
	}}
	h := start(t, Options{Provider: roundsProvider(1, "noop"), Tools: mustRegistry(t, stubborn)})
	type ran struct {
		res vocab.PromptResult
		err error
	}
	out := make(chan ran, 1)
	go func() {
		res, err := h.e.Run(testCtx(t), vocab.UserText("go"))
		out <- ran{res, err}
	}()
	<-entered
	h.autoAdvance() // the abort grace runs on the fake clock
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := <-out
	if r.err != nil || r.res.Kind != vocab.PromptCancelled || r.res.Reason == nil || r.res.Reason.Kind != vocab.CancelDisposed {
		t.Errorf("Run during Close: %s %v, want cancelled (disposed)", r.res, r.err)
	}
	if st := h.e.Stats(); st.Workers != 0 || st.Timers != 0 || st.Driving || st.Queued != 0 {
		t.Errorf("Stats after Close: %+v", st)
	}
	res, err := h.e.Run(testCtx(t), vocab.UserText("late"))
	if !errors.Is(err, ErrClosed) || vocab.CodeOf(err) != vocab.CodeClosed || res != (vocab.PromptResult{}) {
		t.Errorf("Run after Close: %s %v, want %s", res, err, vocab.CodeClosed)
	}
}

// Run takes the same validation as Submit: a re-used id is refused with
// input.duplicate_id, and no work is left behind.
func TestRunRefusedInput(t *testing.T) {
	h := start(t, Options{Provider: answering("hi")})
	msg := vocab.UserText("go")
	msg.ID = "p1"
	if res, err := h.e.Run(testCtx(t), msg); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("Run: %s %v", res, err)
	}
	_, errSubmit := h.e.Submit(msg)
	_, errRun := h.e.Run(testCtx(t), msg)
	if vocab.CodeOf(errRun) != vocab.CodeOf(errSubmit) || vocab.CodeOf(errRun) == "" {
		t.Errorf("Run with a re-used id: %v; Submit: %v", errRun, errSubmit)
	}
	bad := vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "x"}}}
	_, errSubmit = h.e.Submit(bad)
	_, errRun = h.e.Run(testCtx(t), bad)
	if vocab.CodeOf(errRun) != vocab.CodeBadInput || vocab.CodeOf(errSubmit) != vocab.CodeBadInput {
		t.Errorf("an assistant prompt: Run %v, Submit %v, want %s", errRun, errSubmit, vocab.CodeBadInput)
	}
}

// Sessions sharing a global lane: a Run whose slot is granted at once
// still runs its prompt's work on the caller's goroutine.
func TestRunOnGlobalLane(t *testing.T) {
	lane, err := NewGlobalLane(1)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Provider: roundsProvider(3, "noop"), Tools: mustRegistry(t, okTool("noop")), Lane: lane})
	res, err := h.e.Run(testCtx(t), vocab.UserText("go"))
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 4 {
		t.Fatalf("Run: %s %v", res, err)
	}
	if got := h.e.Stats().Spawned; got != 0 {
		t.Errorf("the lane started %d goroutines, want 0", got)
	}
	lane.Wait()
	if st := lane.Stats(); st.Held != 0 || st.Waiting != 0 {
		t.Errorf("lane after the prompt: %+v", st)
	}
}

// goid returns the id of the calling goroutine (from its stack header,
// "goroutine N [running]:"), to tell which goroutine ran a piece of work.
func goid() uint64 {
	var buf [64]byte
	b := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	n, _ := strconv.ParseUint(b[:strings.IndexByte(b, ' ')], 10, 64)
	return n
}

// Run returns when its prompt ends, even when the lane handed its caller
// the first request of a prompt queued after it: that request runs on a
// goroutine of its own.
func TestRunReturnsWhenItsPromptEnds(t *testing.T) {
	var e *Engine
	release := make(chan struct{})
	timedOut := make(chan bool, 1)
	next := toolFunc{name: "noop", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		if _, err := e.Submit(vocab.UserText("next")); err != nil { // queued behind this turn
			t.Errorf("Submit: %v", err)
		}
		return vocab.ToolResult{Content: "ok"}, nil
	}}
	inner := roundsProvider(1, "noop")
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		if req.Messages[len(req.Messages)-1].Text() == "next" {
			// A bound, so that a Run that runs this request itself fails
			// the test instead of hanging it.
			select {
			case <-release:
				timedOut <- false
			case <-time.After(5 * time.Second):
				timedOut <- true
			}
			return answer("next done")
		}
		return inner(ctx, req)
	})
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, next)})
	e = h.e
	res, err := h.e.Run(testCtx(t), vocab.UserText("go"))
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("Run: %s %v", res, err)
	}
	close(release)
	if <-timedOut {
		t.Error("Run returned only after the next prompt's request (it ran it itself)")
	}
	if err := h.e.WhenIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, ev := range h.events(vocab.EventPrompt) {
		if ev.Payload.(vocab.PromptPayload).State == "completed" {
			completed++
		}
	}
	if completed != 2 {
		t.Errorf("%d prompts completed, want 2", completed)
	}
}

// A step's parallel calls: the caller runs one, the others run on
// goroutines as after Submit, and the prompt completes with every result.
func TestRunParallelCalls(t *testing.T) {
	var ran atomic.Int32
	calls := 0
	prov := providerFunc(func(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls++
		if calls > 1 {
			return answer("done")
		}
		return func(yield func(vocab.StreamPart, error) bool) {
			for i := range 3 {
				c := vocab.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "noop", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
				if !yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &c}, nil) {
					return
				}
			}
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
		}
	})
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, pureTool{countingTool("noop", &ran)})})
	res, err := h.e.Run(testCtx(t), vocab.UserText("go"))
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("Run: %s %v", res, err)
	}
	if n := ran.Load(); n != 3 {
		t.Errorf("%d calls ran, want 3", n)
	}
	if n := len(inputs(h.log.Events(), vocab.InToolDone)); n != 3 {
		t.Errorf("%d tool results logged, want 3", n)
	}
	if got := h.e.Stats().Spawned; got != 2 {
		t.Errorf("the lane started %d goroutines, want 2 (the calls the caller did not take)", got)
	}
}

// pureTool is a tool whose calls touch nothing the scheduler guards: the
// calls of one step run in parallel.
type pureTool struct{ vocab.Tool }

func (p pureTool) Spec() vocab.ToolSpec {
	s := p.Tool.Spec()
	s.NoAccess = true
	return s
}

// Worker records are recycled, the contexts work was given never are:
// a context a provider or tool kept after its work ended stays that
// work's (cancelled, its cause intact), whatever runs after it, and no
// two pieces of work share one.
func TestKeptWorkContextsStayTheirWorks(t *testing.T) {
	const k = 4
	var mu sync.Mutex
	var kept []context.Context
	keep := func(ctx context.Context) {
		mu.Lock()
		kept = append(kept, ctx)
		mu.Unlock()
	}
	rounds := roundsProvider(k, "keep")
	prov := providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		keep(ctx)
		return rounds(ctx, req)
	})
	tool := toolFunc{name: "keep", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		keep(ctx)
		return vocab.ToolResult{Content: "ok"}, nil
	}}
	e, err := New(Options{Provider: prov, Tools: mustRegistry(t, tool)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := testCtx(t)
	check := func(when string, n int) {
		mu.Lock()
		defer mu.Unlock()
		if len(kept) != n {
			t.Fatalf("%s: %d contexts kept, want %d", when, len(kept), n)
		}
		seen := map[context.Context]bool{}
		for i, c := range kept {
			if seen[c] {
				t.Errorf("%s: context %d was given to two pieces of work", when, i)
			}
			seen[c] = true
			if c.Err() == nil || context.Cause(c) != context.Canceled {
				t.Errorf("%s: context %d of ended work: Err %v, cause %v; want cancelled", when, i, c.Err(), context.Cause(c))
			}
			select {
			case <-c.Done():
			default:
				t.Errorf("%s: context %d of ended work is not done", when, i)
			}
			if !reentrant(c, e) {
				t.Errorf("%s: context %d lost its engine", when, i)
			}
		}
	}
	for i := range 3 {
		if res, err := e.Run(ctx, vocab.UserText("go")); err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("Run %d: %s %v", i, res, err)
		}
		check(fmt.Sprintf("after Run %d", i), (i+1)*(2*k+1))
	}
	p, err := e.Submit(vocab.UserText("go"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("Submit: %s %v", res, err)
	}
	waitSettled(t, e)
	check("after Submit", 4*(2*k+1))
}
