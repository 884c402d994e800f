package session_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// usages returns the usage events of the log, in order.
func (r *rig) usages() []vocab.Usage {
	var out []vocab.Usage
	for _, ev := range r.log {
		if p, ok := ev.Payload.(vocab.UsagePayload); ok {
			out = append(out, p.Usage)
		}
	}
	return out
}

// events returns the kinds of the log's events from index from on.
func (r *rig) kindsFrom(from int) []vocab.EventKind {
	var out []vocab.EventKind
	for _, ev := range r.log[from:] {
		out = append(out, ev.Kind)
	}
	return out
}

func submit(r *rig, id vocab.ID, text string) session.Work {
	r.t.Helper()
	msg := vocab.UserText(text)
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: id, Message: &msg})
	return r.started(session.WorkModel)
}

// Thinking blocks keep their provider, signature and redacted data as
// they stream in; an unclosed block (a cut-off reply) has no provider.
func TestAssemblerThinkingBlocks(t *testing.T) {
	var a session.Assembler
	a.Reset()
	for _, p := range []vocab.StreamPart{
		{Kind: vocab.StreamThinking, Text: "first "},
		{Kind: vocab.StreamThinking, Text: "thought", Provider: "anthropic", Signature: "sig1"},
		{Kind: vocab.StreamThinking, Text: "second thought"},
		{Kind: vocab.StreamThinking, Provider: "anthropic", Signature: "sig2"},
		{Kind: vocab.StreamThinking, Provider: "anthropic", Redacted: "opaque"},
		{Kind: vocab.StreamText, Text: "answer"},
		{Kind: vocab.StreamThinking, Text: "cut off"},
	} {
		a.Add(p)
	}
	want := []vocab.Part{
		{Kind: vocab.PartThinking, Text: "first thought", Provider: "anthropic", Signature: "sig1"},
		{Kind: vocab.PartThinking, Text: "second thought", Provider: "anthropic", Signature: "sig2"},
		{Kind: vocab.PartThinking, Provider: "anthropic", Redacted: "opaque"},
		{Kind: vocab.PartText, Text: "answer"},
		{Kind: vocab.PartThinking, Text: "cut off"},
	}
	if diff := cmp.Diff(want, a.Message().Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

// A failed request's usage is logged: its tokens are spent.
func TestUsageOfAFailedRequestIsLogged(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	m := submit(r, "p1", "hi")
	u := vocab.Usage{InputTokens: 120, OutputTokens: 7, CacheReadTokens: 100}
	r.step(vocab.Input{Kind: vocab.InModelFailed, Work: m.ID, Usage: &u,
		Err: &vocab.Error{Code: vocab.CodeServer, Message: "overloaded", Retryable: true}})
	if diff := cmp.Diff([]vocab.Usage{u}, r.usages()); diff != "" {
		t.Errorf("usage events (-want +got):\n%s", diff)
	}
}

// A cancelled request's usage, streamed before the cancel, is logged.
func TestUsageOfACancelledRequestIsLogged(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	m := submit(r, "p1", "hi")
	u := vocab.Usage{InputTokens: 500}
	r.step(vocab.Input{Kind: vocab.InModelParts, Work: m.ID, Parts: []vocab.StreamPart{
		{Kind: vocab.StreamUsage, Usage: &u}, {Kind: vocab.StreamText, Text: "par"}}})
	r.step(vocab.Input{Kind: vocab.InCancel, ID: "c1", Cause: &vocab.CancelCause{Kind: vocab.CancelUser}})
	if diff := cmp.Diff([]vocab.Usage{u}, r.usages()); diff != "" {
		t.Errorf("usage events (-want +got):\n%s", diff)
	}
}

// An empty reply is never committed, but its usage is logged once, also
// when it is retried.
func TestUsageOfAnEmptyReplyIsLoggedOnce(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	m := submit(r, "p1", "hi")
	u := vocab.Usage{InputTokens: 50, OutputTokens: 3}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Usage: &u, Finish: vocab.FinishStop,
		Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartThinking, Text: "hmm"}}}})
	if diff := cmp.Diff([]vocab.Usage{u}, r.usages()); diff != "" {
		t.Errorf("usage events (-want +got):\n%s", diff)
	}
}

