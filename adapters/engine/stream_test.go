package engine

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
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

// A provider that breaks the iterator contract is a failure of its own
// request, never a part of another one: one that goes on after its loop
// body said stop fails its request with code internal (as a
// range-over-func loop would panic), and a loop body it kept and calls
// after its stream returned panics, even though the pooled request state
// behind it serves a later request by then.
func TestStreamProviderBreakingTheIteratorContract(t *testing.T) {
	var kept func(vocab.StreamPart, error) bool
	var calls atomic.Int32
	prov := providerFunc(func(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		n := calls.Add(1)
		return func(yield func(vocab.StreamPart, error) bool) {
			switch n {
			case 1: // goes on after an error
				yield(vocab.StreamPart{}, errors.New("boom"))
				yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "late"}, nil)
			default:
				kept = yield
				if yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "ok"}, nil) {
					yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
				}
			}
		}
	})
	e, err := New(Options{Provider: prov, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := testCtx(t)
	res, err := e.Run(ctx, vocab.UserText("go"))
	if err != nil || res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeInternal {
		t.Fatalf("first run: %s %v, want failed with code %s", res, err, vocab.CodeInternal)
	}
	if res, err := e.Run(ctx, vocab.UserText("go")); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("second run: %s %v, want completed", res, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a loop body called after its stream returned did not panic")
		}
	}()
	kept(vocab.StreamPart{Kind: vocab.StreamText, Text: "stale"}, nil)
}
