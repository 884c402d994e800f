package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/vocab"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func mustParse(t *testing.T, src string) *scripted.Script {
	t.Helper()
	s, err := scripted.Parse([]byte(src), "test.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// request makes a request with one user message and the named tools.
func request(user string, tools ...string) vocab.Request {
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText(user)}}
	for _, name := range tools {
		req.Tools = append(req.Tools, vocab.ToolSpec{Name: name})
	}
	return req
}

// collect ranges over seq, returning the parts before the first error and
// that error.
func collect(seq func(func(vocab.StreamPart, error) bool)) ([]vocab.StreamPart, error) {
	var parts []vocab.StreamPart
	for p, err := range seq {
		if err != nil {
			return parts, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// play streams one request while a helper goroutine advances clk to each
// deadline the stream sleeps on. It returns the parts, the virtual time the
// stream took and the error.
func play(t *testing.T, p *scripted.Provider, clk *clock.Fake, req vocab.Request) ([]vocab.StreamPart, time.Duration, error) {
	t.Helper()
	start := clk.Now()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for clk.WaitForPending(ctx, 1) == nil {
			clk.AdvanceToNext()
		}
	})
	parts, err := collect(p.Stream(t.Context(), req))
	stop()
	wg.Wait()
	return parts, clk.Now().Sub(start), err
}

func text(s string) vocab.StreamPart { return vocab.StreamPart{Kind: vocab.StreamText, Text: s} }
func thinking(s string) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamThinking, Text: s}
}
func finish(f vocab.FinishReason) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamFinish, Finish: f}
}
func usage(in, out int) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: in, OutputTokens: out}}
}
func toolCall(id, name, args string) vocab.StreamPart {
	c := &vocab.ToolCall{ID: id, Name: name}
	if args != "" {
		c.Args = json.RawMessage(args)
	}
	return vocab.StreamPart{Kind: vocab.StreamToolCall, Call: c}
}

// vocabError returns err as a *vocab.Error or fails.
func vocabError(t *testing.T, err error) *vocab.Error {
	t.Helper()
	var e *vocab.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *vocab.Error", err, err)
	}
	return e
}

func TestStreamParts(t *testing.T) {
	s := mustParse(t, `{"name": "parts", "steps": [
		{"parts": [{"thinking": "hmm"}, {"text": "Hello"}, {"text": " world", "delay": "200ms"}],
		 "usage": {"input": 12, "output": 5}, "finish": "stop"},
		{"delay": "1s", "parts": [{"text": "Reading."}],
		 "tool_calls": [{"id": "c1", "name": "read_file", "args": {"path" :  "a.txt"}},
		                {"id": "c2", "name": "list_files", "delay": "50ms"}]},
		{"parts": [{"thinking": "only thinking"}]},
		{"tool_calls": [{"id": "c3", "name": "x"}], "finish": "stop"}
	]}`)
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)
	tests := []struct {
		want    []vocab.StreamPart
		elapsed time.Duration
	}{
		{[]vocab.StreamPart{thinking("hmm"), text("Hello"), text(" world"), usage(12, 5), finish(vocab.FinishStop)}, 200 * time.Millisecond},
		{[]vocab.StreamPart{text("Reading."), toolCall("c1", "read_file", `{"path":"a.txt"}`), toolCall("c2", "list_files", ""), finish(vocab.FinishToolCalls)}, 1050 * time.Millisecond},
		{[]vocab.StreamPart{thinking("only thinking"), finish(vocab.FinishStop)}, 0},
		{[]vocab.StreamPart{toolCall("c3", "x", ""), finish(vocab.FinishStop)}, 0},
	}
	for i, tt := range tests {
		if got := p.Remaining(); got != len(tests)-i {
			t.Errorf("step %d: Remaining = %d, want %d", i+1, got, len(tests)-i)
		}
		parts, elapsed, err := play(t, p, clk, request("hi"))
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		if diff := cmp.Diff(tt.want, parts); diff != "" {
			t.Errorf("step %d: parts (-want +got):\n%s", i+1, diff)
		}
		if elapsed != tt.elapsed {
			t.Errorf("step %d: took %v of virtual time, want %v", i+1, elapsed, tt.elapsed)
		}
	}
	if got := p.Remaining(); got != 0 {
		t.Errorf("Remaining = %d, want 0", got)
	}
}

