// Package agentsvc is loopchart's public API: AgentLoopService runs one
// agent session whose every phase is a named state of the agent, turn and
// tool statecharts, and lets an application submit prompts, steer, cancel
// and watch every transition go by.
//
// The step gate runs before every model request: stop flags, the optional
// max-steps guard, queued input consumed, OnWillBeginStep hooks run — only
// then is the request built from the current history and tools. Three
// ordered hook slots (OnWillBeginStep, OnDidFinishStep,
// OnBeforeSubmitPrompt), turn-stopping listeners and loop error handlers
// are the extension points. Each submitted prompt ends as a value:
// completed, failed, cancelled or blocked.
package agentsvc

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// Options configure a service. Provider is required.
type Options struct {
	Provider vocab.Provider
	Tools    []vocab.Tool
	// Clock drives retry waits, abort grace and hard-stop timers; the real
	// clock when nil. Tests pass a fake.
	Clock clock.Clock
	// IDs makes ids; ULIDs when nil.
	IDs vocab.IDSource
	// Log keeps every event; a new in-memory log when nil.
	Log    *engine.MemoryLog
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
}

// Service is an AgentLoopService: one agent session. All methods are safe
// for concurrent use.
type Service struct {
	eng *engine.Engine
	log *engine.MemoryLog

	// OnWillBeginStep runs in the step gate before every model request. A
	// handler may rewrite the step's claimed messages or reject the step
	// (the turn ends blocked); an error fails the turn with hook.failed.
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
	// cannot change the outcome.
	OnTurnStopping *hooks.SerialSlot[StepInfo, struct{}]

	errors *hooks.Slot[*ErrorContext]
}

// StepInfo locates a step.
type StepInfo = engine.StepInfo

// StepContext is what OnWillBeginStep handlers see.
type StepContext = engine.GateContext

// StepEndContext is what OnDidFinishStep handlers see and may change.
type StepEndContext struct {
	StepInfo
	// StopTurn ends the turn after this step; Reason explains it.
	StopTurn bool
	Reason   string
}

// PromptContext is what OnBeforeSubmitPrompt handlers see and may change.
type PromptContext struct {
	Prompt vocab.Message
	// Block drops the prompt; Reason explains it.
	Block  bool
	Reason string
}

