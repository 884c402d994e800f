package temporal

import (
	"encoding/json"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Names of the workflow, its activities, updates, signal and queries, as
// registered on a worker and called by a Client.
const (
	// WorkflowName is the session workflow.
	WorkflowName = "loopchart.Session"

	// ActivityModel streams one model request; ActivityTool runs one tool
	// call; ActivityHook runs one hook chain.
	ActivityModel = "loopchart.Model"
	ActivityTool  = "loopchart.Tool"
	ActivityHook  = "loopchart.Hook"
	// ActivityPut and ActivityGet move content to and from the content
	// store (local activities); ActivityExport hands events to the export
	// sink.
	ActivityPut    = "loopchart.PutContent"
	ActivityGet    = "loopchart.GetContent"
	ActivityExport = "loopchart.Export"

	// UpdateSubmit, UpdateSteer, UpdateInject, UpdateNotify, UpdateWithdraw
	// and UpdateApprove are the updates a caller's inputs travel as; each
	// is validated against the session core before it is accepted.
	UpdateSubmit   = "submit"
	UpdateSteer    = "steer"
	UpdateInject   = "inject"
	UpdateNotify   = "notify"
	UpdateWithdraw = "withdraw"
	UpdateApprove  = "approve"

	// SignalControl carries cancel, pause, continue and close, in the
	// order they were sent (one channel, so two controls of one workflow
	// task keep their order).
	SignalControl = "loopchart.control"

	// QueryStatus, QueryEvents, QueryPrompt and QueryHistory read the
	// session.
	QueryStatus  = "status"
	QueryEvents  = "events"
	QueryPrompt  = "prompt"
	QueryHistory = "history"

	// VersionChange is the change id of the core-behaviour version, read
	// once per run with workflow.GetVersion.
	VersionChange = "loopchart-core"
	// CoreVersion is the core-behaviour version this build runs: the
	// machines' definitions and the session core's code. A build that
	// changes what the core does with the same inputs raises it and keeps
	// the old behaviour for runs that recorded the old version; a session
	// moves to the new one at its next continue-as-new.
	CoreVersion = 1
)

// Defaults of Options.
const (
	DefaultModelTimeout     = 10 * time.Minute
	DefaultToolTimeout      = time.Hour
	DefaultHookTimeout      = time.Minute
	DefaultHeartbeatTimeout = 10 * time.Second
	DefaultCloseWait        = 30 * time.Second
	DefaultContinueAfter    = 4096
	DefaultEventWindow      = 2048
	DefaultActivityAttempts = 3
)

// Options tune how a session runs on Temporal. The zero value of every
// field means its default; negative values are errors.
type Options struct {
	// ModelTimeout bounds one model request (start to close); default 10 min.
	ModelTimeout time.Duration `json:"modelTimeout,omitempty"`
	// ToolTimeout bounds one tool call; default 1 h.
	ToolTimeout time.Duration `json:"toolTimeout,omitempty"`
	// HookTimeout bounds one hook chain; default 1 min.
	HookTimeout time.Duration `json:"hookTimeout,omitempty"`
	// HeartbeatTimeout is how long a model request or tool call may go
	// without a heartbeat (they beat from a ticker, three times per
	// timeout): it bounds both how soon a dead worker's call is noticed and
	// how soon a cancellation reaches a running call; default 10 s.
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout,omitempty"`
	// CloseWait is how long a closing session waits for its cancelled
	// work before it records what is stuck; default 30 s.
	CloseWait time.Duration `json:"closeWait,omitempty"`
	// ContinueAfter is the history length (events) after which a run
	// continues as new at its next boundary with no work in flight; the
	// server's own suggestion (4,096 events or 4 MB) also triggers it.
	// Default 4,096.
	ContinueAfter int `json:"continueAfter,omitempty"`
	// EventWindow is how many of the latest loopchart events the workflow
	// keeps for the events query; default 2,048.
	EventWindow int `json:"eventWindow,omitempty"`
	// ActivityAttempts is how many times Temporal runs a model request or
	// hook whose activity timed out (a lost worker), and a tool call that
	// declared itself idempotent; default 3. Provider errors are never
	// retried by Temporal: the turn machine retries them.
	ActivityAttempts int `json:"activityAttempts,omitempty"`
	// Export hands every event to the worker's export sink (an activity,
	// at least once, keyed by session and sequence number).
	Export bool `json:"export,omitempty"`
}

// Validate reports the first invalid field.
func (o Options) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ModelTimeout", o.ModelTimeout}, {"ToolTimeout", o.ToolTimeout}, {"HookTimeout", o.HookTimeout},
		{"HeartbeatTimeout", o.HeartbeatTimeout}, {"CloseWait", o.CloseWait}} {
		if d.v < 0 {
			return vocab.Errorf(vocab.CodeBadInput, "temporal: %s %v is negative", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"ContinueAfter", o.ContinueAfter}, {"EventWindow", o.EventWindow}, {"ActivityAttempts", o.ActivityAttempts}} {
		if n.v < 0 {
			return vocab.Errorf(vocab.CodeBadInput, "temporal: %s %d is negative", n.name, n.v)
		}
	}
	return nil
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ModelTimeout, DefaultModelTimeout)
	def(&o.ToolTimeout, DefaultToolTimeout)
	def(&o.HookTimeout, DefaultHookTimeout)
	def(&o.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&o.CloseWait, DefaultCloseWait)
	if o.ContinueAfter == 0 {
		o.ContinueAfter = DefaultContinueAfter
	}
	if o.EventWindow == 0 {
		o.EventWindow = DefaultEventWindow
	}
	if o.ActivityAttempts == 0 {
		o.ActivityAttempts = DefaultActivityAttempts
	}
	return o
}

