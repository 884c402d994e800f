package session_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/vocab"
)

// TestSchedule runs the scheduler tables in testdata/schedule: who runs
// with whom, who waits, in what order results reach history, hooks,
// approvals and aborts in a batch.
//
// Commands:
//
//	config [cap=N] [case-sensitive] [hooks=before,after]
//	  one tool per line: NAME [FIELD:MODE[:recursive][:parents][:default=P]]... [none] [stop] [approval]
//	batch           one call per line: ID NAME ARGS; prints the work started
//	done ID [error] the call's tool returns; prints what started next
//	detach ID       the call's tool goes on in the background
//	hook ID [deny|ask|args=JSON|error]   the call's tool hook answers
//	approve ID [deny|args=JSON]          a person answers
//	cancel          the user cancels the turn
//	timer           every armed timer fires
//	crash           the session is reopened from its log
//	history         the tool results in history, in order
//	events KIND...  events of the kinds since the batch
func TestSchedule(t *testing.T) {
	reached := map[string]bool{}
	datadriven.Walk(t, "testdata/schedule", func(t *testing.T, path string) {
		var s *sched
		collect := func() {
			if s == nil {
				return
			}
			for _, ev := range s.r.log {
				if p, ok := ev.Payload.(vocab.TransitionPayload); ok && p.Machine == "tool" {
					reached[p.From+" "+p.Trigger+" "+p.To] = true
				}
			}
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "config" {
				collect()
				s = newSched(t, d)
				return ""
			}
			return s.do(t, d)
		})
		collect()
	})
	// Every transition of the tool machine is reached by the session core
	// (outside the machine's own tables).
	for _, tr := range tool.Definition.Transitions {
		to := tr.To
		if to == "" {
			to = tr.From
		}
		if !reachedEdge(reached, string(tr.From), string(tr.On), string(to)) {
			t.Errorf("tool transition %s --%s--> %s is reached by no schedule table", tr.From, tr.On, to)
		}
	}
}

// reachedEdge reports whether the edge from --on--> to was logged; an
// edge from or to a compound state is logged with its substates.
func reachedEdge(reached map[string]bool, from, on, to string) bool {
	subs := map[string][]string{string(tool.Executing): {string(tool.Running), string(tool.Aborting)}}
	froms, tos := append([]string{from}, subs[from]...), append([]string{to}, subs[to]...)
	for _, f := range froms {
		for _, x := range tos {
			if reached[f+" "+on+" "+x] {
				return true
			}
		}
	}
	return false
}

type sched struct {
	r     *rig
	cfg   session.Config
	seen  int // work already printed
	mark  int // log index of the batch
	calls map[string]uint64
	hooks map[string]uint64
	fired map[uint64]bool
}

func newSched(t *testing.T, d *datadriven.TestData) *sched {
	cfg := session.Config{Session: "s", Model: "m"}
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "cap":
			n, _ := strconv.Atoi(a.Vals[0])
			cfg.MaxParallelTools = n
		case "case-sensitive":
			cfg.CaseSensitivePaths = true
		case "hooks":
			for _, h := range strings.Split(strings.Join(a.Vals, ","), ",") {
				switch h {
				case "before":
					cfg.Hooks.BeforeTool = true
				case "after":
					cfg.Hooks.AfterTool = true
				}
			}
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		sp := vocab.ToolSpec{Name: f[0]}
		for _, w := range f[1:] {
			switch w {
			case "none":
				sp.NoAccess = true
				continue
			case "stop":
				sp.StopBatch = true
				continue
			case "approval":
				sp.Approval = true
				continue
			}
			parts := strings.Split(w, ":")
			decl := vocab.AccessDecl{Field: parts[0], Mode: vocab.AccessMode(parts[1])}
			for _, p := range parts[2:] {
				switch {
				case p == "recursive":
					decl.Recursive = true
				case p == "parents":
					decl.Parents = true
				case strings.HasPrefix(p, "default="):
					decl.Default = strings.TrimPrefix(p, "default=")
				}
			}
			sp.Access = append(sp.Access, decl)
		}
		cfg.Tools = append(cfg.Tools, sp)
	}
	s := &sched{r: newRig(t, cfg), cfg: cfg, calls: map[string]uint64{}, hooks: map[string]uint64{}, fired: map[uint64]bool{}}
	var slots []vocab.HookName
	if cfg.Hooks.BeforeTool {
		slots = append(slots, vocab.HookBeforeTool)
	}
	if cfg.Hooks.AfterTool {
		slots = append(slots, vocab.HookAfterTool)
	}
	if slots != nil {
		s.r.step(vocab.Input{Kind: vocab.InHooks, Slots: slots})
	}
	return s
}

