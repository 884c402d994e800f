package otelchart

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// span is a span the observer keeps open. While the observer folds (it
// re-reads events it already handled, after a restart) a span is only
// recorded here, and started for real ("made live") when folding ends.
// Attributes and the status set after the start are kept here too and
// given to the SDK span once, when it ends: one SetAttributes per span
// instead of one per change.
type span struct {
	name   string
	kind   trace.SpanKind
	ids    wanted
	parent *span // nil for an invoke_agent span (a root)
	start  time.Time
	seq    uint64 // the event that opened it

	live     trace.Span
	childCtx context.Context      // a context holding live, for its children
	attrs    []attribute.KeyValue // set and not yet given to the SDK span
	evs      []spanEvent          // added before it is live
	status   codes.Code
	desc     string

	events  int // events kept
	dropped int // events past the limit
	ended   bool
}

// spanEvent is an event added to a span before it is live.
type spanEvent struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// open makes a span with the attributes attrs, live at once unless the
// observer folds.
func (o *Observer) open(name string, kind trace.SpanKind, parent *span, ids wanted, seq uint64, at time.Time, attrs ...attribute.KeyValue) *span {
	var s *span
	if n := len(o.free); n > 0 {
		s, o.free = o.free[n-1], o.free[:n-1]
	} else {
		s = new(span)
	}
	s.name, s.kind, s.ids, s.parent, s.start, s.seq = name, kind, ids, parent, at, seq
	s.attrs = append(s.attrs[:0], attrs...)
	if !o.folding {
		o.makeLive(s)
	}
	return s
}

// release gives back an ended span nothing refers to any more: the next
// open reuses it (a span holds room for its attributes, and a session
// opens spans by the thousand).
func (o *Observer) release(s *span) {
	if s == nil || len(o.free) >= 64 {
		return
	}
	attrs := s.attrs[:0] // keeps its array: the SDK copies attributes
	*s = span{}
	s.attrs = attrs
	o.free = append(o.free, s)
}

// makeLive starts s in the SDK, with its recorded start time, ids,
// attributes and events (its parent first). The wanted ids go through
// o.idCtx, which points at o.want: Start asks the IDGenerator for ids
// before it returns, on this goroutine.
func (o *Observer) makeLive(s *span) {
	if s.live != nil {
		return
	}
	o.want = s.ids
	ctx := o.idCtx
	root := noStartOption
	if s.parent == nil {
		root = trace.WithNewRoot()
	} else {
		p := s.parent
		o.makeLive(p)
		if p.childCtx == nil {
			p.childCtx = trace.ContextWithSpan(o.idCtx, p.live)
		}
		ctx = p.childCtx
		o.want = s.ids
	}
	_, s.live = o.tracer.Start(ctx, s.name, trace.WithTimestamp(s.start), kindOption(s.kind), trace.WithAttributes(s.attrs...), root)
	for _, e := range s.evs {
		s.live.AddEvent(e.name, trace.WithTimestamp(e.at), trace.WithAttributes(e.attrs...))
	}
	s.attrs, s.evs = s.attrs[:0], nil
}

// Span start options made once.
var (
	noStartOption  = trace.WithLinks() // changes nothing
	internalOption = trace.WithSpanKind(trace.SpanKindInternal)
	clientOption   = trace.WithSpanKind(trace.SpanKindClient)
)

func kindOption(k trace.SpanKind) trace.SpanStartOption {
	if k == trace.SpanKindClient {
		return clientOption
	}
	return internalOption
}

// set sets attributes of s (replacing those with the same keys).
func (s *span) set(kv ...attribute.KeyValue) {
	for _, a := range kv {
		replaced := false
		for i := range s.attrs {
			if s.attrs[i].Key == a.Key {
				s.attrs[i], replaced = a, true
				break
			}
		}
		if !replaced {
			s.attrs = append(s.attrs, a)
		}
	}
}

// rename renames s.
func (s *span) rename(name string) {
	s.name = name
	if s.live != nil {
		s.live.SetName(name)
	}
}

// fail marks s failed: error.type errType, status Error with desc.
func (s *span) fail(errType, desc string) {
	s.set(semconv.ErrorTypeKey.String(errType))
	s.status, s.desc = codes.Error, desc
}

// event adds an event to s, unless s holds max events already: then it
// counts it as dropped.
func (s *span) event(max int, name string, at time.Time, kv ...attribute.KeyValue) {
	if s == nil {
		return
	}
	if s.events >= max {
		s.dropped++
		return
	}
	s.events++
	if s.live != nil {
		s.live.AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(kv...))
		return
	}
	s.evs = append(s.evs, spanEvent{name: name, at: at, attrs: kv})
}

// end ends s at at (once), with the attributes and status set since it
// started. A span that is not live (the observer folds) just closes: it
// was emitted before the restart.
func (s *span) end(at time.Time) {
	if s == nil || s.ended {
		return
	}
	s.ended = true
	if s.live == nil {
		return
	}
	if s.dropped > 0 {
		s.set(keyEventsDropped.Int(s.dropped))
	}
	if len(s.attrs) > 0 {
		s.live.SetAttributes(s.attrs...)
	}
	if s.status != codes.Unset {
		s.live.SetStatus(s.status, s.desc)
	}
	s.live.End(trace.WithTimestamp(at))
	s.attrs, s.childCtx = s.attrs[:0], nil
}
