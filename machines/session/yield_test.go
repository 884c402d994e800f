package session_test

import (
	"encoding/json"
	"testing"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// yieldRig submits prompt p1 and answers its first request with one call
// of the yielding tool, whose result yields: the turn ends yielded.
func yieldRig(t *testing.T) (*rig, session.Config) {
	t.Helper()
	cfg := session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "sessions_yield", NoAccess: true}}}
	r := newRig(t, cfg)
	p1 := vocab.UserText("fan out and wait")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p1})
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "sessions_yield", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	tw := r.started(session.WorkTool)
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: &vocab.ToolResult{CallID: "c1", Name: "sessions_yield", Content: "yielded", Yield: true}})
	checkYielded(t, r, "p1")
	return r, cfg
}

// checkYielded checks that the session rests with prompt id yielded: turn/end
// yielded, a prompt/yield event, no result for the prompt, status yielded.
func checkYielded(t *testing.T, r *rig, id vocab.ID) {
	t.Helper()
	var end *vocab.TurnEndPayload
	yielded := false
	for _, ev := range r.log {
		switch p := ev.Payload.(type) {
		case vocab.TurnEndPayload:
			end = &p
		case vocab.PromptPayload:
			if ev.Kind == vocab.EventYield && p.Prompt == id && p.State == vocab.YieldYielded {
				yielded = true
			}
		}
	}
	if end == nil || end.Reason.Kind != vocab.EndYielded || !yielded {
		t.Fatalf("turn/end %+v, prompt/yield seen %v: want the turn ended yielded (events %v)", end, yielded, kinds(r.log))
	}
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == id {
			t.Fatalf("yielded prompt %s got a result: %+v", id, res.Prompt)
		}
	}
	if got := r.core.Yielded(); got != id {
		t.Fatalf("Yielded() = %q, want %q", got, id)
	}
	if st := r.core.Status(); st != session.StatusYielded {
		t.Fatalf("status %s, want yielded", st)
	}
	if a, tn := r.core.State(); tn != "" || a != "ready" {
		t.Fatalf("agent %s turn %q: want it resting", a, tn)
	}
}

// resume steps a notification (a child's delivery) and answers the next
// request with text: the resumed turn ends the prompt completed.
func resumeWith(t *testing.T, r *rig, kind vocab.InputKind, id vocab.ID) vocab.PromptResult {
	t.Helper()
	mark := len(r.log)
	msg := vocab.UserText("[subagent completed] s1/sub-1\nthe answer")
	r.step(vocab.Input{Kind: kind, ID: id, Message: &msg})
	resumed := false
	for _, ev := range r.log[mark:] {
		if p, ok := ev.Payload.(vocab.PromptPayload); ok && ev.Kind == vocab.EventYield && p.State == vocab.YieldResumed && p.Prompt == "p1" {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("no prompt/yield resumed after %s: %v", kind, kinds(r.log[mark:]))
	}
	if r.core.Yielded() != "" || r.core.Status() != "running" {
		t.Fatalf("after the resume: yielded %q, status %s", r.core.Yielded(), r.core.Status())
	}
	m := r.started(session.WorkModel)
	if got := m.Request.Messages[len(m.Request.Messages)-1].Text(); got != msg.Text() {
		t.Fatalf("the resumed request ends with %q, want the delivery", got)
	}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "composed"}}}})
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == "p1" {
			return *res.Prompt
		}
	}
	t.Fatalf("p1 has no result after the resumed turn: %v", kinds(r.log[mark:]))
	return vocab.PromptResult{}
}

// A yield ends the turn yielded and keeps the prompt open; the first
// notification resumes it in a new turn, which ends it.
func TestYieldResumedByANotification(t *testing.T) {
	r, _ := yieldRig(t)
	res := resumeWith(t, r, vocab.InNotify, "s1/sub-1/delivery")
	if res.Kind != vocab.PromptCompleted || res.Steps != 1 {
		t.Fatalf("p1 ended %s, want completed after one step of the resumed turn", res)
	}
	if r.core.Status() != "idle" {
		t.Fatalf("status %s after the prompt ended, want idle", r.core.Status())
	}
}

// A steer resumes a yielded prompt too.
func TestYieldResumedByASteer(t *testing.T) {
	r, _ := yieldRig(t)
	res := resumeWith(t, r, vocab.InSteer, "st1")
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("p1 ended %s, want completed", res)
	}
}

