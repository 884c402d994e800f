package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/loopchart/loopchart/hooks"
)

// A waterfall slot around a model call: each handler can rewrite the prompt
// on the way in and the reply on the way out.
func ExampleSlot_RunWaterfall() {
	s := hooks.NewSlot[string]("model.call")

	_, _ = s.Register("trim", func(ctx context.Context, prompt string, next hooks.Next[string]) (string, error) {
		return next(ctx, strings.TrimSpace(prompt))
	})
	_, _ = s.Register("shout", func(ctx context.Context, prompt string, next hooks.Next[string]) (string, error) {
		reply, err := next(ctx, prompt)
		return strings.ToUpper(reply), err
	})

	model := func(ctx context.Context, prompt string) (string, error) {
		return "echo: " + prompt, nil
	}
	reply, err := s.RunWaterfall(context.Background(), "  hello  ", model)
	fmt.Printf("%q %v\n", reply, err)
	// Output:
	// "ECHO: HELLO" <nil>
}

// A handler that does not call next short-circuits the rest of the chain,
// here answering from a cache without calling the model.
func ExampleSlot_RunWaterfall_shortCircuit() {
	s := hooks.NewSlot[string]("model.call")
	cache := map[string]string{"ping": "pong (cached)"}

	_, _ = s.Register("cache", func(ctx context.Context, prompt string, next hooks.Next[string]) (string, error) {
		if r, ok := cache[prompt]; ok {
			return r, nil
		}
		return next(ctx, prompt)
	})
	model := func(ctx context.Context, prompt string) (string, error) {
		return "model says " + prompt, nil
	}
	for _, p := range []string{"ping", "hi"} {
		r, _ := s.RunWaterfall(context.Background(), p, model)
		fmt.Println(r)
	}
	// Output:
	// pong (cached)
	// model says hi
}

// Before and After place a hook relative to one already registered.
func ExampleSlot_Register() {
	s := hooks.NewSlot[int]("ordering")
	noop := func(ctx context.Context, c int, next hooks.Next[int]) (int, error) { return next(ctx, c) }

	_, _ = s.Register("auth", noop)
	_, _ = s.Register("log", noop)
	_, _ = s.Register("trace", noop, hooks.Before("auth"))
	_, _ = s.Register("retry", noop, hooks.After("auth"))
	fmt.Println(s.IDs())

	_, err := s.Register("cache", noop, hooks.After("missing"))
	fmt.Println(errors.Is(err, hooks.ErrUnknownTarget))
	fmt.Println(err)

	_, err = s.Register("cache", noop, hooks.Before("auth"), hooks.After("log"))
	fmt.Println(errors.Is(err, hooks.ErrConflictingOrder))
	// Output:
	// [trace auth retry log]
	// true
	// hooks: slot "ordering": register "cache" (target "missing"): unknown order target
	// true
}

// A Handle removes only the registration that returned it.
func ExampleHandle_Remove() {
	s := hooks.NewSlot[int]("handles")
	noop := func(ctx context.Context, c int, next hooks.Next[int]) (int, error) { return next(ctx, c) }

	old, _ := s.Register("metrics", noop)
	_, _ = s.Register("other", noop)
	_, _ = s.Register("metrics", noop) // replaces and moves to the end
	fmt.Println(s.IDs())

	fmt.Println(old.Remove()) // the entry it created is gone already
	fmt.Println(s.IDs())
	// Output:
	// [other metrics]
	// false
	// [other metrics]
}

// A panicking handler is reported as a *PanicError instead of crashing the
// agent loop.
func ExamplePanicError() {
	s := hooks.NewSlot[string]("tool.result")
	_, _ = s.Register("buggy", func(ctx context.Context, c string, next hooks.Next[string]) (string, error) {
		var m map[string]int
		m[c]++ //lint:ignore SA5000 the panic is the point of this example
		return next(ctx, c)
	})
	_, err := s.RunWaterfall(context.Background(), "x", nil)
	var pe *hooks.PanicError
	if errors.As(err, &pe) {
		fmt.Println(pe.Slot, pe.ID)
	}
	// Output:
	// tool.result buggy
}

// Permission checks as a serial slot: every policy votes on the same tool
// call and the strictest vote wins. Because "strictest" (max) is commutative
// and associative, the order the policies were registered in cannot change
// the decision.
func ExampleSerialSlot_Decide() {
	type Decision int
	const (
		Allow Decision = iota
		Ask
		Deny
	)
	names := []string{"allow", "ask", "deny"}
	strictest := func(a, b Decision) Decision { return max(a, b) }

	type Call struct{ Tool, Arg string }
	s := hooks.NewSerialSlot[Call, Decision]("tool.permit")
	_, _ = s.Register("no-rm", func(ctx context.Context, c Call) (Decision, error) {
		if c.Tool == "shell" && strings.HasPrefix(c.Arg, "rm ") {
			return Deny, nil
		}
		return Allow, nil
	})
	_, _ = s.Register("confirm-shell", func(ctx context.Context, c Call) (Decision, error) {
		if c.Tool == "shell" {
			return Ask, nil
		}
		return Allow, nil
	})

	for _, c := range []Call{{"read", "go.mod"}, {"shell", "ls"}, {"shell", "rm -rf /"}} {
		d, err := s.Decide(context.Background(), c, Allow, strictest)
		fmt.Println(c.Tool, c.Arg, "=>", names[d], err)
	}
	// Output:
	// read go.mod => allow <nil>
	// shell ls => ask <nil>
	// shell rm -rf / => deny <nil>
}

// RunSerial returns every handler's result; errors do not stop the run and
// are joined in hook ID order.
func ExampleSerialSlot_RunSerial() {
	s := hooks.NewSerialSlot[string, int]("token.count")
	_, _ = s.Register("words", func(ctx context.Context, text string) (int, error) {
		return len(strings.Fields(text)), nil
	})
	_, _ = s.Register("strict", func(ctx context.Context, text string) (int, error) {
		return 0, errors.New("strict counter unavailable")
	})
	_, _ = s.Register("bytes", func(ctx context.Context, text string) (int, error) {
		return len(text), nil
	})

	results, err := s.RunSerial(context.Background(), "hello agent loop")
	for _, r := range results {
		fmt.Println(r.ID, r.Value, r.Err)
	}
	fmt.Println("err:", err)
	// Output:
	// words 3 <nil>
	// strict 0 strict counter unavailable
	// bytes 16 <nil>
	// err: strict counter unavailable
}
