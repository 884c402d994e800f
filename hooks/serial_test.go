package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// verdict is a test decision type ordered by severity.
type verdict int

const (
	allow verdict = iota
	ask
	deny
)

func (v verdict) String() string { return [...]string{"allow", "ask", "deny"}[v] }

// strictest is a commutative, associative combine with identity allow.
func strictest(a, b verdict) verdict { return max(a, b) }

// toolCall is the serial test input.
type toolCall struct {
	Tool string
	Arg  string
}

// permutations returns every ordering of xs.
func permutations[T any](xs []T) [][]T {
	if len(xs) <= 1 {
		return [][]T{append([]T{}, xs...)}
	}
	var out [][]T
	for i := range xs {
		rest := append(append([]T{}, xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]T{xs[i]}, p...))
		}
	}
	return out
}

type policy struct {
	id string
	h  SerialHandler[toolCall, verdict]
}

func policies() []policy {
	return []policy{
		{"allow-all", func(ctx context.Context, c toolCall) (verdict, error) {
			return allow, nil
		}},
		{"ask-shell", func(ctx context.Context, c toolCall) (verdict, error) {
			if c.Tool == "shell" {
				return ask, nil
			}
			return allow, nil
		}},
		{"deny-rm", func(ctx context.Context, c toolCall) (verdict, error) {
			if c.Tool == "shell" && strings.HasPrefix(c.Arg, "rm ") {
				return deny, nil
			}
			return allow, nil
		}},
		{"flaky", func(ctx context.Context, c toolCall) (verdict, error) {
			if c.Arg == "" {
				return deny, errors.New("flaky: empty argument")
			}
			return allow, nil
		}},
		{"crashy", func(ctx context.Context, c toolCall) (verdict, error) {
			if c.Tool == "crash" {
				panic("policy bug")
			}
			return allow, nil
		}},
	}
}

func TestSerialOrderIndependence(t *testing.T) {
	tests := []struct {
		name    string
		call    toolCall
		want    verdict
		wantErr string // exact joined error text; "" for none
	}{
		{name: "read allowed", call: toolCall{"read", "a.txt"}, want: allow},
		{name: "shell asks", call: toolCall{"shell", "ls"}, want: ask},
		{name: "rm denied", call: toolCall{"shell", "rm -rf /"}, want: deny},
		{
			name:    "error collected, decision from the rest",
			call:    toolCall{"shell", ""},
			want:    ask,
			wantErr: "flaky: empty argument",
		},
		{
			name:    "panic and error both collected in ID order",
			call:    toolCall{"crash", ""},
			want:    allow,
			wantErr: "hooks: slot \"tool.permit\": hook \"crashy\" panicked: policy bug\nflaky: empty argument",
		},
	}
	perms := permutations(policies())
	if len(perms) != 120 {
		t.Fatalf("got %d permutations, want 120", len(perms))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, perm := range perms {
				s := NewSerialSlot[toolCall, verdict]("tool.permit")
				order := make([]string, len(perm))
				for i, p := range perm {
					order[i] = p.id
					if _, err := s.Register(p.id, p.h); err != nil {
						t.Fatal(err)
					}
				}
				got, err := s.Decide(context.Background(), tt.call, allow, strictest)
				if got != tt.want {
					t.Errorf("order %v: decision = %v, want %v", order, got, tt.want)
				}
				gotErr := ""
				if err != nil {
					gotErr = err.Error()
				}
				if gotErr != tt.wantErr {
					t.Errorf("order %v: error = %q, want %q", order, gotErr, tt.wantErr)
				}
			}
		})
	}
}

