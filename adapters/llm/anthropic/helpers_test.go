package anthropic_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden request files")

// testKey is the API key of the tests; the 401 fixture quotes it, so the
// tests can check it is redacted everywhere.
const testKey = "sk-ant-fixture-0123456789abcdef"

const testModel = "claude-test-model"

// fixtureDir holds the wire fixtures, relative to this package.
var fixtureDir = filepath.Join("..", "..", "..", "testdata", "providers", "anthropic")

func fixture(name string) string { return filepath.Join(fixtureDir, name) }

// newProvider returns a provider for the server at base, with the test key.
func newProvider(t testing.TB, base string, edit ...func(*anthropic.Options)) *anthropic.Provider {
	t.Helper()
	o := anthropic.Options{BaseURL: base, APIKey: testKey, Model: testModel}
	for _, f := range edit {
		f(&o)
	}
	p, err := anthropic.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// collect ranges over one stream: its parts, and its error. It fails the
// test if anything follows an error or a finish part.
func collect(t testing.TB, p *anthropic.Provider, ctx context.Context, req vocab.Request) ([]vocab.StreamPart, error) {
	t.Helper()
	var parts []vocab.StreamPart
	var err error
	done := false
	for part, e := range p.Stream(ctx, req) {
		if done {
			t.Fatalf("a part or error after the stream ended: %+v %v", part, e)
		}
		if e != nil {
			err, done = e, true
			continue
		}
		if part.Kind == vocab.StreamFinish {
			done = true
		}
		if part.Kind == vocab.StreamResponse && !keepResponse {
			continue // TestResponsePart checks it
		}
		parts = append(parts, part)
	}
	return parts, err
}

// keepResponse makes collect keep StreamResponse parts (the fixture
// tables leave them out).
var keepResponse bool

// hello is a minimal request.
func hello() vocab.Request {
	return vocab.Request{Messages: []vocab.Message{vocab.UserText("hi")}}
}

const (
	sseStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Long\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n"
	sseEnd   = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"%s\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// longText returns an event stream of one text block of n deltas
// ("word " each).
func longText(n int) []byte {
	var b strings.Builder
	b.WriteString(sseStart)
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for range n {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word \"}}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprintf(&b, sseEnd, "end_turn", n)
	return []byte(b.String())
}

// longTool returns an event stream of one tool_use block whose input, a
// JSON object with one long string, arrives in n input_json_delta parts.
func longTool(n int) []byte {
	var b strings.Builder
	b.WriteString(sseStart)
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01Long\",\"name\":\"write_file\",\"input\":{}}}\n\n")
	delta := func(s string) {
		q, _ := json.Marshal(s)
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":%s}}\n\n", q)
	}
	delta(`{"path": "a.txt", "content": "`)
	for range n - 2 {
		delta("line of text\\n")
	}
	delta(`"}`)
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprintf(&b, sseEnd, "tool_use", n)
	return []byte(b.String())
}
