package peers

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"

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

// BenchmarkRetainedNewSession measures what a new session holds: it opens
// b.N sessions (agentsvc.New, in-memory log, after one warm-up session has
// run and closed, as in a running process) and reports the heap in use
// after a collection per session once they are open (open-B/session) and
// once each has run one turn of three steps, k=2 (prompt-B/session).
// Compare with BenchmarkRetainedEinoAgent. Run it with -benchtime 1000x.
func BenchmarkRetainedNewSession(b *testing.B) {
	ctx := context.Background()
	w, err := agentsvc.New(lcOptions(2))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := runSync(ctx, w); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	svcs := heldPerSession(b, func() (*agentsvc.Service, error) { return agentsvc.New(lcOptions(2)) },
		func(s *agentsvc.Service) error {
			if res, err := runSync(ctx, s); err != nil || res.Steps != 3 {
				return fmt.Errorf("%v %v, want completed{steps=3}", res, err)
			}
			return nil
		})
	for _, s := range svcs {
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetainedEinoAgent is BenchmarkRetainedNewSession's peer: the
// heap in use per eino ReAct agent (k=2, the benchmarks' fake and tool)
// after a collection, once made (open-B/session) and once each has run
// one k=2 Generate (prompt-B/session; an agent keeps nothing of a run).
func BenchmarkRetainedEinoAgent(b *testing.B) {
	ctx := context.Background()
	ags := heldPerSession(b, func() (*react.Agent, error) { return newEinoAgent(ctx, 2) },
		func(ag *react.Agent) error {
			if out, err := ag.Generate(ctx, []*schema.Message{schema.UserMessage("go")}); err != nil || out.Content != "done" {
				return fmt.Errorf("%v %v, want done", out, err)
			}
			return nil
		})
	runtime.KeepAlive(ags)
}

// heldPerSession makes b.N sessions (or agents) with open, timed, then
// runs run on each, and reports the heap each holds after a collection,
// open and after its run. It returns the sessions, which it keeps alive.
func heldPerSession[T any](b *testing.B, open func() (T, error), run func(T) error) []T {
	all := make([]T, 0, b.N)
	before := heapInUse()
	b.ResetTimer()
	for b.Loop() {
		x, err := open()
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, x)
	}
	b.StopTimer()
	opened := heapInUse()
	for _, x := range all {
		if err := run(x); err != nil {
			b.Fatal(err)
		}
	}
	after := heapInUse()
	n := float64(len(all))
	b.ReportMetric(float64(int64(opened)-int64(before))/n, "open-B/session")
	b.ReportMetric(float64(int64(after)-int64(before))/n, "prompt-B/session")
	return all
}

// heapInUse is the heap in use after two collections.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