// A delivery that arrives while the yielding batch still runs stays
// queued (the yielding drain claims nothing) and starts the resuming turn
// as soon as the yielded one ends.
func TestYieldWithADeliveryAlreadyQueued(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "sessions_yield", NoAccess: true}}}
	r := newRig(t, cfg)
	p1 := vocab.UserText("fan out and wait")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p1})
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "sessions_yield", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	tw := r.started(session.WorkTool)
	note := vocab.UserText("[subagent completed] s1/sub-1\nearly")
	r.step(vocab.Input{Kind: vocab.InNotify, ID: "d1", Message: &note})
	mark := len(r.log)
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: &vocab.ToolResult{CallID: "c1", Name: "sessions_yield", Content: "yielded", Yield: true}})
	var order []string
	for _, ev := range r.log[mark:] {
		switch p := ev.Payload.(type) {
		case vocab.TurnEndPayload:
			order = append(order, "end:"+string(p.Reason.Kind))
		case vocab.PromptPayload:
			if ev.Kind == vocab.EventYield {
				order = append(order, p.State)
			}
		}
	}
	want := []string{"end:yielded", vocab.YieldYielded, vocab.YieldResumed}
	if len(order) != len(want) || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("events %v, want %v", order, want)
	}
	next := r.started(session.WorkModel)
	if got := next.Request.Messages[len(next.Request.Messages)-1].Text(); got != note.Text() {
		t.Fatalf("the resumed request ends with %q, want the early delivery", got)
	}
}

// A cancel while yielded ends the prompt cancelled; so does a close.
func TestYieldCancelledAndClosed(t *testing.T) {
	r, _ := yieldRig(t)
	r.step(vocab.Input{Kind: vocab.InCancel, ID: "x1", Cause: &vocab.CancelCause{Kind: vocab.CancelUser}})
	var got *vocab.PromptResult
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == "p1" {
			got = res.Prompt
		}
	}
	if got == nil || got.Kind != vocab.PromptCancelled || got.Reason == nil || got.Reason.Kind != vocab.CancelUser {
		t.Fatalf("p1 after a cancel while yielded: %+v, want cancelled{user}", got)
	}
	if r.core.Yielded() != "" || r.core.Status() != "idle" {
		t.Fatalf("after the cancel: yielded %q, status %s", r.core.Yielded(), r.core.Status())
	}

	r, _ = yieldRig(t)
	r.step(vocab.Input{Kind: vocab.InClose, ID: "x2"})
	r.started(session.WorkStop)
	r.step(vocab.Input{Kind: vocab.InStopped})
	got = nil
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == "p1" {
			got = res.Prompt
		}
	}
	if got == nil || got.Kind != vocab.PromptCancelled {
		t.Fatalf("p1 after a close while yielded: %+v, want cancelled", got)
	}
}

// A new prompt while one is yielded takes the conversation over: the
// yielded prompt ends completed, saying so.
func TestYieldSupersededByANewPrompt(t *testing.T) {
	r, _ := yieldRig(t)
	p2 := vocab.UserText("something else")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p2", Message: &p2})
	var got *vocab.PromptResult
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == "p1" {
			got = res.Prompt
		}
	}
	if got == nil || got.Kind != vocab.PromptCompleted || got.StopReason == "" {
		t.Fatalf("p1 after p2 started: %+v, want completed with a stop reason", got)
	}
}

// A session that rests yielded folds back to the same state from its log
// (a reopen after a crash), and from a snapshot; either way the next
// delivery resumes the prompt.
func TestYieldSurvivesAReopenAndARestore(t *testing.T) {
	r, cfg := yieldRig(t)
	r.crash(cfg)
	checkYielded(t, r, "p1")
	res := resumeWith(t, r, vocab.InNotify, "s1/sub-1/delivery")
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("p1 after a reopen and a delivery: %s", res)
	}

	r, _ = yieldRig(t)
	snap, err := r.core.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	core, err := session.Restore(snap, session.NewMachines())
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := core.Ready()
	core.Advance(rd)
	r.core, r.work, r.res = core, nil, nil
	checkYielded(t, r, "p1")
	res = resumeWith(t, r, vocab.InSteer, "st1")
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("p1 after a restore and a steer: %s", res)
	}
}
