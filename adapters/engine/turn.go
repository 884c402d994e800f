package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// startTurn answers the agent's StartTurn: a fresh turn instance on the
// lane's turn machine (no stateless configuration per turn).
func (e *Engine) startTurn(f agent.StartTurn) {
	e.turnNo, e.prompt, e.step = f.Turn, f.PromptID, 0
	e.claim = append(e.claim[:0], f.Claimed...)
	e.bypass = false
	e.lastFinish, e.stopReason = "", ""
	e.turnCtx, e.turnEnd = context.WithCancelCause(e.rootCtx)
	cfg := turn.Config{Turn: f.Turn, MaxSteps: e.opt.MaxSteps, AbortGrace: e.opt.AbortGrace}
	if e.opt.MaxAttempts > 0 {
		cfg.Retry = turn.DefaultRetryPolicy()
		cfg.Retry.MaxAttempts = e.opt.MaxAttempts
	}
	out := e.getOut()
	e.turn = e.turnM.New(turn.NewCtx(cfg), out)
	e.emit(vocab.EventTurnStart, nil)
	if f.PromptID != "" {
		e.emit(vocab.EventPrompt, vocab.PromptPayload{Prompt: f.PromptID, State: "running"})
	}
	for _, eff := range out.Effects {
		e.turnEffect(eff)
	}
	e.putOut(out)
}

func (e *Engine) turnEffect(eff chart.Effect) {
	switch f := eff.(type) {
	case turn.RunGate:
		e.runGate(f)
	case turn.StartRequest:
		e.startRequest(f)
	case turn.CancelRequest:
		e.cancelRequest(f.Cause)
	case turn.CommitReply:
		e.commitReply(f)
	case turn.RetryScheduled:
		e.emit(vocab.EventRetry, vocab.RetryPayload{FailedAttempt: f.FailedAttempt, NextAttempt: f.NextAttempt,
			MaxAttempts: f.MaxAttempts, Delay: f.Delay, Code: f.Code, Message: f.Message})
	case turn.SpawnTools:
		e.batch, e.next = f.Calls, 0
		e.startNextTool()
	case turn.CancelTools:
		e.cancelTools(f.Cause)
	case turn.CommitResults:
		e.commitResults(f.Results)
	case turn.Drain:
		e.drain(f)
	case turn.EndTurn:
		e.endTurn(f)
	case chart.StartTimer:
		e.startTimer(timerKey{machine: "turn", name: f.Name, seq: f.Seq}, f)
	case chart.CancelTimer:
		e.stopTimer(timerKey{machine: "turn", name: f.Name, seq: f.Seq})
	default:
		e.log.Error("engine: unknown turn effect", "effect", eff.EffectName())
	}
}

// ---- step gate ----

type gateResult struct {
	turn    int
	step    int
	claimed []vocab.Message
	reject  bool
	reason  string
	err     error
}

// runGate is the step gate: nothing reaches the model until it says so. It
// consumes the claimed input, runs OnWillBeginStep on a worker, and answers
// the turn with GateProceed, GateEmpty or GateRefuse.
func (e *Engine) runGate(f turn.RunGate) {
	claimed := slices.Clone(e.claim)
	e.claim = e.claim[:0]
	info := StepInfo{Session: e.session, Turn: f.Turn, Step: f.Step, First: f.First}
	hook := e.opt.Hooks.WillBeginStep
	if hook == nil {
		e.onGate(gateResult{turn: f.Turn, step: f.Step, claimed: claimed})
		return
	}
	g := &GateContext{StepInfo: info, Claimed: claimed, History: slices.Clip(e.history)}
	ctx := e.turnCtx
	e.spawn(func() {
		err := safeHook(func() error { return hook(ctx, g) })
		e.post(gateResult{turn: f.Turn, step: f.Step, claimed: g.Claimed, reject: g.Reject, reason: g.Reason, err: err})
	})
}

