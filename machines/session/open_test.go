package session_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// rig drives a core by hand and keeps its log, as a lane with a durable
// store would.
type rig struct {
	t    *testing.T
	core *session.Core
	log  []vocab.Event
	work []session.Work
	res  []session.Result
	at   time.Time
}

func newRig(t *testing.T, cfg session.Config) *rig {
	t.Helper()
	core, err := session.New(cfg, session.NewMachines())
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, core: core, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.step(r.open(cfg))
	return r
}

func (r *rig) open(cfg session.Config) vocab.Input {
	b, err := session.ConfigJSON(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return vocab.Input{Kind: vocab.InOpen, Config: b}
}

// step steps in (stamped one second after the last) and carries out the
// Ready: events to the log, work and results kept for inspection.
func (r *rig) step(in vocab.Input) {
	r.t.Helper()
	r.at = r.at.Add(time.Second)
	in.At = r.at
	if err := r.core.Step(in); err != nil {
		r.t.Fatalf("Step(%s): %v", in.Kind, err)
	}
	rd, _ := r.core.Ready()
	for _, ev := range rd.Events {
		// Through JSON, as a durable log keeps it.
		b, err := json.Marshal(ev)
		if err != nil {
			r.t.Fatal(err)
		}
		var back vocab.Event
		if err := json.Unmarshal(b, &back); err != nil {
			r.t.Fatal(err)
		}
		r.log = append(r.log, back)
	}
	r.work = append(r.work, rd.Work...)
	r.res = append(r.res, rd.Results...)
	r.core.Advance(rd)
}

// started returns the last started work of kind.
func (r *rig) started(kind session.WorkKind) session.Work {
	r.t.Helper()
	for i := len(r.work) - 1; i >= 0; i-- {
		if w := r.work[i]; w.Op == session.Start && w.Kind == kind {
			return w
		}
	}
	r.t.Fatalf("no %s work started", kind)
	return session.Work{}
}

// crash folds the log into a fresh core, as a reopen after a crash does,
// and steps the open input that recovers it.
func (r *rig) crash(cfg session.Config) int {
	r.t.Helper()
	core, err := session.New(cfg, session.NewMachines())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, ev := range r.log {
		in, ok := ev.Payload.(vocab.Input)
		if !ok {
			if p, stale := ev.Payload.(vocab.StalePayload); stale {
				in, ok = vocab.Input{Kind: p.Input, Work: p.Work, At: ev.At}, true
			}
		}
		if !ok {
			continue
		}
		if err := core.Step(in); err != nil {
			r.t.Fatalf("fold: input %d (%s): %v", ev.Seq, in.Kind, err)
		}
		rd, _ := core.Ready()
		core.Advance(rd)
	}
	if core.Seq() != uint64(len(r.log)) {
		r.t.Fatalf("fold derived %d events, the log has %d", core.Seq(), len(r.log))
	}
	r.core, r.work, r.res = core, nil, nil
	mark := len(r.log)
	r.step(r.open(cfg))
	return mark
}

func kinds(evs []vocab.Event) []vocab.EventKind {
	var ks []vocab.EventKind
	for _, ev := range evs {
		if ev.Kind != vocab.EventTransition {
			ks = append(ks, ev.Kind)
		}
	}
	return ks
}

// A crash while a tool runs: reopening closes the call with the
// interrupted result, the step and the turn with interrupted, cancels the
// prompt; queued input stays queued, and the next request logs its header
// as resume.
func TestReopenRecoversATurnACrashLeftOpen(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", Tools: []vocab.ToolSpec{{Name: "slow"}}}
	r := newRig(t, cfg)
	if r.log[0].Kind != vocab.EventKind("input/open") {
		t.Fatalf("the log starts with %s, want input/open", r.log[0].Kind)
	}
	p1 := vocab.UserText("run the slow tool")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &p1})
	m := r.started(session.WorkModel)
	reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "slow", Args: json.RawMessage(`{}`)}}}}
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	r.started(session.WorkTool)
	p2 := vocab.UserText("then this")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p2", Message: &p2})

	mark := r.crash(cfg)
	after := r.log[mark:]
	var sawResult, sawStepEnd, sawTurnEnd, sawCancelled bool
	for _, ev := range after {
		switch p := ev.Payload.(type) {
		case vocab.ToolPayload:
			if ev.Kind == vocab.EventToolResult {
				sawResult = true
				if p.Result == nil || p.Result.Content != vocab.InterruptedToolText || !p.Result.IsError || p.Call.ID != "c1" {
					t.Errorf("tool result after recovery: %+v", p.Result)
				}
			}
		case vocab.StepEndPayload:
			sawStepEnd = true
			if p.Finish != vocab.FinishInterrupted {
				t.Errorf("step/end finish %s, want interrupted", p.Finish)
			}
		case vocab.TurnEndPayload:
			sawTurnEnd = true
			if p.Reason.Kind != vocab.EndInterrupted {
				t.Errorf("turn/end %+v, want interrupted", p.Reason)
			}
		case vocab.PromptPayload:
			if p.Prompt == "p1" && p.State == string(vocab.PromptCancelled) {
				sawCancelled = true
			}
			if p.Prompt == "p2" && p.State != "running" {
				t.Errorf("queued prompt p2 ended %s in recovery", p.State)
			}
		}
	}
	if !sawResult || !sawStepEnd || !sawTurnEnd || !sawCancelled {
		t.Fatalf("recovery events %v: result %v step/end %v turn/end %v p1 cancelled %v",
			kinds(after), sawResult, sawStepEnd, sawTurnEnd, sawCancelled)
	}
	for _, w := range r.work {
		if w.Op == session.Start && w.Kind == session.WorkTool {
			t.Errorf("recovery started tool work %d again: a crash must not repeat side effects", w.ID)
		}
	}
	// Every tool call in history has exactly one result.
	calls, results := 0, 0
	for _, msg := range r.core.History().All() {
		for _, part := range msg.Parts {
			if part.Kind == vocab.PartToolCall {
				calls++
			}
		}
		if msg.Result != nil {
			results++
		}
	}
	if calls != 1 || results != 1 {
		t.Errorf("history has %d calls and %d results", calls, results)
	}
	// Recovery leaves the session resting (the application registers its
	// hooks first); Continue runs the queued prompt, whose request logs
	// the header as resume.
	a, tn := r.core.State()
	if a == "running" || tn != "" {
		t.Errorf("after recovery the agent is %s, turn %q: want it resting", a, tn)
	}
	r.step(vocab.Input{Kind: vocab.InContinue})
	var header *vocab.HeaderPayload
	for _, ev := range r.log[mark:] {
		if h, ok := ev.Payload.(vocab.HeaderPayload); ok {
			header = &h
		}
	}
	if header == nil {
		next := r.started(session.WorkModel)
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: next.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok"}}}})
		for _, ev := range r.log[mark:] {
			if h, ok := ev.Payload.(vocab.HeaderPayload); ok {
				header = &h
			}
		}
	}
	if header == nil || header.Reason != "resume" || header.Model != "m" || !slices.Equal(header.Tools, []string{"slow"}) {
		t.Errorf("request/header after the reopen: %+v, want resume with model m and tool slow", header)
	}
}

