// Package session is the session core: everything about one agent session
// — the agent, turn and tool machines' instances, the history, the inbox
// and its claims, the current turn, step and tool batch, prompt
// bookkeeping, timers as data, stop and pause flags — in one pure,
// synchronous, deterministic value. It is loopchart's etcd-raft RawNode;
// adapters/engine is its Node, the only place with goroutines.
//
// The loop an adapter writes:
//
//	for {
//		in := <-inputs                // a caller's input or the result of work
//		if err := core.Step(in); err != nil {
//			// rejected: nothing changed, nothing logged; tell the caller
//		}
//		rd, ok := core.Ready()
//		if !ok {
//			continue
//		}
//		sink.Append(rd.Events)        // 1. durable before anything below
//		start(rd.Work)                // 2. start or cancel work, in order
//		deliver(rd.Results)           // 3. answer callers
//		core.Advance(rd)
//	}
//
// Every accepted input is recorded first, as an "input/<kind>" event with
// all of its data, and every event is derived from inputs only: the core
// reads no clock (each input carries its time), makes no random draw
// (jitter arrives on the input) and makes no id (ids arrive on inputs;
// event ids derive from the session and the sequence number). So the same
// inputs give the same events, which is what folding a log, verifying it,
// simulating a session and running it as a Temporal workflow rely on.
//
// Machine-to-machine events go on a run-to-completion queue and are fired
// one after the other, never nested inside another fire.
//
// Work (model requests, tool calls, hook invocations, timers, maintenance
// jobs) is referenced, not carried: a hook or a tool appears by name, and
// the adapter holds the code. Each piece of work has a number; a result
// quoting a number that is no longer outstanding (a late stream part, the
// outcome of a cancelled call, the fire of a disarmed timer) is dropped
// with an input/stale event.
package session

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// Errors returned by Step and Validate. Each matches a vocab code with
// errors.Is.
var (
	// ErrClosed: the session is closed (or closing) and takes no caller
	// input.
	ErrClosed = vocab.CodeClosed.Err()
	// ErrBadInput: the input is malformed (a missing message, a role a
	// caller may not send, an empty reminder key, a negative option).
	ErrBadInput = vocab.CodeBadInput.Err()
	// ErrDuplicateID: the input's id was already used in this session
	// (queued, running, or done: ids are never reused, so every message
	// of a history has its own).
	ErrDuplicateID = vocab.CodeDuplicateID.Err()
	// ErrNotIdle: maintenance needs an idle agent with nothing to wait for.
	ErrNotIdle = vocab.CodeNotIdle.Err()
	// ErrNotQueued: a withdraw named an input that is not queued (already
	// claimed, or never queued).
	ErrNotQueued = vocab.CodeNotQueued.Err()
)

// Hooks says which hook slots have handlers. The core asks for hook work
// only for those; an empty slot is answered in the core at no cost. The
// set may change during a session (a hooks input).
type Hooks struct {
	WillBeginStep      bool `json:"willBeginStep,omitempty"`
	DidFinishStep      bool `json:"didFinishStep,omitempty"`
	TurnStopping       bool `json:"turnStopping,omitempty"`
	BeforeSubmitPrompt bool `json:"beforeSubmitPrompt,omitempty"`
	RequestError       bool `json:"requestError,omitempty"`
	BeforeTool         bool `json:"beforeTool,omitempty"`
	AfterTool          bool `json:"afterTool,omitempty"`
	LoopWarning        bool `json:"loopWarning,omitempty"`
}

