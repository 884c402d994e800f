package agentsvc_test

import (
	"context"
	"iter"
	"testing"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// startedProvider reports its input tokens as the reply starts (as
// Anthropic does), streams a little text, and then streams until
// cancelled.
type startedProvider struct{ streaming chan struct{} }

func (p startedProvider) Stream(ctx context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		if !yield(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 77, CacheReadTokens: 70}}, nil) ||
			!yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "par"}, nil) {
			return
		}
		close(p.streaming)
		<-ctx.Done()
		yield(vocab.StreamPart{}, vocab.AsError(context.Cause(ctx)))
	}
}

// A cancelled request's usage, reported as it started, is in the log:
// its tokens were spent.
func TestUsageOfACancelledRequestReachesTheLog(t *testing.T) {
	sink := eventlog.NewMemory()
	prov := startedProvider{streaming: make(chan struct{})}
	svc, err := agentsvc.New(agentsvc.Options{Provider: prov, Sink: sink, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	p, err := svc.SubmitText("go")
	if err != nil {
		t.Fatal(err)
	}
	<-prov.streaming
	// The usage reached the session once its part was stepped: wait for
	// the streamed text, which came after it.
	ctx := ctx5(t)
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := ev.Payload.(vocab.Input); ok && in.Kind == vocab.InModelParts && hasText(in.Parts) {
			break
		}
	}
	if err := svc.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("prompt: %s, %v", res, err)
	}
	var usage []vocab.Usage
	for _, ev := range sink.Events() {
		if u, ok := ev.Payload.(vocab.UsagePayload); ok {
			usage = append(usage, u.Usage)
		}
	}
	if len(usage) != 1 || usage[0] != (vocab.Usage{InputTokens: 77, CacheReadTokens: 70}) {
		t.Errorf("usage events %+v, want the one reported before the cancel", usage)
	}
}

func hasText(parts []vocab.StreamPart) bool {
	for _, p := range parts {
		if p.Kind == vocab.StreamText {
			return true
		}
	}
	return false
}

// endUsageProvider answers with text-less replies whose usage comes at
// their end, as most providers report it.
type endUsageProvider struct{}

func (endUsageProvider) Stream(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		u := &vocab.Usage{InputTokens: 10, OutputTokens: 2}
		if len(req.Messages) == 1 {
			_ = yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "missing", Args: []byte(`{}`)}}, nil) &&
				yield(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: u}, nil) &&
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
			return
		}
		_ = yield(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: u}, nil) &&
			yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "done"}, nil) &&
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
	}
}

// A usage report at the end of a reply comes with the reply: it costs no
// input of its own (a step whose reply has no text streams nothing live),
// and one at the start streams live, with the text after it.
func TestUsageAtTheEndCostsNoInput(t *testing.T) {
	sink := eventlog.NewMemory()
	svc, err := agentsvc.New(agentsvc.Options{Provider: endUsageProvider{}, Sink: sink, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	p, err := svc.SubmitText("go")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx5(t)); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt: %s, %v", res, err)
	}
	var live [][]vocab.StreamPartKind
	usages := 0
	for _, ev := range sink.Events() {
		switch pl := ev.Payload.(type) {
		case vocab.Input:
			if pl.Kind == vocab.InModelParts {
				var kinds []vocab.StreamPartKind
				for _, part := range pl.Parts {
					kinds = append(kinds, part.Kind)
				}
				live = append(live, kinds)
			}
		case vocab.UsagePayload:
			usages++
		}
	}
	// Step 1 (a call, usage at the end): nothing live. Step 2 (usage
	// first, then text): one input, usage and text merged or in turn.
	var flat []vocab.StreamPartKind
	for _, k := range live {
		flat = append(flat, k...)
	}
	if len(flat) != 2 || flat[0] != vocab.StreamUsage || flat[1] != vocab.StreamText {
		t.Errorf("live parts %v, want the second reply's usage then its text", live)
	}
	if usages != 2 {
		t.Errorf("%d usage events, want one per reply", usages)
	}
}
