package temporal_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// echoProvider answers from the request alone, so a request repeated on
// another worker gets the same answer: a user message asks for the echo
// tool once per word "tool" in it; once the tools answered, it replies
// with their results.
type echoProvider struct{}

func (echoProvider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == vocab.RoleUser && strings.Contains(last.Text(), "fail") {
			yield(vocab.StreamPart{}, vocab.Errorf(vocab.CodeAuth, "bad key"))
			return
		}
		if last.Role == vocab.RoleUser && strings.Contains(last.Text(), "flaky") && req.Attempt <= 1 {
			yield(vocab.StreamPart{}, vocab.StatusError(503, 5*time.Second, "overloaded"))
			return
		}
		if last.Role == vocab.RoleUser {
			n := strings.Count(last.Text(), "tool")
			if n > 0 {
				for i := range n {
					args, _ := json.Marshal(map[string]string{"text": last.Text()})
					if !yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &vocab.ToolCall{ID: "call_" + string(rune('a'+i)), Name: "echo", Args: args}}, nil) {
						return
					}
				}
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
				return
			}
		}
		var b strings.Builder
		b.WriteString("done:")
		for _, m := range req.Messages {
			if m.Role == vocab.RoleTool {
				b.WriteString(" " + m.Text())
			}
		}
		if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: b.String()}, nil) {
			return
		}
		yield(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 10, OutputTokens: 3}}, nil)
		yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
	}
}

type echoTool struct{}

func (echoTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "echo", NoAccess: true, Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
}

func (echoTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct{ Text string }
	_ = json.Unmarshal(call.Args, &a)
	return vocab.ToolResult{Content: "echo(" + a.Text + ")"}, nil
}

func newEnv(t *testing.T, acts *lt.Activities) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	if err := lt.Register(env, acts); err != nil {
		t.Fatal(err)
	}
	return env
}

func activities(t *testing.T) *lt.Activities {
	t.Helper()
	reg, err := tools.NewRegistry(echoTool{})
	if err != nil {
		t.Fatal(err)
	}
	return &lt.Activities{Provider: echoProvider{}, Tools: reg, Content: lt.NewMemoryContent()}
}

func params(t *testing.T, id vocab.ID) lt.Params {
	t.Helper()
	cfg := session.Config{Session: id, Tools: []vocab.ToolSpec{echoTool{}.Spec()}}
	raw, err := session.ConfigJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lt.Params{Config: raw}
}

func userMsg(id vocab.ID, text string) vocab.Message {
	return vocab.Message{ID: id, Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: text}}}
}

// update sends an update and returns its outcome through the callbacks.
type outcome struct {
	ack      lt.Ack
	err      error
	rejected error
	done     bool
}

func update(env *testsuite.TestWorkflowEnvironment, name, id string, arg any) *outcome {
	o := &outcome{}
	env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnReject: func(err error) { o.rejected, o.done = err, true },
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			o.done, o.err = true, err
			if a, ok := v.(lt.Ack); ok {
				o.ack = a
			}
		},
	}, arg)
	return o
}

