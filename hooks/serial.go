package hooks

import (
	"cmp"
	"context"
	"errors"
	"runtime/debug"
	"slices"
)

// SerialHandler is a serial hook. It inspects c and returns its own result,
// typically a decision. It does not see other handlers' results and must
// treat c as read-only (if C is a pointer or contains one, a handler that
// mutates it would make the outcome depend on registration order).
type SerialHandler[C, R any] func(ctx context.Context, c C) (R, error)

// Result is the outcome of one [SerialHandler] in a serial run.
type Result[R any] struct {
	// ID is the hook ID of the handler.
	ID string
	// Value is the handler's result; it is meaningful only if Err is nil.
	Value R
	// Err is the error the handler returned, or a [*PanicError] if it
	// panicked.
	Err error
}

// SerialSlot is a named, ordered list of [SerialHandler]s that all run on the
// same input, each producing a result of type R. Create one with
// [NewSerialSlot]; the zero value is not usable. A SerialSlot is safe for
// concurrent use.
//
// Registration and ordering follow exactly the same rules as [Slot]; order
// determines only the sequence in which handlers run and the order of the
// results returned by RunSerial, never the outcome of [SerialSlot.Decide].
type SerialSlot[C, R any] struct {
	reg registry[SerialHandler[C, R]]
}

// NewSerialSlot returns an empty serial slot. The name identifies the slot in
// errors.
func NewSerialSlot[C, R any](name string) *SerialSlot[C, R] {
	return &SerialSlot[C, R]{reg: registry[SerialHandler[C, R]]{name: name}}
}

// Name returns the slot's name.
func (s *SerialSlot[C, R]) Name() string { return s.reg.name }

// Register adds h under id; see [Slot.Register] for the ordering, replacement
// and error rules, which are identical.
func (s *SerialSlot[C, R]) Register(id string, h SerialHandler[C, R], opts ...Option) (Handle, error) {
	return s.reg.register(id, h, h == nil, opts)
}

// Remove removes the entry registered under id and reports whether there was
// one.
func (s *SerialSlot[C, R]) Remove(id string) bool { return s.reg.remove(id) }

// IDs returns the registered IDs in run order.
func (s *SerialSlot[C, R]) IDs() []string { return s.reg.ids() }

// Len returns the number of registered entries.
func (s *SerialSlot[C, R]) Len() int { return len(s.reg.snapshot()) }

// RunSerial calls every handler of the current snapshot, in order, with c,
// and returns one [Result] per handler in run order.
//
// A handler error does not stop the run. A panic is recovered and recorded
// as that handler's [*PanicError]. The returned error joins ([errors.Join])
// the errors of all failed handlers sorted by hook ID, so it does not depend
// on registration order; it is nil if every handler succeeded.
//
// If ctx is done before a handler runs, the run stops: the results of the
// handlers that did run are returned together with [context.Cause] of ctx
// (their errors, if any, remain in the results).
func (s *SerialSlot[C, R]) RunSerial(ctx context.Context, c C) ([]Result[R], error) {
	snap := s.reg.snapshot()
	results := make([]Result[R], 0, len(snap))
	for _, e := range snap {
		if ctx.Err() != nil {
			return results, context.Cause(ctx)
		}
		results = append(results, s.call(ctx, e, c))
	}

	failed := slices.DeleteFunc(slices.Clone(results), func(r Result[R]) bool { return r.Err == nil })
	if len(failed) == 0 {
		return results, nil
	}
	slices.SortFunc(failed, func(a, b Result[R]) int { return cmp.Compare(a.ID, b.ID) })
	errs := make([]error, len(failed))
	for i, r := range failed {
		errs[i] = r.Err
	}
	return results, errors.Join(errs...)
}

func (s *SerialSlot[C, R]) call(ctx context.Context, e entry[SerialHandler[C, R]], c C) (res Result[R]) {
	res.ID = e.id
	defer func() {
		if v := recover(); v != nil {
			var zero R
			res.Value = zero
			res.Err = &PanicError{Slot: s.reg.name, ID: e.id, Value: v, Stack: debug.Stack()}
		}
	}()
	res.Value, res.Err = e.h(ctx, c)
	return res
}

// Decide runs every handler like [SerialSlot.RunSerial] and folds the values
// of the handlers that succeeded, starting from identity:
//
//	acc = identity; for each successful result v: acc = combine(acc, v)
//
// combine must be commutative and associative and identity must be its
// identity element (combine(identity, v) == v), i.e. they form a commutative
// monoid such as (false, ||), (true, &&), (0, +) or (lowest, max). Then the
// fold gives the same value for every permutation of the results, and since
// each handler sees the same input and none sees another's result, the
// results themselves do not depend on order either. Registration order
// therefore cannot change the decision.
//
// The error is the one RunSerial returns (joined handler errors sorted by ID,
// or the context cause). Failed handlers contribute nothing to the fold, so
// a caller that must fail closed should check the error before acting on the
// decision.
func (s *SerialSlot[C, R]) Decide(ctx context.Context, c C, identity R, combine func(acc, v R) R) (R, error) {
	results, err := s.RunSerial(ctx, c)
	acc := identity
	for _, r := range results {
		if r.Err == nil {
			acc = combine(acc, r.Value)
		}
	}
	return acc, err
}
