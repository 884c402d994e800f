package engine

import (
	"context"

	"github.com/loopchart/loopchart/vocab"
)

// Run submits msg as a prompt and waits for it to end: Submit followed by
// Pending.Wait, with the same validation, errors, events and result,
// except that while it waits the calling goroutine is the lane's free
// worker. The model requests, tool calls and hooks of the prompt that the
// lane would start on a goroutine of its own while this caller drives it
// run here instead, one after the other (the caller drives the lane for
// each result it posts, and is handed the next piece of work as a worker
// is). With a provider and tools that answer synchronously, a whole prompt
// then runs on the caller's goroutine: no goroutine is started and none
// is woken when it ends.
//
// Work the caller is not handed runs as it does after Submit: all but one
// of a step's parallel tool calls (the caller takes the last), timers, and work
// started while another goroutine drives the lane (a caller's input, a
// parallel call's result, a retry timer). Run returns as soon as its
// prompt has ended: work of a prompt queued after it that the caller was
// handed then runs on a goroutine.
//
// When ctx ends, Run takes no more work and returns ctx's cause, as Wait
// does; the prompt goes on without it (work already handed to the caller
// is started on a goroutine of its own). The piece of work running on
// the caller's goroutine at that moment is not interrupted: Run returns
// once it returns. It runs under its own work context, which Cancel and
// Close cancel, not under ctx.
//
// A tool or hook that calls Run on its own session with the context it
// was given gets ErrReentrant, and nothing is submitted: it would wait
// for its own turn to end.
func (e *Engine) Run(ctx context.Context, msg vocab.Message) (vocab.PromptResult, error) {
	if reentrant(ctx, e) {
		return vocab.PromptResult{}, vocab.Errorf(vocab.CodeReentrant, "Run called from a tool or hook of its own session")
	}
	growStack()
	w := &promptWait{done: make(chan struct{})}
	self := &worker{free: true}
	_, err := e.messageAs(vocab.InSubmit, msg, "", false, w, self)
	wk := self.next
	self.next = nil
	if err != nil {
		// The batch may have held others' inputs whose work was handed
		// to this caller.
		if wk != nil {
			e.launch(wk)
		}
		return vocab.PromptResult{}, err
	}
	for wk != nil {
		if ctx.Err() != nil {
			// The caller stops here: the work it was handed, and whatever
			// that work is handed in turn, runs on a goroutine.
			e.launch(wk)
			return vocab.PromptResult{}, context.Cause(ctx)
		}
		select {
		case <-w.done:
			// The prompt ended, and the lane went on to other work (a
			// prompt queued after it): that is not this caller's.
			e.launch(wk)
			return w.result, w.err
		default:
		}
		e.exec(wk)
		next := wk.next
		recycle(wk)
		wk = next
	}
	select {
	case <-w.done: // the prompt ended on this goroutine: nothing to wait for
		return w.result, w.err
	default:
	}
	select {
	case <-w.done:
		return w.result, w.err
	case <-ctx.Done():
		return vocab.PromptResult{}, context.Cause(ctx)
	}
}
