package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
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
	// the usage, which are an allocation of their own (the core takes the
	// reply over and its log keeps it), and the stream buffer.
	//
	// The watchdog (and its timer) is reused too, but only by this
	// engine (e.dog), never through the shared pool: a timer belongs to
	// the goroutines that made it (a testing/synctest bubble forbids
	// resetting it from outside), and a session's requests run one at a
	// time.
	r := modelRuns.Get().(*modelRun)
	*r = modelRun{e: e, wk: wk, last: e.opt.Clock.Now(), dog: e.dog.Swap(nil), gen: r.gen}
	defer func() {
		r.giveBack()
		*r = modelRun{gen: r.gen}
		modelRuns.Put(r)
	}()
	r.a.Reset()
	if !e.opt.NoStreamWatchdog {
		r.w = r.watch()
	}
	r.stream()
	if r.w != nil {
		idle, reuse := r.w.end()
		if !reuse {
			r.dog = nil
		}
		r.giveBack()
		// A stream the watchdog cut failed for that, whatever the provider
		// made of its cancelled context (a panic stays a bug).
		if idle != nil && vocab.CodeOf(r.fail) != vocab.CodeInternal {
			r.fail = idle
		}
	}
	if err := wk.ctx.Err(); err != nil && r.fail == nil {
		r.fail = err
	}
	if r.fail != nil {
		in := vocab.Input{Kind: vocab.InModelFailed, Err: vocab.AsError(r.fail), Jitter: e.jitter()}
		if u := r.a.Usage(); u != (vocab.Usage{}) {
			in.Usage = &u // what the failed request used counts too
		}
		e.report(wk, in)
		return
	}
	// The reply and its usage share one allocation.
	done := &struct {
		reply vocab.Message
		usage vocab.Usage
	}{r.a.Take(), r.a.Usage()} // the request is over: its parts are the reply's
	e.report(wk, vocab.Input{Kind: vocab.InModelDone, Reply: &done.reply, Finish: r.a.Finish(), Usage: &done.usage})
}

// giveBack hands the run's watchdog back to its engine for the next
// request, before the request's result is posted: once the result is in,
// the session may stop, and its stop stops the spare watchdog's timer. A
// session that stopped meanwhile (a failed append stops it while work
// runs) has its spare's timer stopped here.
func (r *modelRun) giveBack() {
	if r.dog == nil {
		return
	}
	e := r.e
	e.dog.Store(r.dog)
	r.dog = nil
	if e.halted.Load() {
		e.disarm()
	}
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
	// content is set once the reply's first text, thinking or tool call
	// arrived: a usage report after it is the reply's end, not its start.
	content bool
	// w watches this request's stream (nil: Options.NoStreamWatchdog);
	// dog is the watchdog the run state keeps for its next request.
	w, dog *watchdog
	// gen counts the requests this (pooled) run state served; it
	// survives its resets (see runModel, stream). ended is set once the
	// loop body reported false or the stream returned.
	gen   uint64
	ended bool
}

// stream reads the provider's stream; a panic in the provider is a
// failure with code internal.
//
// The loop body is r.yield, called through a closure that holds the
// request's generation: one allocation per request, where a
// range-over-func loop makes two (its body closure and its state). The
// run state is pooled, so a body its provider kept and calls after the
// stream returned must never reach the request that reuses it: it finds
// its generation gone and panics, as a range-over-func body would.
func (r *modelRun) stream() {
	defer func() {
		if p := recover(); p != nil {
			r.fail = vocab.Errorf(vocab.CodeInternal, "provider panicked: %v", p)
		}
	}()
	r.gen++
	gen := r.gen
	seq := r.e.opt.Provider.Stream(r.wk.ctx, *r.wk.w.Request)
	seq(func(part vocab.StreamPart, err error) bool { return r.yield(gen, part, err) })
	r.ended = true
}

