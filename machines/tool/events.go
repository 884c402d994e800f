package tool

import (
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// Triggers of the tool machine.
const (
	TrBeforeProceed chart.Trigger = "before.proceed"
	TrBeforeDeny    chart.Trigger = "before.deny"
	TrBeforeAsk     chart.Trigger = "before.ask"
	TrBeforeFailed  chart.Trigger = "before.failed"
	TrApprove       chart.Trigger = "approve"
	TrReject        chart.Trigger = "reject"
	TrExecStarted   chart.Trigger = "exec.started"
	TrExecUpdate    chart.Trigger = "exec.update"
	TrExecDone      chart.Trigger = "exec.done"
	TrExecFailed    chart.Trigger = "exec.failed"
	TrExecDetached  chart.Trigger = "exec.detached"
	TrAbort         chart.Trigger = "abort"
	TrTimer         chart.Trigger = "timer.fired"
	TrAfterDone     chart.Trigger = "after.done"
	TrAfterFailed   chart.Trigger = "after.failed"
)

// BeforeProceed: the before-hook let the call run. A non-empty Call.Name or
// non-nil Call.Args replaces the call's name or arguments (a rewrite); the
// zero Call means "the same call". The call's ID never changes.
type BeforeProceed struct{ Call vocab.ToolCall }

// BeforeDeny: the before-hook denied the call. Result, when set, is the
// result the model gets (its CallID and Name are stamped from the call; an
// error result without a code gets vocab.CodeToolDenied); otherwise the
// call gets a denial error result naming Reason.
type BeforeDeny struct {
	Result *vocab.ToolResult
	Reason string
}

// BeforeAsk: the before-hook wants a person to approve the call first.
// Call, as in BeforeProceed, may rewrite the call the person is asked
// about.
type BeforeAsk struct {
	Question string
	Call     vocab.ToolCall
}

// BeforeFailed: the before-hook failed or panicked; the call fails with a
// vocab.CodeHook error result and never runs.
type BeforeFailed struct{ Message string }

// Approve: the person approved the pending call. Call, as in
// BeforeProceed, may edit it (new arguments) before it runs.
type Approve struct{ Call vocab.ToolCall }

// Reject: the person refused the pending call.
type Reject struct{ Reason string }

// ExecStarted: the scheduler is launching the tool now (it may have waited
// behind conflicting calls). The adapter fires it right before the launch
// and must not launch when Fire refuses it (the call was aborted first).
type ExecStarted struct{}

// ExecUpdate: the running tool reported progress.
type ExecUpdate struct{ Text string }

// ExecDone: the tool returned Result (its CallID and Name are stamped from
// the call; nil is an empty result). An error result returned by the tool
// is still a result: it goes through the after-hook. The machine never
// changes *Result, and keeps it as it is when it is stamped already (else
// a stamped copy): the sender must not change it afterwards. So one result
// can be shared with the log, and boxing the event costs no allocation.
type ExecDone struct{ Result *vocab.ToolResult }

// ExecFailed: the tool returned a Go error or panicked; the call fails with
// a vocab.CodeToolFailed error result (during an abort: the aborted result).
type ExecFailed struct{ Message string }

// ExecDetached: the tool acknowledged and went on in the background. Ack is
// the text the turn gets now; empty means "async running: <tool>".
type ExecDetached struct{ Ack string }

// Abort cancels the call.
type Abort struct{ Cause vocab.CancelCause }

// TimerFired: the timer Name#Seq ran out.
type TimerFired struct {
	Name string
	Seq  uint64
}

// AfterDone: the after-hook returned Result (its CallID and Name are stamped
// from the call; nil is an empty result); an error result makes the call
// fail. Handing back RunAfter's own Result (the hook kept it) costs nothing.
type AfterDone struct{ Result *vocab.ToolResult }

// AfterFailed: the after-hook failed or panicked; the call fails with a
// vocab.CodeHook error result.
type AfterFailed struct{ Message string }

// Trigger implements chart.Event.
func (BeforeProceed) Trigger() chart.Trigger { return TrBeforeProceed }

// Trigger implements chart.Event.
func (BeforeDeny) Trigger() chart.Trigger { return TrBeforeDeny }

// Trigger implements chart.Event.
func (BeforeAsk) Trigger() chart.Trigger { return TrBeforeAsk }

// Trigger implements chart.Event.
func (BeforeFailed) Trigger() chart.Trigger { return TrBeforeFailed }

// Trigger implements chart.Event.
func (Approve) Trigger() chart.Trigger { return TrApprove }

// Trigger implements chart.Event.
func (Reject) Trigger() chart.Trigger { return TrReject }

// Trigger implements chart.Event.
func (ExecStarted) Trigger() chart.Trigger { return TrExecStarted }

// Trigger implements chart.Event.
func (ExecUpdate) Trigger() chart.Trigger { return TrExecUpdate }

// Trigger implements chart.Event.
func (ExecDone) Trigger() chart.Trigger { return TrExecDone }

// Trigger implements chart.Event.
func (ExecFailed) Trigger() chart.Trigger { return TrExecFailed }

// Trigger implements chart.Event.
func (ExecDetached) Trigger() chart.Trigger { return TrExecDetached }

// Trigger implements chart.Event.
func (Abort) Trigger() chart.Trigger { return TrAbort }

// Trigger implements chart.Event.
func (TimerFired) Trigger() chart.Trigger { return TrTimer }

// Trigger implements chart.Event.
func (AfterDone) Trigger() chart.Trigger { return TrAfterDone }

// Trigger implements chart.Event.
func (AfterFailed) Trigger() chart.Trigger { return TrAfterFailed }
