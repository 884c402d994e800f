package session_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// refused steps in, which must be refused with code input.bad, and checks
// that it changed nothing: no event, work or result, the same sequence
// number, and Validate agrees.
func (r *rig) refused(in vocab.Input) error {
	r.t.Helper()
	r.at = r.at.Add(1)
	in.At = r.at
	seq := r.core.Seq()
	verr := r.core.Validate(in)
	err := r.core.Step(in)
	if err == nil || verr == nil {
		r.t.Fatalf("%s was taken (Step: %v, Validate: %v), want it refused", in.Kind, err, verr)
	}
	if !errors.Is(err, vocab.CodeBadInput.Err()) {
		r.t.Errorf("%s: %v (code %s), want code %s", in.Kind, err, vocab.CodeOf(err), vocab.CodeBadInput)
	}
	if rd, ok := r.core.Ready(); ok || r.core.Seq() != seq {
		r.t.Errorf("the refused %s left %d events, %d work, %d results (seq %d → %d)", in.Kind,
			len(rd.Events), len(rd.Work), len(rd.Results), seq, r.core.Seq())
	}
	return err
}

// An input that quotes outstanding work of another kind than the one it
// answers (found by FuzzCore: stream parts quoting the stop of a closing
// session opened a reply no request had started) is refused; the work it
// quotes is untouched, and the right input still answers it.
func TestInputQuotingWorkOfAnotherKindIsRefused(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "calc", NoAccess: true}}})
	model := submit(r, "p1", "hi")
	call := &vocab.ToolCall{ID: "c1", Name: "calc", Args: json.RawMessage(`{}`)}
	reply := &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: call}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: model.ID, Reply: reply, Finish: vocab.FinishToolCalls})
	tw := r.started(session.WorkTool)
	for _, in := range []vocab.Input{
		{Kind: vocab.InModelParts, Work: tw.ID, Parts: []vocab.StreamPart{{Kind: vocab.StreamText, Text: "x"}}},
		{Kind: vocab.InModelDone, Work: tw.ID, Reply: &vocab.Message{Role: vocab.RoleAssistant}},
		{Kind: vocab.InModelFailed, Work: tw.ID, Err: &vocab.Error{Code: vocab.CodeServer}},
		{Kind: vocab.InHookDone, Work: tw.ID, Hook: &vocab.HookVerdict{}},
		{Kind: vocab.InTimerFired, Work: tw.ID},
		{Kind: vocab.InMaintenanceDone, Work: tw.ID},
	} {
		r.refused(in)
	}
	res := &vocab.ToolResult{CallID: "c1", Name: "calc", Content: "2", Started: true}
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: res})
	next := r.started(session.WorkModel)
	if next.ID == model.ID {
		t.Fatal("the tool's result started no next request")
	}
	r.refused(vocab.Input{Kind: vocab.InToolDone, Work: next.ID, Result: res})
}

// Every accepted input is logged whole, so a field without a JSON form is
// refused whichever input carries it (found by FuzzCore: a cancel
// carrying a configuration that is not JSON was taken, and its event
// could not be encoded, which stops a session on a durable log). Jitter
// must be a number in [0, 1): NaN passed the old range check.
func TestInputWithoutAJSONFormIsRefused(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m"})
	model := submit(r, "p1", "hi")
	failed := func(jitter float64) vocab.Input {
		return vocab.Input{Kind: vocab.InModelFailed, Work: model.ID, Jitter: jitter,
			Err: &vocab.Error{Code: vocab.CodeServer, Message: "overloaded", Retryable: true}}
	}
	for _, j := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.5, 1} {
		r.refused(failed(j))
	}
	cause := &vocab.CancelCause{Kind: vocab.CancelUser}
	r.refused(vocab.Input{Kind: vocab.InCancel, ID: "k1", Cause: cause, Config: json.RawMessage(`not json`)})
	r.refused(vocab.Input{Kind: vocab.InPause, ID: "k2", Hook: &vocab.HookVerdict{Args: json.RawMessage(`{"a":`)}})
	r.refused(vocab.Input{Kind: vocab.InContinue, ID: "k3", Approval: &vocab.Approval{CallID: "c", Decision: vocab.Approve, Args: json.RawMessage(`[`)}})
	// The same inputs with fields that encode are taken.
	r.step(failed(0.25))
	r.step(vocab.Input{Kind: vocab.InCancel, ID: "k1", Cause: cause, Config: json.RawMessage(`{}`)})
	for _, ev := range r.log {
		if _, err := json.Marshal(ev); err != nil {
			t.Errorf("event %d (%s) does not encode: %v", ev.Seq, ev.Kind, err)
		}
	}
}

// Text that is not UTF-8 (a caller's message, a model's reply, a tool's
// output) is taken in its JSON form, each invalid byte a U+FFFD, as a
// durable log keeps it (found by FuzzCore: the live core kept the bytes,
// so a snapshot, a fold of the log or a reopened session held other
// text). The core's history, the requests it hands out and its snapshot
// then read the same before and after a restore.
func TestTextThatIsNotUTF8IsTakenInItsJSONForm(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "calc", NoAccess: true}}})
	model := submit(r, "p1", "caf\xe9 \xff")
	call := &vocab.ToolCall{ID: "c1", Name: "calc", Args: json.RawMessage("{\"q\":\"\xfe\"}")}
	reply := &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok\xc3"}, {Kind: vocab.PartToolCall, Call: call}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: model.ID, Reply: reply, Finish: vocab.FinishToolCalls})
	tw := r.started(session.WorkTool)
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: &vocab.ToolResult{CallID: "c1", Name: "calc", Content: "\x80bin", Started: true}})
	req := r.started(session.WorkModel).Request
	var texts []string
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			texts = append(texts, p.Text)
		}
		if m.Result != nil {
			texts = append(texts, m.Result.Content)
		}
	}
	want := []string{"caf\uFFFD \uFFFD", "ok\uFFFD", "", "\uFFFDbin"}
	if diff := cmp.Diff(want, texts); diff != "" {
		t.Errorf("the request's texts (-want +got):\n%s", diff)
	}
	if got := string(req.Messages[1].Parts[1].Call.Args); got != "{\"q\":\"\xfe\"}" {
		t.Errorf("the call's arguments %q, want the bytes the model sent", got)
	}
	snap, err := r.core.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back, err := session.Restore(snap, session.NewMachines())
	if err != nil {
		t.Fatal(err)
	}
	if rd, ok := back.Ready(); ok {
		back.Advance(rd)
	}
	again, err := back.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(snap) {
		t.Errorf("a restored core snapshots differently:\n%s\n%s", snap, again)
	}
}

// Checking an input costs no allocation of its own: the check of its
// texts (inJSONForm) once handed the input itself to encoding/json, which
// moved every input Step and Validate took to the heap (two allocations
// of 336 bytes a step, found by the lane's allocation profile).
func TestCheckingAnInputDoesNotAllocate(t *testing.T) {
	r := newRig(t, session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "calc", NoAccess: true}}})
	model := submit(r, "p1", "hi")
	call := &vocab.ToolCall{ID: "c1", Name: "calc", Args: json.RawMessage(`{}`)}
	reply := &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "let me see"}, {Kind: vocab.PartToolCall, Call: call}}}
	in := vocab.Input{Kind: vocab.InModelDone, At: r.at.Add(1), Work: model.ID, Reply: reply, Finish: vocab.FinishToolCalls}
	if err := r.core.Validate(in); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.core.Validate(in) }); n != 0 {
		t.Errorf("Validate made %v allocations, want 0", n)
	}
}
