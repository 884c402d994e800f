package anthropic_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/vocab"
)

func ptr[T any](v T) *T { return &v }

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		o    anthropic.Options
	}{
		{"no model", anthropic.Options{}},
		{"blank model", anthropic.Options{Model: "  "}},
		{"negative max tokens", anthropic.Options{Model: testModel, MaxTokens: -1}},
		{"temperature above 1", anthropic.Options{Model: testModel, Temperature: ptr(1.5)}},
		{"temperature below 0", anthropic.Options{Model: testModel, Temperature: ptr(-0.1)}},
		{"temperature NaN", anthropic.Options{Model: testModel, Temperature: ptr(math.NaN())}},
		{"negative budget", anthropic.Options{Model: testModel, ThinkingBudget: -1}},
		{"budget below minimum", anthropic.Options{Model: testModel, ThinkingBudget: 1023}},
		{"budget at default max tokens", anthropic.Options{Model: testModel, ThinkingBudget: anthropic.DefaultMaxTokens}},
		{"budget above max tokens", anthropic.Options{Model: testModel, MaxTokens: 2000, ThinkingBudget: 2000}},
		{"thinking with temperature", anthropic.Options{Model: testModel, ThinkingBudget: 1024, Temperature: ptr(0.5)}},
		{"base URL scheme", anthropic.Options{Model: testModel, BaseURL: "ftp://example.com"}},
		{"base URL without host", anthropic.Options{Model: testModel, BaseURL: "http://"}},
		{"base URL unparsable", anthropic.Options{Model: testModel, BaseURL: "http://[::1"}},
		{"base URL with user", anthropic.Options{Model: testModel, BaseURL: "http://user:pw@example.com"}},
		{"base URL with query", anthropic.Options{Model: testModel, BaseURL: "http://example.com/?key=x"}},
		{"header name", anthropic.Options{Model: testModel, Headers: http.Header{"Bad Header": {"x"}}}},
		{"header value", anthropic.Options{Model: testModel, Headers: http.Header{"X-Ok": {"a\r\nX-Injected: b"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.APIKey = testKey
			p, err := anthropic.New(tc.o)
			if p != nil || vocab.CodeOf(err) != vocab.CodeBadInput {
				t.Fatalf("New = %v, %v; want a bad input error", p, err)
			}
			if strings.Contains(err.Error(), "pw@") || strings.Contains(err.Error(), "key=x") {
				t.Errorf("error %q shows the URL's secrets", err)
			}
		})
	}
	valid := []anthropic.Options{
		{Model: testModel, Temperature: ptr(0.0)},
		{Model: testModel, Temperature: ptr(1.0), ThinkingBudget: 1024},
		{Model: testModel, ThinkingBudget: anthropic.DefaultMaxTokens - 1},
		{Model: testModel, MaxTokens: 100000, ThinkingBudget: 32000},
		{Model: testModel, BaseURL: "http://localhost:8080/proxy/"},
	}
	for _, o := range valid {
		o.APIKey = testKey
		if _, err := anthropic.New(o); err != nil {
			t.Errorf("New(%+v): %v", o, err)
		}
	}
}

func TestNewAPIKey(t *testing.T) {
	t.Setenv(anthropic.EnvAPIKey, "")
	for _, base := range []string{"", anthropic.DefaultBaseURL, anthropic.DefaultBaseURL + "/"} {
		_, err := anthropic.New(anthropic.Options{Model: testModel, BaseURL: base})
		e := vocab.AsError(err)
		if e == nil || e.Code != vocab.CodeAuth || !strings.Contains(e.Message, "set ANTHROPIC_API_KEY") {
			t.Errorf("base %q: error %v, want llm.auth naming %s", base, err, anthropic.EnvAPIKey)
		}
	}
	// A custom base URL (a proxy, a local server) needs no key.
	srv := wiretest.Serve(t, fixture("text.sse"))
	p, err := anthropic.New(anthropic.Options{Model: testModel, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, p, context.Background(), hello()); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
		t.Errorf("a key was sent: %v", h)
	}
	if p.Name() != "anthropic" {
		t.Errorf("Name() = %q", p.Name())
	}
}

// TestNewAPIKeyFromEnv: without Options.APIKey, New reads EnvAPIKey for
// Anthropic's API, and only for it.
func TestNewAPIKeyFromEnv(t *testing.T) {
	t.Setenv(anthropic.EnvAPIKey, "sk-ant-from-env-000")
	if _, err := anthropic.New(anthropic.Options{Model: testModel}); err != nil {
		t.Fatalf("default base URL with the key in the environment: %v", err)
	}
	srv := wiretest.Serve(t, fixture("text.sse"))
	p, err := anthropic.New(anthropic.Options{Model: testModel, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, p, context.Background(), hello()); err != nil {
		t.Fatal(err)
	}
	// A base URL of one's own gets no key from the environment: the key
	// is for Anthropic's API only.
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization %q sent to another server", got)
	}
}

// poisonEnv sets every variable the SDK reads from the environment to a
// value that must not reach the request. It returns the poisoned base
// URL's server, which must see no request.
func poisonEnv(t *testing.T) *httptest.Server {
	t.Helper()
	poison := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the server of ANTHROPIC_BASE_URL: %s %s", r.Method, r.URL)
		http.Error(w, "poisoned", http.StatusTeapot)
	}))
	t.Cleanup(poison.Close)
	env := map[string]string{
		"ANTHROPIC_API_KEY":                                 "poison-env-api-key",
		"ANTHROPIC_BASE_URL":                                poison.URL,
		"ANTHROPIC_AUTH_TOKEN":                              "poison-auth-token",
		"ANTHROPIC_CUSTOM_HEADERS":                          "X-Poison: custom-header\nX-Poison-Two: poison-two",
		"ANTHROPIC_PROFILE":                                 "poison-profile",
		"ANTHROPIC_CONFIG_DIR":                              t.TempDir(),
		"ANTHROPIC_WEBHOOK_SIGNING_KEY":                     "poison-webhook-key",
		"ANTHROPIC_FEDERATION_RULE_ID":                      "poison-rule",
		"ANTHROPIC_ORGANIZATION_ID":                         "poison-org",
		"ANTHROPIC_IDENTITY_TOKEN":                          "poison-identity-token",
		"ANTHROPIC_IDENTITY_TOKEN_FILE":                     "poison-identity-token-file",
		"ANTHROPIC_SERVICE_ACCOUNT_ID":                      "poison-service-account",
		"ANTHROPIC_WORKSPACE_ID":                            "poison-workspace",
		"ANTHROPIC_SCOPE":                                   "poison-scope",
		"ANTHROPIC_OPEN_TELEMETRY":                          "true",
		"ANTHROPIC_OPEN_TELEMETRY_PROPAGATION":              "true",
		"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE":      "content",
		"ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES": "10",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	return poison
}

