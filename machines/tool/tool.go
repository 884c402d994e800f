// Package tool is the tool machine: one instance per tool call, from the
// before-hook to the call's one result.
//
//	          ┌─before.ask→ awaiting_approval ─reject──────────────────────┐
//	          │                    │approve                                ▼
//	before ───┼─before.proceed→ executing{running, aborting} ─exec.done→ after ─after.done→ succeeded | failed
//	          │                    │exec.detached                          ▲
//	          └─before.deny────────┼───────────────────────────────────────┘
//	                               ▼
//	                           detached ─exec.done | exec.failed | abort→ succeeded | failed | aborted
//
// Every call ends with exactly one result: entering a final state
// (succeeded, failed, aborted) emits one Outcome effect carrying it. A
// before-hook failure, a tool that errors or panics (exec.failed) and an
// after-hook failure become error results with stable codes, never a crash.
// A denial (by the before-hook or a person) is an error result with
// vocab.CodeToolDenied that still passes the after-hook.
//
// Abort: before execution (before, awaiting_approval, or running but not yet
// launched by the scheduler) the call ends at once with `Tool "NAME" was
// aborted before execution`. A started tool is cancelled and gets a grace
// period (Config.AbortGrace, default 2 s): if it settles in time its real
// result is kept and goes through the after-hook; if it fails, the grace
// timer runs out or a second abort arrives, it ends with `Tool "NAME" was
// aborted` (a user cancel adds that the model should not simply retry).
// An abort during the after-hook is not handled: the tool has already
// settled and its real result must not be replaced.
//
// A background tool acknowledges and detaches: the turn gets the
// Acknowledge result at once, and the real completion arrives later as the
// Outcome with Background set. It may go on reporting progress meanwhile.
//
// The machine is pure and synchronous: Fire an event, read the transitions
// and effects from the chart.Out. See Definition for every edge.
package tool

