// Package agent is the agent machine: one instance per session. It owns the
// session's inbox and decides when turns start; each turn is a separate
// machine (machines/turn) that the adapter drives and reports back on with
// turn.ended.
//
//	┌─ idle ───────────────────────────────────────────────┐
//	│ ready* ◀──background.done[lastBackground]── waiting  │
//	│   │ wake[gateNext]               wake[gateNext] │     │
//	│   └──────────────▶ gating ◀─────────────────────┘     │
//	└─────┬──────────────────┬──────────────────────────────┘
//	      │ wake[startTurn]  │ prompt.pass[startTurn]    ▲ turn.ended
//	      ▼                  ▼                           │ (to gating, waiting or ready)
//	┌─ running ────────────────────────────────────────────┐
//	│ active* ──cancel──▶ aborting (hard stop after 10 s)  │ ◀─┐ turn.ended[startTurn]:
//	└──────────────────────────────────────────────────────┘ ──┘ the next turn at once
//
//	ready ──maintenance.start──▶ maintenance ──maintenance.done──▶ ready │ gating │ running
//	any state but disposed ──close──▶ closing ──closed──▶ disposed
//
// The inbox has three lists: next-turn (prompts and follow-ups; a turn
// claims its head), next-step (steers, injected messages, notifications,
// async tool completions; every claim takes all of them) and keyed
// reminders (never wake; they ride along with every claim). A turn's first
// claim is all of next-step, then the reminders, then the next-turn head;
// a drain of the running turn is all of next-step, then the reminders.
// Every change to the inbox is reported as an Inbox effect before anything
// that depends on it.
//
// Where the agent goes when something happens in idle, when a turn ends or
// when maintenance ends is one decision, named by the same guards
// everywhere: gateNext (a prompt gate is configured and a prompt is next:
// idle.gating), startTurn (work is queued: running), backgroundRunning
// (only background tools: idle.waiting), else idle.ready. Paused agents
// never start turns. After a normal turn end queued work starts the next
// turn at once; after an abort (or in maintenance) only a wake latched
// since does — never one latched with cause disposed.
//
// Decisions where the seeds leave room:
//
//   - A turn never starts with nothing claimed: a wake whose work is gone
//     (cancelled, or claimed by a drain) starts nothing. The one exception
//     is explicit: Continue{Resume} on an agent with nothing queued starts a
//     turn with StartTurn.Resume set, for a history that ends mid tool chain
//     (the adapter knows the history; the agent does not). Reminders alone
//     are not work.
//   - A newer reminder replaces the queued one with the same key in place:
//     one splice, and the other reminders keep their order.
//   - Only a steer is re-targeted after an abort (it was meant for a turn
//     that is gone); notifications and async completions stay on next-step
//     and ride along with the next claim.
//   - Any turn end but an agent-issued abort proceeds to queued work
//     (completed, blocked, error, max-tokens alike), as the Kimi agent
//     does.
//   - cancel keeps the reminders (standing context) and never touches
//     background tools; close keeps the whole inbox (unclaimed messages
//     survive in the log) and its Cleanup stops the background tools.
//   - The public status is running in closing (cleanup is work) and idle
//     again in disposed.
//   - An input without an id, or with an id already queued, is refused by
//     its guard (newMessage), so the inbox never holds a duplicate.
//
// The machine is pure and synchronous: Fire an event, read the transitions
// and effects from the chart.Out. See Definition for every edge.
package agent

