// Package engine is loopchart's session lane: one goroutine per session
// owns that session's agent, turn and tool machines, takes inputs and effect
// results from one queue, fires them in order, writes every transition and
// domain event to the Sink before acting on it, and executes the effects the
// machines ask for — model requests (after the step gate), tool calls,
// timers on an injected clock, drains.
//
// The engine is the etcd-raft "Node" around the pure machines' "RawNode":
// the only place with goroutines. Machines are built once per lane and
// reused for every turn and tool call.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// Options configure an Engine. Provider is required; everything else has a
// default.
type Options struct {
	// Session names the session; a new ID when empty.
	Session vocab.ID
	// Provider answers model requests.
	Provider vocab.Provider
	// Tools executes tool calls; an empty registry when nil.
	Tools *tools.Registry
	// Clock drives timers (retry waits, abort grace, hard stop); the real
	// clock when nil.
	Clock clock.Clock
	// IDs makes event and message ids; ULIDs when nil.
	IDs vocab.IDSource
	// Sink receives every event before the engine acts on it; a MemoryLog
	// when nil.
	Sink Sink
	// Logger logs engine diagnostics; discarded when nil.
	Logger *slog.Logger
	// Jitter draws the retry backoff jitter in [0, 1); math/rand when nil.
	Jitter func() float64

	// System, Model and MaxTokens go into every request.
	System    string
	Model     string
	MaxTokens int

	// MaxSteps ends a turn with loop.max_steps_exceeded after that many
	// steps without new input; 0 (the default) means unlimited.
	MaxSteps int
	// MaxAttempts per step, the first included; 0 means 10.
	MaxAttempts int
	// AbortGrace is how long running tools get after an abort; 0 means 2.5 s.
	AbortGrace time.Duration
	// HardStop is how long an aborting turn gets before it is stopped hard;
	// 0 means 10 s.
	HardStop time.Duration

	// Hooks are the extension points; nil fields are skipped.
	Hooks Hooks
}

// StepInfo describes the step a hook runs for.
type StepInfo struct {
	Session vocab.ID
	Turn    int
	Step    int
	// First is set on the turn's first step.
	First bool
}

// GateContext is what an OnWillBeginStep hook sees and may change: the
// messages claimed for this step (rewrite them in place) and the refusal.
type GateContext struct {
	StepInfo
	// Claimed are the input messages about to be written to history.
	Claimed []vocab.Message
	// History is a copy of the conversation so far (read-only).
	History []vocab.Message
	// Reject refuses the step: the turn ends blocked.
	Reject bool
	// Reason explains a rejection.
	Reason string
}

// FailureContext is what a request-error handler sees: the failure and a
// copy of the history it may rebuild.
type FailureContext struct {
	StepInfo
	Attempt int
	Err     *vocab.Error
	History []vocab.Message
}

// Hooks are the engine's extension points. Each runs on a worker
// goroutine with a context cancelled when the turn is aborted, never on the
// lane, so a slow hook cannot stall inputs.
type Hooks struct {
	// WillBeginStep is the step gate's hook (OnWillBeginStep). An error
	// fails the turn with code hook.failed.
	WillBeginStep func(ctx context.Context, g *GateContext) error
	// DidFinishStep runs after each step; stop ends the turn after it.
	DidFinishStep func(ctx context.Context, s StepInfo) (stop bool, reason string, err error)
	// TurnStopping runs when a turn is about to end with nothing queued; it
	// may keep the turn alive only by steering input in (Engine.Steer).
	TurnStopping func(ctx context.Context, s StepInfo)
	// BeforeSubmitPrompt judges a prompt before its turn starts
	// (OnBeforeSubmitPrompt): block drops it (the prompt ends blocked);
	// rewritten, when non-nil, replaces it.
	BeforeSubmitPrompt func(ctx context.Context, p vocab.Message) (block bool, reason string, rewritten *vocab.Message, err error)
	// RequestError is consulted when a model request fails, before the retry
	// policy: returning retry with a rebuilt history re-enters thinking at
	// once with that history.
	RequestError func(ctx context.Context, f FailureContext) (history []vocab.Message, retry bool, err error)
}

// ErrClosed is returned by every method after Close.
var ErrClosed = vocab.CodeClosed.Err()

