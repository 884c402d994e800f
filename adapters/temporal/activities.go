package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Activities is the code a worker runs for sessions: the model provider,
// the tools, the hook chains, the content store and the export sink. They
// are code, not data, so they are registered on every worker (not sent by
// clients); a session's configuration names the tools and hook slots.
type Activities struct {
	// Provider answers model requests; required.
	Provider vocab.Provider
	// Tools runs tool calls; nil runs none (every call is an unknown tool).
	Tools *tools.Registry
	// Hooks are the hook chains by slot (sessions name the slots in
	// Params.Slots).
	Hooks map[vocab.HookName]engine.HookFunc
	// Content keeps messages, snapshots and event windows; required, and
	// shared by every worker of the task queue (an in-memory store only
	// works with one worker process).
	Content ContentStore
	// Export receives every event when a session's Options.Export is set:
	// at least once, in order per session; a sink deduplicates by
	// (session, seq).
	Export func(ctx context.Context, session vocab.ID, events []vocab.Event) error
	// Live sees each part of a model reply as it streams: a best-effort
	// side channel (parts never go through history; a retried request
	// streams again).
	Live func(session vocab.ID, part vocab.StreamPart)
	// Logger logs what a caller cannot be told; nil discards.
	Logger *slog.Logger
}

// Register registers the session workflow and a's activities on w.
func Register(w worker.Registry, a *Activities) error {
	if a == nil || a.Provider == nil {
		return vocab.Errorf(vocab.CodeBadInput, "temporal: Activities.Provider is required")
	}
	if a.Content == nil {
		return vocab.Errorf(vocab.CodeBadInput, "temporal: Activities.Content is required")
	}
	w.RegisterWorkflowWithOptions(SessionWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ActivityModel})
	w.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ActivityTool})
	w.RegisterActivityWithOptions(a.Hook, activity.RegisterOptions{Name: ActivityHook})
	w.RegisterActivityWithOptions(a.Put, activity.RegisterOptions{Name: ActivityPut})
	w.RegisterActivityWithOptions(a.Get, activity.RegisterOptions{Name: ActivityGet})
	w.RegisterActivityWithOptions(a.ExportEvents, activity.RegisterOptions{Name: ActivityExport})
	return nil
}

func (a *Activities) log() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

// heartbeat beats for the running activity three times per heartbeat
// timeout, from a ticker (a slow first token must not look like a dead
// worker), until the returned stop is called; stop waits for the ticker's
// goroutine.
func heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	every := activity.GetInfo(ctx).HeartbeatTimeout / 3
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	activity.RecordHeartbeat(ctx)
	return func() { close(done); wg.Wait() }
}

// Model streams one model request and returns the whole reply. A provider
// error comes back as a non-retryable application error whose details are
// a ModelFailure (the turn machine owns retries); a cancelled request
// returns a cancel error whose details hold the partial reply.
func (a *Activities) Model(ctx context.Context, args ModelArgs) (ModelResult, error) {
	msgs, err := a.messages(ctx, args.Messages)
	if err != nil {
		ve := vocab.AsError(err)
		return ModelResult{}, temporal.NewNonRetryableApplicationError(ve.Message, string(ve.Code), nil, ModelFailure{Err: ve})
	}
	req := args.Request
	req.Messages = msgs
	stop := heartbeat(ctx)
	defer stop()
	var asm session.Assembler
	fail := func() (fail error) {
		defer func() {
			if p := recover(); p != nil {
				fail = vocab.Errorf(vocab.CodeInternal, "provider panicked: %v", p)
			}
		}()
		for part, err := range a.Provider.Stream(ctx, req) {
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			asm.Add(part)
			if a.Live != nil {
				a.live(args.Session, part)
			}
		}
		return nil
	}()
	reply, usage := asm.Message(), asm.Usage()
	if ctx.Err() != nil {
		return ModelResult{}, temporal.NewCanceledError(ModelResult{Reply: &reply, Usage: &usage})
	}
	if fail != nil {
		ve := vocab.AsError(fail)
		mf := ModelFailure{Err: ve}
		if usage != (vocab.Usage{}) {
			mf.Usage = &usage
		}
		return ModelResult{}, temporal.NewNonRetryableApplicationError(ve.Message, string(ve.Code), nil, mf)
	}
	return ModelResult{Reply: &reply, Finish: asm.Finish(), Usage: &usage}, nil
}

