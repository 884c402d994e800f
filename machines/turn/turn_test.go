package turn_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// harness drives one turn instance from a transition table (chart.Table
// does the work; this is the datadriven glue).
//
// Commands:
//
//	new [turn=N] [max-steps=N] [max-attempts=N] [grace=DURATION]
//	fire            (one event per input line, see event)
//	snapshot        (JSON round trip; prints the snapshot)
func run(t *testing.T, tab *chart.Table[turn.Ctx], d *datadriven.TestData) string {
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
		cfg := turn.Config{}
		cfg.Turn, _ = args.Int("turn", 1)
		cfg.MaxSteps, _ = args.Int("max-steps", 0)
		if n, _ := args.Int("max-attempts", 0); n > 0 {
			cfg.Retry = turn.DefaultRetryPolicy()
			cfg.Retry.MaxAttempts = n
		}
		if g, ok := args["grace"]; ok {
			if cfg.AbortGrace, err = time.ParseDuration(g); err != nil {
				break
			}
		}
		out = tab.Start(turn.NewCtx(cfg))
	case "fire":
		out, err = tab.Fire(d.Input)
	case "snapshot":
		out, err = tab.RoundTrip(func(a, b turn.Ctx) string { return cmp.Diff(a, b) })
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

// event parses one table line into a turn event:
//
//	gate.proceed [claimed=N] | gate.empty | gate.refuse [blocked] [code=C] [message=M]
//	model.done [text=T] [thinking=T] [calls=id:name,...] [finish=F] [in=N] [out=N]
//	model.failed [status=N] [code=C] [retryable] [retry-after=D] [jitter=F] [recovered] [message=M]
//	timer.fired name=N seq=N | tool.started id=ID
//	tool.outcome id=ID [content=T] [error] [stop] [reason=R] [yield]
//	drained [messages=N] [bypass] | abort [cause=K] [reason=R] | pause | continue | stop [reason=R]
func event(line string) (chart.Event, error) {
	name, a, err := chart.ParseLine(line)
	if err != nil {
		return nil, err
	}
	switch chart.Trigger(name) {
	case turn.TrGateProceed:
		n, err := a.Int("claimed", 0)
		return turn.GateProceed{Claimed: n}, err
	case turn.TrGateEmpty:
		return turn.GateEmpty{}, nil
	case turn.TrGateRefuse:
		return turn.GateRefuse{Blocked: a.Bool("blocked"), Code: vocab.Code(a["code"]), Message: a["message"]}, nil
	case turn.TrModelDone:
		msg := vocab.Message{Role: vocab.RoleAssistant, Source: vocab.SourceModel}
		if th, ok := a["thinking"]; ok {
			msg.Parts = append(msg.Parts, vocab.Part{Kind: vocab.PartThinking, Text: th})
		}
		if tx, ok := a["text"]; ok {
			msg.Parts = append(msg.Parts, vocab.Part{Kind: vocab.PartText, Text: tx})
		}
		for _, c := range a.List("calls") {
			id, tool, _ := strings.Cut(c, ":")
			msg.Parts = append(msg.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &vocab.ToolCall{ID: id, Name: tool, Args: json.RawMessage(`{}`)}})
		}
		in, _ := a.Int("in", 0)
		out, _ := a.Int("out", 0)
		finish := vocab.FinishReason(a["finish"])
		if finish == "" {
			finish = vocab.FinishStop
		}
		return turn.ModelDone{Reply: &msg, Finish: finish, Usage: vocab.Usage{InputTokens: in, OutputTokens: out}}, nil
	case turn.TrModelFailed:
		var e *vocab.Error
		var ra time.Duration
		if s, ok := a["retry-after"]; ok {
			if ra, err = time.ParseDuration(s); err != nil {
				return nil, err
			}
		}
		if st, _ := a.Int("status", 0); st != 0 {
			e = vocab.StatusError(st, ra, a["message"])
		} else {
			e = &vocab.Error{Code: vocab.Code(a["code"]), Message: a["message"], Retryable: a.Bool("retryable"), RetryAfter: ra}
		}
		var j float64
		if s, ok := a["jitter"]; ok {
			if _, err := fmt.Sscan(s, &j); err != nil {
				return nil, err
			}
		}
		return turn.ModelFailed{Err: e, Recovered: a.Bool("recovered"), Jitter: j}, nil
	case turn.TrTimer:
		seq, err := a.Int("seq", 0)
		return turn.TimerFired{Name: a["name"], Seq: uint64(seq)}, err
	case turn.TrToolStarted:
		return turn.ToolStarted{CallID: a["id"]}, nil
	case turn.TrToolOutcome:
		return turn.ToolOutcome{Result: &vocab.ToolResult{CallID: a["id"], Content: a["content"], IsError: a.Bool("error"), Started: true,
			StopTurn: a.Bool("stop"), StopReason: a["reason"], Yield: a.Bool("yield")}}, nil
	case turn.TrDrained:
		n, err := a.Int("messages", 0)
		return turn.Drained{Messages: n, Bypass: a.Bool("bypass")}, err
	case turn.TrAbort:
		k := vocab.CancelKind(a["cause"])
		if k == "" {
			k = vocab.CancelUser
		}
		return turn.Abort{Cause: vocab.CancelCause{Kind: k, Reason: a["reason"]}}, nil
	case turn.TrPause:
		return turn.Pause{}, nil
	case turn.TrContinue:
		return turn.Continue{}, nil
	case turn.TrStop:
		return turn.Stop{Reason: a["reason"]}, nil
	case turn.TrLoopBlock, turn.TrLoopTerminate:
		n, err := a.Int("count", 0)
		l := turn.Loop{Detector: a["detector"], Count: n, Tool: a["tool"]}
		if chart.Trigger(name) == turn.TrLoopBlock {
			return turn.LoopBlock{Loop: l}, err
		}
		return turn.LoopTerminate{Loop: l}, err
	}
	return nil, fmt.Errorf("unknown trigger %q", name)
}