func (e *Engine) onGate(g gateResult) {
	if e.turn == nil || g.turn != e.turnNo || !e.turnM.In(e.turn, turn.Gating) {
		return // the turn moved on (aborted) while the hook ran
	}
	switch {
	case g.err != nil:
		e.must(e.fireTurn(turn.GateRefuse{Code: vocab.CodeHook, Message: g.err.Error()}))
	case g.reject:
		if len(g.claimed) > 0 {
			// Rejected claims are not re-queued; the log keeps them.
			e.emit(vocab.EventInboxSpliced, vocab.InboxPayload{Target: "step", Op: "rejected", Messages: g.claimed})
		}
		e.must(e.fireTurn(turn.GateRefuse{Blocked: true, Message: g.reason}))
	case len(g.claimed) == 0 && g.step == 1 && !e.resumable():
		e.must(e.fireTurn(turn.GateEmpty{}))
	default:
		e.step = g.step
		e.emit(vocab.EventStepStart, nil)
		for _, m := range g.claimed {
			e.appendHistory(m)
			e.emit(vocab.EventUserMessage, vocab.MessagePayload{Message: m})
		}
		e.must(e.fireTurn(turn.GateProceed{Claimed: len(g.claimed)}))
	}
}

// resumable reports whether the history ends where the model owes a reply
// (a user or tool message), so a turn with no new input still asks.
func (e *Engine) resumable() bool {
	if len(e.history) == 0 {
		return false
	}
	r := e.history[len(e.history)-1].Role
	return r == vocab.RoleTool
}

func (e *Engine) appendHistory(m vocab.Message) {
	if m.ID == "" {
		m.ID = e.opt.IDs.NewID(e.opt.Clock.Now())
	}
	e.history = append(e.history, m)
}

func safeHook(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = vocab.Errorf(vocab.CodeHook, "hook panicked: %v", r)
		}
	}()
	return f()
}

// ---- model requests ----

type modelPart struct {
	gen  uint64
	part vocab.StreamPart
}

type modelEnd struct {
	gen       uint64
	err       *vocab.Error
	recovered []vocab.Message
	retry     bool
}

func (e *Engine) startRequest(f turn.StartRequest) {
	// History is append-only on the lane, so the request shares it, clipped:
	// an append by the provider cannot reach the engine's array. Providers
	// must treat the request as read-only (vocab.Provider says so).
	req := vocab.Request{Model: e.opt.Model, System: e.opt.System, Messages: slices.Clip(e.history),
		Tools: e.specs, MaxTokens: e.opt.MaxTokens, Turn: f.Turn, Step: f.Step, Attempt: f.Attempt}
	e.modelGen++
	gen := e.modelGen
	ctx, cancel := context.WithCancelCause(e.turnCtx)
	e.modelStop = cancel
	e.reply.reset()
	provider, onErr := e.opt.Provider, e.opt.Hooks.RequestError
	info := StepInfo{Session: e.session, Turn: f.Turn, Step: f.Step, First: f.Step == 1}
	e.spawn(func() {
		defer cancel(nil)
		var fail error
		func() {
			defer func() {
				if r := recover(); r != nil {
					fail = vocab.Errorf(vocab.CodeInternal, "provider panicked: %v", r)
				}
			}()
			for part, err := range provider.Stream(ctx, req) {
				if err != nil {
					fail = err
					return
				}
				if e.post(modelPart{gen: gen, part: part}) != nil {
					return
				}
			}
		}()
		if fail == nil {
			e.post(modelEnd{gen: gen})
			return
		}
		if ctx.Err() != nil {
			return // aborted: the turn already moved on
		}
		verr := asVocabError(fail)
		end := modelEnd{gen: gen, err: verr}
		if onErr != nil {
			hist, retry, herr := func() (h []vocab.Message, r bool, err error) {
				defer func() {
					if p := recover(); p != nil {
						err = vocab.Errorf(vocab.CodeHook, "request-error handler panicked: %v", p)
					}
				}()
				return onErr(ctx, FailureContext{StepInfo: info, Attempt: f.Attempt, Err: verr, History: req.Messages})
			}()
			if herr != nil {
				end.err = &vocab.Error{Code: vocab.CodeOf(herr), Message: herr.Error(), Cause: herr}
			} else if retry {
				end.retry, end.recovered = true, hist
			}
		}
		e.post(end)
	})
}

