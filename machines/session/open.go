package session

import (
	"encoding/json"
	"slices"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// Header reasons (request/header events).
const (
	headerInitial = "initial"
	headerResume  = "resume"
)

// ConfigJSON returns cfg in the form an open input carries.
func ConfigJSON(cfg Config) (json.RawMessage, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "session: config: %v", err)
	}
	return b, nil
}

// ConfigOf decodes the configuration an open input carries.
func ConfigOf(in vocab.Input) (Config, error) {
	var cfg Config
	if in.Kind != vocab.InOpen {
		return cfg, vocab.Errorf(vocab.CodeBadInput, "session: %s input carries no config", in.Kind)
	}
	if len(in.Config) == 0 {
		return cfg, vocab.Errorf(vocab.CodeBadInput, "open: no config")
	}
	if err := json.Unmarshal(in.Config, &cfg); err != nil {
		return cfg, vocab.Errorf(vocab.CodeBadInput, "open: config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// openConfig validates an open input against the core.
func (c *Core) openConfig(in vocab.Input) (Config, error) {
	cfg, err := ConfigOf(in)
	if err != nil {
		return cfg, err
	}
	if cfg.Session != c.cfg.Session {
		return cfg, vocab.Errorf(vocab.CodeBadInput, "open: config of session %s given to session %s", cfg.Session, c.cfg.Session)
	}
	return cfg, nil
}

// open applies an open input: the configuration it carries, the header to
// log before the next request, and, on a reopen, recovery.
func (c *Core) open(in vocab.Input) {
	cfg, _ := c.openConfig(in) // validated
	c.emitInput(&in)
	cfg = cfg.withDefaults()
	cfg.Hooks = c.cfg.Hooks // hook slots change by hooks inputs only
	c.cfg = cfg
	c.agent.Ctx.Config.HardStop = cfg.HardStop
	c.ack(&in)
	switch {
	case !c.opened:
		c.opened, c.header = true, headerInitial
		return
	case c.header == headerInitial:
		// Reopened before the first request: nothing was sent yet.
	default:
		// The first request of this process logs the header whole, as
		// the seeds do: "resume", whether or not the config changed.
		c.header = headerResume
	}
	c.recover()
}

// recover closes what the process that ran the session before left open
// when it stopped: the work it ran died with it. The turn is cancelled
// with cause interrupted, keeping the inbox: every tool call of the batch
// without a result gets vocab.InterruptedToolText, the step ends
// interrupted, the turn ends interrupted, its prompt is cancelled. A
// maintenance job ends; a close in progress completes. Armed timers are
// armed again (their Work is re-emitted).
func (c *Core) recover() {
	c.resetSlot()
	if c.approvalPending() {
		c.recoverBatch()
		return
	}
	dead := false
	for _, p := range c.work {
		if p.kind != WorkTimer {
			dead = true
		}
	}
	if dead || c.inTurn {
		// Work started and ended within the recovery (abort timers) is
		// never handed out; nothing else started before it runs.
		mark := len(c.m.rd.Work)
		defer func() {
			kept := c.m.rd.Work[:mark]
			for _, w := range c.m.rd.Work[mark:] {
				if w.Op == Start && c.find(w.ID) != nil {
					kept = append(kept, w)
				}
			}
			c.m.rd.Work = kept
			c.rearm(mark)
		}()
		c.recovering = true
		cause := vocab.CancelCause{Kind: vocab.CancelInterrupted}
		c.cause = cause
		c.interruptBackground()
		// A wake latched before the crash is not served by the recovery:
		// the agent rests; a Continue or new input runs the queue.
		c.agent.Ctx.WakeLatched = false
		if !c.closing() {
			c.fireNow(agent.Cancel{Cause: cause, KeepInbox: true})
			c.run()
		}
		if c.turn != nil {
			c.hardStop(cause)
			c.run()
		}
		for _, p := range slices.Clone(c.work) {
			switch p.kind {
			case WorkMaintenance:
				c.drop(p.id)
				c.fireNow(agent.MaintenanceDone{})
			case WorkStop:
				c.drop(p.id)
				c.fireNow(agent.Closed{})
			case WorkTimer:
			default:
				// Work of no turn (a prompt gate's hook): the cancel above
				// settled what it guarded.
				c.drop(p.id)
			}
			c.run()
		}
		c.recovering = false
		return
	}
	c.rearm(len(c.m.rd.Work))
}

// approvalPending reports whether the running turn's batch has a call
// awaiting a person's approval.
func (c *Core) approvalPending() bool {
	if c.turn == nil || !c.m.turn.In(c.turn, turn.Running) || c.closing() {
		return false
	}
	for _, cl := range c.batch {
		if cl.inst != nil && c.m.tool.In(cl.inst, tool.AwaitingApproval) {
			return true
		}
	}
	return false
}

// recoverBatch recovers a turn that waits for a person: an approval may
// come days later, and a restart must not throw the question away. The
// turn goes on: calls whose execution died get the interrupted result,
// tool hooks that were running are asked again, background calls end
// interrupted, timers are armed again; calls awaiting approval still
// await it, and the calls queued behind them still wait.
func (c *Core) recoverBatch() {
	mark := len(c.m.rd.Work)
	c.recovering = true
	cause := vocab.CancelCause{Kind: vocab.CancelInterrupted}
	c.interruptBackground()
	for _, p := range slices.Clone(c.work) {
		switch p.kind {
		case WorkTool:
			if cl := c.callOf(p.id); cl != nil && slices.Contains(c.batch, cl) {
				// A second abort settles a started call at once.
				c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
				c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
			}
		case WorkHook:
			if c.needsSlot(p) {
				p.waiting = true // asked again once the lane grants a slot
				continue
			}
			c.m.rd.Work = append(c.m.rd.Work, p.work) // asked again
		}
	}
	c.run()
	c.recovering = false
	kept := c.m.rd.Work[:mark]
	for _, w := range c.m.rd.Work[mark:] {
		if w.Op == Start && c.find(w.ID) != nil {
			kept = append(kept, w)
		}
	}
	c.m.rd.Work = kept
	c.rearm(mark)
	for _, a := range c.Approvals() {
		c.emit(vocab.EventToolApproval, vocab.ApprovalPayload{Call: a.Call, Question: a.Question, State: vocab.ApprovalRequested})
	}
}

// interruptBackground ends every background call: its work died with the
// process that ran it.
//
// Their notifications are queued, not served: the agent is held paused
// while they arrive, so a reopen starts no turn (Continue or new input
// runs the queue).
func (c *Core) interruptBackground() {
	if len(c.bg) == 0 {
		return
	}
	cause := vocab.CancelCause{Kind: vocab.CancelInterrupted}
	paused := c.agent.Ctx.Paused
	c.agent.Ctx.Paused = true
	for _, cl := range slices.Clone(c.bg) {
		if cl.inst != nil && c.m.tool.In(cl.inst, tool.Detached) {
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
		}
	}
	c.run()
	c.agent.Ctx.Paused = paused
}

// rearm re-emits the start of every timer that was armed before the Work
// from mark on: timers survive a reopen.
func (c *Core) rearm(mark int) {
	for _, p := range c.work {
		if p.kind != WorkTimer || slices.ContainsFunc(c.m.rd.Work[mark:], func(w Work) bool { return w.ID == p.id }) {
			continue
		}
		c.m.rd.Work = append(c.m.rd.Work, p.work)
	}
}

// logHeader logs the request header before a model request.
func (c *Core) logHeader() {
	h := vocab.HeaderPayload{Reason: c.header, Model: c.cfg.Model, System: c.cfg.System, MaxTokens: c.cfg.MaxTokens}
	for _, t := range c.cfg.Tools {
		h.Tools = append(h.Tools, t.Name)
	}
	c.header = ""
	c.emit(vocab.EventRequestHeader, h)
}

// checkpoint records a snapshot of the core as it was before the
// checkpoint input, in a core/snapshot event after it.
func (c *Core) checkpoint(in vocab.Input) {
	data, err := c.Snapshot()
	c.emitInput(&in)
	if err != nil {
		c.bug(err)
		return
	}
	c.emit(vocab.EventSnapshot, vocab.SnapshotPayload{Seq: c.seq - 1, Core: data})
}
