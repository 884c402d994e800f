package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// The lane's promise is that nothing is lost: no work starts unrecorded,
// every caller and waiter is answered, every stream ends, and work that
// will not stop is named. These tests hold it to that.

// raceEnabled reports whether the test binary was built with -race (its
// timings are then several times slower).
var raceEnabled = func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}()

// toolThenAnswer answers odd requests with one call to tool name and even
// ones with "done", counting requests.
type toolThenAnswer struct {
	name  string
	calls atomic.Int32
}

func (p *toolThenAnswer) Stream(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	n := p.calls.Add(1)
	return func(yield func(vocab.StreamPart, error) bool) {
		if n%2 == 1 {
			call := vocab.ToolCall{ID: fmt.Sprintf("c%d", n), Name: p.name}
			if yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &call}, nil) {
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
			}
			return
		}
		if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "done"}, nil) {
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	}
}

// countingTool counts its runs.
func countingTool(name string, runs *atomic.Int32) vocab.Tool {
	return toolFunc{name: name, run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		runs.Add(1)
		return vocab.ToolResult{Content: "ok"}, nil
	}}
}

// ---- a failed append stops the session ----

func TestAppendFailureOnCallerInput(t *testing.T) {
	prov := &toolThenAnswer{name: "noop"}
	var runs atomic.Int32
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, countingTool("noop", &runs))})
	h.closeErr = ErrAppendFailed
	ctx := testCtx(t)
	if res := h.wait(h.submit("first")); res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("first prompt ended %s", res)
	}
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	before, calls, ran := h.log.Len(), prov.calls.Load(), runs.Load()
	// A live subscriber, and a WhenIdle caller that has nothing to wait for.
	sub := make(chan error, 1)
	go func() {
		_, err := drainEvents(h.e.Events(ctx, 0))
		sub <- err
	}()

	boom := errors.New("disk full")
	h.log.FailAfter(0, boom)
	p, err := h.e.Submit(vocab.UserText("second"))
	if p != nil || !errors.Is(err, ErrAppendFailed) || !errors.Is(err, boom) || vocab.CodeOf(err) != vocab.CodeAppendFailed {
		t.Fatalf("Submit with a failing log: %v %v, want %s wrapping the sink's error", p, err, vocab.CodeAppendFailed)
	}
	// Nothing the refused batch asked for started, nothing of it is logged.
	if n := prov.calls.Load(); n != calls {
		t.Errorf("the provider was called %d times after the failed append", n-calls)
	}
	if n := runs.Load(); n != ran {
		t.Errorf("a tool ran after the failed append")
	}
	if n := h.log.Len(); n != before {
		t.Errorf("log grew from %d to %d events", before, n)
	}
	// The session stays stopped, with the same error.
	for name, f := range map[string]func() error{
		"Steer":    func() error { _, err := h.e.Steer(vocab.UserText("x")); return err },
		"Inject":   func() error { _, err := h.e.Inject(vocab.UserText("x")); return err },
		"Cancel":   func() error { return h.e.Cancel(vocab.CancelCause{}, false) },
		"Snapshot": func() error { _, err := h.e.Snapshot(ctx); return err },
		"Maintenance": func() error {
			return h.e.RunMaintenance(ctx, func(context.Context) error { return nil })
		},
	} {
		if err := f(); !errors.Is(err, ErrAppendFailed) {
			t.Errorf("%s after the failed append: %v, want %s", name, err, vocab.CodeAppendFailed)
		}
	}
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Errorf("WhenIdle after the failure: %v", err)
	}
	if err := <-sub; err != nil {
		t.Errorf("the live stream ended with %v", err)
	}
	if n := prov.calls.Load(); n != calls {
		t.Errorf("the provider was called %d times after the failed append", n-calls)
	}
	if err := h.e.Close(ctx); !errors.Is(err, ErrAppendFailed) {
		t.Errorf("Close: %v, want %s", err, vocab.CodeAppendFailed)
	}
	if st := h.e.Stats(); st.Workers != 0 || st.Queued != 0 || st.Driving {
		t.Errorf("Stats after Close: %+v", st)
	}
}

func TestAppendFailureOnWorkResult(t *testing.T) {
	// A dry run finds where the model's reply is recorded.
	dry := start(t, Options{Provider: &toolThenAnswer{name: "noop"}, Tools: mustRegistry(t, countingTool("noop", new(atomic.Int32)))})
	if res := dry.wait(dry.submit("go")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("dry run ended %s", res)
	}
	done := inputs(dry.log.Events(), vocab.InModelDone)
	if len(done) == 0 {
		t.Fatal("no model.done in the dry run")
	}
	var at uint64
	for _, ev := range dry.log.Events() {
		if ev.Kind == vocab.EventKind(vocab.InputEventPrefix+string(vocab.InModelDone)) {
			at = ev.Seq
			break
		}
	}

	// The real run: the batch that records the first reply (and would
	// start its tool call) is refused.
	prov := &toolThenAnswer{name: "noop"}
	var runs atomic.Int32
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, countingTool("noop", &runs))})
	h.closeErr = ErrAppendFailed
	boom := errors.New("disk full")
	h.log.FailAfter(int(at-1), boom)
	ctx := testCtx(t)
	idle := make(chan error, 1)
	p := h.submit("go")
	go func() { idle <- h.e.WhenIdle(ctx) }()
	res, err := p.Wait(ctx)
	if !errors.Is(err, ErrAppendFailed) || !errors.Is(err, boom) {
		t.Errorf("Wait: %v, want %s", err, vocab.CodeAppendFailed)
	}
	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeAppendFailed {
		t.Errorf("prompt ended %s, want failed{%s}", res, vocab.CodeAppendFailed)
	}
	if err := <-idle; err != nil {
		t.Errorf("WhenIdle: %v", err)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times although its call was never recorded", n)
	}
	if n := prov.calls.Load(); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
	// The refused batch may have held the reply's parts too (merged while
	// the lane was busy): nothing of it is logged, whatever it held.
	if n := h.log.Len(); uint64(n) > at-1 {
		t.Errorf("log holds %d events, want at most %d (nothing of the refused batch)", n, at-1)
	}
	if len(inputs(h.log.Events(), vocab.InModelDone)) != 0 {
		t.Error("the refused model.done reached the log")
	}
	if _, err := h.e.Submit(vocab.UserText("again")); !errors.Is(err, ErrAppendFailed) {
		t.Errorf("Submit after the failure: %v", err)
	}
	if err := h.e.Close(ctx); !errors.Is(err, ErrAppendFailed) {
		t.Errorf("Close: %v, want %s", err, vocab.CodeAppendFailed)
	}
}

// ---- work that ignores its cancellation ----

