package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// worker is one piece of work the lane started: its context, and what to
// report if it never ends.
//
// The worker of a model request, tool call, hook or job is recycled
// (workers) once the goroutine that ran it is done with it (see run,
// Run, recycle): nothing outside the lane ever holds one. Whatever the
// work's code may keep is not part of it: the work's context (ctx, and
// for a tool call its tools.RunCtx and result) is an allocation of its
// own, made for each piece of work and never reused. Once a worker is
// finished, no code outside its owner reads it: the lane reads a
// registered worker's fields under mu (cancelWork, cancelAll), and a
// finished worker is no longer registered. A timer's worker is never
// recycled: its callback keeps it.
type worker struct {
	w work
	// ctx is the work's context (see workCtx); nil for a timer.
	ctx *workCtx
	// tool is a tool call's context and result (tool calls only).
	tool  *toolCtx
	timer clock.Timer
	job   *job
	// cancelled is set (under mu) when the core cancelled the work and
	// no longer waits for its result (model requests and hooks); the
	// worker's own goroutine reads it without the lock as it reports.
	cancelled atomic.Bool
	// free is set once the worker's own work is done: the lane may hand it
	// the next piece of work (next) to run on the same goroutine.
	free bool
	// pooled is set on a worker taken from workers, which its owner puts
	// back once it ran (recycle).
	pooled bool
	next   *worker
}

// workers holds spare worker records (see worker).
var workers = sync.Pool{New: func() any { return new(worker) }}

// recycle gives back wk, whose work ran on this goroutine, once the
// goroutine is done with it (it read wk.next).
func recycle(wk *worker) {
	if wk.pooled {
		*wk = worker{}
		workers.Put(wk)
	}
}

// toolCtx is a tool call's context, with the tools.RunCtx that carries
// its progress and detaching, and its result: one allocation per call
// for the three (the core copies a tool result as it steps it, and
// keeps no pointer to it).
type toolCtx struct {
	wc  workCtx
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
	var j *job
	switch w.Kind {
	case session.WorkStop:
		go e.stopper()
		return nil
	case session.WorkMaintenance:
		j = e.jobs[w.Input]
		delete(e.jobs, w.Input)
		if j == nil {
			e.log.Error("engine: maintenance work without a job", "input", w.Input)
			return nil
		}
		j.started = true
	}
	var wk *worker
	if w.Kind == session.WorkTimer {
		wk = &worker{} // kept by its callback: never recycled
	} else {
		wk = workers.Get().(*worker)
	}
	*wk = worker{w: work{ID: w.ID, Kind: w.Kind, Request: w.Request, Call: w.Call, Deadline: w.Deadline}, job: j,
		pooled: w.Kind != session.WorkTimer}
	switch w.Kind {
	case session.WorkTimer: // runs no code: no context
	case session.WorkTool:
		wk.tool = &toolCtx{}
		wk.ctx = &wk.tool.wc
	default:
		wk.ctx = &workCtx{}
	}
	if w.Kind == session.WorkHook {
		h := w
		wk.w.Hook = &h
	}
	if wk.ctx != nil {
		wk.ctx.init(e, w.ID)
	}
	e.mu.Lock()
	e.running.Set(w.ID, wk)
	e.mu.Unlock()
	return wk
}

// launch starts registered work: a timer is armed, everything else runs
// on a goroutine of its own.
func (e *Engine) launch(wk *worker) {
	if wk.w.Kind == session.WorkTimer {
		id := wk.w.ID
		wk.timer = e.opt.Clock.AfterFunc(wk.w.Deadline.Sub(e.opt.Clock.Now()), func() {
			if e.finish(wk) {
				growStack() // this goroutine may drive the lane
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
	growStack()
	for wk != nil {
		e.exec(wk)
		next := wk.next
		recycle(wk)
		wk = next
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
	e.mu.Lock()
	return e.release(wk)
}

// release unlocks mu (held), first finishing done (when not nil): the
// same hold of the lock takes it off the running work; its context is
// cancelled after. It reports whether done was running.
func (e *Engine) release(done *worker) bool {
	if done == nil {
		e.mu.Unlock()
		return false
	}
	_, ok := e.running.Take(done.w.ID)
	if ok && e.drained != nil && e.running.Len() == 0 {
		close(e.drained) // the last work ended: wake whoever waits (workDone)
		e.drained = nil
	}
	e.mu.Unlock()
	if ok && done.ctx != nil {
		done.ctx.cancel(nil)
	}
	return ok
}

// workDone returns a channel closed once no work is registered (work and
// armed timers; closed already when there is none).
func (e *Engine) workDone() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running.Len() == 0 {
		return closedChan
	}
	if e.drained == nil {
		e.drained = make(chan struct{})
	}
	return e.drained
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// report posts the result of wk's work, with wk free for the next piece.
//
// The work stays registered until its result is in the mailbox, so a
// session never looks settled while a result is on its way.
func (e *Engine) report(wk *worker, in vocab.Input) {
	if !wk.cancelled.Load() {
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
	// The worker's fields are read while it is registered (under mu):
	// once finished, its owner may recycle it.
	e.mu.Lock()
	wk, _ := e.running.Get(w.ID)
	var ctx *workCtx
	var timer clock.Timer
	if wk != nil {
		if w.Kind == session.WorkModel || w.Kind == session.WorkHook {
			wk.cancelled.Store(true)
		}
		ctx, timer = wk.ctx, wk.timer
	}
	e.mu.Unlock()
	if wk == nil {
		return
	}
	var cause error = context.Canceled
	if w.Cause != nil && w.Cause.Kind != "" {
		cause = *w.Cause
	}
	if timer != nil {
		if timer.Stop() {
			e.finish(wk) // a timer's worker: never recycled
		}
		return
	}
	if ctx != nil {
		ctx.cancel(cause) // harmless when the work ended meanwhile
	}
}

// cancelAll cancels every piece of work (the session stopped).
func (e *Engine) cancelAll(cause error) {
	// As in cancelWork, a worker is read while registered: its context
	// is taken under mu. Timers' workers are never recycled (their
	// timer is armed by launch, after they were registered).
	type cancel struct {
		timer *worker
		ctx   *workCtx
	}
	e.mu.Lock()
	var all []cancel
	e.running.Each(func(_ uint64, wk *worker) {
		wk.cancelled.Store(true)
		if wk.w.Kind == session.WorkTimer {
			all = append(all, cancel{timer: wk})
		} else {
			all = append(all, cancel{ctx: wk.ctx})
		}
	})
	e.mu.Unlock()
	for _, c := range all {
		if wk := c.timer; wk != nil {
			if wk.timer != nil && wk.timer.Stop() {
				e.finish(wk)
			}
			continue
		}
		if c.ctx != nil {
			c.ctx.cancel(cause)
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
