package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/llm/openai"
	"github.com/loopchart/loopchart/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden request files")

// history is a request whose history holds what a request builder must
// get right: a turn without tools, a tool turn with thinking of this
// provider, of another and cut off, parallel calls one of whose
// arguments are not JSON, results with a note, a call without
// arguments and without thinking.
func history(provider string) vocab.Request {
	call := func(id, name, args string) vocab.Part {
		c := &vocab.ToolCall{ID: id, Name: name}
		if args != "" {
			c.Args = json.RawMessage(args)
		}
		return vocab.Part{Kind: vocab.PartToolCall, Call: c}
	}
	return vocab.Request{
		System: "You are terse.",
		Messages: []vocab.Message{
			vocab.UserText("What is 2+2?"),
			{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
				{Kind: vocab.PartThinking, Text: "A simple sum.", Provider: provider},
				{Kind: vocab.PartText, Text: "4"},
			}},
			vocab.UserText("Read a.txt and b.txt"),
			{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
				{Kind: vocab.PartThinking, Text: "A block cut off"},
				{Kind: vocab.PartThinking, Text: "Another provider's thinking", Provider: "anthropic", Signature: "c2lnbmF0dXJl"},
				{Kind: vocab.PartThinking, Text: "Both files, in parallel.", Provider: provider},
				{Kind: vocab.PartText, Text: "Reading both."},
				call("call_a1", "read_file", `{"path":"a.txt"}`),
				call("call_b2", "read_file", `{"path": "b.txt"`),
			}},
			vocab.ToolMessage(vocab.ToolResult{CallID: "call_a1", Name: "read_file", Content: "alpha"}),
			vocab.ToolMessage(vocab.ToolResult{CallID: "call_b2", Name: "read_file", Content: "arguments are not JSON",
				IsError: true, Code: vocab.CodeToolBadArguments, Note: "Fix the JSON and call again."}),
			{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
				call("call_c3", "list_files", ""),
			}},
			vocab.ToolMessage(vocab.ToolResult{CallID: "call_c3", Name: "list_files", Content: "a.txt\nb.txt"}),
			{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
				{Kind: vocab.PartThinking, Text: "Answer now.", Provider: provider},
				{Kind: vocab.PartText, Text: "a.txt says alpha."},
			}},
			vocab.UserText("Thanks"),
		},
		Tools: []vocab.ToolSpec{
			{Name: "read_file", Description: "Read a file.",
				Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"A path."}},"required":["path"],"additionalProperties":false}`)},
			{Name: "list_files"},
		},
		MaxTokens: 1024,
	}
}

// TestGoldenRequests compares the request bodies each server row gets
// with testdata/providers/openai/requests/*.json (-update rewrites them).
func TestGoldenRequests(t *testing.T) {
	temp := 0.2
	cases := []struct {
		name, server, model string
		req                 vocab.Request
		edit                func(*openai.Options)
	}{
		{"openai_history", "openai", "gpt-4o", history("openai/openai"), func(o *openai.Options) {
			o.Temperature, o.MaxTokens = &temp, 512
		}},
		{"openai_minimal", "openai", "gpt-4o-mini", userRequest("hi"), nil},
		{"deepseek_history", "deepseek", "deepseek-chat", history("openai/deepseek"), nil},
		{"deepseek_reasoner_history", "deepseek", "deepseek-reasoner", history("openai/deepseek"), nil},
		{"moonshot_history", "moonshot", "kimi-k2-thinking", history("openai/moonshot"), nil},
		{"vllm_history", "vllm", "Qwen/Qwen3-8B", history("openai/vllm"), nil},
		{"ollama_history", "ollama", "qwen3:8b", history("openai/ollama"), nil},
		{"llamacpp_history", "llamacpp", "gpt-oss-20b", history("openai/llamacpp"), nil},
		{"mistral_history", "mistral", "mistral-large-latest", history("openai/mistral"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := wiretest.Serve(t, fixture("plain.sse"))
			p := newProvider(t, srv.URL, tc.server, func(o *openai.Options) {
				o.Model = tc.model
				if tc.edit != nil {
					tc.edit(o)
				}
			})
			if _, err := collect(p, context.Background(), tc.req); err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			wiretest.Golden(t, filepath.Join(fixtureDir, "requests", tc.name+".json"), wiretest.Canonical(t, reqs[0].Body), *update)
		})
	}
}

// TestRequestModelOverride: a request's model wins over the option's.
func TestRequestModelOverride(t *testing.T) {
	srv := wiretest.Serve(t, fixture("plain.sse"))
	req := userRequest("hi")
	req.Model = "gpt-4.1"
	if _, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var body struct{ Model string }
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil || body.Model != "gpt-4.1" {
		t.Errorf("model %q (%v)", body.Model, err)
	}
}

// TestRequestHeaders checks the headers through an allowlist: the key
// as a bearer token, JSON, the extra headers.
func TestRequestHeaders(t *testing.T) {
	srv := wiretest.Serve(t, fixture("plain.sse"))
	p := newProvider(t, srv.URL, "openai", func(o *openai.Options) {
		o.Headers = http.Header{"X-Team": {"loopchart"}, "X-Trace": {"a", "b"}}
	})
	if _, err := collect(p, context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header.Clone()
	if auth := h.Get("Authorization"); auth == "Bearer "+testKey {
		h.Set("Authorization", "Bearer <test key>")
	}
	got := wiretest.Headers(h, "Authorization", "Content-Type", "X-Team", "X-Trace")
	want := "Authorization: Bearer <test key>\nContent-Type: application/json\nX-Team: loopchart\nX-Trace: a\nX-Trace: b"
	if got != want {
		t.Errorf("headers:\n%s\nwant:\n%s", got, want)
	}
}

// TestNoKeyForLocalServer: a local server needs no key, and none is sent.
func TestNoKeyForLocalServer(t *testing.T) {
	t.Setenv(openai.EnvAPIKey, "")
	srv := wiretest.Serve(t, fixture("plain.sse"))
	p, err := openai.New(openai.Options{BaseURL: srv.URL + "/v1", Model: "llama3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(p, context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "" {
		t.Errorf("path %s, Authorization %q", r.Path, r.Header.Get("Authorization"))
	}
}

// TestBadSchema: a tool schema that is not a JSON object fails the
// request before it is sent.
func TestBadSchema(t *testing.T) {
	srv := wiretest.Serve(t)
	req := userRequest("hi")
	req.Tools = []vocab.ToolSpec{{Name: "broken", Schema: json.RawMessage(`["not", "an", "object"]`)}}
	_, err := collect(newProvider(t, srv.URL, "openai"), context.Background(), req)
	if vocab.CodeOf(err) != vocab.CodeBadInput || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("error %v", err)
	}
}

// TestNew checks the options.
func TestNew(t *testing.T) {
	t.Setenv(openai.EnvAPIKey, "")
	bad := func(v float64) *float64 { return &v }
	cases := []struct {
		name string
		o    openai.Options
		code vocab.Code
		msg  string
	}{
		{"no model", openai.Options{APIKey: "k"}, vocab.CodeBadInput, "model"},
		{"negative max", openai.Options{APIKey: "k", Model: "m", MaxTokens: -1}, vocab.CodeBadInput, "MaxTokens"},
		{"hot", openai.Options{APIKey: "k", Model: "m", Temperature: bad(2.5)}, vocab.CodeBadInput, "temperature"},
		{"cold", openai.Options{APIKey: "k", Model: "m", Temperature: bad(-0.1)}, vocab.CodeBadInput, "temperature"},
		{"unknown server", openai.Options{APIKey: "k", Model: "m", Server: "azure"}, vocab.CodeBadInput, `"azure"`},
		{"bad url", openai.Options{APIKey: "k", Model: "m", BaseURL: "ftp://x"}, vocab.CodeBadInput, "base URL"},
		{"url with query", openai.Options{APIKey: "k", Model: "m", BaseURL: "https://h/v1?key=secret"}, vocab.CodeBadInput, "base URL"},
		{"bad header", openai.Options{APIKey: "k", Model: "m", Headers: http.Header{"Bad Name": {"x"}}}, vocab.CodeBadInput, "header"},
		{"no key", openai.Options{Model: "m"}, vocab.CodeAuth, "set " + openai.EnvAPIKey},
		{"no key, default URL spelled", openai.Options{Model: "m", BaseURL: openai.DefaultBaseURL + "/"}, vocab.CodeAuth, "set OPENAI_API_KEY"},
	}
	for _, tc := range cases {
		p, err := openai.New(tc.o)
		var e *vocab.Error
		if p != nil || !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %v, want %s containing %q", tc.name, err, tc.code, tc.msg)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error names the URL's query: %v", tc.name, err)
		}
	}
	// The key from the environment; a local server without one.
	t.Setenv(openai.EnvAPIKey, "sk-from-env")
	if _, err := openai.New(openai.Options{Model: "m"}); err != nil {
		t.Errorf("key from env: %v", err)
	}
	os.Unsetenv(openai.EnvAPIKey)
	if _, err := openai.New(openai.Options{Model: "m", BaseURL: "http://localhost:8080/v1"}); err != nil {
		t.Errorf("local server: %v", err)
	}
	// Each hosted API names its own variable.
	t.Setenv("DEEPSEEK_API_KEY", "")
	if _, err := openai.New(openai.Options{Model: "m", BaseURL: "https://api.deepseek.com"}); vocab.CodeOf(err) != vocab.CodeAuth ||
		!strings.Contains(err.Error(), "set DEEPSEEK_API_KEY") {
		t.Errorf("deepseek without a key: %v", err)
	}
}

// TestKeyNeverGoesToAnotherServer: OpenAI's key in the environment is
// not sent to a server that is not OpenAI's API.
func TestKeyNeverGoesToAnotherServer(t *testing.T) {
	t.Setenv(openai.EnvAPIKey, "sk-openai-only")
	srv := wiretest.Serve(t, fixture("plain.sse"))
	p, err := openai.New(openai.Options{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(p, context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	if a := srv.Requests()[0].Header.Get("Authorization"); a != "" {
		t.Errorf("a local server got Authorization %q", a)
	}
}

// TestServerGuess: the base URL's host picks the row.
func TestServerGuess(t *testing.T) {
	cases := map[string]string{
		"":                            "openai/openai",
		"https://api.openai.com/v1":   "openai/openai",
		"https://api.deepseek.com":    "openai/deepseek",
		"https://api.deepseek.com/v1": "openai/deepseek",
		"https://api.moonshot.ai/v1":  "openai/moonshot",
		"https://api.moonshot.cn/v1":  "openai/moonshot",
		"https://api.mistral.ai/v1":   "openai/mistral",
		"http://localhost:11434/v1":   "openai/ollama",
		"http://gpu-box:11434/v1":     "openai/ollama",
		"http://localhost:8000/v1":    "openai/openai",
	}
	for base, want := range cases {
		p, err := openai.New(openai.Options{BaseURL: base, APIKey: "k", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != want {
			t.Errorf("%q: %s, want %s", base, p.Name(), want)
		}
	}
	p, _ := openai.New(openai.Options{BaseURL: "https://api.deepseek.com", APIKey: "k", Model: "m", Server: "vllm"})
	if p.Name() != "openai/vllm" {
		t.Errorf("explicit server: %s", p.Name())
	}
}

// TestServerTable checks the table's data, and which of each row's
// context-overflow phrases wire.ContextOverflowMessage knows; the adapter
// classifies the others itself.
func TestServerTable(t *testing.T) {
	rows := openai.Servers()
	want := []string{"openai", "deepseek", "moonshot", "vllm", "ollama", "llamacpp", "mistral"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		if r.Name != want[i] {
			t.Errorf("row %d: %s, want %s", i, r.Name, want[i])
		}
		if r.MaxTokensField != openai.FieldMaxTokens && r.MaxTokensField != openai.FieldMaxCompletionTokens {
			t.Errorf("%s: max tokens field %q", r.Name, r.MaxTokensField)
		}
		if len(r.Overflow) == 0 || r.Usage == "" {
			t.Errorf("%s: no overflow phrases or usage note", r.Name)
		}
		for _, phrase := range r.Overflow {
			if phrase != strings.ToLower(phrase) {
				t.Errorf("%s: phrase %q is not lower case", r.Name, phrase)
			}
			if !wire.ContextOverflowMessage(phrase) {
				t.Logf("%s: wire.ContextOverflowMessage does not know %q (the adapter classifies it)", r.Name, phrase)
			}
		}
	}
	rows[0].Hosts[0] = "changed"
	if openai.Servers()[0].Hosts[0] == "changed" {
		t.Error("Servers returns the table itself")
	}
}

// TestOverflowPhrases: a 400 with each row's context-overflow phrase is
// llm.context_overflow.
func TestOverflowPhrases(t *testing.T) {
	for _, r := range openai.Servers() {
		for _, phrase := range r.Overflow {
			srv := newErrorServer(t, 400, `{"error":{"message":"Invalid request: `+phrase+` (4096)","type":"invalid_request_error"}}`)
			_, err := collect(newProvider(t, srv, r.Name), context.Background(), userRequest("hi"))
			if vocab.CodeOf(err) != vocab.CodeContextOverflow {
				t.Errorf("%s %q: %v", r.Name, phrase, err)
			}
		}
	}
}

// newErrorServer answers every request with status and body.
func newErrorServer(t *testing.T, status int, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFlattenSchemas: with FlattenSchemas, a tool's $refs are inlined
// and its type arrays become anyOf before the request is sent; a schema
// that cannot be flattened fails the request before it is sent.
func TestFlattenSchemas(t *testing.T) {
	srv := wiretest.Serve(t, fixture("plain.sse"))
	p := newProvider(t, srv.URL, "llamacpp", func(o *openai.Options) { o.FlattenSchemas = true })
	req := userRequest("hi")
	req.Tools = []vocab.ToolSpec{{Name: "find", Schema: json.RawMessage(
		`{"type":"object","properties":{"where":{"$ref":"#/$defs/place"},"n":{"type":["integer","null"]}},"$defs":{"place":{"type":"string"}}}`)}}
	if _, err := collect(p, context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Tools []struct {
			Function struct {
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil || len(body.Tools) != 1 {
		t.Fatalf("body %s: %v", srv.Requests()[0].Body, err)
	}
	got := wiretest.Canonical(t, body.Tools[0].Function.Parameters)
	want := wiretest.Canonical(t, []byte(`{"type":"object","properties":{"where":{"type":"string"},"n":{"anyOf":[{"type":"integer"},{"type":"null"}]}}}`))
	if got != want {
		t.Errorf("parameters:\n%s\nwant:\n%s", got, want)
	}

	req.Tools[0].Schema = json.RawMessage(`{"$ref":"#"}`)
	bad := wiretest.Serve(t) // a request would fail the test
	_, err := collect(newProvider(t, bad.URL, "llamacpp", func(o *openai.Options) { o.FlattenSchemas = true }), context.Background(), req)
	if vocab.CodeOf(err) != vocab.CodeBadInput || !strings.Contains(err.Error(), `"find"`) {
		t.Errorf("recursive schema: %v", err)
	}
}
