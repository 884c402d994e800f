package session

import (
	"slices"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// apply steps a validated, copied, non-stale input (Step's own: in
// points at it, so the ~320-byte Input is not copied from call to call).
func (c *Core) apply(in *vocab.Input) error {
	switch in.Kind {
	case vocab.InSubmit, vocab.InSteer, vocab.InInject, vocab.InNotify, vocab.InRemind:
		if err := c.message(in); err != nil {
			return err
		}
	case vocab.InWithdraw:
		c.cause = vocab.CancelCause{Kind: vocab.CancelUser, Reason: "withdrawn"}
		if err := c.first(in, agent.Drop{ID: in.Target}); err != nil {
			return vocab.Errorf(vocab.CodeNotQueued, "withdraw: %s is not queued", in.Target)
		}
		c.ack(in)
	case vocab.InCancel:
		c.cause = *in.Cause
		c.emitInput(in)
		c.fireNow(agent.Cancel{Cause: *in.Cause, KeepInbox: in.KeepInbox})
		if c.yielded != "" && c.turn == nil {
			// The yielded prompt is the work a cancel ends.
			c.resolve(c.yielded, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: in.Cause})
		}
		c.ack(in)
	case vocab.InHooks:
		c.emitInput(in)
		c.cfg.Hooks = HooksOf(in.Slots)
		c.agent.Ctx.Config.PromptGate = c.cfg.Hooks.BeforeSubmitPrompt
	case vocab.InPause:
		c.emitInput(in)
		c.fireNow(agent.Pause{})
		c.ack(in)
	case vocab.InContinue:
		c.emitInput(in)
		c.fireNow(agent.Continue{Resume: c.resumable()})
		c.ack(in)
	case vocab.InClose:
		c.cause = vocab.CancelCause{Kind: vocab.CancelDisposed}
		c.emitInput(in)
		if !c.closing() {
			c.fireNow(agent.Close{})
		}
		c.ack(in)
	case vocab.InMaintenanceStart:
		if err := c.first(in, agent.MaintenanceStart{}); err != nil {
			return vocab.Errorf(vocab.CodeNotIdle, "maintenance refused: %v", err)
		}
		c.start(&pending{kind: WorkMaintenance}, Work{Input: in.ID})
		c.ack(in)
	case vocab.InMaintenanceDone:
		c.emitInput(in)
		c.drop(in.Work)
		c.fireNow(agent.MaintenanceDone{})
	case vocab.InModelParts:
		c.emitInput(in)
		c.reply.sources = append(c.reply.sources, c.seq)
		if !c.reply.open {
			c.reply.open = true
			c.emit(vocab.EventMessageStart, messageStart)
		}
		for _, p := range in.Parts {
			c.reply.Add(p)
		}
	case vocab.InModelDone:
		c.emitInput(in)
		c.modelDone(*in)
	case vocab.InModelFailed:
		c.emitInput(in)
		c.modelFailed(*in)
	case vocab.InToolUpdate:
		c.emitInput(in)
		if cl := c.callOf(in.Work); cl != nil {
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.ExecUpdate{Text: in.Text}})
		}
	case vocab.InToolDone:
		c.emitInput(in)
		c.drop(in.Work)
		if cl := c.callOf(in.Work); cl != nil {
			cl.work = 0
			r := *in.Result
			switch {
			case r.IsError && r.Code == vocab.CodeToolAborted:
				c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.ExecFailed{Message: r.Content}})
			default:
				c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.ExecDone{Result: in.Result}}) // Step's own copy, never changed
			}
		}
	case vocab.InToolDetached:
		c.emitInput(in)
		if cl := c.callOf(in.Work); cl != nil {
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.ExecDetached{Ack: in.Text}})
		}
	case vocab.InApprove:
		c.emitInput(in)
		c.approve(*in.Approval)
		c.ack(in)
	case vocab.InHookDone:
		c.emitInput(in)
		p := c.find(in.Work)
		c.drop(in.Work)
		c.verdict(p, *in.Hook)
	case vocab.InTimerFired:
		c.emitInput(in)
		p := c.find(in.Work)
		c.drop(in.Work)
		c.timerFired(p)
	case vocab.InOpen:
		c.open(*in)
	case vocab.InCheckpoint:
		c.checkpoint(*in)
	case vocab.InSlotGranted:
		c.emitInput(in)
		c.slotHeld = true
		for _, p := range c.work {
			if p.waiting {
				p.waiting = false
				if p.kind == WorkTool && p.work.Call != nil {
					c.emit(vocab.EventToolExecutionStart, vocab.ToolPayload{Call: *p.work.Call})
				}
				c.m.rd.Work = append(c.m.rd.Work, p.work)
			}
		}
	case vocab.InStopped:
		c.emitInput(in)
		for _, s := range in.Stuck {
			c.emit(vocab.EventWorkStuck, vocab.StuckPayload{Work: s.Work, What: s.What})
		}
		c.fireNow(agent.Closed{})
	}
	c.run()
	if c.m.agent.In(c.agent, agent.Disposed) && !c.closed {
		c.dispose()
	}
	c.lane()
	c.updateStatus()
	return nil
}

