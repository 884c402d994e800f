package turn

import (
	"fmt"
	"strings"
	"time"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// RunGate asks the adapter to run the step gate for Step (stop flags,
// drained inputs, OnWillBeginStep) and answer with GateProceed, GateEmpty or
// GateRefuse. First is set on the turn's first step.
type RunGate struct {
	Turn, Step int
	First      bool
}

// StartRequest asks the adapter to build the model request from the current
// history and stream it, answering with ModelDone or ModelFailed.
type StartRequest struct{ Turn, Step, Attempt int }

// CancelRequest asks the adapter to cancel the in-flight model request and
// write what was salvaged of the partial reply.
type CancelRequest struct{ Cause vocab.CancelCause }

// CommitReply asks the adapter to write the assistant reply to history.
// Usage is recorded before any tool of the step runs.
//
// Reply is ModelDone's own, shared: read it, never change it.
type CommitReply struct {
	Reply  *vocab.Message
	Finish vocab.FinishReason
	Usage  vocab.Usage
}

// RetryScheduled reports a scheduled retry (the adapter writes an llm/retry
// event); the StartTimer effect that follows arms the wait.
type RetryScheduled struct {
	FailedAttempt, NextAttempt, MaxAttempts int
	Delay                                   time.Duration
	Code                                    vocab.Code
	Message                                 string
}

// SpawnTools asks the adapter to run the step's tool calls as one batch and
// answer each with ToolStarted and ToolOutcome.
type SpawnTools struct {
	Step  int
	Calls []vocab.ToolCall
}

// CancelTools asks the adapter to cancel the running tool calls.
type CancelTools struct{ Cause vocab.CancelCause }

// CommitResults asks the adapter to write the tool results to history, in
// the model's call order, one per call. The results are shared with the
// turn's context: read them, never change them.
type CommitResults struct{ Results []*vocab.ToolResult }

// Drain asks the adapter to claim queued input for the next step (running
// the turn-stopping hooks first when Concluded and nothing is queued) and
// answer with Drained.
type Drain struct {
	Step      int
	Concluded bool
}

// EndTurn reports the turn's outcome.
type EndTurn struct {
	End   vocab.TurnEnd
	Steps int
}

// The effects of every step and the turn's end (RunGate, StartRequest,
// CommitReply, SpawnTools, CommitResults, Drain, EndTurn) are emitted by
// pointer (*RunGate, …) from the chart.Out's storage (chart.Store): valid
// until the Out's Reset. The other effects are emitted as values.
var (
	runGates           = chart.NewStore[RunGate]()
	startRequests      = chart.NewStore[StartRequest]()
	commitReplies      = chart.NewStore[CommitReply]()
	spawnTools         = chart.NewStore[SpawnTools]()
	commitResultsStore = chart.NewStore[CommitResults]()
	drains             = chart.NewStore[Drain]()
	endTurns           = chart.NewStore[EndTurn]()
)

// EffectName implements chart.Effect.
func (RunGate) EffectName() string { return "run-gate" }

// EffectName implements chart.Effect.
func (StartRequest) EffectName() string { return "start-request" }

// EffectName implements chart.Effect.
func (CancelRequest) EffectName() string { return "cancel-request" }

// EffectName implements chart.Effect.
func (CommitReply) EffectName() string { return "commit-reply" }

// EffectName implements chart.Effect.
func (RetryScheduled) EffectName() string { return "retry-scheduled" }

// EffectName implements chart.Effect.
func (SpawnTools) EffectName() string { return "spawn-tools" }

// EffectName implements chart.Effect.
func (CancelTools) EffectName() string { return "cancel-tools" }

// EffectName implements chart.Effect.
func (CommitResults) EffectName() string { return "commit-results" }

// EffectName implements chart.Effect.
func (Drain) EffectName() string { return "drain" }

// EffectName implements chart.Effect.
func (EndTurn) EffectName() string { return "end-turn" }

// String renders RunGate for tables and logs.
func (e RunGate) String() string {
	return fmt.Sprintf("run-gate turn=%d step=%d first=%t", e.Turn, e.Step, e.First)
}

// String renders StartRequest for tables and logs.
func (e StartRequest) String() string {
	return fmt.Sprintf("start-request turn=%d step=%d attempt=%d", e.Turn, e.Step, e.Attempt)
}

// String renders CancelRequest for tables and logs.
func (e CancelRequest) String() string { return "cancel-request cause=" + e.Cause.String() }

// String renders CommitReply for tables and logs.
func (e CommitReply) String() string {
	return fmt.Sprintf("commit-reply finish=%s calls=%d text=%q", e.Finish, len(msgOf(e.Reply).ToolCalls()), msgOf(e.Reply).Text())
}

// String renders RetryScheduled for tables and logs.
func (e RetryScheduled) String() string {
	return fmt.Sprintf("retry-scheduled attempt=%d->%d/%d delay=%s code=%s", e.FailedAttempt, e.NextAttempt, e.MaxAttempts, e.Delay, e.Code)
}

// String renders SpawnTools for tables and logs.
func (e SpawnTools) String() string {
	ids := make([]string, len(e.Calls))
	for i, c := range e.Calls {
		ids[i] = c.ID + ":" + c.Name
	}
	return fmt.Sprintf("spawn-tools step=%d [%s]", e.Step, strings.Join(ids, " "))
}

// String renders CancelTools for tables and logs.
func (e CancelTools) String() string { return "cancel-tools cause=" + e.Cause.String() }

// String renders CommitResults for tables and logs.
func (e CommitResults) String() string {
	parts := make([]string, len(e.Results))
	for i, r := range e.Results {
		s := r.CallID + "=" + fmt.Sprintf("%q", r.Content)
		if r.IsError {
			s += "!" + string(r.Code)
		}
		parts[i] = s
	}
	return "commit-results [" + strings.Join(parts, " ") + "]"
}

// String renders Drain for tables and logs.
func (e Drain) String() string { return fmt.Sprintf("drain step=%d concluded=%t", e.Step, e.Concluded) }

// String renders EndTurn for tables and logs.
func (e EndTurn) String() string {
	return fmt.Sprintf("end-turn %s steps=%d", e.End, e.Steps)
}

// msgOf returns *m, the empty message for nil.
func msgOf(m *vocab.Message) vocab.Message {
	if m == nil {
		return vocab.Message{}
	}
	return *m
}
