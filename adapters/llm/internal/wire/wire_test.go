package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"milliseconds win", map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{"bad milliseconds fall back", map[string]string{"Retry-After-Ms": "soon", "Retry-After": "2"}, 2 * time.Second},
		{"http date", map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second},
		{"past date", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"negative", map[string]string{"Retry-After": "-4"}, 0},
		{"garbage", map[string]string{"Retry-After": "tomorrow"}, 0},
		{"capped", map[string]string{"Retry-After": "86400"}, MaxRetryAfter},
		{"huge", map[string]string{"Retry-After": "1e300"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			if got := RetryAfter(h, now, MaxRetryAfter); got != tt.want {
				t.Errorf("RetryAfter(%v) = %v, want %v", tt.headers, got, tt.want)
			}
		})
	}
}

var idRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func TestIDsAreSafeAndUnique(t *testing.T) {
	var ids IDs
	in := []string{"call_1", "call_1", "", "toolu_01A", "call.2/x", "call_2_x", "", strings.Repeat("z", 100), "call_1"}
	seen := map[string]bool{}
	var got []string
	for _, id := range in {
		out := ids.Normalize(id)
		if !idRE.MatchString(out) || len(out) > 64 {
			t.Errorf("Normalize(%q) = %q: not a safe id", id, out)
		}
		if seen[out] {
			t.Errorf("Normalize(%q) = %q: a duplicate", id, out)
		}
		seen[out] = true
		got = append(got, out)
	}
	// Valid, unused ids are kept as the model wrote them.
	if got[0] != "call_1" || got[3] != "toolu_01A" {
		t.Errorf("valid ids changed: %q", got)
	}
	if got[1] != "call_1_2" || got[8] != "call_1_3" {
		t.Errorf("duplicates got %q and %q, want call_1_2 and call_1_3", got[1], got[8])
	}
}

func TestSafeIDLongIDsStayDistinct(t *testing.T) {
	a, b := strings.Repeat("x", 70)+"a", strings.Repeat("x", 70)+"b"
	if SafeID(a) == SafeID(b) || len(SafeID(a)) > 64 {
		t.Errorf("SafeID of two long ids: %q, %q", SafeID(a), SafeID(b))
	}
}

func TestMistralID(t *testing.T) {
	re := regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)
	for _, id := range []string{"call_abc123", "", "toolu_01XYZ", "abcDEF123"} {
		m := MistralID(id)
		if !re.MatchString(m) {
			t.Errorf("MistralID(%q) = %q", id, m)
		}
		if MistralID(id) != m {
			t.Errorf("MistralID(%q) is not deterministic", id)
		}
	}
	if MistralID("abcDEF123") != "abcDEF123" {
		t.Error("a valid Mistral id was changed")
	}
	if MistralID("call_1") == MistralID("call_2") {
		t.Error("two ids map to one")
	}
}

