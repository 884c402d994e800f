package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/llm/openai"
	"github.com/loopchart/loopchart/vocab"
)

// streamCases is what each fixture must give: the parts and the error
// that come out of Stream, rendered one a line.
var streamCases = []struct {
	file, server string
	want         string
}{
	{"plain.sse", "openai", lines(`text "Hello"`, `text " world"`, `usage in=12 out=2 cache=0`, `finish stop`)},
	{"tool_call.sse", "openai", lines(`call call_Wx9ZkQ1 get_weather {"city": "Paris"}`, `usage in=80 out=17 cache=0`, `finish tool-calls`)},
	{"parallel_calls.sse", "openai", lines(
		`call call_a1 get_weather {"city": "Paris"}`,
		`call call_b2 get_weather {"city": "Oslo"}`,
		`usage in=90 out=40 cache=0`, `finish tool-calls`)},
	{"parallel_index0.sse", "openai", lines(
		`call call_one read_file {"path": "a.txt"}`,
		`call call_two read_file {"path": "b.txt"}`,
		`call call_one_2 list_files {}`,
		`usage in=50 out=30 cache=0`, `finish tool-calls`)},
	{"text_then_call.sse", "openai", lines(`text "Let me "`, `text "look."`, `call call_7_x list_files {"dir": "."}`,
		`usage in=30 out=12 cache=0`, `finish tool-calls`)},
	{"reasoning_deepseek.sse", "deepseek", lines(`thinking "9.11 has"`, `thinking " fewer tenths."`, `thinking-end openai/deepseek`,
		`text "9.8 is"`, `text " greater."`, `usage in=20 out=64 cache=0`, `finish stop`)},
	{"usage_openai_cached.sse", "openai", lines(`text "Cached."`, `usage in=2006 out=300 cache=1920`, `finish stop`)},
	{"usage_deepseek_cache_hit.sse", "deepseek", lines(`text "Hi!"`, `usage in=1500 out=3 cache=1408`, `finish stop`)},
	{"usage_moonshot_in_choice.sse", "moonshot", lines(`text "你好"`, `usage in=19 out=2 cache=16`, `finish stop`)},
	{"max_tokens.sse", "openai", lines(`text "Once upon"`, `text " a time"`, `usage in=10 out=4 cache=0`, `finish max-tokens`)},
	{"max_tokens_call.sse", "openai", lines(`call call_w1 write_file {"path": "essay.md", "text": "It was a dark`,
		`usage in=40 out=16 cache=0`, `finish max-tokens`)},
	{"error_event.sse", "openai", lines(`text "Part"`, `error llm.server retryable=true`)},
	{"rate_limit_429.sse", "openai", lines(`error llm.rate_limited retryable=true after=2s status=429`)},
	{"rate_limit_429_ms.sse", "openai", lines(`error llm.rate_limited retryable=true after=1.5s status=429`)},
	{"server_500.sse", "openai", lines(`error llm.server retryable=true status=500`)},
	{"overloaded_503.sse", "openai", lines(`error llm.rate_limited retryable=true status=503`)},
	{"overloaded_529.sse", "openai", lines(`error llm.rate_limited retryable=true after=500ms status=529`)},
	{"overflow_400.sse", "openai", lines(`error llm.context_overflow retryable=false status=400`)},
	{"overflow_llamacpp.sse", "llamacpp", lines(`error llm.context_overflow retryable=false status=400`)},
	{"overflow_vllm.sse", "vllm", lines(`error llm.context_overflow retryable=false status=400`)},
	{"overflow_moonshot.sse", "moonshot", lines(`error llm.context_overflow retryable=false status=400`)},
	{"empty.sse", "openai", lines(`usage in=9 out=0 cache=0`, `finish stop`)},
	{"malformed_args.sse", "openai", lines(`call call_m1 read_file {"path": "a.txt", "lines": }`, `finish tool-calls`)},
	{"quota_429.sse", "openai", lines(`error llm.quota_exhausted retryable=false after=20s status=429`)},
	{"auth_401.sse", "openai", lines(`error llm.auth retryable=false status=401`)},
	{"not_found_404.sse", "openai", lines(`error llm.model_not_found retryable=false status=404`)},
	{"refusal.sse", "openai", lines(`text "I'm sorry, "`, `text "I can't help with that."`, `usage in=15 out=9 cache=0`, `finish refusal`)},
	{"no_finish.sse", "openai", lines(`text "Half an"`, `text " answer"`, `error llm.transport retryable=true`)},
	{"bad_chunk.sse", "openai", lines(`text "ok"`, `error llm.syntax retryable=false`)},
	{"finish_context_window.sse", "mistral", lines(`text "The list goes on"`, `usage in=32000 out=768 cache=0`, `finish context-overflow`)},
	{"server_deepseek.sse", "deepseek", lines(`thinking "I need the"`, `thinking " date first."`, `thinking-end openai/deepseek`,
		`call call_00_xYz12AbC get_date {}`, `usage in=320 out=41 cache=256`, `finish tool-calls`)},
	{"server_moonshot.sse", "moonshot", lines(`thinking "Two cities;"`, `thinking " call both."`, `thinking-end openai/moonshot`,
		`call functions_get_weather_0 get_weather {"city":"Beijing"}`,
		`call functions_get_weather_1 get_weather {"city":"Shanghai"}`,
		`usage in=210 out=58 cache=192`, `finish tool-calls`)},
	{"server_vllm.sse", "vllm", lines(`thinking "The user wants"`, `thinking " the files."`, `thinking-end openai/vllm`,
		`text "Listing."`, `call chatcmpl-tool-5b0e8f3c list_files {"dir": "src"}`, `usage in=400 out=60 cache=384`, `finish tool-calls`)},
	{"server_ollama.sse", "ollama", lines(`thinking "Weather needs a tool."`, `thinking-end openai/ollama`,
		`call call_k3j2xq7m get_weather {"city":"Paris"}`, `usage in=180 out=25 cache=0`, `finish tool-calls`)},
	{"server_llamacpp.sse", "llamacpp", lines(`thinking "Read the file."`, `thinking-end openai/llamacpp`,
		`call call_1 read_file {"path":"go.mod"}`, `usage in=512 out=22 cache=500`, `finish tool-calls`)},
	{"agent_echo_call.sse", "openai", lines(`call call_echo1 echo {"text": "hi"}`, `usage in=60 out=10 cache=0`, `finish tool-calls`)},
	{"server_mistral.sse", "mistral", lines(`call D681PevKs get_weather {"city": "Paris"}`, `call ab3Xk9Lm2 get_weather {"city": "Lyon"}`,
		`usage in=95 out=35 cache=0`, `finish tool-calls`)},
}

