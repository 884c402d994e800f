package otelchart

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopchart/loopchart/vocab"
)

// IDGenerator returns the sdktrace.IDGenerator that makes the observer's
// span and trace ids reproducible. Install it in the TracerProvider the
// observer uses:
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(otelchart.IDGenerator(nil)), ...)
//
// The OpenTelemetry API has no way to ask for a given id when a span
// starts, so the observer puts the ids it wants (derived from the session
// and the sequence numbers of its events) into the context it passes to
// Tracer.Start, and this generator hands them back to the SDK. Starts
// whose context carries no wanted ids (every other span of the
// application) get ids from fallback, or random ids when fallback is nil.
//
// Without it the spans are the same, with random ids: the same log then
// gives other ids on every run, and the spans an observer re-creates after
// a restart (see Cursor) do not join the ones exported before it.
func IDGenerator(fallback sdktrace.IDGenerator) sdktrace.IDGenerator {
	return idGenerator{fallback: fallback}
}

// idGenerator is IDGenerator's generator.
type idGenerator struct{ fallback sdktrace.IDGenerator }

// wantedKey keys the ids a span should get in a Start's context.
type wantedKey struct{}

// wanted are the ids a span should get.
type wanted struct {
	trace trace.TraceID
	span  trace.SpanID
}

// withIDs returns ctx asking for the ids w.
func withIDs(ctx context.Context, w *wanted) context.Context {
	return context.WithValue(ctx, wantedKey{}, w)
}

// NewIDs implements sdktrace.IDGenerator: the wanted ids of a root span.
func (g idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantedKey{}).(*wanted); ok {
		return w.trace, w.span
	}
	if g.fallback != nil {
		return g.fallback.NewIDs(ctx)
	}
	var t trace.TraceID
	for !t.IsValid() {
		binary.BigEndian.PutUint64(t[:8], rand.Uint64())
		binary.BigEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t, randomSpanID()
}

// NewSpanID implements sdktrace.IDGenerator: the wanted id of a child span.
func (g idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantedKey{}).(*wanted); ok {
		return w.span
	}
	if g.fallback != nil {
		return g.fallback.NewSpanID(ctx, traceID)
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.BigEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// Roles keep apart the ids of spans opened by the same event (a turn
// without a prompt opens its invoke_agent span and its turn span at its
// turn/start).
const (
	roleInvoke byte = 'a'
	roleTurn   byte = 't'
	roleStep   byte = 's'
	roleChat   byte = 'c'
	roleTool   byte = 'x'
)

// hashOf hashes (session, seq, role, salt): FNV-1a over the bytes, then
// a splitmix64 finaliser so that neighbouring sequence numbers give
// unrelated ids. It allocates nothing.
func hashOf(session vocab.ID, seq uint64, role, salt byte) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(session); i++ {
		h = (h ^ uint64(session[i])) * prime
	}
	h = (h ^ 0xff) * prime // ends the session id: "ab"+"c" differs from "a"+"bc"
	for i := range 8 {
		h = (h ^ (seq >> (8 * i) & 0xff)) * prime
	}
	h = (h ^ uint64(role)) * prime
	h = (h ^ uint64(salt)) * prime
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// traceIDOf is the trace id of the invocation opened by event seq.
func traceIDOf(session vocab.ID, seq uint64) trace.TraceID {
	var t trace.TraceID
	binary.BigEndian.PutUint64(t[:8], hashOf(session, seq, roleInvoke, 1))
	binary.BigEndian.PutUint64(t[8:], hashOf(session, seq, roleInvoke, 2))
	if !t.IsValid() {
		t[15] = 1
	}
	return t
}

// spanIDOf is the id of the span with role opened by event seq.
func spanIDOf(session vocab.ID, seq uint64, role byte) trace.SpanID {
	var s trace.SpanID
	binary.BigEndian.PutUint64(s[:], hashOf(session, seq, role, 0))
	if !s.IsValid() {
		s[7] = 1
	}
	return s
}
