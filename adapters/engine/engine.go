// Package engine is loopchart's session lane: the etcd-raft "Node" around
// the pure session core (machines/session), and the only place with
// goroutines. It holds the mailbox, the workers that stream model replies,
// run tools, hooks and maintenance jobs, the timers on an injected clock,
// the event sink and the callers' waiters. Its loop is the core's:
//
//	Step each input of a batch → Ready → append Events to the sink →
//	only then start Work → deliver Results → Advance
//
// The lane has no goroutine of its own. Whoever posts to an idle session
// drives it: a caller's Submit steps the core on the caller's goroutine
// and returns once the input's events are durable; a worker that finished
// its tool call steps the result in itself, and when that yields exactly
// one new piece of work (the next model request) it runs that too, so a
// step whose provider and tool answer synchronously costs no goroutine
// hand-off. A caller of Run is such a worker too: the prompt's first
// request, which Submit starts on a goroutine, runs on the caller's, and
// so does the rest of a synchronous turn. An idle session holds no
// goroutine and no machines (they are lent from a pool while the lane
// runs).
//
// Files: lane.go is the loop (mailbox, drive, flush); run.go is Run, the
// synchronous prompt call; worker.go registers, launches and finishes
// work (and arms timers); workctx.go is a piece of work's context;
// model.go runs model requests; tool.go runs tool calls; hook.go runs
// hooks and maintenance jobs; close.go stops the session.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"iter"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Options configure an Engine. Provider is required; everything else has a
// default. Negative limits are errors.
type Options struct {
	// Session names the session; a new ID when empty.
	Session vocab.ID
	// Core, when set, is the session to run on: a core folded from the
	// session's log (store.Fold), whose session id wins over Session. New
	// then steps an open input on it, which recovers what the process that
	// wrote the log left open; the Sink must continue that log.
	Core *session.Core
	// CheckpointEvery steps a checkpoint input (a snapshot of the core,
	// recorded in the log) at the start of the first batch after that
	// many events since the last one; 0 means never.
	CheckpointEvery int
	// Provider answers model requests.
	Provider vocab.Provider
	// Tools executes tool calls; an empty registry when nil.
	Tools *tools.Registry
	// Clock drives timers (retry waits, abort grace, hard stop, the stream
	// watchdog) and stamps inputs; the real clock when nil.
	Clock clock.Clock
	// IDs makes the ids of caller inputs; ULIDs when nil.
	IDs vocab.IDSource
	// Sink makes events durable before the lane acts on them; an
	// eventlog.Memory when nil.
	Sink eventlog.Sink
	// Window is how many recent events stay in memory for live
	// subscribers (older ones are read back from the Sink when it is an
	// eventlog.Reader); 0 means 64 when the Sink can be read back, else
	// eventlog.DefaultWindow. An eventlog.Memory sink holds every event
	// in memory already: subscribers read it, and no window is kept.
	Window int
	// Logger logs lane diagnostics; discarded when nil.
	Logger *slog.Logger
	// Jitter draws the retry backoff jitter in [0, 1); math/rand when nil.
	Jitter func() float64
	// StreamFlush is the least time between two stream-part inputs of one
	// model request (the first one too); 0 means none: parts go to the
	// core as they come, merged into one input while the lane is busy.
	// A reply that streams faster than StreamFlush arrives whole at its
	// end (a cancel then salvages only what reached the core).
	StreamFlush time.Duration
	// FirstTokenTimeout bounds how long a model request's stream may stay
	// silent before its first part (of any kind: text, thinking, a tool
	// call, usage); 0 means DefaultFirstTokenTimeout (10 minutes, as
	// reasoning models think silently for minutes). ChunkTimeout bounds
	// the silence between two parts; 0 means DefaultChunkTimeout (5
	// minutes). Both run on Clock; the time the lane spends handing a
	// part to the session does not count. When one runs out, the
	// request's context is cancelled with an llm.stream_idle error as its
	// cause and the request fails with it: a retryable failure the retry
	// policy retries like a broken connection. Parts that arrived before
	// stay streamed.
	//
	// A limit cannot be negative. To switch one limit off, give it a
	// duration no reply can reach (math.MaxInt64 is safe: it never comes
	// due); NoStreamWatchdog switches both off, and then no timer is
	// armed at all.
	FirstTokenTimeout time.Duration
	ChunkTimeout      time.Duration
	NoStreamWatchdog  bool

	// System, Model and MaxTokens go into every request.
	System    string
	Model     string
	MaxTokens int
	// MaxSteps ends a turn with loop.max_steps_exceeded after that many
	// steps without new input; 0 (the default) means unlimited.
	MaxSteps int
	// MaxAttempts per step, the first included; 0 means 10.
	MaxAttempts int
	// AbortGrace is how long running tools get after an abort; 0 means
	// 2.5 s.
	AbortGrace time.Duration
	// HardStop is how long an aborting turn gets before it is stopped
	// hard; 0 means 10 s.
	HardStop time.Duration
	// MaxParallelTools caps how many calls of one step run at once; 0
	// means 10. Calls that conflict (see vocab.Accesses) never run
	// together whatever the cap.
	MaxParallelTools int
	// CaseSensitivePaths turns off case folding when the scheduler
	// compares tool paths.
	CaseSensitivePaths bool
	// RunTimeout is a run's wall-clock limit (see session.Config); 0
	// means 48 h. NoRunTimeout turns it off.
	RunTimeout   time.Duration
	NoRunTimeout bool
	// NoLoopDetection turns loop detection off (see session.Config).
	NoLoopDetection bool
	// Lane, when set, is a global lane the session shares with others:
	// its model requests, tool calls and hooks run only while it holds
	// one of the lane's slots (see session.Config.Lane and GlobalLane).
	Lane *GlobalLane

	// Hooks are the hook chains, by slot. Slots reports which of them have
	// handlers now (nil: every slot with a non-nil func); the lane checks
	// it before each batch of inputs, so handlers may come and go.
	Hooks map[vocab.HookName]HookFunc
	Slots func() []vocab.HookName

	// Resume, with Core, says the core was folded from the log of a lane
	// that Unload stopped at rest. When the log has not grown since
	// (Resume.Seq) and the configuration is the same, New steps no open
	// input: the session goes on as if it had never been unloaded, and
	// its log does not show the reload. Otherwise New reopens it as
	// usual (an open input, which recovers).
	Resume *Resume
}

