package session

import (
	"slices"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// reqKind says what a run-to-completion queue entry does.
type reqKind uint8

const (
	reqAgent         reqKind = iota // fire ev on the agent
	reqTurn                         // fire ev on the running turn (skipped once it ended)
	reqTool                         // fire ev on call's tool machine (skipped once it ended)
	reqStartTurn                    // make the turn instance of the turn begun
	reqNewTool                      // make call's tool machine instance
	reqLaunch                       // launch call's execution (exec.started, then the work)
	reqSchedule                     // launch the batch's calls whose turn has come
	reqDrainStopping                // the drain's second phase: turn-stopping listeners
	reqDrainFinish                  // the drain's last phase: claim input or not
	reqStopAll                      // close: cancel all work, ask the adapter to stop
)

// fireReq is one entry of the run-to-completion queue.
type fireReq struct {
	kind reqKind
	ev   chart.Event
	call *call
	cfg  *turn.Config // reqStartTurn only (a pointer keeps every entry small: entries are copied in and out)
}

func (c *Core) enqueue(r fireReq) { c.m.q = append(c.m.q, r) }

// run drains the queue: each entry is fired to completion (its transitions
// logged, its effects handled) before the next; effects only enqueue, so
// no fire is ever nested in another.
func (c *Core) run() {
	for i := 0; i < len(c.m.q); i++ {
		r := c.m.q[i]
		c.m.q[i] = fireReq{}
		c.m.out.Reset()
		switch r.kind {
		case reqAgent:
			if err := c.m.agent.Fire(c.agent, r.ev, &c.m.out); err != nil {
				c.bug(err)
				continue
			}
		case reqTurn:
			if c.turn == nil || c.m.turn.IsFinal(c.turn) {
				continue
			}
			if err := c.m.turn.Fire(c.turn, r.ev, &c.m.out); err != nil {
				c.bug(err)
				continue
			}
		case reqTool:
			if r.call.inst == nil || c.m.tool.IsFinal(r.call.inst) || !c.current(r.call) {
				continue
			}
			if err := c.m.tool.Fire(r.call.inst, r.ev, &c.m.out); err != nil {
				c.bug(err)
				continue
			}
		case reqStartTurn:
			c.turn = c.m.newTurn(turn.NewCtx(*r.cfg))
			r.kind = reqTurn
		case reqNewTool:
			if !slices.Contains(c.batch, r.call) {
				continue
			}
			r.call.inst = c.m.newTool(tool.NewCtx(r.call.Call, tool.Config{AbortGrace: c.cfg.AbortGrace}))
			r.kind = reqTool
		case reqLaunch:
			c.launch(r.call)
			continue
		case reqSchedule:
			c.schedule()
			continue
		case reqDrainStopping:
			c.drainStopping()
			continue
		case reqDrainFinish:
			c.drainFinish()
			continue
		case reqStopAll:
			c.stopAll()
			continue
		}
		c.settle(r)
	}
	c.m.q = c.m.q[:0]
}

// settle logs the transitions of the fire just made (in c.m.out) and handles
// its effects.
func (c *Core) settle(r fireReq) {
	inst := ""
	if r.kind == reqTool {
		inst = r.call.Call.ID
	}
	for i := range c.m.out.Transitions {
		t := &c.m.out.Transitions[i] // not a copy of the record for each
		if inst != "" {
			c.emit(vocab.EventTransition, c.m.slabs.transitions.Box(&vocab.TransitionPayload{Machine: t.Machine, Instance: inst,
				From: string(t.From), To: string(t.To), Trigger: string(t.Trigger), Guard: t.Guard, Internal: t.Internal}))
			continue
		}
		c.emit(vocab.EventTransition, c.m.payload(r.kind, t))
	}
	effects := c.m.out.Effects
	switch r.kind {
	case reqAgent:
		// A prompt the gate blocks is taken off the queue (discarded)
		// and then reported blocked: it ends blocked, not cancelled.
		c.blocking = ""
		for _, eff := range effects {
			if f, ok := eff.(agent.PromptBlocked); ok {
				c.blocking = f.ID
			}
		}
		// A turn begins before the claims that feed it are reported, so
		// they are logged inside the turn.
		var start agent.StartTurn
		starting := false
		for _, eff := range effects {
			if f, ok := eff.(*agent.StartTurn); ok {
				start, starting = *f, true
			}
		}
		for _, eff := range effects {
			if starting {
				if ib, ok := eff.(*agent.Inbox); ok && ib.Op == agent.OpClaimed || eff.EffectName() == "start-turn" {
					c.beginTurn(start)
					starting = false
				}
			}
			c.agentEffect(eff)
		}
	case reqTurn:
		for _, eff := range effects {
			c.turnEffect(eff)
		}
	case reqTool:
		for _, eff := range effects {
			c.toolEffect(r.call, eff)
		}
	}
}

// payload returns the boxed payload of agent or turn transition t, made
// once per machine kind (no hashing: by transition index, then leaf).
func (m *Machines) payload(kind reqKind, t *chart.Record) any {
	byIndex := m.payloads[0]
	if kind == reqTurn {
		byIndex = m.payloads[1]
	}
	es := byIndex[t.Index]
	for i := range es {
		if e := &es[i]; e.from == t.From && e.to == t.To {
			return e.p
		}
	}
	p := vocab.TransitionPayload{Machine: t.Machine, From: string(t.From), To: string(t.To), Trigger: string(t.Trigger), Guard: t.Guard, Internal: t.Internal}
	byIndex[t.Index] = append(byIndex[t.Index], payloadEntry{from: t.From, to: t.To, p: p})
	return p
}

// drainedEvents are the turn's Drained events for small claims, boxed
// once: an event is never changed.
var drainedEvents = func() (evs [8][2]chart.Event) {
	for n := range evs {
		evs[n] = [2]chart.Event{turn.Drained{Messages: n}, turn.Drained{Messages: n, Bypass: true}}
	}
	return evs
}()

// drained returns the turn's Drained event for a claim of n messages.
func drained(n int, bypass bool) chart.Event {
	if n < len(drainedEvents) {
		b := 0
		if bypass {
			b = 1
		}
		return drainedEvents[n][b]
	}
	return turn.Drained{Messages: n, Bypass: bypass}
}

// ---- agent effects ----

func (c *Core) agentEffect(eff chart.Effect) {
	switch f := eff.(type) {
	case *agent.Inbox:
		c.emit(vocab.EventInboxSpliced, inboxPayload(*f))
		switch f.Op {
		case agent.OpDiscarded:
			for _, m := range f.Messages {
				if m.ID == c.blocking {
					continue
				}
				delete(c.live, m.ID)
				cause := c.cause
				if cause.Kind == "" {
					cause = vocab.CancelCause{Kind: vocab.CancelUser}
				}
				c.resolve(m.ID, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &cause})
			}
		case agent.OpReplaced:
			// A reminder replaced by a newer one leaves; a prompt the
			// gate rewrote keeps its id.
			if f.Replaced != nil && (len(f.Messages) == 0 || f.Messages[0].ID != f.Replaced.ID) {
				delete(c.live, f.Replaced.ID)
			}
		}
	case *agent.StartTurn:
		// handled first, by beginTurn
	case *agent.Claimed:
		c.claim = append(c.claim, f.Messages...)
		c.enqueue(fireReq{kind: reqTurn, ev: drained(len(f.Messages), f.Bypass)})
	case agent.AbortTurn:
		c.enqueue(fireReq{kind: reqTurn, ev: turn.Abort{Cause: f.Cause}})
	case agent.HardStop:
		c.hardStop(f.Cause)
	case agent.AbortMaintenance:
		for _, p := range c.work {
			if p.kind == WorkMaintenance {
				cause := f.Cause
				// The job is told to stop but stays outstanding: its
				// maintenance.done still arrives.
				c.m.rd.Work = append(c.m.rd.Work, Work{ID: p.id, Op: Cancel, Kind: WorkMaintenance, Cause: &cause})
			}
		}
	case agent.PauseTurn:
		c.enqueue(fireReq{kind: reqTurn, ev: turn.Pause{}})
	case agent.ContinueTurn:
		c.enqueue(fireReq{kind: reqTurn, ev: turn.Continue{}})
	case agent.GatePrompt:
		if c.cfg.Hooks.BeforeSubmitPrompt {
			m := vocab.CloneMessage(f.Message) // the hook's own copy
			c.start(&pending{kind: WorkHook},
				Work{Hook: vocab.HookBeforeSubmitPrompt, Prompt: &m, Info: StepInfo{Session: c.cfg.Session}, History: c.History()})
		} else {
			c.enqueue(fireReq{kind: reqAgent, ev: agent.PromptPass{}})
		}
	case agent.AbortGate:
		for _, p := range c.work {
			if p.kind == WorkHook && p.work.Hook == vocab.HookBeforeSubmitPrompt {
				c.cancel(p.id, f.Cause)
				break
			}
		}
	case agent.PromptBlocked:
		delete(c.live, f.ID)
		c.resolve(f.ID, vocab.PromptResult{Kind: vocab.PromptBlocked, Detail: f.Reason})
	case agent.Cleanup:
		c.hardStop(vocab.CancelCause{Kind: vocab.CancelDisposed})
		c.enqueue(fireReq{kind: reqStopAll})
	case chart.StartTimer:
		c.startTimer("agent", "", f, 0)
	case chart.CancelTimer:
		c.cancelTimer("agent", "", f)
	case agent.Status:
		// The public status is the core's (updateStatus): judging a prompt
		// and handing one turn to the next are work, not rest.
	}
}