// Config is fixed for the life of a session. The zero value of every
// field but Session has a default; negative limits are errors.
type Config struct {
	// Session names the session; required.
	Session vocab.ID `json:"session"`
	// System, Model, MaxTokens and Tools go into every model request.
	System    string           `json:"system,omitempty"`
	Model     string           `json:"model,omitempty"`
	MaxTokens int              `json:"maxTokens,omitempty"`
	Tools     []vocab.ToolSpec `json:"tools,omitempty"`
	// MaxSteps ends a turn with loop.max_steps_exceeded after that many
	// steps without new input; 0 means unlimited.
	MaxSteps int `json:"maxSteps,omitempty"`
	// MaxAttempts per step, the first included; 0 means 10.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// AbortGrace is how long running tools get to settle after an abort,
	// for the turn and every tool call alike; 0 means 2.5 s.
	AbortGrace time.Duration `json:"abortGrace,omitempty"`
	// HardStop is how long an aborting turn gets before it is stopped
	// hard; 0 means 10 s.
	HardStop time.Duration `json:"hardStop,omitempty"`
	// Hooks says which hook slots have handlers.
	Hooks Hooks `json:"hooks"`
	// MaxParallelTools caps how many calls of a batch run at once; 0
	// means 10.
	MaxParallelTools int `json:"maxParallelTools,omitempty"`
	// CaseSensitivePaths turns off case folding when tool paths are
	// compared for conflicts (on by default: on a case-insensitive file
	// system "A.txt" and "a.txt" are one file).
	CaseSensitivePaths bool `json:"caseSensitivePaths,omitempty"`
	// RunTimeout is the wall-clock limit of a run, from the turn that
	// claims its prompt through every turn after it (Continue, steers,
	// notifications) until the next prompt, or the deadline, starts a new
	// run; 0 means 48 h. When it runs out during a turn, the turn is
	// cancelled with cause timeout and its prompt ends failed{run.timeout};
	// a turn that starts after it starts a new run. The deadline runs on
	// while the agent is paused, while a call awaits approval and across a
	// reopen (it is in the log); its timer is armed only while a turn
	// runs. NoRunTimeout turns it off.
	RunTimeout   time.Duration `json:"runTimeout,omitempty"`
	NoRunTimeout bool          `json:"noRunTimeout,omitempty"`
	// NoLoopDetection turns loop detection off (it is on by default): the
	// six detectors of machines/loopguard judge every batch before it runs;
	// a warning is a loop/warning event and a note on the call's result, a
	// critical loop blocks the batch, a second one ends the run failed
	// with loop.critical_repeat.
	NoLoopDetection bool `json:"noLoopDetection,omitempty"`
	// Lane says the session shares a capped lane with other sessions (a
	// Host's global lane): a model request, tool call or hook starts only
	// while the session holds one of the lane's slots. The core asks for
	// a slot (WorkSlot, a lane/slot "wait" event) when such work is due
	// and it holds none; the work waits, started in the core but not yet
	// handed out, until the slot.granted input; the core gives the slot
	// back (a lane/slot "release" event) as soon as none of that work
	// runs or waits: while it rests, yields, awaits an approval, waits
	// for a retry or is paused. Calls of tools that declare
	// vocab.ToolSpec.Waits (agents_wait) neither need nor hold a slot,
	// nor do background calls, timers and maintenance jobs.
	Lane bool `json:"lane,omitempty"`
}

// DefaultRunTimeout is a run's wall-clock limit by default
// (seed-semantics §1.8).
const DefaultRunTimeout = 48 * time.Hour

// DefaultMaxParallelTools is how many calls of a batch run at once by
// default (seed-semantics §3.6).
const DefaultMaxParallelTools = 10

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Session == "":
		return vocab.Errorf(vocab.CodeBadInput, "session: no session id")
	case c.MaxTokens < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative MaxTokens %d", c.MaxTokens)
	case c.MaxSteps < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative MaxSteps %d", c.MaxSteps)
	case c.MaxAttempts < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative MaxAttempts %d", c.MaxAttempts)
	case c.AbortGrace < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative AbortGrace %s", c.AbortGrace)
	case c.HardStop < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative HardStop %s", c.HardStop)
	case c.MaxParallelTools < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative MaxParallelTools %d", c.MaxParallelTools)
	case c.RunTimeout < 0:
		return vocab.Errorf(vocab.CodeBadInput, "session: negative RunTimeout %s (NoRunTimeout turns it off)", c.RunTimeout)
	}
	for i, t := range c.Tools {
		if t.Name == "" {
			return vocab.Errorf(vocab.CodeBadInput, "session: tool %d has no name", i)
		}
		for _, d := range t.Access {
			if d.Field == "" || !d.Mode.Valid() {
				return vocab.Errorf(vocab.CodeBadInput, "session: tool %q declares access %+v: needs a field and a mode (read, search, write, readwrite)", t.Name, d)
			}
		}
		if t.NoAccess && len(t.Access) > 0 {
			return vocab.Errorf(vocab.CodeBadInput, "session: tool %q declares accesses and none", t.Name)
		}
	}
	return nil
}

// HooksOf returns the set of slots named.
func HooksOf(slots []vocab.HookName) Hooks {
	var h Hooks
	for _, s := range slots {
		switch s {
		case vocab.HookWillBeginStep:
			h.WillBeginStep = true
		case vocab.HookDidFinishStep:
			h.DidFinishStep = true
		case vocab.HookTurnStopping:
			h.TurnStopping = true
		case vocab.HookBeforeSubmitPrompt:
			h.BeforeSubmitPrompt = true
		case vocab.HookRequestError:
			h.RequestError = true
		case vocab.HookBeforeTool:
			h.BeforeTool = true
		case vocab.HookAfterTool:
			h.AfterTool = true
		case vocab.HookLoopWarning:
			h.LoopWarning = true
		}
	}
	return h
}

func (c Config) withDefaults() Config {
	if c.AbortGrace == 0 {
		c.AbortGrace = turn.DefaultAbortGrace
	}
	if c.HardStop == 0 {
		c.HardStop = agent.DefaultHardStop
	}
	if c.MaxParallelTools == 0 {
		c.MaxParallelTools = DefaultMaxParallelTools
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = DefaultRunTimeout
	}
	return c
}

