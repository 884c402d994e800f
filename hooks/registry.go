package hooks

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Option adjusts where [Slot.Register] or [SerialSlot.Register] places an
// entry; create one with [Before] or [After]. At most one ordering option may
// be given per registration. The zero Option is ignored.
type Option struct {
	kind   orderKind
	target string
}

// orderKind says how an Option places an entry.
type orderKind uint8

const (
	orderNone orderKind = iota
	orderBefore
	orderAfter
)

// Before places the new entry immediately before the entry registered as
// target: the new entry takes target's index and target moves one later.
// The target must be registered when Register is called.
func Before(target string) Option { return Option{kind: orderBefore, target: target} }

// After places the new entry immediately after the entry registered as
// target. The target must be registered when Register is called.
func After(target string) Option { return Option{kind: orderAfter, target: target} }

// Handle identifies one registration. Its zero value is valid and removes
// nothing. Handles are small values and may be copied freely.
type Handle struct {
	owner remover
	id    string
	seq   uint64
}

// remover is implemented by registries so that Handle need not be generic.
type remover interface {
	removeSeq(seq uint64) bool
}

// ID returns the hook ID the handle was registered under.
func (h Handle) ID() string { return h.id }

// Remove removes the entry created by the registration that returned h, and
// reports whether it was still present. If the ID has since been registered
// again, the newer entry is not touched and Remove returns false. Calling
// Remove more than once is a no-op.
func (h Handle) Remove() bool {
	if h.owner == nil {
		return false
	}
	return h.owner.removeSeq(h.seq)
}

// entry is one registered handler.
type entry[H any] struct {
	id  string
	seq uint64 // unique per registration within a registry
	h   H
}

// registry is the ordered, concurrency-safe list shared by both slot types.
//
// The entries slice is copy-on-write: it is never modified in place once
// published. Writers (register, remove) serialise on mu and publish each new
// slice through pub, so a snapshot is one atomic load, without the lock: a
// run, or a count of the entries, costs no lock however often it is asked
// for. A snapshot taken after a Register or Remove returned sees its change
// (the store happens before the writer's unlock and return).
type registry[H any] struct {
	name    string
	mu      sync.Mutex
	seq     uint64
	entries []entry[H]                 // the published entries; written under mu
	pub     atomic.Pointer[[]entry[H]] // &entries as last published; nil while none
}

// publish makes next the registry's entries (under mu), then counts the
// change in generation.
func (r *registry[H]) publish(next []entry[H]) {
	r.entries = next
	r.pub.Store(&next)
	generation.Add(1)
}

// generation counts the changes to the handlers of every slot of the
// process (see Generation).
var generation atomic.Uint64

// Generation returns a number that changes whenever a handler is added to
// or removed from any Slot or SerialSlot of the process. What a caller
// derives from slots (which of them have handlers, say), cached beside the
// generation it read before deriving it, stays true for as long as
// Generation returns that number: asking costs one atomic load, where
// asking each slot would touch each of them. A change is counted after it
// is visible, so a derivation made after reading a generation sees at
// least every change counted up to it.
func Generation() uint64 { return generation.Load() }

func (r *registry[H]) register(id string, h H, isNil bool, opts []Option) (Handle, error) {
	var (
		p     Option // the ordering option, if exactly one was given
		count int
	)
	for _, o := range opts {
		if o.kind != orderNone {
			p = o
			count++
		}
	}
	fail := func(target string, err error) (Handle, error) {
		return Handle{}, &Error{Slot: r.name, Op: "register", ID: id, Target: target, Err: err}
	}
	switch {
	case id == "":
		return fail(p.target, ErrEmptyID)
	case isNil:
		return fail(p.target, ErrNilHandler)
	case count > 1:
		return fail("", ErrConflictingOrder)
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	next := make([]entry[H], 0, len(r.entries)+1)
	for _, e := range r.entries {
		if e.id != id {
			next = append(next, e)
		}
	}
	at := len(next)
	if count == 1 {
		i := slices.IndexFunc(next, func(e entry[H]) bool { return e.id == p.target })
		if i < 0 {
			return fail(p.target, ErrUnknownTarget)
		}
		at = i
		if p.kind == orderAfter {
			at = i + 1
		}
	}
	r.seq++
	next = slices.Insert(next, at, entry[H]{id: id, seq: r.seq, h: h})
	r.publish(next)
	return Handle{owner: r, id: id, seq: r.seq}, nil
}

// removeWhere publishes a copy of the entries without the first entry that
// matches, and reports whether one did.
func (r *registry[H]) removeWhere(match func(entry[H]) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.entries, match)
	if i < 0 {
		return false
	}
	r.publish(slices.Delete(slices.Clone(r.entries), i, i+1))
	return true
}

func (r *registry[H]) removeSeq(seq uint64) bool {
	return r.removeWhere(func(e entry[H]) bool { return e.seq == seq })
}

func (r *registry[H]) remove(id string) bool {
	return r.removeWhere(func(e entry[H]) bool { return e.id == id })
}

func (r *registry[H]) ids() []string {
	snap := r.snapshot()
	ids := make([]string, len(snap))
	for i, e := range snap {
		ids[i] = e.id
	}
	return ids
}

// snapshot returns the current entries, without taking the lock. The
// result must not be modified.
func (r *registry[H]) snapshot() []entry[H] {
	if p := r.pub.Load(); p != nil {
		return *p
	}
	return nil
}
