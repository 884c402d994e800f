// Package turn is the turn machine: one instance per turn of the agent loop,
// from the step gate to the turn's end.
//
//	gating ─gate.proceed→ thinking ─model.done[hasToolCalls]→ acting ─(all outcomes)→ draining ─drained→ gating …
//
// Continuation is decided by tool calls, never by the finish reason. A reply
// without tool calls goes to draining "concluded": the turn ends there
// unless new input (a steer, a notification, a turn-stopping hook's nudge)
// keeps it alive. A reply with text but no tool calls that the provider
// ended with finish reason filtered, error or aborted is committed and then
// fails the turn (llm.filtered, llm.provider_error, llm.aborted). An empty
// reply is the remote failure empty_response (llm.filtered when filtered); a
// remote failure goes to recovery, then to retrying if the policy allows,
// else to failed. Aborting while tools run waits a grace period (or a second
// abort) and fills the missing outcomes as aborted. max-tokens is sticky:
// once a reply hits the output limit, a turn that would end completed ends
// max-tokens. Tool calls in such a reply are not executed: each gets an
// error result, the turn is stopped and goes to draining like any step (step
// hooks, drain, step end), where the stop ends it. A tool result that
// yields (vocab.ToolResult.Yield) ends the turn at the drain as yielded:
// the session keeps the turn's prompt open for a later turn.
//
// The machine is pure and synchronous: Fire an event, read the transitions
// and effects from the chart.Out. See Definition for every edge.
package turn

