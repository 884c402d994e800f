package otelchart

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// ScopeName is the instrumentation scope of the observer's tracer and
// meter.
const ScopeName = "github.com/loopchart/loopchart/adapters/otel"

// DefaultMaxSpanEvents is how many events a span keeps when
// Options.MaxSpanEvents is 0.
const DefaultMaxSpanEvents = 128

// Source reads a session's events from sequence number from on (0 means
// from the first), in order and without gaps: (*agentsvc.Service).Events
// is one (every event from from, then live ones), and so is a durable
// store read bound to a session:
//
//	func(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
//		return store.Events(ctx, st, session, from)
//	}
//
// A stream that ends without an error has delivered everything it will; a
// stream whose reader fell behind ends with an error matching
// agentsvc.ErrDropped.
type Source func(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error]

// Options configure an Observer. The zero value observes with the global
// providers, from the session's first event.
type Options struct {
	// TracerProvider makes the spans; otel.GetTracerProvider() when nil.
	// Install IDGenerator in it to get reproducible ids.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics; otel.GetMeterProvider() when nil.
	MeterProvider metric.MeterProvider
	// AgentName is gen_ai.agent.name, and names the invoke_agent spans
	// "invoke_agent {AgentName}"; when empty they are "invoke_agent" and
	// carry no agent name.
	AgentName string
	// ProviderName is gen_ai.provider.name until a model reply names its
	// provider (vocab.Response.Provider); "_OTHER" when empty.
	ProviderName string
	// From is where a previous observer of the same session stopped (its
	// Cursor, persisted by the application): the events up to From.Seq
	// are not emitted again, and the spans open at From.Seq are
	// re-created with their logged start times. The zero Cursor starts
	// from the session's first event.
	From Cursor
	// Read catches up when the live stream ends with agentsvc.ErrDropped
	// (the reader fell behind and the service cannot read its events
	// back): the observer reads the missing events from Read, then
	// subscribes to the live stream again. When nil it subscribes again
	// at once, which helps only when the live source can serve the missed
	// events. Typically store.Events bound to the session's store.
	Read Source
	// TransitionEvents adds every machine transition as a span event
	// ("transition") on the innermost open span it concerns: off by
	// default (a step makes a dozen).
	TransitionEvents bool
	// MaxSpanEvents is how many events a span keeps; the ones past it are
	// counted in the attribute loopchart.span.events_dropped. 0 means
	// DefaultMaxSpanEvents; negative is an error.
	MaxSpanEvents int
}

// Cursor says how far an observer got in its session. An application
// that wants a restarted observer to emit nothing twice persists it (it
// marshals to JSON) and passes it back as Options.From.
type Cursor struct {
	// Session is the session observed; a stream of another session is
	// refused.
	Session vocab.ID `json:"session,omitempty"`
	// Seq is the sequence number of the last event fully handled: every
	// span that ended by it was emitted.
	Seq uint64 `json:"seq"`
	// Replay is the sequence number of the first event a restarted
	// observer reads again, without emitting anything, to re-create the
	// spans open at Seq (the submit of the oldest prompt not yet ended,
	// or the start of the running turn); 0 when nothing is open.
	Replay uint64 `json:"replay,omitempty"`
	// Model and Provider are the request model and the provider in force
	// just before Replay (at Seq when nothing is open): the events that
	// set them may be older.
	Model    string `json:"model,omitempty"`
	Provider string `json:"provider,omitempty"`
}

// Observer turns one session's events into spans and metrics. Make one
// with New; its methods are safe for concurrent use, but it observes one
// stream at a time.
type Observer struct {
	opt     Options
	tracer  trace.Tracer
	inst    *instruments
	maxEvs  int
	running atomic.Bool

	mu  sync.Mutex // guards cur
	cur Cursor

	// The fields below belong to the goroutine running Observe.
	session  vocab.ID
	seq      uint64 // the last event consumed
	foldTo   uint64 // events up to it are folded, not emitted
	folding  bool
	model    string // the request model of the last request/header
	provider string // gen_ai.provider.name in force
	optCache map[optKey]metric.MeasurementOption
	st       state
	want     wanted               // the ids the next span start asks for
	idCtx    context.Context      // asks for *want
	names    map[[2]string]string // span names by prefix and name
	free     []*span              // ended spans to reuse
}