func TestCloseNamesStuckWork(t *testing.T) {
	s := mustScript(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "stubborn"}]}, {"parts": [{"text": "x"}]}]}`)
	clk := clock.NewFake(epoch)
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	stubborn := toolFunc{name: "stubborn", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		defer close(returned)
		close(entered)
		<-release // ignores ctx
		return vocab.ToolResult{Content: "done anyway"}, nil
	}}
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, stubborn)})
	h.closeErr = ErrStuck
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
			<-returned
		}
	})
	ctx := testCtx(t)
	p := h.submit("go")
	p2 := h.submit("queued behind")
	<-entered
	subs := make([]chan error, 2)
	for i := range subs {
		subs[i] = make(chan error, 1)
		go func() {
			_, err := drainEvents(h.e.Events(ctx, uint64(i)))
			subs[i] <- err
		}()
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := h.e.Close(short)
	if !errors.Is(err, ErrStuck) || vocab.CodeOf(err) != vocab.CodeStuck {
		t.Fatalf("Close: %v, want %s", err, vocab.CodeStuck)
	}
	const what = `tool "stubborn" (call c1)`
	if !strings.Contains(err.Error(), what) {
		t.Errorf("Close error %q does not name %s", err, what)
	}
	for i, p := range []*Pending{p, p2} {
		res, err := p.Wait(ctx)
		if err != nil || res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelDisposed {
			t.Errorf("prompt %d ended %s %v, want cancelled{disposed}", i+1, res, err)
		}
	}
	for i, sub := range subs {
		if err := <-sub; err != nil {
			t.Errorf("stream %d ended with %v", i, err)
		}
	}
	stuck := h.events(vocab.EventWorkStuck)
	if len(stuck) != 1 || stuck[0].Payload.(vocab.StuckPayload).What != what {
		t.Errorf("work/stuck events %+v, want one naming %s", stuck, what)
	}
	if n := len(inputs(h.log.Events(), vocab.InStopped)); n != 1 {
		t.Errorf("%d input/stopped events", n)
	}
	if err := h.e.Close(ctx); !errors.Is(err, ErrStuck) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := h.e.Steer(vocab.UserText("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Steer after Close: %v", err)
	}

	// Released, the tool's late result goes nowhere and its goroutine ends.
	released = true
	close(release)
	<-returned
	if n := len(inputs(h.log.Events(), vocab.InToolDone)); n != 0 {
		t.Errorf("%d tool results logged after the session stopped", n)
	}
}

// ---- re-entrancy ----

func TestReentrantCallsFromToolAndHook(t *testing.T) {
	s := mustScript(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "selfish"}]}, {"parts": [{"text": "x"}]}]}`)
	clk := clock.NewFake(epoch)
	var e *Engine
	errs := make(chan error, 8)
	selfish := toolFunc{name: "selfish", run: func(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		errs <- e.Close(ctx)
		errs <- e.WhenIdle(ctx)
		return vocab.ToolResult{Content: "asked"}, nil
	}}
	hook := func(ctx context.Context, call HookCall) vocab.HookVerdict {
		if call.Info.First {
			errs <- e.Close(ctx)
			errs <- e.WhenIdle(ctx)
		}
		return vocab.HookVerdict{Messages: call.Messages}
	}
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, selfish),
		Hooks: map[vocab.HookName]HookFunc{vocab.HookWillBeginStep: hook}})
	e = h.e
	res := h.wait(h.submit("go"))
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("ended %s", res)
	}
	close(errs)
	wantReentrant(t, errs, 4)
	// The session is still open.
	if _, _, err := h.e.State(testCtx(t)); err != nil {
		t.Errorf("State: %v", err)
	}
}

// ---- a hook that only its context stops ----

func TestCancelFreesBlockedPromptHook(t *testing.T) {
	entered := make(chan struct{}, 1)
	var first atomic.Bool
	first.Store(true)
	causes := make(chan error, 1)
	hook := func(ctx context.Context, call HookCall) vocab.HookVerdict {
		if first.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return vocab.HookVerdict{}
		}
		return vocab.HookVerdict{}
	}
	var calls atomic.Int32
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls.Add(1)
		return answer("served")
	})
	h := start(t, Options{Provider: prov, Hooks: map[vocab.HookName]HookFunc{vocab.HookBeforeSubmitPrompt: hook}})
	ctx := testCtx(t)
	p := h.submit("judge me")
	<-entered
	if status, err := h.e.Status(ctx); err != nil || status != "running" {
		t.Errorf("while the prompt is judged: status %q %v", status, err)
	}
	if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser, Reason: "enough"}, false); err != nil {
		t.Fatal(err)
	}
	res := h.wait(p)
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelUser {
		t.Errorf("judged prompt ended %s, want cancelled{user}", res)
	}
	var cause vocab.CancelCause
	if err := <-causes; !errors.As(err, &cause) || cause.Kind != vocab.CancelUser {
		t.Errorf("the hook's ctx ended with %v, want the user's cancel", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the model was asked %d times for a cancelled prompt", n)
	}
	if res := h.wait(h.submit("next")); res.Kind != vocab.PromptCompleted {
		t.Errorf("next prompt ended %s", res)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
}

// ---- a typed nil is not a success ----

func TestTypedNilProviderErrorFails(t *testing.T) {
	for _, withText := range []bool{false, true} {
		t.Run(fmt.Sprintf("after text=%v", withText), func(t *testing.T) {
			var calls atomic.Int32
			prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
				calls.Add(1)
				return func(yield func(vocab.StreamPart, error) bool) {
					if withText && !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "looks fine"}, nil) {
						return
					}
					var nilErr *vocab.Error
					if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: " so far"}, nilErr) {
						yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
					}
				}
			})
			h := start(t, Options{Provider: prov})
			h.autoAdvance()
			res := h.wait(h.submit("hi"))
			if res.Kind == vocab.PromptCompleted {
				t.Fatalf("a typed-nil error counted as success: %s", res)
			}
			if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeInternal {
				t.Errorf("ended %s, want failed{%s}", res, vocab.CodeInternal)
			}
			failed := inputs(h.log.Events(), vocab.InModelFailed)
			if len(failed) == 0 || failed[0].Err == nil || failed[0].Err.Code != vocab.CodeInternal {
				t.Errorf("model.failed inputs %+v, want one with %s", failed, vocab.CodeInternal)
			}
			if n := len(inputs(h.log.Events(), vocab.InModelDone)); n != 0 {
				t.Errorf("%d model.done inputs", n)
			}
			for _, m := range h.events(vocab.EventAssistant) {
				if m.Payload.(vocab.MessagePayload).Message.Source == vocab.SourceModel {
					t.Errorf("a reply reached history: %+v", m.Payload)
				}
			}
		})
	}
}

// ---- duplicate ids ----

