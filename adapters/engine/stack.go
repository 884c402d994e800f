package engine

// stackReserve is the stack a goroutine needs free to drive a lane through
// a prompt: the deepest chain (the core stepping a machine whose action
// emits an event that a hook slot sees) takes about 13 KB below Run.
const stackReserve = 12 << 10

// growStack makes sure the goroutine's stack has stackReserve bytes free
// below its caller, by calling a function whose frame is that large. It
// is called where a goroutine starts to drive a lane: Run, Submit, a
// worker, the stopper, a timer's callback, a slot grant.
//
// A goroutine starts with a small stack (2 KB is typical) and the runtime
// doubles it, copying every frame, each time a call does not fit: a
// prompt on a new goroutine (a server's request, a session's close) grew
// it three times, each deep inside the machines, where a copy walks
// dozens of frames. Growing it here, at a shallow frame, costs one copy
// of a few frames. On a goroutine whose stack is already large enough it
// costs a stack check and clearing the frame. Nothing depends on it but
// speed.
//
//go:noinline
func growStack() {
	var pad [stackReserve]byte
	touch(pad[:])
}

// touch keeps pad alive, and so growStack's frame as large as it is.
//
//go:noinline
func touch([]byte) {}