import (
	"fmt"
	"slices"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// States of the turn machine.
const (
	Open     chart.State = "open"
	Gating   chart.State = "gating"
	Thinking chart.State = "thinking"
	Retrying chart.State = "retrying"
	Acting   chart.State = "acting"
	Running  chart.State = "running"
	Aborting chart.State = "aborting"
	Draining chart.State = "draining"
	Done     chart.State = "done"
	Failed   chart.State = "failed"
	Aborted  chart.State = "aborted"
)

// Timer names.
const (
	TimerRetry      = "retry"
	TimerAbortGrace = "abort-grace"
)

// Version is the snapshot format version of Ctx.
const Version = 1

// StopMaxTokens is the StopReason of a turn stopped because the tool calls
// of a reply cut off by the output limit were not executed.
const StopMaxTokens = "max-tokens"

type (
	guard  = chart.Guard[Ctx]
	action = chart.Action[Ctx]
	edge   = chart.Transition[Ctx]
)

// ---- guards (pure predicates, named for diagrams and errors) ----

var (
	// gNothingOwed: the model owes no reply, so a step with nothing new to
	// say ends the turn: the turn's first step, or a later one after a
	// concluded reply (the input that kept the turn alive was dropped by
	// the gate's hooks).
	gNothingOwed = &guard{Name: "nothingOwed", Test: func(c *Ctx, _ chart.Event) bool { return c.Step == 0 || c.Concluded }}
	gBlocked     = &guard{Name: "blocked", Test: func(_ *Ctx, ev chart.Event) bool { return ev.(GateRefuse).Blocked }}
	// A reply cut off by the output limit: its tool calls are not executed
	// and the turn stops at the drain.
	gTruncatedCalls = &guard{Name: "truncatedCalls", Test: func(_ *Ctx, ev chart.Event) bool {
		d := modelDone(ev)
		return d.Finish == vocab.FinishMaxTokens && d.Reply != nil && d.Reply.HasToolCalls()
	}}
	gHasToolCalls = &guard{Name: "hasToolCalls", Test: func(_ *Ctx, ev chart.Event) bool {
		r := modelDone(ev).Reply
		return r != nil && r.HasToolCalls()
	}}
	gEmptyRetry = &guard{Name: "emptyRetryable", Test: func(c *Ctx, ev chart.Event) bool {
		d := modelDone(ev)
		return (d.Reply == nil || d.Reply.IsEmptyReply()) && c.Config.Retry.ShouldRetry(c.Attempt, emptyErr(d.Finish))
	}}
	gEmpty = &guard{Name: "empty", Test: func(_ *Ctx, ev chart.Event) bool {
		r := modelDone(ev).Reply
		return r == nil || r.IsEmptyReply()
	}}
	// A non-empty reply without tool calls that the provider ended with a
	// failing finish reason (filtered, error, aborted). Ordered after the
	// tool-call and empty-reply guards, so only text replies reach it.
	gBadFinish = &guard{Name: "badFinish", Test: func(_ *Ctx, ev chart.Event) bool {
		return finishErr(modelDone(ev).Finish) != nil
	}}
	// A reply the provider paused (a long turn cut in two): the model
	// owes the rest, so the turn takes another step without new input.
	gPaused = &guard{Name: "pausedReply", Test: func(_ *Ctx, ev chart.Event) bool {
		return modelDone(ev).Finish == vocab.FinishPause
	}}
	gRecovered = &guard{Name: "recovered", Test: func(_ *Ctx, ev chart.Event) bool { return ev.(ModelFailed).Recovered }}
	gRetryable = &guard{Name: "retryAllowed", Test: func(c *Ctx, ev chart.Event) bool {
		return c.Config.Retry.ShouldRetry(c.Attempt, ev.(ModelFailed).Err)
	}}
	gRetryTimer = &guard{Name: "retryTimer", Test: func(c *Ctx, ev chart.Event) bool {
		t := ev.(TimerFired)
		return c.Timer.Matches(TimerRetry, t.Seq) && t.Name == TimerRetry
	}}
	gGraceTimer = &guard{Name: "graceTimer", Test: func(c *Ctx, ev chart.Event) bool {
		t := ev.(TimerFired)
		return c.Timer.Matches(TimerAbortGrace, t.Seq) && t.Name == TimerAbortGrace
	}}
	gPendingCall = &guard{Name: "pendingCall", Test: func(c *Ctx, ev chart.Event) bool {
		i := c.index(outcomeID(ev))
		return i >= 0 && c.Results[i] == nil
	}}
	gLastOutcome = &guard{Name: "lastOutcome", Test: func(c *Ctx, ev chart.Event) bool {
		return gPendingCall.Test(c, ev) && c.pending() == 1
	}}
	gKnownCall = &guard{Name: "knownCall", Test: func(c *Ctx, ev chart.Event) bool {
		return c.index(startedID(ev)) >= 0
	}}
	gLoopTerminated = &guard{Name: "loopTerminated", Test: func(c *Ctx, _ chart.Event) bool { return c.LoopEnd != nil }}
	gStopRequested  = &guard{Name: "stopRequested", Test: func(c *Ctx, _ chart.Event) bool { return c.Paused || c.Stopped }}
	// gYielded: a tool result of the step asked to yield.
	gYielded   = &guard{Name: "yielded", Test: func(c *Ctx, _ chart.Event) bool { return c.Yielded }}
	gConcluded = &guard{Name: "concludedNoInput", Test: func(c *Ctx, ev chart.Event) bool {
		return c.Concluded && ev.(Drained).Messages == 0
	}}
	gMaxSteps = &guard{Name: "maxStepsReached", Test: func(c *Ctx, ev chart.Event) bool {
		d := ev.(Drained)
		return d.Messages == 0 && !d.Bypass && c.Config.MaxSteps > 0 && c.Idle >= c.Config.MaxSteps
	}}
)

func outcomeID(ev chart.Event) string {
	if r := ev.(ToolOutcome).Result; r != nil {
		return r.CallID
	}
	return ""
}

// finishErr returns the failure a reply's finish reason stands for (filtered,
// error, aborted), or nil for a finish reason that ends a reply normally.
func finishErr(f vocab.FinishReason) *vocab.Error {
	switch f {
	case vocab.FinishFiltered:
		return &vocab.Error{Code: vocab.CodeFiltered, Message: "the provider filtered the reply"}
	case vocab.FinishError:
		return &vocab.Error{Code: vocab.CodeProviderError, Message: "the provider ended the reply with an error"}
	case vocab.FinishAborted:
		return &vocab.Error{Code: vocab.CodeAborted, Message: "the provider aborted the reply"}
	case vocab.FinishRefusal:
		return &vocab.Error{Code: vocab.CodeRefusal, Message: "the model refused to answer"}
	case vocab.FinishContextOverflow:
		return &vocab.Error{Code: vocab.CodeContextOverflow, Message: "the reply stopped: the model's context window is full"}
	}
	return nil
}

// ReplyFailure returns the failure a reply stands for, as the machine
// judges it at model.done: an empty reply's (empty_response, retryable,
// unless its finish says otherwise), or its finish reason's (filtered,
// error, aborted, refusal, context overflow); nil for a reply that ends
// well.
func ReplyFailure(reply *vocab.Message, f vocab.FinishReason) *vocab.Error {
	if reply == nil || reply.IsEmptyReply() {
		return emptyErr(f)
	}
	return finishErr(f)
}

// emptyErr returns the failure of an empty reply: empty_response, retryable,
// unless the provider filtered it, the model refused, or the context
// window was full.
func emptyErr(f vocab.FinishReason) *vocab.Error {
	switch f {
	case vocab.FinishFiltered, vocab.FinishRefusal, vocab.FinishContextOverflow:
		return finishErr(f)
	}
	return &vocab.Error{Code: vocab.CodeEmptyResponse, Message: "the model returned an empty response", Retryable: true}
}

// ---- actions ----

func act(run func(c *Ctx, ev chart.Event, out *chart.Out), effects ...string) *action {
	return &action{Effects: effects, Run: run}
}

var (
	aEnterGating = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		runGates.Emit(out, RunGate{Turn: c.Config.Turn, Step: c.Step + 1, First: c.Step == 0})
	}, "run-gate")
	aProceed = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Step++
		c.Attempt = 0
		if ev.(GateProceed).Claimed > 0 {
			c.Idle = 0
		}
		c.Idle++
		c.Concluded = false
	})
	aEnterThinking = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		c.Attempt++
		startRequests.Emit(out, StartRequest{Turn: c.Config.Turn, Step: c.Step, Attempt: c.Attempt})
	}, "start-request")
	aRecover     = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Attempt = 0 })
	aCommitReply = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		d := modelDone(ev)
		if d.Finish == vocab.FinishMaxTokens {
			c.MaxTokens = true
		}
		commitReplies.Emit(out, CommitReply{Reply: d.Reply, Finish: d.Finish, Usage: d.Usage})
	}, "commit-reply")
	aTruncated = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aCommitReply.Run(c, ev, out)
		calls := msgOf(modelDone(ev).Reply).ToolCalls()
		res := make([]*vocab.ToolResult, len(calls))
		for i, call := range calls {
			res[i] = &vocab.ToolResult{CallID: call.ID, Name: call.Name, IsError: true, Code: vocab.CodeToolMaxTokens,
				Content: "not executed: the reply hit the output token limit"}
		}
		commitResultsStore.Emit(out, CommitResults{Results: res})
		// Stop at the drain: stopRequested ends the turn there, and the
		// sticky MaxTokens (set by the commit) makes the end max-tokens.
		if !c.Stopped {
			c.Stopped, c.StopReason = true, StopMaxTokens
		}
	}, "commit-reply", "commit-results")
	aActing = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aCommitReply.Run(c, ev, out)
		c.Calls, c.Results, c.Started = newBatch(modelDone(ev).Reply)
		spawnTools.Emit(out, SpawnTools{Step: c.Step, Calls: c.Calls})
	}, "commit-reply", "spawn-tools")
	aConcluded = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aCommitReply.Run(c, ev, out)
		c.Concluded = true
	}, "commit-reply")
	aPausedReply = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aCommitReply.Run(c, ev, out) // not concluded: the next step goes out
	}, "commit-reply")
	aBadFinish = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aCommitReply.Run(c, ev, out)
		fail(c, finishErr(modelDone(ev).Finish))
	}, "commit-reply")
	aEmptyRetry = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		scheduleRetry(c, emptyErr(modelDone(ev).Finish), 0, out)
	}, "retry-scheduled", "start-timer")
	aEmptyFail = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		fail(c, emptyErr(modelDone(ev).Finish))
	})
	aRetry = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		f := ev.(ModelFailed)
		scheduleRetry(c, f.Err, f.Jitter, out)
	}, "retry-scheduled", "start-timer")
	aFail       = act(func(c *Ctx, ev chart.Event, _ *chart.Out) { fail(c, ev.(ModelFailed).Err) })
	aRetryTimer = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Timer = chart.Timer{} })
	aStarted    = act(func(c *Ctx, ev chart.Event, _ *chart.Out) { c.Started[c.index(startedID(ev))] = true })
	aOutcome    = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		r := ev.(ToolOutcome).Result
		i := c.index(r.CallID)
		if r.Name != c.Calls[i].Name {
			cp := *r
			cp.Name = c.Calls[i].Name
			r = &cp
		}
		c.Results[i] = r // shared, never changed
		if r.StopTurn && !c.Stopped {
			c.Stopped, c.StopReason = true, r.StopReason
		}
		if r.Yield {
			c.Yielded = true
		}
	})
	aLastOutcome = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		aOutcome.Run(c, ev, out)
		commitResults(c, out)
	}, "commit-results")
	aGraceOver = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		c.Timer = chart.Timer{}
		commitResults(c, out)
	}, "commit-results")
	aLastOutcomeAborting = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.Timer.Disarm(out)
		aLastOutcome.Run(c, ev, out)
	}, "cancel-timer", "commit-results")
	aSecondAbort = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		setAbort(c, ev) // a second abort may say more (a crash's recovery)
		c.Timer.Disarm(out)
		commitResults(c, out)
	}, "cancel-timer", "commit-results")
	aEnterDraining = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		drains.Emit(out, Drain{Step: c.Step, Concluded: c.Concluded})
	}, "drain")
	aStopDone = act(func(c *Ctx, _ chart.Event, _ *chart.Out) {
		c.End = endCompleted
	})
	aYieldDone = act(func(c *Ctx, _ chart.Event, _ *chart.Out) {
		c.End = endYielded
	})
	aMaxSteps = act(func(c *Ctx, _ chart.Event, _ *chart.Out) {
		c.End = &vocab.TurnEnd{Kind: vocab.EndError, Code: vocab.CodeMaxStepsExceeded,
			Message: fmt.Sprintf("the turn ran %d steps without new input (max steps %d); raise the max-steps limit to let it go on", c.Idle, c.Config.MaxSteps)}
	})
	aNextStep = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		c.Calls, c.Results, c.Started = nil, nil, nil
		if ev.(Drained).Messages > 0 {
			c.Idle = 0
		}
	})
	aGateEmpty   = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.End = endCompleted })
	aGateBlocked = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.End = endBlocked })
	aGateFail    = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		r := ev.(GateRefuse)
		code := r.Code
		if code == "" {
			code = vocab.CodeHook
		}
		c.End = &vocab.TurnEnd{Kind: vocab.EndError, Code: code, Message: r.Message}
	})
	aAbort         = act(func(c *Ctx, ev chart.Event, _ *chart.Out) { setAbort(c, ev) })
	aAbortThinking = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		setAbort(c, ev)
		out.Emit(CancelRequest{Cause: *c.Abort})
	}, "cancel-request")
	aAbortRetrying = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		setAbort(c, ev)
		c.Timer.Disarm(out)
	}, "cancel-timer")
	aAbortActing = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		setAbort(c, ev)
		out.Emit(CancelTools{Cause: *c.Abort})
		c.Timer.Arm(&c.TimerSeq, TimerAbortGrace, c.Config.AbortGrace, out)
	}, "cancel-tools", "start-timer")
	aLoopBlock     = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.LoopBlocks++ })
	aLoopTerminate = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		l := ev.(LoopTerminate).Loop
		c.LoopBlocks++
		c.LoopEnd = &vocab.TurnEnd{Kind: vocab.EndError, Code: vocab.CodeLoopCriticalRepeat,
			Message: fmt.Sprintf("a critical tool loop was detected again (%s, %d times, tool %q): the run stopped", l.Detector, l.Count, l.Tool)}
	})
	aLoopTerminated = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.End = c.LoopEnd })
	aPause          = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Paused = true })
	aContinue       = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Paused = false })
	aStop           = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		if !c.Stopped {
			c.Stopped, c.StopReason = true, ev.(Stop).Reason
		}
	})
	aEnd = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		if c.End.Kind == vocab.EndCompleted && c.MaxTokens {
			c.End = endMaxTokens
		}
		endTurns.Emit(out, EndTurn{End: *c.End, Steps: c.Step})
	}, "end-turn")
)