// HookFunc runs one hook chain. ctx is cancelled when the turn (or the
// prompt being judged) is cancelled. The verdict's Err reports a failure;
// a panic is recovered into one.
type HookFunc func(ctx context.Context, call HookCall) vocab.HookVerdict

// HookCall is what a hook chain is asked.
type HookCall struct {
	Hook vocab.HookName
	Info StepInfo
	// Messages are the step's claimed messages (will-begin-step): a copy
	// the chain may edit and return in the verdict.
	Messages []vocab.Message
	// Prompt is the prompt to judge (before-submit-prompt).
	Prompt *vocab.Message
	// History is the conversation so far, read-only.
	History vocab.History
	// Err and Attempt describe a failed request (request-error).
	Err     *vocab.Error
	Attempt int
	// Call is the tool call to judge (before-tool) or that ran
	// (after-tool): a copy. Result is its result (after-tool): a copy the
	// chain may rewrite and return in the verdict.
	Call   *vocab.ToolCall
	Result *vocab.ToolResult
	// Loop is the loop warning (loop-warning).
	Loop *vocab.LoopPayload
}

// StepInfo locates a step.
type StepInfo struct {
	Session vocab.ID
	Turn    int
	Step    int
	// First is set on the turn's first step.
	First bool
}

// Errors of the lane, matched with errors.Is.
var (
	// ErrClosed: the session is closed.
	ErrClosed = vocab.CodeClosed.Err()
	// ErrReentrant: a tool or hook called a blocking method (Close,
	// WhenIdle) of its own session with the context it was given; it would
	// wait for itself.
	ErrReentrant = vocab.CodeReentrant.Err()
	// ErrAppendFailed: the sink refused events; the session stopped and
	// can only be reopened from its log.
	ErrAppendFailed = vocab.CodeAppendFailed.Err()
	// ErrStuck: work ignored its cancellation past the close deadline.
	ErrStuck = vocab.CodeStuck.Err()
)

// defaultIDs makes ids for every engine without an IDSource of its own
// (one ULID source is safe for concurrent use, and it costs 8 KB).
var defaultIDs = vocab.NewULIDSource(nil)

