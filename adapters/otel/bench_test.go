package otelchart_test

import (
	"context"
	"encoding/json"
	"iter"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	otelchart "github.com/loopchart/loopchart/adapters/otel"

	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// stepProvider answers every odd request with one call to the no-op tool
// and every even one with a final text: each prompt is a turn of two
// steps (as adapters/engine's BenchmarkEngineStep).
type stepProvider struct{ n atomic.Int64 }

var (
	noopCall   = vocab.ToolCall{ID: "c1", Name: "noop", Args: json.RawMessage(`{}`)}
	respPart   = vocab.StreamPart{Kind: vocab.StreamResponse, Provider: "anthropic", Model: "claude-bench", ResponseID: "resp"}
	usagePart  = vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 10, OutputTokens: 2}}
	toolParts  = []vocab.StreamPart{respPart, {Kind: vocab.StreamToolCall, Call: &noopCall}, usagePart, {Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}}
	finalParts = []vocab.StreamPart{respPart, {Kind: vocab.StreamText, Text: "done"}, usagePart, {Kind: vocab.StreamFinish, Finish: vocab.FinishStop}}
)

func (p *stepProvider) Stream(context.Context, vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	parts := finalParts
	if p.n.Add(1)%2 == 1 {
		parts = toolParts
	}
	return func(yield func(vocab.StreamPart, error) bool) {
		for _, part := range parts {
			if !yield(part, nil) {
				return
			}
		}
	}
}

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkPrompt measures a prompt of two steps (a no-op tool call, then
// an answer) end to end through agentsvc, in four modes: off (no
// observer); follow (a goroutine that only reads svc.Events: what any
// live subscriber costs); noop (the observer on no-op providers: following
// the stream and folding it); sdk (spans through a batching processor to
// a discarding exporter, metrics aggregated by a manual reader; no
// transition events). An observer follows each session on a goroutine of
// its own; the time counts until it has handled the session's last
// event. Sessions are replaced every 100 prompts (inside the timer, in
// every mode alike). Compare them in one run:
//
//	go test -run '^$' -bench Prompt -benchmem ./adapters/otel
func BenchmarkPrompt(b *testing.B) {
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			r := newRunner(b, mode)
			defer r.shutdown()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%100 == 0 {
					r.stop()
					r.start()
				}
				r.prompt()
			}
			r.stop()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/step")
		})
	}
}

// modes are the benchmarks' modes (see BenchmarkPrompt).
var modes = []string{"off", "follow", "noop", "sdk"}

// BenchmarkPromptInterleaved is BenchmarkPrompt with the modes taking
// turns: each iteration runs a session of 100 prompts in each mode, timed
// apart, so that the load of the machine weighs on all of them alike. It
// reports each mode's time per prompt and the ratios to off.
func BenchmarkPromptInterleaved(b *testing.B) {
	runners := make([]*runner, len(modes))
	for i, m := range modes {
		runners[i] = newRunner(b, m)
		defer runners[i].shutdown()
	}
	total := make([]time.Duration, len(modes))
	for b.Loop() {
		for i, r := range runners {
			t0 := time.Now()
			r.start()
			for range 100 {
				r.prompt()
			}
			r.stop()
			total[i] += time.Since(t0)
		}
	}
	per := func(i int) float64 { return float64(total[i].Nanoseconds()) / float64(100*b.N) }
	for i, m := range modes {
		b.ReportMetric(per(i), "ns/prompt-"+m)
	}
	for i, m := range modes[1:] {
		b.ReportMetric(per(i+1)/per(0), m+"/off")
	}
}

// runner runs prompts on a session, observed as its mode says.
type runner struct {
	b    *testing.B
	mode string
	opt  otelchart.Options
	tp   *sdktrace.TracerProvider
	mp   *sdkmetric.MeterProvider
	svc  *agentsvc.Service
	done chan error
	msg  vocab.Message
}

func newRunner(b *testing.B, mode string) *runner {
	r := &runner{b: b, mode: mode, msg: vocab.UserText("go")}
	switch mode {
	case "noop":
		r.opt.TracerProvider, r.opt.MeterProvider = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	case "sdk":
		r.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithIDGenerator(otelchart.IDGenerator(nil)))
		r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		r.opt.TracerProvider, r.opt.MeterProvider = r.tp, r.mp
	}
	return r
}

var noopTool = tools.Func("noop", "does nothing", `{}`, func(context.Context, struct{}) (string, error) { return "ok", nil })

