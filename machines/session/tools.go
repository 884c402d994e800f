package session

import (
	"bytes"
	"slices"
	"strings"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// ---- tools: the batch scheduler ----
//
// One step's calls are one batch. Every call takes its place in the queue
// at admission, in the model's order, and gets its tool machine at once:
// its before-hooks (and a person's approval) run while earlier calls still
// execute. A call whose before-hooks let it run is ready; the scheduler
// launches a ready call when fewer than Config.MaxParallelTools run and it
// conflicts with no call ahead of it that has not finished executing
// (running, ready, or still in its before-hooks or awaiting approval) and
// with no call behind it that already runs. So non-conflicting calls run
// together, a conflicting call waits for every conflicting call ahead of it
// (FIFO), and a later call never overtakes a conflicting earlier one.
// Results reach the turn in completion order; the turn writes them to
// history in the model's order.

// call is one call of the step's batch.
type call struct {
	Call vocab.ToolCall
	inst *tool.Instance
	work uint64 // tool work while launched
	// skip and abort say how the call ends when its machine is made:
	// skipped (an earlier call declared it stops the batch) or aborted.
	skip  bool
	abort *vocab.CancelCause
	// acc is what the call touches, from its final arguments.
	acc vocab.Accesses
	// ready: its before-hooks let it run; it waits for its turn.
	ready bool
	// launched: its execution started.
	launched bool
	// hook is the tool hook work running for the call (0: none).
	hook uint64
	// lg is the call as loop detection sees it; blocked is its result when
	// loop detection blocked the batch; note is a loop warning for the
	// model, added to its result.
	lg      loopguard.Call
	blocked *vocab.ToolResult
	note    string
	// logged is the tool/call payload, boxed: tool/execution-start shares
	// it when the call runs as the model made it.
	logged any
	// started is the turn's tool.started event for the call, fired by
	// pointer (the queue is drained in the Step that launches the call,
	// and a call is launched once).
	started turn.ToolStarted
}

// spec returns the spec of the tool named name, or nil.
func (c *Core) spec(name string) *vocab.ToolSpec {
	for i := range c.cfg.Tools {
		if c.cfg.Tools[i].Name == name {
			return &c.cfg.Tools[i]
		}
	}
	return nil
}

// accesses computes what call touches by its tool's declaration. A call
// of a tool the session's config does not declare touches everything: the
// core cannot know what it would do (the lane's registry may still have
// it), and it runs alone.
func (c *Core) accesses(tc vocab.ToolCall) vocab.Accesses {
	sp := c.spec(tc.Name)
	if sp == nil {
		return vocab.AllAccess
	}
	return sp.CallAccesses(tc.Args, !c.cfg.CaseSensitivePaths)
}

// admit takes a step's calls as one batch: every call is on the log
// before any runs (so a call that never starts still has its tool/call
// beside its result), every call gets its tool machine, in order.
func (c *Core) admit(calls []vocab.ToolCall) {
	c.batch = c.batch[:0]
	stopped := false
	for _, tc := range calls {
		cl := c.m.newCall()
		cl.Call, cl.skip, cl.acc = tc, stopped, c.accesses(tc)
		sp := c.spec(tc.Name)
		if sp != nil && sp.StopBatch {
			stopped = true
		}
		if !c.cfg.NoLoopDetection {
			var hash uint64
			hash, c.m.hashScratch = loopguard.HashArgsScratch(tc.Name, tc.Args, c.m.hashScratch)
			if cap(c.m.hashScratch) > maxHashScratch {
				c.m.hashScratch = nil // a huge call's storage is not kept
			}
			cl.lg = loopguard.Call{ID: tc.ID, Tool: tc.Name, ArgsHash: hash, Poll: sp != nil && sp.Poll}
		}
		c.batch = append(c.batch, cl)
		cl.logged = c.m.slabs.tools.Box(&vocab.ToolPayload{Call: tc})
		c.emit(vocab.EventToolCall, cl.logged)
	}
	if !c.cfg.NoLoopDetection {
		c.guardBatch()
	}
	for _, cl := range c.batch {
		c.enqueue(fireReq{kind: reqNewTool, call: cl})
	}
}

// maxHashScratch caps the storage kept for canonicalizing call arguments.
const maxHashScratch = 64 << 10

// guardBatch runs loop detection's admission on the batch before any call
// runs: a warning becomes a loop/warning event (and the listeners' hook)
// and a note on the call's result; a critical loop blocks the whole batch
// (every call gets a blocked result, the turn is told); a second critical
// loop in the run terminates it.
func (c *Core) guardBatch() {
	lcs := c.m.guardCalls[:0]
	for _, cl := range c.batch {
		lcs = append(lcs, cl.lg)
	}
	c.m.guardCalls = lcs
	a := c.guard.Admit(lcs)
	for i, v := range a.Verdicts {
		if v.Level != loopguard.LevelWarning || !v.Emit {
			continue
		}
		cl := c.batch[i]
		p := &vocab.LoopPayload{Message: v.Message, Detector: string(v.Detector), Level: string(v.Level), Count: v.Count,
			Tool: cl.Call.Name, CallID: cl.Call.ID, Key: v.Key}
		c.emit(vocab.EventWarning, *p)
		cl.note = v.Message
		if c.cfg.Hooks.LoopWarning {
			// The session's work, not the turn's: listeners hear every
			// warning even when the turn ends first.
			c.start(&pending{kind: WorkHook}, Work{Hook: vocab.HookLoopWarning, Info: c.info(c.step), Loop: p})
		}
	}
	if a.Blocked < 0 {
		return
	}
	v, trigger := a.Verdicts[a.Blocked], c.batch[a.Blocked]
	c.guard.Block(lcs, a)
	c.emit(vocab.EventLoopIntervention, vocab.LoopPayload{Message: v.Message, Detector: string(v.Detector), Level: string(v.Level),
		Count: v.Count, Tool: trigger.Call.Name, CallID: trigger.Call.ID, Key: v.Key, Terminate: a.Terminate})
	for i, cl := range c.batch {
		cl.blocked = &vocab.ToolResult{Content: loopguard.ResultText(a, i), IsError: true, Code: loopguard.CodeBlocked}
		cl.note = ""
	}
	l := turn.Loop{Detector: string(v.Detector), Count: v.Count, Tool: trigger.Call.Name}
	if a.Terminate {
		c.enqueue(fireReq{kind: reqTurn, ev: turn.LoopTerminate{Loop: l}})
		return
	}
	c.enqueue(fireReq{kind: reqTurn, ev: turn.LoopBlock{Loop: l}})
}

// executing reports whether cl still holds what it touches: it has not
// finished executing (it is in its before-hooks, awaiting approval, ready
// or running).
func (c *Core) executing(cl *call) bool {
	if cl.inst == nil {
		return !cl.launched // its machine is about to be made
	}
	switch cl.inst.State() {
	case tool.Before, tool.AwaitingApproval, tool.Executing, tool.Running, tool.Aborting:
		return true
	}
	return false
}

// schedule launches every ready call whose turn has come.
func (c *Core) schedule() {
	if c.turn == nil || !c.m.turn.In(c.turn, turn.Running) {
		return
	}
	running := 0
	for _, cl := range c.batch {
		if cl.launched && c.executing(cl) {
			running++
		}
	}
	for i, cl := range c.batch {
		if running >= c.cfg.MaxParallelTools {
			return
		}
		if !cl.ready || cl.launched || c.blocked(i) {
			continue
		}
		if c.launch(cl) {
			running++
		}
	}
}

// blocked reports whether the batch's call i must wait: it conflicts with
// a call ahead of it that still executes, or with a later one that runs.
func (c *Core) blocked(i int) bool {
	cl := c.batch[i]
	for j, o := range c.batch {
		if j == i || (j > i && !o.launched) || !c.executing(o) {
			continue
		}
		if o.acc.Conflicts(cl.acc) {
			return true
		}
	}
	return false
}

// launch starts a call's execution: exec.started on its machine (refused
// when it was aborted first: then it never runs), then the work.
func (c *Core) launch(cl *call) bool {
	if cl.inst == nil || c.m.tool.IsFinal(cl.inst) || !slices.Contains(c.batch, cl) {
		return false
	}
	c.m.out.Reset()
	if err := c.m.tool.Fire(cl.inst, tool.ExecStarted{}, &c.m.out); err != nil {
		return false
	}
	cl.launched = true
	if !c.cfg.NoLoopDetection {
		c.guard.Launched(cl.lg)
	}
	c.settle(fireReq{kind: reqTool, call: cl})
	tc := cl.inst.Ctx.Call
	tc.Args = slices.Clone(tc.Args) // the tool's own copy
	c.start(&pending{kind: WorkTool, turn: c.turnNo}, Work{Call: &tc})
	cl.work = c.workSeq
	if p := c.find(cl.work); !p.waiting {
		// (A call that waits for a lane slot starts with the grant.)
		p := cl.logged
		if p == nil || tc.ID != cl.Call.ID || tc.Name != cl.Call.Name || !bytes.Equal(tc.Args, cl.Call.Args) || (tc.Args == nil) != (cl.Call.Args == nil) {
			p = vocab.ToolPayload{Call: tc} // a hook or a person changed it
		}
		c.emit(vocab.EventToolExecutionStart, p)
	}
	cl.started = turn.ToolStarted{CallID: cl.Call.ID}
	c.enqueue(fireReq{kind: reqTurn, ev: &cl.started})
	return true
}

// proceedAsIs lets a call run unchanged, boxed once: it is the answer
// for every call when no before-tool hook runs.
var proceedAsIs chart.Event = tool.BeforeProceed{}

// skippedResult is the result of a call after one that stopped its batch.
var skippedResult = vocab.ToolResult{Content: "Tool skipped because a previous tool call stopped the batch.", IsError: true, Code: vocab.CodeToolSkipped}

func (c *Core) toolEffect(cl *call, eff chart.Effect) {
	switch f := eff.(type) {
	case tool.RunBefore:
		switch {
		case cl.abort != nil:
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: *cl.abort}})
		case cl.blocked != nil:
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.BeforeDeny{Result: cl.blocked}})
		case cl.skip:
			r := skippedResult
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.BeforeDeny{Result: &r}})
		case c.cfg.Hooks.BeforeTool:
			tc := cl.Call
			tc.Args = slices.Clone(tc.Args)
			c.start(&pending{kind: WorkHook, turn: c.turnNo, instance: cl.Call.ID},
				Work{Hook: vocab.HookBeforeTool, Info: c.info(c.step), Call: &tc, History: c.History()})
			cl.hook = c.workSeq
		default:
			c.beforeVerdict(cl, vocab.HookVerdict{})
		}
	case tool.RequestApproval:
		c.emit(vocab.EventToolApproval, vocab.ApprovalPayload{Call: f.Call, Question: f.Question, State: vocab.ApprovalRequested})
	case *tool.Execute:
		cl.ready = true
		c.enqueue(fireReq{kind: reqSchedule})
	case tool.Progress:
		c.emit(vocab.EventToolExecutionUpdate, vocab.ToolPayload{Call: cl.Call, Update: f.Text})
	case tool.CancelExecution:
		if p := c.find(cl.work); p != nil && p.waiting {
			// It never started (it waited for a lane slot): it ends now,
			// aborted, with no grace to give.
			c.drop(cl.work)
			cl.work = 0
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: f.Cause}})
			break
		}
		if cl.work != 0 {
			// The call is told to stop and keeps its grace: its result
			// still lands if it comes in time.
			cause := f.Cause
			c.m.rd.Work = append(c.m.rd.Work, Work{ID: cl.work, Op: Cancel, Kind: WorkTool, Cause: &cause})
		}
	case tool.Acknowledge:
		// The tool went on in the background: the turn has its
		// acknowledgement now, the agent waits for the completion.
		res := f.Result
		if p := c.find(cl.work); p != nil {
			p.turn = 0 // it outlives its turn
		}
		c.emit(vocab.EventToolExecutionEnd, c.m.slabs.tools.Box(&vocab.ToolPayload{Call: cl.Call, Result: &res}))
		c.enqueue(fireReq{kind: reqAgent, ev: agent.ToolDetached{CallID: cl.Call.ID, Name: cl.Call.Name}})
		c.enqueue(fireReq{kind: reqTurn, ev: turn.ToolOutcome{Result: &res}})
		c.enqueue(fireReq{kind: reqSchedule})
	case tool.RunAfter:
		if c.cfg.Hooks.AfterTool {
			tc := cl.inst.Ctx.Call
			tc.Args = slices.Clone(tc.Args)
			res := vocab.CloneResult(*f.Result)
			c.start(&pending{kind: WorkHook, turn: c.turnNo, instance: cl.Call.ID},
				Work{Hook: vocab.HookAfterTool, Info: c.info(c.step), Call: &tc, Result: &res, History: c.History()})
			cl.hook = c.workSeq
		} else {
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.AfterDone{Result: f.Result}})
		}
		c.enqueue(fireReq{kind: reqSchedule}) // its execution ended
	case *tool.Outcome:
		if cl.work != 0 {
			c.drop(cl.work) // a result that comes after the outcome is stale
			cl.work = 0
		}
		if cl.hook != 0 {
			c.cancel(cl.hook, c.toolCause(cl))
			cl.hook = 0
		}
		res := f.Result // shared with the tool's context, never changed
		if cl.inst != nil && cl.inst.Ctx.Approval == nil && c.abortedAwaiting() {
			c.emit(vocab.EventToolApproval, vocab.ApprovalPayload{Call: cl.Call, State: vocab.ApprovalAborted})
		}
		if f.Background {
			c.emit(vocab.EventToolExecutionEnd, vocab.ToolPayload{Call: cl.Call, Result: res, Background: true})
			c.enqueue(fireReq{kind: reqAgent, ev: agent.BackgroundDone{ID: c.derivedID("bg", c.seq), CallID: cl.Call.ID,
				Name: cl.Call.Name, Result: *res}})
			c.forgetBackground(cl)
			return
		}
		if cl.note != "" {
			// A loop warning for the model, beside the result.
			r := *res
			r.Note = strings.TrimSpace(r.Note + "\n\n" + cl.note)
			res = &r
		}
		if !c.cfg.NoLoopDetection && cl.blocked == nil {
			var volatile []string
			if sp := c.spec(cl.Call.Name); sp != nil {
				volatile = sp.Volatile
			}
			c.guard.Finished(cl.lg, loopguard.OutcomeOf(*res, volatile))
		}
		c.emit(vocab.EventToolExecutionEnd, c.m.slabs.tools.Box(&vocab.ToolPayload{Call: cl.Call, Result: res}))
		if d := res.Delivery; d != nil && d.Kind == vocab.DeliverySteer {
			c.deliver(cl, d.Message)
		}
		c.enqueue(fireReq{kind: reqTurn, ev: turn.ToolOutcome{Result: res}})
		c.enqueue(fireReq{kind: reqSchedule})
	case chart.StartTimer:
		c.startTimer("tool", cl.Call.ID, f, c.turnNo)
	case chart.CancelTimer:
		c.cancelTimer("tool", cl.Call.ID, f)
	}
}

