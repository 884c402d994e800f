package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// item is one entry of the mailbox: an input to step, or a query to run on
// the lane.
type item struct {
	in vocab.Input
	// reply gets nil once the input's events are durable, or the reason it
	// was refused.
	reply chan error
	// parts, for merged stream parts, is read when the item is stepped.
	parts *stream
	// wait is the waiter of a submitted prompt; job the maintenance job.
	wait *promptWait
	job  *job
	// query runs on the lane against the core (no input).
	query func(*session.Core)
}

// call posts a caller's input and waits until it is recorded or refused.
func (e *Engine) call(it item) error { return e.callCtx(context.Background(), it) }

// callCtx is call, giving up when ctx ends first.
func (e *Engine) callCtx(ctx context.Context, it item) error { return e.callAs(ctx, it, nil) }

// callAs is callCtx for a caller that is free to run work (Run): self,
// when it drives the lane, is handed work as a free worker is (see post).
func (e *Engine) callAs(ctx context.Context, it item, self *worker) error {
	it.reply = make(chan error, 1)
	if err := e.post(&it, self, nil); err != nil {
		return err
	}
	select {
	case err := <-it.reply:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-e.done:
		select {
		case err := <-it.reply:
			return err
		default:
			return e.stopErr()
		}
	}
}

// query runs f on the lane.
func (e *Engine) query(ctx context.Context, f func(*session.Core)) error {
	done := make(chan struct{})
	if err := e.post(&item{query: func(c *session.Core) { f(c); close(done) }}, nil, nil); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-e.done:
		select {
		case <-done:
			return nil
		default:
			return e.stopErr()
		}
	}
}

// post puts it in the mailbox and, when no one runs the lane, runs it on
// this goroutine. self is the worker posting its own result, or a Run
// caller (nil for other callers and timers); the work the lane hands back
// is for it to run next.
//
// done, when not nil, is work that reports its result with it: it is
// finished once the item is in the mailbox (before the lane runs). The
// item is copied into the mailbox, or stepped where it is when this
// goroutine drives a lane with nothing queued; it is not kept.
func (e *Engine) post(it *item, self *worker, done *worker) error {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return e.err
	}
	if !e.driving && len(e.box) == 0 && e.core != nil && it.query == nil && it.in.Kind != vocab.InOpen {
		// No one drives and nothing waits: this goroutine drives, and its
		// item is a batch of its own, stepped from where it is rather than
		// copied into the mailbox and cleared out of it (an input is
		// about 300 bytes, and while the collector marks each of its
		// pointers copied or cleared into the heap costs a write barrier).
		// What others post meanwhile makes the next batch, as it would
		// had the item been queued and taken alone.
		e.driving = true
		e.release(done)
		e.drive(self, it)
		return nil
	}
	e.box = append(e.box, *it)
	if e.driving {
		e.release(done)
		return nil
	}
	e.driving = true
	e.release(done)
	e.drive(self, nil)
	return nil
}

// drive runs the lane until the mailbox is empty: each batch of inputs is
// stepped into the core, then its Ready carried out. first, when not nil,
// is the first batch, an input that was not queued (see post); it comes
// before everything in the mailbox.
func (e *Engine) drive(self *worker, first *item) {
	m := machines.Get().(*session.Machines)
	e.core.Use(m)
	if first != nil {
		// A batch of one input that is neither the open input nor a
		// query: the order of the loop's batches below, without them.
		e.checkpoint()
		e.syncSlots()
		e.step(first)
		e.flush(self)
	}
	for {
		e.mu.Lock()
		batch := e.box
		if (len(batch) == 0 || e.core == nil) && len(e.inflight) > 0 {
			// Before it rests, the lane waits for its appends in flight.
			e.mu.Unlock()
			e.settleOrFail()
			continue
		}
		if len(batch) == 0 || e.core == nil {
			e.driving = false
			if e.core != nil {
				e.idle = e.core.Idle()
				if e.idle {
					e.restAt = e.opt.Clock.Now()
					// A resting session keeps no buffers for its next batch.
					e.core.Trim()
					e.spare = nil
					e.trimMaps()
				}
				e.core.Use(nil)
			}
			var wake []chan struct{}
			if e.idle || e.err != nil {
				wake, e.waiters = e.waiters, nil
			}
			e.mu.Unlock()
			for _, ch := range wake {
				close(ch)
			}
			machines.Put(m)
			return
		}
		e.box = e.spare[:0]
		e.mu.Unlock()
		e.checkpoint() // first: a snapshot is taken at a batch boundary
		first := 0
		if batch[0].query == nil && batch[0].in.Kind == vocab.InOpen {
			// The open input heads the log, before any hooks input.
			e.step(&batch[0])
			first = 1
		}
		e.syncSlots()
		queries := false
		for i := first; i < len(batch); i++ {
			if batch[i].query != nil {
				queries = true
				continue
			}
			e.step(&batch[i])
		}
		e.flush(self)
		if queries && len(e.inflight) > 0 {
			e.settleOrFail()
		}
		if queries {
			// Queries see the batch's inputs applied and their events
			// durable, never a core ahead of its log.
			for i := range batch {
				if batch[i].query != nil && e.core != nil {
					batch[i].query(e.core)
				}
			}
		}
		clear(batch)
		e.spare = batch[:0]
	}
}