func TestDuplicateIDRefused(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"delay": "1s", "parts": [{"text": "first"}]},
		{"parts": [{"text": "second"}]}
	]}`)
	clk := clock.NewFake(epoch)
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
	ctx := testCtx(t)
	m1, m2 := vocab.UserText("one"), vocab.UserText("two")
	m1.ID, m2.ID = "01J00000000000000000000001", "01J00000000000000000000002"
	p1, err := h.e.Submit(m1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := h.e.Submit(m2) // queued behind the running turn
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	before := h.log.Len()
	for _, m := range []vocab.Message{m1, m2} {
		dup := vocab.UserText("impostor")
		dup.ID = m.ID
		p, err := h.e.Submit(dup)
		if p != nil || !errors.Is(err, session.ErrDuplicateID) || vocab.CodeOf(err) != vocab.CodeDuplicateID {
			t.Errorf("Submit with %s's id again: %v %v, want %s", m.Text(), p, err, vocab.CodeDuplicateID)
		}
		if _, err := h.e.Steer(dup); !errors.Is(err, session.ErrDuplicateID) {
			t.Errorf("Steer with %s's id: %v", m.Text(), err)
		}
	}
	if n := h.log.Len(); n != before {
		t.Errorf("refused inputs logged %d events", n-before)
	}
	h.autoAdvance()
	for i, p := range []*Pending{p1, p2} {
		if res := h.wait(p); res.Kind != vocab.PromptCompleted {
			t.Errorf("prompt %d ended %s", i+1, res)
		}
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range hist.All() {
		texts = append(texts, m.Text())
	}
	if got := strings.Join(texts, "|"); got != "one|first|two|second" {
		t.Errorf("history %q", got)
	}
}

// ---- inputs are copied at the boundary ----

func TestInputsCopiedAtTheBoundary(t *testing.T) {
	s := mustScript(t, `{"steps": [
		{"delay": "1s", "parts": [{"text": "a"}]},
		{"parts": [{"text": "b"}]}
	]}`)
	clk := clock.NewFake(epoch)
	prov := scripted.New(s, clk)
	h := start(t, Options{Provider: prov, Clock: clk})
	ctx := testCtx(t)
	inj := vocab.UserText("injected")
	if _, err := h.e.Inject(inj); err != nil {
		t.Fatal(err)
	}
	inj.Parts[0].Text = "MUTATED"
	sub := vocab.UserText("submitted")
	p, err := h.e.Submit(sub)
	if err != nil {
		t.Fatal(err)
	}
	sub.Parts[0].Text = "MUTATED"
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	steer := vocab.UserText("steered")
	if _, err := h.e.Steer(steer); err != nil {
		t.Fatal(err)
	}
	steer.Parts[0].Text = "MUTATED"
	steer.Parts = append(steer.Parts, vocab.Part{Kind: vocab.PartText, Text: "MORE"})
	h.autoAdvance()
	if res := h.wait(p); res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("ended %s", res)
	}
	for _, ev := range h.log.Events() {
		if strings.Contains(fmt.Sprintf("%+v", ev.Payload), "MUTATED") || strings.Contains(fmt.Sprintf("%+v", ev.Payload), "MORE") {
			t.Errorf("seq %d (%s) shows the caller's later edit: %+v", ev.Seq, ev.Kind, ev.Payload)
		}
	}
	for kind, want := range map[vocab.InputKind]string{vocab.InInject: "injected", vocab.InSubmit: "submitted", vocab.InSteer: "steered"} {
		in := inputs(h.log.Events(), kind)
		if len(in) != 1 || in[0].Message.Text() != want {
			t.Errorf("input/%s: %+v, want %q", kind, in, want)
		}
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range hist.All() {
		texts = append(texts, m.Text())
	}
	if got := strings.Join(texts, "|"); got != "injected|submitted|a|steered|b" {
		t.Errorf("history %q", got)
	}
	// What the model was sent is the original too.
	last := prov.Calls()[1].Messages
	if got := last[len(last)-1].Text(); got != "steered" {
		t.Errorf("second request ends with %q", got)
	}
}

// ---- back-pressure ----

func TestFastStreamDoesNotFloodTheMailbox(t *testing.T) {
	const deltas = 200_000
	var (
		e         *Engine
		maxQueued atomic.Int64
		samples   atomic.Int64
	)
	prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			for i := range deltas {
				if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "x"}, nil) {
					return
				}
				if i%64 == 0 {
					q := int64(e.Stats().Queued)
					samples.Add(1)
					for {
						m := maxQueued.Load()
						if q <= m || maxQueued.CompareAndSwap(m, q) {
							break
						}
					}
				}
			}
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	})
	h := start(t, Options{Provider: prov})
	e = h.e
	ctx := testCtx(t)
	// A caller keeps the lane busy meanwhile, so deltas arrive while
	// someone else drives and must be merged.
	stop, stopped := make(chan struct{}), make(chan struct{})
	var queries atomic.Int64
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.Seq(ctx); err != nil {
				return
			}
			queries.Add(1)
		}
	}()
	res := h.wait(h.submit("stream"))
	close(stop)
	<-stopped
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	if m := maxQueued.Load(); m > 4 {
		t.Errorf("the mailbox held %d items during the stream, want at most 4", m)
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reply := hist.At(hist.Len() - 1)
	if got := reply.Text(); len(got) != deltas || strings.Trim(got, "x") != "" {
		t.Errorf("reply has %d characters, want %d x", len(got), deltas)
	}
	parts := inputs(h.log.Events(), vocab.InModelParts)
	streamed := 0
	for _, in := range parts {
		for _, p := range in.Parts {
			streamed += len(p.Text)
		}
	}
	if streamed > deltas {
		t.Errorf("model.parts inputs carry %d characters, more than the %d streamed", streamed, deltas)
	}
	t.Logf("%d deltas: %d model.parts inputs (%d characters), max mailbox %d over %d samples, %d concurrent queries",
		deltas, len(parts), streamed, maxQueued.Load(), samples.Load(), queries.Load())
}

func TestInjectScalesLinearly(t *testing.T) {
	run := func(n int) time.Duration {
		h := start(t, Options{Provider: answering("x")})
		msg := vocab.UserText("note")
		t0 := time.Now()
		for range n {
			msg.ID = ""
			if _, err := h.e.Inject(msg); err != nil {
				t.Fatal(err)
			}
		}
		d := time.Since(t0)
		if got := len(inputs(h.log.Events(), vocab.InInject)); got != n {
			t.Errorf("%d input/inject events, want %d", got, n)
		}
		if err := h.e.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Under -race every inject costs about 20 times as much: keep the 5×
	// step but make it smaller, so the package stays quick to test. The
	// best of three runs of each size keeps GC and scheduling noise out.
	small, large := 10_000, 50_000
	if raceEnabled {
		small, large = 1_000, 5_000
	}
	best := func(n int) time.Duration {
		d := time.Duration(math.MaxInt64)
		for range 3 {
			runtime.GC()
			d = min(d, run(n))
		}
		return d
	}
	run(1_000) // warm up
	ds, dl := best(small), best(large)
	ratio := float64(dl) / float64(ds)
	t.Logf("%d injects: %s; %d injects: %s; ratio %.1f (linear: 5, quadratic: 25)", small, ds, large, dl, ratio)
	if ratio >= 15 {
		t.Errorf("%d injects took %.1f× as long as %d, want < 15 (linear: 5, quadratic: 25; generous for a loaded machine)", large, ratio, small)
	}
}

// ---- an idle session holds nothing ----

func TestIdleEnginesHoldNoGoroutine(t *testing.T) {
	const n = 1000
	clk := clock.NewFake(epoch)
	prov := answering("ok")
	settle := func() int {
		// Goroutines of finished work may still be returning: let them.
		g := runtime.NumGoroutine()
		for range 100 {
			runtime.Gosched()
			g = min(g, runtime.NumGoroutine())
		}
		return g
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	g0 := settle()
	h0 := heap()
	engines := make([]*Engine, n)
	for i := range engines {
		e, err := New(Options{Provider: prov, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = e
	}
	t.Cleanup(func() {
		for _, e := range engines {
			if err := e.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	h1 := heap()
	fresh := int64(h1-h0) / n
	if g := settle(); g > g0+2 {
		t.Errorf("%d fresh engines hold %d goroutines", n, g-g0)
	}

	ctx := testCtx(t)
	for _, e := range engines {
		p, err := e.Submit(vocab.UserText("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt ended %s %v", res, err)
		}
		if err := e.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g2 := settle()
	if g2 > g0+5 {
		t.Errorf("goroutines grew from %d to %d over %d idle engines that each ran a prompt", g0, g2, n)
	}
	for _, e := range engines {
		if st := e.Stats(); st.Workers != 0 || st.Timers != 0 || st.Jobs != 0 || st.Driving || st.Queued != 0 {
			t.Fatalf("an idle engine: %+v", st)
		}
	}
	h2 := heap()
	used := int64(h2-h0) / n

	// For comparison: fresh engines that share one id source (the
	// default ULID source allocates a 4 KB id arena per engine).
	ids := vocab.NewULIDSource(nil)
	h3 := heap()
	shared := make([]*Engine, n)
	for i := range shared {
		e, err := New(Options{Provider: prov, Clock: clk, IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		shared[i] = e
	}
	freshShared := int64(heap()-h3) / n
	for _, e := range shared {
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	t.Logf("goroutines: %d before, %d with %d idle engines after one prompt each", g0, g2, n)
	t.Logf("heap per idle engine: %d bytes fresh (%d with a shared id source), %d bytes after one completed prompt (events kept in its in-memory log)", fresh, freshShared, used)
	if fresh >= 64<<10 {
		t.Errorf("a fresh engine holds %d bytes, want < 64 KB", fresh)
	}
	if used >= 512<<10 {
		t.Errorf("an idle engine after one prompt holds %d bytes, want < 512 KB", used)
	}
	runtime.KeepAlive(engines)
}

// ---- replay longer than the window ----

// appendOnly hides that a sink can be read back.
type appendOnly struct{ m *eventlog.Memory }

func (a appendOnly) Append(ctx context.Context, batch []vocab.Event) error {
	return a.m.Append(ctx, batch)
}

// loopProvider calls tool "noop" for the first n requests of each turn,
// then answers.
type loopProvider struct{ n int }

func (p loopProvider) Stream(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	if req.Step <= p.n {
		call := vocab.ToolCall{ID: fmt.Sprintf("c%d", req.Step), Name: "noop"}
		return func(yield func(vocab.StreamPart, error) bool) {
			if yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &call}, nil) {
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
			}
		}
	}
	return answer("done")
}

func TestEventsReplayLongerThanWindow(t *testing.T) {
	reg := mustRegistry(t, countingTool("noop", new(atomic.Int32)))
	t.Run("reader sink", func(t *testing.T) {
		h := start(t, Options{Provider: loopProvider{n: 12}, Tools: reg, Window: 16})
		ctx := testCtx(t)
		if res := h.wait(h.submit("loop")); res.Kind != vocab.PromptCompleted || res.Steps != 13 {
			t.Fatalf("ended %s", res)
		}
		last, err := h.e.Seq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if last <= 200 {
			t.Fatalf("only %d events; the test needs more than 200", last)
		}
		// Live: read everything from 1, then stop at the last event.
		next := uint64(1)
		for ev, err := range h.e.Events(ctx, 0) {
			if err != nil {
				t.Fatalf("at seq %d: %v", next, err)
			}
			if ev.Seq != next {
				t.Fatalf("got seq %d, want %d", ev.Seq, next)
			}
			if ev.Seq == last {
				break
			}
			next++
		}
		if next != last {
			t.Errorf("replay stopped at %d of %d", next, last)
		}
		// From the middle, after Close: everything, then the end.
		if err := h.e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		evs, err := drainEvents(h.e.Events(ctx, 100))
		if err != nil || len(evs) != h.log.Len()-99 || evs[0].Seq != 100 {
			t.Errorf("replay from 100 after Close: %d events, %v", len(evs), err)
		}
		checkEnvelope(t, h.e.Session(), h.log.Events())
	})
	t.Run("append-only sink", func(t *testing.T) {
		mem := eventlog.NewMemory()
		h := start(t, Options{Provider: loopProvider{n: 12}, Tools: reg, Window: 16, Sink: appendOnly{mem}})
		ctx := testCtx(t)
		if res := h.wait(h.submit("loop")); res.Kind != vocab.PromptCompleted {
			t.Fatalf("ended %s", res)
		}
		if mem.Len() <= 200 {
			t.Fatalf("only %d events", mem.Len())
		}
		evs, err := drainEvents(h.e.Events(ctx, 0))
		var dropped *eventlog.DroppedError
		if !errors.Is(err, eventlog.ErrDropped) || !errors.As(err, &dropped) || dropped.Seq != 1 {
			t.Errorf("replay from 0 without a reader: %d events, %v; want %s at seq 1", len(evs), err, vocab.CodeDropped)
		}
		if len(evs) != 0 {
			t.Errorf("the stream yielded %d events before its gap", len(evs))
		}
		// The window itself is still served.
		last := uint64(mem.Len())
		for ev, err := range h.e.Events(ctx, last-15) {
			if err != nil || ev.Seq != last-15 {
				t.Errorf("from the window: seq %d %v", ev.Seq, err)
			}
			break
		}
	})
}

// ---- streamed parts and salvage ----

func TestStreamPartsReachTheCore(t *testing.T) {
	clk := clock.NewFake(epoch)
	prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "Hel"}, nil) {
				return
			}
			if err := clk.Sleep(ctx, time.Second); err != nil {
				yield(vocab.StreamPart{}, err)
				return
			}
			if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "lo"}, nil) {
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
			}
		}
	})
	h := start(t, Options{Provider: prov, Clock: clk})
	ctx := testCtx(t)
	p := h.submit("hi")
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	// The first delta reaches the core before the reply is done (the
	// input may still be queued behind the Submit that started the turn).
	waitFor(t, func() bool { return len(inputs(h.log.Events(), vocab.InModelParts)) > 0 })
	parts := inputs(h.log.Events(), vocab.InModelParts)
	if len(parts) != 1 || len(parts[0].Parts) != 1 || parts[0].Parts[0].Text != "Hel" {
		t.Fatalf("model.parts while the model sleeps: %+v, want one with \"Hel\"", parts)
	}
	if n := len(h.events(vocab.EventMessageStart)); n != 1 {
		t.Errorf("%d message/start events while streaming", n)
	}
	clk.Advance(time.Second)
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	var streamed strings.Builder
	for _, in := range inputs(h.log.Events(), vocab.InModelParts) {
		for _, p := range in.Parts {
			streamed.WriteString(p.Text)
		}
	}
	if got := streamed.String(); got != "Hello" {
		t.Errorf("model.parts carry %q, want \"Hello\"", got)
	}
	msgs := h.events(vocab.EventAssistant)
	if len(msgs) != 1 || msgs[0].Payload.(vocab.MessagePayload).Message.Text() != "Hello" {
		t.Errorf("assistant messages %+v, want \"Hello\"", msgs)
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
}

func TestCancelWhileThinkingSalvagesThinking(t *testing.T) {
	clk := clock.NewFake(epoch)
	var calls atomic.Int32
	slept := make(chan error, 1)
	prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls.Add(1)
		return func(yield func(vocab.StreamPart, error) bool) {
			if !yield(vocab.StreamPart{Kind: vocab.StreamThinking, Text: "let me think"}, nil) {
				return
			}
			err := clk.Sleep(ctx, time.Hour)
			slept <- err
			if err != nil {
				yield(vocab.StreamPart{}, err)
				return
			}
			yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "too late"}, nil)
		}
	})
	h := start(t, Options{Provider: prov, Clock: clk})
	ctx := testCtx(t)
	p := h.submit("hi")
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, false); err != nil {
		t.Fatal(err)
	}
	res := h.wait(p)
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelUser {
		t.Errorf("ended %s, want cancelled{user}", res)
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hist.Len() != 2 {
		t.Fatalf("history has %d messages, want the prompt and the salvage", hist.Len())
	}
	salvage := hist.At(1)
	if salvage.Role != vocab.RoleAssistant || salvage.Source != vocab.SourceSalvaged ||
		len(salvage.Parts) != 1 || salvage.Parts[0].Kind != vocab.PartThinking || salvage.Parts[0].Text != "let me think" {
		t.Errorf("salvaged message %+v, want the thinking", salvage)
	}
	ends := h.events(vocab.EventStepEnd)
	if len(ends) != 1 || ends[0].Payload.(vocab.StepEndPayload).Finish != vocab.FinishInterrupted {
		t.Errorf("step/end events %+v, want one interrupted", ends)
	}
	// The cancel reached the provider, with its cause, and its worker ends.
	var cause vocab.CancelCause
	if err := <-slept; !errors.As(err, &cause) || cause.Kind != vocab.CancelUser {
		t.Errorf("the provider's sleep ended with %v, want the user's cancel", err)
	}
	waitSettled(t, h.e)
	if clk.Pending() != 0 {
		t.Errorf("%d waiters left on the clock", clk.Pending())
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
}

// waitSettled waits until no work runs and no one drives the lane. It
// yields the processor; it never sleeps.
func waitSettled(t *testing.T, e *Engine) {
	t.Helper()
	ctx := testCtx(t)
	for {
		st := e.Stats()
		if st.Workers == 0 && st.Jobs == 0 && !st.Driving && st.Queued == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the lane did not settle: %+v", st)
		}
		runtime.Gosched()
	}
}

// ---- every step ends ----

func TestStepEndsWithoutDraining(t *testing.T) {
	t.Run("model failure", func(t *testing.T) {
		s := mustScript(t, `{"steps": [{"parts": [{"text": "half"}], "error_after": {"code": "llm.syntax", "message": "bad json"}}]}`)
		clk := clock.NewFake(epoch)
		h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
		res := h.wait(h.submit("hi"))
		if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeSyntax {
			t.Fatalf("ended %s, want failed{%s}", res, vocab.CodeSyntax)
		}
		starts, ends := h.events(vocab.EventStepStart), h.events(vocab.EventStepEnd)
		if len(starts) != 1 || len(ends) != 1 {
			t.Fatalf("%d step/start, %d step/end", len(starts), len(ends))
		}
		if f := ends[0].Payload.(vocab.StepEndPayload).Finish; f != vocab.FinishError {
			t.Errorf("step/end finish %q, want %q", f, vocab.FinishError)
		}
		checkEnvelope(t, h.e.Session(), h.log.Events())
	})
	t.Run("cancel while retrying", func(t *testing.T) {
		s := mustScript(t, `{"steps": [{"error": {"status": 503}}, {"parts": [{"text": "never"}]}]}`)
		clk := clock.NewFake(epoch)
		h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk})
		ctx := testCtx(t)
		p := h.submit("hi")
		if err := clk.WaitForDue(ctx, asleep); err != nil { // the retry timer
			t.Fatal(err)
		}
		if _, turnState, err := h.e.State(ctx); err != nil || turnState != "retrying" {
			t.Fatalf("turn %q %v, want retrying", turnState, err)
		}
		if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, false); err != nil {
			t.Fatal(err)
		}
		if res := h.wait(p); res.Kind != vocab.PromptCancelled {
			t.Fatalf("ended %s", res)
		}
		ends := h.events(vocab.EventStepEnd)
		if len(ends) != 1 || ends[0].Payload.(vocab.StepEndPayload).Finish != vocab.FinishInterrupted {
			t.Errorf("step/end events %+v, want one interrupted", ends)
		}
		if clk.Pending() != 0 {
			t.Errorf("the retry timer is still armed")
		}
		checkEnvelope(t, h.e.Session(), h.log.Events())
	})
}

// ---- a settled lane ----

// Results of work arrive in order with no goroutine left behind once a
// burst of concurrent callers is served.
func TestConcurrentCallersAllAnswered(t *testing.T) {
	h := start(t, Options{Provider: &stepProvider{}, Tools: mustRegistry(t, countingTool("noop", new(atomic.Int32)))})
	ctx := testCtx(t)
	const callers = 8
	var wg sync.WaitGroup
	results := make(chan vocab.PromptResult, callers*4)
	errs := make(chan error, callers*8)
	for range callers {
		wg.Go(func() {
			for range 4 {
				p, err := h.e.Submit(vocab.UserText("go"))
				if err != nil {
					errs <- err
					return
				}
				if _, err := h.e.Inject(vocab.UserText("aside")); err != nil {
					errs <- err
				}
				res, err := p.Wait(ctx)
				if err != nil {
					errs <- err
				}
				results <- res
			}
		})
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	for res := range results {
		n++
		if res.Kind != vocab.PromptCompleted {
			t.Errorf("prompt ended %s", res)
		}
	}
	if n != callers*4 {
		t.Errorf("%d prompts answered, want %d", n, callers*4)
	}
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
}

// ---- inputs taken back, paused agents, late results ----

func TestWithdrawQueuedPrompt(t *testing.T) {
	s := mustScript(t, `{"steps": [{"delay": "1s", "parts": [{"text": "first"}]}, {"parts": [{"text": "third"}]}]}`)
	clk := clock.NewFake(epoch)
	prov := scripted.New(s, clk)
	h := start(t, Options{Provider: prov, Clock: clk})
	ctx := testCtx(t)
	p1, p2, p3 := h.submit("one"), h.submit("two"), h.submit("three")
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.e.Withdraw(p2.ID); !ok || err != nil {
		t.Fatalf("Withdraw of a queued prompt: %v %v", ok, err)
	}
	res := h.wait(p2)
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelUser {
		t.Errorf("withdrawn prompt ended %s, want cancelled{user}", res)
	}
	for name, id := range map[string]vocab.ID{"again": p2.ID, "running": p1.ID, "unknown": "01J0000000000000000000000Z"} {
		if ok, err := h.e.Withdraw(id); ok || err != nil {
			t.Errorf("Withdraw %s: %v %v, want false, nil", name, ok, err)
		}
	}
	h.autoAdvance()
	for i, p := range []*Pending{p1, p3} {
		if res := h.wait(p); res.Kind != vocab.PromptCompleted {
			t.Errorf("prompt %d ended %s", []int{1, 3}[i], res)
		}
	}
	if n := len(prov.Calls()); n != 2 {
		t.Errorf("%d model requests, want 2 (the withdrawn prompt never ran)", n)
	}
}

func TestPauseHoldsPromptsUntilContinue(t *testing.T) {
	var calls atomic.Int32
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls.Add(1)
		return answer("ok")
	})
	h := start(t, Options{Provider: prov})
	ctx := testCtx(t)
	if err := h.e.Pause(); err != nil {
		t.Fatal(err)
	}
	p := h.submit("wait for it")
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		t.Fatal("a prompt ran while paused")
	default:
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d model requests while paused", n)
	}
	if err := h.e.Continue(); err != nil {
		t.Fatal(err)
	}
	if res := h.wait(p); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt ended %s", res)
	}
}

func TestRunMaintenanceWithDoneCtx(t *testing.T) {
	h := start(t, Options{Provider: answering("x")})
	ctx := testCtx(t)
	gone, cancel := context.WithCancelCause(ctx)
	cause := errors.New("caller gave up")
	cancel(cause)
	err := h.e.RunMaintenance(gone, func(jobCtx context.Context) error { return context.Cause(jobCtx) })
	if err != nil && !errors.Is(err, cause) {
		t.Errorf("RunMaintenance with a done ctx: %v, want nil or its cause", err)
	}
	// The agent did not stay in maintenance.
	if agentState, _, err := h.e.State(ctx); err != nil || agentState != "ready" {
		t.Errorf("agent %q %v, want ready", agentState, err)
	}
	if err := h.e.RunMaintenance(ctx, func(context.Context) error { return nil }); err != nil {
		t.Errorf("next RunMaintenance: %v", err)
	}
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Errorf("prompt ended %s", res)
	}
}

func TestCloseDuringMaintenance(t *testing.T) {
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
	p := h.submit("latched")
	if err := h.e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The job's own result, the disposed cause, is what RunMaintenance
	// returns.
	var cause vocab.CancelCause
	if err := <-rc; !errors.As(err, &cause) || cause.Kind != vocab.CancelDisposed {
		t.Errorf("job ended with %v, want cancelled by disposed", err)
	}
	if res := h.wait(p); res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelDisposed {
		t.Errorf("latched prompt ended %s, want cancelled{disposed}", res)
	}
	if st := h.e.Stats(); st.Jobs != 0 || st.Workers != 0 {
		t.Errorf("after Close: %+v", st)
	}
}

// RunMaintenance returns what its job returned, even when the session
// closes as the job ends: the caller must not be told "closed" about a job
// that ran to its end. (Racy by nature: each round has a small chance to
// hit the window, so the test runs many: under -race about 1 round in 100
// returns ErrClosed; without -race it seldom happens.)
func TestRunMaintenanceResultSurvivesClose(t *testing.T) {
	jobErr := errors.New("compacted, then told to stop")
	const rounds = 1000
	closedInstead := 0
	for range rounds {
		e, err := New(Options{Provider: answering("x"), IDs: &vocab.SeqSource{}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		started := make(chan struct{})
		rc := make(chan error, 1)
		go func() {
			rc <- e.RunMaintenance(ctx, func(jobCtx context.Context) error {
				close(started)
				<-jobCtx.Done()
				return jobErr
			})
		}()
		<-started
		// A latched prompt and a few idle waiters give the lane more to
		// settle as it stops, which widens the window.
		p, err := e.Submit(vocab.UserText("latched"))
		if err != nil {
			t.Fatal(err)
		}
		var idle sync.WaitGroup
		for range 4 {
			idle.Go(func() { _ = e.WhenIdle(ctx) })
		}
		if err := e.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		idle.Wait()
		<-p.Done()
		switch err := <-rc; {
		case errors.Is(err, ErrClosed):
			closedInstead++
		case err != jobErr:
			t.Fatalf("RunMaintenance: %v, want the job's error", err)
		}
	}
	if closedInstead > 0 {
		t.Errorf("%d of %d RunMaintenance calls returned ErrClosed instead of the job's result", closedInstead, rounds)
	}
}

// A tool that outlives its abort grace is given up on: the turn ends with
// the call aborted, and the tool's late result is recorded as stale, not
// applied.
func TestLateToolResultAfterAbortGraceIsStale(t *testing.T) {
	s := mustScript(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "slowpoke"}]}, {"parts": [{"text": "next"}]}]}`)
	clk := clock.NewFake(epoch)
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	slowpoke := toolFunc{name: "slowpoke", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		defer close(returned)
		close(entered)
		<-release
		return vocab.ToolResult{Content: "finally"}, nil
	}}
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, slowpoke), AbortGrace: time.Second})
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
			<-returned
		}
	})
	ctx := testCtx(t)
	p := h.submit("go")
	<-entered
	if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, false); err != nil {
		t.Fatal(err)
	}
	if _, turnState, err := h.e.State(ctx); err != nil || turnState != "aborting" {
		t.Errorf("turn %q %v, want aborting", turnState, err)
	}
	// The grace timers (turn and tool) are armed on the clock.
	if err := clk.WaitForDue(ctx, asleep); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	res := h.wait(p)
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelUser {
		t.Errorf("ended %s, want cancelled{user}", res)
	}
	results := h.events(vocab.EventToolResult)
	if len(results) != 1 {
		t.Fatalf("%d tool results, want 1", len(results))
	}
	if r := results[0].Payload.(vocab.ToolPayload).Result; r.Code != vocab.CodeToolAborted || !r.IsError {
		t.Errorf("result of the abandoned call: %+v", r)
	}
	released = true
	close(release)
	<-returned
	waitSettled(t, h.e)
	stale := h.events(vocab.EventInputStale)
	if len(stale) != 1 || stale[0].Payload.(vocab.StalePayload).Input != vocab.InToolDone {
		t.Errorf("input/stale events %+v, want the late tool.done", stale)
	}
	if n := len(h.events(vocab.EventToolResult)); n != 1 {
		t.Errorf("the late result was applied: %d tool results", n)
	}
	// The session goes on.
	if res := h.wait(h.submit("again")); res.Kind != vocab.PromptCompleted {
		t.Errorf("next prompt ended %s", res)
	}
	checkEnvelope(t, h.e.Session(), h.log.Events())
}