func (a *Activities) live(s vocab.ID, part vocab.StreamPart) {
	defer func() {
		if p := recover(); p != nil {
			a.log().Error("temporal: Live panicked", "panic", p)
		}
	}()
	a.Live(s, part)
}

// messages loads the messages of transcript pages.
func (a *Activities) messages(ctx context.Context, pages []Ref) ([]vocab.Message, error) {
	var msgs []vocab.Message
	for _, p := range pages {
		b, err := a.Content.Get(ctx, p)
		if err != nil {
			return nil, err
		}
		var refs []Ref
		if err := json.Unmarshal(b, &refs); err != nil {
			return nil, vocab.Errorf(CodeContentMissing, "content %s is not a transcript page: %v", p, err)
		}
		for _, r := range refs {
			b, err := a.Content.Get(ctx, r)
			if err != nil {
				return nil, err
			}
			var m vocab.Message
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, vocab.Errorf(CodeContentMissing, "content %s is not a message: %v", r, err)
			}
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// Tool runs one tool call. It heartbeats from a ticker, so a cancellation
// reaches it within the heartbeat timeout; a call cut off by cancellation
// returns a cancel error whose details are its (aborted) result.
func (a *Activities) Tool(ctx context.Context, args ToolArgs) (vocab.ToolResult, error) {
	stop := heartbeat(ctx)
	defer stop()
	var res vocab.ToolResult
	if a.Tools == nil {
		res = vocab.ToolResult{CallID: args.Call.ID, Name: args.Call.Name, IsError: true, Code: vocab.CodeToolUnknown,
			Content: "Tool " + args.Call.Name + " is not available on this worker"}
	} else {
		res = a.Tools.Execute(tools.WithRun(ctx, nil, nil), args.Call, nil)
	}
	if ctx.Err() != nil {
		return vocab.ToolResult{}, temporal.NewCanceledError(res)
	}
	return res, nil
}

// Hook runs one hook chain; a panic or an error becomes the verdict's Err.
// A slot without a chain on this worker answers with an empty verdict.
func (a *Activities) Hook(ctx context.Context, args HookArgs) (vocab.HookVerdict, error) {
	fn := a.Hooks[args.Hook]
	if fn == nil {
		return vocab.HookVerdict{}, nil
	}
	call := engine.HookCall{Hook: args.Hook, Info: engine.StepInfo(args.Info), Messages: args.Messages, Prompt: args.Prompt,
		Err: args.Err, Attempt: args.Attempt, Call: args.Call, Result: args.Result, Loop: args.Loop}
	if len(args.History) > 0 {
		msgs, err := a.messages(ctx, args.History)
		if err != nil {
			return vocab.HookVerdict{Err: vocab.AsError(err)}, nil
		}
		call.History = vocab.HistoryOf(msgs)
	}
	var v vocab.HookVerdict
	func() {
		defer func() {
			if p := recover(); p != nil {
				v = vocab.HookVerdict{Err: vocab.Errorf(vocab.CodeHook, "hook %s panicked: %v", args.Hook, p)}
			}
		}()
		v = fn(ctx, call)
	}()
	if v.Err != nil && v.Err.Code == "" {
		v.Err.Code = vocab.CodeHook
	}
	return v, nil
}

// Put stores blobs in the content store and returns their references.
func (a *Activities) Put(ctx context.Context, blobs [][]byte) ([]Ref, error) {
	if err := a.Content.Put(ctx, blobs); err != nil {
		return nil, err
	}
	refs := make([]Ref, len(blobs))
	for i, b := range blobs {
		refs[i] = RefOf(b)
	}
	return refs, nil
}

// Get reads one piece of content.
func (a *Activities) Get(ctx context.Context, ref Ref) ([]byte, error) {
	b, err := a.Content.Get(ctx, ref)
	if err != nil {
		if vocab.CodeOf(err) == CodeContentMissing {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), string(CodeContentMissing), nil)
		}
		return nil, err
	}
	return b, nil
}

// ExportEvents hands events to the export sink.
func (a *Activities) ExportEvents(ctx context.Context, args ExportArgs) error {
	if a.Export == nil {
		return nil
	}
	err := a.Export(ctx, args.Session, args.Events)
	var ve *vocab.Error
	if errors.As(err, &ve) && !ve.Retryable && ve.Code == vocab.CodeBadInput {
		return temporal.NewNonRetryableApplicationError(ve.Message, string(ve.Code), nil)
	}
	return err
}