// Machines are the three built machine kinds a core fires its instances
// on. Building them costs far more than a step, so an adapter builds a few
// and lends them to cores (Use); a Machines value may serve one core at a
// time.
type Machines struct {
	agent *agent.Machine
	turn  *turn.Machine
	tool  *tool.Machine
	// payloads caches the transition payloads of the agent and turn
	// machines, boxed once: they repeat every step, and a boxed payload is
	// immutable, so events share them.
	payloads [2][][]payloadEntry // [agent, turn][transition index]
	// slabs box the payloads a step logs several times.
	slabs slabs

	// The scratch of whichever core fires on these machines: the Ready
	// being built, the run-to-completion queue and the effects buffer.
	// Lending them with the machines means a resting session holds none
	// of them, and a busy one reuses them.
	rd  Ready
	q   []fireReq
	out chart.Out
	// pendings are spare pending records; dead are those dropped in the
	// current Step, spare from the next (see recycle).
	pendings, dead   []*pending
	tools, deadTools []*tool.Instance
	calls, deadCalls []*call
	// guardCalls is loop detection's scratch list of a batch's calls;
	// hashScratch the storage it canonicalizes call arguments in.
	guardCalls      []loopguard.Call
	hashScratch     []byte
	turns, deadTurn *turn.Instance
	// turnCfg is the config of the turn a queued reqStartTurn makes;
	// reply is the normalized reply of the Step's model.done and done the
	// turn's event for it, fired by pointer (both cleared by recycle).
	turnCfg turn.Config
	reply   vocab.Message
	done    turn.ModelDone
	// submit is the agent's event of the Step's submit, fired by pointer
	// (cleared by recycle).
	submit agent.Submit
}

// payloadEntry is one boxed transition payload: a transition declared on
// a superstate is logged with the leaf it left, so an index may have a few.
type payloadEntry struct {
	from, to chart.State
	p        any
}

// NewMachines builds the three machine kinds.
func NewMachines() *Machines {
	m := &Machines{agent: agent.New(), turn: turn.New(), tool: tool.New()}
	m.payloads[0] = make([][]payloadEntry, len(agent.Definition.Transitions))
	m.payloads[1] = make([][]payloadEntry, len(turn.Definition.Transitions))
	return m
}

// Core is one session. It is not safe for concurrent use: one goroutine
// (the adapter's lane) steps it at a time.
type Core struct {
	cfg Config
	m   *Machines

	agent *agent.Instance
	turn  *turn.Instance
	// turnNo and step locate events; prompt is the running turn's prompt.
	turnNo, step int
	prompt       vocab.ID
	stepOpen     bool
	inTurn       bool
	resume       bool
	concluded    bool
	lastFinish   vocab.FinishReason
	stopReason   string
	// claim holds messages claimed from the inbox (by the turn's start or
	// a drain) until the step gate writes them to history.
	claim   []vocab.Message
	history []vocab.Message

	// model is the outstanding model work (0: none); reply assembles its
	// streamed parts, for salvage.
	model uint64
	reply Assembler
	// batch is the current tool batch in the model's order; bg holds the
	// calls of earlier batches that went on in the background.
	batch []*call
	bg    []*call
	// runDeadline is when the current run's timeout runs out (zero: no
	// run yet).
	runDeadline time.Time
	// guard is loop detection's state: the run's tool call history.
	guard loopguard.State

	work    []*pending // outstanding work, in start order
	workSeq uint64
	// slot is the lane slot request (the WorkSlot work: 0 when none) and
	// slotHeld whether the lane granted it (Config.Lane).
	slot     uint64
	slotHeld bool
	seq      uint64
	now      time.Time
	status   agent.PublicStatus
	// cause is the cancel cause of the input being stepped: prompts it
	// takes off the queue end cancelled with it.
	cause vocab.CancelCause
	// live holds the ids of queued and running inputs (prompt ids until
	// their result).
	live map[vocab.ID]struct{}
	// used holds every caller message id the session accepted (usedList
	// the same in order, for snapshots): caller ids are never reused.
	// callIDs holds every tool call id in history: a reply's calls get ids
	// unique among them.
	used     map[vocab.ID]struct{}
	usedList []vocab.ID
	callIDs  map[string]struct{}
	prompts  []vocab.ID // prompts waiting for a result, in submission order
	// yielded is the prompt whose turn ended yielded (a sessions_yield):
	// it stays open, without a result, until the next turn resumes it.
	yielded vocab.ID
	// blocking is the prompt the gate is blocking in the fire being
	// settled.
	blocking vocab.ID
	closed   bool
	// opened is set by the session's first open input; header is the
	// reason the next model request logs its header for ("initial",
	// "resume", "change"; empty: the header logged last still holds).
	// recovering is set while an open input recovers what a crash left
	// open: work then is dead, not cancelled.
	opened     bool
	header     string
	recovering bool

	ids vocab.EventIDs
}