// With StreamFlush, parts reach the core no more often than that; a reply
// faster than StreamFlush arrives whole with model.done.
func TestStreamFlushBatchesParts(t *testing.T) {
	clk := clock.NewFake(epoch)
	prov := providerFunc(func(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			for i, text := range []string{"a", "b", "c", "d"} {
				if i > 0 {
					if err := clk.Sleep(ctx, 600*time.Millisecond); err != nil {
						yield(vocab.StreamPart{}, err)
						return
					}
				}
				if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: text}, nil) {
					return
				}
			}
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	})
	h := start(t, Options{Provider: prov, Clock: clk, StreamFlush: time.Second})
	h.autoAdvance()
	if res := h.wait(h.submit("hi")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	// a at 0s, b at 0.6s, c at 1.2s (flush: "abc"), d at 1.8s (too soon
	// after the flush: it comes with model.done, or joins "abc" if that
	// input was still queued).
	var got []string
	ins := inputs(h.log.Events(), vocab.InModelParts)
	for _, in := range ins {
		var b strings.Builder
		for _, p := range in.Parts {
			b.WriteString(p.Text)
		}
		got = append(got, b.String())
	}
	if len(got) != 1 || (got[0] != "abc" && got[0] != "abcd") {
		t.Errorf("model.parts inputs %q, want one: \"abc\" (or \"abcd\")", got)
	} else if at := ins[0].At; at.Before(epoch.Add(time.Second)) {
		t.Errorf("the first parts input came at %s, before StreamFlush had passed", at.Sub(epoch))
	}
	msgs := h.events(vocab.EventAssistant)
	if len(msgs) != 1 || msgs[0].Payload.(vocab.MessagePayload).Message.Text() != "abcd" {
		t.Errorf("assistant messages %+v, want \"abcd\"", msgs)
	}
}