// smallWindow is the default window when the sink can be read back.
const smallWindow = 64

// machines are lent to whichever session's lane runs.
var machines = sync.Pool{New: func() any { return session.NewMachines() }}

// Engine runs one session. All methods are safe for concurrent use.
type Engine struct {
	// dog is a spare stream watchdog for this engine's next model request
	// (see runModel). halted is set once the session stopped (stop,
	// Unload), before the spare's timer is stopped: a request that puts
	// its watchdog back after that stops the timer itself.
	dog     atomic.Pointer[watchdog]
	halted  atomic.Bool
	opt     Options
	session vocab.ID
	log     *slog.Logger
	sink    eventlog.Sink
	feed    *eventlog.Feed
	rootCtx context.Context
	stopAll context.CancelCauseFunc
	// workCtx is the parent of every piece of work's context, marked with
	// the engine (see reentrant).
	workCtx context.Context

	mu      sync.Mutex
	box     []item
	driving bool
	idle    bool
	err     error // sticky: the session stopped (closed or failed)
	waiters []chan struct{}
	slots   []vocab.HookName // the hook slots last stepped in
	// async is the sink when it can append asynchronously; inflight are
	// its appends started and not yet waited for (owned by the driver).
	async    eventlog.AsyncSink
	inflight []inflight
	// checkpointed is the core's sequence number at its last checkpoint
	// (or when the lane took it over).
	checkpointed uint64
	// restAt is when the lane last came to rest idle; config is the
	// configuration its open input records (for Unload).
	restAt time.Time
	config [sha256.Size]byte

	// owned by the driver
	core    *session.Core
	spare   []item
	acks    smallMap[vocab.ID, chan error]
	prompts smallMap[vocab.ID, *promptWait]
	jobs    map[vocab.ID]*job // rare: a Go map

	spawned atomic.Int64

	// running is the work started and not finished, armed timers
	// included; drained is made by workDone while work runs and closed
	// when none is left. Both are under mu: a worker's result is posted
	// and the worker finished in one hold of it (see post).
	running smallMap[uint64, *worker]
	drained chan struct{}
	force   chan struct{} // closed to stop waiting for stuck workers
	forceMu sync.Once
	stuck   []vocab.StuckWork
	done    chan struct{} // closed when the session has stopped
}

