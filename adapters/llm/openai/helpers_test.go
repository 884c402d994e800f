package openai_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/openai"
	"github.com/loopchart/loopchart/vocab"
)

// testKey is the API key of every test provider. The auth fixture quotes
// it, so that the tests can check it never leaks.
const testKey = "sk-loopchart-TEST-0123456789abcdef"

// fixtureDir holds the wire fixtures and the golden requests.
var fixtureDir = filepath.Join("..", "..", "..", "testdata", "providers", "openai")

func fixture(name string) string { return filepath.Join(fixtureDir, name) }

// newProvider makes a provider for a test server: base is its URL (the
// SDK appends chat/completions).
func newProvider(t testing.TB, base, server string, edit ...func(*openai.Options)) *openai.Provider {
	t.Helper()
	o := openai.Options{BaseURL: base, APIKey: testKey, Model: "test-model", Server: server}
	for _, e := range edit {
		e(&o)
	}
	p, err := openai.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// userRequest is a request with one user message.
func userRequest(text string) vocab.Request {
	return vocab.Request{Messages: []vocab.Message{vocab.UserText(text)}}
}

// collect ranges over one reply: its parts rendered one a line, and the
// error that ended it.
func collect(p *openai.Provider, ctx context.Context, req vocab.Request) ([]vocab.StreamPart, error) {
	var parts []vocab.StreamPart
	for part, err := range p.Stream(ctx, req) {
		if err != nil {
			return parts, err
		}
		if part.Kind == vocab.StreamResponse && !keepResponse {
			continue // TestResponsePart checks it
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// keepResponse makes collect keep StreamResponse parts (the fixture
// tables leave them out).
var keepResponse bool

// render writes parts and an error compactly, one a line.
func render(parts []vocab.StreamPart, err error) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(renderPart(p))
		b.WriteByte('\n')
	}
	if err != nil {
		b.WriteString(renderError(err))
		b.WriteByte('\n')
	}
	return b.String()
}

func renderPart(p vocab.StreamPart) string {
	switch p.Kind {
	case vocab.StreamText:
		return fmt.Sprintf("text %q", p.Text)
	case vocab.StreamThinking:
		if p.Provider == "" {
			return fmt.Sprintf("thinking %q", p.Text)
		}
		s := "thinking-end " + p.Provider
		if p.Text != "" {
			s += fmt.Sprintf(" %q", p.Text)
		}
		return s
	case vocab.StreamToolCall:
		return fmt.Sprintf("call %s %s %s", p.Call.ID, p.Call.Name, p.Call.Args)
	case vocab.StreamUsage:
		u := p.Usage
		return fmt.Sprintf("usage in=%d out=%d cache=%d", u.InputTokens, u.OutputTokens, u.CacheReadTokens)
	case vocab.StreamFinish:
		return "finish " + string(p.Finish)
	}
	return fmt.Sprintf("part %+v", p)
}

func renderError(err error) string {
	var e *vocab.Error
	if !errors.As(err, &e) {
		return fmt.Sprintf("error (not a *vocab.Error) %T: %v", err, err)
	}
	s := fmt.Sprintf("error %s retryable=%t", e.Code, e.Retryable)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" after=%s", e.RetryAfter)
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" status=%d", e.Status)
	}
	return s
}

// lines joins lines with a final newline.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
