package tool_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/vocab"
)

// run is the datadriven glue around chart.Table for the tool machine.
//
// Commands:
//
//	new [id=ID] [tool=NAME] [args=JSON] [grace=DURATION]
//	fire            (one event per input line, see event)
//	snapshot        (JSON round trip; prints the snapshot)
func run(t *testing.T, tab *chart.Table[tool.Ctx], d *datadriven.TestData) string {
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
		call := vocab.ToolCall{ID: "c1", Name: "read"}
		if v, ok := args["id"]; ok {
			call.ID = v
		}
		if v, ok := args["tool"]; ok {
			call.Name = v
		}
		if v, ok := args["args"]; ok {
			call.Args = json.RawMessage(v)
		}
		var cfg tool.Config
		if g, ok := args["grace"]; ok {
			if cfg.AbortGrace, err = time.ParseDuration(g); err != nil {
				break
			}
		}
		out = tab.Start(tool.NewCtx(call, cfg))
	case "fire":
		out, err = tab.Fire(d.Input)
	case "snapshot":
		out, err = tab.RoundTrip(func(a, b tool.Ctx) string { return cmp.Diff(a, b) })
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

// stray is an event of a trigger the tool machine does not declare.
type stray chart.Trigger

func (s stray) Trigger() chart.Trigger { return chart.Trigger(s) }

// event parses one table line into a tool event:
//
//	before.proceed [tool=NAME] [args=JSON] | before.ask question=Q | before.failed message=M
//	before.deny [reason=R] | before.deny content=T [error] [code=C]
//	approve | reject [reason=R]
//	exec.started | exec.update text=T | exec.failed message=M | exec.detached [ack=T]
//	exec.done content=T [error] [stop] [reason=R] | after.done content=T [error] [code=C]
//	after.failed message=M | abort [cause=K] [reason=R] | timer.fired name=N seq=N
//	stray trigger=T        (an event of an undeclared trigger)
func event(line string) (chart.Event, error) {
	name, a, err := chart.ParseLine(line)
	if err != nil {
		return nil, err
	}
	result := func() vocab.ToolResult {
		return vocab.ToolResult{Content: a["content"], IsError: a.Bool("error"), Code: vocab.Code(a["code"]),
			StopTurn: a.Bool("stop"), StopReason: a["reason"]}
	}
	switch chart.Trigger(name) {
	case tool.TrBeforeProceed:
		c := vocab.ToolCall{Name: a["tool"]}
		if v, ok := a["args"]; ok {
			c.Args = json.RawMessage(v)
		}
		return tool.BeforeProceed{Call: c}, nil
	case tool.TrBeforeDeny:
		d := tool.BeforeDeny{Reason: a["reason"]}
		if _, ok := a["content"]; ok {
			r := result()
			d.Result = &r
		}
		return d, nil
	case tool.TrBeforeAsk:
		return tool.BeforeAsk{Question: a["question"]}, nil
	case tool.TrBeforeFailed:
		return tool.BeforeFailed{Message: a["message"]}, nil
	case tool.TrApprove:
		return tool.Approve{}, nil
	case tool.TrReject:
		return tool.Reject{Reason: a["reason"]}, nil
	case tool.TrExecStarted:
		return tool.ExecStarted{}, nil
	case tool.TrExecUpdate:
		return tool.ExecUpdate{Text: a["text"]}, nil
	case tool.TrExecDone:
		r := result()
		return tool.ExecDone{Result: &r}, nil
	case tool.TrExecFailed:
		return tool.ExecFailed{Message: a["message"]}, nil
	case tool.TrExecDetached:
		return tool.ExecDetached{Ack: a["ack"]}, nil
	case tool.TrAbort:
		k := vocab.CancelKind(a["cause"])
		if k == "" {
			k = vocab.CancelUser
		}
		return tool.Abort{Cause: vocab.CancelCause{Kind: k, Reason: a["reason"]}}, nil
	case tool.TrTimer:
		seq, err := a.Int("seq", 0)
		return tool.TimerFired{Name: a["name"], Seq: uint64(seq)}, err
	case tool.TrAfterDone:
		r := result()
		return tool.AfterDone{Result: &r}, nil
	case tool.TrAfterFailed:
		return tool.AfterFailed{Message: a["message"]}, nil
	case "stray":
		return stray(a["trigger"]), nil
	}
	return nil, fmt.Errorf("unknown trigger %q", name)
}

// TestTransitions runs every table under testdata/transitions/tool and then
// checks that together they take every transition of the definition.
func TestTransitions(t *testing.T) {
	tab := &chart.Table[tool.Ctx]{M: tool.New(), Parse: event}
	datadriven.Walk(t, "../../testdata/transitions/tool", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return run(t, tab, d) })
	})
	if t.Failed() {
		return
	}
	if untaken := tab.Untaken(); len(untaken) > 0 {
		t.Errorf("transitions no table takes:\n  %s", strings.Join(untaken, "\n  "))
	}
	t.Logf("tables took %d of %d transitions", tab.Taken(), len(tool.Definition.Transitions))
}