// The turn ends without details, shared: a Ctx's End is replaced, never
// changed in place.
var (
	endCompleted = &vocab.TurnEnd{Kind: vocab.EndCompleted}
	endYielded   = &vocab.TurnEnd{Kind: vocab.EndYielded}
	endBlocked   = &vocab.TurnEnd{Kind: vocab.EndBlocked}
	endMaxTokens = &vocab.TurnEnd{Kind: vocab.EndMaxTokens}
)

func setAbort(c *Ctx, ev chart.Event) {
	cause := ev.(Abort).Cause
	if c.Abort == nil || cause.Kind == vocab.CancelInterrupted {
		c.Abort = &cause // a crash's recovery overrides an abort in progress
	}
	c.End = &vocab.TurnEnd{Kind: vocab.EndAborted, Cause: c.Abort}
}

func fail(c *Ctx, err *vocab.Error) {
	if err == nil {
		err = &vocab.Error{Code: vocab.CodeInternal, Message: "model failed without an error"}
	}
	c.LastErr = err
	c.End = &vocab.TurnEnd{Kind: vocab.EndError, Code: err.Code, Message: err.Message}
}

func scheduleRetry(c *Ctx, err *vocab.Error, jitter float64, out *chart.Out) {
	c.LastErr = err
	d := c.Config.Retry.Delay(c.Attempt, jitter, err.RetryAfter)
	out.Emit(RetryScheduled{FailedAttempt: c.Attempt, NextAttempt: c.Attempt + 1, MaxAttempts: c.Config.Retry.MaxAttempts,
		Delay: d, Code: err.Code, Message: err.Message})
	c.Timer.Arm(&c.TimerSeq, TimerRetry, d, out)
}