// TestTransitions runs every table under testdata/transitions/turn and then
// checks that together they take every transition of the definition.
func TestTransitions(t *testing.T) {
	tab := &chart.Table[turn.Ctx]{M: turn.New(), Parse: event}
	datadriven.Walk(t, "../../testdata/transitions/turn", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return run(t, tab, d) })
	})
	if t.Failed() {
		return
	}
	if untaken := tab.Untaken(); len(untaken) > 0 {
		t.Errorf("transitions no table takes:\n  %s", strings.Join(untaken, "\n  "))
	}
	t.Logf("tables took %d of %d transitions", tab.Taken(), len(turn.Definition.Transitions))
}

// TestMatrix: every (state, trigger) pair the definition does not handle
// yields ErrUnhandledTrigger and leaves the instance where it was.
func TestMatrix(t *testing.T) {
	sample, err := chart.Sampler(turn.Definition, turn.GateProceed{}, turn.GateEmpty{}, turn.GateRefuse{}, turn.ModelDone{},
		turn.ModelFailed{}, turn.TimerFired{}, turn.ToolStarted{}, turn.ToolOutcome{}, turn.Drained{}, turn.Abort{},
		turn.Pause{}, turn.Continue{}, turn.Stop{}, turn.LoopBlock{}, turn.LoopTerminate{})
	if err != nil {
		t.Fatal(err)
	}
	checked, failures := chart.CheckMatrix(turn.New(), sample)
	for _, f := range failures {
		t.Error(f)
	}
	if checked == 0 {
		t.Fatal("matrix checked nothing")
	}
	t.Logf("checked %d unhandled (state, trigger) pairs", checked)
}

// TestDeclaredEffects replays every table and checks the effect names the
// definition declares against the effects the machine emits: every emitted
// effect is declared by the transition taken or by an entry or exit action
// of the states it leaves or enters, and every effect a transition's action
// declares is emitted at least once when the tables take that transition
// (no stale declarations in the diagrams).
func TestDeclaredEffects(t *testing.T) {
	def := turn.Definition
	specs := map[chart.State]*chart.StateSpec[turn.Ctx]{}
	for i := range def.States {
		specs[def.States[i].Name] = &def.States[i]
	}
	names := func(a *chart.Action[turn.Ctx]) []string {
		if a == nil {
			return nil
		}
		return a.Effects
	}
	// lineage returns s and its ancestors.
	lineage := func(s chart.State) []*chart.StateSpec[turn.Ctx] {
		var out []*chart.StateSpec[turn.Ctx]
		for sp := specs[s]; sp != nil; sp = specs[sp.Parent] {
			out = append(out, sp)
		}
		return out
	}
	emitted := map[int]map[string]bool{}
	tab := &chart.Table[turn.Ctx]{M: turn.New(), Parse: event}
	datadriven.Walk(t, "../../testdata/transitions/turn", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "fire" {
				run(t, tab, d)
				return d.Expected
			}
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				ev, err := event(line)
				if err != nil {
					d.Fatalf(t, "%s: %v", d.Pos, err)
				}
				var out chart.Out
				if tab.M.Fire(tab.Inst, ev, &out) != nil {
					continue
				}
				declared := map[string]bool{}
				for _, r := range out.Transitions {
					tr := def.Transitions[r.Index]
					for _, n := range names(tr.Action) {
						declared[n] = true
					}
					if r.Internal {
						continue
					}
					for _, sp := range append(lineage(r.From), lineage(r.To)...) {
						for _, n := range append(names(sp.Entry), names(sp.Exit)...) {
							declared[n] = true
						}
					}
				}
				got := map[string]bool{}
				for _, e := range out.Effects {
					got[e.EffectName()] = true
					if !declared[e.EffectName()] {
						t.Errorf("%s: %q: effect %s is not declared by %v", d.Pos, line, e.EffectName(), out.Transitions)
					}
				}
				for _, r := range out.Transitions {
					if emitted[r.Index] == nil {
						emitted[r.Index] = map[string]bool{}
					}
					for n := range got {
						emitted[r.Index][n] = true
					}
				}
			}
			return d.Expected
		})
	})
	for i, tr := range def.Transitions {
		for _, n := range names(tr.Action) {
			if emitted[i] != nil && !emitted[i][n] {
				t.Errorf("%s declares effect %s but never emitted it", chart.Describe(def, i), n)
			}
		}
	}
}