// sample gives a zero-valued event of each trigger, for the matrix.
var sample = mustSampler(chart.Sampler(tool.Definition, tool.BeforeProceed{}, tool.BeforeDeny{}, tool.BeforeAsk{},
	tool.BeforeFailed{}, tool.Approve{}, tool.Reject{}, tool.ExecStarted{}, tool.ExecUpdate{}, tool.ExecDone{},
	tool.ExecFailed{}, tool.ExecDetached{}, tool.Abort{}, tool.TimerFired{}, tool.AfterDone{}, tool.AfterFailed{}))

func mustSampler(f func(chart.Trigger) chart.Event, err error) func(chart.Trigger) chart.Event {
	if err != nil {
		panic(err)
	}
	return f
}

// TestMatrix: every (state, trigger) pair the definition does not handle
// yields ErrUnhandledTrigger and leaves the instance where it was.
func TestMatrix(t *testing.T) {
	checked, failures := chart.CheckMatrix(tool.New(), sample)
	for _, f := range failures {
		t.Error(f)
	}
	if checked == 0 {
		t.Fatal("matrix checked nothing")
	}
	t.Logf("checked %d unhandled (state, trigger) pairs", checked)
}

// TestOneOutcome walks every path of the definition from the initial state
// (a breadth-first search in which a path takes each transition at most
// once) and checks that each path emits exactly one Outcome, on entering
// its final state, and that the outcome's call id is the call's.
func TestOneOutcome(t *testing.T) {
	m := tool.New()
	call := vocab.ToolCall{ID: "c9", Name: "grep"}
	// one representative event per transition index, built from its trigger
	// and guard so that the guard passes for the instance that reaches it
	evFor := func(inst *tool.Instance, i int) chart.Event {
		tr := tool.Definition.Transitions[i]
		isErr := tr.To == tool.Failed
		switch tr.On {
		case tool.TrExecDone:
			return tool.ExecDone{Result: &vocab.ToolResult{Content: "x", IsError: isErr}}
		case tool.TrAfterDone:
			return tool.AfterDone{Result: &vocab.ToolResult{Content: "x", IsError: isErr}}
		case tool.TrTimer:
			return tool.TimerFired{Name: inst.Ctx.Timer.Name, Seq: inst.Ctx.Timer.Seq}
		case tool.TrAbort:
			return tool.Abort{Cause: vocab.CancelCause{Kind: vocab.CancelUser}}
		}
		return sample(tr.On)
	}
	type path struct {
		snap     chart.Snapshot[tool.Ctx]
		outcomes int
		trail    []string
		used     []int
	}
	var out chart.Out
	inst := m.New(tool.NewCtx(call, tool.Config{}), &out)
	queue := []path{{snap: m.Snapshot(inst)}}
	finals := 0
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for i, tr := range tool.Definition.Transitions {
			if slices.Contains(p.used, i) {
				continue // each edge at most once per path: internal loops end
			}
			inst, err := m.Restore(p.snap)
			if err != nil {
				t.Fatal(err)
			}
			if !m.In(inst, tr.From) {
				continue
			}
			out.Reset()
			if err := m.Fire(inst, evFor(inst, i), &out); err != nil {
				continue // another guard of the same trigger wins here
			}
			if out.Transitions[0].Index != i {
				continue
			}
			n := p.outcomes
			for _, e := range out.Effects {
				if o, ok := e.(*tool.Outcome); ok {
					n++
					if o.Result.CallID != call.ID || o.Result.Name != call.Name {
						t.Errorf("outcome for the wrong call: %s", o)
					}
				}
			}
			trail := append(append([]string(nil), p.trail...), chart.Describe(tool.Definition, i))
			if m.IsFinal(inst) {
				finals++
				if n != 1 {
					t.Errorf("%d outcomes on path %s", n, strings.Join(trail, ", "))
				}
				continue
			}
			if n != 0 {
				t.Errorf("outcome before a final state on path %s", strings.Join(trail, ", "))
			}
			queue = append(queue, path{snap: m.Snapshot(inst), outcomes: n, trail: trail, used: append(slices.Clone(p.used), i)})
		}
	}
	if finals == 0 {
		t.Fatal("no path reached a final state")
	}
	t.Logf("%d paths to a final state, each with one outcome", finals)
}

