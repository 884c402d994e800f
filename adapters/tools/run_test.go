package tools

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProgressAndDetach(t *testing.T) {
	type step struct {
		detach string // ack to detach with; "" reports progress "p" instead
		want   bool   // Detach's answer
	}
	cases := []struct {
		name      string
		ctx       func(progress func(string), detach func(string) bool) context.Context
		refuse    bool // the caller's detach answers false
		steps     []step
		wantProg  []string
		wantCalls []string // acks the caller's detach saw
	}{
		{"bare context", func(func(string), func(string) bool) context.Context { return context.Background() }, false,
			[]step{{}, {detach: "a"}}, nil, nil},
		{"progress only", func(p func(string), _ func(string) bool) context.Context {
			return WithRun(context.Background(), p, nil)
		}, false,
			[]step{{}, {detach: "a"}, {}}, []string{"p", "p"}, nil},
		{"detach once", func(p func(string), d func(string) bool) context.Context { return WithRun(context.Background(), p, d) }, false,
			[]step{{detach: "a", want: true}, {}, {detach: "b"}}, []string{"p"}, []string{"a"}},
		{"refused detach can be asked again", func(p func(string), d func(string) bool) context.Context { return WithRun(context.Background(), p, d) }, true,
			[]step{{detach: "a"}, {detach: "b"}}, nil, []string{"a", "b"}},
		{"nil progress is dropped", func(_ func(string), d func(string) bool) context.Context {
			return WithRun(context.Background(), nil, d)
		}, false,
			[]step{{}, {detach: "a", want: true}}, nil, []string{"a"}},
		{"inner progress keeps the detach state", func(p func(string), d func(string) bool) context.Context {
			outer := WithRun(context.Background(), func(string) { t.Error("outer progress used") }, d)
			Detach(outer, "first")
			return withProgress(outer, p)
		}, false,
			[]step{{}, {detach: "a"}}, []string{"p"}, []string{"first"}},
		{"a RunCtx is WithRun's context", func(p func(string), d func(string) bool) context.Context {
			return new(RunCtx).Init(context.Background(), p, DetachFunc(d))
		}, false,
			[]step{{detach: "a", want: true}, {}, {detach: "b"}}, []string{"p"}, []string{"a"}},
		{"a RunCtx without a Detacher offers no detaching", func(p func(string), _ func(string) bool) context.Context {
			return new(RunCtx).Init(context.Background(), p, nil)
		}, false,
			[]step{{}, {detach: "a"}}, []string{"p"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var prog, calls []string
			ctx := c.ctx(func(s string) { prog = append(prog, s) }, func(ack string) bool { calls = append(calls, ack); return !c.refuse })
			for i, s := range c.steps {
				if s.detach == "" {
					Progress(ctx, "p")
					continue
				}
				if got := Detach(ctx, s.detach); got != s.want {
					t.Errorf("step %d: Detach(%q) = %v, want %v", i, s.detach, got, s.want)
				}
			}
			if diff := cmp.Diff(c.wantProg, prog); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantCalls, calls); diff != "" {
				t.Errorf("detach calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetachConcurrent(t *testing.T) {
	var calls atomic.Int32
	ctx := WithRun(context.Background(), func(string) {}, func(string) bool { calls.Add(1); return true })
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			Progress(ctx, "x")
			if Detach(ctx, "ack") {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || calls.Load() != 1 {
		t.Errorf("%d detaches succeeded after %d calls, want exactly one", wins.Load(), calls.Load())
	}
}
