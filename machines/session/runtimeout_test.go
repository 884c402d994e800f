package session_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// runTimers returns the run-timeout timers started so far: the timers
// due an hour or more after the session's first event (the tests' other
// timers, graces and retries, are due within seconds of their start).
func (r *rig) runTimers(_ session.Config) []session.Work {
	var out []session.Work
	for _, w := range r.work {
		if w.Op == session.Start && w.Kind == session.WorkTimer && w.Deadline.Sub(r.log[0].At) >= time.Hour {
			out = append(out, w)
		}
	}
	return out
}

func promptOf(t *testing.T, r *rig, id vocab.ID) *vocab.PromptResult {
	t.Helper()
	for _, res := range r.res {
		if res.Kind == session.PromptEnded && res.Input == id {
			return res.Prompt
		}
	}
	return nil
}

// The run's timeout runs out while a tool runs: the turn is cancelled
// with cause timeout, the call gets an aborted result, the prompt fails
// run.timeout, and queued input stays queued.
func TestRunTimeoutCancelsTheRun(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", RunTimeout: 2 * time.Hour, Tools: []vocab.ToolSpec{{Name: "slow"}}}
	r := newRig(t, cfg)
	p := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p})
	timers := r.runTimers(cfg)
	if len(timers) != 1 || !timers[0].Deadline.Equal(r.at.Add(2*time.Hour)) {
		t.Fatalf("run timers %v, want one 2h after the prompt's claim (%s)", timers, r.at)
	}
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "slow", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	r.started(session.WorkTool)
	q := vocab.UserText("next")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p2", Message: &q})

	r.step(vocab.Input{Kind: vocab.InTimerFired, Work: timers[0].ID})
	// The cancel gives the running tool its grace; let it end.
	for _, w := range r.work {
		if w.Op == session.Start && w.Kind == session.WorkTimer && w.ID > timers[0].ID && promptOf(t, r, "p1") == nil {
			r.step(vocab.Input{Kind: vocab.InTimerFired, Work: w.ID})
		}
	}
	res := promptOf(t, r, "p1")
	if res == nil || res.Kind != vocab.PromptFailed || res.Err == nil || res.Err.Code != vocab.CodeRunTimeout {
		t.Fatalf("p1 ended %v, want failed{run.timeout}", res)
	}
	if promptOf(t, r, "p2") != nil {
		t.Errorf("the queued prompt p2 ended with the timed-out run")
	}
	var aborted bool
	for _, ev := range r.log {
		if p, ok := ev.Payload.(vocab.ToolPayload); ok && ev.Kind == vocab.EventToolResult && p.Result.Code == vocab.CodeToolAborted {
			aborted = true
		}
	}
	if !aborted {
		t.Error("the running call got no aborted result")
	}
}

// Turns after the prompt's (a steer's wake) are the same run: the timer
// armed for each turn has the run's deadline; the next prompt starts a
// new run with a new deadline. The timer is the turn's: its end disarms it.
func TestRunTimeoutSpansTheRun(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m"}
	r := newRig(t, cfg)
	text := func(s string) *vocab.Message { m := vocab.UserText(s); return &m }
	answer := func() {
		m := r.started(session.WorkModel)
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok"}}}})
	}
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: text("one")})
	answer()
	r.step(vocab.Input{Kind: vocab.InSteer, ID: "s1", Message: text("and")})
	answer()
	timers := r.runTimers(cfg)
	if len(timers) != 2 || !timers[0].Deadline.Equal(timers[1].Deadline) {
		t.Fatalf("run timers after a prompt and a steer's turn: %v, want two with one deadline", timers)
	}
	if d := timers[0].Deadline.Sub(r.log[0].At); d < session.DefaultRunTimeout {
		t.Errorf("deadline %s after the first event, want about 48 h", d)
	}
	for _, tm := range timers {
		var cancelled bool
		for _, w := range r.work {
			cancelled = cancelled || w.Op == session.Cancel && w.ID == tm.ID
		}
		if !cancelled {
			t.Errorf("the run timer %d outlived its turn", tm.ID)
		}
	}
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p2", Message: text("two")})
	answer()
	third := r.runTimers(cfg)
	if len(third) != 3 || !third[2].Deadline.After(timers[0].Deadline) {
		t.Fatalf("after a second prompt: %v, want a third timer with a later deadline", third)
	}
	// A late fire of a disarmed run timer is stale.
	r.step(vocab.Input{Kind: vocab.InTimerFired, Work: timers[0].ID})
	if last := r.log[len(r.log)-1]; last.Kind != vocab.EventInputStale {
		t.Errorf("a fire of the cancelled run timer logged %s, want input/stale", last.Kind)
	}
	// A turn that starts after the deadline starts a new run.
	r.at = third[2].Deadline.Add(time.Minute)
	r.step(vocab.Input{Kind: vocab.InSteer, ID: "s2", Message: text("much later")})
	if all := r.runTimers(cfg); len(all) != 4 || !all[3].Deadline.After(third[2].Deadline) {
		t.Errorf("a turn after the deadline: timers %v, want a new run", all)
	}

	off := session.Config{Session: "s2", Model: "m", NoRunTimeout: true}
	r2 := newRig(t, off)
	r2.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: text("one")})
	if n := len(r2.runTimers(off)); n != 0 {
		t.Errorf("NoRunTimeout: %d run timers", n)
	}
	if err := (session.Config{Session: "s3", RunTimeout: -time.Second}).Validate(); err == nil {
		t.Error("a negative RunTimeout was accepted")
	}
}