// Queries run between batches: a snapshot taken while callers keep the
// lane busy never sees a batch half carried out, and the sequence number
// it reports is durable.
func TestQueriesSeeWholeBatches(t *testing.T) {
	h := start(t, Options{Provider: answering("x")})
	ctx := testCtx(t)
	// Three callers post reminders (one key each: a reminder replaces the
	// last) while two others take snapshots, so queries share batches
	// with inputs. Both stop after a bounded number of rounds: every
	// accepted id stays in the snapshot, which grows with the run (so the
	// rounds are few enough for a loaded machine under -race).
	const reminders, snapshots = 1000, 150
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			msg := vocab.UserText("note")
			for range reminders {
				select {
				case <-stop:
					return
				default:
				}
				msg.ID = ""
				if _, err := h.e.Remind(fmt.Sprint("k", i), msg); err != nil {
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	var failed, ahead atomic.Int32
	var qs sync.WaitGroup
	for range 2 {
		qs.Go(func() {
			for range snapshots {
				b, err := h.e.Snapshot(ctx)
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("Snapshot while callers post: %v", err)
					}
					continue
				}
				var s coreSnapshot
				if err := json.Unmarshal(b, &s); err != nil {
					t.Errorf("snapshot: %v", err)
					return
				}
				if n := uint64(h.log.Len()); s.Seq > n {
					if ahead.Add(1) == 1 {
						t.Errorf("snapshot at seq %d, the log holds %d events", s.Seq, n)
					}
				}
			}
		})
	}
	qs.Wait()
	if failed.Load()+ahead.Load() > 0 {
		t.Logf("%d of %d snapshots failed, %d were ahead of the log", failed.Load(), 2*snapshots, ahead.Load())
	}
}

