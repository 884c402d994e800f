package hooks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// trace records events in the order they happen.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (t *trace) add(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, fmt.Sprintf(format, args...))
}

func (t *trace) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string{}, t.events...)
}

// wrap returns a handler that records entry and exit and rewrites the value
// in both directions: "+id" on the way in, "-id" on the way out.
func wrap(tr *trace, id string) Handler[string] {
	return func(ctx context.Context, c string, next Next[string]) (string, error) {
		tr.add("%s in %s", id, c)
		out, err := next(ctx, c+"+"+id)
		tr.add("%s out %s", id, out)
		return out + "-" + id, err
	}
}

// echo is a terminal that records its input and returns it wrapped in [].
func echo(tr *trace) Next[string] {
	return func(ctx context.Context, c string) (string, error) {
		tr.add("terminal %s", c)
		return "[" + c + "]", nil
	}
}

var errBoom = errors.New("boom")

func TestRunWaterfall(t *testing.T) {
	type hook struct {
		id   string
		make func(tr *trace) Handler[string]
	}
	wrapHook := func(id string) hook {
		return hook{id, func(tr *trace) Handler[string] { return wrap(tr, id) }}
	}
	tests := []struct {
		name     string
		hooks    []hook
		terminal func(tr *trace) Next[string]
		want     string
		wantErr  error  // checked with errors.Is
		wantPan  string // if set, error must be *PanicError with this ID ("-" for terminal)
		trace    []string
	}{
		{
			name:     "empty slot runs terminal",
			terminal: echo,
			want:     "[v]",
			trace:    []string{"terminal v"},
		},
		{
			name: "empty slot nil terminal is identity",
			want: "v",
		},
		{
			name:     "rewrites flow down and back up in order",
			hooks:    []hook{wrapHook("a"), wrapHook("b"), wrapHook("c")},
			terminal: echo,
			want:     "[v+a+b+c]-c-b-a",
			trace: []string{
				"a in v", "b in v+a", "c in v+a+b",
				"terminal v+a+b+c",
				"c out [v+a+b+c]", "b out [v+a+b+c]-c", "a out [v+a+b+c]-c-b",
			},
		},
		{
			name:  "nil terminal returns last handler input",
			hooks: []hook{wrapHook("a"), wrapHook("b")},
			want:  "v+a+b-b-a",
			trace: []string{"a in v", "b in v+a", "b out v+a+b", "a out v+a+b-b"},
		},
		{
			name: "short-circuit skips rest and terminal",
			hooks: []hook{
				wrapHook("a"),
				{"stop", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						tr.add("stop sees %s", c)
						return "cached", nil
					}
				}},
				wrapHook("c"),
			},
			terminal: echo,
			want:     "cached-a",
			trace:    []string{"a in v", "stop sees v+a", "a out cached"},
		},
		{
			name: "handler error propagates to earlier handlers",
			hooks: []hook{
				wrapHook("a"),
				{"fail", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						return c, errBoom
					}
				}},
				wrapHook("c"),
			},
			terminal: echo,
			want:     "v+a-a",
			wantErr:  errBoom,
			trace:    []string{"a in v", "a out v+a"},
		},
		{
			name: "terminal error propagates",
			hooks: []hook{
				wrapHook("a"),
			},
			terminal: func(tr *trace) Next[string] {
				return func(ctx context.Context, c string) (string, error) { return "", errBoom }
			},
			want:    "-a",
			wantErr: errBoom,
			trace:   []string{"a in v", "a out "},
		},
		{
			name: "handler may recover from downstream error",
			hooks: []hook{
				{"fallback", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						out, err := next(ctx, c)
						if errors.Is(err, errBoom) {
							return "fallback", nil
						}
						return out, err
					}
				}},
			},
			terminal: func(tr *trace) Next[string] {
				return func(ctx context.Context, c string) (string, error) { return "", errBoom }
			},
			want: "fallback",
		},
		{
			name: "second next call fails and does not rerun chain",
			hooks: []hook{
				{"twice", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						first, err := next(ctx, c+"1")
						if err != nil {
							return first, err
						}
						second, err := next(ctx, c+"2")
						tr.add("second %s", second)
						return first + "|" + second, err
					}
				}},
				wrapHook("b"),
			},
			terminal: echo,
			want:     "[v1+b]-b|v2",
			wantErr:  ErrNextCalledTwice,
			trace: []string{
				"b in v1", "terminal v1+b", "b out [v1+b]",
				"second v2",
			},
		},
		{
			name: "panic in handler is recovered",
			hooks: []hook{
				wrapHook("a"),
				{"bad", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						panic("kaboom")
					}
				}},
				wrapHook("c"),
			},
			terminal: echo,
			want:     "v+a-a",
			wantPan:  "bad",
			trace:    []string{"a in v", "a out v+a"},
		},
		{
			name: "panic after next is attributed to the panicking handler",
			hooks: []hook{
				{"late", func(tr *trace) Handler[string] {
					return func(ctx context.Context, c string, next Next[string]) (string, error) {
						_, _ = next(ctx, c)
						panic(errBoom)
					}
				}},
			},
			terminal: echo,
			want:     "v",
			wantPan:  "late",
			wantErr:  errBoom, // panic(err) unwraps to err
			trace:    []string{"terminal v"},
		},
		{
			name:  "panic in terminal is recovered",
			hooks: []hook{wrapHook("a")},
			terminal: func(tr *trace) Next[string] {
				return func(ctx context.Context, c string) (string, error) { panic(42) }
			},
			want:    "v+a-a",
			wantPan: "-",
			trace:   []string{"a in v", "a out v+a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &trace{}
			s := NewSlot[string]("wf")
			for _, h := range tt.hooks {
				if _, err := s.Register(h.id, h.make(tr)); err != nil {
					t.Fatal(err)
				}
			}
			var term Next[string]
			if tt.terminal != nil {
				term = tt.terminal(tr)
			}
			got, err := s.RunWaterfall(context.Background(), "v", term)
			if got != tt.want {
				t.Errorf("result = %q, want %q", got, tt.want)
			}
			if tt.wantErr == nil && tt.wantPan == "" && err != nil {
				t.Errorf("unexpected error: %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want errors.Is %v", err, tt.wantErr)
			}
			if tt.wantPan != "" {
				var pe *PanicError
				if !errors.As(err, &pe) {
					t.Fatalf("error = %v (%T), want *PanicError", err, err)
				}
				wantID := tt.wantPan
				if wantID == "-" {
					wantID = ""
				}
				if pe.Slot != "wf" || pe.ID != wantID {
					t.Errorf("PanicError{Slot: %q, ID: %q}, want {wf, %q}", pe.Slot, pe.ID, wantID)
				}
				if len(pe.Stack) == 0 {
					t.Error("PanicError.Stack is empty")
				}
			}
			if diff := cmp.Diff(tt.trace, tr.get(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("trace mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextCalledTwiceError(t *testing.T) {
	s := NewSlot[int]("dup")
	var second error
	_, err := s.Register("h", func(ctx context.Context, c int, next Next[int]) (int, error) {
		out, _ := next(ctx, c)
		_, second = next(ctx, c)
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunWaterfall(context.Background(), 1, nil); err != nil {
		t.Fatalf("RunWaterfall: %v", err)
	}
	var herr *Error
	if !errors.As(second, &herr) {
		t.Fatalf("second next error = %v (%T), want *Error", second, second)
	}
	want := Error{Slot: "dup", Op: "next", ID: "h", Err: ErrNextCalledTwice}
	if *herr != want {
		t.Errorf("error = %+v, want %+v", *herr, want)
	}
}

func TestNextConcurrentCallsRunOnce(t *testing.T) {
	s := NewSlot[int]("conc.next")
	var mu sync.Mutex
	runs := 0
	if _, err := s.Register("fan", func(ctx context.Context, c int, next Next[int]) (int, error) {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { _, errs[i] = next(ctx, c) })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, ErrNextCalledTwice) {
				return 0, err
			}
		}
		return ok, nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.RunWaterfall(context.Background(), 0, func(ctx context.Context, c int) (int, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		return c, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 || runs != 1 {
		t.Errorf("successful next calls = %d, terminal runs = %d; want 1, 1", got, runs)
	}
}

func TestWaterfallContext(t *testing.T) {
	errCause := errors.New("user aborted")

	t.Run("done before run", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errCause)
		s := NewSlot[string]("ctx")
		ran := false
		if _, err := s.Register("a", func(ctx context.Context, c string, next Next[string]) (string, error) {
			ran = true
			return next(ctx, c)
		}); err != nil {
			t.Fatal(err)
		}
		got, err := s.RunWaterfall(ctx, "v", nil)
		if err != errCause {
			t.Errorf("error = %v, want cause %v", err, errCause)
		}
		if got != "v" || ran {
			t.Errorf("got %q ran=%v, want \"v\" ran=false", got, ran)
		}
	})

	t.Run("cancelled mid chain stops before next handler", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		tr := &trace{}
		s := NewSlot[string]("ctx")
		mustRegister(t, s, "a", wrap(tr, "a"))
		mustRegister(t, s, "cancel", func(ctx context.Context, c string, next Next[string]) (string, error) {
			cancel(errCause)
			return next(ctx, c)
		})
		mustRegister(t, s, "c", wrap(tr, "c"))
		got, err := s.RunWaterfall(ctx, "v", echo(tr))
		if !errors.Is(err, errCause) {
			t.Errorf("error = %v, want %v", err, errCause)
		}
		if got != "v+a-a" {
			t.Errorf("result = %q, want %q", got, "v+a-a")
		}
		if diff := cmp.Diff([]string{"a in v", "a out v+a"}, tr.get()); diff != "" {
			t.Errorf("trace mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("derived context passed to next is checked", func(t *testing.T) {
		s := NewSlot[string]("ctx")
		mustRegister(t, s, "a", func(ctx context.Context, c string, next Next[string]) (string, error) {
			ctx, cancel := context.WithCancelCause(ctx)
			cancel(errCause)
			return next(ctx, c)
		})
		termRan := false
		_, err := s.RunWaterfall(context.Background(), "v", func(ctx context.Context, c string) (string, error) {
			termRan = true
			return c, nil
		})
		if !errors.Is(err, errCause) || termRan {
			t.Errorf("error = %v, terminal ran = %v; want %v, false", err, termRan, errCause)
		}
	})

	t.Run("plain cancel returns context.Canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := NewSlot[int]("ctx").RunWaterfall(ctx, 0, nil)
		if err != context.Canceled {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	})
}

func mustRegister[C any](t *testing.T, s *Slot[C], id string, h Handler[C], opts ...Option) Handle {
	t.Helper()
	hd, err := s.Register(id, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return hd
}

func TestWaterfallSnapshotIsolation(t *testing.T) {
	tr := &trace{}
	s := NewSlot[string]("snap")
	var lateHandle Handle
	mustRegister(t, s, "adder", func(ctx context.Context, c string, next Next[string]) (string, error) {
		tr.add("adder")
		// Register a new hook at the very front and at the end, and remove
		// a later hook: none of this may affect the current run.
		if !s.Remove("victim") {
			tr.add("victim already gone")
		}
		var err error
		lateHandle, err = s.Register("late", wrap(tr, "late"))
		if err != nil {
			return c, err
		}
		if _, err := s.Register("early", wrap(tr, "early"), Before("adder")); err != nil {
			return c, err
		}
		return next(ctx, c)
	})
	mustRegister(t, s, "victim", func(ctx context.Context, c string, next Next[string]) (string, error) {
		tr.add("victim")
		return next(ctx, c)
	})

	if _, err := s.RunWaterfall(context.Background(), "v", nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"adder", "victim"}, tr.get()); diff != "" {
		t.Errorf("first run trace mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"early", "adder", "late"}, s.IDs()); diff != "" {
		t.Errorf("IDs after first run mismatch (-want +got):\n%s", diff)
	}

	// The second run sees the changes made during the first. Its own
	// re-registrations (same IDs) again only affect later runs.
	tr.events = nil
	if _, err := s.RunWaterfall(context.Background(), "v", nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"early in v", "adder", "victim already gone", "late in v+early", "late out v+early+late", "early out v+early+late-late"}
	if diff := cmp.Diff(want, tr.get()); diff != "" {
		t.Errorf("second run trace mismatch (-want +got):\n%s", diff)
	}
	if !lateHandle.Remove() {
		t.Error("latest handle for late did not remove it")
	}
}

func TestWaterfallStructValue(t *testing.T) {
	// Waterfall over a struct value type: rewrites by one handler are
	// visible to later ones and to the terminal.
	type req struct {
		Model string
		Tags  []string
	}
	s := NewSlot[req]("req")
	mustRegister(t, s, "model", func(ctx context.Context, r req, next Next[req]) (req, error) {
		r.Model = "small"
		return next(ctx, r)
	})
	mustRegister(t, s, "tag", func(ctx context.Context, r req, next Next[req]) (req, error) {
		r.Tags = append(append([]string{}, r.Tags...), "via-"+r.Model)
		return next(ctx, r)
	}, After("model"))
	got, err := s.RunWaterfall(context.Background(), req{Model: "big"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(req{Model: "small", Tags: []string{"via-small"}}, got); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	if s.Name() != "req" {
		t.Errorf("Name() = %q", s.Name())
	}
}