// abortedAwaiting reports whether the fire being settled aborted a call
// awaiting approval (a person had not answered).
func (c *Core) abortedAwaiting() bool {
	for _, t := range c.m.out.Transitions {
		if t.From == tool.AwaitingApproval && t.Trigger == tool.TrAbort {
			return true
		}
	}
	return false
}

// toolCause is why a call's hook work is cancelled.
func (c *Core) toolCause(cl *call) vocab.CancelCause {
	if cl.inst != nil && cl.inst.Ctx.Abort != nil {
		return *cl.inst.Ctx.Abort
	}
	return vocab.CancelCause{Kind: vocab.CancelUser}
}

// deliver queues a tool result's steer message for the next step of the
// running turn, under an id derived from the call.
func (c *Core) deliver(cl *call, m vocab.Message) {
	m = vocab.CloneMessage(m)
	m.ID = c.ids.Join(string(c.cfg.Session), "-dl-", cl.Call.ID)
	if m.Role == "" || m.Role == vocab.RoleSystem {
		m.Role = vocab.RoleUser
	}
	if _, dup := c.used[m.ID]; dup {
		return // a replayed delivery: already queued once
	}
	c.used[m.ID] = struct{}{}
	c.usedList = append(c.usedList, m.ID)
	c.live[m.ID] = struct{}{}
	c.enqueue(fireReq{kind: reqAgent, ev: agent.Steer{Message: m}})
}

