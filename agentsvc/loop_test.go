package agentsvc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// loopScript makes a script whose steps call the tools named, one call a
// step (name and arguments), then answer "done".
func loopScript(t *testing.T, calls [][2]string) *scripted.Script {
	t.Helper()
	var steps []string
	for i, c := range calls {
		steps = append(steps, fmt.Sprintf(`{"tool_calls": [{"id": "c%d", "name": %q, "args": %s}]}`, i+1, c[0], c[1]))
	}
	steps = append(steps, `{"parts": [{"text": "done"}]}`)
	s, err := scripted.Parse([]byte(`{"steps": [`+strings.Join(steps, ",")+`]}`), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// loopTools: read fails on "missing" (the same way every time), list
// answers, status is a poll whose answer comes from statuses in turn.
func loopTools(statuses []string) []vocab.Tool {
	var polls atomic.Int64
	return []vocab.Tool{
		tools.MustTypedText(vocab.ToolSpec{Name: "read", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessRead}}},
			func(_ context.Context, a struct {
				Path string `json:"path"`
			}) (string, error) {
				if a.Path == "missing" {
					return "", errors.New("open missing: no such file or directory")
				}
				return "contents of " + a.Path, nil
			}),
		tools.MustTypedText(vocab.ToolSpec{Name: "list", NoAccess: true}, func(context.Context, struct{}) (string, error) { return "a.txt b.txt", nil }),
		tools.MustTypedText(vocab.ToolSpec{Name: "status", NoAccess: true, Poll: true}, func(context.Context, struct{}) (string, error) {
			i := int(polls.Add(1)) - 1
			return statuses[min(i, len(statuses)-1)], nil
		}),
	}
}

// runLoop runs one prompt; setup registers what a test needs and may
// return a wait, run before the service closes (a close cuts off hook
// listeners still running).
func runLoop(t *testing.T, s *scripted.Script, ts []vocab.Tool, setup ...func(*agentsvc.Service) func(context.Context)) (vocab.PromptResult, []vocab.Event) {
	return runLoopWith(t, agentsvc.Options{}, s, ts, setup...)
}

func runLoopWith(t *testing.T, opt agentsvc.Options, s *scripted.Script, ts []vocab.Tool, setup ...func(*agentsvc.Service) func(context.Context)) (vocab.PromptResult, []vocab.Event) {
	t.Helper()
	ctx := ctx5(t)
	opt.Provider, opt.Tools = scripted.New(s, clock.Real()), ts
	svc, err := agentsvc.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	var waits []func(context.Context)
	for _, f := range setup {
		if w := f(svc); w != nil {
			waits = append(waits, w)
		}
	}
	defer func() {
		for _, w := range waits {
			w(ctx)
		}
	}()
	p, err := svc.SubmitText("fix it")
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var evs []vocab.Event
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.Kind == vocab.EventTurnEnd {
			break
		}
	}
	return res, evs
}

// A model stuck repeating a failing call is warned (at its 11th call),
// blocked (at its 21st: the batch never runs and the model is told to
// change approach), goes on when it changes approach, and is stopped,
// with the detector named, when it repeats the loop again.
func TestStuckModelIsWarnedBlockedAndTerminated(t *testing.T) {
	var calls [][2]string
	for range 21 {
		calls = append(calls, [2]string{"read", `{"path": "missing"}`})
	}
	calls = append(calls, [2]string{"list", `{}`}, [2]string{"read", `{"path": "missing"}`})
	var heard []agentsvc.LoopWarning
	var mu sync.Mutex
	told := make(chan struct{}, 1)
	res, evs := runLoop(t, loopScript(t, calls), loopTools(nil), func(svc *agentsvc.Service) func(context.Context) {
		svc.OnLoopWarning.Register("listen", func(_ context.Context, w agentsvc.LoopWarning) (struct{}, error) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, w)
			select {
			case told <- struct{}{}:
			default:
			}
			return struct{}{}, nil
		})
		// Listeners run beside the loop: the turn may end before the
		// listener ran.
		return func(ctx context.Context) {
			select {
			case <-told:
			case <-ctx.Done():
			}
		}
	})
	mu.Lock()
	if len(heard) != 1 || heard[0].Detector != "generic_repeat" || heard[0].Count != 10 || heard[0].CallID != "c11" || heard[0].Turn != 1 {
		t.Errorf("OnLoopWarning heard %+v, want the one warning at c11", heard)
	}
	mu.Unlock()

	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeLoopCriticalRepeat ||
		!strings.Contains(res.Err.Message, "generic_repeat") || !strings.Contains(res.Err.Message, `"read"`) {
		t.Fatalf("the prompt ended %v, want failed{loop.critical_repeat} naming generic_repeat and read", res)
	}
	var warnings, blocks []vocab.LoopPayload
	results := map[string]*vocab.ToolResult{}
	for _, ev := range evs {
		switch p := ev.Payload.(type) {
		case vocab.LoopPayload:
			if ev.Kind == vocab.EventWarning {
				warnings = append(warnings, p)
			} else {
				blocks = append(blocks, p)
			}
		case vocab.ToolPayload:
			if ev.Kind == vocab.EventToolResult {
				results[p.Call.ID] = p.Result
			}
		}
	}
	if len(warnings) != 1 || warnings[0].CallID != "c11" || warnings[0].Detector != "generic_repeat" || warnings[0].Count != 10 {
		t.Errorf("warnings %+v, want one, generic_repeat at c11 (count 10)", warnings)
	}
	if r := results["c11"]; r == nil || !strings.Contains(r.Note, "WARNING") || !strings.Contains(r.Content, "no such file") {
		t.Errorf("c11's result %+v, want it run with the warning as its note", r)
	}
	if len(blocks) != 2 || blocks[0].CallID != "c21" || blocks[0].Terminate || blocks[1].CallID != "c23" || !blocks[1].Terminate {
		t.Fatalf("interventions %+v, want c21 blocked then c23 terminating", blocks)
	}
	if r := results["c21"]; r == nil || r.Code != "loop.blocked" || r.Started || !strings.Contains(r.Content, "Do not repeat this exact tool action") {
		t.Errorf("c21's result %+v, want the blocked result with advice", r)
	}
	if r := results["c22"]; r == nil || r.Content != "a.txt b.txt" {
		t.Errorf("c22 (a change of approach) got %+v, want it run", r)
	}
	if r := results["c23"]; r == nil || !strings.Contains(r.Content, "This run is stopping now") {
		t.Errorf("c23's result %+v, want the terminal text", r)
	}
}