// gateSink is a Memory whose appends can be held, to stop the lane at a
// known point: while armed, each Append announces itself on entered and
// waits for a value on release.
type gateSink struct {
	*eventlog.Memory
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGateSink() *gateSink {
	return &gateSink{Memory: eventlog.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateSink) Append(ctx context.Context, batch []vocab.Event) error {
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Memory.Append(ctx, batch)
}

// waitQueued waits until the mailbox holds n items. It yields the
// processor; it never sleeps.
func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	ctx := testCtx(t)
	for e.Stats().Queued < n {
		if ctx.Err() != nil {
			t.Fatalf("mailbox holds %d items, want %d", e.Stats().Queued, n)
		}
		runtime.Gosched()
	}
}

// A query that shares a batch with an input runs after that input's
// events are durable: it never reports an event the log does not hold
// (Seq, History, State), and Snapshot never finds a Ready half carried out.
func TestQueryAfterInputInOneBatch(t *testing.T) {
	for _, query := range []string{"Seq", "Snapshot"} {
		t.Run(query, func(t *testing.T) {
			sink := newGateSink()
			h := start(t, Options{Provider: answering("x"), Sink: sink})
			ctx := testCtx(t)
			sink.armed.Store(true)
			first := make(chan error, 1)
			go func() { _, err := h.e.Remind("a", vocab.UserText("one")); first <- err }()
			<-sink.entered // the lane is inside Append for the first batch
			second := make(chan error, 1)
			go func() { _, err := h.e.Remind("b", vocab.UserText("two")); second <- err }()
			waitQueued(t, h.e, 1)
			// seq is the core's last event and durable what the log held
			// when the query ran on the lane.
			var seq, durable uint64
			q := make(chan error, 1)
			go func() {
				if query == "Seq" {
					q <- h.e.query(ctx, func(c *session.Core) { seq, durable = c.Seq(), uint64(sink.Len()) })
					return
				}
				_, err := h.e.Snapshot(ctx)
				q <- err
			}()
			waitQueued(t, h.e, 2) // [second remind, query]
			sink.release <- struct{}{}
			// The lane (the first caller's goroutine, which returns once the
			// mailbox is empty) steps the second remind and the query, and
			// appends the second batch.
			<-sink.entered
			sink.armed.Store(false)
			sink.release <- struct{}{}
			if err := <-q; err != nil {
				t.Errorf("%s: %v", query, err)
			}
			if seq > durable {
				t.Errorf("a query saw seq %d while the log held %d events", seq, durable)
			}
			for _, ch := range []chan error{first, second} {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Close honours its ctx even when the lane is stuck in the sink (a store
// that hangs): it returns when ctx ends instead of waiting for the append.
func TestCloseHonoursCtxWhileSinkHangs(t *testing.T) {
	sink := newGateSink()
	h := start(t, Options{Provider: answering("x"), Sink: sink})
	h.closeErr = ErrClosed
	ctx := testCtx(t)
	sink.armed.Store(true)
	injected := make(chan error, 1)
	go func() { _, err := h.e.Inject(vocab.UserText("stuck in the sink")); injected <- err }()
	<-sink.entered // the lane is inside Append, and stays there
	released := false
	release := func() {
		if !released {
			released = true
			sink.armed.Store(false)
			sink.release <- struct{}{}
		}
	}
	t.Cleanup(release)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- h.e.Close(short) }()
	// A generous real bound: Close must give up at its 200 ms deadline.
	bound := time.NewTimer(2 * time.Second)
	defer bound.Stop()
	select {
	case err := <-closed:
		if err == nil {
			t.Errorf("Close returned nil while the lane is stuck in the sink")
		}
		release()
	case <-bound.C:
		release()
		err := <-closed
		t.Errorf("Close ignored its ctx while the sink hangs (returned %v only once the sink was released)", err)
	}
	if err := <-injected; err != nil {
		t.Errorf("Inject: %v", err)
	}
}

// A provider that ignores its cancellation and keeps streaming does not
// flood the log: the parts of a request the core gave up on are not
// forwarded one input (and one input/stale event) each.
func TestCancelledStreamIsNotForwarded(t *testing.T) {
	clk := clock.NewFake(epoch)
	release, finished := make(chan struct{}), make(chan struct{})
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			defer close(finished)
			if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "start"}, nil) {
				return
			}
			<-release // ignores ctx
			for range 1000 {
				if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "x"}, nil) {
					return
				}
			}
		}
	})
	h := start(t, Options{Provider: prov, Clock: clk})
	ctx := testCtx(t)
	p := h.submit("hi")
	waitFor(t, func() bool { return len(inputs(h.log.Events(), vocab.InModelParts)) == 1 })
	if err := h.e.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, false); err != nil {
		t.Fatal(err)
	}
	if res := h.wait(p); res.Kind != vocab.PromptCancelled {
		t.Fatalf("ended %s", res)
	}
	close(release)
	<-finished
	waitSettled(t, h.e)
	if err := h.e.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events(vocab.EventInputStale)); n > 2 {
		t.Errorf("%d input/stale events for the parts of a cancelled request, want at most 2", n)
	}
}