// New starts a session. It starts no goroutine.
func New(opt Options) (*Engine, error) {
	if opt.Provider == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: no provider")
	}
	if opt.Window < 0 || opt.StreamFlush < 0 || opt.CheckpointEvery < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: negative Window, StreamFlush or CheckpointEvery")
	}
	if opt.FirstTokenTimeout < 0 || opt.ChunkTimeout < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: negative FirstTokenTimeout or ChunkTimeout (NoStreamWatchdog switches the watchdog off)")
	}
	if opt.FirstTokenTimeout == 0 {
		opt.FirstTokenTimeout = DefaultFirstTokenTimeout
	}
	if opt.ChunkTimeout == 0 {
		opt.ChunkTimeout = DefaultChunkTimeout
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real()
	}
	if opt.IDs == nil {
		opt.IDs = defaultIDs
	}
	if opt.Sink == nil {
		opt.Sink = eventlog.NewMemory()
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Jitter == nil {
		opt.Jitter = rand.Float64
	}
	if opt.Tools == nil {
		opt.Tools, _ = tools.NewRegistry()
	}
	if opt.Session == "" {
		opt.Session = opt.IDs.NewID(opt.Clock.Now())
	}
	if opt.Core != nil {
		opt.Session = opt.Core.Session()
	}
	cfg := session.Config{Session: opt.Session, System: opt.System, Model: opt.Model, MaxTokens: opt.MaxTokens,
		Tools: opt.Tools.Specs(), MaxSteps: opt.MaxSteps, MaxAttempts: opt.MaxAttempts, AbortGrace: opt.AbortGrace, HardStop: opt.HardStop,
		MaxParallelTools: opt.MaxParallelTools, CaseSensitivePaths: opt.CaseSensitivePaths,
		RunTimeout: opt.RunTimeout, NoRunTimeout: opt.NoRunTimeout, NoLoopDetection: opt.NoLoopDetection, Lane: opt.Lane != nil}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	open, err := session.ConfigJSON(cfg)
	if err != nil {
		return nil, err
	}
	core := opt.Core
	if core == nil {
		m := machines.Get().(*session.Machines)
		core, err = session.New(cfg, m)
		machines.Put(m)
		if err != nil {
			return nil, err
		}
	}
	core.Use(nil)
	var backing eventlog.Reader
	if r, ok := opt.Sink.(eventlog.Reader); ok {
		backing = r
		if opt.Window == 0 {
			// Subscribers behind a small window read the sink back: the
			// session keeps few events in memory of its own.
			opt.Window = smallWindow
		}
	}
	feed, err := eventlog.NewFeed(opt.Window, backing)
	if err != nil {
		return nil, err
	}
	e := &Engine{opt: opt, session: opt.Session, log: opt.Logger, sink: opt.Sink, feed: feed, core: core, checkpointed: core.Seq(),
		idle: true, force: make(chan struct{}), done: make(chan struct{})}
	e.async, _ = opt.Sink.(eventlog.AsyncSink)
	e.config, e.restAt = sha256.Sum256(open), opt.Clock.Now()
	e.rootCtx, e.stopAll = context.WithCancelCause(context.Background())
	// Work contexts do not descend from rootCtx: a child of a cancellable
	// context registers with it (a map insert and delete per piece of
	// work); stop cancels every running piece itself (cancelAll).
	e.workCtx = context.WithValue(context.Background(), ctxKey{}, e)
	if r := opt.Resume; r != nil && opt.Core != nil && r.Seq == core.Seq() && r.Config == e.config {
		// Unloaded at rest and nothing changed: no open input.
		e.slots, e.checkpointed = r.Slots, min(r.Checkpointed, core.Seq())
		feed.Skip(core.Seq()) // its events are in the sink
		return e, nil
	}
	// The open input heads every session's log with its configuration
	// (and, on a reopen, recovers): New returns once it is durable.
	if err := e.call(item{in: vocab.Input{Kind: vocab.InOpen, At: opt.Clock.Now(), ID: e.newID(), Config: open}}); err != nil {
		e.stop(err)
		return nil, err
	}
	return e, nil
}

// Session returns the session id.
func (e *Engine) Session() vocab.ID { return e.session }

// Pending is a submitted prompt.
type Pending struct {
	ID vocab.ID
	w  *promptWait
}

type promptWait struct {
	done   chan struct{}
	result vocab.PromptResult
	err    error
}

// Wait blocks until the prompt ends and returns how it ended. When the
// session stopped on a failure (its log refused events) the error says so.
func (p *Pending) Wait(ctx context.Context) (vocab.PromptResult, error) {
	select {
	case <-p.w.done:
		return p.w.result, p.w.err
	case <-ctx.Done():
		return vocab.PromptResult{}, context.Cause(ctx)
	}
}

// Done is closed when the prompt has ended.
func (p *Pending) Done() <-chan struct{} { return p.w.done }

// Submit queues a prompt for its own turn. It returns once the prompt is
// recorded; a re-used id is refused with input.duplicate_id.
func (e *Engine) Submit(msg vocab.Message) (*Pending, error) {
	growStack() // this caller may drive the lane through its prompt's start
	w := &promptWait{done: make(chan struct{})}
	id, err := e.message(vocab.InSubmit, msg, "", false, w)
	if err != nil {
		return nil, err
	}
	return &Pending{ID: id, w: w}, nil
}

// Steer queues input for the running turn's next step (or the next turn
// after an abort) and wakes the agent.
func (e *Engine) Steer(msg vocab.Message) (vocab.ID, error) {
	return e.message(vocab.InSteer, msg, "", false, nil)
}

// Inject queues input for the next step without waking the agent.
func (e *Engine) Inject(msg vocab.Message) (vocab.ID, error) {
	return e.message(vocab.InInject, msg, "", false, nil)
}

// Notify queues a notification for the next step and wakes the agent;
// bypass lets that step pass the max-steps guard.
func (e *Engine) Notify(msg vocab.Message, bypass bool) (vocab.ID, error) {
	return e.message(vocab.InNotify, msg, "", bypass, nil)
}