// TestStreamFixtures serves every fixture through the SDK's client and
// checks the exact parts and error kinds that come out.
func TestStreamFixtures(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range streamCases {
		seen[tc.file] = true
		t.Run(strings.TrimSuffix(tc.file, ".sse"), func(t *testing.T) {
			srv := wiretest.Serve(t, fixture(tc.file))
			p := newProvider(t, srv.URL, tc.server)
			parts, err := collect(p, context.Background(), userRequest("hi"))
			if got := render(parts, err); got != tc.want {
				t.Errorf("parts:\n%s\nwant:\n%s", got, tc.want)
			}
			checkNoLeak(t, parts, err)
			if err != nil {
				var e *vocab.Error
				if errors.As(err, &e) && e.Cause != nil {
					t.Errorf("error keeps a cause %T: %v", e.Cause, e.Cause)
				}
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].Path != "/chat/completions" {
				t.Fatalf("requests: %+v", reqs)
			}
		})
	}
	// Every fixture is in the table.
	files, _ := filepath.Glob(fixture("*.sse"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("fixture %s has no case", filepath.Base(f))
		}
	}
}

// checkNoLeak fails if the API key shows anywhere in the parts or the
// error (its text, its %+v, its JSON).
func checkNoLeak(t *testing.T, parts []vocab.StreamPart, err error) {
	t.Helper()
	var b strings.Builder
	for _, p := range parts {
		j, _ := json.Marshal(p)
		b.Write(j)
	}
	if err != nil {
		fmt.Fprintf(&b, "%v %+v %#v %s", err, err, err, err.Error())
		j, _ := json.Marshal(err)
		b.Write(j)
		var e *vocab.Error
		if errors.As(err, &e) && e.Cause != nil {
			fmt.Fprintf(&b, "%+v", e.Cause)
		}
	}
	if strings.Contains(b.String(), testKey) {
		t.Errorf("the API key leaks: %s", b.String())
	}
}

