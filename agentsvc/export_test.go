package agentsvc

import "github.com/loopchart/loopchart/adapters/engine"

// LaneStats exposes the lane's counters to this package's tests, which
// must know when a session has settled on the fake clock.
func LaneStats(s *Service) engine.Stats { return s.eng.Load().Stats() }

// HostRaced counts the calls that found their session evicted under them
// and went on on the reloaded lane.
func HostRaced(h *Host) int64 { return h.raced.Load() }
