package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// batchProvider answers every odd request with a batch of calls and every
// even one with a final text.
type batchProvider struct {
	n     int
	batch []vocab.StreamPart
}

func newBatchProvider(name string, n int, args func(i int) string) *batchProvider {
	p := &batchProvider{}
	for i := range n {
		c := vocab.ToolCall{ID: fmt.Sprintf("c%d", i), Name: name, Args: json.RawMessage(args(i))}
		p.batch = append(p.batch, vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &c})
	}
	p.batch = append(p.batch, usagePart, vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls})
	return p
}

func (p *batchProvider) Stream(_ context.Context, _ vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	p.n++
	parts := finalParts
	if p.n%2 == 1 {
		parts = p.batch
	}
	return func(yield func(vocab.StreamPart, error) bool) {
		for _, part := range parts {
			if !yield(part, nil) {
				return
			}
		}
	}
}

// pathTool is a tool that touches its "path" argument with mode, and runs
// for d (0: returns at once).
func pathTool(name string, mode vocab.AccessMode, d time.Duration) vocab.Tool {
	t, err := tools.TypedText(vocab.ToolSpec{Name: name, Access: []vocab.AccessDecl{{Field: "path", Mode: mode}}},
		func(ctx context.Context, a struct {
			Path string `json:"path"`
		}) (string, error) {
			if d > 0 {
				select {
				case <-time.After(d): // the tool's own work, not a synchronisation
				case <-ctx.Done():
				}
			}
			return "ok", nil
		})
	if err != nil {
		panic(err)
	}
	return t
}

// runBatches submits prompts whose first step is a batch, b.N times.
func runBatches(b *testing.B, opt Options, perOp int) {
	var e *Engine
	fresh := func() {
		if e != nil {
			e.Close(context.Background())
		}
		var err error
		opt.Provider.(*batchProvider).n = 0
		if e, err = New(opt); err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%50 == 0 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		p, err := e.Submit(vocab.UserText("go"))
		if err != nil {
			b.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
			b.Fatalf("%v %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perOp), "ns/call")
	e.Close(context.Background())
}

// BenchmarkToolBatch measures the lane and core's cost per tool call for
// one step's batch of no-op calls: n calls that touch different files
// (all may run together), and 64 calls on one file, every other one a
// write ("half-conflict": they run one after another). One op is a turn
// (the batch, then an answer); ns/call divides it by n.
func BenchmarkToolBatch(b *testing.B) {
	for _, tc := range []struct {
		name     string
		n        int
		conflict bool
	}{{"independent/1", 1, false}, {"independent/8", 8, false}, {"independent/64", 64, false}, {"half-conflict/64", 64, true}} {
		b.Run(tc.name, func(b *testing.B) {
			reg, _ := tools.NewRegistry(pathTool("read", vocab.AccessRead, 0), pathTool("write", vocab.AccessWrite, 0))
			name, args := "read", func(i int) string { return fmt.Sprintf(`{"path":"f%d"}`, i) }
			prov := newBatchProvider(name, tc.n, args)
			if tc.conflict {
				prov = newBatchProvider("read", tc.n, func(int) string { return `{"path":"shared"}` })
				for i := 1; i < tc.n; i += 2 {
					c := *prov.batch[i].Call
					c.Name = "write"
					prov.batch[i].Call = &c
				}
			}
			runBatches(b, Options{Provider: prov, Tools: reg, IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }, MaxParallelTools: 64}, tc.n)
		})
	}
}

// BenchmarkParallelTools runs 8 independent calls of a tool that works
// for 10 ms: in parallel (the default cap) and one at a time
// (MaxParallelTools 1), in the same run. The ratio of their ns/op is the
// speed-up of conflict-aware scheduling.
func BenchmarkParallelTools(b *testing.B) {
	for _, tc := range []struct {
		name string
		cap  int
	}{{"parallel", 0}, {"sequential", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			reg, _ := tools.NewRegistry(pathTool("work", vocab.AccessWrite, 10*time.Millisecond))
			prov := newBatchProvider("work", 8, func(i int) string { return fmt.Sprintf(`{"path":"f%d"}`, i) })
			runBatches(b, Options{Provider: prov, Tools: reg, IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }, MaxParallelTools: tc.cap}, 8)
		})
	}
}