// start starts a session and, unless the mode is off, its observer.
func (r *runner) start() {
	var err error
	r.svc, err = agentsvc.New(agentsvc.Options{Provider: &stepProvider{}, Tools: []vocab.Tool{noopTool}, IDs: &vocab.SeqSource{},
		Jitter: func() float64 { return 0 }, Model: "claude-bench"})
	if err != nil {
		r.b.Fatal(err)
	}
	switch r.mode {
	case "off":
		return
	case "follow":
		r.done = make(chan error, 1)
		go func(svc *agentsvc.Service) {
			for _, err := range svc.Events(context.Background(), 0) {
				if err != nil {
					r.done <- err
					return
				}
			}
			r.done <- nil
		}(r.svc)
		return
	}
	obs, err := otelchart.New(r.opt)
	if err != nil {
		r.b.Fatal(err)
	}
	r.done = make(chan error, 1)
	go func(svc *agentsvc.Service) { r.done <- obs.ObserveService(context.Background(), svc) }(r.svc)
}

// prompt runs one prompt to its end.
func (r *runner) prompt() {
	r.msg.ID = ""
	p, err := r.svc.Submit(r.msg)
	if err != nil {
		r.b.Fatal(err)
	}
	res, err := p.Wait(context.Background())
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		r.b.Fatalf("%v %v", res, err)
	}
}

// stop closes the session and waits until its observer has handled its
// last event.
func (r *runner) stop() {
	if r.svc == nil {
		return
	}
	if err := r.svc.Close(context.Background()); err != nil {
		r.b.Fatal(err)
	}
	if r.done != nil {
		if err := <-r.done; err != nil {
			r.b.Fatal(err)
		}
	}
	r.svc, r.done = nil, nil
}

func (r *runner) shutdown() {
	r.stop()
	if r.tp != nil {
		r.tp.Shutdown(context.Background())
		r.mp.Shutdown(context.Background())
	}
}

// BenchmarkObserveLog measures the observer alone: a recorded log of 100
// two-step prompts observed from a slice (no service running), per
// prompt, on no-op providers and on the SDK as in BenchmarkPrompt.
func BenchmarkObserveLog(b *testing.B) {
	svc, err := agentsvc.New(agentsvc.Options{Provider: &stepProvider{}, Tools: []vocab.Tool{noopTool}, IDs: &vocab.SeqSource{},
		Jitter: func() float64 { return 0 }, Model: "claude-bench"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range 100 {
		p, _ := svc.SubmitText("go")
		p.Wait(ctx)
	}
	svc.Close(ctx)
	var evs []vocab.Event
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			b.Fatal(err)
		}
		evs = append(evs, ev)
	}
	for _, mode := range []string{"noop", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			var opt otelchart.Options
			switch mode {
			case "noop":
				opt.TracerProvider, opt.MeterProvider = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
			case "sdk":
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithIDGenerator(otelchart.IDGenerator(nil)))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer tp.Shutdown(ctx)
				defer mp.Shutdown(ctx)
				opt.TracerProvider, opt.MeterProvider = tp, mp
			}
			b.ReportAllocs()
			for b.Loop() {
				o, err := otelchart.New(opt)
				if err != nil {
					b.Fatal(err)
				}
				if err := o.Observe(ctx, sliceSource(evs)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(100*b.N), "ns/prompt")
		})
	}
}

// BenchmarkSpanFloor is what the SDK alone costs for the spans of one
// BenchmarkPrompt prompt: seven spans (invoke_agent, turn, two steps, two
// chats, one tool call) with as many attributes as the observer gives
// them, started and ended through the same batching provider. The
// observer cannot cost less than this.
func BenchmarkSpanFloor(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("floor")
	ctx := context.Background()
	at := time.Now()
	kv := func(n int) []attribute.KeyValue {
		out := make([]attribute.KeyValue, n)
		for i := range out {
			out[i] = attribute.Int("k"+strconv.Itoa(i), i)
		}
		return out
	}
	// initial and final attribute counts of each span of a prompt
	shape := [][2]int{{5, 4}, {1, 2}, {2, 2}, {3, 8}, {4, 1}, {2, 2}, {3, 8}}
	attrs := make([][2][]attribute.KeyValue, len(shape))
	for i, s := range shape {
		attrs[i] = [2][]attribute.KeyValue{kv(s[0]), kv(s[1])}
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range shape {
			_, s := tr.Start(ctx, "span", trace.WithTimestamp(at), trace.WithAttributes(attrs[i][0]...))
			s.SetAttributes(attrs[i][1]...)
			s.End(trace.WithTimestamp(at))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/prompt")
}
