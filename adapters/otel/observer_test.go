package otelchart_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/loopchart/loopchart"
	otelchart "github.com/loopchart/loopchart/adapters/otel"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// demoFiles seed the demo's workspace, as cmd/loopchart's demo does.
var demoFiles = fstest.MapFS{
	"notes.txt":     {Data: []byte("loopchart runs the agent loop as explicit statecharts: every phase is a named state.\n")},
	"docs/todo.txt": {Data: []byte("draw the turn machine\nwrite the tables\n")},
}

// runDemo plays the CLI demo's script (testdata/scripts/demo.json) with
// the workspace tools on a temporary copy of the demo's files, approving
// the edit as the demo does, and returns the session's log.
func runDemo(t testing.TB) []vocab.Event {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, demoFiles); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	s := newSession(t, string(loopchart.DemoScript), ws.Tools(), false, agentsvc.Options{})
	s.svc.OnBeforeTool.Register("approval", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		if c.Call.Name == "edit_file" {
			c.Ask = "Let the agent change notes.txt?"
		}
		return next(ctx, c)
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	approver := make(chan error, 1)
	go func() {
		for ev, err := range s.svc.Events(ctx, 0) {
			if err != nil {
				approver <- nil
				return
			}
			if p, ok := ev.Payload.(vocab.ApprovalPayload); ok && p.State == vocab.ApprovalRequested {
				if err := s.svc.Approve(p.Call.ID, agentsvc.Approved()); err != nil {
					approver <- err
					return
				}
			}
		}
		approver <- nil
	}()
	p, err := s.svc.SubmitText("Make notes.txt say that every transition is logged.")
	if err != nil {
		t.Fatal(err)
	}
	if res := s.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatalf("demo: %s", res)
	}
	cancel()
	if err := <-approver; err != nil {
		t.Fatal(err)
	}
	return s.close()
}

// The demo: one prompt, one turn, three steps; the first step's reply
// asks for three calls (one waits for approval), the second step's first
// request fails with a 503 and is retried after its Retry-After, the
// third answers. Every span, attribute and event is in the golden file.
func TestDemoSpanTree(t *testing.T) {
	evs := runDemo(t)
	tel := newTelemetry()
	tel.observe(t, evs, otelchart.Options{AgentName: "demo"})
	golden(t, "demo.tree", tree(tel.spans(), false))
	golden(t, "demo.metrics", tel.metrics(t))
}

// The same, observed live through ObserveService while the demo runs.
func TestDemoObservedLive(t *testing.T) {
	tel := newTelemetry()
	o, err := otelchart.New(tel.options(otelchart.Options{AgentName: "demo"}))
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, `{"steps": [
		{"delay": "1s", "parts": [{"text": "Let me look."}], "tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "x"}}], "usage": {"input": 10, "output": 2}},
		{"delay": "2s", "parts": [{"text": "Done."}], "usage": {"input": 20, "output": 3}}]}`, []vocab.Tool{echoTool()}, false, agentsvc.Options{})
	done := make(chan error, 1)
	go func() { done <- o.ObserveService(ctxT(t), s.svc) }()
	p, err := s.svc.SubmitText("hi")
	if err != nil {
		t.Fatal(err)
	}
	s.wait(p)
	evs := s.close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := o.Cursor(), (otelchart.Cursor{Session: s.svc.Session(), Seq: evs[len(evs)-1].Seq, Model: "claude-test", Provider: "anthropic"}); got != want {
		t.Errorf("cursor %+v, want %+v", got, want)
	}
	live := tree(tel.spans(), true)
	// The same log, observed afterwards, gives the same spans.
	after := newTelemetry()
	after.observe(t, evs, otelchart.Options{AgentName: "demo"})
	if got := tree(after.spans(), true); got != live {
		t.Errorf("live and after differ:\nlive:\n%s\nafter:\n%s", live, got)
	}
	golden(t, "live.tree", tree(tel.spans(), false))
}

func echoTool() vocab.Tool {
	type args struct {
		Text string `json:"text"`
	}
	return tools.Func("echo", "echo text", `{}`, func(_ context.Context, a args) (string, error) { return "echo: " + a.Text, nil })
}