// Engine runs one session. All methods are safe for concurrent use.
type Engine struct {
	opt     Options
	session vocab.ID
	log     *slog.Logger

	// The lane's inbox: a mailbox rather than a channel, so producers never
	// block and a burst of posts (a fast stream's parts) costs one wake-up
	// of the lane, not one per item.
	mbMu     sync.Mutex
	mbItems  []item
	mbSpare  []item
	mbClosed bool
	mbSignal chan struct{}
	laneDone chan struct{}
	closeReq chan struct{}
	stopOnce sync.Once
	workers  sync.WaitGroup // tasks (and timers) in flight
	pool     sync.WaitGroup // worker goroutines, idle ones included
	tasks    chan func()
	rootCtx  context.Context
	rootStop context.CancelCauseFunc

	counters

	// Everything below is owned by the lane goroutine.
	agentM *agent.Machine
	turnM  *turn.Machine
	toolM  *tool.Machine
	outs   []*chart.Out // free effect buffers

	agent   *agent.Instance
	turn    *turn.Instance
	turnCtx context.Context
	turnEnd context.CancelCauseFunc
	turnNo  int
	prompt  vocab.ID
	step    int
	claim   []vocab.Message // claimed, not yet written to history
	bypass  bool
	history []vocab.Message
	seq     uint64

	reply      assembler // the assistant message being streamed
	modelStop  context.CancelCauseFunc
	modelGen   uint64
	batch      []vocab.ToolCall
	next       int // next call of batch to start
	tools      map[string]*toolRun
	timers     map[timerKey]clock.Timer
	maint      context.CancelCauseFunc
	prompts    map[vocab.ID]*promptWait
	idleWaits  []chan struct{}
	lastFinish vocab.FinishReason
	stopReason string
	closing    bool
	discarded  []vocab.ID
	lastCancel vocab.CancelCause
	specs      []vocab.ToolSpec
}

type toolRun struct {
	inst   *tool.Instance
	call   vocab.ToolCall
	cancel context.CancelCauseFunc
}

type timerKey struct {
	machine  string
	instance string
	name     string
	seq      uint64
}

type promptWait struct {
	done   chan struct{}
	result vocab.PromptResult
}

// item is one unit of work for the lane.
type item interface{}

// New starts a session lane.
func New(opt Options) (*Engine, error) {
	if opt.Provider == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: no provider")
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real()
	}
	if opt.IDs == nil {
		opt.IDs = vocab.NewULIDSource(nil)
	}
	if opt.Sink == nil {
		opt.Sink = NewMemoryLog()
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
	if opt.MaxSteps < 0 || opt.MaxAttempts < 0 || opt.AbortGrace < 0 || opt.HardStop < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: negative limit in options")
	}
	e := &Engine{
		opt:      opt,
		session:  opt.Session,
		log:      opt.Logger,
		mbSignal: make(chan struct{}, 1),
		tasks:    make(chan func()),
		laneDone: make(chan struct{}),
		closeReq: make(chan struct{}),
		agentM:   agent.New(),
		turnM:    turn.New(),
		toolM:    tool.New(),
		tools:    map[string]*toolRun{},
		timers:   map[timerKey]clock.Timer{},
		prompts:  map[vocab.ID]*promptWait{},
		specs:    opt.Tools.Specs(),
	}
	if e.session == "" {
		e.session = opt.IDs.NewID(opt.Clock.Now())
	}
	e.rootCtx, e.rootStop = context.WithCancelCause(context.Background())
	e.agent = e.agentM.New(agent.NewCtx(agent.Config{PromptGate: true, HardStop: opt.HardStop}), e.getOut())
	go e.lane()
	return e, nil
}

// Session returns the session id.
func (e *Engine) Session() vocab.ID { return e.session }

// post hands an item to the lane. It fails once the lane has stopped.
func (e *Engine) post(it item) error {
	e.mbMu.Lock()
	if e.mbClosed {
		e.mbMu.Unlock()
		return ErrClosed
	}
	e.inflight.Add(1)
	e.mbItems = append(e.mbItems, it)
	e.mbMu.Unlock()
	select {
	case e.mbSignal <- struct{}{}:
	default: // the lane is already signalled
	}
	return nil
}

