package turn

import (
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// Triggers of the turn machine.
const (
	TrGateProceed chart.Trigger = "gate.proceed"
	TrGateEmpty   chart.Trigger = "gate.empty"
	TrGateRefuse  chart.Trigger = "gate.refuse"
	TrModelDone   chart.Trigger = "model.done"
	TrModelFailed chart.Trigger = "model.failed"
	TrTimer       chart.Trigger = "timer.fired"
	TrToolStarted chart.Trigger = "tool.started"
	TrToolOutcome chart.Trigger = "tool.outcome"
	TrDrained     chart.Trigger = "drained"
	TrAbort       chart.Trigger = "abort"
	TrPause       chart.Trigger = "pause"
	TrContinue    chart.Trigger = "continue"
	TrStop        chart.Trigger = "stop"
	// TrLoopBlock: loop detection blocked the step's tool batch (a first
	// critical loop in the run); the turn goes on with the blocked results.
	TrLoopBlock chart.Trigger = "loop.block"
	// TrLoopTerminate: loop detection found a second critical loop in the
	// run; the turn fails at the next drain.
	TrLoopTerminate chart.Trigger = "loop.terminate"
)

// GateProceed: the step gate passed; the request may be built and sent.
// Claimed is the number of input messages the gate wrote to history for
// this step.
type GateProceed struct{ Claimed int }

// GateEmpty: the gate found nothing to say (on the turn's first step, or
// after a concluded reply); the
// turn closes without a model call.
type GateEmpty struct{}

// GateRefuse: the gate (or an OnWillBeginStep hook) refused the step.
// Blocked ends the turn "blocked"; otherwise it fails with Code and Message.
type GateRefuse struct {
	Blocked bool
	Code    vocab.Code
	Message string
}

// ModelDone: the model request finished and Reply is the assembled
// assistant message.
//
// Reply is shared, not copied (boxing the event costs 64 bytes, not a
// whole message): the sender must not change it afterwards. A nil Reply is
// an empty reply.
//
// The machine takes a *ModelDone as well (it reads it during the Fire
// only and keeps Reply, never the event): a sender that fires one
// model.done at a time can keep the event in its own storage instead of
// boxing a copy.
type ModelDone struct {
	Reply  *vocab.Message
	Finish vocab.FinishReason
	Usage  vocab.Usage
}

// ModelFailed: the model request failed with Err. Recovered reports that an
// error handler rebuilt the history and asks for another request at once.
// Jitter, in [0, 1), is the random draw for the backoff (randomness arrives
// as data).
type ModelFailed struct {
	Err       *vocab.Error
	Recovered bool
	Jitter    float64
}

// TimerFired: the timer Name#Seq ran out.
type TimerFired struct {
	Name string
	Seq  uint64
}

// ToolStarted: the call began executing. The machine takes a *ToolStarted
// as well (it reads it during the Fire only).
type ToolStarted struct{ CallID string }

// ToolOutcome: the call ended with Result (its CallID names the call; nil
// names none). The machine keeps Result (it never changes it), so the
// sender must not change it afterwards either; boxing the event costs no
// allocation.
type ToolOutcome struct{ Result *vocab.ToolResult }

// Drained: the adapter claimed Messages input messages (steers,
// notifications, reminders) into history after the step. Bypass is set when
// one of them may bypass the max-steps guard.
type Drained struct {
	Messages int
	Bypass   bool
}

// Abort cancels the turn.
type Abort struct{ Cause vocab.CancelCause }

// Pause asks the turn to stop at the next drain.
type Pause struct{}

// Continue undoes Pause.
type Continue struct{}

// Stop asks the turn to end after the current step (a hook or a tool said
// so).
type Stop struct{ Reason string }

// Trigger implements chart.Event.
func (GateProceed) Trigger() chart.Trigger { return TrGateProceed }

// Trigger implements chart.Event.
func (GateEmpty) Trigger() chart.Trigger { return TrGateEmpty }

// Trigger implements chart.Event.
func (GateRefuse) Trigger() chart.Trigger { return TrGateRefuse }

// Trigger implements chart.Event.
func (ModelDone) Trigger() chart.Trigger { return TrModelDone }

// startedID returns the CallID of ev, a ToolStarted or a *ToolStarted.
func startedID(ev chart.Event) string {
	if s, ok := ev.(*ToolStarted); ok {
		return s.CallID
	}
	return ev.(ToolStarted).CallID
}

// modelDone returns the ModelDone of ev, given as a value or a pointer.
func modelDone(ev chart.Event) ModelDone {
	if d, ok := ev.(*ModelDone); ok {
		return *d
	}
	return ev.(ModelDone)
}

// Trigger implements chart.Event.
func (ModelFailed) Trigger() chart.Trigger { return TrModelFailed }

// Trigger implements chart.Event.
func (TimerFired) Trigger() chart.Trigger { return TrTimer }

// Trigger implements chart.Event.
func (ToolStarted) Trigger() chart.Trigger { return TrToolStarted }

// Trigger implements chart.Event.
func (ToolOutcome) Trigger() chart.Trigger { return TrToolOutcome }

// Trigger implements chart.Event.
func (Drained) Trigger() chart.Trigger { return TrDrained }

// Trigger implements chart.Event.
func (Abort) Trigger() chart.Trigger { return TrAbort }

// Trigger implements chart.Event.
func (Pause) Trigger() chart.Trigger { return TrPause }

// Trigger implements chart.Event.
func (Continue) Trigger() chart.Trigger { return TrContinue }

// Trigger implements chart.Event.
func (Stop) Trigger() chart.Trigger { return TrStop }

// Loop names what loop detection found: the detector, how many times,
// on which tool.
type Loop struct {
	Detector string
	Count    int
	Tool     string
}

// LoopBlock: loop detection blocked the batch (see TrLoopBlock).
type LoopBlock struct{ Loop }

// LoopTerminate: loop detection terminates the run (see TrLoopTerminate).
type LoopTerminate struct{ Loop }

// Trigger implements chart.Event.
func (LoopBlock) Trigger() chart.Trigger { return TrLoopBlock }

// Trigger implements chart.Event.
func (LoopTerminate) Trigger() chart.Trigger { return TrLoopTerminate }