// beginTurn starts turn f.Turn: turn/start, then the claims.
func (c *Core) beginTurn(f agent.StartTurn) {
	c.turnNo, c.prompt, c.step = f.Turn, "", 0
	if slices.Contains(c.prompts, f.PromptID) {
		// A steer re-targeted to the next turn heads it, but it is no
		// prompt: nobody waits for its result.
		c.prompt = f.PromptID
	}
	c.lastFinish, c.stopReason, c.stepOpen, c.resume = "", "", false, f.Resume
	// The claim takes the effect's slice over: the agent made it for the
	// effect alone, and nothing else holds it.
	c.claim = nil
	if len(f.Claimed) > 0 {
		c.claim = f.Claimed
	}
	c.inTurn = true
	c.emit(vocab.EventTurnStart, nil)
	c.runTurn()
	if y := c.yielded; y != "" {
		if c.prompt == "" {
			// A turn of no prompt of its own (a delivery's, a steer's)
			// resumes the yielded prompt, in the run it started.
			c.prompt, c.yielded = y, ""
			c.emit(vocab.EventYield, vocab.PromptPayload{Prompt: y, State: vocab.YieldResumed})
		} else {
			// A new prompt takes the conversation over: the yielded one
			// ends with what it had.
			c.resolve(y, vocab.PromptResult{Kind: vocab.PromptCompleted, StopReason: "yielded, then superseded by prompt " + string(c.prompt)})
		}
	}
	if c.prompt != "" {
		c.emit(vocab.EventPrompt, vocab.PromptPayload{Prompt: c.prompt, State: "running"})
	}
	// The config waits in the machines' scratch: a turn's reqStartTurn is
	// run before the agent can begin another turn (that takes the end of
	// this one), so one slot serves.
	cfg := &c.m.turnCfg
	*cfg = turn.Config{Turn: f.Turn, MaxSteps: c.cfg.MaxSteps, AbortGrace: c.cfg.AbortGrace}
	if c.cfg.MaxAttempts > 0 {
		cfg.Retry = turn.DefaultRetryPolicy()
		cfg.Retry.MaxAttempts = c.cfg.MaxAttempts
	}
	c.enqueue(fireReq{kind: reqStartTurn, cfg: cfg})
}

