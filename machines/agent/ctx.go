package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// DefaultHardStop is how long an aborting turn gets to wind down before the
// agent asks for a hard stop (seed-semantics §2.3, abortTimeout).
const DefaultHardStop = 10 * time.Second

// Config is fixed for the life of an agent.
type Config struct {
	// PromptGate is set when an OnBeforeSubmitPrompt hook is registered: the
	// head of the next-turn queue is judged (idle.gating) before a turn
	// claims it.
	PromptGate bool `json:"promptGate,omitempty"`
	// HardStop is how long an aborting turn gets before the agent asks for a
	// hard stop; 0 means DefaultHardStop.
	HardStop time.Duration `json:"hardStop,omitempty"`
}

func (c Config) withDefaults() Config {
	if c.HardStop <= 0 {
		c.HardStop = DefaultHardStop
	}
	return c
}

// PublicStatus is the agent's status as the outside world sees it: idle in
// idle and maintenance, running in running and closing.
type PublicStatus string

// Public statuses.
const (
	StatusIdle    PublicStatus = "idle"
	StatusRunning PublicStatus = "running"
)

// Target names one list of the inbox.
type Target string

// Inbox targets.
const (
	// TargetNextTurn holds submitted prompts and follow-ups: a turn claims
	// one of them, its head.
	TargetNextTurn Target = "next-turn"
	// TargetNextStep holds steers, injected messages and notifications: a
	// claim takes all of them.
	TargetNextStep Target = "next-step"
	// TargetReminders holds keyed reminders: they never wake the agent and
	// ride along with the next claim.
	TargetReminders Target = "reminders"
)

// Background is a tool call that detached from its turn and still runs.
type Background struct {
	CallID string `json:"callId"`
	Name   string `json:"name"`
}

// Ctx is the agent machine's context: the session's inbox and everything the
// agent remembers between turns, and so everything its snapshot holds.
//
// Messages are treated as immutable values: the machine moves them between
// lists and effects but never edits one in place.
type Ctx struct {
	Config Config `json:"config"`
	// Status is the public status last reported (a Status effect is emitted
	// only when it flips).
	Status PublicStatus `json:"status"`
	// Turn is the number of the last turn started (0: none yet). Set it from
	// the log (the last turn/start) before New; StartTurn carries Turn+1.
	Turn int `json:"turn"`
	// LastEnd is how the last turn ended.
	LastEnd vocab.TurnEnd `json:"lastEnd,omitzero"`
	// Paused stops the agent from starting turns (and a running turn at its
	// next drain) until Continue.
	Paused bool `json:"paused,omitempty"`
	// NextTurn, NextStep and Reminders are the inbox, each in arrival order.
	// A replayed inbox may be filled in before New; it does not start a turn
	// by itself.
	NextTurn  []vocab.Message `json:"nextTurn,omitempty"`
	NextStep  []vocab.Message `json:"nextStep,omitempty"`
	Reminders []vocab.Message `json:"reminders,omitempty"`
	// WakeLatched records a wake that could not be served (in maintenance,
	// or after an abort); it is replayed when the agent returns to idle.
	WakeLatched bool `json:"wakeLatched,omitempty"`
	// Abort is the cause of the abort of the running turn or maintenance
	// job; nil when nothing is being aborted.
	Abort *vocab.CancelCause `json:"abort,omitempty"`
	// Background lists the detached tool calls still running, in detach
	// order.
	Background []Background `json:"background,omitempty"`
	// Gating is the id of the next-turn head the prompt gate is judging.
	Gating vocab.ID `json:"gating,omitempty"`
	// Timer is the armed hard-stop timer, TimerSeq its counter.
	Timer    chart.Timer `json:"timer,omitzero"`
	TimerSeq uint64      `json:"timerSeq"`

	// index holds the ids of every queued message, so that the duplicate
	// check of each input costs O(1), not O(inbox). It is built on first
	// use from the three lists (after a restore, or lists filled in before
	// New) and kept up to date by every change to them.
	index map[vocab.ID]struct{}
}

// NewCtx returns the context of a new agent: idle, nothing queued.
func NewCtx(cfg Config) Ctx { return Ctx{Config: cfg.withDefaults(), Status: StatusIdle} }