// beforeVerdict answers a call's before phase: the before-tool chain's
// verdict (the zero verdict when no chain runs).
func (c *Core) beforeVerdict(cl *call, v vocab.HookVerdict) {
	var ev chart.Event
	switch {
	case v.Err != nil:
		ev = tool.BeforeFailed{Message: v.Err.Message}
	case v.Refuse:
		ev = tool.BeforeDeny{Result: v.Result, Reason: v.Reason}
	default:
		nc := vocab.ToolCall{Args: v.Args}
		if v.Args != nil {
			c.rewriteAccess(cl, v.Args, v.Accesses)
		}
		q := v.Ask
		if sp := c.spec(cl.Call.Name); q == "" && sp != nil && sp.Approval {
			q = "Run " + cl.Call.Name + "?"
		}
		switch {
		case q != "":
			ev = tool.BeforeAsk{Question: q, Call: nc}
		case v.Args == nil:
			ev = proceedAsIs
		default:
			ev = tool.BeforeProceed{Call: nc}
		}
	}
	c.enqueue(fireReq{kind: reqTool, call: cl, ev: ev})
}

// rewriteAccess recomputes what cl touches for new arguments (acc when the
// lane computed it).
func (c *Core) rewriteAccess(cl *call, args []byte, acc *vocab.Accesses) {
	if acc != nil {
		cl.acc = *acc
		return
	}
	tc := cl.Call
	tc.Args = args
	cl.acc = c.accesses(tc)
}