func TestStreamErrors(t *testing.T) {
	s := mustParse(t, `{"name": "errs", "steps": [
		{"error": {"status": 503, "message": "overloaded", "retry_after": "2s"}},
		{"error": {"status": 429}},
		{"error": {"status": 400, "message": "bad request"}},
		{"error": {"code": "llm.syntax", "message": "bad json"}},
		{"error": {"code": "llm.transport", "message": "reset", "retryable": true, "retry_after": "500ms"}},
		{"delay": "3s", "error": {"status": 408, "message": "slow"}}
	]}`)
	tests := []struct {
		want    vocab.Error
		text    string
		elapsed time.Duration
	}{
		{vocab.Error{Code: vocab.CodeServer, Message: "overloaded", Retryable: true, RetryAfter: 2 * time.Second, Status: 503}, "llm.server: overloaded", 0},
		{vocab.Error{Code: vocab.CodeRateLimited, Message: "status 429", Retryable: true, Status: 429}, "llm.rate_limited: status 429", 0},
		{vocab.Error{Code: vocab.CodeRequestRejected, Message: "bad request", Status: 400}, "llm.request_rejected: bad request", 0},
		{vocab.Error{Code: vocab.CodeSyntax, Message: "bad json"}, "llm.syntax: bad json", 0},
		{vocab.Error{Code: vocab.CodeTransport, Message: "reset", Retryable: true, RetryAfter: 500 * time.Millisecond}, "llm.transport: reset", 0},
		{vocab.Error{Code: vocab.CodeTimeout, Message: "slow", Retryable: true, Status: 408}, "llm.timeout: slow", 3 * time.Second},
	}
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)
	for i, tt := range tests {
		parts, elapsed, err := play(t, p, clk, request("hi"))
		if len(parts) != 0 {
			t.Errorf("step %d: got parts %v before the error", i+1, parts)
		}
		e := vocabError(t, err)
		if diff := cmp.Diff(tt.want, *e); diff != "" {
			t.Errorf("step %d: error (-want +got):\n%s", i+1, diff)
		}
		if err.Error() != tt.text {
			t.Errorf("step %d: Error() = %q, want %q", i+1, err.Error(), tt.text)
		}
		if elapsed != tt.elapsed {
			t.Errorf("step %d: took %v, want %v", i+1, elapsed, tt.elapsed)
		}
	}
}

func TestStreamEmpty(t *testing.T) {
	s := mustParse(t, `{"steps": [
		{"empty": true},
		{"empty": true, "usage": {"input": 3}, "finish": "filtered"}
	]}`)
	p := scripted.New(s, clock.NewFake(t0))
	for i, want := range [][]vocab.StreamPart{
		{finish(vocab.FinishStop)},
		{usage(3, 0), finish(vocab.FinishFiltered)},
	} {
		got, err := collect(p.Stream(t.Context(), request("hi")))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i+1, diff)
		}
	}
}