func asVocabError(err error) *vocab.Error {
	var ve *vocab.Error
	if errors.As(err, &ve) {
		return ve
	}
	return &vocab.Error{Code: vocab.CodeTransport, Message: err.Error(), Retryable: true, Cause: err}
}

func (e *Engine) onModelPart(p modelPart) {
	if p.gen != e.modelGen || e.turn == nil || !e.turnM.In(e.turn, turn.Thinking) {
		return
	}
	if !e.reply.open {
		e.reply.open = true
		e.emit(vocab.EventMessageStart, vocab.MessagePayload{Message: vocab.Message{Role: vocab.RoleAssistant}})
	}
	e.reply.add(p.part)
	e.emit(vocab.EventMessageUpdate, vocab.DeltaPayload{Part: p.part})
}

func (e *Engine) onModelEnd(m modelEnd) {
	if m.gen != e.modelGen || e.turn == nil || !e.turnM.In(e.turn, turn.Thinking) {
		return
	}
	e.modelStop = nil
	reply, usage, finish := e.reply.message(), e.reply.usage, e.reply.finish
	if m.err != nil {
		// A reply that broke mid-stream ends here: close the message it
		// opened, so a retry's message/start is not nested in it.
		if e.reply.open {
			e.emit(vocab.EventMessageEnd, vocab.MessagePayload{Message: reply})
			e.reply.open = false
		}
		if m.retry {
			e.history = slices.Clone(m.recovered)
		}
		e.must(e.fireTurn(turn.ModelFailed{Err: m.err, Recovered: m.retry, Jitter: e.opt.Jitter()}))
		return
	}
	if finish == "" {
		finish = vocab.FinishStop
		if reply.HasToolCalls() {
			finish = vocab.FinishToolCalls
		}
	}
	e.must(e.fireTurn(turn.ModelDone{Reply: reply, Finish: finish, Usage: usage}))
}

// cancelRequest cancels the in-flight request and writes what was salvaged
// of the partial reply.
func (e *Engine) cancelRequest(cause vocab.CancelCause) {
	if e.modelStop != nil {
		e.modelStop(cause)
		e.modelStop = nil
	}
	e.modelGen++
	partial := e.reply.message()
	if len(partial.Parts) > 0 && !partial.IsEmptyReply() {
		m := partial
		m.Source = vocab.SourceSalvaged
		m.Parts = slices.DeleteFunc(slices.Clone(m.Parts), func(p vocab.Part) bool { return p.Kind == vocab.PartToolCall })
		e.appendHistory(m)
		e.emit(vocab.EventAssistant, vocab.MessagePayload{Message: m})
	}
	if e.reply.open {
		e.emit(vocab.EventMessageEnd, vocab.MessagePayload{Message: partial})
	}
	e.reply.reset()
}

// commitReply writes the reply to history. Usage is recorded before any
// tool of the step runs.
func (e *Engine) commitReply(f turn.CommitReply) {
	if !e.reply.open {
		e.emit(vocab.EventMessageStart, vocab.MessagePayload{Message: vocab.Message{Role: vocab.RoleAssistant}})
	}
	e.emit(vocab.EventUsage, vocab.UsagePayload{Usage: f.Usage})
	e.appendHistory(f.Reply)
	e.lastFinish = f.Finish
	e.emit(vocab.EventMessageEnd, vocab.MessagePayload{Message: f.Reply})
	e.emit(vocab.EventAssistant, vocab.MessagePayload{Message: f.Reply})
	e.reply.reset()
}

// ---- tools (sequential executor) ----

