package agent_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// run is the datadriven glue around chart.Table for the agent machine.
//
// Commands:
//
//	new [gate] [hard-stop=DURATION] [turn=N] [paused]
//	fire            (one event per input line, see event)
//	snapshot        (JSON round trip; prints the snapshot)
//
// new and fire end with the leaf state and a summary of the context; fire
// also checks the machine's invariants after every event.
func run(t *testing.T, tab *chart.Table[agent.Ctx], d *datadriven.TestData) string {
	var (
		out string
		err error
	)
	switch d.Cmd {
	case "new":
		var args chart.Args
		if _, args, err = chart.ParseLine(d.Cmd + " " + cmdArgs(d)); err != nil {
			break
		}
		cfg := agent.Config{PromptGate: args.Bool("gate")}
		if s, ok := args["hard-stop"]; ok {
			if cfg.HardStop, err = time.ParseDuration(s); err != nil {
				break
			}
		}
		c := agent.NewCtx(cfg)
		c.Turn, _ = args.Int("turn", 0)
		c.Paused = args.Bool("paused")
		out = tab.Start(c)
	case "fire":
		out, err = tab.Fire(d.Input)
	case "snapshot":
		out, err = tab.RoundTrip(func(a, b agent.Ctx) string { return cmp.Diff(a, b, cmpopts.IgnoreUnexported(agent.Ctx{})) })
	default:
		err = fmt.Errorf("unknown command %q", d.Cmd)
	}
	if err != nil {
		d.Fatalf(t, "%s: %v", d.Pos, err)
	}
	return out
}

// cmdArgs renders the directive's arguments back as "key=value" words.
func cmdArgs(d *datadriven.TestData) string {
	words := make([]string, len(d.CmdArgs))
	for i, a := range d.CmdArgs {
		words[i] = a.String()
	}
	return strings.Join(words, " ")
}

