package session_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// laneRig is a session in a capped lane, with a tool that waits on others
// (agents_wait), one that asks for approval and a plain one.
func laneRig(t *testing.T) (*rig, session.Config) {
	t.Helper()
	cfg := session.Config{Session: "s1", Model: "m", Lane: true, NoRunTimeout: true, Tools: []vocab.ToolSpec{
		{Name: "agents_wait", NoAccess: true, Waits: true}, {Name: "ask", NoAccess: true, Approval: true}, {Name: "plain", NoAccess: true}}}
	return newRig(t, cfg), cfg
}

// lanes returns the lane decisions logged from mark on: "wait N",
// "granted N", "release N".
func lanes(r *rig, mark int) []string {
	var out []string
	for _, ev := range r.log[mark:] {
		switch p := ev.Payload.(type) {
		case vocab.LanePayload:
			out = append(out, fmt.Sprintf("%s %d", p.Op, p.Work))
		case vocab.Input:
			if p.Kind == vocab.InSlotGranted {
				out = append(out, fmt.Sprintf("granted %d", p.Work))
			}
		}
	}
	return out
}

// handedOut reports whether work of kind was handed to the adapter.
func handedOut(r *rig, kind session.WorkKind) bool {
	for _, w := range r.work {
		if w.Op == session.Start && w.Kind == kind {
			return true
		}
	}
	return false
}

func calling(name string) *vocab.Message {
	return &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c-" + name, Name: name, Args: json.RawMessage(`{}`)}}}}
}

// The model request waits for the slot; the slot is held through the tool
// call and given back when the turn ends.
func TestLaneSlotHeldWhileWorkRuns(t *testing.T) {
	r, _ := laneRig(t)
	msg := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
	if handedOut(r, session.WorkModel) {
		t.Fatal("the model request was handed out without a slot")
	}
	slot := r.started(session.WorkSlot)
	r.step(vocab.Input{Kind: vocab.InSlotGranted, Work: slot.ID})
	m := r.started(session.WorkModel)
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: calling("plain"), Finish: vocab.FinishToolCalls})
	tw := r.started(session.WorkTool)
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: &vocab.ToolResult{CallID: "c-plain", Name: "plain", Content: "ok"}})
	m2 := r.started(session.WorkModel)
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m2.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "done"}}}})
	want := fmt.Sprintf("[wait %d granted %d release %d]", slot.ID, slot.ID, slot.ID)
	if got := fmt.Sprint(lanes(r, 0)); got != want {
		t.Fatalf("lane events %s, want %s", got, want)
	}
	var released bool
	for _, w := range r.work {
		if w.Op == session.Cancel && w.Kind == session.WorkSlot && w.ID == slot.ID {
			released = true
		}
	}
	if !released {
		t.Fatal("the slot was not given back to the lane")
	}
}

// A call of a tool that waits on others (agents_wait) holds no slot, nor
// does a call awaiting approval; the next model request asks again.
func TestLaneSlotGivenBackWhileWaiting(t *testing.T) {
	for _, tool := range []string{"agents_wait", "ask"} {
		t.Run(tool, func(t *testing.T) {
			r, _ := laneRig(t)
			msg := vocab.UserText("go")
			r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
			slot := r.started(session.WorkSlot)
			r.step(vocab.Input{Kind: vocab.InSlotGranted, Work: slot.ID})
			m := r.started(session.WorkModel)
			mark := len(r.log)
			r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: calling(tool), Finish: vocab.FinishToolCalls})
			if got := fmt.Sprint(lanes(r, mark)); got != fmt.Sprintf("[release %d]", slot.ID) {
				t.Fatalf("while %s waits: lane events %s, want the slot released", tool, got)
			}
			if tool == "ask" {
				r.step(vocab.Input{Kind: vocab.InApprove, ID: "a1", Approval: &vocab.Approval{CallID: "c-ask", Decision: vocab.Approve}})
				// The approved call needs a slot again.
				if got := lanes(r, mark); len(got) != 2 || got[1][:4] != "wait" {
					t.Fatalf("after the approval: lane events %v, want a new wait", got)
				}
				s2 := r.started(session.WorkSlot)
				r.step(vocab.Input{Kind: vocab.InSlotGranted, Work: s2.ID})
			}
			tw := r.started(session.WorkTool)
			r.step(vocab.Input{Kind: vocab.InToolDone, Work: tw.ID, Result: &vocab.ToolResult{CallID: "c-" + tool, Name: tool, Content: "ok"}})
			next := r.started(session.WorkModel).ID != m.ID
			got := lanes(r, mark)
			switch {
			case tool == "agents_wait" && (next || got[len(got)-1][:4] != "wait"):
				// The wait held no slot: the next request waits for one.
				t.Fatalf("after agents_wait: lane events %v, next request handed out %v", got, next)
			case tool == "ask" && (!next || len(got) != 3):
				// The approved call's slot carries the next request.
				t.Fatalf("after the approved call: lane events %v, next request handed out %v", got, next)
			}
		})
	}
}