type toolDone struct {
	id     string
	result vocab.ToolResult
}

type toolUpdate struct {
	id   string
	text string
}

// startNextTool starts the next call of the batch: the calls run one after
// the other, each through its own tool machine instance.
func (e *Engine) startNextTool() {
	for e.next < len(e.batch) {
		r, out := e.newToolRun()
		for _, eff := range out.Effects {
			e.toolEffect(r, eff)
		}
		e.putOut(out)
		if !e.toolM.IsFinal(r.inst) {
			return // running; the next call starts when this one ends
		}
	}
}

// newToolRun starts the tool machine of the batch's next call. The caller
// runs the returned entry effects (the before-hook) or, for a call that
// must not run, fires its end instead and drops them.
func (e *Engine) newToolRun() (*toolRun, *chart.Out) {
	call := e.batch[e.next]
	e.next++
	out := e.getOut()
	r := &toolRun{call: call}
	e.tools[call.ID] = r
	r.inst = e.toolM.New(tool.NewCtx(call, tool.Config{}), out)
	e.logTransitions(out, call.ID)
	e.emit(vocab.EventToolCall, vocab.ToolPayload{Call: call})
	return r, out
}

func (e *Engine) toolEffect(r *toolRun, eff chart.Effect) {
	switch f := eff.(type) {
	case tool.RunBefore:
		// No before-hook is configured: proceed with the call as is.
		e.must(e.fireTool(r, tool.BeforeProceed{}))
	case tool.RequestApproval:
		// Approval is requested by a before-hook; none is configured.
	case tool.Execute:
		e.execute(r, f.Call)
	case tool.Progress:
		e.emit(vocab.EventToolExecutionUpdate, vocab.ToolPayload{Call: r.call, Update: f.Text})
	case tool.Acknowledge:
		e.toolOutcome(r, f.Result)
	case tool.CancelExecution:
		if r.cancel != nil {
			r.cancel(f.Cause)
		}
	case tool.RunAfter:
		e.must(e.fireTool(r, tool.AfterDone{Result: f.Result}))
	case tool.Outcome:
		e.emit(vocab.EventToolExecutionEnd, vocab.ToolPayload{Call: r.call, Result: &f.Result})
		if !f.Background {
			e.toolOutcome(r, f.Result)
		}
	case chart.StartTimer:
		e.startTimer(timerKey{machine: "tool", instance: r.call.ID, name: f.Name, seq: f.Seq}, f)
	case chart.CancelTimer:
		e.stopTimer(timerKey{machine: "tool", instance: r.call.ID, name: f.Name, seq: f.Seq})
	default:
		e.log.Error("engine: unknown tool effect", "effect", eff.EffectName())
	}
}

func (e *Engine) execute(r *toolRun, call vocab.ToolCall) {
	if err := e.fireTool(r, tool.ExecStarted{}); err != nil {
		return // aborted before launch: do not run it
	}
	e.emit(vocab.EventToolExecutionStart, vocab.ToolPayload{Call: call})
	e.must(e.fireTurn(turn.ToolStarted{CallID: call.ID}))
	ctx, cancel := context.WithCancelCause(e.turnCtx)
	r.cancel = cancel
	reg := e.opt.Tools
	e.spawn(func() {
		defer cancel(nil)
		progress := func(s string) { e.post(toolUpdate{id: call.ID, text: s}) }
		res := reg.Execute(ctx, call, progress)
		e.post(toolDone{id: call.ID, result: res})
	})
}

func (e *Engine) onToolUpdate(u toolUpdate) {
	if r := e.tools[u.id]; r != nil && !e.toolM.IsFinal(r.inst) {
		_ = e.fireTool(r, tool.ExecUpdate{Text: u.text})
	}
}