// message queues a caller's message input.
func (c *Core) message(in *vocab.Input) error {
	m := *in.Message
	m.ID = in.ID
	if m.Role == "" {
		m.Role = vocab.RoleUser
	}
	var ev chart.Event
	switch in.Kind {
	case vocab.InSubmit:
		// By pointer, from the machines' scratch: first fires it at once
		// and the agent keeps a copy of the message, not the event.
		c.m.submit = agent.Submit{Message: m}
		ev = &c.m.submit
	case vocab.InSteer:
		ev = agent.Steer{Message: m}
	case vocab.InInject:
		ev = agent.Inject{Message: m}
	case vocab.InNotify:
		m.BypassMaxSteps = m.BypassMaxSteps || in.Bypass
		ev = agent.Notify{Message: m, BypassMaxSteps: in.Bypass}
	case vocab.InRemind:
		ev = agent.Remind{Key: in.Key, Message: m}
	}
	if c.live == nil {
		c.live = map[vocab.ID]struct{}{}
	}
	c.live[in.ID] = struct{}{}
	if in.Kind == vocab.InSubmit {
		c.prompts = append(c.prompts, in.ID)
	}
	if err := c.first(in, ev); err != nil {
		delete(c.live, in.ID)
		if in.Kind == vocab.InSubmit {
			c.prompts = c.prompts[:len(c.prompts)-1]
		}
		return vocab.Errorf(vocab.CodeBadInput, "%s refused: %v", in.Kind, err)
	}
	c.used[in.ID] = struct{}{}
	c.usedList = append(c.usedList, in.ID)
	c.ack(in)
	return nil
}

// first fires a caller input's agent event; only when the agent takes it
// is the input recorded (then its transitions and effects).
func (c *Core) first(in *vocab.Input, ev chart.Event) error {
	c.m.out.Reset()
	if err := c.m.agent.Fire(c.agent, ev, &c.m.out); err != nil {
		c.m.out.Reset()
		return err
	}
	c.emitInput(in)
	c.settle(fireReq{kind: reqAgent})
	return nil
}

// fireNow fires an agent event for an input already recorded.
func (c *Core) fireNow(ev chart.Event) {
	c.enqueue(fireReq{kind: reqAgent, ev: ev})
	c.run()
}

func (c *Core) emitInput(in *vocab.Input) { c.emit(in.EventKind(), c.m.slabs.inputs.Box(in)) }

// resumable reports whether the history ends where the model owes a
// reply: after tool results, or after tool calls without their results.
func (c *Core) resumable() bool {
	if len(c.history) == 0 {
		return false
	}
	last := c.history[len(c.history)-1]
	return last.Role == vocab.RoleTool || last.Role == vocab.RoleAssistant && last.HasToolCalls()
}

// ---- model results ----

func (c *Core) modelDone(in vocab.Input) {
	c.drop(in.Work)
	c.model = 0
	reply, finish := c.normalize(*in.Reply, in.Finish, in.Work)
	in.Finish = finish
	empty := reply.IsEmptyReply()
	if empty {
		// An empty reply is never committed: close the message its
		// stream opened (a retry opens its own).
		c.closeReply()
	}
	// An empty reply, and one the context window cut off, go to the
	// error handlers when there are some (a handler may compact the
	// history and try again).
	judge := (empty || finish == vocab.FinishContextOverflow) && c.cfg.Hooks.RequestError
	if (empty || judge) && in.Usage != nil {
		// Such a reply may never be committed, but its tokens are spent:
		// record them now (once: a commit after the handlers records
		// none).
		if *in.Usage != (vocab.Usage{}) {
			c.emit(vocab.EventUsage, vocab.UsagePayload{Usage: *in.Usage})
		}
		in.Usage = nil
	}
	if judge {
		kept := reply // the pending hook's own: it outlives the Step
		in.Reply = &kept
		c.askErrorHandlers(turn.ReplyFailure(&kept, finish), &in)
		return
	}
	var usage vocab.Usage
	if in.Usage != nil {
		usage = *in.Usage
	}
	// The reply and its event wait in the machines' scratch: the turn
	// reads them in this Step's run only (the history takes a copy of the
	// reply, the turn keeps no event), and a Step has one model.done. The
	// event goes by pointer: boxing a copy would cost an allocation.
	c.m.reply = reply
	c.m.done = turn.ModelDone{Reply: &c.m.reply, Finish: finish, Usage: usage}
	c.enqueue(fireReq{kind: reqTurn, ev: &c.m.done})
}

