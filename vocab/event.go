package vocab

import (
	"encoding/json"
	"strconv"
	"time"
	"unsafe"
)

// EventKind names an event. Kinds are stable strings.
type EventKind string

// Event kinds. The first ten mirror the classic agent-loop lifecycle; the
// rest are loopchart's audit trail.
const (
	EventAgentStart          EventKind = "agent/start"
	EventAgentEnd            EventKind = "agent/end"
	EventTurnStart           EventKind = "turn/start"
	EventTurnEnd             EventKind = "turn/end"
	EventMessageStart        EventKind = "message/start"
	EventMessageUpdate       EventKind = "message/update"
	EventMessageEnd          EventKind = "message/end"
	EventToolExecutionStart  EventKind = "tool/execution-start"
	EventToolExecutionUpdate EventKind = "tool/execution-update"
	EventToolExecutionEnd    EventKind = "tool/execution-end"

	EventTransition   EventKind = "machine/transition"
	EventStepStart    EventKind = "step/start"
	EventStepEnd      EventKind = "step/end"
	EventUserMessage  EventKind = "user/message"
	EventAssistant    EventKind = "assistant/message"
	EventToolCall     EventKind = "tool/call"
	EventToolResult   EventKind = "tool/result"
	EventInboxSpliced EventKind = "inbox/spliced"
	EventRetry        EventKind = "llm/retry"
	EventUsage        EventKind = "usage"
	EventWarning      EventKind = "loop/warning"
	// EventLoopIntervention records loop detection blocking a tool batch,
	// or terminating the run (a second critical loop). Its payload is a
	// LoopPayload, as is loop/warning's.
	EventLoopIntervention EventKind = "loop/intervention"
	EventPrompt           EventKind = "prompt/state"
	EventStatus           EventKind = "agent/status"
	EventError            EventKind = "agent/error"

	// EventInputStale records an input that named work no longer
	// outstanding: it was dropped, never applied. Its payload is a
	// StalePayload.
	EventInputStale EventKind = "input/stale"
	// EventHistoryReplaced records the history being replaced whole (by a
	// loop error handler or the compactor). Its payload is a
	// HistoryPayload.
	EventHistoryReplaced EventKind = "history/replaced"
	// EventHookFailed records a hook chain that failed or panicked. Its
	// payload is a HookPayload.
	EventHookFailed EventKind = "hook/failed"
	// EventWorkStuck records work that ignored cancellation past the close
	// deadline. Its payload is a StuckPayload.
	EventWorkStuck EventKind = "work/stuck"
	// EventRequestHeader records the header of the model requests (model,
	// system prompt, tools, limits): "initial" before a session's first
	// request, "resume" before the first request after a reopen, "change"
	// when it differs from the last one logged. Its payload is a
	// HeaderPayload.
	EventRequestHeader EventKind = "request/header"
	// EventRecovering records a failed request that recovery takes up
	// again at once (an empty reply), before any retry policy applies.
	// Its payload is an ErrorPayload.
	EventRecovering EventKind = "llm/recovering"
	// EventSnapshot records a snapshot of the session core, taken just
	// before the input/checkpoint event that precedes it: a reopen
	// restores it and steps the inputs after it. Its payload is a
	// SnapshotPayload.
	EventSnapshot EventKind = "core/snapshot"
	// EventToolApproval records a tool call's approval: asked for,
	// answered, or abandoned by an abort. Its payload is an
	// ApprovalPayload.
	EventToolApproval EventKind = "tool/approval"
	// EventYield records a prompt yielded (a sessions_yield ended its
	// turn: the prompt stays open) and resumed (a later turn took it up
	// again). Its payload is a PromptPayload, State "yielded" or
	// "resumed".
	EventYield EventKind = "prompt/yield"
	// EventLane records the session's use of a capped lane (a Host's
	// global lane): "wait" when work needs a slot the session does not
	// hold (the work waits; input/slot.granted answers), "release" when
	// the session gives its slot back (no model request, tool call or hook
	// runs). Its payload is a LanePayload.
	EventLane EventKind = "lane/slot"
)

