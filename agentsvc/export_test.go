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