func (s *sched) do(t *testing.T, d *datadriven.TestData) string {
	r := s.r
	r.t = t
	arg := func(i int) string {
		if i < len(d.CmdArgs) {
			return d.CmdArgs[i].String()
		}
		return ""
	}
	switch d.Cmd {
	case "batch":
		p := vocab.UserText("go")
		r.step(vocab.Input{Kind: vocab.InSubmit, ID: vocab.ID(fmt.Sprintf("p%d", len(r.log))), Message: &p})
		m := r.started(session.WorkModel)
		var reply vocab.Message
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.SplitN(line, " ", 3)
			args := "{}"
			if len(f) == 3 {
				args = f[2]
			}
			reply.Parts = append(reply.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: f[0], Name: f[1], Args: json.RawMessage(args)}})
		}
		s.mark = len(r.log)
		s.seen = len(r.work)
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishToolCalls})
	case "done":
		w := s.work(t, arg(0))
		res := vocab.ToolResult{Content: "ok " + arg(0)}
		switch arg(1) {
		case "error":
			res = vocab.ToolResult{Content: "boom", IsError: true}
		case "aborted":
			res = vocab.ToolResult{Content: "context canceled", IsError: true, Code: vocab.CodeToolAborted}
		case "deliver":
			res.Delivery = &vocab.Delivery{Kind: vocab.DeliverySteer, Message: vocab.UserText("delivered by " + arg(0))}
		}
		r.step(vocab.Input{Kind: vocab.InToolDone, Work: w, Result: &res})
	case "detach":
		w := s.work(t, arg(0))
		s.calls[arg(0)] = w // it goes on
		r.step(vocab.Input{Kind: vocab.InToolDetached, Work: w, Text: "running " + arg(0)})
	case "hook":
		v := vocab.HookVerdict{}
		switch a := arg(1); {
		case a == "deny":
			v.Refuse, v.Reason = true, "not allowed"
		case a == "ask":
			v.Ask = "may " + arg(0) + " run?"
		case a == "error":
			v.Err = &vocab.Error{Code: vocab.CodeHook, Message: "hook broke"}
		case strings.HasPrefix(a, "args="):
			v.Args = json.RawMessage(strings.TrimPrefix(a, "args="))
		}
		id, ok := s.hooks[arg(0)]
		if !ok {
			t.Fatalf("no hook running for %s", arg(0))
		}
		delete(s.hooks, arg(0))
		r.step(vocab.Input{Kind: vocab.InHookDone, Work: id, Hook: &v})
	case "approve":
		a := vocab.Approval{CallID: arg(0), Decision: vocab.Approve}
		switch x := arg(1); {
		case x == "deny":
			a.Decision, a.Reason = vocab.Deny, "no"
		case strings.HasPrefix(x, "args="):
			a.Decision, a.Args = vocab.Edit, json.RawMessage(strings.TrimPrefix(x, "args="))
		}
		r.at = r.at.Add(1)
		if err := r.core.Step(vocab.Input{Kind: vocab.InApprove, At: r.at, ID: vocab.ID("a-" + arg(0)), Approval: &a}); err != nil {
			return "error: " + err.Error()
		}
		rd, _ := r.core.Ready()
		r.log = append(r.log, rd.Events...)
		r.work = append(r.work, rd.Work...)
		r.core.Advance(rd)
	case "reply":
		// The model answers the request in flight with text: the step ends.
		m := s.r.started(session.WorkModel)
		reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "done"}}}
		r.step(vocab.Input{Kind: vocab.InModelDone, Work: m.ID, Reply: &reply, Finish: vocab.FinishStop})
	case "cancel":
		r.step(vocab.Input{Kind: vocab.InCancel, ID: vocab.ID(fmt.Sprintf("x%d", len(r.log))), Cause: &vocab.CancelCause{Kind: vocab.CancelUser}})
	case "timer":
		// The armed timer with the earliest deadline fires (of equal
		// ones, the one armed last: a tool's grace before its turn's).
		var first *session.Work
		for i, w := range r.work {
			if w.Op == session.Start && w.Kind == session.WorkTimer && !s.fired[w.ID] && (first == nil || !w.Deadline.After(first.Deadline)) {
				first = &r.work[i]
			}
		}
		if first == nil {
			t.Fatal("no timer armed")
		}
		s.fired[first.ID] = true
		r.step(vocab.Input{Kind: vocab.InTimerFired, Work: first.ID})
	case "update":
		w, ok := s.calls[arg(0)]
		if !ok {
			t.Fatalf("call %s is not running", arg(0))
		}
		r.step(vocab.Input{Kind: vocab.InToolUpdate, Work: w, Text: "half way"})
	case "crash":
		s.seen = 0
		r.crash(s.cfg)
		s.calls, s.hooks = map[string]uint64{}, map[string]uint64{}
	case "history":
		var b strings.Builder
		h := r.core.History()
		for i := range h.Len() {
			if m := h.At(i); m.Result != nil {
				fmt.Fprintf(&b, "%s: %s\n", m.Result.CallID, m.Result.Content)
			}
		}
		return b.String()
	case "events":
		var b strings.Builder
		for _, ev := range r.log[s.mark:] {
			for _, a := range d.CmdArgs {
				if string(ev.Kind) == a.Key {
					fmt.Fprintf(&b, "%s %s\n", ev.Kind, describe(ev))
				}
			}
		}
		return b.String()
	case "approvals":
		var b strings.Builder
		for _, a := range r.core.Approvals() {
			fmt.Fprintf(&b, "%s %s %q\n", a.Call.ID, a.Call.Args, a.Question)
		}
		return b.String()
	default:
		t.Fatalf("unknown command %s", d.Cmd)
	}
	return s.news()
}

