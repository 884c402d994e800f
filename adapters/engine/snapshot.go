package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"

	"github.com/loopchart/loopchart/vocab"
)

// Snapshot is a consistent picture of a session taken on its lane: the
// machine snapshots (versioned JSON values that restore the exact state,
// pending timers included), the history and the position in the event log.
type Snapshot struct {
	Session vocab.ID          `json:"session"`
	Seq     uint64            `json:"seq"`
	Status  string            `json:"status"`
	Agent   json.RawMessage   `json:"agent"`
	Turn    json.RawMessage   `json:"turn,omitempty"`
	Tools   []json.RawMessage `json:"tools,omitempty"`
	History []vocab.Message   `json:"history"`
}

// Snapshot captures the session.
func (e *Engine) Snapshot(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	err := e.call(ctx, func() error {
		s = Snapshot{Session: e.session, Seq: e.seq, Status: string(e.agent.Ctx.Status), History: slices.Clone(e.history)}
		var err error
		if s.Agent, err = json.Marshal(e.agentM.Snapshot(e.agent)); err != nil {
			return err
		}
		if e.turn != nil {
			if s.Turn, err = json.Marshal(e.turnM.Snapshot(e.turn)); err != nil {
				return err
			}
		}
		for _, c := range e.batch {
			if r := e.tools[c.ID]; r != nil {
				b, err := json.Marshal(e.toolM.Snapshot(r.inst))
				if err != nil {
					return err
				}
				s.Tools = append(s.Tools, b)
			}
		}
		return nil
	})
	return s, err
}

// State reports the agent's and the running turn's current leaf states
// ("" when no turn runs), read on the lane.
func (e *Engine) State(ctx context.Context) (agentState, turnState string, err error) {
	err = e.call(ctx, func() error {
		agentState = string(e.agent.State())
		if e.turn != nil {
			turnState = string(e.turn.State())
		}
		return nil
	})
	return
}

// History returns a copy of the conversation history.
func (e *Engine) History(ctx context.Context) ([]vocab.Message, error) {
	var h []vocab.Message
	err := e.call(ctx, func() error { h = slices.Clone(e.history); return nil })
	return h, err
}

// Stats counts the engine's moving parts, for tests that must know when a
// session has settled: nothing queued, the lane idle, and every worker
// either gone or asleep on the clock.
type Stats struct {
	// Inflight counts items posted to the lane and not yet handled.
	Inflight int
	// Workers counts running worker goroutines (model streams, tools,
	// hooks); Timers counts armed timers.
	Workers int
	Timers  int
}

// Stats returns the current counts. It does not go through the lane.
func (e *Engine) Stats() Stats {
	return Stats{Inflight: int(e.inflight.Load()), Workers: int(e.active.Load()), Timers: int(e.timerN.Load())}
}

type counters struct {
	idleN    atomic.Int32
	inflight atomic.Int64
	active   atomic.Int64
	timerN   atomic.Int64
}
