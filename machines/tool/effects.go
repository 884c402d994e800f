package tool

import (
	"fmt"
	"strings"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// RunBefore asks the adapter to run the before-hook chain on Call and answer
// with BeforeProceed, BeforeDeny, BeforeAsk or BeforeFailed. With no hook
// the answer is BeforeProceed with the same call.
//
// Call is the context's own (boxing the effect costs nothing): read it
// before the next Fire, never change it.
type RunBefore struct{ Call *vocab.ToolCall }

// RequestApproval asks the adapter to put Question about Call to a person
// and answer with Approve, Reject or Abort. After a restore in
// awaiting_approval the adapter asks again from Ctx.Approval.
type RequestApproval struct {
	Call     vocab.ToolCall
	Question string
}

// Execute asks the adapter to hand Call to the tool scheduler. The adapter
// fires ExecStarted when the scheduler launches it, then ExecUpdate for
// progress and one of ExecDone, ExecFailed or ExecDetached. Rewritten
// reports that the before-hook changed the call.
//
// Call is the context's own: read it before the next Fire, never change it.
type Execute struct {
	Call      *vocab.ToolCall
	Rewritten bool
}

// Progress forwards a running tool's progress report.
type Progress struct {
	CallID string
	Text   string
}

// Acknowledge gives the turn its result for a call that went on in the
// background: the turn writes Result to history now, and the call's real
// completion arrives later as an Outcome with Background set.
type Acknowledge struct{ Result vocab.ToolResult }

// CancelExecution asks the adapter to cancel the call's execution with
// Cause: drop it from the scheduler's queue if it has not started, else
// cancel its context. An aborting call waits for it under a grace timer.
type CancelExecution struct {
	CallID string
	Cause  vocab.CancelCause
}

// RunAfter asks the adapter to run the after-hook chain on Result and answer
// with AfterDone (the same result when there is no hook) or AfterFailed.
// Result is the call's result so far, shared: read it, never change it.
type RunAfter struct{ Result *vocab.ToolResult }

// Outcome is the call's one result, emitted once, on entering a final
// state. Background is set when the call had detached: the adapter delivers
// the result as a notification, not as the tool result of the turn (the
// turn already got the Acknowledge result).
//
// Result is shared with the machine's context (which never changes it in
// place: a new result replaces it): read it, never change it.
type Outcome struct {
	Result     *vocab.ToolResult
	Background bool
}

// EffectName implements chart.Effect.
func (RunBefore) EffectName() string { return "run-before" }

// EffectName implements chart.Effect.
func (RequestApproval) EffectName() string { return "request-approval" }

// Execute and Outcome, the effects of every call, are emitted by pointer
// (*Execute, *Outcome) from the chart.Out's storage (chart.Store): valid
// until the Out's Reset. The other effects are emitted as values.
var (
	executes = chart.NewStore[Execute]()
	outcomes = chart.NewStore[Outcome]()
)

// EffectName implements chart.Effect.
func (Execute) EffectName() string { return "execute" }

// EffectName implements chart.Effect.
func (Progress) EffectName() string { return "progress" }

// EffectName implements chart.Effect.
func (Acknowledge) EffectName() string { return "acknowledge" }

// EffectName implements chart.Effect.
func (CancelExecution) EffectName() string { return "cancel-execution" }

// EffectName implements chart.Effect.
func (RunAfter) EffectName() string { return "run-after" }

// EffectName implements chart.Effect.
func (Outcome) EffectName() string { return "outcome" }

// String renders the effect deterministically for tables and logs.
func (e RunBefore) String() string { return "run-before " + formatCall(callOf(e.Call)) }

// String renders the effect deterministically for tables and logs.
func (e RequestApproval) String() string {
	return fmt.Sprintf("request-approval %s question=%q", formatCall(e.Call), e.Question)
}

// String renders the effect deterministically for tables and logs.
func (e Execute) String() string {
	s := "execute " + formatCall(callOf(e.Call))
	if e.Rewritten {
		s += " rewritten"
	}
	return s
}

// String renders the effect deterministically for tables and logs.
func (e Progress) String() string { return fmt.Sprintf("progress %s text=%q", e.CallID, e.Text) }

// String renders the effect deterministically for tables and logs.
func (e Acknowledge) String() string {
	return "acknowledge " + FormatResult(e.Result)
}

// String renders the effect deterministically for tables and logs.
func (e CancelExecution) String() string {
	return fmt.Sprintf("cancel-execution %s cause=%s", e.CallID, e.Cause.String())
}

// String renders the effect deterministically for tables and logs.
func (e RunAfter) String() string { return "run-after " + FormatResult(deref(e.Result)) }

// String renders the effect deterministically for tables and logs.
func (e Outcome) String() string {
	s := "outcome " + FormatResult(deref(e.Result))
	if e.Background {
		s += " background"
	}
	return s
}

func formatCall(c vocab.ToolCall) string {
	s := c.ID + ":" + c.Name
	if len(c.Args) > 0 {
		s += " args=" + string(c.Args)
	}
	return s
}

// FormatResult renders r deterministically for effects and tables:
// `id:name "content"`, then `error(code)` (`error` without a code) for an
// error result, then the started and stop(reason) flags.
func FormatResult(r vocab.ToolResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%s %q", r.CallID, r.Name, r.Content)
	switch {
	case r.IsError && r.Code != "":
		fmt.Fprintf(&b, " error(%s)", r.Code)
	case r.IsError:
		b.WriteString(" error")
	}
	if r.Started {
		b.WriteString(" started")
	}
	if r.StopTurn {
		fmt.Fprintf(&b, " stop(%s)", r.StopReason)
	}
	return b.String()
}

// deref returns *r, the zero result for nil.
func deref(r *vocab.ToolResult) vocab.ToolResult {
	if r == nil {
		return vocab.ToolResult{}
	}
	return *r
}

// callOf returns *c, the zero call for nil.
func callOf(c *vocab.ToolCall) vocab.ToolCall {
	if c == nil {
		return vocab.ToolCall{}
	}
	return *c
}