// A reopen keeps the run's deadline: a turn that goes on across it (it
// waits for an approval) has its timer armed again as it was.
func TestRunTimeoutSurvivesAReopen(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "w", Approval: true}}}
	r := newRig(t, cfg)
	p := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p})
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "w", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	before := r.runTimers(cfg)[0]
	r.crash(cfg)
	var again *session.Work
	for i, w := range r.work {
		if w.Op == session.Start && w.ID == before.ID {
			again = &r.work[i]
		}
	}
	if again == nil || !again.Deadline.Equal(before.Deadline) {
		t.Fatalf("after the reopen the run timer is %v, want %v again", again, before)
	}
}

// The deadline runs on while a call awaits approval: the timeout cancels
// the turn, the question is abandoned, the prompt fails run.timeout.
func TestRunTimeoutWhileAwaitingApproval(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", RunTimeout: time.Hour, Tools: []vocab.ToolSpec{{Name: "w", Approval: true}}}
	r := newRig(t, cfg)
	p := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p})
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "w", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	if len(r.core.Approvals()) != 1 {
		t.Fatal("c1 does not await approval")
	}
	r.step(vocab.Input{Kind: vocab.InTimerFired, Work: r.runTimers(cfg)[0].ID})
	if res := promptOf(t, r, "p1"); res == nil || res.Err == nil || res.Err.Code != vocab.CodeRunTimeout {
		t.Fatalf("p1 ended %v, want failed{run.timeout}", res)
	}
	var abandoned bool
	for _, ev := range r.log {
		if a, ok := ev.Payload.(vocab.ApprovalPayload); ok && a.State == vocab.ApprovalAborted {
			abandoned = true
		}
	}
	if !abandoned || len(r.core.Approvals()) != 0 {
		t.Errorf("the approval was not abandoned (event %v, pending %v)", abandoned, r.core.Approvals())
	}
}

// The deadline runs on while the agent is paused: a Continue before it
// goes on with the same run (same deadline); a Continue after it starts a
// new run.
func TestRunTimeoutWhilePaused(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", RunTimeout: time.Hour, Tools: []vocab.ToolSpec{{Name: "t"}}}
	r := newRig(t, cfg)
	p := vocab.UserText("go")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p})
	call := func() {
		m := r.started(session.WorkModel)
		reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: fmt.Sprint("c", len(r.log)), Name: "t", Args: json.RawMessage(`{}`)}}}}
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	}
	call()
	r.step(vocab.Input{Kind: vocab.InPause, ID: "k1"})
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: r.started(session.WorkTool).ID, Result: &vocab.ToolResult{Content: "ok"}})
	if _, ts := r.core.State(); ts != "" {
		t.Fatalf("the turn did not stop at its drain when paused: %q", ts)
	}
	first := r.runTimers(cfg)
	r.at = r.at.Add(10 * time.Minute) // paused, within the hour
	r.step(vocab.Input{Kind: vocab.InContinue, ID: "k2"})
	same := r.runTimers(cfg)
	if len(same) != 2 || !same[1].Deadline.Equal(first[0].Deadline) {
		t.Fatalf("a Continue within the deadline: timers %v, want the run's deadline again", same)
	}
	call()
	r.step(vocab.Input{Kind: vocab.InPause, ID: "k3"})
	r.step(vocab.Input{Kind: vocab.InToolDone, Work: r.started(session.WorkTool).ID, Result: &vocab.ToolResult{Content: "ok"}})
	r.at = first[0].Deadline.Add(time.Minute) // paused past the deadline
	r.step(vocab.Input{Kind: vocab.InContinue, ID: "k4"})
	all := r.runTimers(cfg)
	if len(all) != 3 || !all[2].Deadline.After(first[0].Deadline) {
		t.Errorf("a Continue after the deadline: timers %v, want a new run", all)
	}
}