// Params start a session workflow: Config on a new session, Carry on a
// run that continues one.
type Params struct {
	// Config is the session core's configuration (session.ConfigJSON).
	Config json.RawMessage `json:"config,omitempty"`
	// Slots are the hook slots with handlers on the workers.
	Slots   []vocab.HookName `json:"slots,omitempty"`
	Options Options          `json:"options"`
	// Carry is what a continued run takes over from the run before.
	Carry *Carry `json:"carry,omitempty"`
}

// Carry is what continue-as-new hands to the next run: references to the
// core's snapshot and the event window (never the transcript itself), the
// inputs received but not yet stepped, and the prompts' outcomes.
type Carry struct {
	Snapshot []Ref            `json:"snapshot"`
	Window   []Ref            `json:"window,omitempty"`
	Inbox    []vocab.Input    `json:"inbox,omitempty"`
	Prompts  []PromptState    `json:"prompts,omitempty"`
	Runs     int              `json:"runs"`
	Slots    []vocab.HookName `json:"slots,omitempty"`
}

// Ack answers an accepted input: its id and the sequence number of the
// event that recorded it.
type Ack struct {
	ID  vocab.ID `json:"id"`
	Seq uint64   `json:"seq"`
}

// Control is a cancel, pause, continue or close.
type Control struct {
	// ID names the input (a ULID when the client makes it).
	ID        vocab.ID           `json:"id,omitempty"`
	Kind      vocab.InputKind    `json:"kind"`
	Cause     *vocab.CancelCause `json:"cause,omitempty"`
	KeepInbox bool               `json:"keepInbox,omitempty"`
}

// Approval answers a tool call that awaits a person.
type Approval struct {
	ID       vocab.ID       `json:"id"`
	Approval vocab.Approval `json:"approval"`
}

// Withdrawal takes back a queued input.
type Withdrawal struct {
	ID     vocab.ID `json:"id"`
	Target vocab.ID `json:"target"`
}

// PromptState is what the prompt query answers: Ended is false while the
// prompt is queued or running.
type PromptState struct {
	ID     vocab.ID            `json:"id"`
	Ended  bool                `json:"ended"`
	Result *vocab.PromptResult `json:"result,omitempty"`
}

// Status is what the status query answers.
type Status struct {
	Session vocab.ID `json:"session"`
	Agent   string   `json:"agent"`
	Turn    string   `json:"turn,omitempty"`
	Status  string   `json:"status"`
	Seq     uint64   `json:"seq"`
	Idle    bool     `json:"idle"`
	Closed  bool     `json:"closed"`
	// Run counts the runs of the session's workflow (1 + continue-as-new).
	Run int `json:"run"`
	// Approvals are the calls awaiting a person.
	Approvals []session.PendingApproval `json:"approvals,omitempty"`
}

// EventsPage is one page of the events query.
type EventsPage struct {
	Events []vocab.Event `json:"events"`
	// Next is the sequence number to ask for next; Last the latest
	// event's.
	Next uint64 `json:"next"`
	Last uint64 `json:"last"`
}

// HistoryPage is one page of the history query.
type HistoryPage struct {
	Messages []vocab.Message `json:"messages"`
	Next     int             `json:"next"`
	Total    int             `json:"total"`
}

// Summary is the workflow's result once the session is closed.
type Summary struct {
	Session vocab.ID `json:"session"`
	Seq     uint64   `json:"seq"`
	Runs    int      `json:"runs"`
}

// ModelArgs is one model request: the request without its messages, which
// are referenced through a transcript (see put: pages of message
// references, so a request's arguments stay small however long the
// conversation).
type ModelArgs struct {
	Session  vocab.ID      `json:"session"`
	Work     uint64        `json:"work"`
	Request  vocab.Request `json:"request"`
	Messages []Ref         `json:"messages"` // transcript pages
}

// ModelResult is a whole reply.
type ModelResult struct {
	Reply  *vocab.Message     `json:"reply,omitempty"`
	Finish vocab.FinishReason `json:"finish,omitempty"`
	Usage  *vocab.Usage       `json:"usage,omitempty"`
}

// ModelFailure is the detail of a failed model request's error.
type ModelFailure struct {
	Err   *vocab.Error `json:"error"`
	Usage *vocab.Usage `json:"usage,omitempty"`
}

// ToolArgs is one tool call.
type ToolArgs struct {
	Session vocab.ID       `json:"session"`
	Work    uint64         `json:"work"`
	Call    vocab.ToolCall `json:"call"`
}

// HookArgs is one hook chain to run; its history is referenced.
type HookArgs struct {
	Session  vocab.ID           `json:"session"`
	Work     uint64             `json:"work"`
	Hook     vocab.HookName     `json:"hook"`
	Info     session.StepInfo   `json:"info"`
	Messages []vocab.Message    `json:"messages,omitempty"`
	Prompt   *vocab.Message     `json:"prompt,omitempty"`
	History  []Ref              `json:"history,omitempty"` // transcript pages
	Err      *vocab.Error       `json:"error,omitempty"`
	Attempt  int                `json:"attempt,omitempty"`
	Call     *vocab.ToolCall    `json:"call,omitempty"`
	Result   *vocab.ToolResult  `json:"result,omitempty"`
	Loop     *vocab.LoopPayload `json:"loop,omitempty"`
}

// ExportArgs are events to export.
type ExportArgs struct {
	Session vocab.ID      `json:"session"`
	Events  []vocab.Event `json:"events"`
}