import (
	"fmt"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// States of the tool machine.
const (
	Before           chart.State = "before"
	AwaitingApproval chart.State = "awaiting_approval"
	Executing        chart.State = "executing"
	Running          chart.State = "running"
	Aborting         chart.State = "aborting"
	After            chart.State = "after"
	Detached         chart.State = "detached"
	Succeeded        chart.State = "succeeded"
	Failed           chart.State = "failed"
	Aborted          chart.State = "aborted"
)

// TimerAbortGrace names the grace timer armed when a started tool is
// aborted.
const TimerAbortGrace = "abort-grace"

// Version is the snapshot format version of Ctx.
const Version = 1

type (
	guard  = chart.Guard[Ctx]
	action = chart.Action[Ctx]
	edge   = chart.Transition[Ctx]
)

// ---- guards (pure predicates, named for diagrams and errors) ----

var (
	// The scheduler has not launched the tool yet: an abort needs no grace.
	gNotStarted = &guard{Name: "notStarted", Test: func(c *Ctx, _ chart.Event) bool { return !c.Started }}
	gGraceTimer = &guard{Name: "graceTimer", Test: func(c *Ctx, ev chart.Event) bool {
		t := ev.(TimerFired)
		return c.Timer.Matches(TimerAbortGrace, t.Seq) && t.Name == TimerAbortGrace
	}}
	gResultOK = &guard{Name: "resultOK", Test: func(_ *Ctx, ev chart.Event) bool {
		switch e := ev.(type) {
		case AfterDone:
			return e.Result == nil || !e.Result.IsError
		case ExecDone:
			return e.Result == nil || !e.Result.IsError
		}
		return false
	}}
)

// ---- actions ----

func act(run func(c *Ctx, ev chart.Event, out *chart.Out), effects ...string) *action {
	return &action{Effects: effects, Run: run}
}

var (
	aEnterBefore = act(func(c *Ctx, _ chart.Event, out *chart.Out) { out.Emit(RunBefore{Call: &c.Call}) }, "run-before")
	aProceed     = act(func(c *Ctx, ev chart.Event, _ *chart.Out) { c.rewrite(ev.(BeforeProceed).Call) })
	aDeny        = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		d := ev.(BeforeDeny)
		if d.Result == nil {
			c.setResult(denied(c.Call, "was denied by a before-hook", d.Reason))
			return
		}
		r := *d.Result
		r.Started = false
		if r.IsError && r.Code == "" {
			r.Code = vocab.CodeToolDenied
		}
		c.setResult(r)
	})
	aAsk = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		a := ev.(BeforeAsk)
		c.rewrite(a.Call)
		c.Approval = &Approval{Question: a.Question}
	})
	aEnterAwaiting = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		var q string
		if c.Approval != nil {
			q = c.Approval.Question
		}
		out.Emit(RequestApproval{Call: c.Call, Question: q})
	}, "request-approval")
	aBeforeFailed = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.setResult(errResult(c.Call, vocab.CodeHook, false, "was not run: its before-hook failed: %s", ev.(BeforeFailed).Message))
	})
	aAbortNotStarted = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.setAbort(ev)
		c.Approval = nil
		c.setResult(vocab.AbortedResult(c.Call, false, *c.Abort))
	})
	aApprove = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Approval = nil
		c.rewrite(ev.(Approve).Call)
	})
	aReject = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Approval = nil
		c.setResult(denied(c.Call, "was not approved", ev.(Reject).Reason))
	})
	aEnterExecuting = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		executes.Emit(out, Execute{Call: &c.Call, Rewritten: c.Rewritten})
	}, "execute")
	aStarted = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Started = true })
	aUpdate  = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.Started = true
		out.Emit(Progress{CallID: c.Call.ID, Text: ev.(ExecUpdate).Text})
	}, "progress")
	aDone = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Started = true
		p := ev.(ExecDone).Result
		if p != nil && p.Started && p.CallID == c.Call.ID && p.Name == c.Call.Name {
			c.Result = p // stamped already: kept as is (never changed in place)
			return
		}
		r := deref(p)
		r.Started = true
		c.setResult(r)
	})
	aExecFailed = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Started = true
		c.setResult(errResult(c.Call, vocab.CodeToolFailed, true, "failed: %s", ev.(ExecFailed).Message))
	})
	aDetach = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Started, c.Detached = true, true
		text := ev.(ExecDetached).Ack
		if text == "" {
			text = "async running: " + c.Call.Name
		}
		c.Ack = &vocab.ToolResult{CallID: c.Call.ID, Name: c.Call.Name, Content: text, Started: true}
	})
	aEnterDetached = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		if c.Ack != nil {
			out.Emit(Acknowledge{Result: *c.Ack})
		}
	}, "acknowledge")
	aAbortQueued = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.setAbort(ev)
		out.Emit(CancelExecution{CallID: c.Call.ID, Cause: *c.Abort})
		c.setResult(vocab.AbortedResult(c.Call, false, *c.Abort))
	}, "cancel-execution")
	aAbortRunning = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.setAbort(ev)
		out.Emit(CancelExecution{CallID: c.Call.ID, Cause: *c.Abort})
		c.Timer.Arm(&c.TimerSeq, TimerAbortGrace, c.Config.AbortGrace, out)
	}, "cancel-execution", "start-timer")
	aSettled = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.Timer.Disarm(out)
		aDone.Run(c, ev, out)
	}, "cancel-timer")
	aAbortSettle = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		if _, again := ev.(Abort); again {
			c.setAbort(ev) // a second abort may say more (a crash's recovery)
		}
		c.Timer.Disarm(out)
		c.setResult(vocab.AbortedResult(c.Call, true, c.cause()))
	}, "cancel-timer")
	aGraceOver = act(func(c *Ctx, _ chart.Event, _ *chart.Out) {
		c.Timer = chart.Timer{}
		c.setResult(vocab.AbortedResult(c.Call, true, c.cause()))
	})
	aAbortDetached = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.setAbort(ev)
		out.Emit(CancelExecution{CallID: c.Call.ID, Cause: *c.Abort})
		c.setResult(vocab.AbortedResult(c.Call, true, *c.Abort))
	}, "cancel-execution")
	aEnterAfter = act(func(c *Ctx, _ chart.Event, out *chart.Out) { out.Emit(RunAfter{Result: c.resultRef()}) }, "run-after")
	aAfterDone  = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		p := ev.(AfterDone).Result
		if p != nil && p == c.Result && p.Started == c.Started && p.CallID == c.Call.ID && p.Name == c.Call.Name {
			return // the after-hook kept the result as it was
		}
		r := deref(p)
		r.Started = c.Started
		c.setResult(r)
	})
	aAfterFailed = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.setResult(errResult(c.Call, vocab.CodeHook, c.Started, "ran, but its after-hook failed: %s", ev.(AfterFailed).Message))
	})
	aOutcome = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		outcomes.Emit(out, Outcome{Result: c.resultRef(), Background: c.Detached})
	}, "outcome")
)

