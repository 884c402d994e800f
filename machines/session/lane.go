package session

import "github.com/loopchart/loopchart/vocab"

// needsSlot reports whether work p runs only while the session holds a
// lane slot (Config.Lane): model requests, hooks, and tool calls but
// those of tools that declare Waits and those that went on in the
// background.
func (c *Core) needsSlot(p *pending) bool {
	if !c.cfg.Lane {
		return false
	}
	switch p.kind {
	case WorkModel, WorkHook:
		return true
	case WorkTool:
		if p.work.Call != nil {
			if sp := c.spec(p.work.Call.Name); sp != nil && sp.Waits {
				return false
			}
		}
		for _, cl := range c.bg {
			if cl.work == p.id {
				return false
			}
		}
		return true
	}
	return false
}

// lane settles the session's lane slot after an input: it asks for one
// when work waits for it and no request is out, and gives it back when no
// work that needs one runs or waits. Both decisions are lane/slot events,
// so a log that queued folds and verifies like any other.
func (c *Core) lane() {
	if c.slot == 0 && !c.cfg.Lane {
		return
	}
	need, waiting := false, 0
	for _, p := range c.work {
		if c.needsSlot(p) {
			need = true
			if p.waiting {
				waiting++
			}
		}
	}
	switch {
	case c.slot != 0 && (!need || c.find(c.slot) == nil):
		// Nothing needs it (or a close cancelled it with everything).
		c.emit(vocab.EventLane, vocab.LanePayload{Op: vocab.LaneRelease, Work: c.slot})
		c.cancel(c.slot, vocab.CancelCause{})
		c.slot, c.slotHeld = 0, false
		if need {
			c.lane()
		}
	case c.slot == 0 && need:
		c.start(&pending{kind: WorkSlot}, Work{})
		c.slot = c.workSeq
		c.emit(vocab.EventLane, vocab.LanePayload{Op: vocab.LaneWait, Work: c.slot, Waiting: waiting})
	}
}

// resetSlot forgets the slot of a process that died: its lane is gone
// with it (recovery). The log says so with a release.
func (c *Core) resetSlot() {
	if c.slot != 0 {
		c.emit(vocab.EventLane, vocab.LanePayload{Op: vocab.LaneRelease, Work: c.slot})
		c.drop(c.slot)
	}
	c.slot, c.slotHeld = 0, false
	for _, p := range c.work {
		p.waiting = false
	}
}