// New makes an Observer. It fails when an option is out of range or an
// instrument cannot be made.
func New(opt Options) (*Observer, error) {
	if opt.MaxSpanEvents < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "otelchart: negative MaxSpanEvents %d", opt.MaxSpanEvents)
	}
	if opt.From.Replay > opt.From.Seq {
		return nil, vocab.Errorf(vocab.CodeBadInput, "otelchart: cursor replays from %d, after its seq %d", opt.From.Replay, opt.From.Seq)
	}
	tp, mp := opt.TracerProvider, opt.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	o := &Observer{
		opt:      opt,
		tracer:   tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		maxEvs:   opt.MaxSpanEvents,
		cur:      opt.From,
		seq:      opt.From.Seq,
		session:  opt.From.Session,
		optCache: map[optKey]metric.MeasurementOption{},
		provider: opt.ProviderName,
		st:       newState(),
		names:    map[[2]string]string{},
	}
	o.idCtx = withIDs(context.Background(), &o.want)
	if o.maxEvs == 0 {
		o.maxEvs = DefaultMaxSpanEvents
	}
	if o.provider == "" {
		o.provider = "_OTHER"
	}
	o.model = opt.From.Model
	if opt.From.Provider != "" {
		o.provider = opt.From.Provider
	}
	if opt.From.Replay > 0 {
		o.seq, o.foldTo, o.folding = opt.From.Replay-1, opt.From.Seq, true
	}
	var err error
	if o.inst, err = newInstruments(mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))); err != nil {
		return nil, err
	}
	return o, nil
}

// Cursor returns how far the observer got: persist it and pass it as
// Options.From to a later observer of the same session.
func (o *Observer) Cursor() Cursor {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cur
}

// errBusy refuses a second stream while one is observed.
var errBusy = vocab.Errorf(vocab.CodeNotIdle, "otelchart: the observer already observes a stream")

// Observe turns the events of events into spans and metrics until the
// stream ends: it returns nil when the stream ended by itself (the
// session was closed and everything delivered), ctx's cause when ctx
// ended, and the stream's error otherwise. When the stream ends with
// agentsvc.ErrDropped, Observe catches up through Options.Read (when set)
// and subscribes to events again from its cursor.
//
// It reads from the cursor on (Options.From, or where an earlier Observe
// of this observer stopped): spans open when it returns stay open, and a
// later Observe (or a new observer from Cursor) goes on with them. An
// event out of sequence, or of another session, is an error.
func (o *Observer) Observe(ctx context.Context, events Source) error {
	if !o.running.CompareAndSwap(false, true) {
		return errBusy
	}
	defer o.running.Store(false)
	src, live := events, true
	dropped, progress := false, false // a drop was seen; events came since the last one
	for {
		var failed error
		for ev, err := range src(ctx, o.seq+1) {
			if err != nil {
				failed = err
				break
			}
			if err := o.consume(ev); err != nil {
				return err
			}
			progress = true
		}
		switch {
		case failed == nil && live:
			return nil
		case failed == nil: // caught up: live again
			src, live = events, true
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case !errors.Is(failed, eventlog.ErrDropped), dropped && !progress:
			return failed
		case live && o.opt.Read != nil:
			src, live = o.opt.Read, false
		default:
			src, live = events, true
		}
		if failed != nil {
			dropped, progress = true, false
		}
	}
}

// ObserveService observes svc's session: o.Observe(ctx, svc.Events).
func (o *Observer) ObserveService(ctx context.Context, svc *agentsvc.Service) error {
	return o.Observe(ctx, svc.Events)
}

// consume handles one event of the stream.
func (o *Observer) consume(ev vocab.Event) error {
	if ev.Seq <= o.seq {
		return nil // delivered again after a re-subscription
	}
	if ev.Seq != o.seq+1 {
		return vocab.Errorf(vocab.CodeSequence, "otelchart: event %d after %d: the stream has a gap", ev.Seq, o.seq)
	}
	if o.session == "" {
		o.session = ev.Session
	} else if ev.Session != o.session {
		return vocab.Errorf(vocab.CodeBadInput, "otelchart: event %d of session %s in a stream of %s", ev.Seq, ev.Session, o.session)
	}
	if o.folding && ev.Seq > o.foldTo {
		o.folding = false
		o.materializeOpen()
	}
	o.handle(ev)
	o.seq = ev.Seq
	if o.folding {
		return nil // the cursor stays where the last observer left it
	}
	o.mu.Lock()
	o.cur.Session, o.cur.Seq = o.session, ev.Seq
	if o.st.openChanged {
		o.cur.Replay, o.cur.Model, o.cur.Provider = o.replay()
		o.st.openChanged = false
	}
	o.mu.Unlock()
	return nil
}

// seconds is d in seconds.
func seconds(d time.Duration) float64 { return d.Seconds() }
