package openai_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// session runs one agentsvc session on the provider over a fixture
// sequence, with a fake clock that a driver moves to whatever timer is
// armed next (a retry's wait), so nothing waits in real time.
type session struct {
	srv *wiretest.Server
	svc *agentsvc.Service
	log *eventlog.Memory
	clk *clock.Fake
}

func newSession(t *testing.T, files ...string) *session {
	t.Helper()
	type echoArgs struct {
		Text string `json:"text"`
	}
	echo := tools.MustTypedText(vocab.ToolSpec{Name: "echo", Description: "Echo the text.", NoAccess: true},
		func(_ context.Context, a echoArgs) (string, error) { return "echo: " + a.Text, nil })
	return newSessionOn(t, "openai", []vocab.Tool{echo}, files...)
}

// sessionStart is when every session's fake clock starts.
var sessionStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newSessionOn is newSession on a row of the server table, with tools.
func newSessionOn(t *testing.T, server string, ts []vocab.Tool, files ...string) *session {
	t.Helper()
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = fixture(f)
	}
	s := &session{srv: wiretest.Serve(t, paths...), log: eventlog.NewMemory(), clk: clock.NewFake(sessionStart)}
	svc, err := agentsvc.New(agentsvc.Options{
		Provider: newProvider(t, s.srv.URL, server), Model: "gpt-4o-mini", Tools: ts,
		Clock: s.clk, IDs: &vocab.SeqSource{}, Sink: s.log, Jitter: func() float64 { return 0 },
		// Only the retry timer may sit on the clock.
		NoStreamWatchdog: true, NoRunTimeout: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.svc = svc
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// prompt submits text and waits for its result, moving the fake clock to
// each timer the session arms meanwhile.
func (s *session) prompt(t *testing.T, text string) vocab.PromptResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drive, stop := context.WithCancel(ctx)
	driven := make(chan struct{})
	go func() {
		defer close(driven)
		for s.clk.WaitForPending(drive, 1) == nil {
			s.clk.AdvanceToNext()
		}
	}()
	defer func() { stop(); <-driven }()
	p, err := s.svc.SubmitText(text)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestScenarioToolRound: a tool call, its result sent back, an answer.
func TestScenarioToolRound(t *testing.T) {
	s := newSession(t, "agent_echo_call.sse", "plain.sse")
	res := s.prompt(t, "echo hi")
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("result %s", res)
	}
	reqs := s.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var body struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct{ Name string }
		} `json:"tools"`
	}
	if err := json.Unmarshal(reqs[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	m := body.Messages
	if len(m) != 3 || m[0].Role != "user" || m[1].Role != "assistant" || m[2].Role != "tool" {
		t.Fatalf("messages %+v", m)
	}
	if len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].Function.Name != "echo" || m[1].ToolCalls[0].Function.Arguments != `{"text": "hi"}` {
		t.Errorf("assistant %+v", m[1])
	}
	if m[2].ToolCallID != m[1].ToolCalls[0].ID || m[2].Content != "echo: hi" {
		t.Errorf("tool message %+v (call id %s)", m[2], m[1].ToolCalls[0].ID)
	}
	if len(body.Tools) != 1 || body.Tools[0].Function.Name != "echo" {
		t.Errorf("tools %+v", body.Tools)
	}
	h, err := s.svc.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msgs := h.Messages()
	if last := msgs[len(msgs)-1]; last.Text() != "Hello world" {
		t.Errorf("last message %+v", last)
	}
}

// TestScenarioRetry: a 429 with Retry-After is retried after what the
// server asked for (on the fake clock), then answered.
func TestScenarioRetry(t *testing.T) {
	s := newSession(t, "rate_limit_429.sse", "plain.sse")
	res := s.prompt(t, "hello")
	if res.Kind != vocab.PromptCompleted || res.Steps != 1 {
		t.Fatalf("result %s", res)
	}
	var retries []vocab.RetryPayload
	for _, ev := range s.log.Events() {
		if p, ok := ev.Payload.(vocab.RetryPayload); ok {
			retries = append(retries, p)
		}
	}
	if len(retries) != 1 || retries[0].Code != vocab.CodeRateLimited || retries[0].Delay != 2*time.Second {
		t.Errorf("retries %+v", retries)
	}
	if n := len(s.srv.Requests()); n != 2 {
		t.Errorf("%d requests", n)
	}
}

// TestScenarioAuthFails: a 401 is not retried; the prompt fails with
// llm.auth.
func TestScenarioAuthFails(t *testing.T) {
	s := newSession(t, "auth_401.sse")
	res := s.prompt(t, "hello")
	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeAuth {
		t.Fatalf("result %s", res)
	}
	if n := len(s.srv.Requests()); n != 1 {
		t.Errorf("%d requests", n)
	}
	checkNoLeak(t, nil, res.Err)
}
