package agentsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// writeTool records the arguments it ran with; its calls write "path" and
// wait for a person's approval.
type writeTool struct {
	mu   sync.Mutex
	args []string
}

func (w *writeTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "write", Approval: true, Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite}}}
}

func (w *writeTool) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.args = append(w.args, string(call.Args))
	return vocab.ToolResult{Content: "wrote " + string(call.Args)}, nil
}

func (w *writeTool) ran() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.args...)
}

// awaitApproval waits until svc has a call awaiting approval.
func awaitApproval(t *testing.T, ctx context.Context, svc *agentsvc.Service) agentsvc.PendingApproval {
	t.Helper()
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := ev.Payload.(vocab.ApprovalPayload); ok && p.State == vocab.ApprovalRequested {
			break
		}
	}
	ps, err := svc.Approvals(ctx)
	if err != nil || len(ps) != 1 {
		t.Fatalf("Approvals: %v %v, want one", ps, err)
	}
	return ps[0]
}

// An approval is durable: the process that asked dies, a second one
// reopens the session, the question is still pending there, and the
// answer given to it runs the call and goes on with the same turn.
func TestApprovalSurvivesReopen(t *testing.T) {
	ctx := ctx5(t)
	st := memory.New()
	w1, w2 := &writeTool{}, &writeTool{}
	first, err := openWith(t, st, "s1", `{"steps": [{"tool_calls": [{"id": "c1", "name": "write", "args": {"path": "a.txt"}}]}]}`, []vocab.Tool{w1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Submit(vocab.UserText("write a.txt")); err != nil {
		t.Fatal(err)
	}
	if p := awaitApproval(t, ctx, first); p.Call.ID != "c1" || p.Question != "Run write?" {
		t.Fatalf("pending approval %+v", p)
	}

	second, err := openWith(t, st, "s1", `{"steps": [{"parts": [{"text": "written"}]}]}`, []vocab.Tool{w2}, 0)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer second.Close(ctx)
	first.Close(ctx) // fenced out: it can no longer write
	ps, err := second.Approvals(ctx)
	if err != nil || len(ps) != 1 || ps[0].Call.ID != "c1" || string(ps[0].Call.Args) != `{"path":"a.txt"}` {
		t.Fatalf("after the reopen: approvals %+v %v, want c1 still pending", ps, err)
	}
	if err := second.Approve("c1", agentsvc.Approved()); err != nil {
		t.Fatal(err)
	}
	if err := second.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w2.ran(); len(got) != 1 || len(w1.ran()) != 0 {
		t.Errorf("the tool ran %v in the second process, %v in the first", got, w1.ran())
	}
	h, err := second.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := h.At(h.Len() - 1); last.Text() != "written" {
		t.Errorf("history ends with %q, want the turn to go on to the model's answer", last.Text())
	}
	var turns int
	for ev, err := range store.Events(ctx, st, "s1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == vocab.EventTurnStart {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("%d turns, want the one turn to go on across the reopen", turns)
	}
	if _, err := store.Verify(ctx, st, "s1"); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := second.Approve("c1", agentsvc.Approved()); !errors.Is(err, agentsvc.ErrNotAwaiting) {
		t.Errorf("a second answer: %v, want ErrNotAwaiting", err)
	}
}

// Deny and edit reach the model and the tool; bad decisions are refused.
func TestApproveDecisions(t *testing.T) {
	ctx := ctx5(t)
	w := &writeTool{}
	svc, err := openWith(t, memory.New(), "s1", `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "write", "args": {"path": "a"}}, {"id": "c2", "name": "write", "args": {"path": "b"}}]},
		{"parts": [{"text": "ok"}]}]}`, []vocab.Tool{w}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	p, err := svc.Submit(vocab.UserText("write both"))
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ps, _ := svc.Approvals(ctx); len(ps) == 2 {
			break
		}
		_ = ev
	}
	if err := svc.Approve("nope", agentsvc.Approved()); !errors.Is(err, agentsvc.ErrNotAwaiting) {
		t.Errorf("unknown call: %v", err)
	}
	if err := svc.Approve("c1", agentsvc.Decision{Kind: "maybe"}); !errors.Is(err, agentsvc.ErrBadInput) {
		t.Errorf("unknown decision: %v", err)
	}
	if err := svc.Approve("c1", agentsvc.Edited(json.RawMessage(`{"path":`))); !errors.Is(err, agentsvc.ErrBadInput) {
		t.Errorf("edit with bad JSON: %v", err)
	}
	if err := svc.Approve("c1", agentsvc.Denied("not a")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Approve("c2", agentsvc.Edited(json.RawMessage(`{"path":"c"}`))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.ran(); len(got) != 1 || got[0] != `{"path":"c"}` {
		t.Errorf("the tool ran with %v, want only the edited call", got)
	}
	h, _ := svc.History(ctx)
	var results []string
	for _, m := range h.Messages() {
		if m.Result != nil {
			results = append(results, m.Result.Content)
		}
	}
	if len(results) != 2 || !strings.Contains(results[0], "not a") || results[1] != `wrote {"path":"c"}` {
		t.Errorf("results %q", results)
	}
}

// OnBeforeTool may rewrite or deny a call, OnAfterTool rewrite its result.
func TestToolHooks(t *testing.T) {
	ctx := ctx5(t)
	w := &writeTool{}
	svc, err := openWith(t, memory.New(), "s1", `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "plain", "args": {"path": "a"}}, {"id": "c2", "name": "plain", "args": {"path": "secret"}}]},
		{"parts": [{"text": "ok"}]}]}`, []vocab.Tool{plainTool{w}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	svc.OnBeforeTool.Register("guard", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		if strings.Contains(string(c.Call.Args), "secret") {
			c.Deny, c.Reason = true, "secrets stay secret"
			return c, nil
		}
		c.Call.Args = json.RawMessage(`{"path":"a2"}`)
		return next(ctx, c)
	})
	svc.OnAfterTool.Register("tag", func(ctx context.Context, c *agentsvc.ToolResultContext, next hooks.Next[*agentsvc.ToolResultContext]) (*agentsvc.ToolResultContext, error) {
		c.Result.Content += " (checked)"
		return next(ctx, c)
	})
	p, err := svc.Submit(vocab.UserText("go"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.ran(); len(got) != 1 || got[0] != `{"path":"a2"}` {
		t.Errorf("the tool ran with %v, want the rewritten call only", got)
	}
	h, _ := svc.History(ctx)
	var results []string
	for _, m := range h.Messages() {
		if m.Result != nil {
			results = append(results, m.Result.Content)
		}
	}
	want := []string{`wrote {"path":"a2"} (checked)`, `Tool "plain" was denied by a before-hook: secrets stay secret (checked)`}
	if strings.Join(results, "|") != strings.Join(want, "|") {
		t.Errorf("results %q, want %q", results, want)
	}
}

// plainTool is writeTool without the approval.
type plainTool struct{ *writeTool }

func (p plainTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "plain", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite}}}
}

// A tool that detaches: the turn goes on with its acknowledgement, and its
// completion comes back later as a notification that wakes the agent.
func TestBackgroundTool(t *testing.T) {
	ctx := ctx5(t)
	release, acked := make(chan struct{}), make(chan bool, 1)
	bg := tools.MustTypedText(vocab.ToolSpec{Name: "build", NoAccess: true}, func(ctx context.Context, _ struct{}) (string, error) {
		acked <- tools.Detach(ctx, "build started")
		<-release
		return "build ok", nil
	})
	svc, err := openWith(t, memory.New(), "s1", `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "build", "args": {}}]},
		{"parts": [{"text": "started it"}]},
		{"parts": [{"text": "the build is done"}], "expect": {"last_user_contains": "[async tool completed] build (tool_call_id=c1)"}}]}`, []vocab.Tool{bg}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	p, err := svc.Submit(vocab.UserText("build it"))
	if err != nil {
		t.Fatal(err)
	}
	if !<-acked {
		t.Fatal("Detach refused")
	}
	res, err := p.Wait(ctx)
	if err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("the prompt ended %v %v while its tool still ran", res, err)
	}
	close(release)
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := ev.Payload.(vocab.MessagePayload); ok && ev.Kind == vocab.EventAssistant && m.Message.Text() == "the build is done" {
			break
		}
	}
	h, _ := svc.History(ctx)
	var results []string
	for _, m := range h.Messages() {
		if m.Result != nil {
			results = append(results, m.Result.Content)
		}
	}
	if len(results) != 1 || results[0] != "build started" {
		t.Errorf("tool results in history %q, want the acknowledgement only", results)
	}
}

// With a spill store, an output over the limit is stored whole; the model
// sees its head and a reference it pages through with read_output.
func TestSpillThroughTheService(t *testing.T) {
	ctx := ctx5(t)
	big := strings.Repeat("x", 60_000) + "END"
	dump := tools.MustTypedText(vocab.ToolSpec{Name: "dump", NoAccess: true}, func(context.Context, struct{}) (string, error) { return big, nil })
	s, err := scripted.Parse([]byte(`{"steps": [{"tool_calls": [{"id": "c1", "name": "dump", "args": {}}], "expect": {"tools": ["dump", "read_output"]}},
		{"parts": [{"text": "ok"}]}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	blobs := tools.MemoryBlobs()
	svc, err := agentsvc.New(agentsvc.Options{Provider: scripted.New(s, clock.Real()), Tools: []vocab.Tool{dump}, Spill: blobs})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	p, err := svc.SubmitText("dump it")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	h, _ := svc.History(ctx)
	var res *vocab.ToolResult
	for _, m := range h.Messages() {
		if m.Result != nil {
			res = m.Result
		}
	}
	if res == nil || res.Spill == nil || res.Spill.Chars != len(big) || len([]rune(res.Content)) >= len(big) {
		t.Fatalf("the result in history: %+v", res)
	}
	stored, err := blobs.Get(ctx, res.Spill.Ref)
	if err != nil || string(stored) != big {
		t.Fatalf("the spilled blob: %d bytes, %v", len(stored), err)
	}
	page, _ := tools.ReadOutput(blobs).Run(ctx, vocab.ToolCall{ID: "r", Name: "read_output",
		Args: json.RawMessage(`{"ref":"` + res.Spill.Ref + `","offset":59990}`)}, nil)
	if !strings.Contains(page.Content, "xxEND") {
		t.Errorf("read_output at the end gives %q", page.Content)
	}
}

// An OnBeforeTool listener that rewrites a call's arguments into bytes
// that are not JSON fails the hook chain: the tool does not run, the call
// gets an error result, and the prompt still ends.
func TestToolHookArgsThatAreNotJSON(t *testing.T) {
	ctx := ctx5(t)
	w := &writeTool{}
	svc, err := openWith(t, memory.New(), "s1", `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "plain", "args": {"path": "a"}}]},
		{"parts": [{"text": "ok"}]}]}`, []vocab.Tool{plainTool{w}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	svc.OnBeforeTool.Register("break", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		c.Call.Args = json.RawMessage(`{"path":`)
		return next(ctx, c)
	})
	p, err := svc.Submit(vocab.UserText("go"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt ended %s %v, want completed", res, err)
	}
	if got := w.ran(); len(got) != 0 {
		t.Errorf("the tool ran with %v, want not at all", got)
	}
	h, _ := svc.History(ctx)
	var results []*vocab.ToolResult
	for _, m := range h.Messages() {
		if m.Result != nil {
			results = append(results, m.Result)
		}
	}
	if len(results) != 1 || !results[0].IsError || !strings.Contains(results[0].Content, "invalid JSON") {
		t.Errorf("results %+v, want one error result naming the invalid JSON", results)
	}
}
