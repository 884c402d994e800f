package engine

import (
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// runModel streams one model request. The reply is assembled here and
// arrives whole with model.done; while it streams, its text and thinking
// deltas reach the core merged, at most one input outstanding per request
// (and at most one per StreamFlush when set), so a fast stream cannot
// flood the mailbox and callers never queue behind deltas.
func (e *Engine) runModel(wk *worker) {
	// One value holds the request's state, so the loop body (a closure
	// handed to the provider's iterator) captures one pointer. It is
	// reused (modelRuns): nothing outlives the request but the reply and
	// the usage, which are allocations of their own (the core takes the
	// reply over and its log keeps it), and the stream buffer.
	r := modelRuns.Get().(*modelRun)
	*r = modelRun{e: e, wk: wk, last: e.opt.Clock.Now()}
	defer func() {
		*r = modelRun{}
		modelRuns.Put(r)
	}()
	r.a.Reset()
	r.stream()
	if wk.ctx.Err() != nil && r.fail == nil {
		r.fail = wk.ctx.Err()
	}
	if r.fail != nil {
		e.report(wk, vocab.Input{Kind: vocab.InModelFailed, Err: vocab.AsError(r.fail), Jitter: e.jitter()})
		return
	}
	reply, usage := new(vocab.Message), new(vocab.Usage)
	*reply, *usage = r.a.Message(), r.a.Usage()
	e.report(wk, vocab.Input{Kind: vocab.InModelDone, Reply: reply, Finish: r.a.Finish(), Usage: usage})
}

// modelRuns holds spare request states (see runModel).
var modelRuns = sync.Pool{New: func() any { return new(modelRun) }}

// modelRun is one model request being streamed.
type modelRun struct {
	e    *Engine
	wk   *worker
	a    session.Assembler
	s    *stream // made on the first live delta
	last time.Time
	fail error
}

// stream reads the provider's stream; a panic in the provider is a
// failure with code internal.
func (r *modelRun) stream() {
	defer func() {
		if p := recover(); p != nil {
			r.fail = vocab.Errorf(vocab.CodeInternal, "provider panicked: %v", p)
		}
	}()
	for part, err := range r.e.opt.Provider.Stream(r.wk.ctx, *r.wk.w.Request) {
		if err != nil {
			r.fail = err
			return
		}
		if r.wk.ctx.Err() != nil {
			// The request was cancelled: a provider that ignores its
			// context is not listened to any longer.
			return
		}
		r.a.Add(part)
		// Text and thinking stream live; tool calls (which run only once
		// the reply is whole) come with the reply.
		if part.Kind == vocab.StreamText || part.Kind == vocab.StreamThinking {
			r.live(part)
		}
	}
}

// live hands a delta to the core, merged with the others not yet taken.
func (r *modelRun) live(part vocab.StreamPart) {
	if r.s == nil {
		r.s = &stream{}
	}
	e := r.e
	now := e.opt.Clock.Now()
	if r.s.add(part) && (e.opt.StreamFlush == 0 || now.Sub(r.last) >= e.opt.StreamFlush) {
		r.last = now
		r.s.mark()
		_ = e.post(item{in: vocab.Input{Kind: vocab.InModelParts, At: now, Work: r.wk.w.ID}, parts: r.s}, nil)
	}
}

func (e *Engine) jitter() float64 {
	j := e.opt.Jitter()
	if j < 0 || j >= 1 {
		return 0
	}
	return j
}

// stream holds the parts of one reply not yet handed to the core, merging
// consecutive text (or thinking) deltas into one part.
type stream struct {
	mu     sync.Mutex
	parts  []vocab.StreamPart
	text   strings.Builder
	kind   vocab.StreamPartKind
	queued bool
}

// add buffers p; it reports whether no input for the buffer is queued.
func (s *stream) add(p vocab.StreamPart) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch p.Kind {
	case vocab.StreamText, vocab.StreamThinking:
		if p.Kind != s.kind {
			s.flushText()
			s.kind = p.Kind
		}
		s.text.WriteString(p.Text)
	default:
		s.flushText()
		s.parts = append(s.parts, p)
	}
	return !s.queued
}

func (s *stream) flushText() {
	if s.text.Len() > 0 {
		s.parts = append(s.parts, vocab.StreamPart{Kind: s.kind, Text: s.text.String()})
		s.text.Reset()
	}
	s.kind = ""
}

// mark records that an input for the buffer is queued.
func (s *stream) mark() {
	s.mu.Lock()
	s.queued = true
	s.mu.Unlock()
}

// take empties the buffer (the queued input is being stepped).
func (s *stream) take() []vocab.StreamPart {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushText()
	p := s.parts
	s.parts, s.queued = nil, false
	return p
}

var _ = time.Second