import (
	"fmt"
	"slices"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// States of the agent machine.
const (
	Idle        chart.State = "idle"
	Ready       chart.State = "ready"
	Waiting     chart.State = "waiting"
	Gating      chart.State = "gating"
	Maintenance chart.State = "maintenance"
	Running     chart.State = "running"
	Active      chart.State = "active"
	Aborting    chart.State = "aborting"
	Closing     chart.State = "closing"
	Disposed    chart.State = "disposed"
)

// TimerHardStop names the timer armed when a turn is aborted.
const TimerHardStop = "hard-stop"

// Version is the snapshot format version of Ctx.
const Version = 1

type (
	guard  = chart.Guard[Ctx]
	action = chart.Action[Ctx]
	edge   = chart.Transition[Ctx]
)

// ---- the rest decision ----

// outcome is where the agent goes once an event has been applied.
type outcome uint8

const (
	outStale   outcome = iota // the event is refused (a reused id, an unknown call)
	outReady                  // idle.ready
	outWaiting                // idle.waiting: only background tools run
	outGating                 // idle.gating: the gate judges the next prompt
	outRunning                // running: a turn starts
)

// decide previews ev's effect on the inbox and returns where the agent goes.
// Guards run before actions, so decide mirrors what the action will do.
func decide(c *Ctx, ev chart.Event) outcome {
	nt, ns, bg := len(c.NextTurn), len(c.NextStep), len(c.Background)
	paused, woken, resume := c.Paused, true, false
	switch e := ev.(type) {
	case Submit, *Submit:
		if m, _ := input(ev); !c.fresh(m) {
			return outStale
		}
		nt++
	case Steer:
		if !c.fresh(e.Message) {
			return outStale
		}
		ns++
	case Notify:
		if !c.fresh(e.Message) {
			return outStale
		}
		ns++
	case BackgroundDone:
		if !knownBackground(c, e) {
			return outStale
		}
		ns, bg = ns+1, bg-1
	case Continue:
		paused, resume = false, e.Resume
	case TurnEnded:
		// After an abort only a wake latched since the abort restarts.
		woken = c.Abort == nil || c.WakeLatched
	case MaintenanceDone:
		woken = c.WakeLatched
	case PromptPass:
		if c.gatedHead() && !paused {
			return outRunning
		}
	case PromptBlock:
		if c.gatedHead() && !paused {
			nt--
		}
	}
	switch {
	case paused:
		if bg > 0 {
			return outWaiting
		}
		return outReady
	case woken && nt > 0 && c.Config.PromptGate:
		return outGating
	case woken && nt+ns > 0, resume:
		return outRunning
	case bg > 0:
		return outWaiting
	}
	return outReady
}

func knownBackground(c *Ctx, e BackgroundDone) bool {
	return c.background(e.CallID) >= 0 && e.ID != "" && !c.queued(e.ID)
}

// ---- guards (pure predicates, named for diagrams and errors) ----

func goes(o outcome) func(*Ctx, chart.Event) bool {
	return func(c *Ctx, ev chart.Event) bool { return decide(c, ev) == o }
}

var (
	// gGateNext: a prompt gate is configured and a prompt is next.
	gGateNext = &guard{Name: "gateNext", Test: goes(outGating)}
	// gStartTurn: work is queued (and the agent is woken, not paused).
	gStartTurn = &guard{Name: "startTurn", Test: goes(outRunning)}
	// gBackground: nothing to start, background tools still run.
	gBackground = &guard{Name: "backgroundRunning", Test: goes(outWaiting)}
	// gLastBackground: the last background tool ended and nothing starts.
	gLastBackground = &guard{Name: "lastBackground", Test: goes(outReady)}
	gQueuedID       = &guard{Name: "queuedID", Test: func(c *Ctx, ev chart.Event) bool { return c.queued(ev.(Drop).ID) }}
	gNewMessage     = &guard{Name: "newMessage", Test: func(c *Ctx, ev chart.Event) bool {
		m, ok := input(ev)
		if r, isRemind := ev.(Remind); isRemind && r.Key == "" {
			return false
		}
		return ok && c.fresh(m)
	}}
	gKnownBackground = &guard{Name: "knownBackground", Test: func(c *Ctx, ev chart.Event) bool {
		return knownBackground(c, ev.(BackgroundDone))
	}}
	gNewBackground = &guard{Name: "newBackground", Test: func(c *Ctx, ev chart.Event) bool {
		id := ev.(ToolDetached).CallID
		return id != "" && c.background(id) < 0
	}}
	// gHasBackground: background tools still run.
	gHasBackground = &guard{Name: "hasBackground", Test: func(c *Ctx, _ chart.Event) bool { return len(c.Background) > 0 }}
	gHardStopTimer = &guard{Name: "hardStopTimer", Test: func(c *Ctx, ev chart.Event) bool {
		t := ev.(TimerFired)
		return c.Timer.Matches(TimerHardStop, t.Seq) && t.Name == TimerHardStop
	}}
)

// input returns the message an input event carries.
func input(ev chart.Event) (vocab.Message, bool) {
	switch e := ev.(type) {
	case Submit:
		return e.Message, true
	case *Submit:
		return e.Message, true
	case Steer:
		return e.Message, true
	case Inject:
		return e.Message, true
	case Notify:
		return e.Message, true
	case Remind:
		return e.Message, true
	}
	return vocab.Message{}, false
}

// ---- inbox operations ----

func list(c *Ctx, t Target) *[]vocab.Message {
	switch t {
	case TargetNextTurn:
		return &c.NextTurn
	case TargetNextStep:
		return &c.NextStep
	}
	return &c.Reminders
}

func insert(c *Ctx, t Target, m vocab.Message, out *chart.Out) {
	l := list(c, t)
	var report []vocab.Message
	if *l == nil {
		// One array for the new list and the report: the list's slot is
		// its own (a list of capacity 1 grows into a new array, a delete
		// clears no slot past its length), the report's never changes.
		both := []vocab.Message{m, m}
		*l, report = both[0:1:1], both[1:2:2]
	} else {
		*l = append(*l, m)
		report = []vocab.Message{m}
	}
	c.indexAdd(m.ID)
	inboxes.Emit(out, Inbox{Target: t, Op: OpInserted, At: len(*l) - 1, Messages: report})
}

// take empties list t and reports it with op.
func take(c *Ctx, t Target, op InboxOp, out *chart.Out) []vocab.Message {
	l := list(c, t)
	ms := *l
	if len(ms) == 0 {
		return nil
	}
	*l = nil
	for _, m := range ms {
		c.indexDel(m.ID)
	}
	inboxes.Emit(out, Inbox{Target: t, Op: op, Messages: ms})
	return ms
}

// takeHead removes the next-turn head and reports it with op.
func takeHead(c *Ctx, op InboxOp, out *chart.Out) vocab.Message {
	return claimHead(c, op, make([]vocab.Message, 0, 1), out)[0]
}

// claimHead removes the next-turn head, appends it to claimed and reports
// it with op; the report shares claimed's last element (claimed is never
// changed in place afterwards: it is appended to, or handed on whole).
func claimHead(c *Ctx, op InboxOp, claimed []vocab.Message, out *chart.Out) []vocab.Message {
	head := c.NextTurn[0]
	c.NextTurn = shrink(slices.Delete(c.NextTurn, 0, 1))
	c.indexDel(head.ID)
	claimed = append(claimed, head)
	n := len(claimed)
	inboxes.Emit(out, Inbox{Target: TargetNextTurn, Op: op, Messages: claimed[n-1 : n : n]})
	return claimed
}

// shrink returns nil for an empty list, so that snapshots are canonical.
func shrink[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func withSource(m vocab.Message, s vocab.Source) vocab.Message {
	if m.Role == "" {
		m.Role = vocab.RoleUser
	}
	if m.Source == "" {
		m.Source = s
	}
	return m
}

// AsyncNotice is the notification queued when background call e ends: "[async
// tool completed] NAME (tool_call_id=ID)", "[async tool failed] …" or
// "[async tool aborted] …", then the result's content on the next line.
func AsyncNotice(e BackgroundDone, name string) vocab.Message {
	head := "[async tool completed]"
	switch {
	case e.Result.Code == vocab.CodeToolAborted:
		head = "[async tool aborted]"
	case e.Result.IsError:
		head = "[async tool failed]"
	}
	text := fmt.Sprintf("%s %s (tool_call_id=%s)", head, name, e.CallID)
	if e.Result.Content != "" {
		text += "\n" + e.Result.Content
	}
	return vocab.Message{ID: e.ID, Role: vocab.RoleUser, Source: vocab.SourceAsyncTool,
		Parts: []vocab.Part{{Kind: vocab.PartText, Text: text}}}
}

// enqueue puts an input event's message in its list. late is set where a
// wake cannot be served now (maintenance, running.aborting): a steer after
// an abort goes to next-turn, and a waking input latches the wake unless
// the abort's cause is disposed.
// drop removes the queued message ev names from its list.
func drop(c *Ctx, ev chart.Event, out *chart.Out) {
	id := ev.(Drop).ID
	for _, t := range []Target{TargetNextTurn, TargetNextStep, TargetReminders} {
		l := list(c, t)
		for i := range *l {
			if (*l)[i].ID == id {
				m := (*l)[i]
				*l = shrink(slices.Delete(*l, i, i+1))
				c.indexDel(m.ID)
				inboxes.Emit(out, Inbox{Target: t, Op: OpDiscarded, At: i, Messages: []vocab.Message{m}})
				return
			}
		}
	}
}

func enqueue(c *Ctx, ev chart.Event, out *chart.Out, late bool) {
	wakes := true
	switch e := ev.(type) {
	case Submit, *Submit:
		m, _ := input(ev)
		insert(c, TargetNextTurn, withSource(m, vocab.SourceInput), out)
	case Steer:
		t := TargetNextStep
		if late && c.Abort != nil {
			t = TargetNextTurn
		}
		insert(c, t, withSource(e.Message, vocab.SourceSteer), out)
	case Notify:
		m := withSource(e.Message, vocab.SourceNotify)
		m.BypassMaxSteps = m.BypassMaxSteps || e.BypassMaxSteps
		insert(c, TargetNextStep, m, out)
	case BackgroundDone:
		i := c.background(e.CallID)
		name := e.Name
		if name == "" {
			name = c.Background[i].Name
		}
		c.Background = shrink(slices.Delete(c.Background, i, i+1))
		insert(c, TargetNextStep, AsyncNotice(e, name), out)
	case Inject:
		wakes = false
		insert(c, TargetNextStep, withSource(e.Message, vocab.SourceInput), out)
	case Remind:
		wakes = false
		m := withSource(e.Message, vocab.SourceReminder)
		m.Key = e.Key
		if i := c.reminder(e.Key); i >= 0 {
			old := c.Reminders[i]
			c.Reminders[i] = m
			c.indexDel(old.ID)
			c.indexAdd(m.ID)
			inboxes.Emit(out, Inbox{Target: TargetReminders, Op: OpReplaced, At: i, Messages: []vocab.Message{m}, Replaced: &old})
		} else {
			insert(c, TargetReminders, m, out)
		}
	}
	if late && wakes {
		latch(c)
	}
}

// latch records a wake that cannot be served now, unless the agent is being
// disposed.
func latch(c *Ctx) {
	if !c.abortedBy(vocab.CancelDisposed) {
		c.WakeLatched = true
	}
}

// clearInbox discards next-step then next-turn and the wake latch, unless
// the cancel keeps the inbox. Reminders are standing context and stay.
func clearInbox(c *Ctx, ev chart.Event, out *chart.Out) {
	if ev.(Cancel).KeepInbox {
		return
	}
	take(c, TargetNextStep, OpDiscarded, out)
	take(c, TargetNextTurn, OpDiscarded, out)
	c.WakeLatched = false
}

// setAbort records the cause of an abort: the first cause is kept, except
// that disposed always wins (and drops any latched wake).
func setAbort(c *Ctx, cause vocab.CancelCause) {
	// A close and a crash's recovery override any cause already set:
	// they say why the session ended, not why an earlier abort began.
	if c.Abort == nil || cause.Kind == vocab.CancelDisposed || cause.Kind == vocab.CancelInterrupted {
		c.Abort = &cause
	}
	if cause.Kind == vocab.CancelDisposed || cause.Kind == vocab.CancelInterrupted {
		c.WakeLatched = false
	}
}

// The two Status effects, boxed once: a flip allocates nothing.
var (
	statusIdle    chart.Effect = Status{Status: StatusIdle}
	statusRunning chart.Effect = Status{Status: StatusRunning}
)

func setStatus(c *Ctx, s PublicStatus, out *chart.Out) {
	if c.Status == s {
		return
	}
	c.Status = s
	if s == StatusRunning {
		out.Emit(statusRunning)
	} else {
		out.Emit(statusIdle)
	}
}

// startTurn claims all of next-step, the reminders and the next-turn head,
// and starts turn Turn+1 with them.
func startTurn(c *Ctx, ev chart.Event, out *chart.Out) {
	cont, _ := ev.(Continue)
	resume := cont.Resume && !c.hasWork()
	var claimed []vocab.Message
	var prompt vocab.ID
	if len(c.NextStep) == 0 && len(c.Reminders) == 0 && len(c.NextTurn) == 1 {
		// The head alone (a prompt to an idle agent): the claim takes the
		// list's array over, as take does, and the report shares it, as
		// claimHead's does. The list is left empty, so nothing writes to
		// the array again.
		claimed, c.NextTurn = c.NextTurn[:1:1], nil
		c.indexDel(claimed[0].ID)
		inboxes.Emit(out, Inbox{Target: TargetNextTurn, Op: OpClaimed, Messages: claimed})
		prompt = claimed[0].ID
	} else {
		n := len(c.NextStep) + len(c.Reminders) + min(len(c.NextTurn), 1)
		claimed = make([]vocab.Message, 0, n)
		claimed = append(claimed, take(c, TargetNextStep, OpClaimed, out)...)
		claimed = append(claimed, take(c, TargetReminders, OpClaimed, out)...)
		if len(c.NextTurn) > 0 {
			claimed = claimHead(c, OpClaimed, claimed, out)
			prompt = claimed[len(claimed)-1].ID
		}
	}
	c.Turn++
	startTurns.Emit(out, StartTurn{Turn: c.Turn, PromptID: prompt, Claimed: claimed, Resume: resume})
}

// ---- actions ----

func act(run func(c *Ctx, ev chart.Event, out *chart.Out), effects ...string) *action {
	return &action{Effects: effects, Run: run}
}

var (
	aEnterIdle = act(func(c *Ctx, _ chart.Event, out *chart.Out) { setStatus(c, StatusIdle, out) }, "status")
	aEnterGate = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		if len(c.NextTurn) == 0 {
			return
		}
		c.Gating = c.NextTurn[0].ID
		out.Emit(GatePrompt{ID: c.Gating, Message: c.NextTurn[0]})
	}, "gate-prompt")
	// Leaving maintenance or running consumes the latch and the abort.
	aExitJob     = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Abort, c.WakeLatched = nil, false })
	aEnterRun    = act(func(c *Ctx, ev chart.Event, out *chart.Out) { setStatus(c, StatusRunning, out); startTurn(c, ev, out) }, "status", "inbox", "start-turn")
	aExitRunning = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		c.Timer.Disarm(out)
		aExitJob.Run(c, ev, out)
	}, "cancel-timer")
	aEnterClosing = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		setStatus(c, StatusRunning, out)
		out.Emit(Cleanup{})
	}, "status", "cleanup")

	aQueue     = act(func(c *Ctx, ev chart.Event, out *chart.Out) { enqueue(c, ev, out, false) }, "inbox")
	aDrop      = act(func(c *Ctx, ev chart.Event, out *chart.Out) { drop(c, ev, out) }, "inbox")
	aQueueLate = act(func(c *Ctx, ev chart.Event, out *chart.Out) { enqueue(c, ev, out, true) }, "inbox")
	aPause     = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Paused = true })
	aContinue  = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Paused = false })
	// In maintenance a continue with queued work is a wake that must wait.
	aContinueLate = act(func(c *Ctx, _ chart.Event, _ *chart.Out) {
		c.Paused = false
		if c.hasWork() {
			latch(c)
		}
	})
	aPauseTurn = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		c.Paused = true
		out.Emit(PauseTurn{})
	}, "pause-turn")
	aContinueTurn = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		c.Paused = false
		out.Emit(ContinueTurn{})
	}, "continue-turn")

	aCancelIdle = act(clearInbox, "inbox")
	// A cancel while the gate judges a prompt ends that prompt (it is the
	// work in progress, as a running turn's prompt would be) and rests:
	// like a cancelled turn, it starts nothing, whatever stays queued.
	aCancelGate = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		cause := ev.(Cancel).Cause
		if c.gatedHead() {
			takeHead(c, OpDiscarded, out)
		}
		out.Emit(AbortGate{ID: c.Gating, Cause: cause})
		c.Gating = ""
		clearInbox(c, ev, out)
	}, "inbox", "abort-gate")
	aCancelMaintenance = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		clearInbox(c, ev, out)
		setAbort(c, ev.(Cancel).Cause)
		out.Emit(AbortMaintenance{Cause: *c.Abort})
	}, "inbox", "abort-maintenance")
	aAbortTurn = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		clearInbox(c, ev, out)
		setAbort(c, ev.(Cancel).Cause)
		out.Emit(AbortTurn{Cause: *c.Abort})
		c.Timer.Arm(&c.TimerSeq, TimerHardStop, c.Config.HardStop, out)
	}, "inbox", "abort-turn", "start-timer")
	aCancelAgain = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		clearInbox(c, ev, out)
		setAbort(c, ev.(Cancel).Cause)
		c.Timer.Disarm(out)
		out.Emit(HardStop{Cause: *c.Abort})
	}, "inbox", "cancel-timer", "hard-stop")
	aHardStopTimer = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		c.Timer = chart.Timer{}
		cause := vocab.CancelCause{Kind: vocab.CancelUser}
		if c.Abort != nil { // always set in aborting; a hand-made snapshot may lack it
			cause = *c.Abort
		}
		out.Emit(HardStop{Cause: cause})
	}, "hard-stop")

	disposed = vocab.CancelCause{Kind: vocab.CancelDisposed}
	// A verdict still on its way is dropped with the judged id.
	aCloseIdle        = act(func(c *Ctx, _ chart.Event, _ *chart.Out) { c.Gating = "" })
	aCloseMaintenance = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		setAbort(c, disposed)
		out.Emit(AbortMaintenance{Cause: disposed})
	}, "abort-maintenance")
	aCloseTurn = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		setAbort(c, disposed)
		out.Emit(AbortTurn{Cause: disposed})
	}, "abort-turn")
	aCloseAborting = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		setAbort(c, disposed)
		out.Emit(HardStop{Cause: disposed})
	}, "hard-stop")

	aTurnEnded = act(func(c *Ctx, ev chart.Event, _ *chart.Out) { c.LastEnd = ev.(TurnEnded).End })
	aDrain     = act(func(c *Ctx, _ chart.Event, out *chart.Out) {
		ms := take(c, TargetNextStep, OpClaimed, out)
		if rs := take(c, TargetReminders, OpClaimed, out); len(rs) > 0 {
			ms = append(ms[:len(ms):len(ms)], rs...)
		}
		bypass := false
		for i := range ms {
			bypass = bypass || ms[i].BypassMaxSteps
		}
		claims.Emit(out, Claimed{Messages: ms, Bypass: bypass})
	}, "inbox", "claimed")
	// An aborting or closing agent hands nothing to a late drain: the inbox
	// waits for the next turn (or the next session).
	aDrainNothing = act(func(_ *Ctx, _ chart.Event, out *chart.Out) { claims.Emit(out, Claimed{}) }, "claimed")
	aDetach       = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		d := ev.(ToolDetached)
		c.Background = append(c.Background, Background{CallID: d.CallID, Name: d.Name})
	})
	aDropBackground = act(func(c *Ctx, ev chart.Event, _ *chart.Out) {
		if i := c.background(ev.(BackgroundDone).CallID); i >= 0 {
			c.Background = shrink(slices.Delete(c.Background, i, i+1))
		}
	})

	// The verdict applies only to the prompt judged, and only when the agent
	// is not paused (a paused agent keeps the prompt and gates it again on
	// continue). It consumes the judged id here, not in an exit action of
	// gating: exit actions run before the transition's action.
	aPass = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		r, judged := ev.(PromptPass).Rewritten, c.gatedHead()
		c.Gating = ""
		if r == nil || !judged || c.Paused {
			return
		}
		old, m := c.NextTurn[0], *r
		m.ID = old.ID
		m = withSource(m, old.Source)
		c.NextTurn[0] = m
		inboxes.Emit(out, Inbox{Target: TargetNextTurn, Op: OpReplaced, Messages: []vocab.Message{m}, Replaced: &old})
	}, "inbox")
	aBlock = act(func(c *Ctx, ev chart.Event, out *chart.Out) {
		judged := c.gatedHead()
		c.Gating = ""
		if !judged || c.Paused {
			return
		}
		head := takeHead(c, OpDiscarded, out)
		out.Emit(PromptBlocked{ID: head.ID, Reason: ev.(PromptBlock).Reason})
	}, "inbox", "prompt-blocked")
)

