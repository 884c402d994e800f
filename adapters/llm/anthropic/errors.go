package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// maxBodySnippet caps how much of an error body that is not the API's
// JSON (a proxy's HTML page, say) goes into an error message.
const maxBodySnippet = 200

func badInput(format string, args ...any) *vocab.Error {
	return &vocab.Error{Code: vocab.CodeBadInput, Message: providerName + ": " + fmt.Sprintf(format, args...)}
}

// cancelled is the error of a request whose context ended; its cause is
// the context's cause, so errors.Is(err, context.Canceled) and errors.As
// into a vocab.CancelCause still see it.
func (p *Provider) cancelled(ctx context.Context) *vocab.Error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	return &vocab.Error{Code: vocab.CodeCancelled, Message: providerName + ": " + wire.Redact(cause.Error(), p.apiKey), Cause: cause}
}

// failure maps an error of the SDK (a request that failed, a stream that
// broke or carried an error event) to a *vocab.Error. The SDK's error never
// becomes the cause, and its text (which names the URL and may quote the
// request) never goes into the message unredacted.
func (p *Provider) failure(ctx context.Context, err error) *vocab.Error {
	if ctx.Err() != nil {
		return p.cancelled(ctx)
	}
	var aerr *sdk.Error
	if errors.As(err, &aerr) && aerr != nil {
		return p.apiFailure(aerr)
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typ) {
		return &vocab.Error{Code: vocab.CodeSyntax, Message: providerName + ": malformed stream event: " + wire.Redact(err.Error(), p.apiKey)}
	}
	return wire.Transport(providerName, err, p.apiKey)
}

// apiFailure classifies an error response, or an error event inside a
// stream (status 200), by the body's error type first and the status
// second.
func (p *Provider) apiFailure(aerr *sdk.Error) *vocab.Error {
	f := wire.Failure{
		Provider: providerName,
		Status:   aerr.StatusCode,
		Type:     string(aerr.Type()),
		Code:     string(aerr.ErrorCode()),
		Message:  aerr.Message,
	}
	raw := aerr.RawJSON()
	if f.Type == "" || f.Message == "" {
		typ, msg, ok := errorBody(raw)
		if f.Type == "" {
			f.Type = typ
		}
		if f.Message == "" {
			f.Message = msg
		}
		if !ok && f.Message == "" {
			f.Message = snippet(raw)
		}
	}
	if aerr.Response != nil {
		f.RetryAfter = wire.RetryAfter(aerr.Response.Header, time.Now(), wire.MaxRetryAfter)
	}
	e := wire.Classify(f, p.apiKey)
	// Anthropic reports an empty account as a 400 invalid_request_error
	// whose message speaks of the credit balance: no retry helps.
	if strings.Contains(strings.ToLower(f.Message), "credit balance") {
		e.Code, e.Retryable = vocab.CodeQuotaExhausted, false
	}
	return e
}

// errorBody reads the type and message of an error body, in its usual
// shape {"type":"error","error":{"type":…,"message":…}} or flat.
func errorBody(raw string) (typ, msg string, ok bool) {
	var body struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Error   *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &body) != nil {
		return "", "", false
	}
	if body.Error != nil {
		return body.Error.Type, body.Error.Message, true
	}
	if body.Type == "error" {
		body.Type = ""
	}
	return body.Type, body.Message, true
}

// snippet returns the start of a body that is not JSON, on one line.
func snippet(raw string) string {
	s := strings.Join(strings.Fields(raw), " ")
	if len(s) <= maxBodySnippet {
		return s
	}
	cut := maxBodySnippet
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