// Remind queues a reminder under key, replacing a queued one with the same
// key.
func (e *Engine) Remind(key string, msg vocab.Message) (vocab.ID, error) {
	return e.message(vocab.InRemind, msg, key, false, nil)
}

func (e *Engine) message(kind vocab.InputKind, msg vocab.Message, key string, bypass bool, w *promptWait) (vocab.ID, error) {
	return e.messageAs(kind, msg, key, bypass, w, nil)
}

// messageAs is message posted by self (see callAs).
func (e *Engine) messageAs(kind vocab.InputKind, msg vocab.Message, key string, bypass bool, w *promptWait, self *worker) (vocab.ID, error) {
	now := e.opt.Clock.Now()
	if msg.ID == "" {
		msg.ID = e.opt.IDs.NewID(now)
	}
	in := vocab.Input{Kind: kind, At: now, ID: msg.ID, Message: &msg, Key: key, Bypass: bypass}
	return msg.ID, e.callAs(context.Background(), item{in: in, wait: w}, self)
}

// Approve answers the tool call callID awaiting approval: approve, deny
// (with a reason the model sees) or edit (run it with args instead). It
// returns once the decision is durable; a call that is not awaiting
// approval is an error matching vocab.CodeNotAwaiting.
func (e *Engine) Approve(callID string, d vocab.Decision, reason string, args json.RawMessage) error {
	in := vocab.Input{Kind: vocab.InApprove, At: e.opt.Clock.Now(), ID: e.newID(),
		Approval: &vocab.Approval{CallID: callID, Decision: d, Reason: reason, Args: slices.Clone(args)}}
	return e.call(item{in: in})
}

// Approvals lists the tool calls awaiting approval, in the model's order.
func (e *Engine) Approvals(ctx context.Context) ([]session.PendingApproval, error) {
	out := new([]session.PendingApproval)
	if err := e.query(ctx, func(c *session.Core) { *out = c.Approvals() }); err != nil {
		return nil, err
	}
	return *out, nil
}