func queryPrompt(t *testing.T, env *testsuite.TestWorkflowEnvironment, id vocab.ID) lt.PromptState {
	t.Helper()
	v, err := env.QueryWorkflow(lt.QueryPrompt, id)
	if err != nil {
		t.Fatalf("prompt query: %v", err)
	}
	var ps lt.PromptState
	if err := v.Get(&ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestTwoToolRounds(t *testing.T) {
	env := newEnv(t, activities(t))
	var first, second *outcome
	var p1, p2 lt.PromptState
	env.RegisterDelayedCallback(func() { first = update(env, lt.UpdateSubmit, "p1", userMsg("p1", "use a tool please")) }, time.Second)
	env.RegisterDelayedCallback(func() { p1 = queryPrompt(t, env, "p1") }, 2*time.Second)
	env.RegisterDelayedCallback(func() { second = update(env, lt.UpdateSubmit, "p2", userMsg("p2", "tool and tool")) }, 3*time.Second)
	env.RegisterDelayedCallback(func() { p2 = queryPrompt(t, env, "p2") }, 4*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose}) }, 5*time.Second)
	env.ExecuteWorkflow(lt.WorkflowName, params(t, "s1"))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*outcome{first, second} {
		if o == nil || !o.done || o.err != nil || o.rejected != nil || o.ack.Seq == 0 {
			t.Fatalf("update: %+v", o)
		}
	}
	if !p1.Ended || p1.Result.Kind != vocab.PromptCompleted || p1.Result.Steps != 2 {
		t.Errorf("p1 = %+v", p1.Result)
	}
	if !p2.Ended || p2.Result.Kind != vocab.PromptCompleted || p2.Result.Steps != 2 {
		t.Errorf("p2 = %+v", p2.Result)
	}
	var sum lt.Summary
	if err := env.GetWorkflowResult(&sum); err != nil {
		t.Fatal(err)
	}
	if sum.Session != "s1" || sum.Runs != 1 {
		t.Errorf("summary %+v", sum)
	}
	v, err := env.QueryWorkflow(lt.QueryHistory, 0)
	if err != nil {
		t.Fatal(err)
	}
	var h lt.HistoryPage
	if err := v.Get(&h); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range h.Messages {
		texts = append(texts, string(m.Role)+":"+m.Text())
	}
	want := []string{
		"user:use a tool please", "assistant:", "tool:echo(use a tool please)", "assistant:done: echo(use a tool please)",
		"user:tool and tool", "assistant:", "tool:echo(tool and tool)", "tool:echo(tool and tool)",
		"assistant:done: echo(use a tool please) echo(tool and tool) echo(tool and tool)",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("history:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidatorRejects(t *testing.T) {
	env := newEnv(t, activities(t))
	var dup, empty *outcome
	env.RegisterDelayedCallback(func() { update(env, lt.UpdateSubmit, "p1", userMsg("p1", "hello")) }, time.Second)
	env.RegisterDelayedCallback(func() { dup = update(env, lt.UpdateSubmit, "p1b", userMsg("p1", "hello again")) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { empty = update(env, lt.UpdateWithdraw, "w1", lt.Withdrawal{ID: "w1", Target: "nothing"}) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose}) }, 3*time.Second)
	env.ExecuteWorkflow(lt.WorkflowName, params(t, "s2"))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if dup == nil || dup.rejected == nil || !strings.Contains(dup.rejected.Error(), string(vocab.CodeDuplicateID)) {
		t.Errorf("duplicate id: %+v", dup)
	}
	if empty == nil || empty.rejected == nil || !strings.Contains(empty.rejected.Error(), string(vocab.CodeNotQueued)) {
		t.Errorf("withdraw of nothing: %+v", empty)
	}
}

func TestProviderErrorIsTheCores(t *testing.T) {
	env := newEnv(t, activities(t))
	var ps lt.PromptState
	env.RegisterDelayedCallback(func() { update(env, lt.UpdateSubmit, "p1", userMsg("p1", "please fail")) }, time.Second)
	env.RegisterDelayedCallback(func() { ps = queryPrompt(t, env, "p1") }, 2*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose}) }, 3*time.Second)
	env.ExecuteWorkflow(lt.WorkflowName, params(t, "s3"))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if ps.Result == nil || ps.Result.Kind != vocab.PromptFailed || ps.Result.Err == nil || ps.Result.Err.Code != vocab.CodeAuth {
		t.Fatalf("prompt = %+v", ps.Result)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []lt.Options{{ModelTimeout: -1}, {EventWindow: -1}, {ContinueAfter: -5}, {HeartbeatTimeout: -time.Second}} {
		if err := o.Validate(); !errors.Is(err, vocab.CodeBadInput.Err()) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (lt.Options{}).Validate(); err != nil {
		t.Error(err)
	}
}