// TestErrorMessages checks what the errors say: the provider, the
// status, the server's type and message, redacted.
func TestErrorMessages(t *testing.T) {
	cases := []struct{ file, server, want string }{
		{"auth_401.sse", "openai", "llm.auth: openai/openai 401 invalid_request_error: Incorrect API key provided: [redacted]. " +
			"You can find your API key at https://platform.openai.com/account/api-keys."},
		{"overflow_llamacpp.sse", "llamacpp", "llm.context_overflow: openai/llamacpp 400 exceed_context_size_error: " +
			"the request exceeds the available context size, try increasing it"},
		{"overflow_vllm.sse", "vllm", "llm.context_overflow: openai/vllm 400 BadRequestError: This model's maximum context length is 4096 tokens. " +
			"However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."},
		{"error_event.sse", "openai", "llm.server: openai/openai server_error: The server had an error while processing your request. Sorry about that!"},
		{"no_finish.sse", "openai", "llm.transport: openai/openai: the stream ended without a finish reason"},
	}
	for _, tc := range cases {
		srv := wiretest.Serve(t, fixture(tc.file))
		_, err := collect(newProvider(t, srv.URL, tc.server), context.Background(), userRequest("hi"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error\n%v\nwant\n%s", tc.file, err, tc.want)
		}
	}
}

// TestErrorBodies covers error bodies the SDK does not parse: a string
// error (Ollama), FastAPI's detail, a proxy's HTML page.
func TestErrorBodies(t *testing.T) {
	cases := []struct {
		status      int
		body, want  string
		code        vocab.Code
		retryable   bool
		contentType string
	}{
		{404, `{"error":"model \"llama9\" not found, try pulling it first"}`,
			`openai/ollama 404: model "llama9" not found, try pulling it first`, vocab.CodeModelNotFound, false, "application/json"},
		{400, `{"detail":"the input length exceeds the context length"}`,
			`openai/ollama 400: the input length exceeds the context length`, vocab.CodeContextOverflow, false, "application/json"},
		{502, `<html><body>Bad gateway</body></html>`,
			`openai/ollama 502: <html><body>Bad gateway</body></html>`, vocab.CodeServer, true, "text/html"},
		{503, ``, `openai/ollama 503: Service Unavailable`, vocab.CodeServer, true, "text/plain"},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		_, err := collect(newProvider(t, srv.URL, "ollama"), context.Background(), userRequest("hi"))
		srv.Close()
		var e *vocab.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Retryable != tc.retryable || e.Status != tc.status || e.Message != tc.want {
			t.Errorf("%d %s: got %+v, want %s %q", tc.status, tc.body, e, tc.code, tc.want)
		}
	}
}

// TestTransportErrors: a refused connection and a body cut off are
// retryable transport errors that name no key.
func TestTransportErrors(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		base := srv.URL
		srv.Close()
		parts, err := collect(newProvider(t, base, "openai"), context.Background(), userRequest("hi"))
		if got := render(parts, err); got != lines("error llm.transport retryable=true") {
			t.Errorf("got %s", got)
		}
		checkNoLeak(t, parts, err)
	})
	t.Run("client timeout", func(t *testing.T) {
		// The HTTP client gives up on its own (its Timeout): not a
		// cancel, a retryable transport error.
		client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, fmt.Errorf("net/http: timeout awaiting response headers: %w", context.DeadlineExceeded)
		})}
		p := newProvider(t, "http://127.0.0.1:9/v1", "openai", func(o *openai.Options) { o.HTTPClient = client })
		parts, err := collect(p, context.Background(), userRequest("hi"))
		if got := render(parts, err); got != lines("error llm.transport retryable=true") {
			t.Errorf("got %s", got)
		}
	})
	t.Run("broken body", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			// Promise more than is sent, then hang up.
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 4096\r\n\r\n")
			fmt.Fprint(buf, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"so far"},"finish_reason":null}]}`+"\n\n")
			buf.Flush()
		}))
		defer srv.Close()
		parts, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
		if got := render(parts, err); got != lines(`text "so far"`, "error llm.transport retryable=true") {
			t.Errorf("got %s", got)
		}
	})
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCancel: a request cancelled mid-stream ends with agent.cancelled
// whose cause is the context's cause; one cancelled before it starts
// sends nothing.
func TestCancel(t *testing.T) {
	cause := vocab.CancelCause{Kind: vocab.CancelUser}
	t.Run("mid-stream", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"first"},"finish_reason":null}]}`+"\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // hold the stream open until the client goes
		}))
		defer srv.Close()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		p := newProvider(t, srv.URL, "openai")
		var got []string
		var err error
		for part, e := range p.Stream(ctx, userRequest("hi")) {
			if e != nil {
				err = e
				break
			}
			if part.Kind == vocab.StreamResponse {
				continue
			}
			got = append(got, renderPart(part))
			cancel(cause)
		}
		if len(got) != 1 || got[0] != `text "first"` {
			t.Errorf("parts %q", got)
		}
		var e *vocab.Error
		if !errors.As(err, &e) || e.Code != vocab.CodeCancelled || e.Retryable {
			t.Fatalf("error %v", err)
		}
		var cc vocab.CancelCause
		if !errors.As(err, &cc) || cc != cause {
			t.Errorf("cause %v, want %v", e.Cause, cause)
		}
	})
	t.Run("before", func(t *testing.T) {
		srv := wiretest.Serve(t) // no fixture: a request would fail the test
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		_, err := collect(newProvider(t, srv.URL, "openai"), ctx, userRequest("hi"))
		if vocab.CodeOf(err) != vocab.CodeCancelled || !errors.Is(err, context.Canceled) && !errors.Is(err, vocab.CodeCancelled.Err()) {
			t.Errorf("error %v", err)
		}
		if n := len(srv.Requests()); n != 0 {
			t.Errorf("%d requests sent", n)
		}
	})
}