// afterVerdict answers a call's after-tool chain.
func (c *Core) afterVerdict(cl *call, v vocab.HookVerdict) {
	if v.Err != nil {
		c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.AfterFailed{Message: v.Err.Message}})
		return
	}
	res := v.Result
	if res == nil && cl.inst != nil {
		res = cl.inst.Ctx.Result
	}
	c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.AfterDone{Result: res}})
}

// toolHookDone answers the tool hook work p.
func (c *Core) toolHookDone(p *pending, v vocab.HookVerdict) {
	cl := c.callByID(p.instance)
	if cl == nil || cl.hook != p.id {
		return
	}
	cl.hook = 0
	if p.work.Hook == vocab.HookBeforeTool {
		c.beforeVerdict(cl, v)
		return
	}
	c.afterVerdict(cl, v)
}

// callByID returns the call of the batch, or of the background, with id.
func (c *Core) callByID(id string) *call {
	for _, cl := range c.batch {
		if cl.Call.ID == id {
			return cl
		}
	}
	for _, cl := range c.bg {
		if cl.Call.ID == id {
			return cl
		}
	}
	return nil
}

// awaiting returns the call with id when it awaits approval.
func (c *Core) awaiting(id string) *call {
	for _, cl := range c.batch {
		if cl.Call.ID == id && cl.inst != nil && c.m.tool.In(cl.inst, tool.AwaitingApproval) {
			return cl
		}
	}
	return nil
}

