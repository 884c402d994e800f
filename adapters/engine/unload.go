package engine

import (
	"crypto/sha256"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Resume is what a lane unloaded at rest (Unload) hands the lane that
// takes its session up again (Options.Resume).
type Resume struct {
	// Seq is the sequence number of the session's last event when it was
	// unloaded.
	Seq uint64
	// Config is a digest of the configuration the unloaded lane ran with
	// (as its open input records it).
	Config [sha256.Size]byte
	// Slots are the hook slots last stepped in.
	Slots []vocab.HookName
	// Checkpointed is the sequence number the lane counted its next
	// checkpoint from (see Options.CheckpointEvery), so that a session
	// unloaded and reloaded often still records checkpoints.
	Checkpointed uint64
}

// errUnloaded is the sticky error of a lane that Unload stopped. Its code
// is closed, so it reads right if it ever reaches a caller; the handle
// that owns the lane recognises it (IsUnloaded) and reloads instead.
var errUnloaded = vocab.Errorf(vocab.CodeClosed, "session unloaded at rest: its handle reloads it")

// Stopped reports whether the session stopped: closed, failed or
// unloaded.
func (e *Engine) Stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err != nil
}

// Unloaded reports whether Unload stopped the lane.
func (e *Engine) Unloaded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err == errUnloaded
}

// IsUnloaded reports whether err is the answer of a lane that Unload
// stopped: the session is intact in its log, and a new lane resumes it.
func IsUnloaded(err error) bool { return err == errUnloaded }

// Resting reports whether the session rests: no goroutine drives it,
// nothing is queued, the agent is idle, no work runs (no model request,
// tool, hook, job, nor an armed timer), no prompt, acknowledgement or
// WhenIdle caller waits, and every event is durable. since is when it
// came to rest.
func (e *Engine) Resting() (since time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.restingLocked() {
		return time.Time{}, false
	}
	return e.restAt, true
}

// restingLocked is Resting's test; e.mu is held.
func (e *Engine) restingLocked() bool {
	if e.err != nil || e.core == nil || e.driving || len(e.box) > 0 || !e.idle || len(e.inflight) > 0 || len(e.waiters) > 0 ||
		e.acks.Len() > 0 || e.prompts.Len() > 0 || len(e.jobs) > 0 {
		return false
	}
	return e.running.Len() == 0
}

// Unload stops a resting session (see Resting) without closing it: the
// log is left as it is, every later call fails at once with an error
// matching IsUnloaded, event streams end, and the core is dropped. It
// reports false, and changes nothing, when the session does not rest:
// the test and the stop are one step under the mailbox's lock, so an
// input either came first (and the session does not rest) or finds the
// lane unloaded. A new lane continues the session from its log with
// Options.Resume set to what Unload returned.
//
// The core arms timers only while a turn runs or aborts (retry waits,
// abort grace, hard stop, the run's timeout) or a call waits, and
// Resting counts armed timers as running work: an unloaded session has
// no timer to lose.
func (e *Engine) Unload() (Resume, bool) {
	e.mu.Lock()
	if !e.restingLocked() {
		e.mu.Unlock()
		return Resume{}, false
	}
	r := Resume{Seq: e.core.Seq(), Config: e.config, Slots: e.slots, Checkpointed: e.checkpointed}
	e.err = errUnloaded
	e.core = nil
	e.spare = nil
	e.mu.Unlock()
	e.stopAll(errUnloaded)
	e.halted.Store(true)
	e.disarm()
	e.feed.Close()
	close(e.done)
	return r, true
}
