package anthropic_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/vocab"
)

func user(s string) vocab.Message { return vocab.UserText(s) }

func steer(s string) vocab.Message {
	return vocab.Message{Role: vocab.RoleUser, Source: vocab.SourceSteer, Parts: []vocab.Part{{Kind: vocab.PartText, Text: s}}}
}

func assistant(parts ...vocab.Part) vocab.Message {
	return vocab.Message{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: parts}
}

func textPart(s string) vocab.Part { return vocab.Part{Kind: vocab.PartText, Text: s} }

func callPart(id, name, args string) vocab.Part {
	return vocab.Part{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}}
}

func result(id, name, content string, isErr bool) vocab.Message {
	return vocab.ToolMessage(vocab.ToolResult{CallID: id, Name: name, Content: content, IsError: isErr})
}

var echoSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"what to echo"}},"required":["text"],"additionalProperties":false}`)

// requestCases are representative requests; their bodies are kept in
// testdata/providers/anthropic/requests/NAME.json.
var requestCases = []struct {
	name string
	opt  func(*anthropic.Options)
	req  vocab.Request
}{
	{
		name: "basic",
		opt: func(o *anthropic.Options) {
			t := 0.5
			o.Temperature = &t
		},
		req: vocab.Request{
			System:    "You are terse.",
			Messages:  []vocab.Message{user("hi"), {Role: vocab.RoleUser, Parts: []vocab.Part{textPart("  ")}}},
			MaxTokens: 1000,
		},
	},
	{
		name: "model_override",
		req:  vocab.Request{Model: "claude-other-model", Messages: []vocab.Message{user("hi")}},
	},
	{
		name: "tools",
		req: vocab.Request{
			Messages: []vocab.Message{user("echo ping")},
			Tools: []vocab.ToolSpec{
				{Name: "echo", Description: "Echo the text back.", Schema: echoSchema},
				{Name: "now", Description: "The current time."},
				{Name: "empty_schema", Schema: json.RawMessage(`{}`)},
				{Name: "draft", Schema: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"n":{"type":"integer","minimum":1}}}`)},
			},
		},
	},
	{
		// Thinking in every shape, with extended thinking on.
		name: "thinking_history",
		opt:  func(o *anthropic.Options) { o.ThinkingBudget = 2048 },
		req: vocab.Request{
			System: "Think first.",
			Messages: []vocab.Message{
				user("What is 27 * 453?"),
				assistant(
					vocab.Part{Kind: vocab.PartThinking, Text: "27 * 453 = 12231.", Provider: "anthropic", Signature: "sig-anthropic-1"},
					vocab.Part{Kind: vocab.PartThinking, Provider: "anthropic", Redacted: "redacted-data-1"},
					vocab.Part{Kind: vocab.PartThinking, Text: "unsigned thinking", Provider: "anthropic"},
					vocab.Part{Kind: vocab.PartThinking, Text: "another provider's", Provider: "openai/deepseek", Signature: "not-ours"},
					textPart("12231"),
				),
				user("And 12231 / 3?"),
				// A reply cut off after a cancel: partial thinking only.
				assistant(vocab.Part{Kind: vocab.PartThinking, Text: "Half a thou"}),
				user("Well?"),
			},
		},
	},
	{
		// Tool rounds: calls (one with malformed arguments), results (one
		// an error), a steer after the results, ids from another provider.
		name: "tool_history",
		req: vocab.Request{
			Messages: []vocab.Message{
				user("Read a.txt and b.txt."),
				assistant(
					textPart("Reading both."),
					callPart("toolu_01A", "read_file", `{"path": "a.txt"}`),
					callPart("toolu_01B", "read_file", `{"path": "b.txt",`),
					callPart("call:xyz/1", "list", ``),
					callPart("toolu_01C", "read_file", `["not", "an", "object"]`),
				),
				result("toolu_01A", "read_file", "alpha", false),
				result("toolu_01B", "read_file", "tool.bad_arguments: the arguments are not JSON", true),
				steer("Also check c.txt."),
				result("call:xyz/1", "list", "", false),
				{Role: vocab.RoleTool, Source: vocab.SourceTool, Result: &vocab.ToolResult{CallID: "toolu_01C", Name: "read_file", Content: "gamma", Note: "(truncated)"}},
				assistant(textPart("")),
				user("Thanks"),
			},
			Tools: []vocab.ToolSpec{{Name: "read_file", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}, {Name: "list"}},
		},
	},
}