// rewrite applies a hook's or a person's rewrite of the call: a non-empty
// name or non-nil arguments replace the call's.
func (c *Ctx) rewrite(nc vocab.ToolCall) {
	if nc.Name != "" && nc.Name != c.Call.Name {
		c.Call.Name, c.Rewritten = nc.Name, true
	}
	if nc.Args != nil && string(nc.Args) != string(c.Call.Args) {
		c.Call.Args, c.Rewritten = nc.Args, true
	}
}

// setAbort records the first abort's cause; a second abort keeps it.
func (c *Ctx) setAbort(ev chart.Event) {
	if cause := ev.(Abort).Cause; c.Abort == nil || cause.Kind == vocab.CancelInterrupted {
		c.Abort = &cause // a crash's recovery overrides an abort in progress
	}
}

// cause returns the recorded abort cause (a user cancel when none was
// recorded, as after restoring a hand-made snapshot).
func (c *Ctx) cause() vocab.CancelCause {
	if c.Abort == nil {
		return vocab.CancelCause{Kind: vocab.CancelUser}
	}
	return *c.Abort
}

// setResult stores r as the result so far, stamped with the call's identity.
func (c *Ctx) setResult(r vocab.ToolResult) {
	r.CallID, r.Name = c.Call.ID, c.Call.Name
	c.Result = &r
}

// result returns the result so far; a missing one (never on a path of the
// definition) is an internal error result rather than a panic.
func (c *Ctx) result() vocab.ToolResult {
	if c.Result == nil {
		return errResult(c.Call, vocab.CodeInternal, c.Started, "produced no result")
	}
	return *c.Result
}

// resultRef is result as a pointer: the context's own result (shared: it
// is never changed in place, setResult replaces it), or a new error result
// when there is none.
func (c *Ctx) resultRef() *vocab.ToolResult {
	if c.Result == nil {
		r := c.result()
		return &r
	}
	return c.Result
}

// denied is the result of a call refused by a before-hook or a person.
func denied(call vocab.ToolCall, what, reason string) vocab.ToolResult {
	text := fmt.Sprintf("Tool %q %s", call.Name, what)
	if reason != "" {
		text += ": " + reason
	}
	return vocab.ToolResult{CallID: call.ID, Name: call.Name, Content: text, IsError: true, Code: vocab.CodeToolDenied}
}

// errResult is an error result `Tool "NAME" <format>` with code.
func errResult(call vocab.ToolCall, code vocab.Code, started bool, format string, args ...any) vocab.ToolResult {
	text := fmt.Sprintf("Tool %q ", call.Name) + fmt.Sprintf(format, args...)
	return vocab.ToolResult{CallID: call.ID, Name: call.Name, Content: text, IsError: true, Code: code, Started: started}
}