// runTurn puts the turn that starts into a run: the current one while
// its deadline has not passed and no new prompt starts, else a new one.
// The run's timeout is armed for the turn (it is the turn's work: the
// turn's end disarms it; an idle session holds no timer).
func (c *Core) runTurn() {
	if c.prompt != "" || c.runDeadline.IsZero() || !c.now.Before(c.runDeadline) {
		c.runDeadline = c.now.Add(c.cfg.RunTimeout)
		c.guard.NewRun() // loop detection looks at the run's calls only
	}
	if !c.cfg.NoRunTimeout {
		c.start(&pending{kind: WorkTimer, machine: "run", name: "run-timeout", turn: c.turnNo}, Work{Deadline: c.runDeadline})
	}
}

// runTimedOut ends the run whose timeout ran out: the turn is cancelled
// with cause timeout (the inbox is kept); the next turn starts a new run.
func (c *Core) runTimedOut() {
	if c.turn == nil || c.closing() {
		return
	}
	cause := vocab.CancelCause{Kind: vocab.CancelTimeout}
	c.cause = cause
	c.enqueue(fireReq{kind: reqAgent, ev: agent.Cancel{Cause: cause, KeepInbox: true}})
}

// hardStop ends the turn now: every tool still running is aborted, then
// the turn twice (an aborting turn takes a second abort as "stop waiting").
func (c *Core) hardStop(cause vocab.CancelCause) {
	for _, cl := range c.batch {
		switch {
		case cl.inst == nil:
			cl.abort = &cause
		case c.abortable(cl):
			// A second abort settles a started call as aborted at once.
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
		}
	}
	c.enqueue(fireReq{kind: reqTurn, ev: turn.Abort{Cause: cause}})
	c.enqueue(fireReq{kind: reqTurn, ev: turn.Abort{Cause: cause}})
}

