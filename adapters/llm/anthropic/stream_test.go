package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/vocab"
)

func text(s string) vocab.StreamPart { return vocab.StreamPart{Kind: vocab.StreamText, Text: s} }

func thinking(s string) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamThinking, Text: s}
}

func signed(sig string) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamThinking, Provider: "anthropic", Signature: sig}
}

func redacted(data string) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamThinking, Provider: "anthropic", Redacted: data}
}

func call(id, name, args string) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &vocab.ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}}
}

func usage(in, out int) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: in, OutputTokens: out}}
}

func finish(f vocab.FinishReason) vocab.StreamPart {
	return vocab.StreamPart{Kind: vocab.StreamFinish, Finish: f}
}

// wantErr is what a failed stream's error must be.
type wantErr struct {
	code       vocab.Code
	retryable  bool
	retryAfter time.Duration
	status     int
	msg        string // a substring of the message
}

// fixtureCases lists every fixture with what comes out of Stream.
var fixtureCases = []struct {
	file  string
	parts []vocab.StreamPart
	err   *wantErr
}{
	{file: "text.sse", parts: []vocab.StreamPart{
		usage(25, 1), text("Hello"), text(", world!"), usage(25, 12), finish(vocab.FinishStop)}},
	{file: "stop_sequence.sse", parts: []vocab.StreamPart{
		usage(10, 1), text("one, two"), usage(10, 4), finish(vocab.FinishStop)}},
	{file: "tool_use.sse", parts: []vocab.StreamPart{
		usage(410, 2), call("toolu_01A09q90qw90lq917835lq9", "echo", `{"text": "ping"}`), usage(410, 41), finish(vocab.FinishToolCalls)}},
	{file: "parallel_tools.sse", parts: []vocab.StreamPart{
		usage(502, 3),
		call("toolu_01_weather", "get_weather", `{"city": "Paris"}`),
		call("toolu_02B", "get_time", `{"zone": "Europe/Paris"}`),
		usage(502, 88), finish(vocab.FinishToolCalls)}},
	{file: "text_then_tool.sse", parts: []vocab.StreamPart{
		usage(300, 1), text("Let me check the clock."), call("toolu_01Clock", "now", `{}`), usage(300, 30), finish(vocab.FinishToolCalls)}},
	{file: "thinking.sse", parts: []vocab.StreamPart{
		usage(85, 4),
		thinking("The user wants 27 * 453."), thinking(" That is 12231."),
		signed("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"),
		redacted("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
		text("27 * 453 = 12231"), usage(85, 310), finish(vocab.FinishStop)}},
	{file: "cache_usage.sse", parts: []vocab.StreamPart{
		{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 21512, OutputTokens: 1, CacheReadTokens: 20000, CacheWriteTokens: 1500}},
		text("Cached."),
		{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 21512, OutputTokens: 7, CacheReadTokens: 20000, CacheWriteTokens: 1500}},
		finish(vocab.FinishStop)}},
	{file: "max_tokens.sse", parts: []vocab.StreamPart{
		usage(40, 1), text("Once upon a time, there"), usage(40, 16), finish(vocab.FinishMaxTokens)}},
	{file: "max_tokens_tool.sse", parts: []vocab.StreamPart{
		usage(40, 1), call("toolu_01Cut", "write_file", `{"path": "a.txt", "content": "Once upon`), usage(40, 16), finish(vocab.FinishMaxTokens)}},
	{file: "malformed_tool_json.sse", parts: []vocab.StreamPart{
		usage(70, 1), call("toolu_01Bad", "echo", `{"text": "hi", }`), usage(70, 14), finish(vocab.FinishToolCalls)}},
	{file: "context_window.sse", parts: []vocab.StreamPart{
		usage(199000, 1), text("The files show"), usage(199000, 1000), finish(vocab.FinishContextOverflow)}},
	{file: "empty.sse", parts: []vocab.StreamPart{
		usage(20, 1), usage(20, 1), finish(vocab.FinishStop)}},
	{file: "thinking_only.sse", parts: []vocab.StreamPart{
		usage(30, 1), thinking("Nothing to add."), signed("ErUBCkYIBhgCIkBthinkingonly"), usage(30, 9), finish(vocab.FinishStop)}},
	{file: "refusal.sse", parts: []vocab.StreamPart{
		usage(33, 1), text("I can"), usage(33, 3), finish(vocab.FinishRefusal)}},
	{file: "pause_turn.sse", parts: []vocab.StreamPart{
		usage(120, 1), text("Searching"), usage(120, 20), finish(vocab.FinishPause)}},
	{file: "error_midstream.sse", parts: []vocab.StreamPart{usage(60, 1), text("Partial answ")},
		err: &wantErr{code: vocab.CodeRateLimited, retryable: true, status: 200, msg: "anthropic 200 overloaded_error: Overloaded"}},
	{file: "cut_off.sse", parts: []vocab.StreamPart{usage(44, 1), text("Half a")},
		err: &wantErr{code: vocab.CodeTransport, retryable: true, msg: "before message_stop"}},
	{file: "cut_after_delta.sse", parts: []vocab.StreamPart{usage(44, 1), text("Done."), usage(44, 5)},
		err: &wantErr{code: vocab.CodeTransport, retryable: true, msg: "before message_stop"}},
	{file: "rate_limit_429.sse", err: &wantErr{code: vocab.CodeRateLimited, retryable: true, retryAfter: 7 * time.Second, status: 429,
		msg: "anthropic 429 rate_limit_error: Number of request tokens"}},
	{file: "rate_limit_429_ms.sse", err: &wantErr{code: vocab.CodeRateLimited, retryable: true, retryAfter: 1500 * time.Millisecond, status: 429}},
	{file: "rate_limit_429_fraction.sse", err: &wantErr{code: vocab.CodeRateLimited, retryable: true, retryAfter: 250 * time.Millisecond, status: 429}},
	{file: "rate_limit_429_date.sse", err: &wantErr{code: vocab.CodeRateLimited, retryable: true, retryAfter: wire.MaxRetryAfter, status: 429}},
	{file: "server_500.sse", err: &wantErr{code: vocab.CodeServer, retryable: true, status: 500, msg: "anthropic 500 api_error: Internal server error"}},
	{file: "bad_gateway_502.sse", err: &wantErr{code: vocab.CodeServer, retryable: true, status: 502, msg: "502 Bad Gateway"}},
	{file: "overloaded_529.sse", err: &wantErr{code: vocab.CodeRateLimited, retryable: true, status: 529, msg: "overloaded_error"}},
	{file: "prompt_too_long_400.sse", err: &wantErr{code: vocab.CodeContextOverflow, status: 400, msg: "prompt is too long"}},
	{file: "request_too_large_413.sse", err: &wantErr{code: vocab.CodeContextOverflow, status: 413, msg: "request_too_large"}},
	{file: "invalid_request_400.sse", err: &wantErr{code: vocab.CodeRequestRejected, status: 400, msg: "invalid_request_error"}},
	{file: "credit_balance_400.sse", err: &wantErr{code: vocab.CodeQuotaExhausted, status: 400, msg: "credit balance is too low"}},
	{file: "billing_402.sse", err: &wantErr{code: vocab.CodeQuotaExhausted, status: 402, msg: "billing_error"}},
	{file: "auth_401.sse", err: &wantErr{code: vocab.CodeAuth, status: 401, msg: "invalid x-api-key: [redacted]"}},
	{file: "permission_403.sse", err: &wantErr{code: vocab.CodeAuth, status: 403, msg: "permission_error"}},
	{file: "not_found_404.sse", err: &wantErr{code: vocab.CodeModelNotFound, status: 404, msg: "model: claude-nonexistent"}},
}

