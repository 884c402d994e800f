// Package wire holds what the provider adapters share about the wire:
// Retry-After parsing, tool call id normalisation, redaction of secrets
// and classification of provider errors into the machine's failure kinds.
package wire

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// MaxRetryAfter caps a provider's suggested delay: a server asking for an
// hour is not waited on blindly.
const MaxRetryAfter = 5 * time.Minute

// RetryAfter reads a provider's suggested delay from h: retry-after-ms
// (milliseconds), then retry-after as seconds (fractions allowed) or as
// an HTTP date (relative to now). A missing, malformed, negative or past
// value gives 0; a value above limit gives limit (no cap when limit <= 0).
func RetryAfter(h http.Header, now time.Time, limit time.Duration) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			d = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); d == 0 && v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			if s > 0 && s < 1e9 {
				d = time.Duration(s * float64(time.Second))
			}
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	if d < 0 {
		d = 0
	}
	if limit > 0 && d > limit {
		d = limit
	}
	return d
}

// IDs makes the tool call ids of one reply safe for every provider: only
// ASCII letters, digits, '_' and '-' (what Anthropic and OpenAI accept),
// never empty, never a duplicate within the reply. The zero value is
// ready; use one per reply.
type IDs struct {
	seen map[string]bool
	n    int
}

// Normalize returns the id to use for the model's id. A valid, unused id
// is kept as it is; other characters become '_'; an empty id becomes
// "call_N"; a duplicate gets a suffix "_2", "_3"….
func (s *IDs) Normalize(id string) string {
	s.n++
	if s.seen == nil {
		s.seen = make(map[string]bool, 4)
	}
	out := SafeID(id)
	if out == "" {
		out = "call_" + strconv.Itoa(s.n)
	}
	base := out
	for k := 2; s.seen[out]; k++ {
		out = base + "_" + strconv.Itoa(k)
	}
	s.seen[out] = true
	return out
}

