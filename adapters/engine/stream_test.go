package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// The live stream buffer merges deltas of one kind, but keeps a thinking
// block's closing part (its provider, signature or redacted data) and
// usage reports as parts of their own, in order.
func TestStreamBufferKeepsThinkingBlocksAndUsage(t *testing.T) {
	var s stream
	u := vocab.Usage{InputTokens: 40}
	for _, p := range []vocab.StreamPart{
		{Kind: vocab.StreamUsage, Usage: &u},
		{Kind: vocab.StreamThinking, Text: "a"},
		{Kind: vocab.StreamThinking, Text: "b", Provider: "anthropic", Signature: "s1"},
		{Kind: vocab.StreamThinking, Provider: "anthropic", Redacted: "xx"},
		{Kind: vocab.StreamText, Text: "hel"},
		{Kind: vocab.StreamText, Text: "lo"},
	} {
		s.add(p)
	}
	want := []vocab.StreamPart{
		{Kind: vocab.StreamUsage, Usage: &u},
		{Kind: vocab.StreamThinking, Text: "ab", Provider: "anthropic", Signature: "s1"},
		{Kind: vocab.StreamThinking, Provider: "anthropic", Redacted: "xx"},
		{Kind: vocab.StreamText, Text: "hello"},
	}
	if diff := cmp.Diff(want, s.take()); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}