// A reply the context window cut off goes to the request-error handlers,
// which may compact the history and try again; its usage is logged once.
func TestContextOverflowFinishAsksTheErrorHandlers(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", Hooks: session.Hooks{RequestError: true}}
	r := newRig(t, cfg)
	m := submit(r, "p1", "summarise everything")
	u := vocab.Usage{InputTokens: 200000, OutputTokens: 10}
	r.step(vocab.Input{Kind: vocab.InModelParts, Work: m.ID, Parts: []vocab.StreamPart{{Kind: vocab.StreamText, Text: "The fil"}}})
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Usage: &u, Finish: vocab.FinishContextOverflow,
		Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "The fil"}}}})
	h := r.started(session.WorkHook)
	if h.Hook != vocab.HookRequestError || h.Err == nil || h.Err.Code != vocab.CodeContextOverflow {
		t.Fatalf("hook work %+v, want request-error with llm.context_overflow", h)
	}
	compacted := []vocab.Message{vocab.UserText("summarise everything (compacted)")}
	from := len(r.log)
	r.step(vocab.Input{Kind: vocab.InHookDone, Work: h.ID, Hook: &vocab.HookVerdict{Retry: true, History: compacted}})
	kinds := r.kindsFrom(from)
	for _, k := range []vocab.EventKind{vocab.EventMessageEnd, vocab.EventHistoryReplaced, vocab.EventRecovering} {
		if !contains(kinds, k) {
			t.Errorf("after the handler's retry the log lacks %s: %v", k, kinds)
		}
	}
	next := r.started(session.WorkModel)
	if next.ID == m.ID || len(next.Request.Messages) != 1 || next.Request.Messages[0].Text() != "summarise everything (compacted)" {
		t.Fatalf("the retried request is %+v, want the compacted history", next.Request)
	}
	// The overflowing reply was not committed, and its usage counted once.
	for _, ev := range r.log {
		if ev.Kind == vocab.EventAssistant {
			t.Errorf("the cut-off reply was committed: %+v", ev.Payload)
		}
	}
	if diff := cmp.Diff([]vocab.Usage{u}, r.usages()); diff != "" {
		t.Errorf("usage events (-want +got):\n%s", diff)
	}
}

// Without error handlers, a context-overflow finish fails the prompt with
// llm.context_overflow, keeping the text and its usage.
func TestContextOverflowFinishFailsThePrompt(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	m := submit(r, "p1", "hi")
	u := vocab.Usage{InputTokens: 10, OutputTokens: 2}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Usage: &u, Finish: vocab.FinishContextOverflow,
		Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "Th"}}}})
	var res *vocab.PromptResult
	for _, x := range r.res {
		if x.Prompt != nil {
			res = x.Prompt
		}
	}
	if res == nil || res.Kind != vocab.PromptFailed || vocab.CodeOf(res.Err) != vocab.CodeContextOverflow {
		t.Fatalf("prompt result %+v, want failed llm.context_overflow", res)
	}
	if diff := cmp.Diff([]vocab.Usage{u}, r.usages()); diff != "" {
		t.Errorf("usage events (-want +got):\n%s", diff)
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The reply keeps who wrote it: the provider's name, model and response
// id, and the committed assistant message logs them.
func TestReplyKeepsItsResponse(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	m := submit(r, "p1", "hi")
	r.step(vocab.Input{Kind: vocab.InModelParts, Work: m.ID, Parts: []vocab.StreamPart{
		{Kind: vocab.StreamResponse, Provider: "anthropic", Model: "claude-x", ResponseID: "msg_1"},
		{Kind: vocab.StreamText, Text: "hello"}}})
	var a session.Assembler
	a.Reset()
	a.Add(vocab.StreamPart{Kind: vocab.StreamResponse, Provider: "anthropic", Model: "claude-x", ResponseID: "msg_1"})
	a.Add(vocab.StreamPart{Kind: vocab.StreamText, Text: "hello"})
	reply := a.Message()
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishStop})
	want := &vocab.Response{Provider: "anthropic", Model: "claude-x", ID: "msg_1"}
	found := false
	for _, ev := range r.log {
		if ev.Kind == vocab.EventAssistant {
			found = true
			if diff := cmp.Diff(want, ev.Payload.(vocab.MessagePayload).Message.Response); diff != "" {
				t.Errorf("logged response (-want +got):\n%s", diff)
			}
		}
	}
	if !found {
		t.Fatal("no assistant message logged")
	}
}
