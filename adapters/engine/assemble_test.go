package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

func TestAssembler(t *testing.T) {
	var a assembler
	a.reset()
	call := &vocab.ToolCall{ID: "c1", Name: "read"}
	for _, p := range []vocab.StreamPart{
		{Kind: vocab.StreamThinking, Text: "let me "}, {Kind: vocab.StreamThinking, Text: "think"},
		{Kind: vocab.StreamText, Text: "Hel"}, {Kind: vocab.StreamText, Text: "lo"},
		{Kind: vocab.StreamToolCall, Call: call},
		{Kind: vocab.StreamText, Text: "after"},
		{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 3}},
		{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls},
	} {
		a.add(p)
	}
	want := vocab.Message{Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
		{Kind: vocab.PartThinking, Text: "let me think"},
		{Kind: vocab.PartText, Text: "Hello"},
		{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "read"}},
		{Kind: vocab.PartText, Text: "after"},
	}}
	if diff := cmp.Diff(want, a.message()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if a.usage.InputTokens != 3 || a.finish != vocab.FinishToolCalls {
		t.Errorf("usage %+v finish %q", a.usage, a.finish)
	}
	call.Name = "changed" // the assembler keeps its own copy
	if a.message().Parts[2].Call.Name != "read" {
		t.Error("tool call shares memory with the stream part")
	}
	// message is idempotent and a long stream stays one part.
	a.reset()
	for range 10000 {
		a.add(vocab.StreamPart{Kind: vocab.StreamText, Text: "x"})
	}
	if m := a.message(); len(m.Parts) != 1 || m.Parts[0].Text != strings.Repeat("x", 10000) || len(a.message().Parts) != 1 {
		t.Errorf("long stream: %d parts", len(m.Parts))
	}
}
