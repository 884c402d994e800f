package agent

import (
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// Triggers of the agent machine.
const (
	TrSubmit           chart.Trigger = "submit"
	TrSteer            chart.Trigger = "steer"
	TrInject           chart.Trigger = "inject"
	TrNotify           chart.Trigger = "notify"
	TrRemind           chart.Trigger = "remind"
	TrCancel           chart.Trigger = "cancel"
	TrPause            chart.Trigger = "pause"
	TrContinue         chart.Trigger = "continue"
	TrClose            chart.Trigger = "close"
	TrClosed           chart.Trigger = "closed"
	TrMaintenanceStart chart.Trigger = "maintenance.start"
	TrMaintenanceDone  chart.Trigger = "maintenance.done"
	TrTurnEnded        chart.Trigger = "turn.ended"
	TrTimer            chart.Trigger = "timer.fired"
	TrDrain            chart.Trigger = "drain"
	TrToolDetached     chart.Trigger = "tool.detached"
	TrBackgroundDone   chart.Trigger = "background.done"
	TrPromptPass       chart.Trigger = "prompt.pass"
	TrPromptBlock      chart.Trigger = "prompt.block"
	TrDrop             chart.Trigger = "drop"
)

// Submit queues a prompt or follow-up on the next-turn list and wakes the
// agent. Message.ID must be set and not queued yet.
//
// The machine takes a *Submit as well (it reads it during the Fire only
// and keeps a copy of the message): a sender can keep the event in its
// own storage instead of boxing a copy of a whole message.
type Submit struct{ Message vocab.Message }

// Steer queues input for the running turn's next step and wakes the agent.
// A steer that arrives after an abort (running.aborting, or an aborted
// maintenance job) goes to the next-turn list instead: the turn it was
// meant for is gone.
type Steer struct{ Message vocab.Message }

// Inject queues a message on the next-step list without waking the agent:
// it rides along with the next claim.
type Inject struct{ Message vocab.Message }

// Notify queues a notification on the next-step list and wakes the agent.
// BypassMaxSteps lets the step it starts pass the turn's max-steps guard.
type Notify struct {
	Message        vocab.Message
	BypassMaxSteps bool
}

// Remind queues a reminder under Key. A queued reminder with the same key is
// replaced in place (it keeps its position). Reminders never wake the agent;
// they ride along with the next claim.
type Remind struct {
	Key     string
	Message vocab.Message
}

// Cancel aborts what the agent is doing (the running turn or maintenance
// job; nothing when idle) and, unless KeepInbox, clears the next-turn and
// next-step lists and the wake latch. Reminders are kept.
type Cancel struct {
	Cause     vocab.CancelCause
	KeepInbox bool
}

// Pause stops the agent from starting turns; a running turn is asked to
// stop at its next drain.
type Pause struct{}

// Continue undoes Pause and wakes the agent when work is queued. Resume asks
// for a turn even when nothing is queued: the adapter sets it when the
// history ends mid tool chain (a tool result or a tool call without its
// answer), so the model picks up where it stopped.
type Continue struct{ Resume bool }

// Close shuts the agent down: what runs is aborted with cause disposed, then
// the adapter cleans up and answers Closed.
type Close struct{}

// Closed reports that the cleanup is done.
type Closed struct{}

// MaintenanceStart asks to run a non-conversation job (compaction and the
// like). Only an idle agent with nothing to wait for (idle.ready) accepts
// it; anywhere else the trigger is refused with a typed error.
type MaintenanceStart struct{}

// MaintenanceDone reports that the maintenance job ended (done, failed or
// aborted).
type MaintenanceDone struct{}

// TurnEnded reports that the turn the agent started has reached a final
// state.
type TurnEnded struct{ End vocab.TurnEnd }

// TimerFired reports that the timer Name#Seq ran out.
type TimerFired struct {
	Name string
	Seq  uint64
}

// Drain is the running turn asking for input after a step: the agent
// answers with a Claimed effect.
type Drain struct{}

// ToolDetached reports that a call of the running turn went on in the
// background; its completion comes back as BackgroundDone.
type ToolDetached struct {
	CallID string
	Name   string
}

// BackgroundDone reports that a background call ended with Result. The
// agent queues an async-completion notification with id ID on the
// next-step list and wakes.
type BackgroundDone struct {
	ID     vocab.ID
	CallID string
	Name   string
	Result vocab.ToolResult
}

// PromptPass is the prompt gate's verdict: the judged prompt may run,
// replaced by Rewritten when the gate rewrote it (its id is kept).
type PromptPass struct{ Rewritten *vocab.Message }

// PromptBlock is the prompt gate's verdict: the judged prompt is dropped.
// A gate that failed answers PromptBlock with Reason "error".
type PromptBlock struct{ Reason string }

// Trigger implements chart.Event: Submit fires TrSubmit.
func (Submit) Trigger() chart.Trigger { return TrSubmit }

// Trigger implements chart.Event: Steer fires TrSteer.
func (Steer) Trigger() chart.Trigger { return TrSteer }

// Trigger implements chart.Event: Inject fires TrInject.
func (Inject) Trigger() chart.Trigger { return TrInject }

// Trigger implements chart.Event: Notify fires TrNotify.
func (Notify) Trigger() chart.Trigger { return TrNotify }

// Trigger implements chart.Event: Remind fires TrRemind.
func (Remind) Trigger() chart.Trigger { return TrRemind }

// Trigger implements chart.Event: Cancel fires TrCancel.
func (Cancel) Trigger() chart.Trigger { return TrCancel }

// Trigger implements chart.Event: Pause fires TrPause.
func (Pause) Trigger() chart.Trigger { return TrPause }

// Trigger implements chart.Event: Continue fires TrContinue.
func (Continue) Trigger() chart.Trigger { return TrContinue }

// Trigger implements chart.Event: Close fires TrClose.
func (Close) Trigger() chart.Trigger { return TrClose }

// Trigger implements chart.Event: Closed fires TrClosed.
func (Closed) Trigger() chart.Trigger { return TrClosed }

// Trigger implements chart.Event: MaintenanceStart fires TrMaintenanceStart.
func (MaintenanceStart) Trigger() chart.Trigger { return TrMaintenanceStart }

// Trigger implements chart.Event: MaintenanceDone fires TrMaintenanceDone.
func (MaintenanceDone) Trigger() chart.Trigger { return TrMaintenanceDone }

// Trigger implements chart.Event: TurnEnded fires TrTurnEnded.
func (TurnEnded) Trigger() chart.Trigger { return TrTurnEnded }

// Trigger implements chart.Event: TimerFired fires TrTimer.
func (TimerFired) Trigger() chart.Trigger { return TrTimer }

// Trigger implements chart.Event: Drain fires TrDrain.
func (Drain) Trigger() chart.Trigger { return TrDrain }

// Trigger implements chart.Event: ToolDetached fires TrToolDetached.
func (ToolDetached) Trigger() chart.Trigger { return TrToolDetached }

// Trigger implements chart.Event: BackgroundDone fires TrBackgroundDone.
func (BackgroundDone) Trigger() chart.Trigger { return TrBackgroundDone }

// Trigger implements chart.Event: PromptPass fires TrPromptPass.
func (PromptPass) Trigger() chart.Trigger { return TrPromptPass }

// Trigger implements chart.Event: PromptBlock fires TrPromptBlock.
func (PromptBlock) Trigger() chart.Trigger { return TrPromptBlock }

// Drop takes a message that is still queued (not yet claimed) off the
// inbox: a notification's drop handle, or a caller withdrawing a prompt. A
// message already claimed, or never queued, is refused by the guard.
type Drop struct{ ID vocab.ID }

// Trigger implements chart.Event: Drop fires TrDrop.
func (Drop) Trigger() chart.Trigger { return TrDrop }