// SafeID replaces every character of id outside [A-Za-z0-9_-] with '_'
// and caps it at 64 bytes (Anthropic's limit). An empty id stays empty.
func SafeID(id string) string {
	ok := len(id) <= 64
	for i := 0; ok && i < len(id); i++ {
		ok = idByte(id[i])
	}
	if ok {
		return id
	}
	b := []byte(id)
	if len(b) > 64 {
		// Keep it unique: a hash of the whole id replaces the tail.
		sum := sha256.Sum256(b)
		b = append(b[:48:48], '_')
		b = append(b, alnum9(sum[:])...)
		b = append(b, alnum9(sum[9:])[:6]...)
	}
	for i, c := range b {
		if !idByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// MistralID maps id to the form Mistral's API demands of tool call ids:
// exactly nine ASCII letters and digits. An id already in that form is
// kept; any other is replaced by a hash of it, so a call and its result
// map to the same id in every request.
func MistralID(id string) string {
	if len(id) == 9 {
		ok := true
		for i := 0; ok && i < 9; i++ {
			c := id[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		}
		if ok {
			return id
		}
	}
	sum := sha256.Sum256([]byte(id))
	return string(alnum9(sum[:]))
}

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func alnum9(b []byte) []byte {
	out := make([]byte, 9)
	for i := range out {
		out[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return out
}

// Redact removes secrets from s: every occurrence of a secret (an API
// key, say) of at least 4 bytes becomes "[redacted]", and URLs lose their
// user information and query (keys travel there too).
func Redact(s string, secrets ...string) string {
	for _, k := range secrets {
		if len(k) >= 4 {
			s = strings.ReplaceAll(s, k, "[redacted]")
		}
	}
	return redactURLs(s)
}

// redactURLs strips the userinfo and query of every http(s) URL in s.
func redactURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		i := indexScheme(s)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		end := i
		for end < len(s) && !strings.ContainsRune(" \t\n\"'<>", rune(s[end])) {
			end++
		}
		for end > i && strings.ContainsRune(".,;:)", rune(s[end-1])) {
			end-- // sentence punctuation after a URL is not part of it
		}
		b.WriteString(SafeURL(s[i:end]))
		s = s[end:]
	}
}

func indexScheme(s string) int {
	i, j := strings.Index(s, "http://"), strings.Index(s, "https://")
	switch {
	case i < 0:
		return j
	case j < 0:
		return i
	}
	return min(i, j)
}

// SafeURL returns raw without user information, query or fragment; what
// cannot be parsed is replaced whole.
func SafeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[url]"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Failure says what one provider error is, as the adapter read it from
// the wire. Type and Code are the provider's own (Anthropic's
// "overloaded_error", OpenAI's "insufficient_quota"); Status is the HTTP
// status (0 inside a stream that has none, 200 for an error event in a
// stream that started well).
type Failure struct {
	Provider   string
	Status     int
	Type, Code string
	Message    string
	RetryAfter time.Duration
}

// Classify maps a provider failure to the machine's failure kinds, by the
// provider's type or code first and the HTTP status second:
//
//   - rate limits and overload (429, 529, rate_limit_error,
//     overloaded_error, server_is_overloaded) → llm.rate_limited, retryable;
//   - quota and billing (insufficient_quota, billing_error, 402, a
//     message about the credit balance) →
//     llm.quota_exhausted, not retryable, even on a 429;
//   - context overflow (413, request_too_large, context_length_exceeded,
//     or a message that says so) → llm.context_overflow, not retryable;
//   - authentication and permission (401, 403) → llm.auth;
//   - unknown model (404, not_found_error, model_not_found) →
//     llm.model_not_found;
//   - other request errors (400, 422, invalid_request_error) →
//     llm.request_rejected;
//   - 408 → llm.timeout; 409, 5xx and api_error → retryable.
//
// The message is redacted of secrets.
func Classify(f Failure, secrets ...string) *vocab.Error {
	msg := Redact(strings.TrimSpace(f.Message), secrets...)
	typ := strings.ToLower(f.Type + " " + f.Code)
	lower := strings.ToLower(msg)
	e := &vocab.Error{Status: f.Status, RetryAfter: f.RetryAfter}
	switch {
	case has(typ, "insufficient_quota", "billing", "credit") || f.Status == 402 ||
		has(lower, "credit balance", "insufficient_quota", "billing details", "exceeded your current quota"):
		e.Code = vocab.CodeQuotaExhausted
	case f.Status == 413 || has(typ, "request_too_large", "context_length_exceeded", "context_window", "string_above_max_length", "exceed_context") ||
		ContextOverflowMessage(lower):
		e.Code = vocab.CodeContextOverflow
	case has(typ, "overloaded", "rate_limit", "rate-limit", "too_many_requests") || f.Status == 429 || f.Status == 529:
		e.Code, e.Retryable = vocab.CodeRateLimited, true
	case has(typ, "authentication", "permission", "invalid_api_key", "unauthorized") || f.Status == 401 || f.Status == 403:
		e.Code = vocab.CodeAuth
	case has(typ, "not_found", "model_not_found") || f.Status == 404:
		e.Code = vocab.CodeModelNotFound
	case f.Status == 408 || has(typ, "timeout"):
		e.Code, e.Retryable = vocab.CodeTimeout, true
	case has(typ, "api_error", "server_error", "internal") || f.Status >= 500 || f.Status == 409:
		e.Code, e.Retryable = vocab.CodeServer, true
		if f.Status == 409 {
			e.Code = vocab.CodeRequestRejected
		}
	case has(typ, "invalid_request") || f.Status >= 400:
		e.Code = vocab.CodeRequestRejected
	default:
		// An error event without a status or a known type: the provider
		// broke off; the retry policy may try again.
		e.Code, e.Retryable = vocab.CodeServer, true
	}
	prefix := f.Provider
	if f.Status > 0 {
		prefix += " " + strconv.Itoa(f.Status)
	}
	if t := strings.TrimSpace(f.Type); t != "" {
		prefix += " " + t
	} else if c := strings.TrimSpace(f.Code); c != "" {
		prefix += " " + c
	}
	if msg == "" {
		msg = http.StatusText(f.Status)
	}
	e.Message = strings.TrimSpace(prefix) + ": " + msg
	return e
}

func has(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// ContextOverflowMessage reports whether a (lower-cased) error message
// says the request does not fit the model's context, in the words of the
// providers and servers loopchart knows: OpenAI ("maximum context
// length"), Anthropic ("prompt is too long", "exceed context limit"),
// vLLM, llama.cpp ("exceeds the available context size"), Ollama,
// DeepSeek and Moonshot.
func ContextOverflowMessage(lower string) bool {
	return has(lower,
		"maximum context length", "context length exceeded", "context_length_exceeded",
		"prompt is too long", "exceed context limit", "exceeds the context window",
		"input length and `max_tokens` exceed", "too many tokens",
		"exceeds the available context size", "context window", "exceeds maximum context",
		"reduce the length of the messages", "input tokens exceed the configured limit",
		"longer than the model's context length", "exceeded model token limit", "model max length exceeded",
		"longer than the maximum model length", "reduce the length of the input messages", "exceeds the context length")
}

// Transport wraps an error that happened below HTTP (a refused
// connection, a broken stream) as a retryable llm.transport error, with
// secrets and URLs redacted. Cancellation stays cancellation.
//
// Only context.Canceled counts as cancellation: a deadline that ran out
// below the caller (an http.Client's Timeout) is the transport's, and
// retryable. Callers check their own context first.
func Transport(provider string, err error, secrets ...string) *vocab.Error {
	if errors.Is(err, context.Canceled) {
		return &vocab.Error{Code: vocab.CodeCancelled, Message: provider + ": " + Redact(err.Error(), secrets...)}
	}
	return &vocab.Error{Code: vocab.CodeTransport, Retryable: true, Message: provider + ": " + Redact(err.Error(), secrets...)}
}