// New returns the core of a new session with cfg, firing its machines on
// m. The agent starts idle. The adapter may take the machines back with
// Use(nil) while the session rests.
func New(cfg Config, m *Machines) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Core{cfg: cfg.withDefaults(), m: m, live: map[vocab.ID]struct{}{}, used: map[vocab.ID]struct{}{},
		callIDs: map[string]struct{}{}, status: agent.StatusIdle}
	if m == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "session: no machines")
	}
	m.reset()
	ac := agent.NewCtx(agent.Config{PromptGate: cfg.Hooks.BeforeSubmitPrompt, HardStop: c.cfg.HardStop})
	c.agent = m.agent.New(ac, &c.m.out)
	c.m.out.Reset()
	return c, nil
}

// Use lends the core machines to fire on (nil takes them back). An adapter
// that keeps many idle sessions lends one Machines to whichever core it
// steps. A Ready not advanced before the machines are taken back is
// dropped (a lane that stops on a failed append discards the core anyway).
func (c *Core) Use(m *Machines) {
	if m != nil && m != c.m {
		m.reset()
	}
	c.m = m
}

// reset empties the scratch a previous core may have left.
func (m *Machines) reset() {
	clear(m.rd.Events)
	clear(m.rd.Work)
	clear(m.rd.Results)
	m.rd.Events, m.rd.Work, m.rd.Results = m.rd.Events[:0], m.rd.Work[:0], m.rd.Results[:0]
	clear(m.q)
	m.q = m.q[:0]
	m.out.Reset()
}

// Session returns the session id.
func (c *Core) Session() vocab.ID { return c.cfg.Session }

// Config returns the session's configuration (defaults applied).
func (c *Core) Config() Config { return c.cfg }

// History returns a read-only view of the conversation.
func (c *Core) History() vocab.History { return vocab.HistoryOf(c.history) }

// Seq returns the sequence number of the last event.
func (c *Core) Seq() uint64 { return c.seq }

// Closed reports whether the session has been disposed.
func (c *Core) Closed() bool { return c.closed }

// Idle reports whether the agent rests: no turn runs, no prompt is being
// judged, no maintenance job runs, and nothing will start one without a
// new input.
func (c *Core) Idle() bool {
	return c.turn == nil && (c.m.agent.In(c.agent, agent.Ready) || c.m.agent.In(c.agent, agent.Waiting) || c.closed)
}

// State returns the agent's and the running turn's leaf states ("" when no
// turn runs).
func (c *Core) State() (agentState, turnState string) {
	agentState = string(c.agent.State())
	if c.turn != nil {
		turnState = string(c.turn.State())
	}
	return
}

// Status returns the public status: running while a turn runs, a prompt
// is judged or the session closes; StatusYielded while no turn runs and
// a prompt waits, yielded, for the turn that resumes it; idle otherwise.
func (c *Core) Status() agent.PublicStatus { return c.status }

// StatusYielded is the public status of a session resting with a yielded
// prompt (see Yielded). The agent machine itself knows only idle and
// running: yielding is the session's bookkeeping.
const StatusYielded agent.PublicStatus = "yielded"

// Yielded returns the prompt a turn ended yielded ("" when none): it has
// no result yet; the next turn (a notification's, a steer's) resumes it.
func (c *Core) Yielded() vocab.ID { return c.yielded }

// Step applies one input. An error means the input was rejected: no state
// changed and nothing was logged. Otherwise the input is recorded as an
// event at the head of everything it caused, and Ready has the result.
//
// The core copies what a caller could still change (messages, tool
// results, hook verdicts); it takes over a model reply, its usage and
// stream parts, which the adapter must not change after Step.
func (c *Core) Step(in vocab.Input) (err error) {
	if c.m == nil {
		return vocab.Errorf(vocab.CodeInternal, "session: Step without machines (see Use)")
	}
	c.m.recycle()
	if err := c.validate(&in); err != nil {
		return err
	}
	// Wall clock only: a time.Now's monotonic reading would order inputs
	// by it, while a log (and so a fold) keeps only the wall clock, which
	// a machine's clock adjustments can move backwards between two
	// readings: the fold would then derive other event times.
	if at := in.At.Round(0); at.After(c.now) {
		c.now = at
	}
	defer func() {
		if r := recover(); r != nil {
			// A bug in the core: record it rather than crash the lane.
			c.emit(vocab.EventError, vocab.ErrorPayload{Code: vocab.CodeInternal, Message: fmt.Sprint("session: panic: ", r)})
			err = nil
		}
	}()
	c.cause = vocab.CancelCause{}
	if c.stale(&in) {
		c.emit(vocab.EventInputStale, vocab.StalePayload{Input: in.Kind, Work: in.Work, Reason: "no such outstanding work"})
		return nil
	}
	copyInput(&in)
	return c.apply(&in)
}

// Validate reports whether Step would reject in, without stepping.
func (c *Core) Validate(in vocab.Input) error { return c.validate(&in) }