// commitResults emits the batch's results in the model's order, filling
// every missing outcome as aborted.
func commitResults(c *Ctx, out *chart.Out) {
	cause := vocab.CancelCause{Kind: vocab.CancelUser}
	if c.Abort != nil {
		cause = *c.Abort
	}
	for i, call := range c.Calls {
		if c.Results[i] == nil {
			r := vocab.AbortedResult(call, c.Started[i], cause)
			c.Results[i] = &r
		}
	}
	// The results are never changed in place (a step's batch is dropped
	// whole at the next step), so the effect shares them.
	commitResultsStore.Emit(out, CommitResults{Results: slices.Clip(c.Results)})
}

// newBatch returns a step's batch: the reply's tool calls (copies, in
// order) and the batch's Results and Started, all nil or false. A small
// batch gets the three in one allocation (each slice's capacity is its
// length, so none grows into another).
func newBatch(reply *vocab.Message) (calls []vocab.ToolCall, results []*vocab.ToolResult, started []bool) {
	n := 0
	if reply != nil {
		for _, p := range reply.Parts {
			if p.Kind == vocab.PartToolCall && p.Call != nil {
				n++
			}
		}
	}
	switch {
	case n == 1:
		b := new(struct {
			calls   [1]vocab.ToolCall
			results [1]*vocab.ToolResult
			started [1]bool
		})
		calls, results, started = b.calls[:], b.results[:], b.started[:]
	case n == 2:
		b := new(struct {
			calls   [2]vocab.ToolCall
			results [2]*vocab.ToolResult
			started [2]bool
		})
		calls, results, started = b.calls[:], b.results[:], b.started[:]
	case n > 2 && n <= 4:
		b := new(struct {
			calls   [4]vocab.ToolCall
			results [4]*vocab.ToolResult
			started [4]bool
		})
		calls, results, started = b.calls[:n:n], b.results[:n:n], b.started[:n:n]
	default:
		// As vocab.Message.ToolCalls: no calls is a nil slice.
		if n > 0 {
			calls = make([]vocab.ToolCall, n)
		}
		results, started = make([]*vocab.ToolResult, n), make([]bool, n)
	}
	if n == 0 {
		return calls, results, started
	}
	i := 0
	for _, p := range reply.Parts {
		if p.Kind == vocab.PartToolCall && p.Call != nil {
			calls[i] = *p.Call
			i++
		}
	}
	return calls, results, started
}