// take swaps out everything posted so far. The returned slice is valid
// until the next take.
func (e *Engine) take() []item {
	e.mbMu.Lock()
	batch := e.mbItems
	e.mbItems = e.mbSpare[:0]
	e.mbMu.Unlock()
	e.mbSpare = batch
	return batch
}

// refuse answers every queued call with ErrClosed and drops the rest
// (results of cancelled work).
func (e *Engine) refuse(batch []item) {
	for i, it := range batch {
		if c, ok := it.(callItem); ok {
			c.done <- ErrClosed
		}
		batch[i] = nil
		e.inflight.Add(-1)
	}
}

// call posts a request and waits for the lane's answer.
func (e *Engine) call(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	if err := e.post(callItem{f: f, done: done}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-e.laneDone:
		select {
		case err := <-done:
			return err
		default:
			return ErrClosed
		}
	}
}

type callItem struct {
	f    func() error
	done chan error
}

// spawn runs f on a worker goroutine tracked for Close. Workers are
// reused: a goroutine that finished its task waits for the next one (up to
// maxIdle of them), so a step's model stream and tool calls do not each pay
// for a new goroutine and its stack growth.
func (e *Engine) spawn(f func()) {
	e.workers.Add(1)
	e.active.Add(1)
	select {
	case e.tasks <- f: // an idle worker took it
		return
	default:
	}
	e.pool.Add(1)
	go e.worker(f)
}

const maxIdle = 4

func (e *Engine) worker(f func()) {
	defer e.pool.Done()
	for {
		f()
		e.active.Add(-1)
		e.workers.Done()
		if e.idleN.Add(1) > maxIdle {
			e.idleN.Add(-1)
			return
		}
		select {
		case f = <-e.tasks:
			e.idleN.Add(-1)
		case <-e.rootCtx.Done():
			e.idleN.Add(-1)
			return
		}
	}
}

// lane is the session's single writer.
func (e *Engine) lane() {
	defer close(e.laneDone)
	for {
		select {
		case <-e.mbSignal:
			batch := e.take()
			for i, it := range batch {
				batch[i] = nil
				if e.agentM.IsFinal(e.agent) {
					e.refuse(batch[i+1:])
					e.inflight.Add(-1)
					break
				}
				e.handle(it)
				e.inflight.Add(-1)
			}
		case <-e.closeReq:
			e.closeReq = nil
			e.beginClose()
		}
		if e.agentM.IsFinal(e.agent) {
			e.finishClose()
			return
		}
		e.checkIdle()
	}
}

func (e *Engine) handle(it item) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("engine: lane recovered from a panic", "panic", r)
			// A caller waiting on this item gets an answer, not a hang.
			if c, ok := it.(callItem); ok {
				select {
				case c.done <- vocab.Errorf(vocab.CodeInternal, "engine: panic: %v", r):
				default:
				}
			}
			func() {
				defer func() { _ = recover() }() // the sink itself may be what panics
				e.emit(vocab.EventError, vocab.ErrorPayload{Code: vocab.CodeInternal, Message: fmt.Sprint(r)})
			}()
		}
	}()
	switch it := it.(type) {
	case callItem:
		it.done <- it.f()
	case modelPart:
		e.onModelPart(it)
	case modelEnd:
		e.onModelEnd(it)
	case gateResult:
		e.onGate(it)
	case toolDone:
		e.onToolDone(it)
	case toolUpdate:
		e.onToolUpdate(it)
	case timerFired:
		e.onTimer(it)
	case promptVerdict:
		e.onPromptVerdict(it)
	case stepHooksDone:
		e.onStepHooksDone(it)
	case workersGone:
		e.fireAgent(agent.Closed{})
	default:
		e.log.Error("engine: unknown item", "type", fmt.Sprintf("%T", it))
	}
}

// ---- public inputs ----

// Pending is a submitted prompt.
type Pending struct {
	ID vocab.ID
	w  *promptWait
}

// Wait blocks until the prompt ends and returns how it ended.
func (p *Pending) Wait(ctx context.Context) (vocab.PromptResult, error) {
	select {
	case <-p.w.done:
		return p.w.result, nil
	case <-ctx.Done():
		return vocab.PromptResult{}, context.Cause(ctx)
	}
}