func (c *Core) validate(in *vocab.Input) error {
	if c.closed {
		return vocab.Errorf(vocab.CodeClosed, "session %s is closed", c.cfg.Session)
	}
	if in.At.IsZero() {
		return vocab.Errorf(vocab.CodeBadInput, "%s: input without a time", in.Kind)
	}
	if err := inJSONForm(in); err != nil { // before the checks, which then see what the log will hold
		return err
	}
	if in.Work != 0 && c.stale(in) {
		return nil // taken, and logged as input/stale: its payload does not matter
	}
	switch in.Kind {
	case vocab.InSubmit, vocab.InSteer, vocab.InInject, vocab.InNotify, vocab.InRemind:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
		if in.Message == nil {
			return vocab.Errorf(vocab.CodeBadInput, "%s: no message", in.Kind)
		}
		if in.ID == "" || in.Message.ID != "" && in.Message.ID != in.ID {
			return vocab.Errorf(vocab.CodeBadInput, "%s: the input and its message need one id", in.Kind)
		}
		switch in.Message.Role {
		case "", vocab.RoleUser:
		default:
			return vocab.Errorf(vocab.CodeBadInput, "%s: role %q: callers send user messages", in.Kind, in.Message.Role)
		}
		if in.Message.Result != nil {
			return vocab.Errorf(vocab.CodeBadInput, "%s: a user message carries no tool result", in.Kind)
		}
		for i, p := range in.Message.Parts {
			if p.Kind != vocab.PartText {
				return vocab.Errorf(vocab.CodeBadInput, "%s: part %d is %q: callers send text", in.Kind, i, p.Kind)
			}
		}
		if in.Kind == vocab.InRemind && in.Key == "" {
			return vocab.Errorf(vocab.CodeBadInput, "remind: empty key")
		}
		if _, dup := c.used[in.ID]; dup {
			return vocab.Errorf(vocab.CodeDuplicateID, "%s: id %s was already used in this session", in.Kind, in.ID)
		}
	case vocab.InWithdraw:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
		if in.Target == "" {
			return vocab.Errorf(vocab.CodeBadInput, "withdraw: no target id")
		}
		if !c.agent.Ctx.Queued(in.Target) {
			return vocab.Errorf(vocab.CodeNotQueued, "withdraw: %s is not queued", in.Target)
		}
	case vocab.InCancel:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
		if in.Cause == nil || in.Cause.Kind == "" {
			return vocab.Errorf(vocab.CodeBadInput, "cancel: no cause")
		}
	case vocab.InPause, vocab.InContinue:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
	case vocab.InClose:
	case vocab.InHooks:
		for _, h := range in.Slots {
			switch h {
			case vocab.HookWillBeginStep, vocab.HookDidFinishStep, vocab.HookTurnStopping, vocab.HookBeforeSubmitPrompt, vocab.HookRequestError,
				vocab.HookBeforeTool, vocab.HookAfterTool, vocab.HookLoopWarning:
			default:
				return vocab.Errorf(vocab.CodeBadInput, "hooks: unknown slot %q", h)
			}
		}
	case vocab.InMaintenanceStart:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
		if in.ID == "" {
			return vocab.Errorf(vocab.CodeBadInput, "maintenance.start: no id")
		}
		if !c.m.agent.In(c.agent, agent.Ready) {
			return vocab.Errorf(vocab.CodeNotIdle, "maintenance refused: the agent is %s, not idle with nothing to wait for", c.agent.State())
		}
	case vocab.InMaintenanceDone, vocab.InModelParts, vocab.InToolUpdate, vocab.InTimerFired:
		if in.Work == 0 {
			return vocab.Errorf(vocab.CodeBadInput, "%s: no work id", in.Kind)
		}
	case vocab.InSlotGranted:
		if in.Work == 0 || c.find(in.Work).kind != WorkSlot {
			return vocab.Errorf(vocab.CodeBadInput, "slot.granted: work %d is no slot request", in.Work)
		}
	case vocab.InModelDone:
		if in.Work == 0 || in.Reply == nil {
			return vocab.Errorf(vocab.CodeBadInput, "model.done: needs work and a reply")
		}
	case vocab.InModelFailed:
		if in.Work == 0 || in.Err == nil {
			return vocab.Errorf(vocab.CodeBadInput, "model.failed: needs work and an error")
		}
	case vocab.InToolDone:
		if in.Work == 0 || in.Result == nil {
			return vocab.Errorf(vocab.CodeBadInput, "tool.done: needs work and a result")
		}
	case vocab.InHookDone:
		if in.Work == 0 || in.Hook == nil {
			return vocab.Errorf(vocab.CodeBadInput, "hook.done: needs work and a verdict")
		}
	case vocab.InToolDetached:
		if in.Work == 0 {
			return vocab.Errorf(vocab.CodeBadInput, "tool.detached: no work id")
		}
	case vocab.InApprove:
		if c.closing() {
			return vocab.Errorf(vocab.CodeClosed, "session %s is closing", c.cfg.Session)
		}
		a := in.Approval
		if a == nil || a.CallID == "" {
			return vocab.Errorf(vocab.CodeBadInput, "approve: no call id")
		}
		switch a.Decision {
		case vocab.Approve, vocab.Deny:
		case vocab.Edit:
			if !json.Valid(a.Args) {
				return vocab.Errorf(vocab.CodeBadInput, "approve: edited arguments of %s are not valid JSON", a.CallID)
			}
		default:
			return vocab.Errorf(vocab.CodeBadInput, "approve: unknown decision %q", a.Decision)
		}
		if c.awaiting(a.CallID) == nil {
			return vocab.Errorf(vocab.CodeNotAwaiting, "approve: call %s is not awaiting approval", a.CallID)
		}
	case vocab.InStopped:
	case vocab.InOpen:
		cfg, err := c.openConfig(*in)
		if err != nil {
			return err
		}
		_ = cfg
	case vocab.InCheckpoint:
		if len(c.m.rd.Events)+len(c.m.rd.Work)+len(c.m.rd.Results) > 0 {
			return vocab.Errorf(vocab.CodeBadInput, "checkpoint: must start a batch")
		}
	default:
		return vocab.Errorf(vocab.CodeBadInput, "unknown input kind %q", in.Kind)
	}
	// After the checks of its kind, so that a closing session says so
	// first.
	if want := answers(in.Kind); want != "" && in.Work != 0 {
		// Outstanding (not stale), but is it what the input answers?
		if p := c.find(in.Work); p != nil && p.kind != want {
			return vocab.Errorf(vocab.CodeBadInput, "%s: work %d is %s work, not %s work", in.Kind, in.Work, p.kind, want)
		}
	}
	return encodable(in)
}

