// Package agentsvc is loopchart's public API: AgentLoopService runs one
// agent session whose every phase is a named state of the agent, turn and
// tool statecharts, and lets an application submit prompts, steer, cancel
// and watch every transition go by.
//
// The step gate runs before every model request: stop flags, the optional
// max-steps guard, queued input consumed, OnWillBeginStep hooks run — only
// then is the request built from the current history and tools. Ordered
// hook slots (OnWillBeginStep, OnDidFinishStep, OnBeforeSubmitPrompt),
// turn-stopping listeners and loop error handlers are the extension
// points. Each submitted prompt ends as a value: completed, failed,
// cancelled or blocked.
//
// Re-entrancy: tools and hooks run on goroutines of their own (or on the
// goroutine of a Run caller) and may call any input method of their own
// session (Steer, Inject, Cancel…). A tool or hook that calls a method
// that waits for the session (Close, WhenIdle, Run) with the context it
// was given gets an error with code agent.reentrant instead of waiting
// for itself forever.
package agentsvc

import (
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// Sink makes a session's events durable. Append gets the events of each
// batch in order, with gapless sequence numbers; the session starts no
// work caused by them before Append returns nil. It must copy what it
// keeps. A non-nil error stops the session (agent.append_failed): it can
// then only be reopened from its log. A Sink that can also read its events
// back (a method Since(ctx, from) iter.Seq2[vocab.Event, error]) serves
// Events replays older than the in-memory window.
type Sink interface {
	Append(ctx context.Context, batch []vocab.Event) error
}

// Options configure a service. Provider is required; every limit has a
// default, and a negative limit is an error.
type Options struct {
	Provider vocab.Provider
	Tools    []vocab.Tool
	// Clock drives retry waits, abort grace and hard-stop timers; the real
	// clock when nil. Tests pass a fake.
	Clock clock.Clock
	// IDs makes ids; ULIDs when nil.
	IDs vocab.IDSource
	// Session names a new session; a new id when empty. (Open names the
	// session it opens.)
	Session vocab.ID
	// Sink keeps every event; an in-memory log when nil. Open writes to
	// its store instead.
	Sink Sink
	// CheckpointEvery records a snapshot of the session core in the log
	// after that many events, so a reopen folds from it and the tail
	// after it; 0 means 10,000 for a session Open made and never for
	// others; negative is an error.
	CheckpointEvery int
	// Window is how many recent events stay in memory for Events; 0 means
	// 64 when the Sink can read its events back, else 1024. The default
	// in-memory Sink holds every event itself, so Events reads it and no
	// window is kept.
	Window int
	Logger *slog.Logger
	// Jitter draws the retry jitter in [0, 1); math/rand when nil.
	Jitter func() float64

	System    string
	Model     string
	MaxTokens int
	// MaxSteps per turn without new input; 0 means unlimited (the default).
	MaxSteps int
	// MaxAttempts per step including the first; 0 means 10.
	MaxAttempts int
	// AbortGrace for running tools after a cancel; 0 means 2.5 s.
	AbortGrace time.Duration
	// HardStop after a cancel; 0 means 10 s.
	HardStop time.Duration
	// StreamFlush is the least time between two streamed-part inputs of a
	// reply; 0 means none (parts are merged only while the session is
	// busy).
	StreamFlush time.Duration
	// FirstTokenTimeout is how long a reply's stream may stay silent
	// before its first part; 0 means 10 minutes (reasoning models think
	// silently for minutes). ChunkTimeout is how long it may stay silent
	// between two parts; 0 means 5 minutes. A stream silent for longer is
	// cut off and the request fails with llm.stream_idle, which the retry
	// policy retries; parts already streamed stay. Negative is an error;
	// a duration no reply can reach (math.MaxInt64) switches one limit
	// off, and NoStreamWatchdog switches both off.
	FirstTokenTimeout time.Duration
	ChunkTimeout      time.Duration
	NoStreamWatchdog  bool
	// MaxParallelTools caps how many tool calls of one step run at once;
	// 0 means 10. Calls that conflict never run together.
	MaxParallelTools int
	// CaseSensitivePaths turns off case folding when tool paths are
	// compared for conflicts.
	CaseSensitivePaths bool
	// RunTimeout is the wall-clock limit of a run: from the turn that
	// claims a prompt through every turn after it (Continue, steers,
	// notifications) until the next prompt; 0 means 48 h, negative is an
	// error. When it runs out during a turn, the turn is cancelled (cause
	// timeout) and its prompt ends failed{run.timeout}. It runs while
	// paused and while a call awaits approval, and across a reopen.
	// NoRunTimeout turns it off.
	RunTimeout   time.Duration
	NoRunTimeout bool
	// NoLoopDetection turns loop detection off. It is on by default: a
	// repeated tool call is warned (loop/warning, OnLoopWarning, a note
	// for the model), a critical loop blocks its batch, and a second one
	// ends the run failed{loop.critical_repeat}.
	NoLoopDetection bool
	// Spill keeps tool outputs longer than SpillChars characters (0 means
	// 50,000) outside the history: the model sees their head and a
	// reference it can page through with the read_output tool (added to
	// Tools when Spill is set). Without Spill such outputs are cut.
	Spill      tools.Blobs
	SpillChars int

	// lane is the Host's global lane, for its top-level sessions.
	lane *engine.GlobalLane
}

// Service is an AgentLoopService: one agent session. All methods are safe
// for concurrent use.
type Service struct {
	// eng is the session's lane; log the durable log it holds a claim on
	// (Open). Both are nil while the Host that opened the session has it
	// evicted (home is its record there): a call then reloads it.
	eng  atomic.Pointer[engine.Engine]
	log  atomic.Pointer[store.Log]
	id   vocab.ID
	home *hosted
	// subs counts the callers' event streams open (they keep a Host from
	// evicting the session).
	subs atomic.Int32

	// OnWillBeginStep runs in the step gate before every model request. A
	// handler may rewrite or drop the step's claimed messages or reject
	// the step (the turn ends blocked); an error fails the turn with
	// hook.failed.
	OnWillBeginStep *hooks.Slot[*StepContext]
	// OnDidFinishStep runs after every step; a handler may set StopTurn.
	OnDidFinishStep *hooks.Slot[*StepEndContext]
	// OnBeforeSubmitPrompt judges each prompt before its turn starts; a
	// handler may rewrite the prompt or Block it (the prompt ends blocked).
	OnBeforeSubmitPrompt *hooks.Slot[*PromptContext]
	// OnTurnStopping runs, every listener, when a turn is about to end with
	// nothing queued. A listener keeps the turn alive only by steering input
	// in (Service.Steer); whether the turn goes on is then decided by the
	// queue, re-checked after all listeners ran, so registration order
	// cannot change the outcome. A listener's error is logged (hook/failed).
	OnTurnStopping *hooks.SerialSlot[StepInfo, struct{}]
	// OnBeforeTool judges every tool call before it runs: a handler may
	// rewrite its arguments, deny it (the model gets the denial), or ask a
	// person (Ask: the call waits for Approve). An error fails the call.
	OnBeforeTool *hooks.Slot[*ToolCallContext]
	// OnAfterTool sees every call's result and may rewrite it. An error
	// fails the call.
	OnAfterTool *hooks.Slot[*ToolResultContext]
	// OnLoopWarning hears every loop warning loop detection emits (the
	// detector, its count, the call): every listener runs; what they do
	// changes nothing in the loop (the warning already reached the model
	// as the result's note, and the loop/warning event is logged).
	// Listeners run beside the loop: the turn does not wait for them,
	// and closing the session cancels those still running.
	OnLoopWarning *hooks.SerialSlot[LoopWarning, struct{}]

	errors *hooks.Slot[*ErrorContext]

	// slotState is the last answer of slots, as the hooks generation it
	// was derived at and the mask of the slots with handlers, in one word
	// (generation<<8 | mask), so that the two are always read together
	// and a new generation with the same mask costs no allocation.
	slotState atomic.Uint64
}

// StepInfo locates a step.
type StepInfo struct {
	Session vocab.ID
	Turn    int
	Step    int
	// First is set on the turn's first step.
	First bool
}

// StepContext is what OnWillBeginStep handlers see and may change.
type StepContext struct {
	StepInfo
	// Claimed are the input messages about to be written to history: a
	// handler may edit, drop or add messages.
	Claimed []vocab.Message
	// History is the conversation so far, read-only.
	History vocab.History
	// Reject refuses the step: the turn ends blocked.
	Reject bool
	// Reason explains a rejection.
	Reason string
}

// StepEndContext is what OnDidFinishStep handlers see and may change.
type StepEndContext struct {
	StepInfo
	// History is the conversation so far, read-only.
	History vocab.History
	// StopTurn ends the turn after this step; Reason explains it.
	StopTurn bool
	Reason   string
}

// ToolCallContext is what OnBeforeTool handlers see and may change.
type ToolCallContext struct {
	StepInfo
	// Call is the call as the model made it (or as an earlier handler
	// rewrote it): a handler may change Args.
	Call vocab.ToolCall
	// History is the conversation so far, read-only.
	History vocab.History
	// Deny refuses the call: the model gets Result when set, else a
	// denial naming Reason.
	Deny   bool
	Reason string
	Result *vocab.ToolResult
	// Ask holds the call for a person: the question they see. The call
	// waits, durably, until Service.Approve answers it.
	Ask string
}

// ToolResultContext is what OnAfterTool handlers see and may change.
type ToolResultContext struct {
	StepInfo
	// Call is the call that ran, read-only.
	Call vocab.ToolCall
	// Result is the call's result: a handler may rewrite it.
	Result vocab.ToolResult
	// History is the conversation so far, read-only.
	History vocab.History
}

// PromptContext is what OnBeforeSubmitPrompt handlers see and may change.
type PromptContext struct {
	Prompt vocab.Message
	// Block drops the prompt; Reason explains it.
	Block  bool
	Reason string
}

// New starts a service. It starts no goroutine: a session runs on the
// goroutines of its callers and of the work it starts.
func New(opt Options) (*Service, error) {
	s := newService()
	e, err := s.bind(opt, nil, nil)
	if err != nil {
		return nil, err
	}
	s.id = e.Session()
	s.eng.Store(e)
	return s, nil
}

// newService returns a service with its hook slots and no lane yet.
func newService() *Service {
	return &Service{
		OnWillBeginStep:      hooks.NewSlot[*StepContext]("OnWillBeginStep"),
		OnDidFinishStep:      hooks.NewSlot[*StepEndContext]("OnDidFinishStep"),
		OnBeforeSubmitPrompt: hooks.NewSlot[*PromptContext]("OnBeforeSubmitPrompt"),
		OnTurnStopping:       hooks.NewSerialSlot[StepInfo, struct{}]("OnTurnStopping"),
		OnBeforeTool:         hooks.NewSlot[*ToolCallContext]("OnBeforeTool"),
		OnAfterTool:          hooks.NewSlot[*ToolResultContext]("OnAfterTool"),
		OnLoopWarning:        hooks.NewSerialSlot[LoopWarning, struct{}]("OnLoopWarning"),
		errors:               hooks.NewSlot[*ErrorContext]("LoopErrorHandlers"),
	}
}

// bind starts a lane for s on the session folded from a log (a new
// session when nil); resume, with folded, says the lane that ran it was
// unloaded at rest (see engine.Options.Resume).
func (s *Service) bind(opt Options, folded *store.Folded, resume *engine.Resume) (*engine.Engine, error) {
	reg, err := tools.NewRegistry(opt.Tools...)
	if err != nil {
		return nil, err
	}
	if opt.Spill != nil {
		if err := reg.Add(tools.ReadOutput(opt.Spill)); err != nil {
			return nil, err
		}
	}
	if err := reg.SetSpill(opt.Spill, opt.SpillChars); err != nil {
		return nil, err
	}
	var sink eventlog.Sink
	if opt.Sink != nil {
		sink = opt.Sink
	}
	eo := engine.Options{
		Session: opt.Session, CheckpointEvery: opt.CheckpointEvery,
		Provider: opt.Provider, Tools: reg, Clock: opt.Clock, IDs: opt.IDs, Sink: sink, Window: opt.Window, Logger: opt.Logger,
		Jitter: opt.Jitter, System: opt.System, Model: opt.Model, MaxTokens: opt.MaxTokens, StreamFlush: opt.StreamFlush,
		MaxSteps: opt.MaxSteps, MaxAttempts: opt.MaxAttempts, AbortGrace: opt.AbortGrace, HardStop: opt.HardStop,
		MaxParallelTools: opt.MaxParallelTools, CaseSensitivePaths: opt.CaseSensitivePaths,
		RunTimeout: opt.RunTimeout, NoRunTimeout: opt.NoRunTimeout, NoLoopDetection: opt.NoLoopDetection, Lane: opt.lane,
		FirstTokenTimeout: opt.FirstTokenTimeout, ChunkTimeout: opt.ChunkTimeout, NoStreamWatchdog: opt.NoStreamWatchdog,
		Hooks: map[vocab.HookName]engine.HookFunc{
			vocab.HookBeforeTool:         s.beforeTool,
			vocab.HookAfterTool:          s.afterTool,
			vocab.HookLoopWarning:        s.loopWarning,
			vocab.HookWillBeginStep:      s.willBeginStep,
			vocab.HookDidFinishStep:      s.didFinishStep,
			vocab.HookTurnStopping:       s.turnStopping,
			vocab.HookBeforeSubmitPrompt: s.beforeSubmitPrompt,
			vocab.HookRequestError:       s.requestError,
		},
		Slots: s.slots,
	}
	if folded != nil {
		eo.Core, eo.Resume = folded.Core, resume
	}
	return engine.New(eo)
}

// lane returns the session's lane, reloading the session when the Host
// that opened it evicted it.
func (s *Service) lane() (*engine.Engine, error) {
	if e := s.eng.Load(); e != nil {
		return e, nil
	}
	if s.home == nil {
		return nil, vocab.Errorf(vocab.CodeClosed, "session %s has no lane", s.id)
	}
	return s.home.host.reload(s)
}

// on runs f on the session's lane. When the lane was unloaded under the
// call (a Host evicted the session between lane and f), f never reached
// it: it runs again on the reloaded lane.
func on[T any](s *Service, f func(*engine.Engine) (T, error)) (T, error) {
	e, err := s.lane()
	for err == nil {
		v, ferr := f(e)
		if s.home == nil || !engine.IsUnloaded(ferr) {
			return v, ferr
		}
		s.home.host.raced.Add(1)
		e, err = s.home.host.reload(s)
	}
	var zero T
	return zero, err
}

// on0 is on for calls that return only an error.
func on0(s *Service, f func(*engine.Engine) error) error {
	_, err := on(s, func(e *engine.Engine) (struct{}, error) { return struct{}{}, f(e) })
	return err
}

// slots lists the hook slots that have handlers now. The lane asks before
// every batch of inputs, so the answer stands while no slot of the process
// changed (see hooks.Generation): asking the eight slots would touch eight
// objects, cold ones in a session's first prompt.
func (s *Service) slots() []vocab.HookName {
	gen := hooks.Generation() << 8 // a generation past 2^56 changes would alias an old one
	if st := s.slotState.Load(); st&^0xff == gen {
		return slotList(uint8(st))
	}
	var mask uint8
	for i, n := range [...]int{s.OnWillBeginStep.Len(), s.OnDidFinishStep.Len(), s.OnTurnStopping.Len(),
		s.OnBeforeSubmitPrompt.Len(), s.errors.Len(), s.OnBeforeTool.Len(), s.OnAfterTool.Len(), s.OnLoopWarning.Len()} {
		if n > 0 {
			mask |= 1 << i
		}
	}
	s.slotState.Store(gen | uint64(mask))
	return slotList(mask)
}

// slotNames are the hook slots, in the order of the bits of a slots mask.
var slotNames = [...]vocab.HookName{vocab.HookWillBeginStep, vocab.HookDidFinishStep, vocab.HookTurnStopping,
	vocab.HookBeforeSubmitPrompt, vocab.HookRequestError, vocab.HookBeforeTool, vocab.HookAfterTool, vocab.HookLoopWarning}

// slotLists holds, for each mask of slots, the list of their names (made
// on first use, never changed after; shared by every service).
var slotLists [1 << len(slotNames)]atomic.Pointer[[]vocab.HookName]

// slotList returns the names of the slots in mask, in slot order. The list
// must not be changed.
func slotList(mask uint8) []vocab.HookName {
	if p := slotLists[mask].Load(); p != nil {
		return *p
	}
	var out []vocab.HookName
	for i, h := range slotNames {
		if mask&(1<<i) != 0 {
			out = append(out, h)
		}
	}
	slotLists[mask].Store(&out)
	return out
}

func failed(err error) vocab.HookVerdict {
	e := vocab.AsError(err)
	if e.Code == vocab.CodeTransport || e.Code == vocab.CodeInternal {
		e = &vocab.Error{Code: vocab.CodeHook, Message: err.Error(), Cause: err}
	}
	return vocab.HookVerdict{Err: e}
}

func (s *Service) willBeginStep(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	c, err := s.OnWillBeginStep.RunWaterfall(ctx, &StepContext{StepInfo: StepInfo(call.Info), Claimed: call.Messages, History: call.History}, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil {
		return vocab.HookVerdict{Messages: call.Messages}
	}
	return vocab.HookVerdict{Refuse: c.Reject, Reason: c.Reason, Messages: c.Claimed}
}

func (s *Service) didFinishStep(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	c, err := s.OnDidFinishStep.RunWaterfall(ctx, &StepEndContext{StepInfo: StepInfo(call.Info), History: call.History}, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil {
		return vocab.HookVerdict{}
	}
	return vocab.HookVerdict{Refuse: c.StopTurn, Reason: c.Reason}
}

func (s *Service) turnStopping(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	if _, err := s.OnTurnStopping.RunSerial(ctx, StepInfo(call.Info)); err != nil {
		return failed(err)
	}
	return vocab.HookVerdict{}
}

func (s *Service) beforeSubmitPrompt(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	p := vocab.CloneMessage(*call.Prompt)
	c, err := s.OnBeforeSubmitPrompt.RunWaterfall(ctx, &PromptContext{Prompt: vocab.CloneMessage(p)}, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil {
		return vocab.HookVerdict{}
	}
	if c.Block {
		return vocab.HookVerdict{Refuse: true, Reason: c.Reason}
	}
	if c.Prompt.Text() != p.Text() || len(c.Prompt.Parts) != len(p.Parts) {
		m := c.Prompt
		return vocab.HookVerdict{Rewritten: &m}
	}
	return vocab.HookVerdict{}
}

func (s *Service) beforeTool(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	orig := *call.Call
	c, err := s.OnBeforeTool.RunWaterfall(ctx, &ToolCallContext{StepInfo: StepInfo(call.Info), Call: vocab.ToolCall{ID: orig.ID,
		Name: orig.Name, Args: slices.Clone(orig.Args)}, History: call.History}, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil {
		return vocab.HookVerdict{}
	}
	if c.Deny {
		return vocab.HookVerdict{Refuse: true, Reason: c.Reason, Result: c.Result}
	}
	v := vocab.HookVerdict{Ask: c.Ask}
	if string(c.Call.Args) != string(orig.Args) {
		v.Args = c.Call.Args // arguments that are not JSON fail the chain (the engine checks every hook's verdict)
	}
	return v
}

// LoopWarning is a loop warning as OnLoopWarning listeners hear it.
type LoopWarning struct {
	StepInfo
	vocab.LoopPayload
}

func (s *Service) loopWarning(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	if call.Loop == nil {
		return vocab.HookVerdict{}
	}
	if _, err := s.OnLoopWarning.RunSerial(ctx, LoopWarning{StepInfo: StepInfo(call.Info), LoopPayload: *call.Loop}); err != nil {
		return failed(err)
	}
	return vocab.HookVerdict{}
}

func (s *Service) afterTool(ctx context.Context, call engine.HookCall) vocab.HookVerdict {
	c, err := s.OnAfterTool.RunWaterfall(ctx, &ToolResultContext{StepInfo: StepInfo(call.Info), Call: *call.Call,
		Result: vocab.CloneResult(*call.Result), History: call.History}, nil)
	if err != nil {
		return failed(err)
	}
	if c == nil {
		return vocab.HookVerdict{}
	}
	r := c.Result
	return vocab.HookVerdict{Result: &r}
}

// ---- inputs ----

// Prompt is a submitted prompt; Wait returns how it ended.
type Prompt struct {
	ID vocab.ID
	p  *engine.Pending
}

// Wait blocks until the prompt's turn ends (or it is cancelled, withdrawn
// or blocked before it starts). The error is ctx's cause, or the reason the
// session stopped (its log refused events).
func (p *Prompt) Wait(ctx context.Context) (vocab.PromptResult, error) { return p.p.Wait(ctx) }

// Done is closed when the prompt has ended.
func (p *Prompt) Done() <-chan struct{} { return p.p.Done() }

// Submit queues a prompt for its own turn (the next-turn queue: a prompt
// submitted while a turn runs is a follow-up) and wakes the agent. It
// returns once the prompt is recorded. The message is copied; an id
// already queued or running is refused with input.duplicate_id, a role
// other than user with input.bad.
func (s *Service) Submit(msg vocab.Message) (*Prompt, error) {
	p, err := on(s, func(e *engine.Engine) (*engine.Pending, error) { return e.Submit(msg) })
	if err != nil {
		return nil, err
	}
	return &Prompt{ID: p.ID, p: p}, nil
}

// SubmitText submits a user text prompt.
func (s *Service) SubmitText(text string) (*Prompt, error) { return s.Submit(vocab.UserText(text)) }

// Run submits a prompt and waits for it to end: Submit followed by
// Prompt.Wait, with the same validation, typed errors, events and result.
// The difference is where the prompt's work runs: while Run waits, the
// calling goroutine runs the model requests, tool calls and hooks that
// the session would otherwise start on goroutines of its own, one after
// the other. With a provider and tools that answer synchronously, a whole
// prompt runs on the caller's goroutine, starting no goroutine; use it
// where Submit then Wait would be called back to back. Work the caller
// is not handed runs as it does after Submit: the parallel calls of a
// step beyond one, timers (retry waits and the like), and work that
// starts while another goroutine (a caller's input, a parallel call's
// result) runs the session.
//
// When ctx ends, Run takes no more work and returns ctx's cause, as Wait
// does, and the prompt goes on without it. A model request, tool call or
// hook that the caller is running at that moment is not interrupted: Run
// returns once it has returned. That work runs under its own context,
// which Cancel and Close cancel, not under ctx.
//
// A tool or hook that calls Run on its own session with the context it
// was given gets an error with code agent.reentrant, and nothing is
// submitted.
func (s *Service) Run(ctx context.Context, msg vocab.Message) (vocab.PromptResult, error) {
	return on(s, func(e *engine.Engine) (vocab.PromptResult, error) { return e.Run(ctx, msg) })
}

// RunText runs a user text prompt (see Run).
func (s *Service) RunText(ctx context.Context, text string) (vocab.PromptResult, error) {
	return s.Run(ctx, vocab.UserText(text))
}

// Steer sends input to the running turn's next step and wakes the agent.
// After a cancel, steering goes to the next turn instead.
func (s *Service) Steer(msg vocab.Message) (vocab.ID, error) {
	return on(s, func(e *engine.Engine) (vocab.ID, error) { return e.Steer(msg) })
}

// Inject queues input for the next step without waking the agent.
func (s *Service) Inject(msg vocab.Message) (vocab.ID, error) {
	return on(s, func(e *engine.Engine) (vocab.ID, error) { return e.Inject(msg) })
}

// Withdraw takes a queued input (prompt, steer, injected message,
// notification or reminder) back. It reports false when the input was
// already claimed by a step, or is unknown. A withdrawn prompt ends
// cancelled.
func (s *Service) Withdraw(id vocab.ID) (bool, error) {
	return on(s, func(e *engine.Engine) (bool, error) { return e.Withdraw(id) })
}

// NotifyOptions tune Notify.
type NotifyOptions struct {
	// BypassMaxSteps lets the step the notification starts pass the
	// max-steps guard.
	BypassMaxSteps bool
}

// Notification is a queued notification.
type Notification struct {
	ID  vocab.ID
	svc *Service
}

// Drop withdraws the notification if no step has claimed it yet; it
// reports whether it did.
func (n *Notification) Drop() (bool, error) { return n.svc.Withdraw(n.ID) }

// Notify queues a notification for the next step and wakes the agent. The
// returned handle can drop it while it is still queued.
func (s *Service) Notify(msg vocab.Message, opt NotifyOptions) (*Notification, error) {
	id, err := on(s, func(e *engine.Engine) (vocab.ID, error) { return e.Notify(msg, opt.BypassMaxSteps) })
	if err != nil {
		return nil, err
	}
	return &Notification{ID: id, svc: s}, nil
}

// Remind queues a reminder under key; a queued reminder with the same key
// is replaced. Reminders ride along with the next claimed step.
func (s *Service) Remind(key string, msg vocab.Message) (vocab.ID, error) {
	return on(s, func(e *engine.Engine) (vocab.ID, error) { return e.Remind(key, msg) })
}

// CancelOptions tune Cancel.
type CancelOptions struct {
	// KeepInbox keeps queued input (the default clears it).
	KeepInbox bool
}

// Cancel aborts the running turn (or the prompt being judged, or the
// maintenance job) with cause; a no-op beyond clearing the inbox when idle.
func (s *Service) Cancel(cause vocab.CancelCause, opt CancelOptions) error {
	return on0(s, func(e *engine.Engine) error { return e.Cancel(cause, opt.KeepInbox) })
}

// Decision is a person's answer to a tool call awaiting approval: make
// one with Approved, Denied or Edited.
type Decision struct {
	Kind   vocab.Decision
	Reason string
	Args   json.RawMessage
}

// Approved runs the call as it is.
func Approved() Decision { return Decision{Kind: vocab.Approve} }

// Denied refuses the call; the model sees reason.
func Denied(reason string) Decision { return Decision{Kind: vocab.Deny, Reason: reason} }

// Edited runs the call with args instead of the model's arguments.
func Edited(args json.RawMessage) Decision { return Decision{Kind: vocab.Edit, Args: args} }

// Approve answers the tool call callID awaiting approval. It returns once
// the decision is durable. A call not awaiting approval is ErrNotAwaiting;
// an unknown decision or edited arguments that are not JSON, ErrBadInput.
func (s *Service) Approve(callID string, d Decision) error {
	return on0(s, func(e *engine.Engine) error { return e.Approve(callID, d.Kind, d.Reason, d.Args) })
}

// PendingApproval is a tool call waiting for a person: Question is what
// they are asked.
type PendingApproval struct {
	Call     vocab.ToolCall
	Question string
}

// Approvals lists the tool calls awaiting approval, in the model's order.
// After a reopen they are still there: an approval survives a restart.
func (s *Service) Approvals(ctx context.Context) ([]PendingApproval, error) {
	return on(s, func(e *engine.Engine) ([]PendingApproval, error) {
		ps, err := e.Approvals(ctx)
		out := make([]PendingApproval, len(ps))
		for i, p := range ps {
			out[i] = PendingApproval{Call: p.Call, Question: p.Question}
		}
		return out, err
	})
}

// Pause stops the agent from starting turns; a running turn ends at its
// next drain, and queued input stays queued.
func (s *Service) Pause() error { return on0(s, (*engine.Engine).Pause) }

// Continue undoes Pause and serves queued work; a conversation paused
// while the model owed a reply (history ending with tool results) resumes.
func (s *Service) Continue() error { return on0(s, (*engine.Engine).Continue) }

// RunMaintenance runs job (compaction and the like) while the agent is idle;
// it is refused with code agent.not_idle otherwise. The public status stays
// idle; input that wakes the agent meanwhile is served after the job.
func (s *Service) RunMaintenance(ctx context.Context, job func(ctx context.Context) error) error {
	return on0(s, func(e *engine.Engine) error { return e.RunMaintenance(ctx, job) })
}

// WhenIdle waits until the agent is idle with nothing queued that would
// wake it, following hand-offs from one turn to the next.
func (s *Service) WhenIdle(ctx context.Context) error {
	e := s.eng.Load()
	if e == nil {
		return nil // evicted: a session rests when it is
	}
	return e.WhenIdle(ctx)
}

// Close cancels what runs with cause disposed and waits until every piece
// of work of the session has ended, or ctx: then every prompt is resolved,
// every event stream ended, and the error (code agent.stuck) names the
// work that ignored its cancellation.
func (s *Service) Close(ctx context.Context) error {
	err := on0(s, func(e *engine.Engine) error { return e.Close(ctx) })
	if log := s.log.Load(); log != nil {
		// Another process may take the session over at once.
		if rerr := log.Release(context.WithoutCancel(ctx)); err == nil && rerr != nil && vocab.CodeOf(rerr) != vocab.CodeClosed {
			err = rerr
		}
	}
	return err
}

// beginClose starts closing the session (it takes no input and starts no
// work from then on) without waiting for its work; Close waits.
func (s *Service) beginClose(ctx context.Context) error {
	return on0(s, func(e *engine.Engine) error { return e.BeginClose(ctx) })
}

// Snapshot is a consistent picture of a session.
type Snapshot struct {
	Session vocab.ID
	// Status is "idle", "running", or "yielded" (resting with a prompt
	// that a sessions_yield left open for its sub-agents' deliveries).
	Status string
	// Agent and Turn are the machines' leaf states (Turn is "" between
	// turns).
	Agent, Turn string
	// Seq is the sequence number of the last event.
	Seq     uint64
	History vocab.History
	// Core is the session core's versioned snapshot (JSON).
	Core json.RawMessage
}

// Snapshot captures the session between two batches of inputs.
func (s *Service) Snapshot(ctx context.Context) (Snapshot, error) {
	return on(s, func(e *engine.Engine) (Snapshot, error) {
		snap := Snapshot{Session: s.id}
		var err error
		if snap.Core, err = e.Snapshot(ctx); err != nil {
			return Snapshot{}, err
		}
		if snap.Agent, snap.Turn, err = e.State(ctx); err != nil {
			return Snapshot{}, err
		}
		if snap.Status, err = e.Status(ctx); err != nil {
			return Snapshot{}, err
		}
		if snap.Seq, err = e.Seq(ctx); err != nil {
			return Snapshot{}, err
		}
		if snap.History, err = e.History(ctx); err != nil {
			return Snapshot{}, err
		}
		return snap, nil
	})
}

// History returns a read-only view of the conversation.
func (s *Service) History(ctx context.Context) (vocab.History, error) {
	return on(s, func(e *engine.Engine) (vocab.History, error) { return e.History(ctx) })
}

// Session returns the session id.
func (s *Service) Session() vocab.ID { return s.id }

// ErrDropped matches the error that ends an Events stream whose reader
// fell behind the in-memory window when the Sink cannot be read back.
var ErrDropped = eventlog.ErrDropped

// Events streams the session's events from sequence number from (0: from
// the first), then live ones, until ctx is done (the stream ends with ctx's
// cause) or the session is closed and everything was delivered. The session
// never waits for a reader: a reader that falls behind the in-memory window
// reads the missing events back from the Sink when it can, and otherwise
// its stream ends with an error matching ErrDropped — never a silent gap.
// Decode a stored event's JSON with json.Unmarshal into a vocab.Event: the
// payload comes back typed.
//
// On a session a Host opened, an open stream keeps the session from
// being evicted, and a stream goes on across a reload.
func (s *Service) Events(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	if s.home == nil {
		return s.eng.Load().Events(ctx, from)
	}
	return func(yield func(vocab.Event, error) bool) {
		s.subs.Add(1)
		defer s.subs.Add(-1)
		for ev, err := range s.follow(ctx, from, true) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// errEvicted ends a stream of follow that does not reload.
var errEvicted = vocab.Errorf(vocab.CodeClosed, "the session was evicted")

// follow streams the events of a session a Host opened from sequence
// number from on, across its lanes: when the session is evicted, the
// stream reloads it and goes on with reload, and otherwise ends with
// errEvicted.
func (s *Service) follow(ctx context.Context, from uint64, reload bool) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		next := max(from, 1)
		for {
			e := s.eng.Load()
			if e == nil && !reload {
				yield(vocab.Event{}, errEvicted)
				return
			}
			if e == nil {
				var err error
				if e, err = s.lane(); err != nil {
					yield(vocab.Event{}, err)
					return
				}
			}
			for ev, err := range e.Events(ctx, next) {
				if err != nil {
					yield(ev, err)
					return
				}
				next = ev.Seq + 1
				if !yield(ev, nil) {
					return
				}
			}
			if !e.Unloaded() {
				return // the session closed
			}
		}
	}
}