// work returns the tool work running call id.
func (s *sched) work(t *testing.T, id string) uint64 {
	w, ok := s.calls[id]
	if !ok {
		t.Fatalf("call %s is not running", id)
	}
	delete(s.calls, id)
	return w
}

// news prints the work started and cancelled since the last command, and
// the state of the agent and turn.
func (s *sched) news() string {
	var b strings.Builder
	for _, w := range s.r.work[s.seen:] {
		switch {
		case w.Kind == session.WorkTool && w.Op == session.Start:
			s.calls[w.Call.ID] = w.ID
			fmt.Fprintf(&b, "run %s %s\n", w.Call.ID, w.Call.Args)
		case w.Kind == session.WorkTool:
			for id, n := range s.calls {
				if n == w.ID {
					fmt.Fprintf(&b, "cancel %s\n", id)
				}
			}
		case w.Kind == session.WorkHook && w.Op == session.Start && w.Call != nil:
			s.hooks[w.Call.ID] = w.ID
			fmt.Fprintf(&b, "hook %s %s\n", w.Hook, w.Call.ID)
		case w.Kind == session.WorkModel && w.Op == session.Start:
			b.WriteString("model request\n")
		}
	}
	s.seen = len(s.r.work)
	a, tu := s.r.core.State()
	fmt.Fprintf(&b, "state: %s %s\n", a, tu)
	return b.String()
}

func describe(ev vocab.Event) string {
	switch p := ev.Payload.(type) {
	case vocab.ToolPayload:
		if p.Result != nil {
			return p.Call.ID + ": " + p.Result.Content
		}
		return p.Call.ID
	case vocab.ApprovalPayload:
		return fmt.Sprintf("%s %s %s %s", p.Call.ID, p.State, p.Decision, p.Question)
	case vocab.Input:
		return string(p.Kind)
	case vocab.MessagePayload:
		return p.Message.Text()
	}
	return ""
}