func (c *Core) modelFailed(in vocab.Input) {
	c.drop(in.Work)
	c.model = 0
	if in.Usage != nil && *in.Usage != (vocab.Usage{}) {
		// A failed request's tokens are spent too.
		c.emit(vocab.EventUsage, vocab.UsagePayload{Usage: *in.Usage})
	}
	c.closeReply()
	if c.cfg.Hooks.RequestError {
		c.askErrorHandlers(in.Err, &in)
		return
	}
	c.enqueue(fireReq{kind: reqTurn, ev: turn.ModelFailed{Err: in.Err, Jitter: in.Jitter}})
}

// closeReply ends a streamed message that broke off, so a retry's
// message/start is not nested in it.
func (c *Core) closeReply() {
	if c.reply.open {
		c.emit(vocab.EventMessageEnd, vocab.MessagePayload{Message: c.reply.Message()})
	}
	c.reply.Reset()
}

func (c *Core) askErrorHandlers(err *vocab.Error, in *vocab.Input) {
	if c.turn == nil {
		return
	}
	cp := *in
	e := *err // the hook's own copy
	c.start(&pending{kind: WorkHook, turn: c.turnNo, failure: &cp},
		Work{Hook: vocab.HookRequestError, Info: c.info(c.step), Err: &e, Attempt: c.turn.Ctx.Attempt, History: c.History()})
}

// normalize makes a reply safe to act on: an assistant message with an id,
// a finish reason, and tool call ids that are unique and non-empty (the
// model's duplicates and blanks get ids derived from the work and their
// position; results are matched by these ids).
func (c *Core) normalize(m vocab.Message, finish vocab.FinishReason, work uint64) (vocab.Message, vocab.FinishReason) {
	m.Role, m.Source = vocab.RoleAssistant, vocab.SourceModel
	if m.ID == "" {
		m.ID = c.derivedID("m", work)
	}
	if m.HasToolCalls() {
		seen := make([]string, 0, 4)
		n, cloned := 0, false
		for i := range m.Parts {
			p := &m.Parts[i]
			if p.Kind != vocab.PartToolCall || p.Call == nil {
				continue
			}
			n++
			id := p.Call.ID
			if _, used := c.callIDs[id]; id == "" || used || slices.Contains(seen, id) {
				if !cloned {
					// The logged input keeps the model's own ids.
					m.Parts = slices.Clone(m.Parts)
					p = &m.Parts[i]
					cloned = true
				}
				cc := *p.Call
				cc.ID = string(c.ids.JoinUint(uint64(n), string(c.derivedID("call", work)), "-"))
				p.Call = &cc
				id = cc.ID
			}
			seen = append(seen, id)
		}
	}
	if finish == "" || !finish.Valid() {
		finish = vocab.FinishStop
		if m.HasToolCalls() {
			finish = vocab.FinishToolCalls
		}
	}
	return m, finish
}

// derivedID makes a deterministic id for something the core names itself
// (a reply without an id, a renamed tool call): session, tag, number.
func (c *Core) derivedID(tag string, n uint64) vocab.ID {
	return c.ids.JoinUint(n, string(c.cfg.Session), "-", tag)
}

// ---- hook verdicts ----

