package vocab

import (
	"encoding/json"
	"strconv"
	"time"
)

// InputKind names an input to a session core: something a caller asked for
// or the result of work the core asked for. Every accepted input is logged
// as an event of kind "input/" + InputKind carrying the Input whole, so a
// log can be folded (re-fed to a fresh core) and verified.
type InputKind string

// Caller inputs.
const (
	InSubmit           InputKind = "submit"
	InSteer            InputKind = "steer"
	InInject           InputKind = "inject"
	InNotify           InputKind = "notify"
	InRemind           InputKind = "remind"
	InWithdraw         InputKind = "withdraw"
	InCancel           InputKind = "cancel"
	InPause            InputKind = "pause"
	InContinue         InputKind = "continue"
	InMaintenanceStart InputKind = "maintenance.start"
	InMaintenanceDone  InputKind = "maintenance.done"
	InClose            InputKind = "close"
	// InHooks says which hook slots have handlers now (Slots); the lane
	// steps it before other input whenever the set changed, so a replay
	// asks for the same hook work.
	InHooks InputKind = "hooks"
	// InOpen opens the session: the first input of every session, and
	// the first after every reopen. Config carries the session core's
	// configuration (its JSON form; the core decodes it), so a log
	// describes its session whole. Stepped on a core that a reopen folded
	// from its log, it recovers what a crash left open: every tool call
	// without a result gets an interrupted result, an open step ends
	// interrupted, an open turn ends interrupted; queued input stays
	// queued. The next model request logs request/header "resume".
	InOpen InputKind = "open"
	// InCheckpoint asks the core to record a snapshot of itself in its
	// log (a core/snapshot event), so a reopen folds from it and the tail
	// after it instead of from the first event. It must start a batch.
	InCheckpoint InputKind = "checkpoint"
	// InApprove answers a tool call awaiting approval (Approval).
	InApprove InputKind = "approve"
)

// Results of work.
const (
	// InModelParts carries streamed parts of the reply of model work Work,
	// merged: any number of deltas in one input.
	InModelParts InputKind = "model.parts"
	// InModelDone carries the whole reply of model work Work.
	InModelDone InputKind = "model.done"
	// InModelFailed carries the failure of model work Work and the jitter
	// for its backoff.
	InModelFailed InputKind = "model.failed"
	// InToolUpdate carries a progress report of tool work Work.
	InToolUpdate InputKind = "tool.update"
	// InToolDone carries the result of tool work Work.
	InToolDone InputKind = "tool.done"
	// InToolDetached: tool work Work went on in the background; Text is
	// its acknowledgement. Its tool.done comes later.
	InToolDetached InputKind = "tool.detached"
	// InHookDone carries the verdict of hook work Work.
	InHookDone InputKind = "hook.done"
	// InTimerFired: timer work Work reached its deadline.
	InTimerFired InputKind = "timer.fired"
	// InStopped: every piece of work of a closing session has ended, or
	// the close deadline passed; Stuck lists the work that ignored its
	// cancellation.
	InStopped InputKind = "stopped"
	// InSlotGranted: the capped lane granted slot request Work (see
	// EventLane); the work that waited for it starts.
	InSlotGranted InputKind = "slot.granted"
)

// Input is one input to a session core, with all of its data: replaying
// the same inputs on a fresh core gives the same events. Only the fields
// of its kind are set.
type Input struct {
	Kind InputKind `json:"kind"`
	// At is when the input happened; the core never reads a clock.
	At time.Time `json:"at"`
	// ID names a caller input (a message input's id is its message's id);
	// results of work carry the id of the work instead, in Work.
	ID ID `json:"id,omitempty"`
	// Work names the work item this input answers (model, tool, hook or
	// timer work). An input quoting work that is no longer outstanding is
	// stale: it is dropped with an input/stale event and never applied.
	Work uint64 `json:"work,omitempty"`

	// Message is the message of submit, steer, inject, notify and remind.
	Message *Message `json:"message,omitempty"`
	// Key is a reminder's key.
	Key string `json:"key,omitempty"`
	// Bypass lets a notification's step pass the max-steps guard.
	Bypass bool `json:"bypass,omitempty"`
	// Target is the id of the queued input a withdraw takes back.
	Target ID `json:"target,omitempty"`
	// Cause is a cancel's cause.
	Cause *CancelCause `json:"cause,omitempty"`
	// KeepInbox keeps queued input on cancel.
	KeepInbox bool `json:"keepInbox,omitempty"`
	// Resume asks continue to pick the conversation up even with nothing
	// queued (set by the core itself when history ends mid tool chain).
	Resume bool `json:"resume,omitempty"`

	// Parts are merged stream parts (model.parts).
	Parts []StreamPart `json:"parts,omitempty"`
	// Reply is the whole assistant reply (model.done), with Finish and
	// Usage.
	Reply  *Message     `json:"reply,omitempty"`
	Finish FinishReason `json:"finish,omitempty"`
	Usage  *Usage       `json:"usage,omitempty"`
	Err    *Error       `json:"error,omitempty"`
	Jitter float64      `json:"jitter,omitempty"`
	Result *ToolResult  `json:"result,omitempty"`
	Text   string       `json:"text,omitempty"`
	Hook   *HookVerdict `json:"hook,omitempty"`
	// Slots are the hook slots that have handlers (hooks).
	Slots []HookName `json:"slots,omitempty"`
	// Stuck lists work that ignored cancellation past the close deadline
	// (stopped), with what it was.
	Stuck []StuckWork `json:"stuck,omitempty"`
	// Config is the session core's configuration in its JSON form (open).
	Config json.RawMessage `json:"config,omitempty"`
	// Approval answers a call awaiting approval (approve).
	Approval *Approval `json:"approval,omitempty"`
}