// TestStopEarly: a consumer that stops ranging ends the stream; nothing
// is yielded after.
func TestStopEarly(t *testing.T) {
	for _, file := range []string{"parallel_calls.sse", "reasoning_deepseek.sse", "plain.sse"} {
		for stop := 1; ; stop++ {
			srv := wiretest.Serve(t, fixture(file))
			n := 0
			for range newProvider(t, srv.URL, "deepseek").Stream(context.Background(), userRequest("hi")) {
				n++
				if n == stop {
					break
				}
			}
			if n < stop {
				break // the stream had fewer parts
			}
		}
	}
}

// TestEnvironmentIgnored: the SDK's environment variables are poisoned;
// the request reaches the test server with none of them.
func TestEnvironmentIgnored(t *testing.T) {
	poison := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the poisoned base URL: %s", r.URL)
	}))
	defer poison.Close()
	t.Setenv("OPENAI_BASE_URL", poison.URL)
	t.Setenv("OPENAI_API_KEY", "sk-poisoned-env-key")
	t.Setenv("OPENAI_ADMIN_KEY", "sk-poisoned-admin-key")
	t.Setenv("OPENAI_ORG_ID", "org-poisoned")
	t.Setenv("OPENAI_PROJECT_ID", "proj-poisoned")
	t.Setenv("OPENAI_WEBHOOK_SECRET", "whsec-poisoned")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Poisoned: yes")

	srv := wiretest.Serve(t, fixture("plain.sse"))
	parts, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
	if err != nil || len(parts) != 4 {
		t.Fatalf("parts %v, error %v", parts, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	h := reqs[0].Header
	if got := h.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization %q", got)
	}
	for name, vs := range h {
		for _, v := range vs {
			if strings.Contains(strings.ToLower(v), "poison") || strings.Contains(strings.ToLower(name), "poison") {
				t.Errorf("poisoned header %s: %s", name, v)
			}
		}
	}
	for _, name := range []string{"OpenAI-Organization", "OpenAI-Project", "X-Poisoned"} {
		if v := h.Get(name); v != "" {
			t.Errorf("header %s: %q", name, v)
		}
	}
}