// TestRequestGolden compares the request bodies with their golden files
// (go test -update rewrites them).
func TestRequestGolden(t *testing.T) {
	for _, tc := range requestCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := wiretest.Serve(t, fixture("text.sse"))
			var edits []func(*anthropic.Options)
			if tc.opt != nil {
				edits = append(edits, tc.opt)
			}
			p := newProvider(t, srv.URL, edits...)
			if _, err := collect(t, p, context.Background(), tc.req); err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			got := wiretest.Canonical(t, reqs[0].Body)
			wiretest.Golden(t, filepath.Join(fixtureDir, "requests", tc.name+".json"), got, *update)
		})
	}
}

// TestRequestReadOnly: building a request leaves the caller's request as
// it was (its slices are shared with the session).
func TestRequestReadOnly(t *testing.T) {
	for _, tc := range requestCases {
		before, _ := json.Marshal(tc.req)
		srv := wiretest.Serve(t, fixture("text.sse"))
		p := newProvider(t, srv.URL, func(o *anthropic.Options) {
			if tc.opt != nil {
				tc.opt(o)
			}
		})
		if _, err := collect(t, p, context.Background(), tc.req); err != nil {
			t.Fatal(err)
		}
		if after, _ := json.Marshal(tc.req); string(after) != string(before) {
			t.Errorf("%s: request changed:\n%s\n%s", tc.name, before, after)
		}
	}
}

// headerAllow lists the headers compared; the SDK's others carry versions
// and platforms.
var headerAllow = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Content-Type", "Anthropic-Beta", "X-Team", "Traceparent", "Tracestate"}

// secretHeaders stand for the key: compared as "[set]".
var secretHeaders = []string{"Authorization", "X-Api-Key"}

func headerText(h http.Header) string {
	h = h.Clone()
	for _, k := range secretHeaders {
		if vs := h.Values(k); len(vs) > 0 {
			h.Del(k)
			for range vs {
				h.Add(k, "[set]")
			}
		}
	}
	return wiretest.Headers(h, headerAllow...)
}

// TestRequestHeaders checks the headers through an allowlist: the key is
// set (the SDK sends it as a bearer token), the API version and the extra
// headers are there, and no trace context is.
func TestRequestHeaders(t *testing.T) {
	srv := wiretest.Serve(t, fixture("text.sse"))
	p := newProvider(t, srv.URL, func(o *anthropic.Options) {
		o.Headers = http.Header{"X-Team": {"alpha"}, "Anthropic-Beta": {"feature-one", "feature-two"}}
	})
	if _, err := collect(t, p, context.Background(), hello()); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	want := "Anthropic-Beta: feature-one\n" +
		"Anthropic-Beta: feature-two\n" +
		"Anthropic-Version: 2026-10-21\n" +
		"Authorization: [set]\n" +
		"Content-Type: application/json\n" +
		"X-Team: alpha"
	if got := headerText(h); got != want {
		t.Errorf("headers:\n%s\nwant:\n%s", got, want)
	}
	if got := h.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization %q does not carry the key", got)
	}
	if v := h.Get("Traceparent"); v != "" {
		t.Errorf("traceparent %q sent", v)
	}
}

// TestThinkingBudgetAboveRequestMax: a request whose max tokens leave no
// room for the thinking budget is refused before it is sent.
func TestThinkingBudgetAboveRequestMax(t *testing.T) {
	srv := wiretest.Serve(t)
	p := newProvider(t, srv.URL, func(o *anthropic.Options) { o.ThinkingBudget = 2048 })
	req := hello()
	req.MaxTokens = 2000
	_, err := collect(t, p, context.Background(), req)
	if e := vocab.AsError(err); e == nil || e.Code != vocab.CodeBadInput || e.Retryable {
		t.Fatalf("error %v, want a bad input", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}