// waitFor waits until cond holds. It yields the processor; it never
// sleeps.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	for !cond() {
		if ctx.Err() != nil {
			t.Fatal("condition never held")
		}
		runtime.Gosched()
	}
}

// What a hook is handed is its own: a before-submit-prompt hook that
// scribbles on the prompt it judges (instead of returning Rewritten)
// changes neither the history nor the events already logged.
func TestHookCannotEditThePromptInPlace(t *testing.T) {
	hook := func(_ context.Context, call HookCall) vocab.HookVerdict {
		if call.Prompt != nil && len(call.Prompt.Parts) > 0 {
			call.Prompt.Parts[0].Text = "SCRIBBLED"
		}
		return vocab.HookVerdict{}
	}
	h := start(t, Options{Provider: answering("ok"), Hooks: map[vocab.HookName]HookFunc{vocab.HookBeforeSubmitPrompt: hook}})
	ctx := testCtx(t)
	if res := h.wait(h.submit("original")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := hist.At(0).Text(); got != "original" {
		t.Errorf("history holds the prompt as %q", got)
	}
	if in := inputs(h.log.Events(), vocab.InSubmit); len(in) != 1 || in[0].Message.Text() != "original" {
		t.Errorf("the logged input/submit now reads %q", in[0].Message.Text())
	}
}

// A tool is handed its call by value; scribbling on its arguments changes
// neither the history nor the logged reply.
func TestToolCannotEditItsCallInPlace(t *testing.T) {
	s := mustScript(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "scribbler", "args": {"path": "a"}}]}, {"parts": [{"text": "ok"}]}]}`)
	clk := clock.NewFake(epoch)
	scribbler := toolFunc{name: "scribbler", run: func(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		for i := range call.Args {
			if call.Args[i] == 'a' {
				call.Args[i] = 'Z'
			}
		}
		return vocab.ToolResult{Content: "done"}, nil
	}}
	h := start(t, Options{Provider: scripted.New(s, clk), Clock: clk, Tools: mustRegistry(t, scribbler)})
	ctx := testCtx(t)
	if res := h.wait(h.submit("go")); res.Kind != vocab.PromptCompleted {
		t.Fatalf("ended %s", res)
	}
	hist, err := h.e.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := hist.At(1).ToolCalls(); len(calls) != 1 || string(calls[0].Args) != `{"path":"a"}` {
		t.Errorf("history holds the call as %+v", calls)
	}
	for _, ev := range h.events(vocab.EventToolCall) {
		if got := string(ev.Payload.(vocab.ToolPayload).Call.Args); got != `{"path":"a"}` {
			t.Errorf("the logged tool/call now reads %s", got)
		}
	}
}

// discardSink keeps nothing in this process (a durable store elsewhere
// would): it exposes Append only.
type discardSink struct{}

func (discardSink) Append(context.Context, []vocab.Event) error { return nil }

// TestIdleFootprint measures what an idle session holds beyond its history
// when its events go to a store outside the process: 10,000 sessions, each
// after one completed prompt (a two-message history), for in-memory
// windows of 8 and 16 events (the events an idle session keeps are bounded
// by its window). The target is at most 8 KB per session beyond the
// history with the 8-event window, and no goroutine.
func TestIdleFootprint(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a memory measurement: not under -short or -race")
	}
	for _, window := range []int{8, 16} {
		beyond := idleFootprint(t, window)
		if window == 8 && beyond > 8<<10 {
			t.Errorf("window %d: an idle session holds %d bytes beyond its history, want ≤ 8 KB", window, beyond)
		}
	}
}

func idleFootprint(t *testing.T, window int) int64 {
	const n = 10000
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] { return answer("ok") })
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	g0 := runtime.NumGoroutine()
	h0 := heap()
	engines := make([]*Engine, n)
	ctx := testCtx(t)
	for i := range engines {
		e, err := New(Options{Provider: prov, Clock: clk, Sink: discardSink{}, Window: window})
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = e
		p, err := e.Submit(vocab.UserText("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt ended %s %v", res, err)
		}
	}
	for _, e := range engines {
		if err := e.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h1 := heap()
	// The history: the two messages each session holds (what a session
	// must keep whatever its design), measured the same way.
	hist := make([][]vocab.Message, n)
	h2 := heap()
	for i := range hist {
		hist[i] = []vocab.Message{vocab.UserText("hi"), {Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok"}}}}
	}
	histBytes := int64(heap()-h2) / n
	per := int64(h1-h0) / n
	g1 := runtime.NumGoroutine()
	t.Logf("window %d: %d idle sessions after one prompt each: %d bytes per session, of which history ≈ %d bytes; %d bytes beyond it; goroutines %d → %d",
		window, n, per, histBytes, per-histBytes, g0, g1)
	if g1 > g0+2 {
		t.Errorf("%d idle sessions hold %d goroutines", n, g1-g0)
	}
	runtime.KeepAlive(hist)
	for _, e := range engines {
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	return per - histBytes
}

// A step whose provider and tool answer synchronously costs no goroutine
// hand-off: the worker that ran the model request steps its reply in and
// runs the tool call itself, then the next request. A turn of k tool
// rounds starts one goroutine (for its first request: the caller who
// submitted must get its answer back), a few at most, however large k is.
func TestNoHandOffPerStep(t *testing.T) {
	const k = 20
	calls := 0
	prov := providerFunc(func(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		calls++
		if calls <= k {
			c := vocab.ToolCall{ID: fmt.Sprintf("c%d", calls), Name: "noop", Args: json.RawMessage(`{}`)}
			return func(yield func(vocab.StreamPart, error) bool) {
				yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &c}, nil)
			}
		}
		return answer("done")
	})
	noop := toolFunc{name: "noop", run: func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
		return vocab.ToolResult{Content: "ok"}, nil
	}}
	h := start(t, Options{Provider: prov, Tools: mustRegistry(t, noop)})
	res := h.wait(h.submit("go"))
	if res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
		t.Fatalf("prompt ended %s, want completed{steps=%d}", res, k+1)
	}
	// One goroutine for the first request; rarely another, when a
	// worker's result lands while the submitting caller still drives the
	// lane (the caller then hands the next work to a new worker): under a
	// loaded machine that can happen more than once early in the turn. A
	// hand-off per step would be k+1.
	if got := h.e.Stats().Spawned; got < 1 || got > 5 {
		t.Errorf("a turn of %d synchronous steps started %d goroutines, want 1 to 5 (no hand-off per step: that would be %d)", k+1, got, k+1)
	}
}
