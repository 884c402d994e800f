package otelchart_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	gocmp "github.com/google/go-cmp/cmp"

	otelchart "github.com/loopchart/loopchart/adapters/otel"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestMain fails the package if a goroutine outlives its tests: every
// service, observer and batch processor a test starts must be stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// responder wraps a provider so that every reply names who wrote it (a
// StreamResponse part before its first part), as real adapters do.
type responder struct {
	inner vocab.Provider
	n     int
}

func (r *responder) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	r.n++
	id := fmt.Sprintf("resp_%d", r.n)
	inner := r.inner.Stream(ctx, req)
	return func(yield func(vocab.StreamPart, error) bool) {
		sent := false
		for p, err := range inner {
			if err == nil && !sent {
				sent = true
				if !yield(vocab.StreamPart{Kind: vocab.StreamResponse, Provider: "anthropic", Model: "claude-test-1", ResponseID: id}, nil) {
					return
				}
			}
			if !yield(p, err) {
				return
			}
		}
	}
}

// session is a service on a scripted provider and a fake clock.
type session struct {
	t   testing.TB
	svc *agentsvc.Service
	clk *clock.Fake
	log *eventlog.Memory
}

// newSession starts a service playing script with tools. The provider's
// replies name their provider and model unless plain.
func newSession(t testing.TB, script string, tools []vocab.Tool, plain bool, opt agentsvc.Options) *session {
	t.Helper()
	s, err := scripted.Parse([]byte(script), "test")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	var p vocab.Provider = scripted.New(s, clk)
	if !plain {
		p = &responder{inner: p}
	}
	log := eventlog.NewMemory()
	opt.Provider, opt.Clock, opt.IDs, opt.Tools = p, clk, &vocab.SeqSource{}, tools
	opt.Jitter = func() float64 { return 0.5 }
	if opt.Model == "" {
		opt.Model = "claude-test"
	}
	if opt.Sink == nil {
		opt.Sink = log
	}
	svc, err := agentsvc.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ss := &session{t: t, svc: svc, clk: clk, log: log}
	t.Cleanup(func() { svc.Close(context.Background()) })
	return ss
}

// wait drives the fake clock (waits due within a minute: scripted delays
// and retry waits, not the run's timeout or the stream watchdog) until p
// has ended.
func (s *session) wait(p *agentsvc.Prompt) vocab.PromptResult {
	s.t.Helper()
	ctx := ctxT(s.t)
	driven := make(chan struct{})
	dctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(driven)
		for s.clk.WaitForDue(dctx, time.Minute) == nil {
			s.clk.AdvanceToNextWithin(time.Minute)
		}
	}()
	res, err := p.Wait(ctx)
	stop()
	<-driven
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// close closes the service and returns its log.
func (s *session) close() []vocab.Event {
	s.t.Helper()
	if err := s.svc.Close(ctxT(s.t)); err != nil {
		s.t.Fatal(err)
	}
	return s.log.Events()
}

// sliceSource serves events as a Source.
func sliceSource(evs []vocab.Event) otelchart.Source {
	return func(_ context.Context, from uint64) iter.Seq2[vocab.Event, error] {
		return func(yield func(vocab.Event, error) bool) {
			for _, e := range evs {
				if e.Seq >= from && !yield(e, nil) {
					return
				}
			}
		}
	}
}

// telemetry is a tracer provider recording spans and a meter provider
// with a manual reader, with the observer's ID generator.
type telemetry struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry() *telemetry {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	return &telemetry{
		rec:    rec,
		tp:     sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(otelchart.IDGenerator(nil))),
		reader: reader,
		mp:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}
}

func (tel *telemetry) options(opt otelchart.Options) otelchart.Options {
	opt.TracerProvider, opt.MeterProvider = tel.tp, tel.mp
	return opt
}

// observe runs an observer over evs and returns it.
func (tel *telemetry) observe(t testing.TB, evs []vocab.Event, opt otelchart.Options) *otelchart.Observer {
	t.Helper()
	o, err := otelchart.New(tel.options(opt))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Observe(ctxT(t), sliceSource(evs)); err != nil {
		t.Fatal(err)
	}
	return o
}

func (tel *telemetry) spans() []sdktrace.ReadOnlySpan { return tel.rec.Ended() }

// metrics renders the collected metrics, one data point a line.
func (tel *telemetry) metrics(t testing.TB) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, attrsOf(p.Attributes.ToSlice()), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%g", m.Name, attrsOf(p.Attributes.ToSlice()), p.Count, p.Sum))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%d", m.Name, attrsOf(p.Attributes.ToSlice()), p.Count, p.Sum))
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func attrsOf(kv []attribute.KeyValue) string {
	parts := make([]string, len(kv))
	for i, a := range kv {
		parts[i] = string(a.Key) + "=" + a.Value.Emit()
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// tree renders spans as an indented tree: each span's name, kind, times
// relative to its trace's root, attributes (sorted), status and events;
// children in start order. withIDs adds the span and trace ids.
func tree(spans []sdktrace.ReadOnlySpan, withIDs bool) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	known := map[trace.SpanID]bool{}
	for _, s := range spans {
		known[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && known[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(a, b sdktrace.ReadOnlySpan) int {
		return cmp.Or(a.StartTime().Compare(b.StartTime()), cmp.Compare(a.Name(), b.Name()),
			cmp.Compare(callID(a), callID(b)), cmp.Compare(a.SpanContext().SpanID().String(), b.SpanContext().SpanID().String()))
	}
	slices.SortFunc(roots, order)
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int, t0 time.Time)
	walk = func(s sdktrace.ReadOnlySpan, depth int, t0 time.Time) {
		in := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s [%s] %s..%s", in, s.Name(), s.SpanKind(), s.StartTime().Sub(t0), s.EndTime().Sub(t0))
		if withIDs {
			fmt.Fprintf(&b, " trace=%s span=%s", s.SpanContext().TraceID(), s.SpanContext().SpanID())
			if p := s.Parent(); p.IsValid() {
				fmt.Fprintf(&b, " parent=%s", p.SpanID())
			}
		}
		b.WriteString("\n")
		kv := s.Attributes()
		attrs := make([]string, 0, len(kv))
		for _, a := range kv {
			attrs = append(attrs, fmt.Sprintf("%s  %s=%s", in, a.Key, a.Value.Emit()))
		}
		slices.Sort(attrs)
		for _, a := range attrs {
			b.WriteString(a + "\n")
		}
		if st := s.Status(); st.Code != codes.Unset {
			fmt.Fprintf(&b, "%s  status %s %q\n", in, st.Code, st.Description)
		}
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "%s  event %s @%s {%s}\n", in, e.Name, e.Time.Sub(t0), attrsOf(e.Attributes))
		}
		if n := s.DroppedEvents(); n > 0 {
			fmt.Fprintf(&b, "%s  sdk dropped %d events\n", in, n)
		}
		kids := children[s.SpanContext().SpanID()]
		slices.SortFunc(kids, order)
		for _, k := range kids {
			walk(k, depth+1, t0)
		}
	}
	for _, r := range roots {
		walk(r, 0, r.StartTime())
	}
	return b.String()
}

func callID(s sdktrace.ReadOnlySpan) string {
	for _, a := range s.Attributes() {
		if a.Key == "gen_ai.tool.call.id" {
			return a.Value.AsString()
		}
	}
	return ""
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := gocmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update to accept):\n%s", path, diff)
	}
}
