package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/vocab"
)

// serveFixture starts a server that answers every request with a wire
// fixture (a raw HTTP response).
func serveFixture(name string) *httptest.Server {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "providers", "anthropic", name))
	if err != nil {
		panic(err)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := wiretest.Parse(raw)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
}

// Stream a reply with extended thinking. The server stands in for the
// API; with the real one, leave BaseURL empty and set ANTHROPIC_API_KEY.
func Example() {
	srv := serveFixture("thinking.sse")
	defer srv.Close()

	p, err := anthropic.New(anthropic.Options{
		BaseURL:        srv.URL,
		APIKey:         "sk-ant-example",
		Model:          "claude-sonnet-4-5",
		ThinkingBudget: 2048,
	})
	if err != nil {
		panic(err)
	}
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("What is 27 * 453?")}}
	for part, err := range p.Stream(context.Background(), req) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		switch part.Kind {
		case vocab.StreamThinking:
			switch {
			case part.Redacted != "":
				fmt.Println("redacted thinking")
			case part.Provider != "":
				fmt.Printf("thinking block ends, signed %s…\n", part.Signature[:8])
			default:
				fmt.Printf("thinking %q\n", part.Text)
			}
		case vocab.StreamText:
			fmt.Printf("text %q\n", part.Text)
		case vocab.StreamToolCall:
			fmt.Printf("call %s %s\n", part.Call.Name, part.Call.Args)
		case vocab.StreamUsage:
			fmt.Printf("usage in=%d out=%d\n", part.Usage.InputTokens, part.Usage.OutputTokens)
		case vocab.StreamFinish:
			fmt.Println("finish", part.Finish)
		}
	}
	// Output:
	// usage in=85 out=4
	// thinking "The user wants 27 * 453."
	// thinking " That is 12231."
	// thinking block ends, signed EqQBCgIY…
	// redacted thinking
	// text "27 * 453 = 12231"
	// usage in=85 out=310
	// finish stop
}

// A failed request yields one *vocab.Error that tells the retry policy
// what to do.
func ExampleProvider_Stream_rateLimited() {
	srv := serveFixture("rate_limit_429.sse")
	defer srv.Close()

	p, err := anthropic.New(anthropic.Options{BaseURL: srv.URL, APIKey: "sk-ant-example", Model: "claude-sonnet-4-5"})
	if err != nil {
		panic(err)
	}
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("hi")}}
	for _, err := range p.Stream(context.Background(), req) {
		var e *vocab.Error
		if errors.As(err, &e) {
			fmt.Println(e.Code, e.Status, "retryable:", e.Retryable, "after:", e.RetryAfter)
		}
	}
	// Output:
	// llm.rate_limited 429 retryable: true after: 7s
}