// yield is the body of the loop over the provider's stream: it handles
// one part, and reports false when the stream is to stop. Like a
// range-over-func loop, it panics when the provider goes on after it
// reported false (a failure with code internal, see stream).
func (r *modelRun) yield(gen uint64, part vocab.StreamPart, err error) bool {
	if gen != r.gen {
		panic("range function continued iteration after whole loop exit")
	}
	if r.ended {
		panic("range function continued iteration after function for loop body returned false")
	}
	if err != nil {
		r.fail = err
		r.ended = true
		return false
	}
	if r.wk.ctx.Err() != nil {
		// The request was cancelled: a provider that ignores its
		// context is not listened to any longer.
		r.ended = true
		return false
	}
	// Text and thinking stream live; tool calls (which run only once
	// the reply is whole) come with the reply. Usage streams live
	// when it comes first (a provider that reports its input tokens
	// as the reply starts: a cancelled request's usage is then
	// known) or can ride with deltas already waiting; a usage
	// report at the end comes with the reply, costing no input.
	live := false
	switch part.Kind {
	case vocab.StreamText, vocab.StreamThinking:
		r.content, live = true, true
	case vocab.StreamToolCall:
		r.content = true
	case vocab.StreamUsage:
		live = !r.content || r.s != nil && r.s.pending()
	}
	// A part handed to the session may step the lane on this goroutine:
	// the watchdog counts that as busy, not silence. A part that is not
	// (added to the reply, nothing more) is only recorded as handled.
	if live && r.w != nil {
		r.w.part()
	}
	r.a.Add(part)
	if live {
		r.live(part)
	}
	if r.w != nil {
		r.w.handled()
	}
	return true
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
		_ = e.post(&item{in: vocab.Input{Kind: vocab.InModelParts, At: now, Work: r.wk.w.ID}, parts: r.s}, nil, nil)
	}
}

// Stream watchdog defaults (Options.FirstTokenTimeout, ChunkTimeout).
const (
	DefaultFirstTokenTimeout = 10 * time.Minute
	DefaultChunkTimeout      = 5 * time.Minute
)

// watchdog bounds the silences of one model request's stream: the time to
// its first part (Options.FirstTokenTimeout) and between two parts
// (ChunkTimeout). When one runs out it cancels the request's context with
// an llm.stream_idle error, which the request then fails with.
//
// It lives in the lane, not in the session core: a core timer re-armed
// per delta would log events per delta. One timer serves the whole
// request, and a part does not touch it: a part records when it was
// handled, and a timer that comes due early re-arms itself for what is
// left. Before the first part it is never armed further ahead than
// ChunkTimeout, so a first part that brings the deadline forward cannot
// be missed. A part being handed to the session (which may step the lane
// on this goroutine) is never silence.
//
// A watchdog is kept with its pooled run state for the next request; on
// the real clock it keeps its timer too, and the timer is not stopped
// when a request ends: it stays armed for the next request, which
// re-arms it only when it would come due later than the request needs
// (a timer that comes due early re-arms itself, above). So a request on
// the real clock costs no timer operation at all while requests follow
// each other within ChunkTimeout; a timer that comes due with no request
// being watched just stops, and Close stops one still armed. Watchdogs
// are never shared: a callback that runs late only ever finds its own
// watchdog, ended (it does nothing) or watching a later request of the
// same engine (which it serves as its own timer would). On another clock
// a request's timer is stopped when it ends, and a watchdog whose
// callback may still run is not reused.
type watchdog struct {
	mu   sync.Mutex
	fire func() // expire, bound once
	// timer is the request's timer; real is set when the real clock made
	// it (a *time.Timer, re-armed with Reset and left armed from one
	// request to the next: pending says it is armed, due when it comes
	// due, on the monotonic clock). arms counts the times it was armed
	// (tests read it).
	timer   clock.Timer
	real    bool
	pending bool
	due     time.Time
	arms    uint64
	// The request's clock, limits and context, and its start (since).
	// On the real clock (mono) the monotonic clock alone is read
	// (time.Since), half the cost of time.Now, which reads the wall
	// clock too.
	clk          clock.Clock
	first, chunk time.Duration
	cancel       *workCtx
	since        time.Time
	mono         bool
	state        watchState
	err          *vocab.Error
	// seen is the request's progress, elapsed<<2 | busy<<1 | parts:
	// whether a part arrived, whether one is being handled, and how long
	// after the start the last one was handled. A part is recorded with
	// one atomic store, not a lock and an unlock (three parts a step),
	// and the timer's callback reads it (see progress).
	seen atomic.Uint64
}

// The bits of watchdog.seen below the elapsed time.
const (
	seenParts = 1 << iota
	seenBusy
	seenShift = iota
)

// progress returns whether a part arrived, whether one is being
// handled, and how long after the start the last one was handled.
func (w *watchdog) progress() (parts, busy bool, elapsed time.Duration) {
	v := w.seen.Load()
	return v&seenParts != 0, v&seenBusy != 0, time.Duration(v >> seenShift)
}

type watchState uint8

const (
	watchArmed watchState = iota
	watchFired
	watchEnded
)

// realClock is the clock whose timers a watchdog re-arms with Reset.
var realClock = clock.Real()