// stopAll answers the agent's Cleanup: every outstanding piece of work is
// cancelled, and the adapter is asked to report when all of it has ended.
func (c *Core) stopAll() {
	cause := vocab.CancelCause{Kind: vocab.CancelDisposed}
	for len(c.work) > 0 {
		c.cancel(c.work[0].id, cause)
	}
	c.start(&pending{kind: WorkStop}, Work{Cause: &cause})
}

// dispose resolves what a closed session still owes: every prompt still
// queued ends cancelled with cause disposed.
func (c *Core) dispose() {
	c.closed = true
	cause := vocab.CancelCause{Kind: vocab.CancelDisposed}
	for len(c.prompts) > 0 {
		c.resolve(c.prompts[0], vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &cause})
	}
}

// resolve gives prompt id its one result (nothing when it has one).
func (c *Core) resolve(id vocab.ID, r vocab.PromptResult) {
	i := slices.Index(c.prompts, id)
	if i < 0 {
		return
	}
	c.prompts = slices.Delete(c.prompts, i, i+1)
	delete(c.live, id)
	if id == c.yielded {
		c.yielded = ""
	}
	c.emit(vocab.EventPrompt, vocab.PromptPayload{Prompt: id, State: string(r.Kind), Detail: r.String()})
	rr := r
	c.result(Result{Kind: PromptEnded, Input: id, Prompt: &rr})
}

// The status payloads, boxed once: a boxed payload is immutable, so
// events share them.
var (
	statusIdle    any = vocab.StatusPayload{Status: string(agent.StatusIdle)}
	statusRunning any = vocab.StatusPayload{Status: string(agent.StatusRunning)}
	statusYielded any = vocab.StatusPayload{Status: string(StatusYielded)}
)

// updateStatus reports a flip of the public status: running while a turn
// runs, a prompt is judged or the session closes; yielded while it rests
// with a yielded prompt. agent/start and agent/end mark running's edges.
func (c *Core) updateStatus() {
	s := agent.StatusIdle
	switch {
	case !c.closed && (c.m.agent.In(c.agent, agent.Running) || c.m.agent.In(c.agent, agent.Closing) || c.m.agent.In(c.agent, agent.Gating)):
		s = agent.StatusRunning
	case !c.closed && c.yielded != "":
		s = StatusYielded
	}
	if s == c.status {
		return
	}
	was := c.status
	c.status = s
	p := statusIdle
	switch s {
	case agent.StatusRunning:
		p = statusRunning
	case StatusYielded:
		p = statusYielded
	}
	c.emit(vocab.EventStatus, p)
	if s == agent.StatusRunning {
		c.emit(vocab.EventAgentStart, nil)
	} else if was == agent.StatusRunning {
		c.emit(vocab.EventAgentEnd, nil)
	}
}

// ---- timers ----

func (c *Core) startTimer(machine, instance string, f chart.StartTimer, turnNo int) {
	c.start(&pending{kind: WorkTimer, machine: machine, instance: instance, name: f.Name, seq: f.Seq, turn: turnNo},
		Work{Deadline: c.now.Add(f.Delay)})
}

func (c *Core) cancelTimer(machine, instance string, f chart.CancelTimer) {
	for _, p := range c.work {
		if p.kind == WorkTimer && p.machine == machine && p.instance == instance && p.name == f.Name && p.seq == f.Seq {
			c.cancel(p.id, vocab.CancelCause{})
			return
		}
	}
}

func (c *Core) info(step int) StepInfo {
	return StepInfo{Session: c.cfg.Session, Turn: c.turnNo, Step: step, First: step == 1}
}