// checkpoint steps a checkpoint input, first in a batch, when the log grew
// by CheckpointEvery events since the last one.
func (e *Engine) checkpoint() {
	n := uint64(e.opt.CheckpointEvery)
	if n == 0 || e.core.Seq()-e.checkpointed < n {
		return
	}
	if err := e.core.Step(vocab.Input{Kind: vocab.InCheckpoint, At: e.opt.Clock.Now()}); err != nil {
		e.log.Error("engine: checkpoint refused", "err", err)
	}
	e.checkpointed = e.core.Seq()
}

// syncSlots steps a hooks input when the set of hook slots with handlers
// changed, so the core asks for exactly the hooks that exist.
func (e *Engine) syncSlots() {
	slots := e.activeSlots()
	if equalSlots(slots, e.slots) {
		return
	}
	if err := e.core.Step(vocab.Input{Kind: vocab.InHooks, At: e.opt.Clock.Now(), Slots: slots}); err != nil {
		e.log.Error("engine: hooks refused", "err", err)
		return
	}
	e.slots = slots
}

func (e *Engine) activeSlots() []vocab.HookName {
	if e.opt.Slots != nil {
		return e.opt.Slots()
	}
	var s []vocab.HookName
	for _, h := range []vocab.HookName{vocab.HookWillBeginStep, vocab.HookDidFinishStep, vocab.HookTurnStopping,
		vocab.HookBeforeSubmitPrompt, vocab.HookRequestError} {
		if e.opt.Hooks[h] != nil {
			s = append(s, h)
		}
	}
	return s
}

func equalSlots(a, b []vocab.HookName) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// step feeds one mailbox item to the core.
func (e *Engine) step(it *item) {
	if e.core == nil {
		if it.reply != nil {
			it.reply <- e.stopErr()
		}
		return
	}
	in := it.in
	if it.parts != nil {
		in.Parts = it.parts.take()
		if len(in.Parts) == 0 {
			return
		}
	}
	if err := e.core.Step(in); err != nil {
		if it.reply != nil {
			it.reply <- err
			return
		}
		e.log.Error("engine: the core refused a result of work", "input", in.String(), "err", err)
		return
	}
	if it.reply != nil && in.ID != "" {
		e.acks.Set(in.ID, it.reply)
	} else if it.reply != nil {
		it.reply <- nil
	}
	if it.wait != nil {
		e.prompts.Set(in.ID, it.wait)
	}
	if it.job != nil {
		if e.jobs == nil {
			e.jobs = map[vocab.ID]*job{}
		}
		e.jobs[in.ID] = it.job
	}
}

// flush carries out the core's Ready: events durable first, then work,
// then results.
func (e *Engine) flush(self *worker) {
	rd, ok := e.core.Ready()
	if !ok {
		return
	}
	if e.async != nil && len(rd.Work) == 0 && len(rd.Results) == 0 && !e.core.Closed() {
		// Nothing waits on these events: let them commit while the lane
		// steps on (the barrier below, or at rest, waits for them).
		evs := slices.Clone(rd.Events)
		wait, err := e.appendAsync(evs)
		if err != nil {
			e.fail(err)
			return
		}
		e.inflight = append(e.inflight, inflight{wait: wait, events: evs})
		e.core.Advance(rd)
		return
	}
	if !e.settleOrFail() {
		return
	}
	if err := e.appendEvents(rd); err != nil {
		e.fail(err)
		return
	}
	e.feed.Publish(rd.Events)
	last := -1
	if self != nil && self.free {
		// The worker that drives will be free: it runs the batch's last
		// new model, tool or hook work itself, after the rest is started.
		for i := len(rd.Work) - 1; i >= 0; i-- {
			if w := rd.Work[i]; w.Op == session.Start && (w.Kind == session.WorkModel || w.Kind == session.WorkTool || w.Kind == session.WorkHook) {
				last = i
			}
			break
		}
	}
	if self != nil && self.next != nil && len(rd.Work) > 0 {
		// A continuation held from an earlier batch starts first.
		e.launch(self.next)
		self.next = nil
	}
	for i, w := range rd.Work {
		if w.Kind == session.WorkSlot {
			e.slotWork(w)
			continue
		}
		if w.Op == session.Cancel {
			e.cancelWork(w)
			continue
		}
		wk := e.register(w)
		if wk == nil {
			continue
		}
		if i == last {
			self.next = wk
			continue
		}
		e.launch(wk)
	}
	for _, r := range rd.Results {
		e.deliver(r)
	}
	closed := e.core.Closed()
	e.core.Advance(rd)
	if closed {
		e.stop(nil)
	}
}

