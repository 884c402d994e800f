package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/openai/openai-go/v3"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// maxErrorBody caps how much of an error response is read.
const maxErrorBody = 64 << 10

// maxErrorText caps the text of an error body that is not JSON.
const maxErrorText = 300

// failure maps an error of the SDK's request, or of reading the reply's
// body, to a *vocab.Error. The SDK's error is never kept (as a cause or
// as text): it carries the request, whose Authorization header holds the
// key, and prints its URL. What the server said is read from its fields
// and body, and redacted.
func (p *Provider) failure(ctx context.Context, err error, resp *http.Response) *vocab.Error {
	if ctx.Err() != nil {
		return p.cancelled(ctx)
	}
	var ae *sdk.Error
	isAPI := errors.As(err, &ae) && ae != nil
	if isAPI || resp != nil && resp.StatusCode >= 400 {
		var f wire.Failure
		var h http.Header
		if resp != nil {
			f.Status, h = resp.StatusCode, resp.Header
		}
		if isAPI {
			if ae.StatusCode > 0 {
				f.Status = ae.StatusCode
			}
			if ae.Response != nil {
				h = ae.Response.Header
			}
			f.Type, f.Code, f.Message = ae.Type, ae.Code, ae.Message
		}
		if f.Message == "" && resp != nil && resp.Body != nil {
			// The SDK found no error object it knows ({"error": "text"},
			// vLLM's top-level message, a proxy's page): read the body.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			g := parseErrorBody(b)
			f.Message = g.Message
			f.Type = orElse(f.Type, g.Type)
			f.Code = orElse(f.Code, g.Code)
		}
		f.Provider = p.name
		f.RetryAfter = wire.RetryAfter(h, time.Now(), wire.MaxRetryAfter)
		return p.classify(f)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Not the caller's context (checked above): the HTTP client's
		// own timeout, which wire.Transport would take for a cancel.
		return &vocab.Error{Code: vocab.CodeTransport, Retryable: true, Message: p.name + ": " + wire.Redact(err.Error(), p.secrets...)}
	}
	return wire.Transport(p.name, err, p.secrets...)
}

// classify maps a failure through wire.Classify, then the row's own
// context-overflow messages (which wire may not know).
func (p *Provider) classify(f wire.Failure) *vocab.Error {
	e := wire.Classify(f, p.secrets...)
	if e.Code != vocab.CodeContextOverflow && e.Code != vocab.CodeQuotaExhausted &&
		p.row.overflow(strings.ToLower(wire.Redact(f.Message, p.secrets...))) {
		e.Code, e.Retryable = vocab.CodeContextOverflow, false
	}
	return e
}

// cancelled is the error of a request whose context ended: its cause is
// the context's cause.
func (p *Provider) cancelled(ctx context.Context) *vocab.Error {
	cause := context.Cause(ctx)
	return &vocab.Error{Code: vocab.CodeCancelled, Message: p.name + ": request cancelled: " + wire.Redact(cause.Error(), p.secrets...), Cause: cause}
}

// parseErrorBody reads a provider's error body in each form servers use:
// {"error": {"message", "type", "code"}} (OpenAI and most), {"error":
// "text"} (Ollama), a top-level {"message", "type", "code"} (vLLM
// before 0.6), {"detail": "text"} (FastAPI servers); anything else is
// quoted as text, shortened.
func parseErrorBody(b []byte) wire.Failure {
	var f wire.Failure
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		f.Message = shorten(string(bytes.TrimSpace(b)))
		return f
	}
	if raw, ok := top["error"]; ok {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil {
			f.Message, f.Type, f.Code = text(obj["message"]), text(obj["type"]), text(obj["code"])
		} else {
			f.Message = text(raw)
		}
	}
	if f.Message == "" {
		f.Message = text(top["message"])
		f.Type = orElse(f.Type, text(top["type"]))
		f.Code = orElse(f.Code, text(top["code"]))
	}
	if f.Message == "" {
		f.Message = text(top["detail"])
	}
	return f
}

// text returns a JSON string's value, or a number's text; "" for other
// values.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// orElse returns a, or b when a is empty.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// shorten cuts s to maxErrorText bytes at a rune boundary.
func shorten(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