// TestRetryOwnedByTurnMachine: a 500 is answered once; the SDK does not
// retry it.
func TestRetryOwnedByTurnMachine(t *testing.T) {
	srv := wiretest.Serve(t, fixture("server_500.sse"))
	_, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
	if vocab.CodeOf(err) != vocab.CodeServer {
		t.Fatalf("error %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestLongLine: a chunk far longer than bufio's default token still
// streams.
func TestLongLine(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriter(w)
		fmt.Fprintf(bw, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n", long)
		bw.Flush()
	}))
	defer srv.Close()
	parts, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
	if err != nil || len(parts) != 2 || parts[0].Text != long || parts[1].Finish != vocab.FinishStop {
		t.Fatalf("%d parts, error %v", len(parts), err)
	}
}

// TestOddChunks: chunk forms outside the fixtures' rows, served inline.
func TestOddChunks(t *testing.T) {
	const done = "data: [DONE]\n\n"
	cases := []struct{ name, body, want string }{
		{"error null is no error",
			`data: {"error":null,"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}` + "\n\n" + done,
			lines(`text "ok"`, `finish stop`)},
		{"typed error event",
			"event: error\ndata: {\"message\":\"boom\",\"type\":\"server_error\"}\n\n",
			lines(`error llm.server retryable=true`)},
		{"typed error event in plain text",
			"event: error\ndata: upstream went away\n\n",
			lines(`error llm.server retryable=true`)},
		{"content as parts (Mistral's reasoning models)",
			`data: {"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"Hmm."}]}]},"finish_reason":null}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Yes."}]},"finish_reason":"stop"}]}` + "\n\n" + done,
			lines(`thinking "Hmm."`, `thinking-end openai/openai`, `text "Yes."`, `finish stop`)},
		{"arguments as an object",
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}` + "\n\n" + done,
			lines(`call c1 f {"a":1}`, `finish tool-calls`)},
		{"fields of odd types are skipped",
			`data: {"choices":[{"index":0,"delta":{"content":"still here","refusal":7},"finish_reason":"stop"}],"usage":"n/a"}` + "\n\n" + done,
			lines(`text "still here"`, `finish stop`)},
		{"escapes and unicode",
			`data: {"choices":[{"index":0,"delta":{"content":"tab\there \u00e9 \"q\" é"},"finish_reason":"stop"}]}` + "\n\n" + done,
			lines(`text "tab\there é \"q\" é"`, `finish stop`)},
		{"a call without an id or a name, then one with both",
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}},{"index":1,"id":"x.y","function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}]}` + "\n\n" + done,
			lines(`call call_1  {}`, `call x_y g `, `finish tool-calls`)},
		{"a second choice is ignored",
			`data: {"choices":[{"index":1,"delta":{"content":"other"},"finish_reason":"stop"},{"index":0,"delta":{"content":"mine"},"finish_reason":"stop"}]}` + "\n\n" + done,
			lines(`text "mine"`, `finish stop`)},
		{"unknown finish reasons are a stop",
			`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"eos"}]}` + "\n\n" + done,
			lines(`text "x"`, `finish stop`)},
		{"no [DONE] after the finish",
			`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}` + "\n\n",
			lines(`text "x"`, `finish stop`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			parts, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
			if got := render(parts, err); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestTemperatureZero: a temperature of 0 is sent, not dropped as a zero
// value.
func TestTemperatureZero(t *testing.T) {
	srv := wiretest.Serve(t, fixture("plain.sse"))
	zero := 0.0
	p := newProvider(t, srv.URL, "openai", func(o *openai.Options) { o.Temperature = &zero })
	if _, err := collect(p, context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if v, ok := body["temperature"]; !ok || v != 0.0 {
		t.Errorf("temperature %v (sent: %t)", v, ok)
	}
}

// TestResponsePart: the reply says who answered (the first chunk's model
// and id), once, before anything else.
func TestResponsePart(t *testing.T) {
	keepResponse = true
	defer func() { keepResponse = false }()
	srv := wiretest.Serve(t, fixture("plain.sse"))
	parts, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), userRequest("hi"))
	if err != nil || len(parts) == 0 {
		t.Fatalf("parts %v, error %v", parts, err)
	}
	n := 0
	for _, p := range parts {
		if p.Kind == vocab.StreamResponse {
			n++
		}
	}
	if parts[0].Kind != vocab.StreamResponse || parts[0].Provider != "openai/openai" || parts[0].Model == "" || parts[0].ResponseID == "" || n != 1 {
		t.Errorf("parts %+v: want one response part first, with model and id", parts)
	}
}