// inflight is an append started and not yet waited for.
type inflight struct {
	wait   func(context.Context) error
	events []vocab.Event
}

func (e *Engine) appendAsync(evs []vocab.Event) (wait func(context.Context) error, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sink panicked: %v", r)
		}
	}()
	return e.async.AppendAsync(e.rootCtx, evs), nil
}

// settleOrFail waits for the appends in flight, in order, and publishes
// their events; when one failed the session stops (false).
func (e *Engine) settleOrFail() bool {
	for len(e.inflight) > 0 {
		f := e.inflight[0]
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("sink panicked: %v", r)
				}
			}()
			return f.wait(e.rootCtx)
		}()
		if err != nil {
			e.inflight = nil
			if e.core != nil {
				e.fail(err)
			}
			return false
		}
		e.feed.Publish(f.events)
		e.inflight[0] = inflight{}
		e.inflight = e.inflight[1:]
	}
	e.inflight = nil
	return e.core != nil
}

func (e *Engine) appendEvents(rd session.Ready) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sink panicked: %v", r)
		}
	}()
	return e.sink.Append(e.rootCtx, rd.Events)
}

// deliver hands a result to the caller waiting for it.
func (e *Engine) deliver(r session.Result) {
	switch r.Kind {
	case session.Accepted:
		if ch, _ := e.acks.Take(r.Input); ch != nil {
			ch <- nil
		}
	case session.PromptEnded:
		if w, _ := e.prompts.Take(r.Input); w != nil {
			w.result = *r.Prompt
			close(w.done)
		}
	}
}

// fail stops the session after its sink refused events: the core, now
// ahead of its log, is discarded; no work it asked for starts; every
// waiter gets the error; the session can only be reopened from its log.
func (e *Engine) fail(cause error) {
	err := vocab.Errorf(vocab.CodeAppendFailed, "session %s stopped: the event log refused events: %w", e.session, cause)
	e.log.Error("engine: append failed", "err", cause)
	e.core.Use(nil)
	e.core = nil
	e.stop(err)
}

// stop ends the session: later inputs fail with err (ErrClosed when nil),
// every waiter is answered, every worker cancelled, every stream ended.
func (e *Engine) stop(err error) {
	if err == nil {
		err = vocab.Errorf(vocab.CodeClosed, "session %s is closed", e.session)
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = err
	refused := e.box
	e.box = nil
	e.mu.Unlock()
	for _, it := range refused {
		if it.reply != nil {
			it.reply <- err
		}
	}
	e.acks.Drain(func(_ vocab.ID, ch chan error) { ch <- err })
	e.prompts.Drain(func(_ vocab.ID, w *promptWait) {
		w.result = vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &vocab.CancelCause{Kind: vocab.CancelDisposed}}
		if vocab.CodeOf(err) != vocab.CodeClosed {
			w.result = vocab.PromptResult{Kind: vocab.PromptFailed, Err: vocab.AsError(err)}
			w.err = err
		}
		close(w.done)
	})
	for id, j := range e.jobs {
		delete(e.jobs, id)
		if !j.started {
			j.done <- err
		}
	}
	if e.opt.Lane != nil {
		e.opt.Lane.drop(e) // its slot, held or asked for, goes to the next session
	}
	e.stopAll(err)
	e.cancelAll(err)
	e.halted.Store(true)
	e.disarm()
	e.feed.Close()
	close(e.done)
}

// disarm stops the timer of the spare stream watchdog, which a real clock
// leaves armed from one request to the next. A request hands its
// watchdog back before it posts its result (giveBack), so when the
// session stops after its work ended the spare is there; one that hands
// it back after the stop (halted) stops it itself.
func (e *Engine) disarm() {
	if w := e.dog.Swap(nil); w != nil {
		w.disarm()
	}
}

func (e *Engine) stopErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	return ErrClosed
}

// trimMaps drops the lane's maps when they are empty (a map keeps its
// buckets after its entries are deleted); they are made again on use.
func (e *Engine) trimMaps() {
	e.acks.Trim()
	e.prompts.Trim()
	if len(e.jobs) == 0 {
		e.jobs = nil
	}
	e.running.Trim()
}