// traced returns a context holding a valid remote span context, with the
// W3C trace-context propagator set globally (restored after the test).
// A client that traces its calls sends a traceparent from it.
func traced(t *testing.T) context.Context {
	t.Helper()
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// TestNoEnvironmentDefaults: with every SDK variable poisoned and a global
// OTel propagator set, the request reaches the configured server with the
// configured key, and nothing from the environment or the tracer.
func TestNoEnvironmentDefaults(t *testing.T) {
	poisonEnv(t)
	ctx := traced(t)
	srv := wiretest.Serve(t, fixture("text.sse"))
	p := newProvider(t, srv.URL)
	parts, err := collect(t, p, ctx, hello())
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) == 0 {
		t.Fatal("no parts")
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the configured server", len(reqs))
	}
	h := reqs[0].Header
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(strings.ToLower(k+": "+v), "poison") {
				t.Errorf("header %s: %s comes from the environment", k, v)
			}
		}
	}
	if got := h.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization %q, want the configured key", got)
	}
	for _, k := range []string{"Traceparent", "Tracestate", "Anthropic-Workspace-Id"} {
		if v := h.Get(k); v != "" {
			t.Errorf("%s: %q sent", k, v)
		}
	}
}

// TestTraceparentControl shows the setup of TestNoEnvironmentDefaults can
// see a leak: an SDK client with its telemetry left on sends traceparent.
func TestTraceparentControl(t *testing.T) {
	ctx := traced(t)
	srv := wiretest.Serve(t, fixture("text.sse"))
	client := sdk.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(srv.URL), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	stream := client.Messages.NewStreaming(ctx, sdk.MessageNewParams{Model: testModel, MaxTokens: 10, Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}})
	for stream.Next() {
	}
	_ = stream.Close()
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Header.Get("Traceparent"); !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("control: traceparent %q; the leak test would see nothing", got)
	}
}