// Long legitimate work is never cut off: 500 distinct steps complete.
func TestFiveHundredDistinctStepsComplete(t *testing.T) {
	var calls [][2]string
	for i := range 500 {
		calls = append(calls, [2]string{"read", fmt.Sprintf(`{"path": "f%d"}`, i)})
	}
	res, evs := runLoop(t, loopScript(t, calls), loopTools(nil))
	if res.Kind != vocab.PromptCompleted || res.Steps != 501 {
		t.Fatalf("500 distinct steps ended %v", res)
	}
	for _, ev := range evs {
		if ev.Kind == vocab.EventWarning || ev.Kind == vocab.EventLoopIntervention {
			t.Fatalf("loop detection fired on distinct work: %s %+v", ev.Kind, ev.Payload)
		}
	}
}

// A poll whose answer changes (a CI status going pending → running →
// passed) is never stopped, however long it polls.
func TestChangingPollIsNeverStopped(t *testing.T) {
	var statuses []string
	for _, s := range []string{"pending", "running", "testing", "deploying", "verifying", "passed"} {
		for range 5 {
			statuses = append(statuses, `{"status":"`+s+`"}`)
		}
	}
	var calls [][2]string
	for range len(statuses) {
		calls = append(calls, [2]string{"status", `{}`})
	}
	res, evs := runLoop(t, loopScript(t, calls), loopTools(statuses))
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("polling ended %v", res)
	}
	for _, ev := range evs {
		if ev.Kind == vocab.EventLoopIntervention || ev.Kind == vocab.EventWarning {
			t.Fatalf("a changing poll was flagged: %s %+v", ev.Kind, ev.Payload)
		}
	}
}

// The run's timeout on the injected clock: a tool that never returns is
// cut off when the run's hour is up, and the prompt fails run.timeout.
func TestRunTimeoutThroughTheService(t *testing.T) {
	ctx := ctx5(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	started := make(chan struct{}, 1)
	hang := tools.MustTypedText(vocab.ToolSpec{Name: "hang", NoAccess: true}, func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	})
	s := loopScript(t, [][2]string{{"hang", `{}`}})
	svc, err := agentsvc.New(agentsvc.Options{Provider: scripted.New(s, clk), Tools: []vocab.Tool{hang}, Clock: clk,
		RunTimeout: time.Hour, NoStreamWatchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() { // closing waits on the clock too
			for clk.WaitForDue(ctx, time.Hour) == nil {
				clk.AdvanceToNextWithin(time.Hour)
			}
		}()
		svc.Close(ctx)
	}()
	p, err := svc.SubmitText("hang")
	if err != nil {
		t.Fatal(err)
	}
	<-started
	clk.Advance(time.Hour) // the run's deadline
	// The cancel may arm a grace timer (or not, when the tool returns at
	// once): drive the clock through whatever comes until the prompt ends.
	dctx, stop := context.WithCancel(ctx)
	driven := make(chan struct{})
	go func() {
		defer close(driven)
		for clk.WaitForDue(dctx, time.Minute) == nil {
			clk.AdvanceToNextWithin(time.Minute)
		}
	}()
	res, err := p.Wait(ctx)
	stop()
	<-driven
	if err != nil || res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeRunTimeout {
		t.Fatalf("ended %v %v, want failed{run.timeout}", res, err)
	}
	if _, err := agentsvc.New(agentsvc.Options{Provider: scripted.New(s, clk), RunTimeout: -time.Second}); err == nil {
		t.Error("a negative RunTimeout was accepted")
	}
}

// With loop detection off, the stuck model runs its loop to the end of its
// script: nothing is warned or blocked.
func TestLoopDetectionOff(t *testing.T) {
	var calls [][2]string
	for range 25 {
		calls = append(calls, [2]string{"read", `{"path": "missing"}`})
	}
	res, evs := runLoopWith(t, agentsvc.Options{NoLoopDetection: true}, loopScript(t, calls), loopTools(nil))
	if res.Kind != vocab.PromptCompleted || res.Steps != 26 {
		t.Fatalf("ended %v, want the script run to its end", res)
	}
	for _, ev := range evs {
		if ev.Kind == vocab.EventWarning || ev.Kind == vocab.EventLoopIntervention {
			t.Fatalf("loop detection acted while off: %s", ev.Kind)
		}
	}
}
