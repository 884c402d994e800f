package engine

import (
	"sync"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// GlobalLane caps how many of the sessions that share it run at once (a
// Host's global lane). A session holds a slot while it has a model
// request, tool call or hook running, and gives it back as soon as it has
// none (the session core decides both, as WorkSlot work; see
// session.Config.Lane). A session that asks while every slot is held
// waits in first-come order; nothing blocks meanwhile: its work is
// deferred in its core, and a released slot is granted to the next
// session as a slot.granted input posted from a goroutine of the lane's
// own (never the releasing session's lane, so one lane never runs
// another). All methods are safe for concurrent use.
type GlobalLane struct {
	mu      sync.Mutex
	max     int
	held    []laneSlot
	waiting []laneSlot
	grants  sync.WaitGroup
	closed  bool
}

// laneSlot is one session's slot request.
type laneSlot struct {
	e  *Engine
	id uint64
}

// NewGlobalLane returns a lane of max slots; max must be at least 1.
func NewGlobalLane(max int) (*GlobalLane, error) {
	if max < 1 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "engine: a global lane needs at least one slot, not %d", max)
	}
	return &GlobalLane{max: max}, nil
}

// LaneStats counts a global lane's slots.
type LaneStats struct {
	// Max is the number of slots, Held how many are held, Waiting how
	// many sessions wait for one.
	Max, Held, Waiting int
}

// Stats returns the lane's counters.
func (l *GlobalLane) Stats() LaneStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LaneStats{Max: l.max, Held: len(l.held), Waiting: len(l.waiting)}
}

// Wait waits until the grants the lane is posting have been posted (for
// tests and orderly shutdowns).
func (l *GlobalLane) Wait() { l.grants.Wait() }

// Close stops granting slots: sessions that wait for one, or ask after
// Close, wait until they stop. A host closing its sessions closes its
// lane first, so that no session is granted a slot (and starts work)
// because another one closed before it.
func (l *GlobalLane) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// request asks for a slot for e's request id: true when granted at once,
// else e waits in line.
func (l *GlobalLane) request(e *Engine, id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) < l.max && !l.closed {
		l.held = append(l.held, laneSlot{e, id})
		return true
	}
	l.waiting = append(l.waiting, laneSlot{e, id})
	return false
}

// release gives back e's request id, held or waiting, and grants freed
// slots to the sessions next in line.
func (l *GlobalLane) release(e *Engine, id uint64) {
	l.mu.Lock()
	l.held = deleteSlot(l.held, func(s laneSlot) bool { return s.e == e && s.id == id })
	l.waiting = deleteSlot(l.waiting, func(s laneSlot) bool { return s.e == e && s.id == id })
	next := l.next()
	l.mu.Unlock()
	l.grant(next)
}

// drop gives back every request of e (its session stopped).
func (l *GlobalLane) drop(e *Engine) {
	l.mu.Lock()
	l.held = deleteSlot(l.held, func(s laneSlot) bool { return s.e == e })
	l.waiting = deleteSlot(l.waiting, func(s laneSlot) bool { return s.e == e })
	next := l.next()
	l.mu.Unlock()
	l.grant(next)
}

// next moves the sessions first in line to the free slots (l.mu held).
func (l *GlobalLane) next() []laneSlot {
	var granted []laneSlot
	for len(l.held) < l.max && len(l.waiting) > 0 && !l.closed {
		s := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.held = append(l.held, s)
		granted = append(granted, s)
	}
	return granted
}

// grant tells each session its slot is granted. A session that stopped
// meanwhile gives its slot back (its stop may have dropped it already).
func (l *GlobalLane) grant(slots []laneSlot) {
	for _, s := range slots {
		l.grants.Add(1)
		go func() {
			defer l.grants.Done()
			growStack() // this goroutine may drive the session's lane
			in := vocab.Input{Kind: vocab.InSlotGranted, At: s.e.opt.Clock.Now(), Work: s.id}
			if err := s.e.post(&item{in: in}, nil, nil); err != nil {
				l.release(s.e, s.id)
			}
		}()
	}
}

func deleteSlot(s []laneSlot, del func(laneSlot) bool) []laneSlot {
	out := s[:0]
	for _, x := range s {
		if !del(x) {
			out = append(out, x)
		}
	}
	clear(s[len(out):])
	return out
}

// slotWork carries out the core's WorkSlot work: a request granted at once
// is answered on the lane itself (the input joins the mailbox the lane is
// draining); a cancel gives the slot back.
func (e *Engine) slotWork(w session.Work) {
	l := e.opt.Lane
	if l == nil {
		e.log.Error("engine: slot work without a global lane", "work", w.ID)
		return
	}
	if w.Op == session.Cancel {
		l.release(e, w.ID)
		return
	}
	if l.request(e, w.ID) {
		if err := e.post(&item{in: vocab.Input{Kind: vocab.InSlotGranted, At: e.opt.Clock.Now(), Work: w.ID}}, nil, nil); err != nil {
			l.release(e, w.ID) // the session stopped
		}
	}
}
