package engine

import (
	"context"
	"encoding/json"

	"github.com/loopchart/loopchart/vocab"
)

// runHook runs one hook chain. A panic or an error becomes the verdict's
// Err; a slot without a chain answers with an empty verdict (go on).
func (e *Engine) runHook(wk *worker) {
	w := wk.w.Hook
	var v vocab.HookVerdict
	if fn := e.opt.Hooks[w.Hook]; fn != nil {
		call := HookCall{Hook: w.Hook, Info: StepInfo(w.Info), Messages: w.Messages, Prompt: w.Prompt, History: w.History, Err: w.Err, Attempt: w.Attempt,
			Call: w.Call, Result: w.Result, Loop: w.Loop}
		err := safely(vocab.CodeHook, "hook "+string(w.Hook), func() error {
			v = fn(wk.ctx, call)
			return nil
		})
		if err != nil {
			v = vocab.HookVerdict{Err: vocab.AsError(err)}
		}
		if v.Err != nil && v.Err.Code == "" {
			v.Err.Code = vocab.CodeHook
		}
		if len(v.Args) > 0 && !json.Valid(v.Args) {
			// The core refuses a verdict it could not log, which would
			// leave the hook's work outstanding: the chain failed.
			v = vocab.HookVerdict{Err: &vocab.Error{Code: vocab.CodeHook, Message: "hook " + string(w.Hook) + " rewrote the arguments into invalid JSON"}}
		}
	}
	e.report(wk, vocab.Input{Kind: vocab.InHookDone, Hook: &v})
}

// runJob runs a caller's maintenance job; the caller's ctx cancels it too.
func (e *Engine) runJob(wk *worker) {
	j := wk.job
	ctx, cancel := context.WithCancelCause(wk.ctx)
	stop := context.AfterFunc(j.ctx, func() { cancel(context.Cause(j.ctx)) })
	err := safely(vocab.CodeInternal, "maintenance job", func() error { return j.fn(ctx) })
	stop()
	cancel(nil)
	reply := make(chan error, 1)
	defer e.finish(wk)
	if e.post(&item{in: vocab.Input{Kind: vocab.InMaintenanceDone, At: e.opt.Clock.Now(), Work: wk.w.ID}, reply: reply}, nil, wk) == nil {
		select {
		case <-reply:
		case <-e.done:
		}
	}
	j.done <- err
}
