package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/vocab"
)

// fixtureServer answers the n-th request with the n-th recorded response
// (a raw HTTP response: status line, headers, blank line, body) and keeps
// the request bodies.
type fixtureServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	auth   []string
}

func serveFixtures(t *testing.T, files ...string) *fixtureServer {
	t.Helper()
	var resps [][]byte
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("testdata", "run", f))
		if err != nil {
			t.Fatal(err)
		}
		for bytes.HasPrefix(b, []byte("#")) {
			b = b[bytes.IndexByte(b, '\n')+1:]
		}
		resps = append(resps, b)
	}
	s := &fixtureServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.bodies)
		s.bodies = append(s.bodies, body)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if n >= len(resps) {
			http.Error(w, `{"error":{"message":"no more fixtures","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(resps[n])), r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fixtureServer) requests(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, b := range s.bodies {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("request body is not JSON: %v\n%s", err, b)
		}
		out = append(out, m)
	}
	return out
}

// A real agent over the OpenAI wire, against a local server replaying a
// conversation of two tool rounds: parallel list_dir and read_file, then
// edit_file, then the answer. The edit lands in the workspace, the
// timeline shows it, the log verifies.
func TestRunTwoToolRounds(t *testing.T) {
	srv := serveFixtures(t, "1-look.sse", "2-edit.sse", "3-done.sse")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("status: draft\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := tempDB(t)
	t.Setenv("OPENAI_API_KEY", "")
	code, out, errOut := runCmd(t, "run", "--provider", "openai", "--model", "test-model", "--base-url", srv.URL+"/v1",
		"--workspace", ws, "--db", db, "Make notes.txt say final.")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	got, err := os.ReadFile(filepath.Join(ws, "notes.txt"))
	if err != nil || string(got) != "status: final\n" {
		t.Fatalf("notes.txt = %q, %v; want the edit", got, err)
	}
	inOrder(t, out,
		"user: Make notes.txt say final.",
		"usage: 812 in, 41 out",
		"assistant: Let me look at the workspace.",
		"call call_list list_dir({})",
		`call call_read read_file({"path": "notes.txt"})`,
		"result call_list:",
		"result call_read:",
		"usage: 1020 in (768 from cache), 30 out",
		`call call_edit edit_file({"path":"notes.txt","old":"draft","new":"final"})`,
		"result call_edit:",
		"assistant: Done: notes.txt now says final.",
		"turn end: completed after 3 steps",
		"result: completed",
		"usage: 2932 tokens in (1792 from cache), 80 out")
	if !strings.Contains(errOut, "log: "+db) {
		t.Errorf("stderr does not name the log: %q", errOut)
	}

	reqs := srv.requests(t)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	// The second request carries both results, matched by call id; the
	// third carries the edit's.
	toolMsgs := func(req map[string]any) map[string]string {
		out := map[string]string{}
		for _, m := range req["messages"].([]any) {
			m := m.(map[string]any)
			if m["role"] == "tool" {
				content, _ := m["content"].(string)
				out[m["tool_call_id"].(string)] = content
			}
		}
		return out
	}
	r2 := toolMsgs(reqs[1])
	if !strings.Contains(r2["call_read"], "status: draft") || !strings.Contains(r2["call_list"], "notes.txt") || len(r2) != 2 {
		t.Errorf("second request's tool results: %v", r2)
	}
	if r3 := toolMsgs(reqs[2]); len(r3) != 3 || r3["call_edit"] == "" {
		t.Errorf("third request's tool results: %v", r3)
	}
	for i, req := range reqs {
		if req["model"] != "test-model" || req["stream"] != true {
			t.Errorf("request %d: model %v stream %v", i+1, req["model"], req["stream"])
		}
	}
	for i, a := range srv.auth {
		if a != "" {
			t.Errorf("request %d sent Authorization %q without a key", i+1, a)
		}
	}
	// The session is in the log, and replays.
	verify := logCmdOK(t, "verify", "--db", db)
	if !strings.Contains(verify, "events replay from") {
		t.Errorf("log verify: %s", verify)
	}
}

// Without a key, run says which environment variable to set; with a
// --base-url of one's own it needs none.
func TestRunWithoutKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY", "")
	db := tempDB(t)
	for _, tt := range []struct{ provider, env string }{{"openai", "OPENAI_API_KEY"}, {"anthropic", "ANTHROPIC_API_KEY"}} {
		code, _, errOut := runCmd(t, "run", "--provider", tt.provider, "--model", "m", "--workspace", t.TempDir(), "--db", db, "task")
		if code != 1 || !strings.Contains(errOut, tt.env) {
			t.Errorf("%s without a key: exit %d, stderr %q; want 1 naming %s", tt.provider, code, errOut, tt.env)
		}
	}
	code, _, errOut := runCmd(t, "run", "--provider", "openai", "--model", "m", "--base-url", "http://localhost:1/v1",
		"--api-key-env", "LOOPCHART_TEST_UNSET_KEY", "--workspace", t.TempDir(), "--db", db, "task")
	if code != 1 || !strings.Contains(errOut, "set LOOPCHART_TEST_UNSET_KEY") {
		t.Errorf("--api-key-env naming an unset variable: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a run that could not start created the log")
	}
}

// --api-key-env sends the key from that variable to a server of one's
// own.
func TestRunAPIKeyEnv(t *testing.T) {
	srv := serveFixtures(t, "3-done.sse")
	t.Setenv("LOOPCHART_TEST_KEY", "sk-test-0123")
	code, out, errOut := runCmd(t, "run", "--provider", "openai", "--model", "m", "--base-url", srv.URL+"/v1",
		"--api-key-env", "LOOPCHART_TEST_KEY", "--workspace", t.TempDir(), "--db", tempDB(t), "say done")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if srv.auth[0] != "Bearer sk-test-0123" {
		t.Errorf("Authorization %q", srv.auth[0])
	}
}

func TestRunUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--model", "m", "task"},
		{"run", "--provider", "gemini", "--model", "m", "task"},
		{"run", "--provider", "openai", "task"},
		{"run", "--provider", "openai", "--model", "m"},
		{"run", "--provider", "openai", "--model", "m", "a", "b"},
		{"run", "--provider", "openai", "--model", "m", "--max-tokens", "-1", "task"},
		{"run", "--provider", "anthropic", "--model", "m", "--server", "vllm", "task"},
		{"run", "--provider", "openai", "--model", "m", "--thinking-budget", "2048", "task"},
		{"run", "--provider", "openai", "--model", "m", "   "},
	} {
		if code, _, errOut := runCmd(t, args...); code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, code, errOut)
		}
	}
}

// Ctrl-C cancels the run with cause user: the turn ends aborted, the
// session is closed in order, and the exit status is 130.
func TestRunInterrupted(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking about it"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // the model streams until cancelled
	}))
	defer srv.Close()
	db := tempDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"run", "--provider", "openai", "--model", "m", "--base-url", srv.URL, "--workspace", t.TempDir(), "--db", db, "task"}, &out, &errOut)
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached the server")
	}
	cancel() // the first Ctrl-C
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("run did not end after the cancel")
	}
	if code != 130 {
		t.Fatalf("exit %d, want 130\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	inOrder(t, out.String(), "turn end: aborted{user} after 1 steps", "result: cancelled")
	if !strings.Contains(errOut.String(), "interrupted: cancelling the run") {
		t.Errorf("stderr: %q", errOut.String())
	}
	verify := logCmdOK(t, "verify", "--db", db)
	if !strings.Contains(verify, "events replay from") {
		t.Errorf("log verify: %s", verify)
	}
}

// On a terminal, a status line follows the stream and leaves the
// terminal clean when the reply is done; the usage adds up.
func TestRunProgressLine(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, tty: true}
	p.event(vocab.Event{Payload: vocab.TransitionPayload{Machine: "turn", From: "gating", To: "thinking"}})
	p.event(vocab.Event{Payload: vocab.Input{Kind: vocab.InModelParts, Parts: []vocab.StreamPart{
		{Kind: vocab.StreamThinking, Text: "hmm"}, {Kind: vocab.StreamText, Text: "héllo"}}}})
	p.around(func() { buf.WriteString("LINE\n") })
	p.event(vocab.Event{Payload: vocab.UsagePayload{Usage: vocab.Usage{InputTokens: 10, OutputTokens: 2}}})
	p.event(vocab.Event{Payload: vocab.TransitionPayload{Machine: "turn", From: "thinking", To: "draining"}})
	p.event(vocab.Event{Payload: vocab.UsagePayload{Usage: vocab.Usage{InputTokens: 5, CacheReadTokens: 4}}})
	want := "\r\x1b[K  … waiting for the model, 0 chars" +
		"\r\x1b[K  … writing, 8 chars" +
		"\r\x1b[KLINE\n" + "\r\x1b[K  … writing, 8 chars" +
		"\r\x1b[K"
	if got := buf.String(); got != want {
		t.Errorf("terminal output %q, want %q", got, want)
	}
	if u := p.total(); u != (vocab.Usage{InputTokens: 15, OutputTokens: 2, CacheReadTokens: 4}) {
		t.Errorf("total usage %+v", u)
	}
	// Not a terminal: nothing but the timeline.
	buf.Reset()
	q := newProgress(&buf)
	q.event(vocab.Event{Payload: vocab.TransitionPayload{Machine: "turn", From: "gating", To: "thinking"}})
	if buf.Len() != 0 {
		t.Errorf("a buffer got %q", buf.String())
	}
}

// The same task over the Anthropic wire: signed thinking, text and a
// call, then an edit, then the answer. The thinking goes back signed in
// the next request; the usage adds up with the cache.
func TestRunAnthropic(t *testing.T) {
	srv := serveFixtures(t, "a1-read.sse", "a2-edit.sse", "a3-done.sse")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("status: draft\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ANTHROPIC_API_KEY", "")
	db := tempDB(t)
	code, out, errOut := runCmd(t, "run", "--provider", "anthropic", "--model", "claude-test", "--base-url", srv.URL,
		"--workspace", ws, "--db", db, "Make notes.txt say final.")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(got) != "status: final\n" {
		t.Fatalf("notes.txt = %q, %v; want the edit", got, err)
	}
	inOrder(t, out,
		"usage: 500 in, 40 out",
		"assistant: Reading it.",
		`call toolu_read read_file({"path": "notes.txt"})`,
		"result toolu_read:",
		"usage: 600 in (500 from cache), 30 out",
		"result toolu_edit:",
		"assistant: Done: notes.txt says final.",
		"result: completed",
		"usage: 1750 tokens in (1100 from cache), 79 out")
	reqs := srv.requests(t)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	// The second request sends the signed thinking back, first in the
	// assistant message, and the result as a tool_result.
	msgs := reqs[1]["messages"].([]any)
	asst := msgs[1].(map[string]any)["content"].([]any)
	first := asst[0].(map[string]any)
	if first["type"] != "thinking" || first["signature"] != "sig-run-1" {
		t.Errorf("the assistant message of request 2 starts with %v, want the signed thinking", first)
	}
	res := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
	if res["type"] != "tool_result" || res["tool_use_id"] != "toolu_read" {
		t.Errorf("request 2's user message starts with %v, want the tool result", res)
	}
	if verify := logCmdOK(t, "verify", "--db", db); !strings.Contains(verify, "events replay from") {
		t.Errorf("log verify: %s", verify)
	}
}

// stubbornTool ignores cancellation: it returns only when released.
type stubbornTool struct{ started, release chan struct{} }

func (s *stubbornTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "stubborn", NoAccess: true}
}

func (s *stubbornTool) Run(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
	close(s.started)
	<-s.release
	return vocab.ToolResult{Content: "done at last"}, nil
}

// A second Ctrl-C stops at once, while the first one's cancel still waits
// for a tool that ignores it: exit 130, and the session stays open in the
// log (not closed), for a later resume.
func TestRunSecondInterruptStopsHard(t *testing.T) {
	tool := &stubbornTool{started: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(tool.release) })
	prevTools, prevWait, prevSecond := runTools, hardStopWait, secondInterrupt
	t.Cleanup(func() { runTools, hardStopWait, secondInterrupt = prevTools, prevWait, prevSecond })
	runTools = func(ws *workspace.Workspace, allow bool) []vocab.Tool { return append(prevTools(ws, allow), tool) }
	hardStopWait = time.Millisecond // the stubborn tool would hold a close for its whole bound
	// The second Ctrl-C is already there when the run asks for it; the
	// first cancel cannot end the prompt before the abort grace (2.5 s),
	// which the stubborn tool holds open.
	secondInterrupt = func() (<-chan os.Signal, func()) {
		ch := make(chan os.Signal, 1)
		ch <- os.Interrupt
		return ch, func() {}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_s","type":"function","function":{"name":"stubborn","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	db := tempDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"run", "--provider", "openai", "--model", "m", "--base-url", srv.URL, "--workspace", t.TempDir(), "--db", db, "task"}, &out, &errOut)
	}()
	select {
	case <-tool.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool never started")
	}
	cancel() // the first Ctrl-C
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop hard")
	}
	if code != 130 || !strings.Contains(errOut.String(), "stopped hard") {
		t.Fatalf("exit %d, stderr %q; want 130 and a hard stop", code, errOut.String())
	}
	// The log holds the session, not closed: a resume can pick it up.
	st, err := openDB(context.Background(), db, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := sessions(context.Background(), st)
	if err != nil || len(all) != 1 {
		t.Fatalf("sessions %v, %v", all, err)
	}
	if closed, err := finished(context.Background(), st, all[0].Session); err != nil || closed {
		t.Errorf("the session was closed (%v, %v); a hard stop leaves it open", closed, err)
	}
}