func (c *Core) verdict(p *pending, v vocab.HookVerdict) {
	if v.Err != nil {
		c.emit(vocab.EventHookFailed, vocab.HookPayload{Hook: p.work.Hook, Code: v.Err.Code, Message: v.Err.Message})
	}
	switch p.work.Hook {
	case vocab.HookBeforeTool, vocab.HookAfterTool:
		c.toolHookDone(p, v)
	case vocab.HookLoopWarning:
		// Listeners were told; their answer changes nothing.
	case vocab.HookWillBeginStep:
		switch {
		case v.Err != nil:
			c.unclaim(p.claimed, "cancelled")
			c.enqueue(fireReq{kind: reqTurn, ev: turn.GateRefuse{Code: vocab.CodeHook, Message: v.Err.Message}})
		case v.Refuse:
			c.unclaim(p.claimed, "rejected")
			c.enqueue(fireReq{kind: reqTurn, ev: turn.GateRefuse{Blocked: true, Message: v.Reason}})
		default:
			c.gateDecide(c.rewriteClaim(p, v.Messages))
		}
	case vocab.HookDidFinishStep:
		if v.Refuse {
			if c.stopReason == "" {
				c.stopReason = v.Reason
			}
			c.enqueue(fireReq{kind: reqTurn, ev: turn.Stop{Reason: v.Reason}})
		}
		c.enqueue(fireReq{kind: reqDrainStopping})
	case vocab.HookTurnStopping:
		c.enqueue(fireReq{kind: reqDrainFinish})
	case vocab.HookBeforeSubmitPrompt:
		switch {
		case v.Err != nil:
			c.enqueue(fireReq{kind: reqAgent, ev: agent.PromptBlock{Reason: "error: " + v.Err.Message}})
		case v.Refuse:
			c.enqueue(fireReq{kind: reqAgent, ev: agent.PromptBlock{Reason: v.Reason}})
		default:
			var rw *vocab.Message
			if v.Rewritten != nil {
				m := *v.Rewritten
				m.ID, m.Role = p.work.Prompt.ID, vocab.RoleUser
				if m.Source == "" {
					m.Source = vocab.SourceInput
				}
				rw = &m
			}
			c.enqueue(fireReq{kind: reqAgent, ev: agent.PromptPass{Rewritten: rw}})
		}
	case vocab.HookRequestError:
		f := p.failure
		switch {
		case v.Err != nil:
			c.enqueue(fireReq{kind: reqTurn, ev: turn.ModelFailed{Err: v.Err, Jitter: f.Jitter}})
		case v.Retry:
			c.closeReply() // a judged reply that is not committed
			c.history = slices.Clone(v.History)
			c.indexCalls()
			c.emit(vocab.EventHistoryReplaced, vocab.HistoryPayload{By: "error-handler", Messages: v.History})
			failed := f.Err
			if f.Kind == vocab.InModelDone {
				// An empty reply the handler recovered from: the next
				// request goes out at once, through the failure path.
				failed = &vocab.Error{Code: vocab.CodeEmptyResponse, Message: "the model returned an empty response"}
			}
			c.emit(vocab.EventRecovering, vocab.ErrorPayload{Code: failed.Code, Message: failed.Message})
			c.enqueue(fireReq{kind: reqTurn, ev: turn.ModelFailed{Err: failed, Recovered: true, Jitter: f.Jitter}})
		case f.Kind == vocab.InModelDone:
			var usage vocab.Usage
			if f.Usage != nil {
				usage = *f.Usage
			}
			c.enqueue(fireReq{kind: reqTurn, ev: turn.ModelDone{Reply: f.Reply, Finish: f.Finish, Usage: usage}})
		default:
			c.enqueue(fireReq{kind: reqTurn, ev: turn.ModelFailed{Err: f.Err, Jitter: f.Jitter}})
		}
	}
}

// rewriteClaim applies a will-begin-step chain's edit of the claimed
// messages: messages it dropped are reported, messages it made get ids.
func (c *Core) rewriteClaim(p *pending, msgs []vocab.Message) []vocab.Message {
	var dropped []vocab.Message
	for _, m := range p.claimed {
		if !slices.ContainsFunc(msgs, func(n vocab.Message) bool { return n.ID == m.ID }) {
			dropped = append(dropped, m)
		}
	}
	if len(dropped) > 0 {
		c.unclaim(dropped, "dropped")
	}
	out := make([]vocab.Message, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = c.ids.JoinUint(uint64(i+1), string(c.derivedID("w", p.id)), "-")
		}
		if m.Role == "" || m.Role == vocab.RoleSystem {
			m.Role = vocab.RoleUser
		}
		out[i] = m
	}
	return out
}