// summary renders the state and the non-empty parts of the context.
func summary(inst *agent.Instance) string {
	c := &inst.Ctx
	ids := func(ms []vocab.Message) string {
		s := make([]string, len(ms))
		for i, m := range ms {
			s[i] = string(m.ID)
			if m.Key != "" {
				s[i] = m.Key + "=" + s[i]
			}
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	parts := []string{"state=" + string(inst.State()), "status=" + string(c.Status), fmt.Sprintf("turn=%d", c.Turn)}
	if len(c.NextTurn) > 0 {
		parts = append(parts, "next-turn="+ids(c.NextTurn))
	}
	if len(c.NextStep) > 0 {
		parts = append(parts, "next-step="+ids(c.NextStep))
	}
	if len(c.Reminders) > 0 {
		parts = append(parts, "reminders="+ids(c.Reminders))
	}
	if c.WakeLatched {
		parts = append(parts, "latched")
	}
	if c.Paused {
		parts = append(parts, "paused")
	}
	if c.Abort != nil {
		parts = append(parts, "abort="+c.Abort.String())
	}
	if len(c.Background) > 0 {
		bg := make([]string, len(c.Background))
		for i, b := range c.Background {
			bg[i] = b.CallID + ":" + b.Name
		}
		parts = append(parts, "background=["+strings.Join(bg, " ")+"]")
	}
	if c.Gating != "" {
		parts = append(parts, "gating="+string(c.Gating))
	}
	if c.Timer.Pending() {
		parts = append(parts, fmt.Sprintf("timer=%s#%d", c.Timer.Name, c.Timer.Seq))
	}
	return strings.Join(parts, " ") + "\n"
}

// invariants checks what must hold between any two events.
func invariants(m *agent.Machine, inst *agent.Instance) error {
	c := &inst.Ctx
	if err := c.Validate(); err != nil {
		return err
	}
	want := agent.StatusIdle
	if m.In(inst, agent.Running) || m.In(inst, agent.Closing) {
		want = agent.StatusRunning
	}
	switch s := inst.State(); {
	case c.Status != want:
		return fmt.Errorf("status %s in %s", c.Status, s)
	case s == agent.Ready && len(c.Background) > 0:
		return fmt.Errorf("ready with background tools %v", c.Background)
	case s == agent.Waiting && len(c.Background) == 0:
		return fmt.Errorf("waiting without background tools")
	case s == agent.Gating && c.Gating == "":
		return fmt.Errorf("gating without a judged prompt")
	case s != agent.Gating && c.Gating != "":
		return fmt.Errorf("judged prompt %s outside gating", c.Gating)
	case s == agent.Aborting && c.Abort == nil:
		return fmt.Errorf("aborting without a cause")
	case m.In(inst, agent.Idle) && (c.Abort != nil || c.WakeLatched):
		return fmt.Errorf("idle with abort %v, latched %t", c.Abort, c.WakeLatched)
	case c.Timer.Pending() && s != agent.Aborting:
		return fmt.Errorf("timer %s#%d pending in %s", c.Timer.Name, c.Timer.Seq, s)
	case c.WakeLatched && c.Abort != nil && c.Abort.Kind == vocab.CancelDisposed:
		return fmt.Errorf("wake latched after a disposing abort")
	}
	return nil
}

func text(a chart.Args, id string) vocab.Message {
	t, ok := a["text"]
	if !ok {
		t = id
	}
	m := vocab.UserText(t)
	m.Source = ""
	m.ID = vocab.ID(id)
	return m
}

// event parses one table line into an agent event:
//
//	submit id=ID [text=T] | steer id=ID [text=T] | inject id=ID [text=T]
//	notify id=ID [text=T] [bypass] | remind key=K id=ID [text=T]
//	cancel [cause=K] [reason=R] [keep] | pause | continue [resume]
//	close | closed | maintenance.start | maintenance.done
//	turn.ended [end=K] [cause=K] [code=C] [message=M]
//	timer.fired name=N seq=N | drain | tool.detached id=CALL name=N
//	background.done id=CALL msg=ID [name=N] [content=T] [error] [aborted]
//	prompt.pass [id=ID text=T] | prompt.block [reason=R]
func event(line string) (chart.Event, error) {
	name, a, err := chart.ParseLine(line)
	if err != nil {
		return nil, err
	}
	cause := func() vocab.CancelCause {
		k := vocab.CancelKind(a["cause"])
		if k == "" {
			k = vocab.CancelUser
		}
		return vocab.CancelCause{Kind: k, Reason: a["reason"]}
	}
	switch chart.Trigger(name) {
	case agent.TrSubmit:
		return agent.Submit{Message: text(a, a["id"])}, nil
	case agent.TrSteer:
		return agent.Steer{Message: text(a, a["id"])}, nil
	case agent.TrInject:
		return agent.Inject{Message: text(a, a["id"])}, nil
	case agent.TrNotify:
		return agent.Notify{Message: text(a, a["id"]), BypassMaxSteps: a.Bool("bypass")}, nil
	case agent.TrRemind:
		return agent.Remind{Key: a["key"], Message: text(a, a["id"])}, nil
	case agent.TrDrop:
		return agent.Drop{ID: vocab.ID(a["id"])}, nil
	case agent.TrCancel:
		return agent.Cancel{Cause: cause(), KeepInbox: a.Bool("keep")}, nil
	case agent.TrPause:
		return agent.Pause{}, nil
	case agent.TrContinue:
		return agent.Continue{Resume: a.Bool("resume")}, nil
	case agent.TrClose:
		return agent.Close{}, nil
	case agent.TrClosed:
		return agent.Closed{}, nil
	case agent.TrMaintenanceStart:
		return agent.MaintenanceStart{}, nil
	case agent.TrMaintenanceDone:
		return agent.MaintenanceDone{}, nil
	case agent.TrTurnEnded:
		end := vocab.TurnEnd{Kind: vocab.EndKind(a["end"]), Code: vocab.Code(a["code"]), Message: a["message"]}
		if end.Kind == "" {
			end.Kind = vocab.EndCompleted
		}
		if end.Kind == vocab.EndAborted {
			c := cause()
			end.Cause = &c
		}
		return agent.TurnEnded{End: end}, nil
	case agent.TrTimer:
		seq, err := a.Int("seq", 0)
		return agent.TimerFired{Name: a["name"], Seq: uint64(seq)}, err
	case agent.TrDrain:
		return agent.Drain{}, nil
	case agent.TrToolDetached:
		return agent.ToolDetached{CallID: a["id"], Name: a["name"]}, nil
	case agent.TrBackgroundDone:
		r := vocab.ToolResult{CallID: a["id"], Name: a["name"], Content: a["content"], IsError: a.Bool("error") || a.Bool("aborted")}
		if a.Bool("aborted") {
			r.Code = vocab.CodeToolAborted
		}
		return agent.BackgroundDone{ID: vocab.ID(a["msg"]), CallID: a["id"], Name: a["name"], Result: r}, nil
	case agent.TrPromptPass:
		if id, ok := a["id"]; ok {
			m := text(a, id)
			return agent.PromptPass{Rewritten: &m}, nil
		}
		return agent.PromptPass{}, nil
	case agent.TrPromptBlock:
		return agent.PromptBlock{Reason: a["reason"]}, nil
	}
	return nil, fmt.Errorf("unknown trigger %q", name)
}

// TestTransitions runs every table under testdata/transitions/agent and then
// checks that together they take every transition of the definition.
func TestTransitions(t *testing.T) {
	m := agent.New()
	tab := &chart.Table[agent.Ctx]{M: m, Parse: event, Summary: summary,
		Check: func(inst *agent.Instance) error { return invariants(m, inst) }}
	datadriven.Walk(t, "../../testdata/transitions/agent", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return run(t, tab, d) })
	})
	if t.Failed() {
		return
	}
	if untaken := tab.Untaken(); len(untaken) > 0 {
		t.Errorf("transitions no table takes:\n  %s", strings.Join(untaken, "\n  "))
	}
	t.Logf("tables took %d of %d transitions", tab.Taken(), len(agent.Definition.Transitions))
}

