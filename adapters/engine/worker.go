package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// worker is one piece of work the lane started: its context, and what to
// report if it never ends.
type worker struct {
	w work
	// ctx is the work's context (see workCtx).
	ctx workCtx
	// tool is the toolWorker this worker is part of (tool calls only).
	tool  *toolWorker
	timer clock.Timer
	job   *job
	// cancelled is set when the core cancelled the work and no longer
	// waits for its result (model requests and hooks).
	cancelled bool
	// free is set once the worker's own work is done: the lane may hand it
	// the next piece of work (next) to run on the same goroutine.
	free bool
	next *worker
}

// toolWorker is the worker of a tool call, with the call's context and
// its result: one allocation per call for the three (the core copies a
// tool result as it steps it, and keeps no pointer to it).
type toolWorker struct {
	worker
	run tools.RunCtx
	res vocab.ToolResult
}

// work is what a worker keeps of its session.Work: the fields model,
// tool and timer work need (a whole Work is about 270 bytes, and each
// step starts two pieces of work), and the whole Work for hooks.
type work struct {
	ID       uint64
	Kind     session.WorkKind
	Request  *vocab.Request
	Call     *vocab.ToolCall
	Deadline time.Time
	// Hook is the hook work as the core gave it (hooks only).
	Hook *session.Work
}

// what names the work for a person (a stuck-work report).
func (wk *worker) what() string {
	w := wk.w
	switch w.Kind {
	case session.WorkModel:
		return fmt.Sprintf("model request (turn %d, step %d, attempt %d)", w.Request.Turn, w.Request.Step, w.Request.Attempt)
	case session.WorkTool:
		return fmt.Sprintf("tool %q (call %s)", w.Call.Name, w.Call.ID)
	case session.WorkHook:
		return fmt.Sprintf("hook %s", w.Hook.Hook)
	case session.WorkMaintenance:
		return "maintenance job"
	}
	return string(w.Kind)
}

// job is a caller's maintenance job.
type job struct {
	fn      func(ctx context.Context) error
	ctx     context.Context
	done    chan error
	started bool
}

// register records work the core started; launch then starts it.
func (e *Engine) register(w session.Work) *worker {
	var wk *worker
	if w.Kind == session.WorkTool {
		tw := &toolWorker{}
		tw.tool = tw
		wk = &tw.worker
	} else {
		wk = &worker{}
	}
	wk.w = work{ID: w.ID, Kind: w.Kind, Request: w.Request, Call: w.Call, Deadline: w.Deadline}
	switch w.Kind {
	case session.WorkHook:
		h := w
		wk.w.Hook = &h
	case session.WorkStop:
		go e.stopper()
		return nil
	case session.WorkMaintenance:
		wk.job = e.jobs[w.Input]
		delete(e.jobs, w.Input)
		if wk.job == nil {
			e.log.Error("engine: maintenance work without a job", "input", w.Input)
			return nil
		}
		wk.job.started = true
	}
	wk.ctx.init(e, w.ID)
	e.wmu.Lock()
	e.running.Set(w.ID, wk)
	e.wmu.Unlock()
	e.wg.Add(1)
	return wk
}

// launch starts registered work: a timer is armed, everything else runs
// on a goroutine of its own.
func (e *Engine) launch(wk *worker) {
	if wk.w.Kind == session.WorkTimer {
		id := wk.w.ID
		wk.timer = e.opt.Clock.AfterFunc(wk.w.Deadline.Sub(e.opt.Clock.Now()), func() {
			if e.finish(wk) {
				_ = e.post(&item{in: vocab.Input{Kind: vocab.InTimerFired, At: e.opt.Clock.Now(), Work: id}}, nil, nil)
			}
		})
		return
	}
	e.spawned.Add(1)
	go e.run(wk)
}

// run executes work on this goroutine, then whatever the lane hands it
// next.
func (e *Engine) run(wk *worker) {
	for ; wk != nil; wk = wk.next {
		e.exec(wk)
	}
}

// exec executes one piece of work on this goroutine.
func (e *Engine) exec(wk *worker) {
	switch wk.w.Kind {
	case session.WorkModel:
		e.runModel(wk)
	case session.WorkTool:
		e.runTool(wk)
	case session.WorkHook:
		e.runHook(wk)
	case session.WorkMaintenance:
		e.runJob(wk)
	}
}

// finish forgets work that ended; it reports false when it was already
// forgotten.
func (e *Engine) finish(wk *worker) bool {
	e.wmu.Lock()
	_, ok := e.running.Take(wk.w.ID)
	e.wmu.Unlock()
	if ok {
		wk.ctx.cancel(nil)
		e.wg.Done()
	}
	return ok
}

// report posts the result of wk's work, with wk free for the next piece.
//
// The work stays registered until its result is in the mailbox, so a
// session never looks settled while a result is on its way.
func (e *Engine) report(wk *worker, in vocab.Input) {
	e.wmu.Lock()
	skip := wk.cancelled
	e.wmu.Unlock()
	if !skip {
		in.At, in.Work = e.opt.Clock.Now(), wk.w.ID
		wk.free = true
		if e.post(&item{in: in}, wk, wk) == nil {
			return // queued: finish ran
		}
	}
	e.finish(wk)
}

// cancelWork cancels work the core gave up on (or, for tools and jobs,
// asked to stop: their results still count).
func (e *Engine) cancelWork(w session.Work) {
	e.wmu.Lock()
	wk, _ := e.running.Get(w.ID)
	if wk != nil && (w.Kind == session.WorkModel || w.Kind == session.WorkHook) {
		wk.cancelled = true
	}
	e.wmu.Unlock()
	if wk == nil {
		return
	}
	var cause error = context.Canceled
	if w.Cause != nil && w.Cause.Kind != "" {
		cause = *w.Cause
	}
	if wk.timer != nil {
		if wk.timer.Stop() {
			e.finish(wk)
		}
		return
	}
	wk.ctx.cancel(cause)
}

// cancelAll cancels every piece of work (the session stopped).
func (e *Engine) cancelAll(cause error) {
	e.wmu.Lock()
	var all []*worker
	e.running.Each(func(_ uint64, wk *worker) {
		wk.cancelled = true
		all = append(all, wk)
	})
	e.wmu.Unlock()
	for _, wk := range all {
		if wk.timer != nil {
			if wk.timer.Stop() {
				e.finish(wk)
			}
			continue
		}
		if wk.ctx.e != nil {
			wk.ctx.cancel(cause)
		}
	}
}

// safely runs f, turning a panic into an error with code.
func safely(code vocab.Code, what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = vocab.Errorf(code, "%s panicked: %v", what, r)
		}
	}()
	return f()
}
