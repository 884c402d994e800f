package anthropic_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// fuzzResponse is what the fuzz server answers with.
type fuzzResponse struct {
	status int
	body   []byte
}

// FuzzStream serves arbitrary bodies (as event streams, or as error
// responses when status is set) through the adapter: it never panics, and
// every stream ends with exactly one finish part or one error, nothing
// after it.
func FuzzStream(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.sse"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		f.Add(uint8(0), fixtureBody(f, filepath.Base(file)))
	}
	f.Add(uint8(0), []byte(""))
	f.Add(uint8(0), []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add(uint8(0), []byte("data: {\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\n"))
	f.Add(uint8(0), []byte("event: error\ndata: not json\n\n"))
	f.Add(uint8(0), []byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":\"many\"}}}\n\n"))
	f.Add(uint8(0), []byte("data: [1, 2\n\n"))
	f.Add(uint8(29), []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))
	f.Add(uint8(100), []byte(`<html>bad gateway</html>`))

	var current atomic.Pointer[fuzzResponse]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := current.Load()
		if resp.status == http.StatusOK {
			w.Header().Set("content-type", "text/event-stream")
		} else {
			w.Header().Set("content-type", "application/json")
		}
		w.WriteHeader(resp.status)
		_, _ = w.Write(resp.body)
	}))
	defer srv.Close()
	p := newProvider(f, srv.URL)

	f.Fuzz(func(t *testing.T, status uint8, body []byte) {
		code := http.StatusOK
		if status != 0 {
			code = 400 + int(status)%200
		}
		current.Store(&fuzzResponse{status: code, body: body})
		ended := false
		for part, err := range p.Stream(context.Background(), hello()) {
			if ended {
				t.Fatalf("a part or error after the end: %+v %v", part, err)
			}
			if err != nil {
				ended = true
				var e *vocab.Error
				if !errors.As(err, &e) || e.Code == "" {
					t.Fatalf("error %T %v is not a coded *vocab.Error", err, err)
				}
				continue
			}
			switch part.Kind {
			case vocab.StreamFinish:
				ended = true
				if !part.Finish.Valid() {
					t.Fatalf("finish %q", part.Finish)
				}
			case vocab.StreamToolCall:
				if part.Call == nil || part.Call.ID == "" || len(part.Call.Args) == 0 {
					t.Fatalf("tool call %+v", part.Call)
				}
			case vocab.StreamUsage:
				if part.Usage == nil {
					t.Fatal("usage part without usage")
				}
			case vocab.StreamText, vocab.StreamThinking, vocab.StreamResponse:
			default:
				t.Fatalf("part kind %q", part.Kind)
			}
		}
		if !ended {
			t.Fatal("the stream ended without a finish part or an error")
		}
	})
}
