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

// harness drives one turn instance from a transition table.
//
// Commands:
//
//	new [turn=N] [max-steps=N] [max-attempts=N] [grace=DURATION]
//	fire            (one event per input line, see event)
//	snapshot        (JSON round trip; prints the snapshot)
type harness struct {
	m     *turn.Machine
	inst  *turn.Instance
	taken map[int]bool
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "new":
		var b strings.Builder
		_, args, err := chart.ParseLine("new " + argLine(d))
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		cfg := turn.Config{}
		cfg.Turn, _ = args.Int("turn", 1)
		cfg.MaxSteps, _ = args.Int("max-steps", 0)
		if n, _ := args.Int("max-attempts", 0); n > 0 {
			cfg.Retry = turn.DefaultRetryPolicy()
			cfg.Retry.MaxAttempts = n
		}
		if g, ok := args["grace"]; ok {
			cfg.AbortGrace, err = time.ParseDuration(g)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
		}
		var out chart.Out
		h.inst = h.m.New(turn.NewCtx(cfg), &out)
		b.WriteString(out.Format())
		fmt.Fprintf(&b, "state=%s\n", h.inst.State())
		return b.String()
	case "fire":
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			ev, err := event(line)
			if err != nil {
				d.Fatalf(t, "%s: %v", d.Pos, err)
			}
			fmt.Fprintf(&b, "> %s\n", line)
			var out chart.Out
			if err := h.m.Fire(h.inst, ev, &out); err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
				continue
			}
			for _, r := range out.Transitions {
				h.taken[r.Index] = true
			}
			b.WriteString(out.Format())
		}
		fmt.Fprintf(&b, "state=%s\n", h.inst.State())
		return b.String()
	case "snapshot":
		snap := h.m.Snapshot(h.inst)
		data, err := json.Marshal(snap)
		if err != nil {
			d.Fatalf(t, "marshal: %v", err)
		}
		var back chart.Snapshot[turn.Ctx]
		if err := json.Unmarshal(data, &back); err != nil {
			d.Fatalf(t, "unmarshal: %v", err)
		}
		restored, err := h.m.Restore(back)
		if err != nil {
			d.Fatalf(t, "restore: %v", err)
		}
		if diff := cmp.Diff(h.inst.Ctx, restored.Ctx); diff != "" || restored.State() != h.inst.State() {
			d.Fatalf(t, "round trip changed the instance (-live +restored):\n%s", diff)
		}
		h.inst = restored
		return string(data) + "\n"
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func argLine(d *datadriven.TestData) string {
	var parts []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			parts = append(parts, a.Key)
		} else {
			parts = append(parts, a.Key+"="+strings.Join(a.Vals, ","))
		}
	}
	return strings.Join(parts, " ")
}

// event parses one table line into a turn event:
//
//	gate.proceed [claimed=N] | gate.empty | gate.refuse [blocked] [code=C] [message=M]
//	model.done [text=T] [thinking=T] [calls=id:name,...] [finish=F] [in=N] [out=N]
//	model.failed [status=N] [code=C] [retryable] [retry-after=D] [jitter=F] [recovered] [message=M]
//	timer.fired name=N seq=N | tool.started id=ID
//	tool.outcome id=ID [content=T] [error] [stop] [reason=R]
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
		return turn.ModelDone{Reply: msg, Finish: finish, Usage: vocab.Usage{InputTokens: in, OutputTokens: out}}, nil
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
		return turn.ToolOutcome{Result: vocab.ToolResult{CallID: a["id"], Content: a["content"], IsError: a.Bool("error"), Started: true,
			StopTurn: a.Bool("stop"), StopReason: a["reason"]}}, nil
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
	}
	return nil, fmt.Errorf("unknown trigger %q", name)
}

// TestTransitions runs every table under testdata/transitions/turn and then
// checks that together they take every transition of the definition.
func TestTransitions(t *testing.T) {
	h := &harness{m: turn.New(), taken: map[int]bool{}}
	datadriven.Walk(t, "../../testdata/transitions/turn", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return h.run(t, d) })
	})
	if t.Failed() {
		return
	}
	if untaken := chart.Untaken(turn.Definition, h.taken); len(untaken) > 0 {
		t.Errorf("transitions no table takes:\n  %s", strings.Join(untaken, "\n  "))
	}
	t.Logf("tables took %d of %d transitions", len(h.taken), len(turn.Definition.Transitions))
}

// sample returns a zero-valued event for each trigger, for the matrix.
func sample(tr chart.Trigger) chart.Event {
	for _, ev := range []chart.Event{turn.GateProceed{}, turn.GateEmpty{}, turn.GateRefuse{}, turn.ModelDone{}, turn.ModelFailed{},
		turn.TimerFired{}, turn.ToolStarted{}, turn.ToolOutcome{}, turn.Drained{}, turn.Abort{}, turn.Pause{}, turn.Continue{}, turn.Stop{}} {
		if ev.Trigger() == tr {
			return ev
		}
	}
	panic("no sample for " + tr)
}

// TestMatrix: every (state, trigger) pair the definition does not handle
// yields ErrUnhandledTrigger and leaves the instance where it was.
func TestMatrix(t *testing.T) {
	m := turn.New()
	for _, tr := range turn.Definition.Triggers {
		if sample(tr).Trigger() != tr {
			t.Fatalf("sample for %s is wrong", tr)
		}
	}
	checked, failures := chart.CheckMatrix(m, sample)
	for _, f := range failures {
		t.Error(f)
	}
	if checked == 0 {
		t.Fatal("matrix checked nothing")
	}
	t.Logf("checked %d unhandled (state, trigger) pairs", checked)
}