// Definition is the agent machine: the single source of its stateless
// configuration, its diagrams and its table tests.
var Definition = &chart.Def[Ctx]{
	Name:    "agent",
	Initial: Idle,
	Version: Version,
	States: []chart.StateSpec[Ctx]{
		{Name: Idle, Initial: Ready, Entry: aEnterIdle},
		{Name: Ready, Parent: Idle},
		{Name: Waiting, Parent: Idle},
		{Name: Gating, Parent: Idle, Entry: aEnterGate},
		{Name: Maintenance, Entry: aEnterIdle, Exit: aExitJob},
		{Name: Running, Initial: Active, Entry: aEnterRun, Exit: aExitRunning},
		{Name: Active, Parent: Running},
		{Name: Aborting, Parent: Running},
		{Name: Closing, Entry: aEnterClosing},
		{Name: Disposed, Final: true, Entry: aEnterIdle},
	},
	Triggers: []chart.Trigger{TrSubmit, TrSteer, TrInject, TrNotify, TrRemind, TrDrop, TrCancel, TrPause, TrContinue,
		TrClose, TrClosed, TrMaintenanceStart, TrMaintenanceDone, TrTurnEnded, TrTimer, TrDrain,
		TrToolDetached, TrBackgroundDone, TrPromptPass, TrPromptBlock},
	Transitions: []edge{
		// idle: waking inputs gate the next prompt, start a turn, or queue.
		{From: Ready, On: TrSubmit, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Waiting, On: TrSubmit, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Gating, On: TrSubmit, Guard: gNewMessage, Action: aQueue},
		{From: Idle, On: TrSubmit, To: Running, Guard: gStartTurn, Action: aQueue},
		{From: Idle, On: TrSubmit, Guard: gNewMessage, Action: aQueue},
		{From: Ready, On: TrSteer, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Waiting, On: TrSteer, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Gating, On: TrSteer, Guard: gNewMessage, Action: aQueue},
		{From: Idle, On: TrSteer, To: Running, Guard: gStartTurn, Action: aQueue},
		{From: Idle, On: TrSteer, Guard: gNewMessage, Action: aQueue},
		{From: Ready, On: TrNotify, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Waiting, On: TrNotify, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Gating, On: TrNotify, Guard: gNewMessage, Action: aQueue},
		{From: Idle, On: TrNotify, To: Running, Guard: gStartTurn, Action: aQueue},
		{From: Idle, On: TrNotify, Guard: gNewMessage, Action: aQueue},
		{From: Waiting, On: TrBackgroundDone, To: Gating, Guard: gGateNext, Action: aQueue},
		{From: Waiting, On: TrBackgroundDone, To: Running, Guard: gStartTurn, Action: aQueue},
		{From: Waiting, On: TrBackgroundDone, To: Ready, Guard: gLastBackground, Action: aQueue},
		{From: Waiting, On: TrBackgroundDone, Guard: gKnownBackground, Action: aQueue},
		{From: Gating, On: TrBackgroundDone, Guard: gKnownBackground, Action: aQueue},
		// idle: inputs that do not wake.
		{From: Idle, On: TrInject, Guard: gNewMessage, Action: aQueue},
		{From: Idle, On: TrDrop, Guard: gQueuedID, Action: aDrop},
		{From: Idle, On: TrRemind, Guard: gNewMessage, Action: aQueue},
		// idle: control.
		{From: Ready, On: TrContinue, To: Gating, Guard: gGateNext, Action: aContinue},
		{From: Waiting, On: TrContinue, To: Gating, Guard: gGateNext, Action: aContinue},
		{From: Gating, On: TrContinue, Action: aContinue},
		{From: Idle, On: TrContinue, To: Running, Guard: gStartTurn, Action: aContinue},
		{From: Idle, On: TrContinue, Action: aContinue},
		{From: Idle, On: TrPause, Action: aPause},
		{From: Gating, On: TrCancel, To: Waiting, Guard: gHasBackground, Action: aCancelGate},
		{From: Gating, On: TrCancel, To: Ready, Action: aCancelGate},
		{From: Idle, On: TrCancel, Action: aCancelIdle},
		{From: Idle, On: TrClose, To: Closing, Action: aCloseIdle},
		{From: Ready, On: TrMaintenanceStart, To: Maintenance},
		// idle.gating: the prompt gate's verdict.
		{From: Gating, On: TrPromptPass, To: Gating, Guard: gGateNext, Action: aPass},
		{From: Gating, On: TrPromptPass, To: Running, Guard: gStartTurn, Action: aPass},
		{From: Gating, On: TrPromptPass, To: Waiting, Guard: gBackground, Action: aPass},
		{From: Gating, On: TrPromptPass, To: Ready, Action: aPass},
		{From: Gating, On: TrPromptBlock, To: Gating, Guard: gGateNext, Action: aBlock},
		{From: Gating, On: TrPromptBlock, To: Running, Guard: gStartTurn, Action: aBlock},
		{From: Gating, On: TrPromptBlock, To: Waiting, Guard: gBackground, Action: aBlock},
		{From: Gating, On: TrPromptBlock, To: Ready, Action: aBlock},

		// maintenance: waking inputs are latched.
		{From: Maintenance, On: TrSubmit, Guard: gNewMessage, Action: aQueueLate},
		{From: Maintenance, On: TrSteer, Guard: gNewMessage, Action: aQueueLate},
		{From: Maintenance, On: TrNotify, Guard: gNewMessage, Action: aQueueLate},
		{From: Maintenance, On: TrInject, Guard: gNewMessage, Action: aQueue},
		{From: Maintenance, On: TrDrop, Guard: gQueuedID, Action: aDrop},
		{From: Maintenance, On: TrRemind, Guard: gNewMessage, Action: aQueue},
		{From: Maintenance, On: TrPause, Action: aPause},
		{From: Maintenance, On: TrContinue, Action: aContinueLate},
		{From: Maintenance, On: TrCancel, Action: aCancelMaintenance},
		{From: Maintenance, On: TrClose, To: Closing, Action: aCloseMaintenance},
		{From: Maintenance, On: TrMaintenanceDone, To: Gating, Guard: gGateNext},
		{From: Maintenance, On: TrMaintenanceDone, To: Running, Guard: gStartTurn},
		{From: Maintenance, On: TrMaintenanceDone, To: Ready},

		// running: a live turn drains next-step itself; nothing is latched.
		{From: Running, On: TrDrop, Guard: gQueuedID, Action: aDrop},
		{From: Active, On: TrSubmit, Guard: gNewMessage, Action: aQueue},
		{From: Active, On: TrSteer, Guard: gNewMessage, Action: aQueue},
		{From: Active, On: TrNotify, Guard: gNewMessage, Action: aQueue},
		{From: Active, On: TrBackgroundDone, Guard: gKnownBackground, Action: aQueue},
		{From: Active, On: TrDrain, Action: aDrain},
		{From: Active, On: TrCancel, To: Aborting, Action: aAbortTurn},
		{From: Active, On: TrClose, To: Closing, Action: aCloseTurn},
		// running.aborting: waking inputs are latched, steers re-targeted.
		{From: Aborting, On: TrSubmit, Guard: gNewMessage, Action: aQueueLate},
		{From: Aborting, On: TrSteer, Guard: gNewMessage, Action: aQueueLate},
		{From: Aborting, On: TrNotify, Guard: gNewMessage, Action: aQueueLate},
		{From: Aborting, On: TrBackgroundDone, Guard: gKnownBackground, Action: aQueueLate},
		{From: Aborting, On: TrDrain, Action: aDrainNothing},
		{From: Aborting, On: TrCancel, Action: aCancelAgain},
		// A continue while a cancelled turn winds down is a wake that
		// must wait for it, as in maintenance.
		{From: Aborting, On: TrContinue, Action: aContinueLate},
		{From: Aborting, On: TrTimer, Guard: gHardStopTimer, Action: aHardStopTimer},
		{From: Aborting, On: TrClose, To: Closing, Action: aCloseAborting},
		// running: both substates.
		{From: Running, On: TrInject, Guard: gNewMessage, Action: aQueue},
		{From: Running, On: TrRemind, Guard: gNewMessage, Action: aQueue},
		{From: Running, On: TrToolDetached, Guard: gNewBackground, Action: aDetach},
		{From: Running, On: TrPause, Action: aPauseTurn},
		{From: Running, On: TrContinue, Action: aContinueTurn},
		{From: Running, On: TrTurnEnded, To: Gating, Guard: gGateNext, Action: aTurnEnded},
		{From: Running, On: TrTurnEnded, To: Running, Guard: gStartTurn, Action: aTurnEnded},
		{From: Running, On: TrTurnEnded, To: Waiting, Guard: gBackground, Action: aTurnEnded},
		{From: Running, On: TrTurnEnded, To: Ready, Action: aTurnEnded},

		// closing: late reports of work in flight are absorbed; inputs are
		// refused.
		{From: Closing, On: TrClosed, To: Disposed},
		{From: Closing, On: TrClose},
		{From: Closing, On: TrTurnEnded, Action: aTurnEnded},
		{From: Closing, On: TrMaintenanceDone},
		{From: Closing, On: TrBackgroundDone, Action: aDropBackground},
		{From: Closing, On: TrDrain, Action: aDrainNothing},
		{From: Closing, On: TrPromptPass},
		{From: Closing, On: TrPromptBlock},
	},
}

// Machine is a built agent machine kind. Build one per goroutine (or per
// session lane) with New and reuse it for every session it drives.
type Machine = chart.Machine[Ctx]

// Instance is one agent.
type Instance = chart.Instance[Ctx]

// New builds the agent machine kind.
func New() *Machine { return chart.MustBuild(Definition) }