// TestFixtures serves every fixture through the SDK client and checks the
// parts, usage, finish and error that come out of Stream.
func TestFixtures(t *testing.T) {
	for _, tc := range fixtureCases {
		t.Run(strings.TrimSuffix(tc.file, ".sse"), func(t *testing.T) {
			srv := wiretest.Serve(t, fixture(tc.file))
			p := newProvider(t, srv.URL)
			parts, err := collect(t, p, context.Background(), hello())
			if diff := cmp.Diff(tc.parts, parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			checkErr(t, err, tc.err)
			noSecret(t, parts, err)
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/messages" {
				t.Fatalf("requests: %+v", reqs)
			}
		})
	}
}

// TestEveryFixtureListed keeps the table and the fixture directory in step.
func TestEveryFixtureListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.sse"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, tc := range fixtureCases {
		listed[tc.file] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("fixture %s is not in the table", filepath.Base(f))
		}
	}
}

func checkErr(t *testing.T, err error, want *wantErr) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var e *vocab.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v, want a *vocab.Error", err, err)
	}
	if e.Code != want.code || e.Retryable != want.retryable || e.RetryAfter != want.retryAfter || e.Status != want.status {
		t.Errorf("error %+v\nwant code=%s retryable=%t retryAfter=%s status=%d", e, want.code, want.retryable, want.retryAfter, want.status)
	}
	if !strings.Contains(e.Message, want.msg) {
		t.Errorf("message %q does not contain %q", e.Message, want.msg)
	}
	if e.Cause != nil {
		t.Errorf("cause %T %v: the SDK's error must not be the cause", e.Cause, e.Cause)
	}
}