// samples holds a zero-valued event for each trigger, for the matrix.
var samples = []chart.Event{agent.Submit{}, agent.Steer{}, agent.Inject{}, agent.Notify{}, agent.Remind{}, agent.Drop{}, agent.Cancel{},
	agent.Pause{}, agent.Continue{}, agent.Close{}, agent.Closed{}, agent.MaintenanceStart{}, agent.MaintenanceDone{},
	agent.TurnEnded{}, agent.TimerFired{}, agent.Drain{}, agent.ToolDetached{}, agent.BackgroundDone{},
	agent.PromptPass{}, agent.PromptBlock{}}

// TestMatrix: every (state, trigger) pair the definition does not handle
// yields ErrUnhandledTrigger and leaves the instance where it was.
func TestMatrix(t *testing.T) {
	sample, err := chart.Sampler(agent.Definition, samples...)
	if err != nil {
		t.Fatal(err)
	}
	checked, failures := chart.CheckMatrix(agent.New(), sample)
	for _, f := range failures {
		t.Error(f)
	}
	if checked == 0 {
		t.Fatal("matrix checked nothing")
	}
	t.Logf("checked %d unhandled (state, trigger) pairs", checked)
}

// TestRandomWalk fires long random event sequences (fixed seeds) and checks
// the invariants after every accepted event, that a refused event leaves
// the instance untouched, and that snapshots round-trip: the guards'
// preview of an event and the action that applies it must agree.
func TestRandomWalk(t *testing.T) {
	m := agent.New()
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 7))
		cfg := agent.Config{PromptGate: seed%2 == 1}
		var out chart.Out
		inst := m.New(agent.NewCtx(cfg), &out)
		n, calls := 0, 0
		for step := range 2000 {
			n++
			id := fmt.Sprintf("m%d", n)
			var ev chart.Event
			switch k := r.IntN(24); {
			case k < 3:
				ev = agent.Submit{Message: vocab.Message{ID: vocab.ID(id)}}
			case k < 5:
				ev = agent.Steer{Message: vocab.Message{ID: vocab.ID(id)}}
			case k < 6:
				ev = agent.Inject{Message: vocab.Message{ID: vocab.ID(id)}}
			case k < 7:
				ev = agent.Notify{Message: vocab.Message{ID: vocab.ID(id)}, BypassMaxSteps: r.IntN(2) == 0}
			case k < 8:
				ev = agent.Remind{Key: fmt.Sprint("k", r.IntN(3)), Message: vocab.Message{ID: vocab.ID(id)}}
			case k < 9:
				ev = agent.Cancel{Cause: vocab.CancelCause{Kind: []vocab.CancelKind{vocab.CancelUser, vocab.CancelDisposed}[r.IntN(2)]}, KeepInbox: r.IntN(2) == 0}
			case k < 10:
				ev = agent.Pause{}
			case k < 11:
				ev = agent.Continue{Resume: r.IntN(3) == 0}
			case k < 12:
				ev = agent.MaintenanceStart{}
			case k < 13:
				ev = agent.MaintenanceDone{}
			case k < 16:
				ev = agent.TurnEnded{End: vocab.TurnEnd{Kind: vocab.EndCompleted}}
			case k < 17:
				ev = agent.TimerFired{Name: agent.TimerHardStop, Seq: inst.Ctx.TimerSeq}
			case k < 19:
				ev = agent.Drain{}
			case k < 20:
				calls++
				ev = agent.ToolDetached{CallID: fmt.Sprint("c", calls), Name: "sleep"}
			case k < 21:
				ev = agent.BackgroundDone{ID: vocab.ID(id), CallID: fmt.Sprint("c", 1+r.IntN(calls+1))}
			case k < 22:
				if r.IntN(2) == 0 {
					ev = agent.PromptPass{Rewritten: &vocab.Message{ID: "ignored", Parts: []vocab.Part{{Kind: vocab.PartText, Text: "rewritten"}}}}
				} else {
					ev = agent.PromptPass{}
				}
			case k < 23:
				ev = agent.PromptBlock{Reason: "gate"}
			default:
				if r.IntN(20) == 0 {
					ev = agent.Close{}
				} else {
					ev = agent.Pause{}
				}
			}
			before := m.Snapshot(inst)
			judged := inst.State() == agent.Gating && !inst.Ctx.Paused && len(inst.Ctx.NextTurn) > 0 &&
				inst.Ctx.NextTurn[0].ID == inst.Ctx.Gating
			out.Reset()
			err := m.Fire(inst, ev, &out)
			if err != nil {
				var te *chart.TriggerError
				if !errors.As(err, &te) {
					t.Fatalf("seed %d step %d: %T: untyped error %v", seed, step, ev, err)
				}
				if diff := cmp.Diff(before.Ctx, inst.Ctx, cmpopts.IgnoreUnexported(agent.Ctx{})); diff != "" || before.State != inst.State() {
					t.Fatalf("seed %d step %d: refused %T changed the instance:\n%s", seed, step, ev, diff)
				}
				continue
			}
			if err := invariants(m, inst); err != nil {
				t.Fatalf("seed %d step %d: after %T %+v (%s): %v", seed, step, ev, ev, out.Transitions[0], err)
			}
			for _, e := range out.Effects {
				if st, ok := e.(*agent.StartTurn); ok && len(st.Claimed) == 0 && !st.Resume {
					t.Fatalf("seed %d step %d: a turn started with nothing claimed", seed, step)
				}
			}
			if judged {
				if err := verdictApplied(before.Ctx, ev, out.Effects); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			}
			if inst.State() == agent.Closing {
				_ = m.Fire(inst, agent.Closed{}, &out)
				inst = m.New(agent.NewCtx(cfg), &out)
			}
		}
	}
}