// StuckWork is work that did not end when a closing session cancelled it.
type StuckWork struct {
	Work uint64 `json:"work"`
	What string `json:"what"`
}

// EventKind returns the kind of the event that records the input.
func (in Input) EventKind() EventKind {
	// The inputs of every step first, without hashing their kind.
	switch in.Kind {
	case InModelDone:
		return eventModelDone
	case InToolDone:
		return eventToolDone
	}
	if k, ok := inputKinds[in.Kind]; ok {
		return k
	}
	return EventKind("input/" + string(in.Kind))
}

// The kinds EventKind finds without the map: the map's own strings, so
// that an event's kind is the same string whichever way it was found.
var (
	eventModelDone = inputKinds[InModelDone]
	eventToolDone  = inputKinds[InToolDone]
)

// inputKinds holds the event kind of every known input kind, so that
// recording an input costs no string concatenation.
var inputKinds = func() map[InputKind]EventKind {
	m := map[InputKind]EventKind{}
	for _, k := range []InputKind{InSubmit, InSteer, InInject, InNotify, InRemind, InWithdraw, InCancel, InPause, InContinue,
		InMaintenanceStart, InMaintenanceDone, InClose, InHooks, InModelParts, InModelDone, InModelFailed, InToolUpdate,
		InToolDone, InToolDetached, InHookDone, InTimerFired, InStopped, InOpen, InCheckpoint, InApprove, InSlotGranted} {
		m[k] = EventKind("input/" + string(k))
	}
	return m
}()

// String renders the input compactly for logs and test failures.
func (in Input) String() string {
	s := string(in.Kind)
	if in.ID != "" {
		s += " id=" + string(in.ID)
	}
	if in.Work != 0 {
		s += " work=" + strconv.FormatUint(in.Work, 10)
	}
	if in.Message != nil {
		s += " " + strconv.Quote(in.Message.Text())
	}
	return s
}

// HookName names a hook slot a session core asks its lane to run.
type HookName string

// Hook slots.
const (
	// HookWillBeginStep is the step gate's hook (OnWillBeginStep).
	HookWillBeginStep HookName = "will-begin-step"
	// HookDidFinishStep runs after each step (OnDidFinishStep).
	HookDidFinishStep HookName = "did-finish-step"
	// HookTurnStopping runs when a turn is about to end with nothing
	// queued (OnTurnStopping).
	HookTurnStopping HookName = "turn-stopping"
	// HookBeforeSubmitPrompt judges a prompt before its turn
	// (OnBeforeSubmitPrompt).
	HookBeforeSubmitPrompt HookName = "before-submit-prompt"
	// HookRequestError is the chain of loop error handlers, consulted when
	// a model request fails (or returns an empty reply).
	HookRequestError HookName = "request-error"
	// HookBeforeTool judges a tool call before it runs (OnBeforeTool):
	// proceed (perhaps with rewritten arguments), deny, or ask a person.
	HookBeforeTool HookName = "before-tool"
	// HookAfterTool sees a call's result and may rewrite it (OnAfterTool).
	HookAfterTool HookName = "after-tool"
	// HookLoopWarning tells listeners of a loop warning (OnLoopWarning);
	// its verdict changes nothing.
	HookLoopWarning HookName = "loop-warning"
)

// HookVerdict is what a hook chain decided. Only the fields of its hook are
// meaningful; Err is set when the chain failed (an error or a panic).
type HookVerdict struct {
	// Err is the chain's failure, with its code.
	Err *Error `json:"error,omitempty"`
	// Refuse rejects the step (will-begin-step), blocks the prompt
	// (before-submit-prompt) or stops the turn (did-finish-step); Reason
	// says why.
	Refuse bool   `json:"refuse,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Messages is the step's claimed input as the will-begin-step chain
	// left it (it may rewrite or drop messages).
	Messages []Message `json:"messages,omitempty"`
	// Rewritten replaces the judged prompt (before-submit-prompt).
	Rewritten *Message `json:"rewritten,omitempty"`
	// Retry asks for another request at once with History as the new
	// history (request-error).
	Retry   bool      `json:"retry,omitempty"`
	History []Message `json:"history,omitempty"`
	// Args replaces the call's arguments (before-tool); Accesses are what
	// the call with them touches, computed by the lane (nil: computed by
	// the core from the tool's declaration).
	Args     json.RawMessage `json:"args,omitempty"`
	Accesses *Accesses       `json:"accesses,omitempty"`
	// Ask holds the call for a person's approval with this question
	// (before-tool).
	Ask string `json:"ask,omitempty"`
	// Result is the denial result the model gets (before-tool with
	// Refuse; nil: a denial naming Reason), or the rewritten result
	// (after-tool; nil keeps it).
	Result *ToolResult `json:"result,omitempty"`
}

// Decision is a person's answer to a call awaiting approval.
type Decision string

// Decisions.
const (
	// Approve runs the call as it is.
	Approve Decision = "approve"
	// Deny refuses the call: the model gets a denial naming Reason.
	Deny Decision = "deny"
	// Edit runs the call with Args instead of the model's arguments.
	Edit Decision = "edit"
)

// Approval answers the call CallID awaiting approval (input approve).
type Approval struct {
	CallID   string          `json:"callId"`
	Decision Decision        `json:"decision"`
	Reason   string          `json:"reason,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
}
