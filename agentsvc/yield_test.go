package agentsvc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// yieldProvider is a parent that spawns one child per word of "spawn W…
// yield", then yields; a prompt "yield alone" yields with no child. A
// turn resumed by a delivery or a steer answers with what it heard.
func yieldProvider() replies {
	return func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		m := last(req)
		first := firstUser(req).Text()
		switch {
		case m.Role == vocab.RoleUser && m.Text() == "yield alone":
			return "", []vocab.ToolCall{call("y0", agentsvc.ToolYield, map[string]string{})}, nil
		case m.Role == vocab.RoleUser && strings.HasPrefix(m.Text(), "spawn"):
			var calls []vocab.ToolCall
			for i, w := range strings.Fields(m.Text())[1:] {
				if w != "yield" {
					calls = append(calls, call("spawn_"+string(rune('a'+i)), agentsvc.ToolSpawn, map[string]string{"task": w}))
				}
			}
			return "", calls, nil
		case m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolSpawn && strings.HasSuffix(first, "yield"):
			return "", []vocab.ToolCall{call("y1", agentsvc.ToolYield, nil)}, nil
		case m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolYield && m.Result.IsError:
			return "could not yield: " + m.Result.Content, nil, nil
		case m.Role == vocab.RoleUser:
			return "resumed by: " + m.Text(), nil, nil
		}
		return "done", nil, nil
	}
}

func newYieldHost(t *testing.T, st agentsvc.Store, started chan<- vocab.ID, gate <-chan struct{}) *agentsvc.Host {
	t.Helper()
	o := agentsvc.HostOptions{Store: st}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: yieldProvider(), NoRunTimeout: true}, nil
		}
		return agentsvc.Options{Provider: childProvider(started, info.ID, gate), NoRunTimeout: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// untilYield follows svc's events from from until a prompt/yield event of
// state, and returns its sequence number.
func untilYield(ctx context.Context, t *testing.T, svc *agentsvc.Service, from uint64, state string) uint64 {
	t.Helper()
	for ev, err := range svc.Events(ctx, from) {
		if err != nil {
			t.Fatalf("waiting for prompt/yield %s: %v", state, err)
		}
		if p, ok := ev.Payload.(vocab.PromptPayload); ok && ev.Kind == vocab.EventYield && p.State == state {
			return ev.Seq
		}
	}
	t.Fatalf("the events ended before a prompt/yield %s", state)
	return 0
}

// yielded submits text to parent and returns the prompt once the parent
// yielded it: the prompt has no result, the status reads yielded.
func yielded(ctx context.Context, t *testing.T, parent *agentsvc.Service, text string) (*agentsvc.Prompt, uint64) {
	t.Helper()
	p, err := parent.SubmitText(text)
	if err != nil {
		t.Fatal(err)
	}
	seq := untilYield(ctx, t, parent, 0, vocab.YieldYielded)
	if err := parent.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		res, _ := p.Wait(ctx)
		t.Fatalf("the yielded prompt ended: %s", res)
	default:
	}
	snap, err := parent.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != "yielded" || snap.Turn != "" {
		t.Fatalf("status %q turn %q while yielded, want status yielded and no turn", snap.Status, snap.Turn)
	}
	return p, seq
}

func wait(ctx context.Context, t *testing.T, p *agentsvc.Prompt) vocab.PromptResult {
	t.Helper()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A parent spawns a child and yields: its prompt stays open until the
// child's delivery resumes the conversation in a new turn, which ends it.
func TestYieldResumedByAChildDelivery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := memory.New()
	gate := make(chan struct{})
	h := newYieldHost(t, st, nil, gate)
	parent, err := h.Open(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := yielded(ctx, t, parent, "spawn alpha yield")
	close(gate) // the child answers only now
	res := wait(ctx, t, p)
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %s", res)
	}
	msgs := transcriptOf(t, parent)
	final := msgs[len(msgs)-1].Text()
	if !strings.HasPrefix(final, "resumed by: [subagent completed] py/sub-") || !strings.Contains(final, "answer(alpha)") {
		t.Fatalf("final answer %q, want it resumed by the child's delivery", final)
	}
	var ends []vocab.EndKind
	for ev, err := range parent.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := ev.Payload.(vocab.TurnEndPayload); ok {
			ends = append(ends, p.Reason.Kind)
		}
		if p, ok := ev.Payload.(vocab.PromptPayload); ok && ev.Kind == vocab.EventPrompt && p.State == string(vocab.PromptCompleted) {
			break
		}
	}
	if len(ends) != 2 || ends[0] != vocab.EndYielded || ends[1] != vocab.EndCompleted {
		t.Fatalf("turn ends %v, want [yielded completed]", ends)
	}
	if _, err := store.Verify(ctx, st, "py"); err != nil {
		t.Fatalf("log verify: %v", err)
	}
}