func (e *Engine) onToolDone(d toolDone) {
	r := e.tools[d.id]
	if r == nil || e.toolM.IsFinal(r.inst) {
		return
	}
	// A call cut off by its cancelled context settles as aborted (the tool
	// machine writes the standard abort text); other results, errors and
	// panics included, go through the after-hook.
	if d.result.IsError && d.result.Code == vocab.CodeToolAborted {
		e.must(e.fireTool(r, tool.ExecFailed{Message: d.result.Content}))
		return
	}
	e.must(e.fireTool(r, tool.ExecDone{Result: d.result}))
}

// toolOutcome hands a call's one result to the turn and starts the next
// call of the batch.
func (e *Engine) toolOutcome(r *toolRun, res vocab.ToolResult) {
	if e.turn != nil && e.turnM.In(e.turn, turn.Acting) {
		e.must(e.fireTurn(turn.ToolOutcome{Result: res}))
	}
	if e.turn != nil && e.turnM.In(e.turn, turn.Running) {
		if res.StopBatchAfterThis {
			e.skipRest()
		}
		e.startNextTool()
	}
}

// skipRest ends the batch's unstarted calls with a skipped result.
func (e *Engine) skipRest() {
	for e.next < len(e.batch) {
		r, out := e.newToolRun()
		e.putOut(out)
		e.must(e.fireTool(r, tool.BeforeDeny{Result: &vocab.ToolResult{Content: "Tool skipped because a previous tool call stopped the turn.", IsError: true, Code: vocab.CodeToolDenied}}))
	}
}

// cancelTools aborts the running call and ends the unstarted ones as
// aborted before execution.
func (e *Engine) cancelTools(cause vocab.CancelCause) {
	for _, call := range e.batch[:e.next] {
		if r := e.tools[call.ID]; r != nil && !e.toolM.IsFinal(r.inst) {
			e.must(e.fireTool(r, tool.Abort{Cause: cause}))
		}
	}
	for e.next < len(e.batch) {
		r, out := e.newToolRun()
		e.putOut(out)
		e.must(e.fireTool(r, tool.Abort{Cause: cause}))
	}
}

func (e *Engine) hardStop(cause vocab.CancelCause) {
	for _, call := range e.batch[:e.next] {
		if r := e.tools[call.ID]; r != nil && !e.toolM.IsFinal(r.inst) {
			_ = e.fireTool(r, tool.Abort{Cause: cause})
		}
	}
	if e.turn != nil && !e.turnM.IsFinal(e.turn) {
		e.must(e.fireTurn(turn.Abort{Cause: cause}))
	}
}

// commitResults writes the batch's results to history in the model's
// order.
func (e *Engine) commitResults(results []vocab.ToolResult) {
	for _, res := range results {
		m := vocab.ToolMessage(res)
		e.appendHistory(m)
		e.emit(vocab.EventToolResult, vocab.ToolPayload{Call: vocab.ToolCall{ID: res.CallID, Name: res.Name}, Result: &res})
		if res.StopTurn && e.stopReason == "" {
			e.stopReason = res.StopReason
		}
	}
	for id, r := range e.tools {
		if r.cancel != nil {
			r.cancel(nil)
		}
		delete(e.tools, id)
	}
	e.batch, e.next = nil, 0
}

// ---- drain and turn end ----

type stepHooksDone struct {
	turn   int
	stop   bool
	reason string
	err    error
}

// drain runs the step-end hooks (OnDidFinishStep; then the turn-stopping
// listeners when the turn would end), then claims queued input from the
// agent, which answers the turn with Drained.
func (e *Engine) drain(f turn.Drain) {
	e.emit(vocab.EventStepEnd, vocab.StepEndPayload{Finish: e.lastFinish})
	did, stopping := e.opt.Hooks.DidFinishStep, e.opt.Hooks.TurnStopping
	if did == nil && (stopping == nil || !f.Concluded) {
		e.onStepHooksDone(stepHooksDone{turn: e.turnNo})
		return
	}
	info := StepInfo{Session: e.session, Turn: e.turnNo, Step: f.Step, First: f.Step == 1}
	ctx, turnNo := e.turnCtx, e.turnNo
	quiet := len(e.agent.Ctx.NextStep) == 0
	e.spawn(func() {
		res := stepHooksDone{turn: turnNo}
		if did != nil {
			res.err = safeHook(func() error {
				var err error
				res.stop, res.reason, err = did(ctx, info)
				return err
			})
		}
		if stopping != nil && f.Concluded && quiet && !res.stop {
			_ = safeHook(func() error { stopping(ctx, info); return nil })
		}
		e.post(res)
	})
}

