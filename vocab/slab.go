package vocab

import "unsafe"

// slabLen is how many payloads of one type a PayloadSlab array holds. An
// array is kept alive by any event still holding one of its payloads, so
// it is small: a few steps' worth of the payloads a step logs several
// times.
const slabLen = 32

// A PayloadSlab boxes event payloads of type T without an allocation
// each. Box copies the value into the next free element of an array the
// slab shares among its payloads and returns an interface pointing at
// that element, as the interface Go makes for any(v) points at a copy of
// v of its own. An element is written once and never again (a full array
// is left to the events that hold its payloads, and a new one is
// allocated, one allocation per 32 payloads), so the boxed value is as
// immutable as any other: a type assertion copies it out as usual, and
// the event, its payload's type and value are what any(v) would give.
//
// The session core boxes with slabs of its own every recorded input (a
// step records at least a model's reply and a tool's outcome) and the
// payloads a step logs several times: a tool machine's transitions, a
// tool call's start, end and result, usage, the assistant's message. The zero value is ready to use. A PayloadSlab is
// not safe for concurrent use; the values it boxed are.
type PayloadSlab[T any] struct {
	buf []T
	typ unsafe.Pointer // T's type word, as an interface holding a T carries it
}

// eface is the layout of an interface{} value (runtime.eface).
type eface struct {
	typ, data unsafe.Pointer
}

// Box returns *v as an interface whose value lives in the slab's array:
// the same as any(*v), without an allocation of its own.
func (s *PayloadSlab[T]) Box(v *T) any {
	if len(s.buf) == cap(s.buf) {
		if s.typ == nil {
			var x any = *new(T)
			s.typ = (*eface)(unsafe.Pointer(&x)).typ
		}
		s.buf = make([]T, 0, slabLen)
	}
	s.buf = append(s.buf, *v)
	var x any
	e := (*eface)(unsafe.Pointer(&x))
	e.typ, e.data = s.typ, unsafe.Pointer(&s.buf[len(s.buf)-1])
	return x
}