func brokenTool() vocab.Tool {
	return tools.Func("broken", "always fails", `{}`, func(context.Context, struct{}) (string, error) {
		return "", errors.New("broken on purpose")
	})
}

// A 429 with Retry-After: the failed attempt is a chat span ended with
// error.type llm.rate_limited, the step carries a retry event, and the
// retry (2 s later on the fake clock) is a second chat span.
func TestRetry(t *testing.T) {
	s := newSession(t, `{"steps": [
		{"delay": "300ms", "error": {"status": 429, "message": "slow down", "retry_after": "2s"}},
		{"delay": "500ms", "parts": [{"text": "ok"}], "usage": {"input": 30, "output": 4, "cache_read": 16, "cache_write": 8}}]}`,
		nil, false, agentsvc.Options{})
	p, _ := s.svc.SubmitText("hi")
	if res := s.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatal(res)
	}
	tel := newTelemetry()
	tel.observe(t, s.close(), otelchart.Options{})
	golden(t, "retry.tree", tree(tel.spans(), false))
	golden(t, "retry.metrics", tel.metrics(t))
}

// An empty reply, retried: its chat span ends with error.type
// llm.empty_response, the code of the retry it caused.
func TestEmptyReplyIsRetried(t *testing.T) {
	s := newSession(t, `{"steps": [{"delay": "200ms", "empty": true}, {"delay": "300ms", "parts": [{"text": "ok"}]}]}`, nil, false, agentsvc.Options{})
	p, _ := s.svc.SubmitText("hi")
	if res := s.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatal(res)
	}
	tel := newTelemetry()
	tel.observe(t, s.close(), otelchart.Options{})
	golden(t, "empty.tree", tree(tel.spans(), false))
}

