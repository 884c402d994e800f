package openai_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/vocab"
)

// safeID is the form of every tool call id the adapter emits.
var safeID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// FuzzStream serves arbitrary bodies as a 200 event stream through the
// adapter: it never panics, and every reply ends with exactly one finish
// part or one error, nothing after; tool call ids are safe and unique;
// usage comes once, before the finish.
func FuzzStream(f *testing.F) {
	files, _ := filepath.Glob(fixture("*.sse"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		resp, err := wiretest.Parse(b)
		if err != nil {
			f.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			f.Add(body)
		}
	}
	for _, s := range []string{
		"",
		"data: [DONE]\n\n",
		"data: {}\n\n",
		"data: null\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]},\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1,\"id\":\"\"},{\"index\":0,\"id\":\"\"}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"},\"finish_reason\":\"length\",\"usage\":{\"prompt_tokens\":1e30}}]}\n\n",
		"data: {\"error\":null}\n\n",
		"event: error\ndata: {\"message\":\"boom\"}\n\n",
		": comment\n\ndata: {\"choices\":[]}\n\n",
	} {
		f.Add([]byte(s))
	}

	var mu sync.Mutex
	var current []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body := current
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	defer srv.Close()
	p := newProvider(f, srv.URL, "moonshot")
	req := history("openai/moonshot")

	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		current = bytes.Clone(body)
		mu.Unlock()
		var parts []vocab.StreamPart
		var failed error
		for part, err := range p.Stream(context.Background(), req) {
			if failed != nil {
				t.Fatalf("yield after the error %v: %+v, %v", failed, part, err)
			}
			if err != nil {
				failed = err
				if vocab.CodeOf(err) == vocab.CodeInternal {
					t.Fatalf("unclassified error %T: %v", err, err)
				}
				continue
			}
			if n := len(parts); n > 0 && parts[n-1].Kind == vocab.StreamFinish {
				t.Fatalf("a part after the finish: %+v", part)
			}
			parts = append(parts, part)
		}
		if failed == nil && (len(parts) == 0 || parts[len(parts)-1].Kind != vocab.StreamFinish) {
			t.Fatalf("no finish and no error: %+v", parts)
		}
		ids := map[string]bool{}
		usages := 0
		for _, part := range parts {
			switch part.Kind {
			case vocab.StreamToolCall:
				if part.Call == nil || !safeID.MatchString(part.Call.ID) || ids[part.Call.ID] {
					t.Fatalf("bad or repeated call id: %+v", part.Call)
				}
				ids[part.Call.ID] = true
			case vocab.StreamUsage:
				usages++
				if part.Usage == nil || usages > 1 {
					t.Fatalf("usage %d: %+v", usages, part.Usage)
				}
			case vocab.StreamText:
				if part.Text == "" {
					t.Fatal("an empty text delta")
				}
			case vocab.StreamFinish:
				if !part.Finish.Valid() {
					t.Fatalf("finish %q", part.Finish)
				}
			}
		}
	})
}