// TestValidate: Restore refuses contexts a snapshot could corrupt.
func TestValidate(t *testing.T) {
	m := tool.New()
	base := tool.NewCtx(vocab.ToolCall{ID: "c1", Name: "read"}, tool.Config{})
	cause := vocab.CancelCause{Kind: vocab.CancelUser}
	for name, mutate := range map[string]func(c *tool.Ctx){
		"negative grace": func(c *tool.Ctx) { c.Config.AbortGrace = -1 },
		"foreign timer":  func(c *tool.Ctx) { c.Abort = &cause; c.Timer = chart.Timer{Name: "retry", Seq: 1}; c.TimerSeq = 1 },
		"timer from later": func(c *tool.Ctx) {
			c.Abort = &cause
			c.Timer = chart.Timer{Name: tool.TimerAbortGrace, Seq: 2}
			c.TimerSeq = 1
		},
		"timer without abort": func(c *tool.Ctx) {
			c.Timer = chart.Timer{Name: tool.TimerAbortGrace, Seq: 1}
			c.TimerSeq = 1
		},
		"result of another call": func(c *tool.Ctx) { c.Result = &vocab.ToolResult{CallID: "c2"} },
	} {
		c := base
		mutate(&c)
		_, err := m.Restore(chart.Snapshot[tool.Ctx]{Machine: "tool", Version: tool.Version, State: tool.Aborting, Ctx: c})
		if !errors.Is(err, chart.ErrBadSnapshot) {
			t.Errorf("%s: got %v, want ErrBadSnapshot", name, err)
		}
	}
}

// TestCloneSharesNothing: a snapshot does not alias the live instance.
func TestCloneSharesNothing(t *testing.T) {
	m := tool.New()
	var out chart.Out
	inst := m.New(tool.NewCtx(vocab.ToolCall{ID: "c1", Name: "read", Args: json.RawMessage(`{"p":1}`)}, tool.Config{}), &out)
	for _, ev := range []chart.Event{tool.BeforeProceed{}, tool.ExecDone{Result: &vocab.ToolResult{Content: "ok",
		Delivery: &vocab.Delivery{Kind: vocab.DeliverySteer, Message: vocab.UserText("hi")}}}} {
		if err := m.Fire(inst, ev, &out); err != nil {
			t.Fatal(err)
		}
	}
	snap := m.Snapshot(inst)
	inst.Ctx.Call.Args[0] = 'X'
	inst.Ctx.Result.Content = "changed"
	inst.Ctx.Result.Delivery.Message.Parts[0].Text = "changed"
	if string(snap.Ctx.Call.Args) != `{"p":1}` || snap.Ctx.Result.Content != "ok" || snap.Ctx.Result.Delivery.Message.Parts[0].Text != "hi" {
		t.Fatalf("snapshot shares memory with the instance: %+v", snap.Ctx)
	}
}