// A cancel mid-request: the chat span ends with error.type agent.cancelled
// and the cause, the turn has a cancel event, the turn and the prompt's
// invoke_agent end cancelled with the cause.
func TestCancel(t *testing.T) {
	s := newSession(t, `{"steps": [{"delay": "10s", "parts": [{"text": "too late"}]}]}`, nil, true, agentsvc.Options{})
	p, _ := s.svc.SubmitText("take your time")
	if err := s.clk.WaitForDue(ctxT(t), 10*1e9); err != nil { // the provider waits on the clock
		t.Fatal(err)
	}
	s.clk.Advance(4 * 1e9)
	if err := s.svc.Cancel(vocab.CancelCause{Kind: vocab.CancelHook, Reason: "budget"}, agentsvc.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, _ := p.Wait(ctxT(t)); res.Kind != vocab.PromptCancelled {
		t.Fatal(res)
	}
	tel := newTelemetry()
	tel.observe(t, s.close(), otelchart.Options{ProviderName: "anthropic"})
	golden(t, "cancel.tree", tree(tel.spans(), false))
}

// A tool that fails and a tool that does not exist: their execute_tool
// spans carry error.type tool.failed and tool.unknown.
func TestFailedTool(t *testing.T) {
	s := newSession(t, `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "broken", "args": {}}, {"id": "c2", "name": "nope", "args": {}}, {"id": "c3", "name": "echo", "args": {"text": "hi"}}]},
		{"parts": [{"text": "sorry"}]}]}`, []vocab.Tool{brokenTool(), echoTool()}, false, agentsvc.Options{})
	p, _ := s.svc.SubmitText("hi")
	if res := s.wait(p); res.Kind != vocab.PromptCompleted {
		t.Fatal(res)
	}
	tel := newTelemetry()
	tel.observe(t, s.close(), otelchart.Options{})
	golden(t, "failed_tool.tree", tree(tel.spans(), false))
	golden(t, "failed_tool.metrics", tel.metrics(t))
}

// Transitions become span events only when asked, and a span keeps at
// most MaxSpanEvents of them, counting the rest.
func TestTransitionEventsAndTheirLimit(t *testing.T) {
	evs := runDemo(t)
	plain := newTelemetry()
	plain.observe(t, evs, otelchart.Options{})
	if strings.Contains(tree(plain.spans(), false), "event transition") {
		t.Error("transition events without TransitionEvents")
	}
	tel := newTelemetry()
	tel.observe(t, evs, otelchart.Options{TransitionEvents: true, MaxSpanEvents: 3})
	got := tree(tel.spans(), false)
	if !strings.Contains(got, "event transition") {
		t.Errorf("no transition events:\n%s", got)
	}
	for _, s := range tel.spans() {
		if n := len(s.Events()); n > 3 {
			t.Errorf("span %s keeps %d events", s.Name(), n)
		}
	}
	if !strings.Contains(got, "loopchart.span.events_dropped=") {
		t.Errorf("no span counts dropped events:\n%s", got)
	}
	// Which transitions a step keeps depends on the order the parallel
	// calls' hooks answered in; how many it keeps and drops does not.
	var lines []string
	for _, s := range tel.spans() {
		dropped := int64(0)
		for _, a := range s.Attributes() {
			if a.Key == "loopchart.span.events_dropped" {
				dropped = a.Value.AsInt64()
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s: %d kept, %d dropped", s.StartTime().Sub(epoch), s.Name(), len(s.Events()), dropped))
	}
	slices.Sort(lines)
	golden(t, "demo_transitions.txt", strings.Join(lines, "\n")+"\n")
}

// A model stuck on a failing call: the warning and the interventions are
// events of their steps, and the turn and the prompt fail with
// loop.critical_repeat.
func TestLoopInterventions(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "testdata", "scripts", "stuck.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws, err := workspace.Open(dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	s := newSession(t, string(script), ws.Tools(), true, agentsvc.Options{})
	p, _ := s.svc.SubmitText("Read missing.txt.")
	if res := s.wait(p); res.Kind != vocab.PromptFailed {
		t.Fatal(res)
	}
	tel := newTelemetry()
	tel.observe(t, s.close(), otelchart.Options{})
	var events []string
	for _, sp := range tel.spans() {
		for _, e := range sp.Events() {
			if strings.HasPrefix(e.Name, "loop.") {
				events = append(events, sp.Name()+" "+e.Name+" {"+attrsOf(e.Attributes)+"}")
			}
		}
		if sp.Name() == "turn" || sp.Name() == "invoke_agent" {
			events = append(events, sp.Name()+" "+sp.Status().Code.String()+" {"+attrsOf(sp.Attributes())+"}")
		}
	}
	golden(t, "loop.txt", strings.Join(events, "\n")+"\n")
}

// Options are checked.
func TestOptions(t *testing.T) {
	if _, err := otelchart.New(otelchart.Options{MaxSpanEvents: -1}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("negative MaxSpanEvents: %v", err)
	}
	if _, err := otelchart.New(otelchart.Options{From: otelchart.Cursor{Seq: 3, Replay: 5}}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("replay after seq: %v", err)
	}
	o, err := otelchart.New(otelchart.Options{}) // the global (no-op) providers
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Observe(ctxT(t), sliceSource(nil)); err != nil {
		t.Fatal(err)
	}
}

// A stream with a gap, or of two sessions, is refused.
func TestBadStreams(t *testing.T) {
	ev := func(seq uint64, session vocab.ID) vocab.Event {
		return vocab.Event{Session: session, Seq: seq, At: epoch, Kind: vocab.EventStatus, Payload: vocab.StatusPayload{Status: "idle"}}
	}
	o, _ := otelchart.New(otelchart.Options{})
	if err := o.Observe(ctxT(t), sliceSource([]vocab.Event{ev(1, "a"), ev(3, "a")})); vocab.CodeOf(err) != vocab.CodeSequence {
		t.Errorf("gap: %v", err)
	}
	o, _ = otelchart.New(otelchart.Options{})
	if err := o.Observe(ctxT(t), sliceSource([]vocab.Event{ev(1, "a"), ev(2, "b")})); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("two sessions: %v", err)
	}
	o, _ = otelchart.New(otelchart.Options{From: otelchart.Cursor{Session: "a", Seq: 1}})
	if err := o.Observe(ctxT(t), sliceSource([]vocab.Event{ev(1, "b"), ev(2, "b")})); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("a cursor of another session: %v", err)
	}
}