// Yield states (EventYield).
const (
	YieldYielded = "yielded"
	YieldResumed = "resumed"
)

// Lane operations (EventLane).
const (
	LaneWait    = "wait"
	LaneRelease = "release"
)

// LanePayload records a lane decision: Op is LaneWait or LaneRelease, Work
// the slot request it concerns, Waiting how many pieces of work wait for
// it (LaneWait).
type LanePayload struct {
	Op      string `json:"op"`
	Work    uint64 `json:"work"`
	Waiting int    `json:"waiting,omitempty"`
}

// InputEventPrefix starts the kind of every event that records an accepted
// input: "input/" + InputKind, carrying the Input whole (see
// Input.EventKind). The one exception is EventInputStale, whose payload is
// a StalePayload.
const InputEventPrefix = "input/"

// Event is one audited fact about a session. Seq is dense and increasing per
// session; Turn and Step are zero outside a turn or step.
//
// An event's id is not stored: it is EventID(Session, Seq) (see ID), so
// replaying a session's inputs reproduces every id, and an event costs no
// id text until someone asks for it.
type Event struct {
	Session ID        `json:"session"`
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    EventKind `json:"kind"`
	Turn    int       `json:"turn,omitempty"`
	Step    int       `json:"step,omitempty"`
	// Payload is one of the *Payload types of this package, stored by
	// value (an Input for the input/ kinds other than EventInputStale), or
	// nil. A decoded event of a kind this version does not know holds a
	// RawPayload (see Event.UnmarshalJSON and KnownKind).
	Payload any `json:"payload,omitempty"`
}

// ID returns the event's id, EventID(e.Session, e.Seq). Each call builds
// it anew (one allocation); encoded events carry it as "id".
func (e Event) ID() ID { return EventID(e.Session, e.Seq) }

// EventID returns the id of the event numbered seq in session: the session
// id, a dash and seq in decimal, e.g. "01J9Z3NDEKTSV4RRFFQ69G5FAV-42". It
// is deterministic, so a replay reproduces it, and costs one allocation.
// Event ids are unique across sessions but do not sort by Seq; order events
// by Seq.
func EventID(session ID, seq uint64) ID {
	b := make([]byte, 0, len(session)+1+20) // 20: digits of the largest uint64
	b = append(b, session...)
	b = append(b, '-')
	b = strconv.AppendUint(b, seq, 10)
	// b is never written again, so the string stays immutable.
	return ID(unsafe.String(unsafe.SliceData(b), len(b)))
}

// IsEventID reports whether id is EventID(session, seq), without building
// it.
func IsEventID(id, session ID, seq uint64) bool {
	n := len(session)
	if len(id) < n+2 || id[n] != '-' || id[:n] != session {
		return false
	}
	for i := len(id) - 1; i > n; i-- {
		if id[i] != '0'+byte(seq%10) {
			return false
		}
		seq /= 10
		if seq == 0 {
			return i == n+1
		}
	}
	return false
}

// EventIDs makes event ids like EventID, cutting them from shared,
// append-only text blocks: one allocation per block of ids instead of one
// per id. A block is never written again where an id was cut from it, so
// the ids stay immutable. The zero value is ready; it is not safe for
// concurrent use (a session core owns one). Its blocks grow from 64
// bytes to 512, doubling, so a short session keeps a short one.
type EventIDs struct {
	buf  []byte
	next int // the size of the next block; 0 before the first
}

const (
	eventIDFirst = 64
	eventIDBlock = 512
)

// Release drops the current block (the ids cut from it stay valid) and
// keeps the size the next one will have: a session at rest holds no block,
// and one that wakes again starts where it left off.
func (a *EventIDs) Release() { a.buf = nil }