// unclaim reports claimed messages that will never reach history (a step
// refused or cancelled before they were written).
func (c *Core) unclaim(msgs []vocab.Message, op string) {
	if len(msgs) == 0 {
		return
	}
	c.emit(vocab.EventInboxSpliced, vocab.InboxPayload{Target: "step", Op: op, Removed: len(msgs), Messages: msgs, Outcome: "canceled"})
	for _, m := range msgs {
		if m.ID != c.prompt {
			delete(c.live, m.ID)
		}
	}
}

// ---- timers ----

func (c *Core) timerFired(p *pending) {
	switch p.machine {
	case "agent":
		c.enqueue(fireReq{kind: reqAgent, ev: agent.TimerFired{Name: p.name, Seq: p.seq}})
	case "run":
		c.runTimedOut()
	case "turn":
		if p.name == turn.TimerAbortGrace {
			// The turn's grace ends every call's: calls still settling
			// end aborted first (each with its tool/execution-end), then
			// the turn.
			for _, cl := range c.batch {
				if cl.inst != nil && c.abortable(cl) {
					cause := c.toolCause(cl)
					c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
					c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
				}
			}
		}
		c.enqueue(fireReq{kind: reqTurn, ev: turn.TimerFired{Name: p.name, Seq: p.seq}})
	case "tool":
		for _, cl := range c.batch {
			if cl.Call.ID == p.instance && cl.inst != nil {
				c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.TimerFired{Name: p.name, Seq: p.seq}})
				break
			}
		}
	}
}

// callOf returns the call, of the batch or of the background, that tool
// work id runs.
func (c *Core) callOf(work uint64) *call {
	for _, cl := range c.batch {
		if cl.work == work {
			return cl
		}
	}
	for _, cl := range c.bg {
		if cl.work == work {
			return cl
		}
	}
	return nil
}

// current reports whether cl is a call of the batch or of the background.
func (c *Core) current(cl *call) bool {
	return slices.Contains(c.batch, cl) || slices.Contains(c.bg, cl)
}

// copyInput copies everything in that a caller could still change: caller
// messages, tool results and hook verdicts (user code may keep references).
// A model reply, its usage and stream parts are the adapter's own fresh
// values: the core takes them over (Step's contract says the adapter must
// not change them afterwards).
func copyInput(in *vocab.Input) {
	if in.Usage != nil && in.Kind != vocab.InModelDone && in.Kind != vocab.InModelFailed {
		u := *in.Usage // not a model's report: whoever sent it may keep it
		in.Usage = &u
	}
	if in.Message != nil {
		m := vocab.CloneMessage(*in.Message)
		in.Message = &m
	}

	if in.Result != nil {
		r := vocab.CloneResult(*in.Result)
		in.Result = &r
	}
	if in.Err != nil {
		e := *in.Err
		e.Cause = nil
		in.Err = &e
	}
	if in.Hook != nil {
		h := *in.Hook
		if h.Err != nil {
			e := *h.Err
			e.Cause = nil
			h.Err = &e
		}
		h.Messages = cloneMessages(h.Messages)
		h.History = cloneMessages(h.History)
		if h.Rewritten != nil {
			m := vocab.CloneMessage(*h.Rewritten)
			h.Rewritten = &m
		}
		in.Hook = &h
	}
	if in.Cause != nil {
		cc := *in.Cause
		in.Cause = &cc
	}
	in.Stuck = slices.Clone(in.Stuck)
}

func cloneMessages(ms []vocab.Message) []vocab.Message {
	if ms == nil {
		return nil
	}
	out := make([]vocab.Message, len(ms))
	for i, m := range ms {
		out[i] = vocab.CloneMessage(m)
	}
	return out
}

// indexCalls rebuilds the set of tool call ids in history (after the
// history was replaced, or restored).
func (c *Core) indexCalls() {
	c.callIDs = map[string]struct{}{}
	for _, m := range c.history {
		for _, p := range m.Parts {
			if p.Kind == vocab.PartToolCall && p.Call != nil {
				c.callIDs[p.Call.ID] = struct{}{}
			}
		}
	}
}

// inboxPayload is the inbox/spliced payload of an agent's inbox change.
func inboxPayload(f agent.Inbox) vocab.InboxPayload {
	p := vocab.InboxPayload{Target: string(f.Target), Op: string(f.Op), Start: f.At, Messages: f.Messages}
	switch f.Op {
	case agent.OpClaimed:
		p.Removed = len(f.Messages)
	case agent.OpDiscarded:
		p.Removed, p.Outcome = len(f.Messages), "canceled"
	case agent.OpReplaced:
		p.Removed, p.Outcome = 1, "canceled"
	}
	return p
}
