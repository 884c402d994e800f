package engine

import (
	"fmt"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// outs is a stack of reusable effect buffers: effects of one fire may fire
// other machines (nested), each with its own buffer.
func (e *Engine) getOut() *chart.Out {
	if n := len(e.outs); n > 0 {
		out := e.outs[n-1]
		e.outs = e.outs[:n-1]
		return out
	}
	return &chart.Out{Effects: make([]chart.Effect, 0, 8), Transitions: make([]chart.Record, 0, 2)}
}

// putOut returns a buffer once its effects have run.
func (e *Engine) putOut(out *chart.Out) {
	out.Reset()
	e.outs = append(e.outs, out)
}

// fireAgent feeds ev to the agent machine, logs the transitions and runs
// the effects.
func (e *Engine) fireAgent(ev chart.Event) error {
	out := e.getOut()
	if err := e.agentM.Fire(e.agent, ev, out); err != nil {
		e.putOut(out)
		return err
	}
	e.logTransitions(out, "")
	// Effects may fire the agent again (a turn that ends at once): keep this
	// fire's discards apart from the nested one's.
	outer := e.discarded
	e.discarded = nil
	defer func() { e.discarded = outer }()
	for _, eff := range out.Effects {
		e.agentEffect(eff)
	}
	e.putOut(out)
	// Prompts taken off the queue and not blocked were cancelled.
	for _, id := range e.discarded {
		if w := e.prompts[id]; w != nil {
			cause := e.lastCancel
			e.resolve(id, w, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &cause})
		}
	}
	return nil
}

func (e *Engine) fireTurn(ev chart.Event) error {
	if e.turn == nil {
		return vocab.Errorf(vocab.CodeInternal, "no turn is running for %s", ev.Trigger())
	}
	out := e.getOut()
	if err := e.turnM.Fire(e.turn, ev, out); err != nil {
		e.putOut(out)
		return err
	}
	e.logTransitions(out, "")
	for _, eff := range out.Effects {
		e.turnEffect(eff)
	}
	e.putOut(out)
	return nil
}

func (e *Engine) fireTool(r *toolRun, ev chart.Event) error {
	out := e.getOut()
	if err := e.toolM.Fire(r.inst, ev, out); err != nil {
		e.putOut(out)
		return err
	}
	e.logTransitions(out, r.call.ID)
	for _, eff := range out.Effects {
		e.toolEffect(r, eff)
	}
	e.putOut(out)
	return nil
}

func (e *Engine) logTransitions(out *chart.Out, instance string) {
	for _, r := range out.Transitions {
		e.emit(vocab.EventTransition, vocab.TransitionPayload{Machine: r.Machine, Instance: instance,
			From: string(r.From), To: string(r.To), Trigger: string(r.Trigger), Guard: r.Guard, Internal: r.Internal})
	}
}

// emit appends an event to the sink. The sink is the log of record: an
// event is appended before the engine acts on it.
func (e *Engine) emit(kind vocab.EventKind, payload any) {
	e.seq++
	now := e.opt.Clock.Now()
	ev := vocab.Event{ID: e.opt.IDs.NewID(now), Session: e.session, Seq: e.seq, At: now, Kind: kind, Payload: payload}
	if e.turn != nil || kind == vocab.EventTurnEnd {
		ev.Turn, ev.Step = e.turnNo, e.step
	}
	if err := e.opt.Sink.Append(ev); err != nil {
		e.log.Error("engine: event sink refused an event", "kind", kind, "err", err)
	}
}

// ---- agent effects ----

