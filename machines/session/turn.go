package session

import (
	"slices"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// messageStart is the payload of every message/start event, boxed once.
var messageStart any = vocab.MessagePayload{Message: vocab.Message{Role: vocab.RoleAssistant}}

func (c *Core) turnEffect(eff chart.Effect) {
	// The effects of every step come by pointer, into the Out's storage:
	// each case reads what it needs before the next fire resets the Out.
	switch f := eff.(type) {
	case *turn.RunGate:
		c.runGate(*f)
	case *turn.StartRequest:
		c.startRequest(*f)
	case turn.CancelRequest:
		c.cancelRequest(f.Cause)
	case *turn.CommitReply:
		c.commitReply(*f)
	case turn.RetryScheduled:
		c.emit(vocab.EventRetry, vocab.RetryPayload{FailedAttempt: f.FailedAttempt, NextAttempt: f.NextAttempt,
			MaxAttempts: f.MaxAttempts, Delay: f.Delay, Code: f.Code, Message: f.Message})
	case *turn.SpawnTools:
		c.admit(f.Calls)
	case turn.CancelTools:
		c.cancelTools(f.Cause)
	case *turn.CommitResults:
		c.commitResults(f.Results)
	case *turn.Drain:
		c.drain(*f)
	case *turn.EndTurn:
		c.endTurn(*f)
	case chart.StartTimer:
		c.startTimer("turn", "", f, c.turnNo)
	case chart.CancelTimer:
		c.cancelTimer("turn", "", f)
	}
}

// ---- the step gate ----

// runGate is the step gate: nothing reaches the model until it says so.
// It takes the claimed input, lets the will-begin-step hooks see and edit
// it, and answers the turn with gate.proceed, gate.empty or gate.refuse.
func (c *Core) runGate(f turn.RunGate) {
	claimed := c.claim
	c.claim = nil
	if !c.cfg.Hooks.WillBeginStep {
		c.gateDecide(claimed)
		return
	}
	c.start(&pending{kind: WorkHook, turn: c.turnNo, claimed: claimed},
		Work{Hook: vocab.HookWillBeginStep, Info: c.info(f.Step), Messages: cloneMessages(claimed), History: c.History()})
}

// gateDecide writes the step's claimed input to history and lets the turn
// proceed; a turn's first step with nothing to say ends it without a
// model call.
func (c *Core) gateDecide(claimed []vocab.Message) {
	if c.turn == nil || !c.m.turn.In(c.turn, turn.Gating) {
		c.unclaim(claimed, "cancelled")
		return
	}
	owed := c.turn.Ctx.Step == 0 || c.turn.Ctx.Concluded
	resume := c.resume
	c.resume = false // Continue's resume is for the turn's first step only
	if len(claimed) == 0 && owed && !resume && !c.resumable() {
		c.enqueue(fireReq{kind: reqTurn, ev: turn.GateEmpty{}})
		return
	}
	c.step = c.turn.Ctx.Step + 1
	c.stepOpen = true
	c.emit(vocab.EventStepStart, nil)
	for _, m := range claimed {
		c.appendHistory(m)
		c.emit(vocab.EventUserMessage, vocab.MessagePayload{Message: m})
		if m.ID != c.prompt {
			delete(c.live, m.ID)
		}
	}
	c.enqueue(fireReq{kind: reqTurn, ev: turn.GateProceed{Claimed: len(claimed)}})
}

// ---- model requests ----

func (c *Core) startRequest(f turn.StartRequest) {
	if c.header != "" {
		c.logHeader()
	}
	req := &vocab.Request{Model: c.cfg.Model, System: c.cfg.System, Messages: slices.Clip(c.history),
		Tools: c.cfg.Tools, MaxTokens: c.cfg.MaxTokens, Turn: f.Turn, Step: f.Step, Attempt: f.Attempt}
	c.reply.Reset()
	c.start(&pending{kind: WorkModel, turn: c.turnNo}, Work{Request: req})
	c.model = c.workSeq
}

// cancelRequest cancels the request in flight and writes what was
// salvaged of its partial reply (text and thinking; tool calls without
// results are dropped).
func (c *Core) cancelRequest(cause vocab.CancelCause) {
	if c.model == 0 {
		// The reply already arrived (an error handler is judging it):
		// there is nothing in flight to salvage.
		c.closeReply()
		return
	}
	c.cancel(c.model, cause)
	if u := c.reply.Usage(); u != (vocab.Usage{}) {
		// What the provider reported before the cancel is spent.
		c.emit(vocab.EventUsage, vocab.UsagePayload{Usage: u})
	}
	partial := c.reply.Message()
	partial.Parts = slices.DeleteFunc(partial.Parts, func(p vocab.Part) bool { return p.Kind == vocab.PartToolCall })
	if len(partial.Parts) > 0 {
		partial.ID = c.derivedID("m", c.model)
		partial.Source = vocab.SourceSalvaged
		c.appendHistory(partial)
		c.emit(vocab.EventAssistant, vocab.MessagePayload{Message: partial})
	}
	if c.reply.open {
		c.emit(vocab.EventMessageEnd, vocab.MessagePayload{Message: partial})
	}
	c.reply.Reset()
	c.model = 0
}

// commitReply writes the reply to history; its usage is recorded before
// any tool of the step runs.
func (c *Core) commitReply(f turn.CommitReply) {
	if !c.reply.open {
		c.emit(vocab.EventMessageStart, messageStart)
	}
	c.emit(vocab.EventUsage, c.m.slabs.usage.Box(&vocab.UsagePayload{Usage: f.Usage}))
	var reply vocab.Message
	if f.Reply != nil {
		reply = *f.Reply
	}
	c.appendHistory(reply)
	for _, p := range reply.Parts {
		if p.Kind == vocab.PartToolCall && p.Call != nil {
			if c.callIDs == nil {
				c.callIDs = map[string]struct{}{}
			}
			c.callIDs[p.Call.ID] = struct{}{}
		}
	}
	c.lastFinish = f.Finish
	p := c.m.slabs.messages.Box(&vocab.MessagePayload{Message: reply, SourceSeqs: c.reply.sources}) // one boxed value, two events
	c.emit(vocab.EventMessageEnd, p)
	c.emit(vocab.EventAssistant, p)
	c.reply.Reset()
}

// commitResults writes the batch's results to history in the model's
// order and ends the batch.
func (c *Core) commitResults(results []*vocab.ToolResult) {
	for _, res := range results {
		// One result, shared by the history message and the event: neither
		// is ever changed in place (history is read through copies).
		m := vocab.Message{Role: vocab.RoleTool, Source: vocab.SourceTool, Result: res}
		m.ID = c.ids.Join(string(c.cfg.Session), "-r-", res.CallID)
		c.appendHistory(m)
		c.emit(vocab.EventToolResult, c.m.slabs.tools.Box(&vocab.ToolPayload{Call: vocab.ToolCall{ID: res.CallID, Name: res.Name}, Result: res}))
		if res.StopTurn && c.stopReason == "" {
			c.stopReason = res.StopReason
		}
	}
	c.endBatch()
}

// endBatch forgets the batch; work of its calls still running (past their
// grace) is cancelled and their results will be stale.
func (c *Core) endBatch() {
	for _, cl := range c.batch {
		if cl.inst != nil && c.m.tool.In(cl.inst, tool.Detached) {
			c.bg = append(c.bg, cl) // it goes on in the background
			continue
		}
		c.m.deadCalls = append(c.m.deadCalls, cl) // spare from the next Step on
		if cl.hook != 0 {
			c.cancel(cl.hook, vocab.CancelCause{Kind: vocab.CancelUser})
			cl.hook = 0
		}
		if cl.work != 0 {
			c.cancel(cl.work, vocab.CancelCause{Kind: vocab.CancelUser})
			cl.work = 0
		}
	}
	for i := 0; i < len(c.work); {
		if p := c.work[i]; p.kind == WorkTimer && p.machine == "tool" {
			c.cancel(p.id, vocab.CancelCause{})
			continue
		}
		i++
	}
	c.retireTools()
	clear(c.batch)
	c.batch = c.batch[:0]
}

// ---- the drain ----

// drain runs after each step: step/end, then the did-finish-step hooks,
// then (a concluded turn with nothing queued) the turn-stopping
// listeners, then the claim of queued input — unless the turn is about to
// stop, in which case the input stays queued for the next turn.
func (c *Core) drain(f turn.Drain) {
	c.endStep(c.lastFinish)
	c.concluded = f.Concluded
	if c.cfg.Hooks.DidFinishStep {
		c.start(&pending{kind: WorkHook, turn: c.turnNo},
			Work{Hook: vocab.HookDidFinishStep, Info: c.info(f.Step), History: c.History()})
		return
	}
	c.drainStopping()
}

// stopping reports whether the turn ends at its drain: paused, asked to
// stop, or yielded. Such a drain claims nothing: queued input waits for
// the next turn (which, after a yield, resumes the prompt).
func (c *Core) stopping() bool {
	return c.turn != nil && (c.turn.Ctx.Paused || c.turn.Ctx.Stopped || c.turn.Ctx.Yielded)
}

func (c *Core) drainStopping() {
	if c.turn == nil || !c.m.turn.In(c.turn, turn.Draining) {
		return
	}
	if c.cfg.Hooks.TurnStopping && c.concluded && !c.stopping() && len(c.agent.Ctx.NextStep) == 0 {
		c.start(&pending{kind: WorkHook, turn: c.turnNo},
			Work{Hook: vocab.HookTurnStopping, Info: c.info(c.step), History: c.History()})
		return
	}
	c.drainFinish()
}

func (c *Core) drainFinish() {
	if c.turn == nil || !c.m.turn.In(c.turn, turn.Draining) {
		return
	}
	if c.stopping() {
		c.enqueue(fireReq{kind: reqTurn, ev: turn.Drained{}})
		return
	}
	c.enqueue(fireReq{kind: reqAgent, ev: agent.Drain{}})
}

// endStep closes the open step with finish.
func (c *Core) endStep(finish vocab.FinishReason) {
	if !c.stepOpen {
		return
	}
	c.stepOpen = false
	c.emit(vocab.EventStepEnd, stepEnd(finish))
}

// endTurn closes the turn: its open step, turn/end, the prompt's result,
// the turn's work; then the agent moves on.
func (c *Core) endTurn(f turn.EndTurn) {
	switch {
	case f.End.Kind == vocab.EndError && c.lastFinish == "":
		c.endStep(vocab.FinishError)
	case f.End.Kind == vocab.EndAborted || c.lastFinish == "":
		c.endStep(vocab.FinishInterrupted)
	default:
		c.endStep(c.lastFinish)
	}
	end := f.End
	if end.Kind == vocab.EndAborted && end.Cause != nil && end.Cause.Kind == vocab.CancelInterrupted {
		// Written only by recovery, for a turn a crash left open.
		end = vocab.TurnEnd{Kind: vocab.EndInterrupted}
	}
	if end == (vocab.TurnEnd{Kind: vocab.EndCompleted}) && f.Steps >= 0 && f.Steps < len(turnEndsCompleted) {
		c.emit(vocab.EventTurnEnd, turnEndsCompleted[f.Steps])
	} else {
		c.emit(vocab.EventTurnEnd, vocab.TurnEndPayload{Reason: end, Steps: f.Steps})
	}
	switch {
	case c.prompt != "" && end.Kind == vocab.EndYielded:
		// The prompt stays open: the next turn resumes it.
		c.yielded = c.prompt
		c.emit(vocab.EventYield, vocab.PromptPayload{Prompt: c.prompt, State: vocab.YieldYielded})
	case c.prompt != "":
		c.resolve(c.prompt, c.promptResult(f))
	}
	for i := 0; i < len(c.work); {
		if p := c.work[i]; p.turn == c.turnNo && p.turn != 0 {
			if p.kind == WorkHook && p.work.Hook == vocab.HookWillBeginStep {
				c.unclaim(p.claimed, "cancelled")
			}
			cause := vocab.CancelCause{Kind: vocab.CancelUser}
			if f.End.Cause != nil {
				cause = *f.End.Cause
			}
			c.cancel(p.id, cause)
			continue
		}
		i++
	}
	c.endBatch()
	c.unclaim(c.claim, "cancelled")
	c.claim = nil
	if c.model != 0 {
		c.model = 0
	}
	c.reply.Reset()
	c.retireTurn()
	c.turn, c.prompt, c.step, c.inTurn = nil, "", 0, false
	if f.End == (vocab.TurnEnd{Kind: vocab.EndCompleted}) {
		c.enqueue(fireReq{kind: reqAgent, ev: turnEndedCompleted})
	} else {
		c.enqueue(fireReq{kind: reqAgent, ev: agent.TurnEnded{End: f.End}})
	}
}

// The turn/end payloads of turns completed in their first steps and the
// agent's TurnEnded of a completed turn, boxed once: payloads and events
// are never changed, so events share them.
var (
	turnEndsCompleted = func() (ps [16]any) {
		for i := range ps {
			ps[i] = vocab.TurnEndPayload{Reason: vocab.TurnEnd{Kind: vocab.EndCompleted}, Steps: i}
		}
		return ps
	}()
	turnEndedCompleted chart.Event = agent.TurnEnded{End: vocab.TurnEnd{Kind: vocab.EndCompleted}}
)

func (c *Core) promptResult(f turn.EndTurn) vocab.PromptResult {
	switch f.End.Kind {
	case vocab.EndCompleted, vocab.EndMaxTokens:
		reason := c.stopReason
		if reason == "" && c.turn != nil && c.turn.Ctx.Paused {
			reason = "paused" // the turn stopped at its drain; Continue picks it up
		}
		return vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: f.Steps, Truncated: f.End.Kind == vocab.EndMaxTokens, StopReason: reason}
	case vocab.EndBlocked:
		return vocab.PromptResult{Kind: vocab.PromptBlocked, Steps: f.Steps, Detail: "refused by the step gate"}
	case vocab.EndAborted:
		if f.End.Cause != nil && f.End.Cause.Kind == vocab.CancelTimeout {
			return vocab.PromptResult{Kind: vocab.PromptFailed, Steps: f.Steps, Err: &vocab.Error{Code: vocab.CodeRunTimeout,
				Message: "the run went past its wall-clock timeout"}}
		}
		return vocab.PromptResult{Kind: vocab.PromptCancelled, Steps: f.Steps, Reason: f.End.Cause}
	}
	return vocab.PromptResult{Kind: vocab.PromptFailed, Steps: f.Steps, Err: &vocab.Error{Code: f.End.Code, Message: f.End.Message}}
}

// stepEnds are the step/end payloads of the known finish reasons, boxed
// once.
var stepEnds = func() map[vocab.FinishReason]any {
	m := map[vocab.FinishReason]any{}
	for _, f := range []vocab.FinishReason{vocab.FinishStop, vocab.FinishToolCalls, vocab.FinishMaxTokens, vocab.FinishError,
		vocab.FinishAborted, vocab.FinishFiltered, vocab.FinishInterrupted, vocab.FinishPause, vocab.FinishRefusal,
		vocab.FinishContextOverflow} {
		m[f] = vocab.StepEndPayload{Finish: f}
	}
	return m
}()

func stepEnd(f vocab.FinishReason) any {
	if p, ok := stepEnds[f]; ok {
		return p
	}
	return vocab.StepEndPayload{Finish: f}
}