// grow starts a block with room for at least n bytes.
func (a *EventIDs) grow(n int) {
	size := max(a.next, eventIDFirst)
	a.buf = make([]byte, 0, max(size, n))
	a.next = min(2*size, eventIDBlock)
}

// ID returns EventID(session, seq).
func (a *EventIDs) ID(session ID, seq uint64) ID { return a.JoinUint(seq, string(session), "-") }

// Join returns the parts joined, cut from the same blocks as ID: the ids a
// session core derives itself ("<session>-m12", "<session>-r-<call>").
func (a *EventIDs) Join(parts ...string) ID {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.grow(n)
	}
	start := len(a.buf)
	for _, p := range parts {
		a.buf = append(a.buf, p...)
	}
	b := a.buf[start:len(a.buf):len(a.buf)]
	if len(b) == 0 {
		return ""
	}
	return ID(unsafe.String(unsafe.SliceData(b), len(b)))
}

// JoinUint returns the parts joined and followed by n in decimal, like
// Join.
func (a *EventIDs) JoinUint(n uint64, parts ...string) ID {
	l := 20
	for _, p := range parts {
		l += len(p)
	}
	if cap(a.buf)-len(a.buf) < l {
		a.grow(l)
	}
	start := len(a.buf)
	for _, p := range parts {
		a.buf = append(a.buf, p...)
	}
	a.buf = strconv.AppendUint(a.buf, n, 10)
	b := a.buf[start:len(a.buf):len(a.buf)]
	return ID(unsafe.String(unsafe.SliceData(b), len(b)))
}

// TransitionPayload records one machine transition.
type TransitionPayload struct {
	Machine string `json:"machine"`
	// Instance names the machine instance (a tool call id for tool machines).
	Instance string `json:"instance,omitempty"`
	From     string `json:"from"`
	To       string `json:"to"`
	Trigger  string `json:"trigger"`
	Guard    string `json:"guard,omitempty"`
	// Internal is set for transitions that leave no state.
	Internal bool `json:"internal,omitempty"`
}

// TurnEndPayload carries why a turn ended.
type TurnEndPayload struct {
	Reason TurnEnd `json:"reason"`
	Steps  int     `json:"steps"`
}

// StepEndPayload carries how a step ended.
type StepEndPayload struct {
	Finish FinishReason `json:"finish"`
}

// MessagePayload carries a message (user, assistant or tool).
type MessagePayload struct {
	Message Message `json:"message"`
	// SourceSeqs are the sequence numbers of the input/model.parts events
	// whose streamed parts made an assistant message (none when the reply
	// arrived whole).
	SourceSeqs []uint64 `json:"sourceSeqs,omitempty"`
}

// HeaderPayload records the header of model requests and why it was
// logged ("initial", "resume" or "change").
type HeaderPayload struct {
	Reason    string   `json:"reason"`
	Model     string   `json:"model,omitempty"`
	System    string   `json:"system,omitempty"`
	MaxTokens int      `json:"maxTokens,omitempty"`
	Tools     []string `json:"tools,omitempty"`
}

// SnapshotPayload carries a session core's snapshot (its versioned JSON
// form) and the sequence number it was taken at.
type SnapshotPayload struct {
	Seq  uint64          `json:"seq"`
	Core json.RawMessage `json:"core"`
}

// DeltaPayload carries one streamed piece of an assistant reply.
type DeltaPayload struct {
	Part StreamPart `json:"part"`
}

// ToolPayload carries a tool call and, at its end, its result.
type ToolPayload struct {
	Call   ToolCall    `json:"call"`
	Result *ToolResult `json:"result,omitempty"`
	Update string      `json:"update,omitempty"`
	// Background is set on the end of a call that ran in the background
	// (its result becomes a notification, not the turn's tool result).
	Background bool `json:"background,omitempty"`
}

