package hooks

import (
	"context"
	"runtime/debug"
	"sync/atomic"
)

// Next continues a waterfall run: it runs the rest of the chain (the later
// handlers and finally the terminal) on c and returns their result.
//
// A handler may call its next at most once; a second call returns an [*Error]
// wrapping [ErrNextCalledTwice], together with the value it was given, and
// runs nothing. next must be called before the handler returns; it must not
// be retained.
type Next[C any] func(ctx context.Context, c C) (C, error)

// Handler is a waterfall hook. It receives the current value c and next,
// which runs the rest of the chain. A typical handler looks like:
//
//	func(ctx context.Context, c C, next Next[C]) (C, error) {
//		c = rewriteIn(c)            // change what later handlers see
//		out, err := next(ctx, c)    // run the rest of the chain
//		return rewriteOut(out), err // change what earlier handlers see
//	}
//
// Returning without calling next short-circuits: no later handler and not
// the terminal run, and the handler's return value becomes the result seen
// by the previous handler. A handler may pass a derived context to next.
type Handler[C any] func(ctx context.Context, c C, next Next[C]) (C, error)

// Slot is a named, ordered list of waterfall [Handler]s over a value of type
// C. Create one with [NewSlot]; the zero value is not usable. A Slot is safe
// for concurrent use.
type Slot[C any] struct {
	reg registry[Handler[C]]
}

// NewSlot returns an empty slot. The name identifies the slot in errors.
func NewSlot[C any](name string) *Slot[C] {
	return &Slot[C]{reg: registry[Handler[C]]{name: name}}
}

// Name returns the slot's name.
func (s *Slot[C]) Name() string { return s.reg.name }

// Register adds h under id and returns a [Handle] for removing exactly this
// registration.
//
// Without options the entry is appended at the end. [Before] and [After]
// place it relative to a registered target; giving more than one ordering
// option fails with [ErrConflictingOrder], and a target that is not
// registered fails with [ErrUnknownTarget].
//
// If id is already registered, the old entry is removed first and the new
// one is then placed as if the old one had never been there. Consequently a
// target equal to id itself is unknown ([ErrUnknownTarget]): an entry cannot
// be placed relative to the entry it replaces.
//
// An empty id fails with [ErrEmptyID] and a nil h with [ErrNilHandler].
// All failures are reported as [*Error] and leave the slot unchanged.
func (s *Slot[C]) Register(id string, h Handler[C], opts ...Option) (Handle, error) {
	return s.reg.register(id, h, h == nil, opts)
}

// Remove removes the entry registered under id, whichever registration
// created it, and reports whether there was one.
func (s *Slot[C]) Remove(id string) bool { return s.reg.remove(id) }

// IDs returns the registered IDs in run order.
func (s *Slot[C]) IDs() []string { return s.reg.ids() }

// Len returns the number of registered entries.
func (s *Slot[C]) Len() int { return len(s.reg.snapshot()) }

// RunWaterfall runs the chain on value: the first handler is called with
// value and a next that calls the second handler, and so on; the last
// handler's next calls terminal. A nil terminal returns its input unchanged.
// The result of the first handler (or of the terminal, if the slot is empty)
// is returned.
//
// The chain is the snapshot of entries registered when RunWaterfall is
// called. Before each handler and the terminal, the context passed down the
// chain is checked; if it is done, that step is not run and the value it
// would have received is returned with [context.Cause] of the context. A
// panic in a handler or the terminal is recovered and returned as a
// [*PanicError], with the value that step received; the earlier handlers see
// it as the error returned by their next.
func (s *Slot[C]) RunWaterfall(ctx context.Context, value C, terminal Next[C]) (C, error) {
	r := run[C]{slot: s.reg.name, entries: s.reg.snapshot(), terminal: terminal}
	return r.step(ctx, 0, value)
}

// run is one waterfall invocation over a fixed snapshot.
type run[C any] struct {
	slot     string
	entries  []entry[Handler[C]]
	terminal Next[C]
}

// step runs entry i (or the terminal, when i == len(entries)) on c.
func (r *run[C]) step(ctx context.Context, i int, c C) (out C, err error) {
	if ctx.Err() != nil {
		return c, context.Cause(ctx)
	}
	id := ""
	if i < len(r.entries) {
		id = r.entries[i].id
	}
	defer func() {
		if v := recover(); v != nil {
			out, err = c, &PanicError{Slot: r.slot, ID: id, Value: v, Stack: debug.Stack()}
		}
	}()

	if i == len(r.entries) {
		if r.terminal == nil {
			return c, nil
		}
		return r.terminal(ctx, c)
	}

	var called atomic.Bool
	next := func(ctx context.Context, c C) (C, error) {
		if !called.CompareAndSwap(false, true) {
			return c, &Error{Slot: r.slot, Op: "next", ID: id, Err: ErrNextCalledTwice}
		}
		return r.step(ctx, i+1, c)
	}
	return r.entries[i].h(ctx, c, next)
}