// Clone implements chart.Cloner.
func (c *Ctx) Clone() Ctx {
	d := *c
	d.NextTurn = slices.Clone(c.NextTurn)
	d.NextStep = slices.Clone(c.NextStep)
	d.Reminders = slices.Clone(c.Reminders)
	d.Background = slices.Clone(c.Background)
	d.index = nil
	if c.Abort != nil {
		a := *c.Abort
		d.Abort = &a
	}
	if c.LastEnd.Cause != nil {
		a := *c.LastEnd.Cause
		d.LastEnd.Cause = &a
	}
	return d
}

// Validate implements chart.Validator: every queued message has an id, no id
// is queued twice, every reminder has a distinct key, no background call is
// listed twice and the status is known.
func (c *Ctx) Validate() error {
	seen := map[vocab.ID]bool{}
	for _, l := range [...]struct {
		t  Target
		ms []vocab.Message
	}{{TargetNextTurn, c.NextTurn}, {TargetNextStep, c.NextStep}, {TargetReminders, c.Reminders}} {
		for i, m := range l.ms {
			if m.ID == "" {
				return fmt.Errorf("%s[%d] has no id", l.t, i)
			}
			if seen[m.ID] {
				return fmt.Errorf("%s[%d]: id %s queued twice", l.t, i, m.ID)
			}
			seen[m.ID] = true
		}
	}
	keys := map[string]bool{}
	for i, r := range c.Reminders {
		if r.Key == "" || keys[r.Key] {
			return fmt.Errorf("reminders[%d]: key %q empty or repeated", i, r.Key)
		}
		keys[r.Key] = true
	}
	calls := map[string]bool{}
	for i, b := range c.Background {
		if b.CallID == "" || calls[b.CallID] {
			return fmt.Errorf("background[%d]: call id %q empty or repeated", i, b.CallID)
		}
		calls[b.CallID] = true
	}
	switch c.Status {
	case "", StatusIdle, StatusRunning:
	default:
		return fmt.Errorf("unknown status %q", c.Status)
	}
	return nil
}

// queued reports whether a message with id is in the inbox.
func (c *Ctx) queued(id vocab.ID) bool {
	if c.index == nil {
		c.index = make(map[vocab.ID]struct{}, len(c.NextTurn)+len(c.NextStep)+len(c.Reminders))
		for _, l := range [...][]vocab.Message{c.NextTurn, c.NextStep, c.Reminders} {
			for i := range l {
				c.index[l[i].ID] = struct{}{}
			}
		}
	}
	_, ok := c.index[id]
	return ok
}

// Trim drops the id index when the inbox is empty (a map keeps its
// buckets after its entries are deleted); it is built again on use.
func (c *Ctx) Trim() {
	if len(c.NextTurn)+len(c.NextStep)+len(c.Reminders) == 0 {
		c.index = nil
	}
}

func (c *Ctx) indexAdd(id vocab.ID) {
	if c.index != nil {
		c.index[id] = struct{}{}
	}
}

func (c *Ctx) indexDel(id vocab.ID) {
	if c.index != nil {
		delete(c.index, id)
	}
}

// Queued reports whether a message with id is in the inbox (next-turn,
// next-step or reminders).
func (c *Ctx) Queued(id vocab.ID) bool { return c.queued(id) }

// fresh reports whether m may enter the inbox: it has an id no queued
// message has.
func (c *Ctx) fresh(m vocab.Message) bool { return m.ID != "" && !c.queued(m.ID) }

// background returns the index of call id among the background tools, or -1.
func (c *Ctx) background(id string) int {
	for i, b := range c.Background {
		if b.CallID == id {
			return i
		}
	}
	return -1
}

// reminder returns the index of the reminder with key, or -1.
func (c *Ctx) reminder(key string) int {
	for i, r := range c.Reminders {
		if r.Key == key {
			return i
		}
	}
	return -1
}

// hasWork reports whether a turn would have something to claim. Reminders
// alone are not work: they only ride along.
func (c *Ctx) hasWork() bool { return len(c.NextTurn)+len(c.NextStep) > 0 }

// gatedHead reports whether the next-turn head is still the prompt the gate
// was asked about.
func (c *Ctx) gatedHead() bool {
	return c.Gating != "" && len(c.NextTurn) > 0 && c.NextTurn[0].ID == c.Gating
}

// abortedBy reports whether an abort with cause kind k is in progress.
func (c *Ctx) abortedBy(k vocab.CancelKind) bool { return c.Abort != nil && c.Abort.Kind == k }