// LoopPayload records what loop detection found: the detector, its level
// (warning or critical), how many times, on which call of which tool, the
// action key, the message the model gets, and for an intervention whether
// it terminated the run. Code and Message alone are what older warnings
// carried.
type LoopPayload struct {
	Code      Code   `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Detector  string `json:"detector,omitempty"`
	Level     string `json:"level,omitempty"`
	Count     int    `json:"count,omitempty"`
	Tool      string `json:"tool,omitempty"`
	CallID    string `json:"callId,omitempty"`
	Key       string `json:"key,omitempty"`
	Terminate bool   `json:"terminate,omitempty"`
}

// ApprovalState says where a call's approval stands.
type ApprovalState string

// Approval states.
const (
	// ApprovalRequested: the call waits for a person's decision.
	ApprovalRequested ApprovalState = "requested"
	// ApprovalAnswered: the person decided (Decision, Reason).
	ApprovalAnswered ApprovalState = "answered"
	// ApprovalAborted: the call was aborted while it waited.
	ApprovalAborted ApprovalState = "aborted"
)

// ApprovalPayload records a call's approval being asked for, answered or
// abandoned.
type ApprovalPayload struct {
	Call     ToolCall      `json:"call"`
	Question string        `json:"question,omitempty"`
	State    ApprovalState `json:"state"`
	Decision Decision      `json:"decision,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

// RetryPayload describes a scheduled retry of a model request.
type RetryPayload struct {
	FailedAttempt int           `json:"failedAttempt"`
	NextAttempt   int           `json:"nextAttempt"`
	MaxAttempts   int           `json:"maxAttempts"`
	Delay         time.Duration `json:"delay"`
	Code          Code          `json:"code"`
	Message       string        `json:"message"`
}

// UsagePayload carries the usage of one model request.
type UsagePayload struct {
	Usage Usage `json:"usage"`
}

// InboxPayload records a change to the inbox: messages inserted, claimed or
// discarded.
//
// In the seeds' splice terms: Start is the position in the Target list
// where the change happened, Removed how many messages left the list there
// (claimed, discarded, or the one replaced), Messages what was inserted
// (inserted, replaced) or what left (claimed, discarded), and Outcome
// "canceled" for removals a caller or a cancel made (never for claims).
type InboxPayload struct {
	Target   string    `json:"target"`
	Op       string    `json:"op"`
	Start    int       `json:"start,omitempty"`
	Removed  int       `json:"removed,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	Outcome  string    `json:"outcome,omitempty"`
}

// StatusPayload records a change of the agent's public status.
type StatusPayload struct {
	Status string `json:"status"`
}

// PromptPayload records a prompt's lifecycle.
type PromptPayload struct {
	Prompt ID     `json:"prompt"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// ErrorPayload records an error.
type ErrorPayload struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// StalePayload records an input dropped because the work it names is no
// longer outstanding (EventInputStale).
type StalePayload struct {
	// Input is the kind of the dropped input.
	Input InputKind `json:"input"`
	// Work is the work item the input named.
	Work uint64 `json:"work"`
	// Reason says why the work is no longer outstanding.
	Reason string `json:"reason"`
}

// HistoryPayload records the history being replaced whole
// (EventHistoryReplaced).
type HistoryPayload struct {
	// By names who replaced it: "error-handler" (a loop error handler that
	// asked for a retry with a new history) or "compactor".
	By string `json:"by"`
	// Messages is the new history.
	Messages []Message `json:"messages"`
}

// HookPayload records a failed hook chain (EventHookFailed).
type HookPayload struct {
	Hook    HookName `json:"hook"`
	Code    Code     `json:"code"`
	Message string   `json:"message"`
}

// StuckPayload records work that ignored cancellation past the close
// deadline (EventWorkStuck).
type StuckPayload struct {
	// Work is the stuck work item.
	Work uint64 `json:"work"`
	// What describes it, e.g. the tool it runs.
	What string `json:"what"`
}