// answers returns the kind of work an input of kind k answers ("" for
// inputs that answer no work).
func answers(k vocab.InputKind) WorkKind {
	switch k {
	case vocab.InModelParts, vocab.InModelDone, vocab.InModelFailed:
		return WorkModel
	case vocab.InToolUpdate, vocab.InToolDone, vocab.InToolDetached:
		return WorkTool
	case vocab.InHookDone:
		return WorkHook
	case vocab.InTimerFired:
		return WorkTimer
	case vocab.InMaintenanceDone:
		return WorkMaintenance
	case vocab.InSlotGranted:
		return WorkSlot
	}
	return ""
}

// encodable refuses an input the log could not record. An accepted input
// is logged whole, and a durable log keeps its JSON form, so a field with
// none (a configuration or arguments that are not JSON, jitter that is
// not a number in [0, 1)) is refused whichever input kind carries it.
// Tool call arguments need no check: any bytes encode (vocab.ToolCall).
func encodable(in *vocab.Input) error {
	if !(in.Jitter >= 0 && in.Jitter < 1) { // NaN too
		return vocab.Errorf(vocab.CodeBadInput, "%s: jitter %v outside [0, 1)", in.Kind, in.Jitter)
	}
	if len(in.Config) > 0 && !json.Valid(in.Config) {
		return vocab.Errorf(vocab.CodeBadInput, "%s: the configuration is not valid JSON", in.Kind)
	}
	if in.Hook != nil && len(in.Hook.Args) > 0 && !json.Valid(in.Hook.Args) {
		return vocab.Errorf(vocab.CodeBadInput, "%s: the verdict's arguments are not valid JSON", in.Kind)
	}
	if in.Approval != nil && len(in.Approval.Args) > 0 && !json.Valid(in.Approval.Args) {
		return vocab.Errorf(vocab.CodeBadInput, "%s: the approval's arguments are not valid JSON", in.Kind)
	}
	return nil
}

func (c *Core) closing() bool { return c.m.agent.In(c.agent, agent.Closing) || c.closed }

// stale reports whether in answers work that is no longer outstanding.
func (c *Core) stale(in *vocab.Input) bool {
	// Every input that answers work (answers), but tool.detached: a
	// detach is recorded whether or not its call is still running.
	if answers(in.Kind) != "" && in.Kind != vocab.InToolDetached {
		// Work that waits for a lane slot was handed to no worker yet:
		// a result for it comes from one that died (a tool hook asked
		// again after a reopen keeps its id).
		p := c.find(in.Work)
		return p == nil || p.waiting
	}
	if in.Kind == vocab.InStopped {
		for _, p := range c.work {
			if p.kind == WorkStop {
				return false
			}
		}
		return true
	}
	return false
}

// Ready returns what the adapter must do now, in the order of its fields,
// and false when there is nothing. Call it after a batch of Steps.
func (c *Core) Ready() (Ready, bool) {
	if c.m == nil {
		return Ready{}, false
	}
	if len(c.m.rd.Events) == 0 && len(c.m.rd.Work) == 0 && len(c.m.rd.Results) == 0 {
		return Ready{}, false
	}
	return c.m.rd, true
}

