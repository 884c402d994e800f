package otelchart_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	otelchart "github.com/loopchart/loopchart/adapters/otel"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// flat renders each span on its own, ids and times included, sorted: two
// runs gave the same spans when their flat renderings are equal.
func flat(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s trace=%s span=%s parent=%s %s..%s status=%s %q",
			s.Name(), s.SpanKind(), s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(),
			s.StartTime().Format("15:04:05.000"), s.EndTime().Format("15:04:05.000"), s.Status().Code, s.Status().Description)
		fmt.Fprintf(&b, " {%s}", attrsOf(s.Attributes()))
		for _, e := range s.Events() {
			fmt.Fprintf(&b, " event(%s %s {%s})", e.Name, e.Time.Format("15:04:05.000"), attrsOf(e.Attributes))
		}
		out[i] = b.String()
	}
	slices.Sort(out)
	return out
}

// Observing the same log twice, with two tracer providers, gives the
// same trace and span ids: they derive from the session and the events'
// sequence numbers.
func TestIDsAreReproducible(t *testing.T) {
	evs := runDemo(t)
	a, b := newTelemetry(), newTelemetry()
	a.observe(t, evs, otelchart.Options{})
	b.observe(t, evs, otelchart.Options{})
	if diff := gocmp.Diff(flat(a.spans()), flat(b.spans())); diff != "" {
		t.Errorf("two runs over one log differ:\n%s", diff)
	}
	traces := map[string]bool{}
	for _, s := range a.spans() {
		traces[s.SpanContext().TraceID().String()] = true
	}
	if len(traces) != 1 {
		t.Errorf("one prompt made %d traces", len(traces))
	}
}

// twoPrompts is a session whose second prompt is submitted while the
// first runs: it waits queued, then runs in a turn of its own.
func twoPrompts(t testing.TB) []vocab.Event {
	s := newSession(t, `{"steps": [
		{"delay": "1s", "tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "a"}}]},
		{"delay": "1s", "parts": [{"text": "first"}]},
		{"delay": "1s", "parts": [{"text": "second"}]}]}`, []vocab.Tool{echoTool()}, false, agentsvc.Options{})
	p1, _ := s.svc.SubmitText("one")
	p2, _ := s.svc.SubmitText("two")
	s.wait(p1)
	s.wait(p2)
	return s.close()
}

// sequential is a session of two prompts, the second submitted once the
// first has ended: nothing is open between them, and the second's
// requests go out under the model the first's header logged.
func sequential(t testing.TB) []vocab.Event {
	s := newSession(t, `{"steps": [
		{"delay": "1s", "parts": [{"text": "first"}]},
		{"delay": "1s", "parts": [{"text": "second"}]}]}`, nil, false, agentsvc.Options{})
	p, _ := s.svc.SubmitText("one")
	s.wait(p)
	p, _ = s.svc.SubmitText("two")
	s.wait(p)
	return s.close()
}

// cancelled is a session whose only prompt is cancelled mid-request.
func cancelled(t testing.TB) []vocab.Event {
	s := newSession(t, `{"steps": [{"delay": "10s", "parts": [{"text": "too late"}]}]}`, nil, true, agentsvc.Options{})
	p, _ := s.svc.SubmitText("take your time")
	if err := s.clk.WaitForDue(ctxT(t), 10*1e9); err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(1e9)
	s.svc.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{})
	p.Wait(ctxT(t))
	return s.close()
}

// An observer stopped after any event k, and a new one started from its
// cursor, emit together exactly what one observer of the whole log
// emits: the same spans (ids, start times, attributes, events) and the
// same metrics, none twice. The spans open at k are re-created by the
// second observer with their logged start times.
func TestRestartFromCursor(t *testing.T) {
	for name, evs := range map[string][]vocab.Event{
		"demo": runDemo(t), "two-prompts": twoPrompts(t), "sequential": sequential(t), "cancel": cancelled(t)} {
		t.Run(name, func(t *testing.T) {
			opt := otelchart.Options{TransitionEvents: true}
			whole := newTelemetry()
			whole.observe(t, evs, opt)
			want, wantMetrics := flat(whole.spans()), whole.metrics(t)
			reopened := 0
			for k := 1; k < len(evs); k++ {
				tel := newTelemetry()
				first := tel.observe(t, evs[:k], opt)
				cur := first.Cursor()
				if cur.Seq != evs[k-1].Seq {
					t.Fatalf("k=%d: cursor %+v", k, cur)
				}
				if cur.Replay > 0 {
					reopened++
				}
				opt2 := opt
				opt2.From = cur
				tel.observe(t, evs, opt2)
				if diff := gocmp.Diff(want, flat(tel.spans())); diff != "" {
					t.Fatalf("stopped after seq %d (cursor %+v): spans differ (-one observer +two):\n%s", evs[k-1].Seq, cur, diff)
				}
				if got := tel.metrics(t); got != wantMetrics {
					t.Fatalf("stopped after seq %d: metrics differ:\none observer:\n%s\ntwo:\n%s", evs[k-1].Seq, wantMetrics, got)
				}
			}
			if reopened == 0 {
				t.Error("no cut left a span open")
			}
		})
	}
}