func TestRunSerial(t *testing.T) {
	s := NewSerialSlot[toolCall, string]("audit")
	var seen []toolCall
	record := func(tag string) SerialHandler[toolCall, string] {
		return func(ctx context.Context, c toolCall) (string, error) {
			seen = append(seen, c)
			return tag + ":" + c.Tool, nil
		}
	}
	mustSerial(t, s, "b", record("B"))
	mustSerial(t, s, "fail", func(ctx context.Context, c toolCall) (string, error) {
		seen = append(seen, c)
		return "partial", errBoom
	})
	mustSerial(t, s, "a", record("A"), Before("b"))
	mustSerial(t, s, "boom", func(ctx context.Context, c toolCall) (string, error) {
		panic(errBoom)
	}, After("a"))
	mustSerial(t, s, "z", record("Z"))

	if diff := cmp.Diff([]string{"a", "boom", "b", "fail", "z"}, s.IDs()); diff != "" {
		t.Fatalf("IDs mismatch (-want +got):\n%s", diff)
	}

	in := toolCall{"edit", "x.go"}
	results, err := s.RunSerial(context.Background(), in)

	// Every handler ran, in order, on the same input.
	if diff := cmp.Diff([]toolCall{in, in, in, in}, seen); diff != "" {
		t.Errorf("inputs seen mismatch (-want +got):\n%s", diff)
	}
	want := []Result[string]{
		{ID: "a", Value: "A:edit"},
		{ID: "boom", Err: &PanicError{Slot: "audit", ID: "boom", Value: errBoom}},
		{ID: "b", Value: "B:edit"},
		{ID: "fail", Value: "partial", Err: errBoom},
		{ID: "z", Value: "Z:edit"},
	}
	opts := cmp.Options{
		cmp.Comparer(func(a, b error) bool {
			var pa, pb *PanicError
			if errors.As(a, &pa) && errors.As(b, &pb) {
				return pa.Slot == pb.Slot && pa.ID == pb.ID && pa.Value == pb.Value
			}
			return a == b
		}),
	}
	if diff := cmp.Diff(want, results, opts); diff != "" {
		t.Errorf("results mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(err, errBoom) {
		t.Errorf("error = %v, want it to wrap errBoom", err)
	}
	var pe *PanicError
	if !errors.As(err, &pe) || pe.ID != "boom" {
		t.Errorf("error = %v, want a *PanicError for boom", err)
	}
	if s.Name() != "audit" || s.Len() != 5 {
		t.Errorf("Name() = %q, Len() = %d", s.Name(), s.Len())
	}
}

func mustSerial[C, R any](t *testing.T, s *SerialSlot[C, R], id string, h SerialHandler[C, R], opts ...Option) Handle {
	t.Helper()
	hd, err := s.Register(id, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return hd
}

func TestSerialRegistrationRules(t *testing.T) {
	s := NewSerialSlot[int, int]("serial.rules")
	one := func(ctx context.Context, c int) (int, error) { return 1, nil }
	h1 := mustSerial(t, s, "a", one)
	mustSerial(t, s, "b", one)

	tests := []struct {
		name    string
		id      string
		h       SerialHandler[int, int]
		opts    []Option
		wantErr error
	}{
		{"nil handler", "x", nil, nil, ErrNilHandler},
		{"empty id", "", one, nil, ErrEmptyID},
		{"conflict", "x", one, []Option{Before("a"), After("a")}, ErrConflictingOrder},
		{"unknown", "x", one, []Option{After("q")}, ErrUnknownTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Register(tt.id, tt.h, tt.opts...)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want %v", err, tt.wantErr)
			}
		})
	}

	mustSerial(t, s, "a", one, After("b")) // replace and move
	if h1.Remove() {
		t.Error("stale handle removed re-registered entry")
	}
	if !s.Remove("b") || s.Remove("b") {
		t.Error("Remove(b) should succeed once")
	}
	if diff := cmp.Diff([]string{"a"}, s.IDs()); diff != "" {
		t.Errorf("IDs mismatch (-want +got):\n%s", diff)
	}
}

func TestSerialEmpty(t *testing.T) {
	s := NewSerialSlot[string, bool]("empty")
	results, err := s.RunSerial(context.Background(), "x")
	if err != nil || len(results) != 0 {
		t.Errorf("RunSerial = %v, %v; want empty, nil", results, err)
	}
	got, err := s.Decide(context.Background(), "x", true, func(a, b bool) bool { return a && b })
	if err != nil || !got {
		t.Errorf("Decide = %v, %v; want identity true, nil", got, err)
	}
}

func TestSerialContext(t *testing.T) {
	errCause := errors.New("turn aborted")

	t.Run("done before run", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errCause)
		s := NewSerialSlot[int, int]("ctx")
		ran := false
		mustSerial(t, s, "a", func(ctx context.Context, c int) (int, error) { ran = true; return 1, nil })
		results, err := s.RunSerial(ctx, 0)
		if err != errCause || ran || len(results) != 0 {
			t.Errorf("RunSerial = %v, %v (ran=%v); want no results, cause", results, err, ran)
		}
	})

	t.Run("cancelled mid run stops remaining handlers", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		s := NewSerialSlot[int, int]("ctx")
		var ran []string
		mk := func(id string, cancelAfter bool) SerialHandler[int, int] {
			return func(ctx context.Context, c int) (int, error) {
				ran = append(ran, id)
				if cancelAfter {
					cancel(errCause)
				}
				return 2, nil
			}
		}
		mustSerial(t, s, "a", mk("a", false))
		mustSerial(t, s, "b", mk("b", true))
		mustSerial(t, s, "c", mk("c", false))
		sum, err := s.Decide(ctx, 0, 0, func(a, b int) int { return a + b })
		if !errors.Is(err, errCause) {
			t.Errorf("error = %v, want %v", err, errCause)
		}
		if sum != 4 {
			t.Errorf("partial sum = %d, want 4", sum)
		}
		if diff := cmp.Diff([]string{"a", "b"}, ran); diff != "" {
			t.Errorf("ran mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestSerialSnapshotIsolation(t *testing.T) {
	s := NewSerialSlot[int, string]("snap")
	mustSerial(t, s, "adder", func(ctx context.Context, c int) (string, error) {
		if _, err := s.Register(fmt.Sprintf("late%d", c), func(ctx context.Context, c int) (string, error) {
			return "late", nil
		}, Before("adder")); err != nil {
			return "", err
		}
		s.Remove("victim")
		return "adder", nil
	})
	mustSerial(t, s, "victim", func(ctx context.Context, c int) (string, error) { return "victim", nil })

	results, err := s.RunSerial(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result[string]{{ID: "adder", Value: "adder"}, {ID: "victim", Value: "victim"}}
	if diff := cmp.Diff(want, results, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("first run mismatch (-want +got):\n%s", diff)
	}
	results, err = s.RunSerial(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	want = []Result[string]{{ID: "late1", Value: "late"}, {ID: "adder", Value: "adder"}}
	if diff := cmp.Diff(want, results, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("second run mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"late1", "late2", "adder"}, s.IDs()); diff != "" {
		t.Errorf("IDs mismatch (-want +got):\n%s", diff)
	}
}