func (e *Engine) agentEffect(eff chart.Effect) {
	switch f := eff.(type) {
	case agent.Inbox:
		e.emit(vocab.EventInboxSpliced, vocab.InboxPayload{Target: string(f.Target), Op: string(f.Op), Messages: f.Messages})
		if f.Op == agent.OpDiscarded && f.Target == agent.TargetNextTurn {
			for _, m := range f.Messages {
				e.discarded = append(e.discarded, m.ID)
			}
		}
	case agent.Status:
		e.emit(vocab.EventStatus, vocab.StatusPayload{Status: string(f.Status)})
		if f.Status == agent.StatusRunning {
			e.emit(vocab.EventAgentStart, nil)
		} else {
			e.emit(vocab.EventAgentEnd, nil)
		}
	case agent.StartTurn:
		e.startTurn(f)
	case agent.Claimed:
		e.claim = append(e.claim, f.Messages...)
		e.bypass = f.Bypass
		e.must(e.fireTurn(turn.Drained{Messages: len(f.Messages), Bypass: f.Bypass}))
	case agent.AbortTurn:
		if e.turn != nil && !e.turnM.IsFinal(e.turn) {
			e.must(e.fireTurn(turn.Abort{Cause: f.Cause}))
		}
	case agent.HardStop:
		e.hardStop(f.Cause)
	case agent.AbortMaintenance:
		if e.maint != nil {
			e.maint(f.Cause)
		}
	case agent.PauseTurn:
		if e.turn != nil && !e.turnM.IsFinal(e.turn) {
			e.must(e.fireTurn(turn.Pause{}))
		}
	case agent.ContinueTurn:
		if e.turn != nil && !e.turnM.IsFinal(e.turn) {
			e.must(e.fireTurn(turn.Continue{}))
		}
	case agent.GatePrompt:
		e.gatePrompt(f)
	case agent.PromptBlocked:
		e.emit(vocab.EventPrompt, vocab.PromptPayload{Prompt: f.ID, State: string(vocab.PromptBlocked), Detail: f.Reason})
		if w := e.prompts[f.ID]; w != nil {
			e.resolve(f.ID, w, vocab.PromptResult{Kind: vocab.PromptBlocked, Detail: f.Reason})
		}
	case agent.Cleanup:
		e.cleanup()
	case chart.StartTimer:
		e.startTimer(timerKey{machine: "agent", name: f.Name, seq: f.Seq}, f)
	case chart.CancelTimer:
		e.stopTimer(timerKey{machine: "agent", name: f.Name, seq: f.Seq})
	default:
		e.log.Error("engine: unknown agent effect", "effect", eff.EffectName())
	}
}

// must logs an error from firing a machine as a bug: the engine only fires
// what the machines asked for.
func (e *Engine) must(err error) {
	if err != nil {
		e.log.Error("engine: machine refused an engine event", "err", err)
		e.emit(vocab.EventError, vocab.ErrorPayload{Code: vocab.CodeOf(err), Message: err.Error()})
	}
}

func (e *Engine) resolve(id vocab.ID, w *promptWait, r vocab.PromptResult) {
	delete(e.prompts, id)
	w.result = r
	close(w.done)
	e.emit(vocab.EventPrompt, vocab.PromptPayload{Prompt: id, State: string(r.Kind), Detail: r.String()})
}

func (e *Engine) startTimer(k timerKey, f chart.StartTimer) {
	e.workers.Add(1)
	e.timerN.Add(1)
	t := e.opt.Clock.AfterFunc(f.Delay, func() {
		defer e.workers.Done()
		defer e.timerN.Add(-1)
		if e.rootCtx.Err() == nil {
			_ = e.post(timerFired{key: k})
		}
	})
	e.timers[k] = t
}

func (e *Engine) stopTimer(k timerKey) {
	if t, ok := e.timers[k]; ok {
		delete(e.timers, k)
		if t.Stop() {
			e.workers.Done()
			e.timerN.Add(-1)
		}
	}
}

type timerFired struct{ key timerKey }

func (e *Engine) onTimer(t timerFired) {
	if _, ok := e.timers[t.key]; !ok {
		return // cancelled after it fired
	}
	delete(e.timers, t.key)
	var err error
	switch t.key.machine {
	case "agent":
		err = e.fireAgent(agent.TimerFired{Name: t.key.name, Seq: t.key.seq})
	case "turn":
		if e.turn != nil {
			err = e.fireTurn(turn.TimerFired{Name: t.key.name, Seq: t.key.seq})
		}
	case "tool":
		if r := e.tools[t.key.instance]; r != nil {
			err = e.fireTool(r, tool.TimerFired{Name: t.key.name, Seq: t.key.seq})
		}
	}
	if err != nil {
		e.log.Debug("engine: stale timer", "timer", fmt.Sprint(t.key), "err", err)
	}
}
