package agentsvc

import (
	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/vocab"
)

// LaneStats exposes the lane's counters to this package's tests, which
// must know when a session has settled on the fake clock.
func LaneStats(s *Service) engine.Stats { return s.eng.Load().Stats() }

// HostRaced counts the calls that found their session evicted under them
// and went on on the reloaded lane.
func HostRaced(h *Host) int64 { return h.raced.Load() }

// HostRests reports whether the host would evict session id now (if it
// had rested long enough): loaded, its lane resting, nothing of the
// host's keeping it.
func HostRests(h *Host, id vocab.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	if e == nil || e.state != live || !h.evictable(e) {
		return false
	}
	_, ok := e.svc.eng.Load().Resting()
	return ok
}

// SetHostWoke makes every caller that waited for a load or an eviction
// of session id to end call f when it wakes, before it takes the host's
// lock; forget runs the cleanup of a collected handle on its record then.
// It returns the undo.
func SetHostWoke(id vocab.ID, f func(forget func())) (undo func()) {
	testHookWoke = func(e *hosted) {
		if e.info.ID == id {
			f(func() { e.host.forget(e) })
		}
	}
	return func() { testHookWoke = nil }
}

// HostWaiters counts the callers waiting for a load or an eviction of
// session id to end.
func HostWaiters(h *Host, id vocab.ID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.sessions[id]; e != nil {
		return e.waiters
	}
	return 0
}

// HostHandleGone reports whether session id's record has no handle (none
// kept, and the last one given out collected), or is gone.
func HostHandleGone(h *Host, id vocab.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	return e == nil || e.svc == nil && e.weak.Value() == nil
}