// A steer resumes a yielded prompt while the child still runs.
func TestYieldResumedByASteer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan vocab.ID, 1)
	h := newYieldHost(t, memory.New(), started, nil)
	parent, err := h.Open(ctx, "ps")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := yielded(ctx, t, parent, "spawn block yield")
	<-started
	if _, err := parent.Steer(vocab.UserText("answer now")); err != nil {
		t.Fatal(err)
	}
	if res := wait(ctx, t, p); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %s", res)
	}
	msgs := transcriptOf(t, parent)
	if final := msgs[len(msgs)-1].Text(); final != "resumed by: answer now" {
		t.Fatalf("final answer %q", final)
	}
}

// Yielding with no running child is an error result; the turn goes on.
func TestYieldWithNoRunningChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := newYieldHost(t, memory.New(), nil, nil)
	parent, err := h.Open(ctx, "pn")
	if err != nil {
		t.Fatal(err)
	}
	res := runPrompt(t, parent, "yield alone")
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("prompt %s, want completed in two steps", res)
	}
	msgs := transcriptOf(t, parent)
	var result *vocab.ToolResult
	for _, m := range msgs {
		if m.Result != nil && m.Result.Name == agentsvc.ToolYield {
			result = m.Result
		}
	}
	if result == nil || !result.IsError || result.Yield || !strings.Contains(result.Content, "no sub-agent is running") {
		t.Fatalf("sessions_yield result %+v, want an error result naming the reason", result)
	}
	if final := msgs[len(msgs)-1].Text(); !strings.HasPrefix(final, "could not yield") {
		t.Fatalf("final answer %q", final)
	}
}

// A cancel while yielded ends the prompt cancelled, and cancels the
// child with cause parent.
func TestYieldCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan vocab.ID, 1)
	h := newYieldHost(t, memory.New(), started, nil)
	parent, err := h.Open(ctx, "pc")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := yielded(ctx, t, parent, "spawn block yield")
	child := <-started
	if err := parent.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	res := wait(ctx, t, p)
	if res.Kind != vocab.PromptCancelled || res.Reason == nil || res.Reason.Kind != vocab.CancelUser {
		t.Fatalf("prompt %s, want cancelled{user}", res)
	}
	csvc, err := h.Open(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range csvc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := ev.Payload.(vocab.TurnEndPayload); ok {
			if p.Reason.Kind != vocab.EndAborted || p.Reason.Cause == nil || p.Reason.Cause.Kind != vocab.CancelParent {
				t.Fatalf("the child's turn ended %s, want aborted{parent}", p.Reason)
			}
			break
		}
	}
}

// Closing the host while a parent is yielded ends its prompt cancelled.
func TestYieldClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan vocab.ID, 1)
	h := newYieldHost(t, memory.New(), started, nil)
	parent, err := h.Open(ctx, "pk")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := yielded(ctx, t, parent, "spawn block yield")
	<-started
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res := wait(ctx, t, p); res.Kind != vocab.PromptCancelled {
		t.Fatalf("prompt %s, want cancelled", res)
	}
}

// A parent that was yielded when its process died is yielded again when
// another host reopens it from its log; the child's recovered end (its
// task cut off by the crash) resumes the prompt, which then completes.
// The log verifies.
func TestYieldSurvivesAReopen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := memory.New()
	started := make(chan vocab.ID, 1)
	h1 := newYieldHost(t, st, started, nil)
	p1, err := h1.Open(ctx, "pr")
	if err != nil {
		t.Fatal(err)
	}
	prompt, mark := yielded(ctx, t, p1, "spawn block yield")
	<-started
	_ = prompt // h1 "crashed": its waiter is gone with it
	h2 := newYieldHost(t, st, nil, nil)
	p2, err := h2.Open(ctx, "pr")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for ev, err := range p2.Events(ctx, mark) {
		if err != nil {
			t.Fatal(err)
		}
		switch p := ev.Payload.(type) {
		case vocab.PromptPayload:
			order = append(order, string(ev.Kind)+":"+p.State)
		case vocab.Input:
			if ev.Kind == vocab.EventKind("input/open") || ev.Kind == vocab.EventKind("input/notify") {
				order = append(order, string(ev.Kind))
			}
		}
		if p, ok := ev.Payload.(vocab.PromptPayload); ok && ev.Kind == vocab.EventPrompt && p.State != "running" {
			break
		}
	}
	want := "prompt/yield:yielded input/open input/notify prompt/yield:resumed prompt/state:running prompt/state:completed"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("after the reopen:\n got %s\nwant %s", got, want)
	}
	msgs := transcriptOf(t, p2)
	if final := msgs[len(msgs)-1].Text(); !strings.HasPrefix(final, "resumed by: [subagent cancelled] pr/sub-") {
		t.Fatalf("final answer %q", final)
	}
	if err := p2.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Verify(ctx, st, "pr"); err != nil {
		t.Fatalf("log verify: %v", err)
	}
}
