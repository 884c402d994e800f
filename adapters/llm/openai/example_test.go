package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/llm/openai"
	"github.com/loopchart/loopchart/vocab"
)

// Stream a reply from a DeepSeek-style server (here a test server that
// replays a recorded reply): reasoning deltas, the part that closes the
// reasoning block, text deltas, usage and the finish reason.
func Example() {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "providers", "openai", "reasoning_deepseek.sse"))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, _ := wiretest.Parse(raw)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer srv.Close()

	p, err := openai.New(openai.Options{
		BaseURL: srv.URL, // a real server: "https://api.deepseek.com"
		APIKey:  "sk-example",
		Model:   "deepseek-reasoner",
		Server:  "deepseek", // guessed from api.deepseek.com when empty
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("9.11 or 9.8: which is greater?")}}
	for part, err := range p.Stream(context.Background(), req) {
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case part.Kind == vocab.StreamResponse:
			fmt.Printf("response %s from %s (%s)\n", part.ResponseID, part.Model, part.Provider)
		case part.Kind == vocab.StreamThinking && part.Provider != "":
			fmt.Printf("thinking block closed by %s\n", part.Provider)
		case part.Kind == vocab.StreamUsage:
			fmt.Printf("usage: %d in (%d cached), %d out\n", part.Usage.InputTokens, part.Usage.CacheReadTokens, part.Usage.OutputTokens)
		case part.Kind == vocab.StreamFinish:
			fmt.Println("finish:", part.Finish)
		default:
			fmt.Printf("%s: %q\n", part.Kind, part.Text)
		}
	}
	// Output:
	// response 4c3f0d1e from deepseek-reasoner (openai/deepseek)
	// thinking: "9.11 has"
	// thinking: " fewer tenths."
	// thinking block closed by openai/deepseek
	// text: "9.8 is"
	// text: " greater."
	// usage: 20 in (0 cached), 64 out
	// finish: stop
}
