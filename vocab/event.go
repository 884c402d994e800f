package vocab

import "time"

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
	EventPrompt       EventKind = "prompt/state"
	EventStatus       EventKind = "agent/status"
	EventError        EventKind = "agent/error"
)

// Event is one audited fact about a session. Seq is dense and increasing per
// session; Turn and Step are zero outside a turn or step.
type Event struct {
	ID      ID        `json:"id"`
	Session ID        `json:"session"`
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    EventKind `json:"kind"`
	Turn    int       `json:"turn,omitempty"`
	Step    int       `json:"step,omitempty"`
	// Payload is one of the *Payload types of this package, or nil.
	Payload any `json:"payload,omitempty"`
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
type InboxPayload struct {
	Target   string    `json:"target"`
	Op       string    `json:"op"`
	Messages []Message `json:"messages,omitempty"`
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