// The first request of a session logs its header as initial, once.
func TestFirstRequestLogsTheHeaderInitial(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m", System: "be brief"}
	r := newRig(t, cfg)
	for i, id := range []vocab.ID{"p1", "p2"} {
		msg := vocab.UserText("hi")
		r.step(vocab.Input{Kind: vocab.InSubmit, ID: id, Message: &msg})
		m := r.started(session.WorkModel)
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "ok"}}}})
		var headers []vocab.HeaderPayload
		for _, ev := range r.log {
			if h, ok := ev.Payload.(vocab.HeaderPayload); ok {
				headers = append(headers, h)
			}
		}
		if len(headers) != 1 || headers[0].Reason != "initial" || headers[0].System != "be brief" {
			t.Fatalf("after prompt %d: headers %+v, want one initial", i+1, headers)
		}
	}
}

// A checkpoint records the core as it was: restoring the snapshot and
// stepping the inputs after it gives the same events as the whole log.
func TestCheckpointSnapshotFoldsLikeTheLog(t *testing.T) {
	cfg := session.Config{Session: "s1", Model: "m"}
	r := newRig(t, cfg)
	msg := vocab.UserText("hi")
	r.step(vocab.Input{Kind: vocab.InSubmit, ID: "p1", Message: &msg})
	m := r.started(session.WorkModel)
	r.step(vocab.Input{Kind: vocab.InModelParts, Work: m.ID, Parts: []vocab.StreamPart{{Kind: vocab.StreamText, Text: "hel"}}})
	r.step(vocab.Input{Kind: vocab.InCheckpoint})
	snapAt := len(r.log)
	last := r.log[snapAt-1]
	snap, ok := last.Payload.(vocab.SnapshotPayload)
	if last.Kind != vocab.EventSnapshot || !ok || snap.Seq != last.Seq-2 {
		t.Fatalf("the checkpoint's last event is %s %+v", last.Kind, last.Payload)
	}
	r.step(vocab.Input{Kind: vocab.InModelParts, Work: m.ID, Parts: []vocab.StreamPart{{Kind: vocab.StreamText, Text: "lo"}}})
	r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "hello"}}}})

	core, err := session.Restore(snap.Core, session.NewMachines())
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := core.Ready()
	core.Advance(rd)
	var derived []vocab.Event
	for _, ev := range r.log[snap.Seq:] {
		in, ok := ev.Payload.(vocab.Input)
		if !ok {
			continue
		}
		if err := core.Step(in); err != nil {
			t.Fatalf("input %d: %v", ev.Seq, err)
		}
		rd, _ := core.Ready()
		derived = append(derived, rd.Events...)
		core.Advance(rd)
	}
	want := r.log[snap.Seq:]
	if len(derived) != len(want) {
		t.Fatalf("derived %d events after the snapshot, the log has %d", len(derived), len(want))
	}
	for i := range want {
		a, _ := json.Marshal(want[i])
		b, _ := json.Marshal(derived[i])
		if string(a) != string(b) {
			t.Fatalf("event %d differs:\nlog  %s\nfold %s", want[i].Seq, a, b)
		}
	}
	// The assistant message names the streamed parts it came from.
	for _, ev := range r.log {
		if ev.Kind == vocab.EventAssistant {
			p := ev.Payload.(vocab.MessagePayload)
			if len(p.SourceSeqs) != 2 {
				t.Errorf("assistant/message sourceSeqs %v, want the two model.parts events", p.SourceSeqs)
			}
			for _, s := range p.SourceSeqs {
				if r.log[s-1].Kind != vocab.EventKind("input/model.parts") {
					t.Errorf("sourceSeq %d is %s", s, r.log[s-1].Kind)
				}
			}
		}
	}
}
