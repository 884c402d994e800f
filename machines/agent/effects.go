package agent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// InboxOp says how an inbox list changed.
type InboxOp string

// Inbox operations.
const (
	OpInserted  InboxOp = "inserted"
	OpClaimed   InboxOp = "claimed"
	OpDiscarded InboxOp = "discarded"
	OpReplaced  InboxOp = "replaced"
)

// Inbox reports one change to one inbox list: Messages were inserted at At,
// claimed or discarded from At, or (OpReplaced) put at At in place of
// Replaced. The adapter appends the matching inbox/spliced event before it
// executes any later effect of the same Fire, so a replay of the log
// rebuilds the same inbox.
type Inbox struct {
	Target   Target
	Op       InboxOp
	At       int
	Messages []vocab.Message
	// Replaced is the message taken out by OpReplaced.
	Replaced *vocab.Message
}

// StartTurn asks the adapter to start turn Turn (a new turn machine) with
// Claimed as the first step's input, in order: the next-step list, the
// reminders, then the next-turn head whose id is PromptID ("" when no
// prompt was claimed). Resume is set for a turn started by Continue{Resume}
// with nothing claimed: the model answers the history as it stands.
type StartTurn struct {
	Turn     int
	PromptID vocab.ID
	Claimed  []vocab.Message
	Resume   bool
}

// Claimed answers the running turn's Drain: the messages claimed for its
// next step (none when nothing was queued). Bypass is set when one of them
// may pass the max-steps guard. The adapter answers the turn machine with
// turn.Drained{Messages: len(Messages), Bypass: Bypass}.
type Claimed struct {
	Messages []vocab.Message
	Bypass   bool
}

// Status reports a flip of the public status (agent/status).
type Status struct{ Status PublicStatus }

// AbortTurn asks the adapter to abort the running turn (turn.Abort) with
// Cause.
type AbortTurn struct{ Cause vocab.CancelCause }

// HardStop asks the adapter to stop the aborting turn and its tools now,
// without waiting for them to settle.
type HardStop struct{ Cause vocab.CancelCause }

// AbortMaintenance asks the adapter to cancel the maintenance job.
type AbortMaintenance struct{ Cause vocab.CancelCause }

// PauseTurn asks the adapter to forward turn.Pause to the running turn.
type PauseTurn struct{}

// ContinueTurn asks the adapter to forward turn.Continue to the running
// turn.
type ContinueTurn struct{}

// GatePrompt asks the adapter to run the OnBeforeSubmitPrompt hooks on the
// next-turn head and answer with PromptPass or PromptBlock.
type GatePrompt struct {
	ID      vocab.ID
	Message vocab.Message
}

// PromptBlocked reports that the gate blocked prompt ID; the Inbox
// discarded effect before it took the prompt off the queue.
type PromptBlocked struct {
	ID     vocab.ID
	Reason string
}

// AbortGate asks the adapter to stop judging prompt ID (cancel the
// OnBeforeSubmitPrompt hooks) with Cause: a cancel arrived while the gate
// judged it, and the prompt was taken off the queue.
type AbortGate struct {
	ID    vocab.ID
	Cause vocab.CancelCause
}

// Cleanup asks the adapter to release the session (stop background tools,
// close scopes) and answer Closed.
type Cleanup struct{}

// Inbox, StartTurn and Claimed, the effects of every prompt and step,
// are emitted by pointer (*Inbox, *StartTurn, *Claimed) from the
// chart.Out's storage (chart.Store): valid until the Out's Reset. The
// other effects are emitted as values.
var (
	inboxes    = chart.NewStore[Inbox]()
	startTurns = chart.NewStore[StartTurn]()
	claims     = chart.NewStore[Claimed]()
)

// EffectName implements chart.Effect: inbox.
func (Inbox) EffectName() string { return "inbox" }

// EffectName implements chart.Effect: start-turn.
func (StartTurn) EffectName() string { return "start-turn" }

// EffectName implements chart.Effect: claimed.
func (Claimed) EffectName() string { return "claimed" }

// EffectName implements chart.Effect: status.
func (Status) EffectName() string { return "status" }

// EffectName implements chart.Effect: abort-turn.
func (AbortTurn) EffectName() string { return "abort-turn" }

// EffectName implements chart.Effect: hard-stop.
func (HardStop) EffectName() string { return "hard-stop" }

// EffectName implements chart.Effect: abort-maintenance.
func (AbortMaintenance) EffectName() string { return "abort-maintenance" }

// EffectName implements chart.Effect: pause-turn.
func (PauseTurn) EffectName() string { return "pause-turn" }

// EffectName implements chart.Effect: continue-turn.
func (ContinueTurn) EffectName() string { return "continue-turn" }

// EffectName implements chart.Effect: gate-prompt.
func (GatePrompt) EffectName() string { return "gate-prompt" }

// EffectName implements chart.Effect: prompt-blocked.
func (PromptBlocked) EffectName() string { return "prompt-blocked" }

// EffectName implements chart.Effect: abort-gate.
func (AbortGate) EffectName() string { return "abort-gate" }

// String renders the effect for tables and logs.
func (e AbortGate) String() string {
	return fmt.Sprintf("abort-gate %s cause=%s", e.ID, e.Cause.String())
}

// EffectName implements chart.Effect: cleanup.
func (Cleanup) EffectName() string { return "cleanup" }

// msgs renders messages as [id:"text" …].
func msgs(ms []vocab.Message) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = msg(m)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func msg(m vocab.Message) string { return string(m.ID) + ":" + strconv.Quote(m.Text()) }

// String renders the effect for tables and logs.
func (e Inbox) String() string {
	s := fmt.Sprintf("inbox %s %s@%d %s", e.Target, e.Op, e.At, msgs(e.Messages))
	if e.Replaced != nil {
		s += " was " + msg(*e.Replaced)
	}
	return s
}

// String renders the effect for tables and logs.
func (e StartTurn) String() string {
	s := fmt.Sprintf("start-turn turn=%d", e.Turn)
	if e.PromptID != "" {
		s += " prompt=" + string(e.PromptID)
	}
	s += " claimed=" + msgs(e.Claimed)
	if e.Resume {
		s += " resume"
	}
	return s
}

// String renders the effect for tables and logs.
func (e Claimed) String() string {
	s := "claimed " + msgs(e.Messages)
	if e.Bypass {
		s += " bypass"
	}
	return s
}

// String renders the effect for tables and logs.
func (e Status) String() string { return "status " + string(e.Status) }

// String renders the effect for tables and logs.
func (e AbortTurn) String() string { return "abort-turn cause=" + e.Cause.String() }

// String renders the effect for tables and logs.
func (e HardStop) String() string { return "hard-stop cause=" + e.Cause.String() }

// String renders the effect for tables and logs.
func (e AbortMaintenance) String() string { return "abort-maintenance cause=" + e.Cause.String() }

// String renders the effect for tables and logs.
func (PauseTurn) String() string { return "pause-turn" }

// String renders the effect for tables and logs.
func (ContinueTurn) String() string { return "continue-turn" }

// String renders the effect for tables and logs.
func (e GatePrompt) String() string { return "gate-prompt " + msg(e.Message) }

// String renders the effect for tables and logs.
func (e PromptBlocked) String() string {
	return fmt.Sprintf("prompt-blocked %s reason=%q", e.ID, e.Reason)
}

// String renders the effect for tables and logs.
func (Cleanup) String() string { return "cleanup" }
