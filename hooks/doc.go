// Package hooks provides ordered, named extension points ("slots") for an
// LLM agent loop.
//
// A slot is a named, ordered list of handlers, each registered under an ID
// that is unique within the slot. The order is explicit and inspectable
// ([Slot.IDs]): a registration is appended at the end unless it asks to be
// placed immediately [Before] or [After] another registered ID.
// Registering an ID that is already present replaces the old entry: the old
// entry is removed first and the new one is placed according to its own
// options (so re-registering without options moves the ID to the end).
// Registration is atomic: when it fails, the slot is left unchanged.
//
// [Slot.Register] returns a [Handle] whose Remove method removes exactly the
// entry that registration created; if the ID has since been registered again,
// the newer entry is left alone.
//
// Two dispatch styles are offered, one per slot type:
//
//   - [Slot] runs a waterfall (middleware chain). Each [Handler] receives the
//     current value and a [Next] continuation. It may rewrite the value it
//     passes to next, rewrite the value next returns, or not call next at all
//     to short-circuit the rest of the chain, including the terminal. Calling
//     next more than once is an error ([ErrNextCalledTwice]). Here order is
//     part of the meaning, which is why it is explicit.
//
//   - [SerialSlot] runs every handler, in order, on the same input. Each
//     [SerialHandler] returns a result of its own (for example a permission
//     decision) and never sees the others' results. [SerialSlot.Decide] folds
//     the results with a caller-supplied commutative, associative combine
//     function, so the registration order cannot change the outcome. Handler
//     errors do not stop the run; they are collected and joined in ID order,
//     which makes the combined error independent of registration order too.
//
// Both styles share the same safety rules:
//
//   - A run works on a snapshot of the entries taken when it starts.
//     Handlers may register or remove entries (in the same slot or any other)
//     while a run is in progress; that affects later runs only.
//   - A panic in a handler (or in a waterfall terminal) does not escape: it
//     is recovered and reported as a [*PanicError] naming the slot and ID.
//   - Before each handler (and the terminal) runs, the context is checked; if
//     it is done, the run stops and returns [context.Cause] of it.
//
// Slots are safe for concurrent use by multiple goroutines. Slots must be
// created with [NewSlot] or [NewSerialSlot].
package hooks