func TestRedact(t *testing.T) {
	key := "sk-secret-123456"
	s := `POST "https://user:pw@api.example.com/v1/chat?key=` + key + `": 401 Unauthorized {"error":"bad key ` + key + `"}`
	got := Redact(s, key)
	for _, leak := range []string{key, "user:pw", "?key"} {
		if strings.Contains(got, leak) {
			t.Errorf("Redact left %q in %q", leak, got)
		}
	}
	if !strings.Contains(got, "https://api.example.com/v1/chat") || !strings.Contains(got, "401 Unauthorized") {
		t.Errorf("Redact removed too much: %q", got)
	}
	if got := Redact("see https://h/x?q=1. Then", ""); got != "see https://h/x. Then" {
		t.Errorf("Redact kept or lost punctuation: %q", got)
	}
	if Redact("abc", "") != "abc" {
		t.Error("an empty secret must not redact everything")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		f         Failure
		code      vocab.Code
		retryable bool
	}{
		{Failure{Status: 429, Type: "rate_limit_error"}, vocab.CodeRateLimited, true},
		{Failure{Status: 429, Code: "insufficient_quota", Message: "You exceeded your current quota"}, vocab.CodeQuotaExhausted, false},
		{Failure{Status: 400, Type: "invalid_request_error", Message: "Your credit balance is too low to access the API"}, vocab.CodeQuotaExhausted, false},
		{Failure{Status: 400, Type: "billing_error"}, vocab.CodeQuotaExhausted, false},
		{Failure{Status: 529, Type: "overloaded_error"}, vocab.CodeRateLimited, true},
		{Failure{Status: 200, Type: "overloaded_error", Message: "Overloaded"}, vocab.CodeRateLimited, true},
		{Failure{Status: 0, Type: "server_error"}, vocab.CodeServer, true},
		{Failure{Status: 500, Type: "api_error"}, vocab.CodeServer, true},
		{Failure{Status: 502}, vocab.CodeServer, true},
		{Failure{Status: 503}, vocab.CodeServer, true},
		{Failure{Status: 504}, vocab.CodeServer, true},
		{Failure{Status: 408}, vocab.CodeTimeout, true},
		{Failure{Status: 409}, vocab.CodeRequestRejected, true},
		{Failure{Status: 401, Type: "authentication_error"}, vocab.CodeAuth, false},
		{Failure{Status: 403, Type: "permission_error"}, vocab.CodeAuth, false},
		{Failure{Status: 404, Code: "model_not_found"}, vocab.CodeModelNotFound, false},
		{Failure{Status: 413, Type: "request_too_large"}, vocab.CodeContextOverflow, false},
		{Failure{Status: 400, Code: "context_length_exceeded"}, vocab.CodeContextOverflow, false},
		{Failure{Status: 400, Type: "invalid_request_error", Message: "prompt is too long: 210000 tokens > 200000 maximum"}, vocab.CodeContextOverflow, false},
		{Failure{Status: 400, Message: "the request exceeds the available context size, try increasing it"}, vocab.CodeContextOverflow, false},
		{Failure{Status: 400, Type: "invalid_request_error", Message: "messages: field required"}, vocab.CodeRequestRejected, false},
		{Failure{Status: 422}, vocab.CodeRequestRejected, false},
		{Failure{}, vocab.CodeServer, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s%s", tt.f.Status, tt.f.Type, tt.f.Code), func(t *testing.T) {
			e := Classify(tt.f)
			if e.Code != tt.code || e.Retryable != tt.retryable || e.Status != tt.f.Status {
				t.Errorf("Classify(%+v) = %s retryable=%v status=%d, want %s retryable=%v", tt.f, e.Code, e.Retryable, e.Status, tt.code, tt.retryable)
			}
			if !errors.Is(e, tt.code.Err()) {
				t.Errorf("errors.Is(%v, %s) is false", e, tt.code)
			}
		})
	}
}

func TestClassifyRedactsAndKeepsRetryAfter(t *testing.T) {
	e := Classify(Failure{Provider: "openai", Status: 429, Type: "rate_limit_error", RetryAfter: 2 * time.Second,
		Message: "slow down, key sk-abcdef0123"}, "sk-abcdef0123")
	if strings.Contains(e.Error(), "sk-abcdef0123") {
		t.Errorf("the key leaked: %v", e)
	}
	if e.RetryAfter != 2*time.Second || !strings.HasPrefix(e.Message, "openai 429 rate_limit_error: ") {
		t.Errorf("Classify = %+v", e)
	}
}

func TestTransport(t *testing.T) {
	e := Transport("anthropic", errors.New(`Post "https://api.anthropic.com/v1/messages?beta=true": connection refused`))
	if e.Code != vocab.CodeTransport || !e.Retryable || strings.Contains(e.Message, "beta=true") {
		t.Errorf("Transport = %+v", e)
	}
	c := Transport("anthropic", fmt.Errorf("read body: %w", context.Canceled))
	if c.Code != vocab.CodeCancelled || c.Retryable {
		t.Errorf("Transport of a cancellation = %+v, want agent.cancelled", c)
	}
	d := Transport("openai", fmt.Errorf("client timeout: %w", context.DeadlineExceeded))
	if d.Code != vocab.CodeTransport || !d.Retryable {
		t.Errorf("Transport of a client timeout = %+v, want retryable llm.transport", d)
	}
}

// keyRE matches keys the fuzz test checks: long enough, and not made of
// what redaction writes.
var keyRE = regexp.MustCompile(`^[a-z0-9]*[0-9][a-z0-9]*-[a-z0-9-]{6,}$`)

func FuzzRedact(f *testing.F) {
	f.Add("see https://u:p@host/x?k=sk1-secretkey now", "sk1-secretkey")
	f.Add("http://", "abcd")
	f.Add("https://[::1", "zzzz")
	f.Fuzz(func(t *testing.T, s, key string) {
		got := Redact(s, key)
		if keyRE.MatchString(key) && strings.Contains(got, key) {
			t.Errorf("Redact(%q, %q) = %q keeps the key", s, key, got)
		}
	})
}

func FuzzIDs(f *testing.F) {
	f.Add("call_1", "call_1", "")
	f.Add("a.b", "a_b", "a_b_2")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		var ids IDs
		seen := map[string]bool{}
		for _, id := range []string{a, b, c, a} {
			out := ids.Normalize(id)
			if !idRE.MatchString(out) || seen[out] {
				t.Fatalf("Normalize(%q) = %q (seen %v)", id, out, seen)
			}
			seen[out] = true
		}
	})
}