// approve applies a person's decision on a call awaiting approval.
func (c *Core) approve(a vocab.Approval) {
	cl := c.awaiting(a.CallID)
	if cl == nil {
		return
	}
	c.emit(vocab.EventToolApproval, vocab.ApprovalPayload{Call: cl.inst.Ctx.Call, State: vocab.ApprovalAnswered,
		Decision: a.Decision, Reason: a.Reason})
	switch a.Decision {
	case vocab.Deny:
		c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Reject{Reason: a.Reason}})
	case vocab.Edit:
		c.rewriteAccess(cl, a.Args, nil)
		c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Approve{Call: vocab.ToolCall{Args: a.Args}}})
	default:
		c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Approve{}})
	}
}

// PendingApproval is a tool call waiting for a person's decision.
type PendingApproval struct {
	Call     vocab.ToolCall `json:"call"`
	Question string         `json:"question"`
}

// Approvals lists the calls awaiting approval, in the model's order.
func (c *Core) Approvals() []PendingApproval {
	var out []PendingApproval
	for _, cl := range c.batch {
		if cl.inst != nil && c.m.tool.In(cl.inst, tool.AwaitingApproval) {
			q := ""
			if cl.inst.Ctx.Approval != nil {
				q = cl.inst.Ctx.Approval.Question
			}
			tc := cl.inst.Ctx.Call
			tc.Args = slices.Clone(tc.Args)
			out = append(out, PendingApproval{Call: tc, Question: q})
		}
	}
	return out
}

// cancelTools aborts every call of the batch: started ones get their
// grace, the rest end "aborted before execution". A call in its
// after-hook has settled already: its result stands.
func (c *Core) cancelTools(cause vocab.CancelCause) {
	for _, cl := range c.batch {
		switch {
		case cl.inst == nil:
			cl.abort = &cause // its machine is about to be made
		case c.abortable(cl):
			c.enqueue(fireReq{kind: reqTool, call: cl, ev: tool.Abort{Cause: cause}})
		}
	}
}

// abortable reports whether cl's machine takes an abort: not once it
// settled (after-hook, final) or went on in the background.
func (c *Core) abortable(cl *call) bool {
	return !c.m.tool.In(cl.inst, tool.After) && !c.m.tool.IsFinal(cl.inst) && !c.m.tool.In(cl.inst, tool.Detached)
}

// forgetBackground drops a background call that ended.
func (c *Core) forgetBackground(cl *call) {
	i := slices.Index(c.bg, cl)
	if i < 0 {
		return
	}
	c.bg = slices.Delete(c.bg, i, i+1)
	if cl.inst != nil {
		c.m.deadTools = append(c.m.deadTools, cl.inst)
		cl.inst = nil
	}
}
