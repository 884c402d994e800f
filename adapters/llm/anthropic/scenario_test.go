package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// echoTool answers "echo: TEXT".
func echoTool() vocab.Tool {
	type args struct {
		Text string `json:"text"`
	}
	return tools.Func("echo", "Echo the text back.", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		func(_ context.Context, a args) (string, error) { return "echo: " + a.Text, nil })
}

// session is one agentsvc session on the adapter, over a fixture server,
// on a virtual clock that a goroutine moves to each waiter as it is armed
// (the retry waits), so nothing waits in real time.
type session struct {
	svc *agentsvc.Service
	srv *wiretest.Server
	clk *clock.Fake
	log *eventlog.Memory
}

func newSession(t *testing.T, files ...string) *session {
	t.Helper()
	return newSessionWith(t, []vocab.Tool{echoTool()}, files...)
}

// newSessionWith is newSession with tools ts.
func newSessionWith(t *testing.T, ts []vocab.Tool, files ...string) *session {
	t.Helper()
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = fixture(f)
	}
	s := &session{srv: wiretest.Serve(t, paths...), clk: clock.NewFake(epoch), log: eventlog.NewMemory()}
	p := newProvider(t, s.srv.URL)
	svc, err := agentsvc.New(agentsvc.Options{
		Provider: p, Model: testModel, Tools: ts,
		Clock: s.clk, IDs: &vocab.SeqSource{}, Sink: s.log, Jitter: func() float64 { return 0 },
		NoStreamWatchdog: true, NoRunTimeout: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for s.clk.WaitForDue(ctx, time.Hour) == nil {
			s.clk.AdvanceToNextWithin(time.Hour)
		}
	}()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := svc.Close(cctx); err != nil {
			t.Errorf("close: %v", err)
		}
		cancel()
		<-moved
	})
	return s
}

// prompt submits text and waits for its result.
func (s *session) prompt(t *testing.T, text string) vocab.PromptResult {
	t.Helper()
	p, err := s.svc.SubmitText(text)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// body decodes the n-th request's body.
func (s *session) body(t *testing.T, n int) map[string]any {
	t.Helper()
	reqs := s.srv.Requests()
	if n >= len(reqs) {
		t.Fatalf("only %d requests", len(reqs))
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[n].Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestScenarioToolRound: the model calls echo, gets its result, answers.
func TestScenarioToolRound(t *testing.T) {
	s := newSession(t, "tool_use.sse", "text.sse")
	res := s.prompt(t, "say ping")
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("result %s, want completed{steps=2}", res)
	}
	second := string(s.srv.Requests()[1].Body)
	for _, want := range []string{
		`"type":"tool_use"`, `"id":"toolu_01A09q90qw90lq917835lq9"`, `"input":{"text":"ping"}`,
		`"type":"tool_result"`, `"tool_use_id":"toolu_01A09q90qw90lq917835lq9"`, `"text":"echo: ping"`,
	} {
		if !strings.Contains(second, want) {
			t.Errorf("second request lacks %s:\n%s", want, second)
		}
	}
	msgs := s.body(t, 1)["messages"].([]any)
	if len(msgs) != 3 {
		t.Errorf("second request has %d messages, want user, assistant, user:\n%s", len(msgs), second)
	}
	h, err := s.svc.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all := h.Messages()
	if last := all[len(all)-1]; last.Role != vocab.RoleAssistant || last.Text() != "Hello, world!" {
		t.Errorf("last message %+v", last)
	}
}

// TestScenarioRetryOverloaded: a 529 is retried (the wait is on the
// virtual clock) and the second attempt answers.
func TestScenarioRetryOverloaded(t *testing.T) {
	s := newSession(t, "overloaded_529.sse", "text.sse")
	res := s.prompt(t, "hi")
	if res.Kind != vocab.PromptCompleted || res.Steps != 1 {
		t.Fatalf("result %s, want completed{steps=1}", res)
	}
	if n := len(s.srv.Requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if !s.clk.Now().After(epoch) {
		t.Errorf("the retry did not wait on the clock")
	}
}

// TestScenarioRetryMidStream: an overloaded error event mid-stream is
// retried too.
func TestScenarioRetryMidStream(t *testing.T) {
	s := newSession(t, "error_midstream.sse", "text.sse")
	res := s.prompt(t, "hi")
	if res.Kind != vocab.PromptCompleted || res.Steps != 1 {
		t.Fatalf("result %s, want completed{steps=1}", res)
	}
	if n := len(s.srv.Requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestScenarioAuthFails: a 401 is not retried; the prompt fails llm.auth.
func TestScenarioAuthFails(t *testing.T) {
	s := newSession(t, "auth_401.sse")
	res := s.prompt(t, "hi")
	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeAuth || res.Err.Retryable {
		t.Fatalf("result %s, want failed with llm.auth", res)
	}
	if strings.Contains(res.String(), testKey) {
		t.Errorf("result shows the key: %s", res)
	}
	if n := len(s.srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestScenarioRefusal: a refusal fails the prompt llm.refusal.
func TestScenarioRefusal(t *testing.T) {
	s := newSession(t, "refusal.sse")
	res := s.prompt(t, "hi")
	if res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeRefusal {
		t.Fatalf("result %s, want failed with llm.refusal", res)
	}
}

// TestScenarioPauseTurn: pause_turn takes another step of the same turn,
// which sends the paused reply back.
func TestScenarioPauseTurn(t *testing.T) {
	s := newSession(t, "pause_turn.sse", "text.sse")
	res := s.prompt(t, "search the web")
	if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("result %s, want completed{steps=2}", res)
	}
	msgs := s.body(t, 1)["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if last["role"] != "assistant" || !strings.Contains(string(s.srv.Requests()[1].Body), `"text":"Searching"`) {
		t.Errorf("second request does not end with the paused reply: %s", s.srv.Requests()[1].Body)
	}
}