// New starts a service.
func New(opt Options) (*Service, error) {
	reg, err := tools.NewRegistry(opt.Tools...)
	if err != nil {
		return nil, err
	}
	if opt.Log == nil {
		opt.Log = engine.NewMemoryLog()
	}
	s := &Service{
		log:                  opt.Log,
		OnWillBeginStep:      hooks.NewSlot[*StepContext]("OnWillBeginStep"),
		OnDidFinishStep:      hooks.NewSlot[*StepEndContext]("OnDidFinishStep"),
		OnBeforeSubmitPrompt: hooks.NewSlot[*PromptContext]("OnBeforeSubmitPrompt"),
		OnTurnStopping:       hooks.NewSerialSlot[StepInfo, struct{}]("OnTurnStopping"),
		errors:               hooks.NewSlot[*ErrorContext]("LoopErrorHandlers"),
	}
	s.eng, err = engine.New(engine.Options{
		Provider: opt.Provider, Tools: reg, Clock: opt.Clock, IDs: opt.IDs, Sink: opt.Log, Logger: opt.Logger,
		Jitter: opt.Jitter, System: opt.System, Model: opt.Model, MaxTokens: opt.MaxTokens,
		MaxSteps: opt.MaxSteps, MaxAttempts: opt.MaxAttempts, AbortGrace: opt.AbortGrace, HardStop: opt.HardStop,
		Hooks: engine.Hooks{
			WillBeginStep:      s.willBeginStep,
			DidFinishStep:      s.didFinishStep,
			TurnStopping:       s.turnStopping,
			BeforeSubmitPrompt: s.beforeSubmitPrompt,
			RequestError:       s.requestError,
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Service) willBeginStep(ctx context.Context, g *engine.GateContext) error {
	if s.OnWillBeginStep.Len() == 0 {
		return nil
	}
	_, err := s.OnWillBeginStep.RunWaterfall(ctx, g, nil)
	return err
}

func (s *Service) didFinishStep(ctx context.Context, info engine.StepInfo) (bool, string, error) {
	if s.OnDidFinishStep.Len() == 0 {
		return false, "", nil
	}
	c, err := s.OnDidFinishStep.RunWaterfall(ctx, &StepEndContext{StepInfo: info}, nil)
	if c == nil {
		return false, "", err
	}
	return c.StopTurn, c.Reason, err
}

func (s *Service) turnStopping(ctx context.Context, info engine.StepInfo) {
	if s.OnTurnStopping.Len() > 0 {
		_, _ = s.OnTurnStopping.RunSerial(ctx, info)
	}
}

func (s *Service) beforeSubmitPrompt(ctx context.Context, p vocab.Message) (bool, string, *vocab.Message, error) {
	if s.OnBeforeSubmitPrompt.Len() == 0 {
		return false, "", nil, nil
	}
	c, err := s.OnBeforeSubmitPrompt.RunWaterfall(ctx, &PromptContext{Prompt: p}, nil)
	if err != nil || c == nil {
		return true, "error", nil, err
	}
	if c.Block {
		return true, c.Reason, nil, nil
	}
	var rewritten *vocab.Message
	if c.Prompt.Text() != p.Text() || len(c.Prompt.Parts) != len(p.Parts) {
		m := c.Prompt
		m.ID = p.ID
		rewritten = &m
	}
	return false, "", rewritten, nil
}

// ---- inputs ----

// Prompt is a submitted prompt; Wait returns how it ended.
type Prompt struct {
	ID vocab.ID
	p  *engine.Pending
}

// Wait blocks until the prompt's turn ends (or it is cancelled or blocked
// before it starts).
func (p *Prompt) Wait(ctx context.Context) (vocab.PromptResult, error) {
	return p.p.Wait(ctx)
}

// Submit queues a prompt for its own turn (the next-turn queue: a prompt
// submitted while a turn runs is a follow-up) and wakes the agent.
func (s *Service) Submit(msg vocab.Message) (*Prompt, error) {
	p, err := s.eng.Submit(msg)
	if err != nil {
		return nil, err
	}
	return &Prompt{ID: p.ID, p: p}, nil
}

// SubmitText submits a user text prompt.
func (s *Service) SubmitText(text string) (*Prompt, error) { return s.Submit(vocab.UserText(text)) }

// Steer sends input to the running turn's next step and wakes the agent.
// After a cancel, steering goes to the next turn instead.
func (s *Service) Steer(msg vocab.Message) (vocab.ID, error) { return s.eng.Steer(msg) }

// Inject queues input for the next step without waking the agent.
func (s *Service) Inject(msg vocab.Message) (vocab.ID, error) { return s.eng.Inject(msg) }

// NotifyOptions tune Notify.
type NotifyOptions struct {
	// BypassMaxSteps lets the step the notification starts pass the
	// max-steps guard.
	BypassMaxSteps bool
}

// Notification is a queued notification.
type Notification struct {
	ID  vocab.ID
	eng *engine.Engine
}

// Drop withdraws the notification if no step has claimed it yet; it
// reports whether it did.
func (n *Notification) Drop() (bool, error) { return n.eng.Drop(n.ID) }

// Notify queues a notification for the next step and wakes the agent. The
// returned handle can drop it while it is still queued.
func (s *Service) Notify(msg vocab.Message, opt NotifyOptions) (*Notification, error) {
	id, err := s.eng.Notify(msg, opt.BypassMaxSteps)
	if err != nil {
		return nil, err
	}
	return &Notification{ID: id, eng: s.eng}, nil
}

// Remind queues a reminder under key; a queued reminder with the same key
// is replaced. Reminders ride along with the next claimed step.
func (s *Service) Remind(key string, msg vocab.Message) (vocab.ID, error) {
	return s.eng.Remind(key, msg)
}

// CancelOptions tune Cancel.
type CancelOptions struct {
	// KeepInbox keeps queued input (the default clears it).
	KeepInbox bool
}

// Cancel aborts the running turn (or maintenance job) with cause; a no-op
// beyond clearing the inbox when idle.
func (s *Service) Cancel(cause vocab.CancelCause, opt CancelOptions) error {
	return s.eng.Cancel(cause, opt.KeepInbox)
}

// Pause stops the agent from starting turns; a running turn ends at its
// next drain.
func (s *Service) Pause() error { return s.eng.Pause() }

// Continue undoes Pause and serves queued work.
func (s *Service) Continue() error { return s.eng.Continue() }

// RunMaintenance runs job (compaction and the like) while the agent is idle;
// it is refused with code agent.not_idle otherwise. The public status stays
// idle; input that wakes the agent meanwhile is served after the job.
func (s *Service) RunMaintenance(ctx context.Context, job func(ctx context.Context) error) error {
	return s.eng.RunMaintenance(ctx, job)
}

// WhenIdle waits until the agent is idle with nothing queued, following
// hand-offs from one turn to the next.
func (s *Service) WhenIdle(ctx context.Context) error { return s.eng.WhenIdle(ctx) }

// Close cancels what runs with cause disposed and waits until every
// goroutine of the session has ended.
func (s *Service) Close(ctx context.Context) error { return s.eng.Close(ctx) }

// Snapshot returns a consistent picture of the session.
func (s *Service) Snapshot(ctx context.Context) (engine.Snapshot, error) { return s.eng.Snapshot(ctx) }

// History returns a copy of the conversation.
func (s *Service) History(ctx context.Context) ([]vocab.Message, error) { return s.eng.History(ctx) }

// Session returns the session id.
func (s *Service) Session() vocab.ID { return s.eng.Session() }

// Log returns the session's event log (every event, in order).
func (s *Service) Log() *engine.MemoryLog { return s.log }

// Engine returns the underlying session lane (for tools and tests that need
// its counters).
func (s *Service) Engine() *engine.Engine { return s.eng }

// Events streams the session's events live, starting with those already
// logged when replay is set. The lane never waits for the reader: a reader
// that falls more than buffer events behind (0: engine.DefaultBuffer) is
// dropped and its stream ends; read Log for the complete record.
func (s *Service) Events(ctx context.Context, buffer int, replay bool) iter.Seq[vocab.Event] {
	return s.log.Subscribe(buffer, replay).All(ctx)
}