// Advance tells the core that rd (the last Ready) was carried out. The
// core reuses rd's slices afterwards: the adapter must not keep them.
func (c *Core) Advance(rd Ready) {
	if c.m == nil {
		return
	}
	clear(c.m.rd.Events)
	clear(c.m.rd.Work)
	clear(c.m.rd.Results)
	c.m.rd.Events, c.m.rd.Work, c.m.rd.Results = c.m.rd.Events[:0], c.m.rd.Work[:0], c.m.rd.Results[:0]
}

// Trim releases what the core keeps for its next batch (the event-id
// block, the reply assembler, empty indexes). An adapter calls it when the
// session rests, so that an idle session holds little beyond its history.
// (The batch buffers themselves belong to the Machines lent with Use.)
func (c *Core) Trim() {
	c.ids.Release()
	if len(c.live) == 0 {
		c.live = nil // made again on use (a map keeps its buckets)
	}
	c.agent.Ctx.Trim()
	if c.model == 0 {
		c.reply = Assembler{}
	}
}

// Ready is what a batch of Steps produced. Its duties come in the order of
// its fields:
//
//  1. Events must be appended durably, in order (their sequence numbers
//     are gapless), before anything below happens. If the append fails the
//     core is ahead of its log: discard it and reopen the session from the
//     log.
//  2. Work must then be started or cancelled exactly as given, in order:
//     the adapter adds no concurrency and reorders nothing (the core
//     schedules tools).
//  3. Results must then be delivered to the callers waiting for them.
type Ready struct {
	Events  []vocab.Event
	Work    []Work
	Results []Result
}

// WorkKind says what a piece of work is.
type WorkKind string

// Kinds of work.
const (
	// WorkModel streams a model request; answered by model.parts (any
	// number) then model.done or model.failed.
	WorkModel WorkKind = "model"
	// WorkTool executes a tool call; answered by tool.update (any number)
	// then tool.done.
	WorkTool WorkKind = "tool"
	// WorkHook runs a hook chain; answered by hook.done.
	WorkHook WorkKind = "hook"
	// WorkTimer waits until Deadline; answered by timer.fired.
	WorkTimer WorkKind = "timer"
	// WorkMaintenance runs the maintenance job the caller gave with input
	// Input; answered by maintenance.done.
	WorkMaintenance WorkKind = "maintenance"
	// WorkStop cancels everything still running; answered by stopped once
	// all of it has ended (or the close deadline passed).
	WorkStop WorkKind = "stop"
	// WorkSlot asks the session's capped lane for a slot (start; answered
	// by slot.granted, which starts the work that waited for it) and gives
	// it back, granted or not (cancel). See Config.Lane.
	WorkSlot WorkKind = "slot"
)

// WorkOp says whether work starts or is cancelled.
type WorkOp string

// Work operations.
const (
	Start  WorkOp = "start"
	Cancel WorkOp = "cancel"
)

// Work is one piece of work to start or cancel. Only the fields of its
// kind are set. A cancelled model request, hook or timer is no longer
// outstanding: its later results are stale. A cancelled tool call or
// maintenance job is asked to stop but stays outstanding until it answers
// (a tool's result still counts within its abort grace); it may be
// cancelled again when its batch ends.
type Work struct {
	ID   uint64   `json:"id"`
	Op   WorkOp   `json:"op"`
	Kind WorkKind `json:"kind"`
	// Cause is why work is cancelled; nil when no cause was given (a
	// disarmed timer, work the turn no longer needs).
	Cause *vocab.CancelCause `json:"cause,omitempty"`

	// Request is the model request (model).
	Request *vocab.Request `json:"request,omitempty"`
	// Call is the tool call (tool).
	Call *vocab.ToolCall `json:"call,omitempty"`
	// Hook names the hook chain to run and Info the step it runs for.
	Hook vocab.HookName `json:"hook,omitempty"`
	Info StepInfo       `json:"info,omitzero"`
	// Messages are the step's claimed messages (will-begin-step).
	Messages []vocab.Message `json:"messages,omitempty"`
	// Prompt is the prompt to judge (before-submit-prompt).
	Prompt *vocab.Message `json:"prompt,omitempty"`
	// History is the conversation so far, read-only (hooks).
	History vocab.History `json:"-"`
	// Err and Attempt describe the failure (request-error).
	Err     *vocab.Error `json:"error,omitempty"`
	Attempt int          `json:"attempt,omitempty"`
	// Result is the call's result an after-tool chain sees (hook).
	Result *vocab.ToolResult `json:"result,omitempty"`
	// Loop is the loop warning listeners hear of (loop-warning hook).
	Loop *vocab.LoopPayload `json:"loop,omitempty"`
	// Deadline is when the timer fires (timer).
	Deadline time.Time `json:"deadline,omitzero"`
	// Input is the id of the caller input that asked for the work
	// (maintenance: the job to run).
	Input vocab.ID `json:"input,omitempty"`
}

// StepInfo locates a step.
type StepInfo struct {
	Session vocab.ID `json:"session"`
	Turn    int      `json:"turn"`
	Step    int      `json:"step"`
	// First is set on the turn's first step.
	First bool `json:"first,omitempty"`
}

