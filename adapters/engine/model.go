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
	var (
		a     session.Assembler
		s     = &stream{}
		fail  error
		last  = e.opt.Clock.Now()
		works = wk.w.ID
	)
	a.Reset()
	err := safely(vocab.CodeInternal, "provider", func() error {
		for part, err := range e.opt.Provider.Stream(wk.ctx, *wk.w.Request) {
			if err != nil {
				fail = err
				return nil
			}
			if wk.ctx.Err() != nil {
				// The request was cancelled: a provider that ignores its
				// context is not listened to any longer.
				return nil
			}
			a.Add(part)
			// Text and thinking stream live; tool calls (which run only
			// once the reply is whole) come with the reply.
			if part.Kind == vocab.StreamText || part.Kind == vocab.StreamThinking {
				now := e.opt.Clock.Now()
				if s.add(part) && (e.opt.StreamFlush == 0 || now.Sub(last) >= e.opt.StreamFlush) {
					last = now
					s.mark()
					_ = e.post(item{in: vocab.Input{Kind: vocab.InModelParts, At: now, Work: works}, parts: s}, nil)
				}
			}
		}
		return nil
	})
	if err != nil {
		fail = err
	}
	if wk.ctx.Err() != nil && fail == nil {
		fail = context0(wk)
	}
	if fail != nil {
		e.report(wk, vocab.Input{Kind: vocab.InModelFailed, Err: vocab.AsError(fail), Jitter: e.jitter()})
		return
	}
	reply := a.Message()
	usage := a.Usage()
	e.report(wk, vocab.Input{Kind: vocab.InModelDone, Reply: &reply, Finish: a.Finish(), Usage: &usage})
}

func context0(wk *worker) error { return wk.ctx.Err() }

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
