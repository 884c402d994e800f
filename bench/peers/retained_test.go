package peers

import (
	"context"
	"runtime"
	"testing"

	"github.com/loopchart/loopchart/agentsvc"
)

// BenchmarkRetainedLoopchart measures what one long-lived session keeps:
// it runs b.N k=10 prompts on one session (agentsvc.New, in-memory log)
// and reports the heap still in use after a collection, per step, beyond
// what the session held after a warm-up (its log, its history and
// everything they reach). Run it with -benchtime 400x or so: with few
// prompts the figure is mostly noise.
func BenchmarkRetainedLoopchart(b *testing.B) { retained(b, lcOptions(10)) }

// BenchmarkRetainedLoopchartOutsideStore is BenchmarkRetainedLoopchart
// with the session's events handed to a store outside the process (see
// BenchmarkLoopchartOutsideStore): what the session itself keeps, its
// history and its 64-event window.
func BenchmarkRetainedLoopchartOutsideStore(b *testing.B) {
	opt := lcOptions(10)
	storeOutside(&opt)
	retained(b, opt)
}

// retained runs b.N k=10 prompts on one session made with opt and reports
// the heap it keeps per step (see BenchmarkRetainedLoopchart).
func retained(b *testing.B, opt agentsvc.Options) {
	const k = 10
	ctx := context.Background()
	svc, err := agentsvc.New(opt)
	if err != nil {
		b.Fatal(err)
	}
	prompt := func() {
		p, err := svc.SubmitText("go")
		if err != nil {
			b.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.Steps != k+1 {
			b.Fatalf("%v %v, want completed{steps=%d}", res, err, k+1)
		}
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for range 10 {
		prompt()
	}
	before := heap()
	b.ResetTimer()
	for b.Loop() {
		prompt()
	}
	b.StopTimer()
	after := heap()
	b.ReportMetric(float64(int64(after)-int64(before))/float64(b.N*(k+1)), "retained-B/step")
	runtime.KeepAlive(svc)
	if err := svc.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