// Definition is the turn machine: the single source of its stateless
// configuration, its diagrams and its table tests. Guarded transitions of
// one state and trigger are tried in the order listed; the first whose
// guard passes is taken.
var Definition = &chart.Def[Ctx]{
	Name:    "turn",
	Initial: Open,
	Version: Version,
	States: []chart.StateSpec[Ctx]{
		{Name: Open, Initial: Gating},
		{Name: Gating, Parent: Open, Entry: aEnterGating},
		{Name: Thinking, Parent: Open, Entry: aEnterThinking},
		{Name: Retrying, Parent: Open},
		{Name: Acting, Parent: Open, Initial: Running},
		{Name: Running, Parent: Acting},
		{Name: Aborting, Parent: Acting},
		{Name: Draining, Parent: Open, Entry: aEnterDraining},
		{Name: Done, Final: true, Entry: aEnd},
		{Name: Failed, Final: true, Entry: aEnd},
		{Name: Aborted, Final: true, Entry: aEnd},
	},
	Triggers: []chart.Trigger{TrGateProceed, TrGateEmpty, TrGateRefuse, TrModelDone, TrModelFailed, TrTimer,
		TrToolStarted, TrToolOutcome, TrDrained, TrAbort, TrPause, TrContinue, TrStop, TrLoopBlock, TrLoopTerminate},
	Transitions: []edge{
		{From: Gating, On: TrGateProceed, To: Thinking, Action: aProceed},
		{From: Gating, On: TrGateEmpty, To: Done, Guard: gNothingOwed, Action: aGateEmpty},
		{From: Gating, On: TrGateRefuse, To: Done, Guard: gBlocked, Action: aGateBlocked},
		{From: Gating, On: TrGateRefuse, To: Failed, Action: aGateFail},
		{From: Gating, On: TrAbort, To: Aborted, Action: aAbort},

		// model.done: the first passing guard wins, in this order. Tool
		// calls decide continuation; a truncated reply's calls are not run
		// (their error results are committed, the turn stops at the drain
		// and ends max-tokens); an empty reply is a remote failure; a text
		// reply the provider ended filtered, error, aborted, refused or
		// cut off by the context window is committed and fails the turn;
		// a paused reply is committed and the turn goes on; any other
		// reply is concluded.
		{From: Thinking, On: TrModelDone, To: Draining, Guard: gTruncatedCalls, Action: aTruncated},
		{From: Thinking, On: TrModelDone, To: Acting, Guard: gHasToolCalls, Action: aActing},
		{From: Thinking, On: TrModelDone, To: Retrying, Guard: gEmptyRetry, Action: aEmptyRetry},
		{From: Thinking, On: TrModelDone, To: Failed, Guard: gEmpty, Action: aEmptyFail},
		{From: Thinking, On: TrModelDone, To: Failed, Guard: gBadFinish, Action: aBadFinish},
		{From: Thinking, On: TrModelDone, To: Draining, Guard: gPaused, Action: aPausedReply},
		{From: Thinking, On: TrModelDone, To: Draining, Action: aConcluded},
		{From: Thinking, On: TrModelFailed, To: Thinking, Guard: gRecovered, Action: aRecover},
		{From: Thinking, On: TrModelFailed, To: Retrying, Guard: gRetryable, Action: aRetry},
		{From: Thinking, On: TrModelFailed, To: Failed, Action: aFail},
		{From: Thinking, On: TrAbort, To: Aborted, Action: aAbortThinking},

		{From: Retrying, On: TrTimer, To: Thinking, Guard: gRetryTimer, Action: aRetryTimer},
		{From: Retrying, On: TrAbort, To: Aborted, Action: aAbortRetrying},

		{From: Acting, On: TrToolStarted, Guard: gKnownCall, Action: aStarted},
		{From: Running, On: TrToolOutcome, To: Draining, Guard: gLastOutcome, Action: aLastOutcome},
		{From: Running, On: TrToolOutcome, Guard: gPendingCall, Action: aOutcome},
		{From: Running, On: TrAbort, To: Aborting, Action: aAbortActing},
		{From: Running, On: TrLoopBlock, Action: aLoopBlock},
		{From: Running, On: TrLoopTerminate, Action: aLoopTerminate},
		{From: Aborting, On: TrToolOutcome, To: Aborted, Guard: gLastOutcome, Action: aLastOutcomeAborting},
		{From: Aborting, On: TrToolOutcome, Guard: gPendingCall, Action: aOutcome},
		{From: Aborting, On: TrTimer, To: Aborted, Guard: gGraceTimer, Action: aGraceOver},
		{From: Aborting, On: TrAbort, To: Aborted, Action: aSecondAbort},

		{From: Draining, On: TrDrained, To: Failed, Guard: gLoopTerminated, Action: aLoopTerminated},
		{From: Draining, On: TrDrained, To: Done, Guard: gYielded, Action: aYieldDone},
		{From: Draining, On: TrDrained, To: Done, Guard: gStopRequested, Action: aStopDone},
		{From: Draining, On: TrDrained, To: Done, Guard: gConcluded, Action: aStopDone},
		{From: Draining, On: TrDrained, To: Failed, Guard: gMaxSteps, Action: aMaxSteps},
		{From: Draining, On: TrDrained, To: Gating, Action: aNextStep},
		{From: Draining, On: TrAbort, To: Aborted, Action: aAbort},

		{From: Open, On: TrPause, Action: aPause},
		{From: Open, On: TrContinue, Action: aContinue},
		{From: Open, On: TrStop, Action: aStop},
	},
}

// Machine is a built turn machine kind. Build one per goroutine (or per
// session lane) with New and reuse it for every turn.
type Machine = chart.Machine[Ctx]

// Instance is one turn.
type Instance = chart.Instance[Ctx]

// New builds the turn machine kind.
func New() *Machine { return chart.MustBuild(Definition) }