// Withdraw takes a still-queued input (prompt, steer, injected message,
// notification, reminder) off the inbox. It reports false when the input
// was already claimed, or never queued. A withdrawn prompt ends cancelled.
func (e *Engine) Withdraw(id vocab.ID) (bool, error) {
	err := e.call(item{in: vocab.Input{Kind: vocab.InWithdraw, At: e.opt.Clock.Now(), ID: e.newID(), Target: id}})
	if err != nil {
		if vocab.CodeOf(err) == vocab.CodeNotQueued {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Cancel aborts the running turn, the prompt being judged or the
// maintenance job with cause, and clears the inbox unless keepInbox.
// Cancelling an idle agent only clears the inbox.
func (e *Engine) Cancel(cause vocab.CancelCause, keepInbox bool) error {
	if cause.Kind == "" {
		cause.Kind = vocab.CancelUser
	}
	return e.call(item{in: vocab.Input{Kind: vocab.InCancel, At: e.opt.Clock.Now(), ID: e.newID(), Cause: &cause, KeepInbox: keepInbox}})
}

// Pause stops the agent from starting turns; a running turn ends at its
// next drain, and what is queued stays queued.
func (e *Engine) Pause() error {
	return e.call(item{in: vocab.Input{Kind: vocab.InPause, At: e.opt.Clock.Now(), ID: e.newID()}})
}

// Continue undoes Pause; a conversation that stopped owing the model a
// reply (its history ends with tool results) is picked up again.
func (e *Engine) Continue() error {
	return e.call(item{in: vocab.Input{Kind: vocab.InContinue, At: e.opt.Clock.Now(), ID: e.newID()}})
}

func (e *Engine) newID() vocab.ID { return e.opt.IDs.NewID(e.opt.Clock.Now()) }

// RunMaintenance runs job while the agent is idle (public status stays
// idle). It is refused with code agent.not_idle unless the agent is idle
// with nothing to wait for. Inputs that wake the agent meanwhile are
// latched and served when the job ends. ctx cancels the job.
func (e *Engine) RunMaintenance(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return vocab.Errorf(vocab.CodeBadInput, "maintenance: no job")
	}
	j := &job{fn: fn, ctx: ctx, done: make(chan error, 1)}
	id := e.newID()
	if err := e.call(item{in: vocab.Input{Kind: vocab.InMaintenanceStart, At: e.opt.Clock.Now(), ID: id}, job: j}); err != nil {
		return err
	}
	// Exactly one answer comes: the job's own result once it ran, or the
	// reason the session stopped before it started.
	return <-j.done
}

// WhenIdle waits until the agent is idle with nothing queued that would
// wake it, following hand-offs from one turn to the next.
func (e *Engine) WhenIdle(ctx context.Context) error {
	if reentrant(ctx, e) {
		return vocab.Errorf(vocab.CodeReentrant, "WhenIdle called from a tool or hook of its own session")
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return nil
	}
	if e.idle && !e.driving && len(e.box) == 0 {
		e.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	e.waiters = append(e.waiters, ch)
	e.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Events streams the session's events from sequence number from (0: the
// first), then live ones, until ctx is done or the session has stopped and
// everything was delivered. A subscriber that fell behind the in-memory
// window, with a sink that cannot be read back, gets a final error
// matching eventlog.ErrDropped: never a silent gap.
func (e *Engine) Events(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	return e.feed.Subscribe(ctx, from)
}

// History returns a read-only view of the conversation.
func (e *Engine) History(ctx context.Context) (vocab.History, error) {
	// A query given up (ctx) may still run on the lane later: its result
	// is read only when it ran.
	h := new(vocab.History)
	if err := e.query(ctx, func(c *session.Core) { *h = c.History() }); err != nil {
		return vocab.History{}, err
	}
	return *h, nil
}

// State reports the agent's and the running turn's leaf states ("" when no
// turn runs).
func (e *Engine) State(ctx context.Context) (agentState, turnState string, err error) {
	r := new([2]string)
	if err := e.query(ctx, func(c *session.Core) { r[0], r[1] = c.State() }); err != nil {
		return "", "", err
	}
	return r[0], r[1], nil
}

// Seq reports the sequence number of the last event.
func (e *Engine) Seq(ctx context.Context) (uint64, error) {
	n := new(uint64)
	if err := e.query(ctx, func(c *session.Core) { *n = c.Seq() }); err != nil {
		return 0, err
	}
	return *n, nil
}

// Status reports the public status: "idle", "running", or "yielded" (at
// rest with a prompt a yield left open; see session.Core.Yielded).
func (e *Engine) Status(ctx context.Context) (string, error) {
	st := new(string)
	if err := e.query(ctx, func(c *session.Core) { *st = string(c.Status()) }); err != nil {
		return "", err
	}
	return *st, nil
}

// Snapshot returns the core's versioned snapshot (JSON), taken between two
// batches of inputs.
func (e *Engine) Snapshot(ctx context.Context) ([]byte, error) {
	r := new(struct {
		b   []byte
		err error
	})
	if err := e.query(ctx, func(c *session.Core) { r.b, r.err = c.Snapshot() }); err != nil {
		return nil, err
	}
	return r.b, r.err
}

// Stats counts the lane's moving parts, for tests that must know when a
// session has settled.
type Stats struct {
	// Workers counts running workers (model streams, tools, hooks);
	// Timers counts armed timers (retry waits, graces, the run's timeout:
	// they hold no goroutine); Jobs counts running maintenance jobs (the
	// caller's code, which the caller controls).
	Workers int
	Timers  int
	Jobs    int
	// Driving is set while a goroutine runs the lane.
	Driving bool
	// Queued counts inputs waiting in the mailbox.
	Queued int
	// Spawned counts the goroutines the lane has started for work since
	// the session began (work a worker, or a Run caller, ran itself is
	// not counted: it cost no hand-off).
	Spawned int64
}

// Stats returns the lane's counters.
func (e *Engine) Stats() Stats {
	var st Stats
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running.Each(func(_ uint64, wk *worker) {
		switch wk.w.Kind {
		case session.WorkMaintenance:
			st.Jobs++
		case session.WorkTimer:
			st.Timers++
		default:
			st.Workers++
		}
	})
	st.Driving, st.Queued = e.driving, len(e.box)
	st.Spawned = e.spawned.Load()
	return st
}

type ctxKey struct{}

// reentrant reports whether ctx is one the lane gave a tool or hook of e.
func reentrant(ctx context.Context, e *Engine) bool {
	v, _ := ctx.Value(ctxKey{}).(*Engine)
	return v == e
}