func (e *Engine) onStepHooksDone(d stepHooksDone) {
	if e.turn == nil || d.turn != e.turnNo || !e.turnM.In(e.turn, turn.Draining) {
		return
	}
	if d.err != nil {
		e.emit(vocab.EventError, vocab.ErrorPayload{Code: vocab.CodeHook, Message: d.err.Error()})
	}
	if d.stop {
		if e.stopReason == "" {
			e.stopReason = d.reason
		}
		e.must(e.fireTurn(turn.Stop{Reason: d.reason}))
	}
	e.must(e.fireAgent(agent.Drain{}))
}

// endTurn closes the turn: the turn/end event, the prompt's result, and the
// agent's next move.
func (e *Engine) endTurn(f turn.EndTurn) {
	e.emit(vocab.EventTurnEnd, vocab.TurnEndPayload{Reason: f.End, Steps: f.Steps})
	res := e.promptResult(f)
	if e.prompt != "" {
		if w := e.prompts[e.prompt]; w != nil {
			e.resolve(e.prompt, w, res)
		}
	}
	for k := range e.timers {
		if k.machine == "turn" || k.machine == "tool" {
			e.stopTimer(k)
		}
	}
	if e.turnEnd != nil {
		e.turnEnd(nil)
	}
	e.turn, e.prompt, e.step = nil, "", 0
	e.claim = e.claim[:0]
	e.must(e.fireAgent(agent.TurnEnded{End: f.End}))
}

func (e *Engine) promptResult(f turn.EndTurn) vocab.PromptResult {
	switch f.End.Kind {
	case vocab.EndCompleted, vocab.EndMaxTokens:
		return vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: f.Steps, Truncated: f.End.Kind == vocab.EndMaxTokens, StopReason: e.stopReason}
	case vocab.EndBlocked:
		return vocab.PromptResult{Kind: vocab.PromptBlocked, Steps: f.Steps, Detail: "refused by the step gate"}
	case vocab.EndAborted:
		return vocab.PromptResult{Kind: vocab.PromptCancelled, Steps: f.Steps, Reason: f.End.Cause}
	}
	return vocab.PromptResult{Kind: vocab.PromptFailed, Steps: f.Steps, Err: &vocab.Error{Code: f.End.Code, Message: f.End.Message}}
}

// ---- prompt gate ----

type promptVerdict struct {
	id        vocab.ID
	block     bool
	reason    string
	rewritten *vocab.Message
}

func (e *Engine) gatePrompt(f agent.GatePrompt) {
	hook := e.opt.Hooks.BeforeSubmitPrompt
	if hook == nil {
		e.onPromptVerdict(promptVerdict{id: f.ID})
		return
	}
	ctx := e.rootCtx
	e.spawn(func() {
		v := promptVerdict{id: f.ID}
		err := safeHook(func() error {
			var err error
			v.block, v.reason, v.rewritten, err = hook(ctx, f.Message)
			return err
		})
		if err != nil {
			v.block, v.reason = true, fmt.Sprintf("error: %v", err)
		}
		e.post(v)
	})
}

func (e *Engine) onPromptVerdict(v promptVerdict) {
	if !e.agentM.In(e.agent, agent.Gating) {
		return
	}
	if v.block {
		e.must(e.fireAgent(agent.PromptBlock{Reason: v.reason}))
		return
	}
	e.must(e.fireAgent(agent.PromptPass{Rewritten: v.rewritten}))
}