// ResultKind says what a Result answers.
type ResultKind string

// Result kinds.
const (
	// Accepted acknowledges a caller input: its events are durable.
	Accepted ResultKind = "accepted"
	// PromptEnded carries a prompt's one result.
	PromptEnded ResultKind = "prompt"
)

// Result answers a caller, keyed by the id of its input.
type Result struct {
	Kind   ResultKind          `json:"kind"`
	Input  vocab.ID            `json:"input"`
	Prompt *vocab.PromptResult `json:"prompt,omitempty"`
}

// pending is an outstanding piece of work and what the core needs to know
// when it answers.
type pending struct {
	id   uint64
	kind WorkKind
	// turn is the turn the work belongs to (0: the session's).
	turn int
	// claimed are the messages a will-begin-step hook holds.
	claimed []vocab.Message
	// failure is what a request-error hook was asked about, with the empty
	// reply it may stand for.
	failure *vocab.Input
	// timer identifies a timer's owner.
	machine, instance, name string
	seq                     uint64
	// work is the work as started (its hook, prompt, job input), re-emitted
	// by Restore.
	work Work
	// waiting is set while the work waits for a lane slot: started in the
	// core, not yet handed to the adapter (see Config.Lane).
	waiting bool
}

func (c *Core) find(id uint64) *pending {
	for _, p := range c.work {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (c *Core) drop(id uint64) {
	for i, p := range c.work {
		if p.id == id {
			c.work = append(c.work[:i], c.work[i+1:]...)
			c.m.dead = append(c.m.dead, p) // reused from the next Step on
			return
		}
	}
}

// start records new outstanding work and asks the adapter to start it.
func (c *Core) start(p *pending, w Work) {
	c.workSeq++
	// Completed in the caller's p, which does not escape, then copied
	// once into a pooled record (see recycle): a second copy of the Work
	// into the record would cost a write barrier per pointer field while
	// the collector marks.
	p.id, w.ID, w.Op, w.Kind = c.workSeq, c.workSeq, Start, p.kind
	p.work = w
	q := c.m.newPending(p)
	c.work = append(c.work, q)
	if !c.slotHeld && c.needsSlot(q) {
		q.waiting = true // handed out by slot.granted (see lane)
		return
	}
	c.m.rd.Work = append(c.m.rd.Work, w)
}

// cancel asks the adapter to cancel outstanding work id; it is no longer
// outstanding.
func (c *Core) cancel(id uint64, cause vocab.CancelCause) {
	p := c.find(id)
	if p == nil {
		return
	}
	c.drop(id)
	if c.recovering || p.waiting {
		return // it died with the process that ran it, or never started
	}
	w := Work{ID: id, Op: Cancel, Kind: p.kind}
	if cause != (vocab.CancelCause{}) {
		cc := cause
		w.Cause = &cc
	}
	c.m.rd.Work = append(c.m.rd.Work, w)
}

// emit appends an event. Its time is the time of the input being stepped.
func (c *Core) emit(kind vocab.EventKind, payload any) {
	c.seq++
	// Written in place, every field: building the 96-byte Event aside
	// cost a copy into the buffer.
	evs := c.m.rd.Events
	if len(evs) == cap(evs) {
		evs = append(evs, vocab.Event{})
	} else {
		evs = evs[:len(evs)+1]
	}
	c.m.rd.Events = evs
	ev := &evs[len(evs)-1]
	ev.Session, ev.Seq, ev.At, ev.Kind, ev.Payload = c.cfg.Session, c.seq, c.now, kind, payload
	if c.inTurn {
		ev.Turn, ev.Step = c.turnNo, c.step
	} else {
		ev.Turn, ev.Step = 0, 0
	}
}

func (c *Core) result(r Result) { c.m.rd.Results = append(c.m.rd.Results, r) }

func (c *Core) ack(in *vocab.Input) {
	if in.ID != "" {
		c.result(Result{Kind: Accepted, Input: in.ID})
	}
}

// bug records a refusal by a machine of an event the core itself made:
// never expected, never silent.
func (c *Core) bug(err error) {
	if err != nil {
		c.emit(vocab.EventError, vocab.ErrorPayload{Code: vocab.CodeOf(err), Message: err.Error()})
	}
}

// slabs box the payloads a step logs more than once (see
// vocab.PayloadSlab). They travel with the Machines, so with the pool the
// lane keeps them in: sessions that take turns on them share their
// arrays, and a session at rest holds only the payloads its log keeps.
type slabs struct {
	inputs      vocab.PayloadSlab[vocab.Input]
	transitions vocab.PayloadSlab[vocab.TransitionPayload]
	tools       vocab.PayloadSlab[vocab.ToolPayload]
	messages    vocab.PayloadSlab[vocab.MessagePayload]
	usage       vocab.PayloadSlab[vocab.UsagePayload]
}