// noSecret checks that the API key appears in no part and nowhere in the
// error.
func noSecret(t *testing.T, parts []vocab.StreamPart, err error) {
	t.Helper()
	for _, p := range parts {
		b, _ := json.Marshal(p)
		if strings.Contains(string(b), testKey) {
			t.Errorf("part %s holds the API key", b)
		}
	}
	if err == nil {
		return
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
		if strings.Contains(s, testKey) {
			t.Errorf("error holds the API key: %s", s)
		}
	}
	if e := errors.Unwrap(err); e != nil {
		t.Errorf("error wraps %T %v", e, e)
	}
}

// TestTransportError: a server that is not there gives a retryable
// transport error without the key.
func TestTransportError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	p := newProvider(t, base)
	parts, err := collect(t, p, context.Background(), hello())
	if len(parts) != 0 {
		t.Errorf("parts: %+v", parts)
	}
	checkErr(t, err, &wantErr{code: vocab.CodeTransport, retryable: true, msg: "anthropic: "})
	noSecret(t, parts, err)
}

// TestCancelBeforeStart: a done context sends nothing.
func TestCancelBeforeStart(t *testing.T) {
	srv := wiretest.Serve(t)
	p := newProvider(t, srv.URL)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(vocab.CancelCause{Kind: vocab.CancelUser})
	_, err := collect(t, p, ctx, hello())
	if vocab.CodeOf(err) != vocab.CodeCancelled {
		t.Fatalf("error %v, want cancelled", err)
	}
	var cause vocab.CancelCause
	if !errors.As(err, &cause) || cause.Kind != vocab.CancelUser {
		t.Errorf("cause not kept: %v", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestCancelMidStream: cancelling while the server holds the stream open
// ends it with a cancellation error, after the usage of message_start.
func TestCancelMidStream(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	p := newProvider(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var parts []vocab.StreamPart
	var err error
	for part, e := range p.Stream(ctx, hello()) {
		if e != nil {
			err = e
			break
		}
		parts = append(parts, part)
		if part.Kind == vocab.StreamText {
			cancel()
		}
	}
	want := []vocab.StreamPart{usage(9, 1), text("Hi")}
	if diff := cmp.Diff(want, parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if vocab.CodeOf(err) != vocab.CodeCancelled || vocab.AsError(err).Retryable {
		t.Fatalf("error %v, want a cancellation", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not match context.Canceled", err)
	}
}

// TestBreakCloses: a consumer that stops early gets no more parts and the
// response is closed.
func TestBreakCloses(t *testing.T) {
	srv := wiretest.Serve(t, fixture("thinking.sse"))
	p := newProvider(t, srv.URL)
	n := 0
	for part, err := range p.Stream(context.Background(), hello()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if part.Kind == vocab.StreamThinking {
			break
		}
	}
	if n != 3 { // response, usage, the first thinking delta
		t.Errorf("got %d parts before the break, want 3", n)
	}
}

// TestLongStream: many deltas arrive as many parts, in order.
func TestLongStream(t *testing.T) {
	body := longText(2000)
	srv := httptest.NewServer(sseHandler(body))
	defer srv.Close()
	p := newProvider(t, srv.URL)
	parts, err := collect(t, p, context.Background(), hello())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, part := range parts {
		if part.Kind == vocab.StreamText {
			b.WriteString(part.Text)
		}
	}
	if want := strings.Repeat("word ", 2000); b.String() != want {
		t.Errorf("text of %d bytes, want %d", b.Len(), len(want))
	}
	if last := parts[len(parts)-1]; last.Kind != vocab.StreamFinish || last.Finish != vocab.FinishStop {
		t.Errorf("last part %+v", last)
	}
}

// sseHandler serves body as an event stream.
func sseHandler(body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		_, _ = w.Write(body)
	})
}

// fixtureBody returns the body of a fixture.
func fixtureBody(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wiretest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestUsageRunningTotals: message_delta's counts replace message_start's;
// a zero input count does not erase a known one; a delta without usage
// reports nothing.
func TestUsageRunningTotals(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n"
	delta := func(u string) string {
		return "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}" + u + "}\n\n"
	}
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	full := func(in, out, read, write int) vocab.StreamPart {
		return vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: read, CacheWriteTokens: write}}
	}
	cases := []struct {
		name string
		body string
		want []vocab.StreamPart
	}{
		{"output only", start + delta(`,"usage":{"output_tokens":50}`) + stop,
			[]vocab.StreamPart{full(115, 1, 100, 5), full(115, 50, 100, 5), finish(vocab.FinishStop)}},
		{"all fields replace", start + delta(`,"usage":{"input_tokens":12,"cache_read_input_tokens":100,"cache_creation_input_tokens":7,"output_tokens":9}`) + stop,
			[]vocab.StreamPart{full(115, 1, 100, 5), full(119, 9, 100, 7), finish(vocab.FinishStop)}},
		{"zero input kept", start + delta(`,"usage":{"input_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":null,"output_tokens":3}`) + stop,
			[]vocab.StreamPart{full(115, 1, 100, 5), full(115, 3, 100, 5), finish(vocab.FinishStop)}},
		{"no usage", start + delta(``) + stop,
			[]vocab.StreamPart{full(115, 1, 100, 5), finish(vocab.FinishStop)}},
		{"two deltas", start + delta(`,"usage":{"output_tokens":5}`) + delta(`,"usage":{"output_tokens":8}`) + stop,
			[]vocab.StreamPart{full(115, 1, 100, 5), full(115, 5, 100, 5), full(115, 8, 100, 5), finish(vocab.FinishStop)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(sseHandler([]byte(tc.body)))
			defer srv.Close()
			parts, err := collect(t, newProvider(t, srv.URL), context.Background(), hello())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOddStreams: events this adapter does not stream are skipped, a
// malformed event is a syntax error, an error event without its name is
// still an error, a tool input given whole at the block's start is kept.
func TestOddStreams(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"
	end := "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	cases := []struct {
		name  string
		body  string
		parts []vocab.StreamPart
		err   *wantErr
	}{
		{"server tool blocks skipped", start +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\": \\\"go\\\"}\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srvtoolu_1\",\"content\":[]}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
			"event: some_future_event\ndata: {\"type\":\"some_future_event\",\"index\":\"not a number\"}\n\n" + end,
			[]vocab.StreamPart{usage(1, 1), finish(vocab.FinishToolCalls)}, nil},
		{"input given at start", start +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"echo\",\"input\":{\"text\":\"whole\"}}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" + end,
			[]vocab.StreamPart{usage(1, 1), call("toolu_1", "echo", `{"text":"whole"}`), finish(vocab.FinishToolCalls)}, nil},
		{"block left open at message_stop", start +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"\",\"name\":\"echo\",\"input\":{}}}\n\n" + end,
			[]vocab.StreamPart{usage(1, 1), call("call_1", "echo", `{}`), finish(vocab.FinishToolCalls)}, nil},
		{"malformed event", start + "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \n\n",
			[]vocab.StreamPart{usage(1, 1)}, &wantErr{code: vocab.CodeSyntax, msg: "malformed stream event"}},
		{"unnamed error event", start + "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n",
			[]vocab.StreamPart{usage(1, 1)}, &wantErr{code: vocab.CodeServer, retryable: true, status: 200, msg: "api_error: boom"}},
		{"error event not JSON", start + "event: error\ndata: upstream went away\n\n",
			[]vocab.StreamPart{usage(1, 1)}, &wantErr{code: vocab.CodeServer, retryable: true, status: 200, msg: "upstream went away"}},
		{"message_stop without stop reason", start + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			[]vocab.StreamPart{usage(1, 1)}, &wantErr{code: vocab.CodeTransport, retryable: true, msg: "without a stop reason"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(sseHandler([]byte(tc.body)))
			defer srv.Close()
			parts, err := collect(t, newProvider(t, srv.URL), context.Background(), hello())
			if diff := cmp.Diff(tc.parts, parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			checkErr(t, err, tc.err)
		})
	}
}

// TestCancelStopsBuffered: a cancel stops the stream at the next event,
// even when the rest of the reply is already buffered.
func TestCancelStopsBuffered(t *testing.T) {
	srv := httptest.NewServer(sseHandler(longText(200)))
	defer srv.Close()
	p := newProvider(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	texts := 0
	var err error
	for part, e := range p.Stream(ctx, hello()) {
		if e != nil {
			err = e
			break
		}
		if part.Kind == vocab.StreamText {
			texts++
			cancel()
		}
	}
	if texts != 1 || vocab.CodeOf(err) != vocab.CodeCancelled {
		t.Errorf("%d text parts, error %v; want 1 and a cancellation", texts, err)
	}
}

// TestResponsePart: the reply says who answered (message_start's model and
// id) before anything else.
func TestResponsePart(t *testing.T) {
	keepResponse = true
	defer func() { keepResponse = false }()
	srv := wiretest.Serve(t, fixture("text.sse"))
	parts, err := collect(t, newProvider(t, srv.URL), context.Background(), hello())
	if err != nil || len(parts) == 0 {
		t.Fatalf("parts %v, error %v", parts, err)
	}
	want := vocab.StreamPart{Kind: vocab.StreamResponse, Provider: "anthropic", Model: "claude-sonnet-4-5", ResponseID: "msg_01TextPlain"}
	if diff := cmp.Diff(want, parts[0]); diff != "" {
		t.Errorf("first part (-want +got):\n%s", diff)
	}
}