// Done is closed when the prompt has ended.
func (p *Pending) Done() <-chan struct{} { return p.w.done }

// Submit queues a prompt for its own turn.
func (e *Engine) Submit(msg vocab.Message) (*Pending, error) {
	msg = e.stamp(msg, vocab.SourceInput)
	w := &promptWait{done: make(chan struct{})}
	err := e.call(context.Background(), func() error {
		e.prompts[msg.ID] = w
		if err := e.fireAgent(agent.Submit{Message: msg}); err != nil {
			delete(e.prompts, msg.ID)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Pending{ID: msg.ID, w: w}, nil
}

// Steer queues input for the running turn's next step (or the next turn
// after an abort) and wakes the agent.
func (e *Engine) Steer(msg vocab.Message) (vocab.ID, error) {
	msg = e.stamp(msg, vocab.SourceSteer)
	return msg.ID, e.input(agent.Steer{Message: msg})
}

// Inject queues input for the next step without waking the agent.
func (e *Engine) Inject(msg vocab.Message) (vocab.ID, error) {
	msg = e.stamp(msg, vocab.SourceSteer)
	return msg.ID, e.input(agent.Inject{Message: msg})
}

// Notify queues a notification for the next step and wakes the agent;
// bypass lets that step pass the max-steps guard.
func (e *Engine) Notify(msg vocab.Message, bypass bool) (vocab.ID, error) {
	msg = e.stamp(msg, vocab.SourceNotify)
	msg.BypassMaxSteps = bypass
	return msg.ID, e.input(agent.Notify{Message: msg, BypassMaxSteps: bypass})
}

// Remind queues a reminder under key, replacing a queued one with the same
// key.
func (e *Engine) Remind(key string, msg vocab.Message) (vocab.ID, error) {
	msg = e.stamp(msg, vocab.SourceReminder)
	msg.Key = key
	return msg.ID, e.input(agent.Remind{Key: key, Message: msg})
}

// Cancel aborts the running turn or maintenance job with cause and clears
// the inbox unless keepInbox. Cancelling an idle agent only clears the
// inbox.
func (e *Engine) Cancel(cause vocab.CancelCause, keepInbox bool) error {
	if cause.Kind == "" {
		cause.Kind = vocab.CancelUser
	}
	return e.call(context.Background(), func() error {
		e.lastCancel = cause
		return e.fireAgent(agent.Cancel{Cause: cause, KeepInbox: keepInbox})
	})
}

// Drop takes a still-queued message off the inbox. It reports false when
// the message was already claimed (or never queued). A dropped prompt ends
// cancelled.
func (e *Engine) Drop(id vocab.ID) (bool, error) {
	dropped := false
	err := e.call(context.Background(), func() error {
		e.lastCancel = vocab.CancelCause{Kind: vocab.CancelUser, Reason: "dropped"}
		if err := e.fireAgent(agent.Drop{ID: id}); err != nil {
			if errors.Is(err, vocab.CodeGuardRejected.Err()) {
				return nil
			}
			return err
		}
		dropped = true
		return nil
	})
	return dropped, err
}

// Pause stops the agent from starting turns; a running turn ends at its
// next drain.
func (e *Engine) Pause() error { return e.input(agent.Pause{}) }

// Continue undoes Pause.
func (e *Engine) Continue() error { return e.input(agent.Continue{}) }

func (e *Engine) input(ev chart.Event) error {
	return e.call(context.Background(), func() error { return e.fireAgent(ev) })
}

func (e *Engine) stamp(msg vocab.Message, src vocab.Source) vocab.Message {
	if msg.ID == "" {
		msg.ID = e.opt.IDs.NewID(e.opt.Clock.Now())
	}
	if msg.Role == "" {
		msg.Role = vocab.RoleUser
	}
	if msg.Source == "" {
		msg.Source = src
	}
	return msg
}

// RunMaintenance runs job while the agent is idle (public status stays
// idle). It is refused with code agent.not_idle unless the agent is idle
// with nothing to wait for. Inputs that wake the agent meanwhile are
// latched and served when the job ends.
func (e *Engine) RunMaintenance(ctx context.Context, job func(ctx context.Context) error) error {
	var jobCtx context.Context
	stop := func() bool { return false }
	// Wait for the lane's answer whatever ctx does: once the lane has
	// started the job, only this call can end it. A ctx already done when
	// the lane gets to the request refuses it there.
	if err := e.call(context.Background(), func() error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err := e.fireAgent(agent.MaintenanceStart{}); err != nil {
			return vocab.Errorf(vocab.CodeNotIdle, "maintenance refused: the agent is not idle (%v)", err)
		}
		var cancel context.CancelCauseFunc
		jobCtx, cancel = context.WithCancelCause(e.rootCtx)
		// The caller's ctx ends the job too (cancelled with its cause).
		stop = context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		e.maint = cancel
		return nil
	}); err != nil {
		return err
	}
	jobErr := runSafely(jobCtx, job)
	stop()
	if err := e.call(context.Background(), func() error {
		if e.maint != nil {
			e.maint(nil)
			e.maint = nil
		}
		return e.fireAgent(agent.MaintenanceDone{})
	}); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return jobErr
}

func runSafely(ctx context.Context, job func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = vocab.Errorf(vocab.CodeInternal, "maintenance job panicked: %v", r)
		}
	}()
	return job(ctx)
}