// verdictApplied checks that a verdict on the judged prompt of an unpaused
// agent took effect: a block discards exactly that prompt, a pass starts a
// turn that claims it (rewritten when the gate rewrote it).
func verdictApplied(c agent.Ctx, ev chart.Event, effects []chart.Effect) error {
	head := c.NextTurn[0]
	switch e := ev.(type) {
	case agent.PromptBlock:
		for _, eff := range effects {
			if b, ok := eff.(agent.PromptBlocked); ok && b.ID == head.ID {
				return nil
			}
		}
		return fmt.Errorf("block of %s not applied: %v", head.ID, effects)
	case agent.PromptPass:
		want := head.Text()
		if e.Rewritten != nil {
			want = e.Rewritten.Text()
		}
		for _, eff := range effects {
			if st, ok := eff.(*agent.StartTurn); ok {
				last := st.Claimed[len(st.Claimed)-1]
				if st.PromptID != head.ID || last.ID != head.ID || last.Text() != want {
					return fmt.Errorf("pass of %s started %v", head.ID, st)
				}
				return nil
			}
		}
		return fmt.Errorf("pass of %s started no turn: %v", head.ID, effects)
	}
	return nil
}

// TestSubmitByPointer: a *Submit is taken exactly as the Submit it points
// to, from idle (a turn starts), with a gate (the prompt is judged), while
// running (queued), and for a reused id (refused).
func TestSubmitByPointer(t *testing.T) {
	m := agent.New()
	msg := func(id vocab.ID) vocab.Message {
		return vocab.Message{ID: id, Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "hi"}}}
	}
	for _, gate := range []bool{false, true} {
		var outs [2]chart.Out
		var insts [2]*agent.Instance
		for k := range insts {
			insts[k] = m.New(agent.NewCtx(agent.Config{PromptGate: gate}), &outs[k])
		}
		for _, id := range []vocab.ID{"p1", "p2", "p1"} {
			v := agent.Submit{Message: msg(id)}
			errs := [2]error{}
			for k := range insts {
				outs[k].Reset()
				var ev chart.Event = v
				if k == 1 {
					ev = &v
				}
				errs[k] = m.Fire(insts[k], ev, &outs[k])
			}
			if (errs[0] == nil) != (errs[1] == nil) {
				t.Fatalf("gate=%t %s: errors %v / %v", gate, id, errs[0], errs[1])
			}
			if diff := cmp.Diff(outs[0].Effects, outs[1].Effects); diff != "" {
				t.Errorf("gate=%t %s: effects differ by pointer:\n%s", gate, id, diff)
			}
			if diff := cmp.Diff(outs[0].Transitions, outs[1].Transitions); diff != "" {
				t.Errorf("gate=%t %s: transitions differ by pointer:\n%s", gate, id, diff)
			}
			if diff := cmp.Diff(insts[0].Ctx, insts[1].Ctx, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(agent.Ctx{})); diff != "" {
				t.Errorf("gate=%t %s: context differs by pointer:\n%s", gate, id, diff)
			}
			if insts[0].State() != insts[1].State() {
				t.Errorf("gate=%t %s: states %s / %s", gate, id, insts[0].State(), insts[1].State())
			}
		}
	}
}
