package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// benchChunk is one chunk of a benchmark stream.
func benchChunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o-mini","system_fingerprint":"fp_0aa8d3e20b","choices":[{"index":0,"delta":` +
		delta + `,"logprobs":null,"finish_reason":` + f + `}],"usage":null}` + "\n\n"
}

const benchUsage = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":500,"total_tokens":1700,"prompt_tokens_details":{"cached_tokens":1024}}}` + "\n\ndata: [DONE]\n\n"

// textStream is a reply of n text deltas: n+2 parts.
func textStream(n int) string {
	var b strings.Builder
	b.WriteString(benchChunk(`{"role":"assistant","content":""}`, ""))
	for i := range n {
		b.WriteString(benchChunk(fmt.Sprintf(`{"content":" word%d"}`, i), ""))
	}
	b.WriteString(benchChunk(`{}`, "stop"))
	b.WriteString(benchUsage)
	return b.String()
}

// toolStream is a reply of calls tool calls whose arguments come in
// pieces deltas each: calls+2 parts.
func toolStream(calls, pieces int) string {
	var b strings.Builder
	for c := range calls {
		b.WriteString(benchChunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"write_file","arguments":""}}]}`, c, c), ""))
		b.WriteString(benchChunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"{\"path\": \"f%d.txt\", \"text\": \""}}]}`, c, c), ""))
		for i := range pieces {
			b.WriteString(benchChunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"line %d\\n"}}]}`, c, i), ""))
		}
		b.WriteString(benchChunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"\"}"}}]}`, c), ""))
	}
	b.WriteString(benchChunk(`{}`, "tool_calls"))
	b.WriteString(benchUsage)
	return b.String()
}

// serveBody serves body as a 200 event stream.
func serveBody(b *testing.B, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(body))
	}))
	b.Cleanup(srv.Close)
	return srv
}

// measure runs one request per iteration; each yields parts parts. It
// reports parts/s and allocs/part (the test server's allocations, the
// same in every row, included).
func measure(b *testing.B, parts int, op func() int) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		if got := op(); got != parts {
			b.Fatalf("%d parts, want %d", got, parts)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := float64(parts) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "parts/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/part")
}

// BenchmarkStream measures the adapter per request and per streamed
// part, on a long text stream and on a tool-call stream served by
// httptest, beside two floors over the same bodies: the SDK's typed
// stream of chunks alone (sdk), and its SSE decoder alone (sse), where a
// part is an event.
func BenchmarkStream(b *testing.B) {
	streams := []struct {
		name        string
		body        string
		parts       int // parts the adapter yields
		events      int // SSE events (chunks and [DONE])
		chunkEvents int // events that are chunks
	}{
		{"text500", textStream(500), 503, 504, 503},             // response, 500 deltas, usage, finish
		{"tools4x50", toolStream(4, 50), 7, 4*53 + 3, 4*53 + 2}, // response, 4 calls, usage, finish
	}
	for _, s := range streams {
		srv := serveBody(b, s.body)
		b.Run("adapter/"+s.name, func(b *testing.B) {
			p := newProvider(b, srv.URL, "openai")
			req := userRequest("hi")
			measure(b, s.parts, func() int {
				n := 0
				for _, err := range p.Stream(context.Background(), req) {
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				return n
			})
		})
		b.Run("sdk/"+s.name, func(b *testing.B) {
			svc := sdk.NewChatCompletionService(option.WithBaseURL(srv.URL), option.WithAPIKey(testKey),
				option.WithMaxRetries(0), option.WithHTTPClient(http.DefaultClient))
			measure(b, s.chunkEvents, func() int {
				st := svc.NewStreaming(context.Background(), sdk.ChatCompletionNewParams{Model: "gpt-4o-mini",
					Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")}})
				defer st.Close()
				n := 0
				for st.Next() {
					n++
				}
				if st.Err() != nil {
					b.Fatal(st.Err())
				}
				return n
			})
		})
		b.Run("sse/"+s.name, func(b *testing.B) {
			measure(b, s.events, func() int {
				resp, err := http.Post(srv.URL+"/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`))
				if err != nil {
					b.Fatal(err)
				}
				dec := ssestream.NewDecoder(resp)
				defer dec.Close()
				n := 0
				for dec.Next() {
					n++
				}
				return n
			})
		})
	}
}