// watch arms the request's watchdog, reusing the run state's.
func (r *modelRun) watch() *watchdog {
	w := r.dog
	if w == nil {
		w = &watchdog{}
		w.fire = w.expire
		r.dog = w
	}
	opt := &r.e.opt
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clk, w.first, w.chunk, w.cancel = opt.Clock, opt.FirstTokenTimeout, opt.ChunkTimeout, r.wk.ctx
	w.since, w.state, w.err = r.last, watchArmed, nil
	w.seen.Store(0)
	w.mono = opt.Clock == realClock
	if w.real && opt.Clock != realClock { // (a clock of another type compares unequal)
		w.timer.Stop()
		w.timer, w.real, w.pending = nil, false, false
	}
	d := min(w.first, w.chunk)
	if w.real && w.pending && !w.due.After(w.since.Add(d)) {
		return w // armed by an earlier request, due no later than this one needs
	}
	w.arm(w.since, d)
	return w
}

// arm sets the timer d from now (the time it was read at); w.mu is held,
// and on a clock other than the real one the timer is not pending.
func (w *watchdog) arm(now time.Time, d time.Duration) {
	w.arms++
	if w.real {
		w.timer.(*time.Timer).Reset(d)
		w.pending, w.due = true, now.Add(d)
		return
	}
	w.timer = w.clk.AfterFunc(d, w.fire)
	w.real = w.clk == realClock
	if _, ok := w.timer.(*time.Timer); !ok {
		w.real = false
	}
	w.pending, w.due = w.real, now.Add(d)
}

// part records that a part arrived and is being handled.
func (w *watchdog) part() { w.seen.Or(seenParts | seenBusy) }

// handled records that a part arrived and has been handled: the silence
// before the next one starts now.
func (w *watchdog) handled() {
	w.seen.Store(uint64(max(w.elapsed(), 0))<<seenShift | seenParts)
}

// elapsed returns the time since the request's start.
func (w *watchdog) elapsed() time.Duration {
	if w.mono {
		return time.Since(w.since)
	}
	return w.clk.Now().Sub(w.since)
}

// now reads the request's clock (the real one: time.Now). w.mu is held.
func (w *watchdog) now() time.Time {
	if w.mono {
		return time.Now()
	}
	return w.clk.Now()
}

// expire is the timer's callback: it cuts a stream silent for too long
// and re-arms the timer otherwise.
func (w *watchdog) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = false // this call is the timer's: it comes due again only if re-armed
	if w.state != watchArmed {
		return // no request is watched: the timer stops
	}
	parts, busy, elapsed := w.progress()
	limit := w.chunk
	if !parts {
		limit = w.first
	}
	left := limit
	if !busy {
		left -= max(w.elapsed()-elapsed, 0) // the silence since the last part
	}
	if left > 0 {
		w.arm(w.now(), min(left, w.chunk))
		return
	}
	w.state = watchFired
	if parts {
		w.err = &vocab.Error{Code: vocab.CodeStreamIdle, Retryable: true,
			Message: fmt.Sprintf("the reply stalled: no part for %v (chunk timeout)", limit)}
	} else {
		w.err = &vocab.Error{Code: vocab.CodeStreamIdle, Retryable: true,
			Message: fmt.Sprintf("no part of the reply within %v (first-token timeout)", limit)}
	}
	w.cancel.cancel(w.err)
}

// end disarms w once its request's stream has ended. It returns the error
// w cut the stream with (nil if it did not), and whether w may serve
// another request: on a clock other than the real one, not when its timer
// fired and the callback has yet to run (it will find w ended and do
// nothing). A real timer is left armed for the next request (see
// watchdog).
func (w *watchdog) end() (*vocab.Error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fired := w.state == watchFired
	w.state, w.cancel, w.clk = watchEnded, nil, nil
	if fired {
		return w.err, true
	}
	if w.real {
		return nil, true
	}
	return nil, w.timer.Stop()
}

// disarm stops w's timer for good: its engine has stopped.
func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state, w.cancel, w.clk = watchEnded, nil, nil
	if w.timer != nil {
		w.timer.Stop()
	}
	w.pending = false
}

func (e *Engine) jitter() float64 {
	j := e.opt.Jitter()
	if !(j >= 0 && j < 1) { // NaN too: the core refuses it
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
		if p.Provider != "" {
			// A thinking block's closing part keeps its metadata.
			p.Text = s.text.String()
			s.text.Reset()
			s.kind = ""
			s.parts = append(s.parts, p)
		}
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

// pending reports whether an input for the buffer is queued.
func (s *stream) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
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