// WhenIdle waits until the agent is idle with nothing queued, following
// hand-offs from one turn to the next.
func (e *Engine) WhenIdle(ctx context.Context) error {
	ch := make(chan struct{})
	if err := e.call(ctx, func() error { e.idleWaits = append(e.idleWaits, ch); return nil }); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-e.laneDone:
		return ErrClosed
	}
}

// idle reports whether the agent rests: no turn runs, no prompt is being
// gated, and nothing will start one without a new input. Queued input that
// does not wake the agent (injected messages, reminders, a kept inbox after
// a cancel, anything while paused) waits for the next wake, so it does not
// count; the agent machine starts a turn itself whenever work can run.
func (e *Engine) idle() bool {
	return e.turn == nil && (e.agentM.In(e.agent, agent.Ready) || e.agentM.In(e.agent, agent.Waiting))
}

func (e *Engine) checkIdle() {
	if len(e.idleWaits) == 0 || !e.idle() {
		return
	}
	for _, ch := range e.idleWaits {
		close(ch)
	}
	e.idleWaits = nil
}

// Close aborts what runs with cause disposed, stops every worker and timer,
// and waits for the lane to end. No goroutine of the engine survives it.
func (e *Engine) Close(ctx context.Context) error {
	e.stopOnce.Do(func() { close(e.closeReq) })
	select {
	case <-e.laneDone:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

type workersGone struct{}

func (e *Engine) beginClose() {
	if e.closing {
		return
	}
	e.closing = true
	if err := e.fireAgent(agent.Close{}); err != nil {
		e.log.Error("engine: close", "err", err)
	}
}

// cleanup answers the agent's Cleanup effect: cancel everything, stop the
// timers, and report Closed once every worker has returned.
func (e *Engine) cleanup() {
	disposed := vocab.CancelCause{Kind: vocab.CancelDisposed}
	e.lastCancel = disposed
	e.rootStop(disposed)
	// Close the open turn now (a second abort ends it at once, filling
	// missing tool results), so the log never keeps a turn open.
	e.hardStop(disposed)
	for k := range e.timers {
		e.stopTimer(k)
	}
	// Every worker's context is cancelled; wait for them, answering calls
	// that arrive meanwhile and dropping the results of cancelled work.
	done := make(chan struct{})
	go func() {
		e.workers.Wait()
		e.pool.Wait() // idle workers leave on the cancelled root context
		close(done)
	}()
	for {
		select {
		case <-done:
			e.refuse(e.take())
			e.handle(workersGone{})
			return
		case <-e.mbSignal:
			e.refuse(e.take())
		}
	}
}

func (e *Engine) finishClose() {
	for id, w := range e.prompts {
		e.resolve(id, w, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &vocab.CancelCause{Kind: vocab.CancelDisposed}})
	}
	for _, ch := range e.idleWaits {
		close(ch)
	}
	e.idleWaits = nil
	if l, ok := e.opt.Sink.(interface{ Close() }); ok {
		l.Close()
	}
	// Refuse inputs that raced with the close; later posts fail at once.
	e.mbMu.Lock()
	e.mbClosed = true
	e.mbMu.Unlock()
	e.refuse(e.take())
}