func TestStreamErrorAfter(t *testing.T) {
	s := mustParse(t, `{"steps": [
		{"parts": [{"text": "partial"}], "tool_calls": [{"id": "c1", "name": "x"}], "error_after": {"status": 500}}
	]}`)
	p := scripted.New(s, clock.NewFake(t0))
	got, err := collect(p.Stream(t.Context(), request("hi")))
	want := []vocab.StreamPart{text("partial"), toolCall("c1", "x", "")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	e := vocabError(t, err)
	if e.Code != vocab.CodeServer || !e.Retryable || e.Status != 500 || e.Error() != "llm.server: status 500" {
		t.Errorf("err = %+v", e)
	}
}

// TestStreamEndsAfterError checks that nothing follows an error.
func TestStreamEndsAfterError(t *testing.T) {
	s := mustParse(t, `{"steps": [{"parts": [{"text": "a"}], "error_after": {"code": "llm.filtered"}}]}`)
	p := scripted.New(s, nil)
	n := 0
	for _, err := range p.Stream(t.Context(), request("hi")) {
		n++
		if err != nil && n != 2 {
			t.Errorf("error at item %d", n)
		}
	}
	if n != 2 {
		t.Errorf("got %d items, want 2", n)
	}
}

func TestStreamCancelDuringDelay(t *testing.T) {
	s := mustParse(t, `{"name": "slow", "steps": [
		{"parts": [{"text": "first"}, {"text": "never", "delay": "10s"}], "finish": "stop"},
		{"parts": [{"text": "next"}]}
	]}`)
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)
	ctx, cancel := context.WithCancelCause(t.Context())
	type result struct {
		parts []vocab.StreamPart
		err   error
	}
	done := make(chan result, 1)
	go func() {
		parts, err := collect(p.Stream(ctx, request("hi")))
		done <- result{parts, err}
	}()
	// Wait until the stream sleeps on the 10s delay, then cancel.
	if err := clk.WaitForPending(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cause := vocab.CancelCause{Kind: vocab.CancelUser}
	cancel(cause)
	r := <-done

	if diff := cmp.Diff([]vocab.StreamPart{text("first")}, r.parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	e := vocabError(t, r.err)
	if e.Code != vocab.CodeCancelled || e.Retryable {
		t.Errorf("err = %+v, want non-retryable %s", e, vocab.CodeCancelled)
	}
	if want := "agent.cancelled: script slow: step 1: cancelled by user"; r.err.Error() != want {
		t.Errorf("Error() = %q, want %q", r.err.Error(), want)
	}
	if !errors.Is(r.err, vocab.CodeCancelled.Err()) {
		t.Error("errors.Is(err, CodeCancelled) = false")
	}
	var got vocab.CancelCause
	if !errors.As(r.err, &got) || got != cause {
		t.Errorf("errors.As cause = %v, want %v", got, cause)
	}
	if !clk.Now().Equal(t0) {
		t.Errorf("clock moved to %v", clk.Now())
	}
	if n := clk.Pending(); n != 0 {
		t.Errorf("Pending = %d after cancellation, want 0", n)
	}
	// The cancelled step stays consumed.
	parts, err := collect(p.Stream(t.Context(), request("again")))
	if err != nil || len(parts) != 2 || parts[0].Text != "next" {
		t.Errorf("next stream = %v, %v", parts, err)
	}
}

func TestStreamCancelledBeforeStart(t *testing.T) {
	s := mustParse(t, `{"name": "c", "steps": [{"parts": [{"text": "a"}]}, {"error": {"status": 500}}]}`)
	p := scripted.New(s, clock.NewFake(t0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 3 { // content, error and past-the-end alike
		parts, err := collect(p.Stream(ctx, request("hi")))
		if len(parts) != 0 {
			t.Errorf("call %d: parts %v", i+1, parts)
		}
		if !errors.Is(err, context.Canceled) || vocab.CodeOf(err) != vocab.CodeCancelled {
			t.Errorf("call %d: err = %v, want cancellation wrapping context.Canceled", i+1, err)
		}
	}
	if got := p.Remaining(); got != 0 {
		t.Errorf("Remaining = %d, want 0: cancelled calls consume their steps", got)
	}
}

func TestStreamConsumerStopsEarly(t *testing.T) {
	s := mustParse(t, `{"steps": [{"parts": [{"text": "a"}, {"text": "b", "delay": "1h"}]}, {"parts": [{"text": "c"}]}]}`)
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)
	for part, err := range p.Stream(t.Context(), request("hi")) {
		if err != nil || part.Text != "a" {
			t.Fatalf("first item = %v, %v", part, err)
		}
		break
	}
	if n := clk.Pending(); n != 0 {
		t.Errorf("Pending = %d after break, want 0", n)
	}
	parts, err := collect(p.Stream(t.Context(), request("hi")))
	if err != nil || parts[0].Text != "c" {
		t.Errorf("next stream = %v, %v", parts, err)
	}
}

func TestStreamPastTheEnd(t *testing.T) {
	s := mustParse(t, `{"name": "tiny", "steps": [{"empty": true}]}`)
	p := scripted.New(s, clock.NewFake(t0))
	if _, err := collect(p.Stream(t.Context(), request("1"))); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3} {
		parts, err := collect(p.Stream(t.Context(), request("more")))
		if len(parts) != 0 {
			t.Errorf("parts = %v", parts)
		}
		checkBadInput(t, err, fmt.Sprintf("input.bad: script tiny: no step %d left", n))
	}
	if got := p.Remaining(); got != 0 {
		t.Errorf("Remaining = %d", got)
	}
	if got := len(p.Calls()); got != 3 {
		t.Errorf("len(Calls) = %d, want 3", got)
	}
}

func TestStreamExpect(t *testing.T) {
	s := mustParse(t, `{"name": "exp", "steps": [
		{"empty": true, "expect": {"last_user_contains": "a.txt", "tools": ["read_file"]}},
		{"empty": true, "expect": {"last_user_contains": "b.txt"}},
		{"empty": true, "expect": {"tools": ["read_file", "word_count"]}},
		{"empty": true, "expect": {"last_user_contains": "x"}},
		{"empty": true, "expect": {"last_user_contains": "x"}}
	]}`)
	p := scripted.New(s, clock.NewFake(t0))

	// A match: the last user message counts, not the last message.
	req := request("summarise a.txt", "read_file", "list_files")
	req.Messages = append(req.Messages, vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok"}}})
	if _, err := collect(p.Stream(t.Context(), req)); err != nil {
		t.Fatalf("matching step: %v", err)
	}
	tests := []struct {
		req  vocab.Request
		want string
	}{
		{request("summarise a.txt"), `input.bad: script exp: step 2: expect: last user message "summarise a.txt" does not contain "b.txt"`},
		{request("hi", "read_file"), `input.bad: script exp: step 3: expect: tool "word_count" not offered (offered: ["read_file"])`},
		{vocab.Request{}, `input.bad: script exp: step 4: expect: no user message (want one containing "x")`},
		{request(strings.Repeat("ab", 50)), `input.bad: script exp: step 5: expect: last user message "` + strings.Repeat("ab", 40) + `…" does not contain "x"`},
	}
	for _, tt := range tests {
		parts, err := collect(p.Stream(t.Context(), tt.req))
		if len(parts) != 0 {
			t.Errorf("parts = %v", parts)
		}
		checkBadInput(t, err, tt.want)
	}
	if got := p.Remaining(); got != 0 {
		t.Errorf("Remaining = %d: failed expectations consume their steps", got)
	}
}

func TestCallsAreCopies(t *testing.T) {
	s := mustParse(t, `{"steps": [{"empty": true}, {"empty": true}]}`)
	p := scripted.New(s, nil)
	req := request("original", "read_file")
	req.Step, req.Attempt = 3, 2
	for range p.Stream(t.Context(), req) {
	}
	req.Messages[0].Parts[0].Text = "changed"
	req.Tools[0].Name = "changed"

	calls := p.Calls()
	want := []vocab.Request{request("original", "read_file")}
	want[0].Step, want[0].Attempt = 3, 2
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("Calls (-want +got):\n%s", diff)
	}
	calls[0].Messages[0].Parts[0].Text = "changed again"
	if got := p.Calls()[0].Messages[0].Text(); got != "original" {
		t.Errorf("Calls shares memory with the caller: %q", got)
	}
}

func TestToolCallArgsAreCopies(t *testing.T) {
	s := mustParse(t, `{"steps": [{"tool_calls": [{"id": "c1", "name": "x", "args": {"k": 1}}]}]}`)
	for range 2 {
		p := scripted.New(s, nil) // providers share the immutable script
		parts, err := collect(p.Stream(t.Context(), request("hi")))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(parts[0].Call.Args); got != `{"k":1}` {
			t.Fatalf("args = %s", got)
		}
		parts[0].Call.Args[2] = 'X'
	}
}

// TestConcurrentStreams consumes every step from many goroutines; each step
// is played exactly once.
func TestConcurrentStreams(t *testing.T) {
	const n = 40
	var steps []string
	for i := range n {
		steps = append(steps, fmt.Sprintf(`{"parts": [{"text": "%d", "delay": "%dms"}]}`, i, i%3))
	}
	s := mustParse(t, `{"steps": [`+joinComma(steps)+`]}`)
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)

	ctx, stop := context.WithCancel(t.Context())
	var adv sync.WaitGroup
	adv.Go(func() {
		for clk.WaitForPending(ctx, 1) == nil {
			clk.AdvanceToNext()
		}
	})
	var wg sync.WaitGroup
	seen := make(chan string, n)
	for range n {
		wg.Go(func() {
			parts, err := collect(p.Stream(t.Context(), request("hi")))
			if err != nil {
				t.Error(err)
				return
			}
			seen <- parts[0].Text
		})
	}
	wg.Wait()
	stop()
	adv.Wait()
	close(seen)
	got := map[string]bool{}
	for s := range seen {
		got[s] = true
	}
	if len(got) != n || p.Remaining() != 0 || len(p.Calls()) != n {
		t.Errorf("distinct steps %d, Remaining %d, calls %d; want %d, 0, %d", len(got), p.Remaining(), len(p.Calls()), n, n)
	}
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// TestDemoScript plays testdata/scripts/demo.json as the loop would.
func TestDemoScript(t *testing.T) {
	s, err := scripted.Load(scriptsDir + "demo.json")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	p := scripted.New(s, clk)
	req := request("Make notes.txt say that every transition is logged.", "edit_file", "grep", "list_dir", "read_file", "write_file")

	// Step 1: thinking, text, three tool calls.
	parts, took, err := play(t, p, clk, req)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []vocab.StreamPartKind
	var calls []string
	for _, part := range parts {
		kinds = append(kinds, part.Kind)
		if part.Call != nil {
			calls = append(calls, part.Call.Name+string(part.Call.Args))
		}
	}
	wantKinds := []vocab.StreamPartKind{"thinking", "thinking", "text", "text", "tool-call", "tool-call", "tool-call", "usage", "finish"}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("step 1 kinds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{`list_dir{"path":".","recursive":true}`, `read_file{"path":"notes.txt"}`,
		`edit_file{"path":"notes.txt","old":"every phase is a named state.","new":"every phase is a named state, and every transition is logged."}`}, calls); diff != "" {
		t.Errorf("step 1 calls (-want +got):\n%s", diff)
	}
	if parts[len(parts)-1].Finish != vocab.FinishToolCalls {
		t.Errorf("step 1 finish = %q", parts[len(parts)-1].Finish)
	}
	if took != 950*time.Millisecond {
		t.Errorf("step 1 took %v, want 950ms", took)
	}

	// Step 2: a retryable 503.
	_, _, err = play(t, p, clk, req)
	if e := vocabError(t, err); !e.Retryable || e.RetryAfter != time.Second || e.Status != 503 {
		t.Errorf("step 2 err = %+v, want retryable 503 after 1s", e)
	}

	// Step 3, the retry: grep.
	req.Attempt = 2
	parts, _, err = play(t, p, clk, req)
	if err != nil {
		t.Fatal(err)
	}
	if c := parts[1].Call; c == nil || c.Name != "grep" || parts[len(parts)-1].Finish != vocab.FinishToolCalls {
		t.Errorf("step 3 parts = %+v", parts)
	}

	// Step 4: the answer.
	parts, _, err = play(t, p, clk, req)
	if err != nil {
		t.Fatal(err)
	}
	answer := vocab.Message{Role: vocab.RoleAssistant}
	for _, part := range parts {
		if part.Kind == vocab.StreamText {
			answer.Parts = append(answer.Parts, vocab.Part{Kind: vocab.PartText, Text: part.Text})
		}
	}
	if answer.IsEmptyReply() || parts[len(parts)-1].Finish != vocab.FinishStop || parts[len(parts)-2].Usage == nil {
		t.Errorf("step 4 parts = %+v", parts)
	}
	if p.Remaining() != 0 {
		t.Errorf("Remaining = %d", p.Remaining())
	}
}