// The cursor names the oldest open prompt's submit and the model in force
// before it.
func TestCursorReplaysTheOldestOpenPrompt(t *testing.T) {
	evs := twoPrompts(t)
	var submits []uint64
	for _, e := range evs {
		if e.Kind == "input/submit" {
			submits = append(submits, e.Seq)
		}
	}
	// Stop right after the second submit: both prompts are open.
	k := slices.IndexFunc(evs, func(e vocab.Event) bool { return e.Seq == submits[1] }) + 1
	o := newTelemetry().observe(t, evs[:k], otelchart.Options{})
	if got, want := o.Cursor(), (otelchart.Cursor{Session: evs[0].Session, Seq: submits[1], Replay: submits[0], Provider: "_OTHER"}); got != want {
		t.Errorf("cursor %+v, want %+v", got, want)
	}
}

// dropping serves evs, but its first stream ends with ErrDropped after
// the event numbered dropAfter.
func dropping(evs []vocab.Event, dropAfter uint64) (otelchart.Source, *int) {
	calls := 0
	return func(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
		calls++
		first := calls == 1
		return func(yield func(vocab.Event, error) bool) {
			for _, e := range evs {
				if e.Seq < from {
					continue
				}
				if first && e.Seq > dropAfter {
					yield(vocab.Event{}, vocab.Errorf(vocab.CodeDropped, "test: fell behind at %d", e.Seq))
					return
				}
				if !yield(e, nil) {
					return
				}
			}
		}
	}, &calls
}

// A live stream that ends with ErrDropped is caught up from Options.Read,
// then followed live again; the spans are those of an undisturbed run.
func TestDroppedStreamCatchesUp(t *testing.T) {
	evs := runDemo(t)
	whole := newTelemetry()
	whole.observe(t, evs, otelchart.Options{})
	want := flat(whole.spans())

	for _, withRead := range []bool{true, false} {
		tel := newTelemetry()
		opt := otelchart.Options{}
		reads := 0
		if withRead {
			opt.Read = func(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
				reads++
				return sliceSource(evs[:60])(ctx, from) // the store's head when read
			}
		}
		o, err := otelchart.New(tel.options(opt))
		if err != nil {
			t.Fatal(err)
		}
		live, calls := dropping(evs, 40)
		if err := o.Observe(ctxT(t), live); err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(want, flat(tel.spans())); diff != "" {
			t.Errorf("read=%v: spans differ:\n%s", withRead, diff)
		}
		if *calls != 2 || (withRead && reads != 1) {
			t.Errorf("read=%v: %d subscriptions, %d reads", withRead, *calls, reads)
		}
	}

	// A stream that drops before delivering anything, with nothing to
	// catch up from, is an error.
	o, _ := otelchart.New(otelchart.Options{})
	always := func(context.Context, uint64) iter.Seq2[vocab.Event, error] {
		return func(yield func(vocab.Event, error) bool) {
			yield(vocab.Event{}, vocab.Errorf(vocab.CodeDropped, "test: gone"))
		}
	}
	if err := o.Observe(ctxT(t), always); !errors.Is(err, agentsvc.ErrDropped) {
		t.Errorf("hopeless stream: %v", err)
	}
}

// appendOnly is a sink that cannot read its events back: a service on it
// serves Events from its in-memory window only.
type appendOnly struct{ m *eventlog.Memory }

func (a appendOnly) Append(ctx context.Context, batch []vocab.Event) error {
	return a.m.Append(ctx, batch)
}

// Through a real service: an observer that starts after the events left
// the service's window gets ErrDropped from Events and catches up from
// the log (Options.Read), then follows the live stream to the end.
func TestDroppedServiceStreamCatchesUp(t *testing.T) {
	mem := eventlog.NewMemory()
	s := newSession(t, `{"steps": [
		{"tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "a"}}]},
		{"parts": [{"text": "first"}]},
		{"parts": [{"text": "second"}]}]}`, []vocab.Tool{echoTool()}, false, agentsvc.Options{Sink: appendOnly{mem}, Window: 4})
	p, _ := s.svc.SubmitText("one")
	s.wait(p)

	tel := newTelemetry()
	o, err := otelchart.New(tel.options(otelchart.Options{Read: mem.Since}))
	if err != nil {
		t.Fatal(err)
	}
	// The stream from 1 drops at once: the window holds the last 4 events.
	for _, err := range s.svc.Events(ctxT(t), 1) {
		if !errors.Is(err, agentsvc.ErrDropped) {
			t.Fatalf("Events from 1: %v, want ErrDropped", err)
		}
		break
	}
	done := make(chan error, 1)
	go func() { done <- o.ObserveService(ctxT(t), s.svc) }()
	p, _ = s.svc.SubmitText("two")
	s.wait(p)
	if err := s.svc.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	evs := mem.Events()
	whole := newTelemetry()
	whole.observe(t, evs, otelchart.Options{})
	if diff := gocmp.Diff(flat(whole.spans()), flat(tel.spans())); diff != "" {
		t.Errorf("spans differ (-whole log +caught up):\n%s", diff)
	}
	if got := o.Cursor().Seq; got != evs[len(evs)-1].Seq {
		t.Errorf("cursor at %d, log ends at %d", got, evs[len(evs)-1].Seq)
	}
}