// appendHistory appends m to the history. A long history grows by
// doubling, not by append's 1.25× (for slices past 256 elements): a
// history only grows, and 1.25× copies each message about four times over
// a session's life instead of about once, which is most of the bytes a
// step allocates. A short history grows as append grows it, so a small
// session holds no more than before.
func (c *Core) appendHistory(m vocab.Message) {
	if n := len(c.history); n == cap(c.history) && n >= 256 {
		grown := make([]vocab.Message, n, 2*n)
		copy(grown, c.history)
		c.history = grown
	}
	c.history = append(c.history, m)
}

// newCall returns a zero call record, a spare one when there is one (see
// recycle): a batch's calls are dropped with it, except those that go on
// in the background.
func (m *Machines) newCall() *call {
	if n := len(m.calls); n > 0 {
		cl := m.calls[n-1]
		m.calls[n-1] = nil
		m.calls = m.calls[:n-1]
		return cl
	}
	return new(call)
}

// newPending returns a pending record holding a copy of *p, a spare one
// when there is one: each model request and tool call would otherwise
// allocate one (its Work is most of it).
func (m *Machines) newPending(p *pending) *pending {
	var q *pending
	if n := len(m.pendings); n > 0 {
		q = m.pendings[n-1]
		m.pendings[n-1] = nil
		m.pendings = m.pendings[:n-1]
	} else {
		q = new(pending)
	}
	*q = *p
	return q
}

// recycle makes the records dropped during the last Step spare. They are
// kept unchanged until then: code of a Step may read a record it dropped
// (a hook's verdict, a timer's owner), and no record outlives the Step
// that dropped it anywhere else (snapshots copy them).
func (m *Machines) recycle() {
	m.reply, m.done, m.submit = vocab.Message{}, turn.ModelDone{}, agent.Submit{}
	if m.deadTurn == nil && len(m.deadTools) == 0 && len(m.dead) == 0 && len(m.deadCalls) == 0 {
		return
	}
	for i, cl := range m.deadCalls {
		m.deadCalls[i] = nil
		if len(m.calls) < 16 {
			*cl = call{}
			m.calls = append(m.calls, cl)
		}
	}
	m.deadCalls = m.deadCalls[:0]
	if m.deadTurn != nil {
		m.deadTurn.Ctx = turn.Ctx{}
		m.turns, m.deadTurn = m.deadTurn, nil
	}
	for i, inst := range m.deadTools {
		m.deadTools[i] = nil
		if len(m.tools) < 8 {
			inst.Ctx = tool.Ctx{}
			m.tools = append(m.tools, inst)
		}
	}
	m.deadTools = m.deadTools[:0]
	for i, p := range m.dead {
		m.dead[i] = nil
		if len(m.pendings) < 16 {
			*p = pending{}
			m.pendings = append(m.pendings, p)
		}
	}
	m.dead = m.dead[:0]
}

// newTool returns a started tool machine instance with context ctx, a
// spare one when there is one (see retireTools).
func (m *Machines) newTool(ctx tool.Ctx) *tool.Instance {
	n := len(m.tools)
	if n == 0 {
		return m.tool.New(ctx, &m.out)
	}
	inst := m.tools[n-1]
	m.tools[n-1] = nil
	m.tools = m.tools[:n-1]
	inst.Ctx = ctx
	m.tool.Start(inst, &m.out)
	return inst
}

// retireTools takes the tool machine instances of a batch that ends: each
// call forgets its instance (a queued fire for it is skipped), which is
// spare from the next Step on.
func (c *Core) retireTools() {
	for _, cl := range c.batch {
		if cl.inst != nil && !c.m.tool.In(cl.inst, tool.Detached) {
			c.m.deadTools = append(c.m.deadTools, cl.inst)
			cl.inst = nil
		}
	}
}

// newTurn returns a started turn machine instance with context ctx, the
// spare one when there is one (see retireTurn).
func (m *Machines) newTurn(ctx turn.Ctx) *turn.Instance {
	inst := m.turns
	if inst == nil {
		return m.turn.New(ctx, &m.out)
	}
	m.turns = nil
	inst.Ctx = ctx
	m.turn.Start(inst, &m.out)
	return inst
}

// retireTurn takes the instance of the turn that ends; it is spare from
// the next Step on.
func (c *Core) retireTurn() {
	if c.turn != nil && c.m.deadTurn == nil {
		c.m.deadTurn = c.turn
	}
}