// Definition is the tool machine: the single source of its stateless
// configuration, its diagrams and its table tests.
var Definition = &chart.Def[Ctx]{
	Name:    "tool",
	Initial: Before,
	Version: Version,
	States: []chart.StateSpec[Ctx]{
		{Name: Before, Entry: aEnterBefore},
		{Name: AwaitingApproval, Entry: aEnterAwaiting},
		{Name: Executing, Initial: Running, Entry: aEnterExecuting},
		{Name: Running, Parent: Executing},
		{Name: Aborting, Parent: Executing},
		{Name: After, Entry: aEnterAfter},
		{Name: Detached, Entry: aEnterDetached},
		{Name: Succeeded, Final: true, Entry: aOutcome},
		{Name: Failed, Final: true, Entry: aOutcome},
		{Name: Aborted, Final: true, Entry: aOutcome},
	},
	Triggers: []chart.Trigger{TrBeforeProceed, TrBeforeDeny, TrBeforeAsk, TrBeforeFailed, TrApprove, TrReject,
		TrExecStarted, TrExecUpdate, TrExecDone, TrExecFailed, TrExecDetached, TrAbort, TrTimer, TrAfterDone, TrAfterFailed},
	Transitions: []edge{
		{From: Before, On: TrBeforeProceed, To: Executing, Action: aProceed},
		{From: Before, On: TrBeforeDeny, To: After, Action: aDeny},
		{From: Before, On: TrBeforeAsk, To: AwaitingApproval, Action: aAsk},
		{From: Before, On: TrBeforeFailed, To: Failed, Action: aBeforeFailed},
		{From: Before, On: TrAbort, To: Aborted, Action: aAbortNotStarted},

		{From: AwaitingApproval, On: TrApprove, To: Executing, Action: aApprove},
		{From: AwaitingApproval, On: TrReject, To: After, Action: aReject},
		{From: AwaitingApproval, On: TrAbort, To: Aborted, Action: aAbortNotStarted},

		{From: Executing, On: TrExecUpdate, Action: aUpdate},
		{From: Running, On: TrExecStarted, Action: aStarted},
		{From: Running, On: TrExecDone, To: After, Action: aDone},
		{From: Running, On: TrExecFailed, To: Failed, Action: aExecFailed},
		{From: Running, On: TrExecDetached, To: Detached, Action: aDetach},
		{From: Running, On: TrAbort, To: Aborted, Guard: gNotStarted, Action: aAbortQueued},
		{From: Running, On: TrAbort, To: Aborting, Action: aAbortRunning},
		{From: Aborting, On: TrExecDone, To: After, Action: aSettled},
		{From: Aborting, On: TrExecFailed, To: Aborted, Action: aAbortSettle},
		{From: Aborting, On: TrTimer, To: Aborted, Guard: gGraceTimer, Action: aGraceOver},
		{From: Aborting, On: TrAbort, To: Aborted, Action: aAbortSettle},

		{From: After, On: TrAfterDone, To: Succeeded, Guard: gResultOK, Action: aAfterDone},
		{From: After, On: TrAfterDone, To: Failed, Action: aAfterDone},
		{From: After, On: TrAfterFailed, To: Failed, Action: aAfterFailed},

		{From: Detached, On: TrExecDone, To: Succeeded, Guard: gResultOK, Action: aDone},
		{From: Detached, On: TrExecDone, To: Failed, Action: aDone},
		{From: Detached, On: TrExecFailed, To: Failed, Action: aExecFailed},
		{From: Detached, On: TrAbort, To: Aborted, Action: aAbortDetached},
		{From: Detached, On: TrExecUpdate, Action: aUpdate},
	},
}

// Machine is a built tool machine kind. Build one per goroutine (or per
// session lane) with New and reuse it for every call.
type Machine = chart.Machine[Ctx]

// Instance is one tool call.
type Instance = chart.Instance[Ctx]

// New builds the tool machine kind.
func New() *Machine { return chart.MustBuild(Definition) }
