package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// pass is a waterfall handler that just continues the chain.
func pass(ctx context.Context, c string, next Next[string]) (string, error) {
	return next(ctx, c)
}

// reg is one Register call in an ordering table test.
type reg struct {
	id   string
	opts []Option
	nilH bool

	wantErr    error  // sentinel, nil if the call must succeed
	wantTarget string // Target field of the *Error
}

func TestRegisterOrder(t *testing.T) {
	tests := []struct {
		name string
		regs []reg
		want []string
	}{
		{
			name: "empty slot",
			want: []string{},
		},
		{
			name: "append order",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}},
			want: []string{"a", "b", "c"},
		},
		{
			name: "before first",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "x", opts: []Option{Before("a")}}},
			want: []string{"x", "a", "b"},
		},
		{
			name: "before middle takes target index",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "x", opts: []Option{Before("b")}}},
			want: []string{"a", "x", "b", "c"},
		},
		{
			name: "after middle",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "x", opts: []Option{After("b")}}},
			want: []string{"a", "b", "x", "c"},
		},
		{
			name: "after last",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "x", opts: []Option{After("b")}}},
			want: []string{"a", "b", "x"},
		},
		{
			name: "repeated before same target stacks nearest last",
			regs: []reg{
				{id: "t"},
				{id: "x", opts: []Option{Before("t")}},
				{id: "y", opts: []Option{Before("t")}},
			},
			want: []string{"x", "y", "t"},
		},
		{
			name: "repeated after same target stacks nearest last",
			regs: []reg{
				{id: "t"},
				{id: "x", opts: []Option{After("t")}},
				{id: "y", opts: []Option{After("t")}},
			},
			want: []string{"t", "y", "x"},
		},
		{
			name: "zero option ignored",
			regs: []reg{{id: "a"}, {id: "b", opts: []Option{{}}}},
			want: []string{"a", "b"},
		},
		{
			name: "before and after conflict",
			regs: []reg{
				{id: "a"}, {id: "b"},
				{id: "x", opts: []Option{Before("a"), After("b")}, wantErr: ErrConflictingOrder},
			},
			want: []string{"a", "b"},
		},
		{
			name: "two befores conflict",
			regs: []reg{
				{id: "a"},
				{id: "x", opts: []Option{Before("a"), Before("a")}, wantErr: ErrConflictingOrder},
			},
			want: []string{"a"},
		},
		{
			name: "conflict reported even with unknown targets",
			regs: []reg{
				{id: "x", opts: []Option{After("nope"), Before("nope")}, wantErr: ErrConflictingOrder},
			},
			want: []string{},
		},
		{
			name: "unknown before target",
			regs: []reg{
				{id: "a"},
				{id: "x", opts: []Option{Before("missing")}, wantErr: ErrUnknownTarget, wantTarget: "missing"},
			},
			want: []string{"a"},
		},
		{
			name: "unknown after target",
			regs: []reg{
				{id: "a"},
				{id: "x", opts: []Option{After("missing")}, wantErr: ErrUnknownTarget, wantTarget: "missing"},
			},
			want: []string{"a"},
		},
		{
			name: "empty target is unknown",
			regs: []reg{
				{id: "a"},
				{id: "x", opts: []Option{After("")}, wantErr: ErrUnknownTarget},
			},
			want: []string{"a"},
		},
		{
			name: "empty id",
			regs: []reg{{id: "a"}, {id: "", wantErr: ErrEmptyID}},
			want: []string{"a"},
		},
		{
			name: "nil handler",
			regs: []reg{{id: "a"}, {id: "b", nilH: true, wantErr: ErrNilHandler}},
			want: []string{"a"},
		},
		{
			name: "nil handler does not replace existing id",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "a", nilH: true, wantErr: ErrNilHandler}},
			want: []string{"a", "b"},
		},
		{
			name: "re-register without options moves to end",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "a"}},
			want: []string{"b", "c", "a"},
		},
		{
			name: "re-register before",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "c", opts: []Option{Before("a")}}},
			want: []string{"c", "a", "b"},
		},
		{
			name: "re-register after",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "a", opts: []Option{After("b")}}},
			want: []string{"b", "a", "c"},
		},
		{
			name: "re-register after its current predecessor keeps position",
			regs: []reg{{id: "a"}, {id: "b"}, {id: "c"}, {id: "b", opts: []Option{After("a")}}},
			want: []string{"a", "b", "c"},
		},
		{
			name: "re-register relative to itself is unknown target and changes nothing",
			regs: []reg{
				{id: "a"}, {id: "b"}, {id: "c"},
				{id: "b", opts: []Option{Before("b")}, wantErr: ErrUnknownTarget, wantTarget: "b"},
			},
			want: []string{"a", "b", "c"},
		},
		{
			name: "re-register with unknown target keeps old entry",
			regs: []reg{
				{id: "a"}, {id: "b"},
				{id: "a", opts: []Option{After("zzz")}, wantErr: ErrUnknownTarget, wantTarget: "zzz"},
			},
			want: []string{"a", "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSlot[string]("test.slot")
			for i, r := range tt.regs {
				h := Handler[string](pass)
				if r.nilH {
					h = nil
				}
				_, err := s.Register(r.id, h, r.opts...)
				if r.wantErr == nil {
					if err != nil {
						t.Fatalf("reg %d (%q): unexpected error: %v", i, r.id, err)
					}
					continue
				}
				if !errors.Is(err, r.wantErr) {
					t.Fatalf("reg %d (%q): error = %v, want %v", i, r.id, err, r.wantErr)
				}
				var herr *Error
				if !errors.As(err, &herr) {
					t.Fatalf("reg %d: error %T is not *Error", i, err)
				}
				want := &Error{Slot: "test.slot", Op: "register", ID: r.id, Target: r.wantTarget, Err: r.wantErr}
				if diff := cmp.Diff(*want, *herr, cmpopts.EquateErrors()); diff != "" {
					t.Errorf("reg %d: error mismatch (-want +got):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff(tt.want, s.IDs()); diff != "" {
				t.Errorf("IDs mismatch (-want +got):\n%s", diff)
			}
			if got := s.Len(); got != len(tt.want) {
				t.Errorf("Len() = %d, want %d", got, len(tt.want))
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{
			name: "unknown target names slot id and target",
			err:  &Error{Slot: "tool.pre", Op: "register", ID: "audit", Target: "auth", Err: ErrUnknownTarget},
			want: `hooks: slot "tool.pre": register "audit" (target "auth"): unknown order target`,
		},
		{
			name: "no target",
			err:  &Error{Slot: "s", Op: "register", ID: "", Err: ErrEmptyID},
			want: `hooks: slot "s": register "": empty hook id`,
		},
		{
			name: "next twice",
			err:  &Error{Slot: "s", Op: "next", ID: "h", Err: ErrNextCalledTwice},
			want: `hooks: slot "s": next "h": next called more than once`,
		},
		{
			name: "no sentinel",
			err:  &Error{Slot: "s", Op: "register", ID: "h"},
			want: `hooks: slot "s": register "h"`,
		},
		{
			name: "panic in hook",
			err:  &PanicError{Slot: "s", ID: "h", Value: "boom"},
			want: `hooks: slot "s": hook "h" panicked: boom`,
		},
		{
			name: "panic with non-error value",
			err:  &PanicError{Slot: "s", ID: "h", Value: struct{ N int }{7}},
			want: `hooks: slot "s": hook "h" panicked: {7}`,
		},
		{
			name: "panic in terminal",
			err:  &PanicError{Slot: "s", Value: 42},
			want: `hooks: slot "s": terminal panicked: 42`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q\nwant      %q", got, tt.want)
			}
		})
	}

	if err := (&PanicError{Value: "x"}).Unwrap(); err != nil {
		t.Errorf("PanicError{Value: string}.Unwrap() = %v, want nil", err)
	}
	if err := (&PanicError{Value: errBoom}).Unwrap(); err != errBoom {
		t.Errorf("PanicError{Value: errBoom}.Unwrap() = %v, want errBoom", err)
	}

	// A real registration error carries the same message.
	s := NewSlot[string]("tool.pre")
	_, err := s.Register("audit", pass, After("auth"))
	if got, want := err.Error(), `hooks: slot "tool.pre": register "audit" (target "auth"): unknown order target`; got != want {
		t.Errorf("Register error = %q, want %q", got, want)
	}
}

func TestHandleRemove(t *testing.T) {
	tests := []struct {
		name string
		// steps run in order: "reg:x" registers x and keeps the handle
		// as "x#n" for the n-th registration of x; "rm:x#n" removes via
		// that handle; "id:x" calls Slot.Remove(x).
		steps []string
		want  []string
		// wantRemoved lists the bool result of each removal step in order.
		wantRemoved []bool
	}{
		{
			name:        "handle removes its entry",
			steps:       []string{"reg:a", "reg:b", "rm:a#1"},
			want:        []string{"b"},
			wantRemoved: []bool{true},
		},
		{
			name:        "double remove is a no-op",
			steps:       []string{"reg:a", "reg:b", "rm:a#1", "rm:a#1"},
			want:        []string{"b"},
			wantRemoved: []bool{true, false},
		},
		{
			name:        "old handle does not remove re-registered entry",
			steps:       []string{"reg:a", "reg:b", "reg:a", "rm:a#1"},
			want:        []string{"b", "a"},
			wantRemoved: []bool{false},
		},
		{
			name:        "new handle removes re-registered entry",
			steps:       []string{"reg:a", "reg:b", "reg:a", "rm:a#2"},
			want:        []string{"b"},
			wantRemoved: []bool{true},
		},
		{
			name:        "old handle after remove and re-register",
			steps:       []string{"reg:a", "id:a", "reg:a", "rm:a#1", "rm:a#2"},
			want:        []string{},
			wantRemoved: []bool{true, false, true},
		},
		{
			name:        "slot remove unknown id",
			steps:       []string{"reg:a", "id:zzz"},
			want:        []string{"a"},
			wantRemoved: []bool{false},
		},
		{
			name:        "handle remove after slot remove",
			steps:       []string{"reg:a", "reg:b", "id:b", "rm:b#1"},
			want:        []string{"a"},
			wantRemoved: []bool{true, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSlot[string]("s")
			handles := map[string]Handle{}
			count := map[string]int{}
			var removed []bool
			for _, step := range tt.steps {
				op, arg, _ := strings.Cut(step, ":")
				switch op {
				case "reg":
					h, err := s.Register(arg, pass)
					if err != nil {
						t.Fatal(err)
					}
					count[arg]++
					key := fmt.Sprintf("%s#%d", arg, count[arg])
					handles[key] = h
					if h.ID() != arg {
						t.Errorf("Handle.ID() = %q, want %q", h.ID(), arg)
					}
				case "rm":
					h, ok := handles[arg]
					if !ok {
						t.Fatalf("no handle %q", arg)
					}
					removed = append(removed, h.Remove())
				case "id":
					removed = append(removed, s.Remove(arg))
				default:
					t.Fatalf("bad step %q", step)
				}
			}
			if diff := cmp.Diff(tt.want, s.IDs()); diff != "" {
				t.Errorf("IDs mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRemoved, removed); diff != "" {
				t.Errorf("removal results mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestZeroHandle(t *testing.T) {
	var h Handle
	if h.Remove() {
		t.Error("zero Handle.Remove() = true, want false")
	}
	if h.ID() != "" {
		t.Errorf("zero Handle.ID() = %q, want empty", h.ID())
	}
}

func TestHandleFromFailedRegisterIsInert(t *testing.T) {
	s := NewSlot[string]("s")
	if _, err := s.Register("a", pass); err != nil {
		t.Fatal(err)
	}
	h, err := s.Register("a", pass, Before("missing"))
	if err == nil {
		t.Fatal("expected error")
	}
	if h.Remove() {
		t.Error("Remove on handle from failed Register removed something")
	}
	if diff := cmp.Diff([]string{"a"}, s.IDs()); diff != "" {
		t.Errorf("IDs mismatch (-want +got):\n%s", diff)
	}
}

func TestIDsReturnsCopy(t *testing.T) {
	s := NewSlot[string]("s")
	for _, id := range []string{"a", "b"} {
		if _, err := s.Register(id, pass); err != nil {
			t.Fatal(err)
		}
	}
	ids := s.IDs()
	ids[0] = "mutated"
	if diff := cmp.Diff([]string{"a", "b"}, s.IDs()); diff != "" {
		t.Errorf("IDs mismatch after mutating returned slice (-want +got):\n%s", diff)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := NewSlot[int]("conc")
	ss := NewSerialSlot[int, int]("conc.serial")
	inc := func(ctx context.Context, c int, next Next[int]) (int, error) { return next(ctx, c+1) }
	one := func(ctx context.Context, c int) (int, error) { return 1, nil }
	if _, err := s.Register("base", inc); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Register("base", one); err != nil {
		t.Fatal(err)
	}

	const workers, iters = 8, 200
	var wg sync.WaitGroup
	errc := make(chan error, workers*4)
	for w := range workers {
		wg.Add(3)
		go func() { // registers and removes its own ids
			defer wg.Done()
			for i := range iters {
				id := fmt.Sprintf("w%d-%d", w, i%5)
				h, err := s.Register(id, inc, After("base"))
				if err != nil {
					errc <- err
					return
				}
				hs, err := ss.Register(id, one, Before("base"))
				if err != nil {
					errc <- err
					return
				}
				if i%2 == 0 {
					h.Remove()
					hs.Remove()
				} else {
					s.Remove(id)
					ss.Remove(id)
				}
			}
		}()
		go func() { // runs the waterfall
			defer wg.Done()
			for range iters {
				got, err := s.RunWaterfall(context.Background(), 0, nil)
				if err != nil {
					errc <- err
					return
				}
				if got < 1 {
					errc <- fmt.Errorf("waterfall result %d < 1", got)
					return
				}
			}
		}()
		go func() { // runs serial dispatch and reads order
			defer wg.Done()
			for range iters {
				sum, err := ss.Decide(context.Background(), 0, 0, func(a, b int) int { return a + b })
				if err != nil {
					errc <- err
					return
				}
				if sum < 1 {
					errc <- fmt.Errorf("serial sum %d < 1", sum)
					return
				}
				_ = s.IDs()
				_ = ss.Len()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if diff := cmp.Diff([]string{"base"}, s.IDs()); diff != "" {
		t.Errorf("final IDs mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"base"}, ss.IDs()); diff != "" {
		t.Errorf("final serial IDs mismatch (-want +got):\n%s", diff)
	}
}