// A cancel while work waits for its slot ends the turn at once: the
// waiting model request never reaches the adapter, the request leaves
// the line.
func TestLaneCancelWhileWaiting(t *testing.T) {
	r, _ := laneRig(t)
	msg := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
	slot := r.started(session.WorkSlot)
	r.step(vocab.Input{Kind: vocab.InCancel, ID: "x", Cause: &vocab.CancelCause{Kind: vocab.CancelUser}})
	var res *vocab.PromptResult
	for _, x := range r.res {
		if x.Kind == session.PromptEnded && x.Input == "p1" {
			res = x.Prompt
		}
	}
	if res == nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("p1: %+v, want cancelled", res)
	}
	if handedOut(r, session.WorkModel) {
		t.Fatal("a model request reached the adapter")
	}
	for _, w := range r.work {
		if w.Op == session.Cancel && w.Kind == session.WorkModel {
			t.Fatal("the adapter was asked to cancel work it never got")
		}
	}
	if got := fmt.Sprint(lanes(r, 0)); got != fmt.Sprintf("[wait %d release %d]", slot.ID, slot.ID) {
		t.Fatalf("lane events %s", got)
	}
}

// A tool call that waits for its slot when its turn is cancelled ends
// aborted at once (it never ran: no grace to wait for).
func TestLaneCancelOfAWaitingToolCall(t *testing.T) {
	r, _ := laneRig(t)
	msg := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
	r.step(vocab.Input{Kind: vocab.InSlotGranted, Work: r.started(session.WorkSlot).ID})
	m := r.started(session.WorkModel)
	// The approval gives the slot back; once approved, the call waits for
	// a new one, and the cancel comes first.
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: calling("ask"), Finish: vocab.FinishToolCalls})
	r.step(vocab.Input{Kind: vocab.InApprove, ID: "a1", Approval: &vocab.Approval{CallID: "c-ask", Decision: vocab.Approve}})
	if handedOut(r, session.WorkTool) {
		t.Fatal("the approved call was handed out without a slot")
	}
	r.step(vocab.Input{Kind: vocab.InCancel, ID: "x", Cause: &vocab.CancelCause{Kind: vocab.CancelUser}})
	var ended *vocab.TurnEndPayload
	for _, ev := range r.log {
		if p, ok := ev.Payload.(vocab.TurnEndPayload); ok {
			ended = &p
		}
	}
	if ended == nil || ended.Reason.Kind != vocab.EndAborted {
		t.Fatalf("the turn did not end at the cancel: %+v", ended)
	}
	results := 0
	for _, msg := range r.core.History().All() {
		if msg.Result != nil {
			results++
			if msg.Result.Code != vocab.CodeToolAborted {
				t.Errorf("the call's result %+v, want aborted", msg.Result)
			}
		}
	}
	if results != 1 {
		t.Fatalf("%d results in the history, want 1", results)
	}
}

// A reopen forgets the slot of the process that died (and logs it
// released); the log folds back.
func TestLaneSlotForgottenByAReopen(t *testing.T) {
	r, cfg := laneRig(t)
	msg := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
	slot := r.started(session.WorkSlot)
	r.step(vocab.Input{Kind: vocab.InSlotGranted, Work: slot.ID})
	mark := r.crash(cfg)
	if got := fmt.Sprint(lanes(r, mark)); got != fmt.Sprintf("[release %d]", slot.ID) {
		t.Fatalf("lane events of the reopen %s", got)
	}
	if handedOut(r, session.WorkSlot) {
		t.Fatal("the recovery asked for a slot: it rests")
	}
}