// TestModelDoneByPointer: a *ModelDone (and a *ToolStarted) is taken
// exactly as the value it points to (same transitions, effects and context), for replies of 0
// to 6 tool calls (the batch sizes newBatch allocates differently), and
// the batch holds the reply's calls in order with nothing settled.
func TestModelDoneByPointer(t *testing.T) {
	m := turn.New()
	for n := 0; n <= 6; n++ {
		reply := &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "x"}}}
		for i := 0; i < n; i++ {
			reply.Parts = append(reply.Parts, vocab.Part{Kind: vocab.PartToolCall,
				Call: &vocab.ToolCall{ID: fmt.Sprint("c", i), Name: "noop", Args: json.RawMessage(`{}`)}})
		}
		var outs [2]chart.Out
		var insts [2]*turn.Instance
		for k := range insts {
			insts[k] = m.New(turn.NewCtx(turn.Config{Turn: 1}), &outs[k])
			if err := m.Fire(insts[k], turn.GateProceed{Claimed: 1}, &outs[k]); err != nil {
				t.Fatal(err)
			}
			outs[k].Reset()
		}
		d := turn.ModelDone{Reply: reply, Finish: vocab.FinishToolCalls}
		if err := m.Fire(insts[0], d, &outs[0]); err != nil {
			t.Fatal(err)
		}
		if err := m.Fire(insts[1], &d, &outs[1]); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(outs[0].Effects, outs[1].Effects); diff != "" {
			t.Errorf("%d calls: effects differ by pointer:\n%s", n, diff)
		}
		if diff := cmp.Diff(outs[0].Transitions, outs[1].Transitions); diff != "" {
			t.Errorf("%d calls: transitions differ by pointer:\n%s", n, diff)
		}
		if diff := cmp.Diff(insts[0].Ctx, insts[1].Ctx); diff != "" {
			t.Errorf("%d calls: context differs by pointer:\n%s", n, diff)
		}
		c := insts[1].Ctx
		if n == 0 {
			continue // concluded: no batch
		}
		if diff := cmp.Diff(reply.ToolCalls(), c.Calls); diff != "" {
			t.Errorf("%d calls: batch calls:\n%s", n, diff)
		}
		if len(c.Results) != n || len(c.Started) != n || cap(c.Calls) != n || cap(c.Results) != n || cap(c.Started) != n {
			t.Errorf("%d calls: lengths %d/%d/%d, capacities %d/%d/%d", n, len(c.Calls), len(c.Results), len(c.Started), cap(c.Calls), cap(c.Results), cap(c.Started))
		}
		for i := range c.Results {
			if c.Results[i] != nil || c.Started[i] {
				t.Errorf("%d calls: slot %d not empty", n, i)
			}
		}
		// tool.started by value and by pointer.
		s := turn.ToolStarted{CallID: fmt.Sprint("c", n-1)}
		if err := m.Fire(insts[0], s, &outs[0]); err != nil {
			t.Fatal(err)
		}
		if err := m.Fire(insts[1], &s, &outs[1]); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(insts[0].Ctx, insts[1].Ctx); diff != "" || !insts[1].Ctx.Started[n-1] {
			t.Errorf("%d calls: tool.started by pointer:\n%s", n, diff)
		}
	}
}
