package anthropic_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/vocab"
)

// BenchmarkStream measures the adapter per streamed part and per request
// on two streams served from an httptest server: a long text (500
// text_delta events) and a tool call whose input arrives in 500
// input_json_delta events. Beside each, two floors read the same body
// over the same server: "floor-sse" with the SDK's event-stream decoder
// only (framing, no JSON), "floor-sdk" with the SDK's typed stream (its
// decoding of every event into the union of all event types, which the
// adapter avoids). The per-part metrics of every row divide by the parts
// the adapter yields for that stream, so the rows' ns/op and ns/part
// compare directly: adapter ÷ floor-sse is the adapter's overhead.
func BenchmarkStream(b *testing.B) {
	streams := []struct {
		name string
		body []byte
	}{
		{"text500", longText(500)},
		{"tool500", longTool(500)},
	}
	for _, s := range streams {
		srv := httptest.NewServer(sseHandler(s.body))
		p := newProvider(b, srv.URL)
		parts := countParts(b, p)
		b.Run(s.name+"/adapter", func(b *testing.B) {
			measure(b, parts, func() {
				n := 0
				for _, err := range p.Stream(context.Background(), hello()) {
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != parts {
					b.Fatalf("%d parts, want %d", n, parts)
				}
			})
		})
		b.Run(s.name+"/floor-sse", func(b *testing.B) {
			measure(b, parts, func() {
				resp, err := http.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				dec := ssestream.NewDecoder(resp)
				for dec.Next() {
				}
				if err := dec.Err(); err != nil {
					b.Fatal(err)
				}
				_ = dec.Close()
			})
		})
		b.Run(s.name+"/floor-sdk", func(b *testing.B) {
			measure(b, parts, func() {
				resp, err := http.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				stream := ssestream.NewStream[sdk.MessageStreamEventUnion](ssestream.NewDecoder(resp), nil)
				for stream.Next() {
					_ = stream.Current()
				}
				if err := stream.Err(); err != nil {
					b.Fatal(err)
				}
				_ = stream.Close()
			})
		})
		srv.Close()
	}
}

// measure runs one request per iteration and reports per-part metrics.
func measure(b *testing.B, parts int, request func()) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		request()
	}
	runtime.ReadMemStats(&after)
	total := float64(parts) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "parts/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/part")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/part")
}

// countParts returns how many parts the adapter yields for the server's
// stream, and checks it ends with a finish part.
func countParts(b *testing.B, p *anthropic.Provider) int {
	b.Helper()
	n := 0
	var last vocab.StreamPart
	for part, err := range p.Stream(context.Background(), hello()) {
		if err != nil {
			b.Fatal(err)
		}
		n, last = n+1, part
	}
	if last.Kind != vocab.StreamFinish {
		b.Fatalf("stream ended with %+v", last)
	}
	return n
}
