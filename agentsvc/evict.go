package agentsvc

import (
	"container/heap"
	"context"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// The host's eviction and its timer wheel. A loaded session has one
// eviction check in the wheel, due EvictAfter after its load or after it
// last came to rest; an ended sub-agent has its archiving there. One
// clock timer, armed for the earliest item, serves them all.

// wheelItem is one deadline of the host: an eviction check of e at load
// generation gen, or the archiving of sub-agent c.
type wheelItem struct {
	at  time.Time
	seq uint64 // arming order, for items due at the same time
	e   *hosted
	gen uint64
	c   *child
}

// wheel is a min-heap of the host's deadlines.
type wheel []wheelItem

func (w wheel) Len() int { return len(w) }
func (w wheel) Less(i, j int) bool {
	if !w[i].at.Equal(w[j].at) {
		return w[i].at.Before(w[j].at)
	}
	return w[i].seq < w[j].seq
}
func (w wheel) Swap(i, j int) { w[i], w[j] = w[j], w[i] }
func (w *wheel) Push(x any)   { *w = append(*w, x.(wheelItem)) }
func (w *wheel) Pop() any {
	old := *w
	it := old[len(old)-1]
	old[len(old)-1] = wheelItem{}
	*w = old[:len(old)-1]
	return it
}

// at puts it in the wheel, due at t, and arms the host's timer when it is
// the earliest; h.mu is held.
func (h *Host) at(t time.Time, it wheelItem) {
	if h.closed {
		return
	}
	h.wheelSeq++
	it.at, it.seq = t, h.wheelSeq
	heap.Push(&h.wheel, it)
	h.arm()
}

// arm points the host's one timer at the wheel's earliest item; h.mu is
// held.
func (h *Host) arm() {
	if len(h.wheel) == 0 {
		return
	}
	next := h.wheel[0].at
	if h.tick != nil {
		if !next.Before(h.tickAt) {
			return
		}
		h.tick.Stop()
	}
	h.tick, h.tickAt = h.clock.AfterFunc(next.Sub(h.clock.Now()), h.fire), next
}

// fire runs the wheel's items that are due, on the clock's goroutine (the
// fake clock's: the one that advances it).
func (h *Host) fire() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.wg.Add(1)
	defer h.wg.Done()
	h.tick = nil
	now := h.clock.Now()
	var due []wheelItem
	for len(h.wheel) > 0 && !h.wheel[0].at.After(now) {
		due = append(due, heap.Pop(&h.wheel).(wheelItem))
	}
	h.arm()
	h.mu.Unlock()
	for _, it := range due {
		if it.c != nil {
			h.archive(it.c)
			continue
		}
		h.check(it.e, it.gen)
	}
}

// check evicts e when it has rested for EvictAfter, and otherwise checks
// it again when it could have.
func (h *Host) check(e *hosted, gen uint64) {
	h.mu.Lock()
	if h.closed || e.state != live || e.gen != gen {
		h.mu.Unlock()
		return
	}
	eng := e.svc.eng.Load()
	if eng.Stopped() {
		// Closed (or failed): nothing will wake it to check again.
		h.mu.Unlock()
		return
	}
	now := h.clock.Now()
	next := now.Add(h.opt.EvictAfter)
	since, resting := eng.Resting()
	if resting && h.evictable(e) {
		if due := since.Add(h.opt.EvictAfter); due.After(now) {
			next = due
		} else {
			h.mu.Unlock()
			if ok, err := h.evict(e, gen); ok || err != nil {
				if err != nil {
					h.log.Error("agentsvc: evicting a session", "session", e.info.ID, "err", err)
				}
				return
			}
			h.mu.Lock()
			if h.closed || e.state != live || e.gen != gen {
				h.mu.Unlock()
				return
			}
		}
	}
	h.at(next, wheelItem{e: e, gen: gen})
	h.mu.Unlock()
}

// evictable reports whether the host keeps nothing of e's running: no
// event stream of a caller, no sub-agent running, queued or being
// delivered, no agents_wait result to settle. (Whether the lane rests, Unload decides.)
// h.mu is held.
func (h *Host) evictable(e *hosted) bool {
	if e.svc == nil || e.svc.subs.Load() > 0 || len(e.waits) > 0 {
		return false
	}
	for _, c := range e.children {
		if c.state == childRunning || c.state == childQueued {
			return false
		}
		select {
		case <-c.done:
		default:
			return false // ended, its delivery on its way
		}
	}
	return true
}

// pinned reports whether an evicted e keeps its handle: a parent (its
// sub-agent bookkeeping points at it), a sub-agent (its parent's does),
// or a handle with hook handlers. h.mu is held.
func (h *Host) pinned(e *hosted) bool {
	return len(e.children) > 0 || len(e.waits) > 0 || e.info.Parent != "" || len(e.svc.slots()) > 0
}

// evict evicts e (at load generation gen, 0: any) when it rests: its
// lane is unloaded, which either finds it resting and stops it in one
// step or changes nothing, then its claim is released. Calls on its
// handle meanwhile wait, and reload it once the eviction is over.
func (h *Host) evict(e *hosted, gen uint64) (bool, error) {
	h.mu.Lock()
	if h.closed || e.state != live || gen != 0 && e.gen != gen || !h.evictable(e) {
		h.mu.Unlock()
		return false, nil
	}
	s := e.svc
	r, ok := s.eng.Load().Unload()
	if !ok {
		h.mu.Unlock()
		return false, nil
	}
	s.eng.Store(nil)
	log := s.log.Swap(nil)
	e.state, e.ready, e.resume = evicting, make(chan struct{}), &r
	h.mu.Unlock()
	var err error
	if log != nil {
		err = log.Release(context.WithoutCancel(h.ctx))
	}
	h.mu.Lock()
	e.state = unloaded
	close(e.ready)
	e.ready = nil
	h.evictions++
	if !h.pinned(e) {
		e.svc = nil // weak still finds it while a caller holds it
	}
	h.mu.Unlock()
	return true, err
}

// Evict evicts session id now when it rests (see HostOptions.EvictAfter),
// whatever EvictAfter says, and reports whether it did. The *Service
// callers hold stays valid: its next call reloads the session.
func (h *Host) Evict(ctx context.Context, id vocab.ID) (bool, error) {
	h.mu.Lock()
	e := h.sessions[id]
	h.mu.Unlock()
	if e == nil {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, context.Cause(ctx)
	}
	return h.evict(e, 0)
}

// HostStats counts a host's sessions and what it did with them.
type HostStats struct {
	// Resident counts the sessions loaded (or loading, or being
	// evicted); Known the sessions the host keeps a record of (resident,
	// plus evicted ones that a caller still holds or that have sub-agent
	// bookkeeping).
	Resident, Known int
	// Loads counts the loads (a first open or a reload); Evictions the
	// evictions.
	Loads, Evictions int
}

// Stats returns the host's counters.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := HostStats{Known: len(h.sessions), Loads: h.loads, Evictions: h.evictions}
	for _, e := range h.sessions {
		if e.state != unloaded {
			st.Resident++
		}
	}
	return st
}
