package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// driveTurn runs one turn of two steps through the core alone, answering
// its work synchronously: a reply with one tool call, the tool's result,
// then a text reply. It returns the number of transition events.
func driveTurn(b testing.TB, c *session.Core, at time.Time, id vocab.ID, msg *vocab.Message, call, text *vocab.Message, res *vocab.ToolResult, seen func(*vocab.Event)) int {
	transitions := 0
	in := vocab.Input{Kind: vocab.InSubmit, At: at, ID: id, Message: msg}
	models := 0
	for {
		if err := c.Step(in); err != nil {
			b.Fatal(err)
		}
		rd, ok := c.Ready()
		if !ok {
			b.Fatal("no ready")
		}
		for i := range rd.Events {
			if rd.Events[i].Kind == vocab.EventTransition {
				transitions++
			}
			if seen != nil {
				seen(&rd.Events[i])
			}
		}
		// The harness keeps only what it answers with (a copy of a whole
		// Work would be an allocation of its own, charged to the core).
		var next struct {
			ID   uint64
			Kind session.WorkKind
		}
		for i := range rd.Work {
			if rd.Work[i].Op == session.Start {
				next.ID, next.Kind = rd.Work[i].ID, rd.Work[i].Kind
			}
		}
		ended := false
		for _, r := range rd.Results {
			if r.Kind == session.PromptEnded {
				ended = true
			}
		}
		c.Advance(rd)
		if ended {
			return transitions
		}
		switch {
		case next.ID == 0:
			b.Fatal("no work")
		case next.Kind == session.WorkModel:
			models++
			reply := call
			if models == 2 {
				reply = text
			}
			in = vocab.Input{Kind: vocab.InModelDone, At: at, Work: next.ID, Reply: reply}
		case next.Kind == session.WorkTool:
			in = vocab.Input{Kind: vocab.InToolDone, At: at, Work: next.ID, Result: res}
		}
	}
}

// fixtureTurns is how many turns BenchmarkCoreStep drives on one core
// before it starts a fresh one.
const fixtureTurns = 100

// turnFixture is the turn BenchmarkCoreStep drives: the time of its
// inputs, the prompt, the final text reply, the tool's result, and the
// replies with one tool call, one for each of fixtureTurns turns: their
// call ids differ, as a real provider's do (a reply whose call id is
// already in the history takes the core's repair path: a derived id and
// a copy of the reply's parts).
func turnFixture() (at time.Time, msg, text *vocab.Message, res *vocab.ToolResult, calls []*vocab.Message) {
	calls = make([]*vocab.Message, fixtureTurns)
	for i := range calls {
		tc := &vocab.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "noop", Args: json.RawMessage(`{}`)}
		calls[i] = &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartToolCall, Call: tc}}}
	}
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		&vocab.Message{Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "go"}}},
		&vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "done"}}},
		&vocab.ToolResult{Content: "ok"}, calls
}

// BenchmarkCoreStep measures the session core alone (no goroutines, no
// sink): one op is one step, a turn of two steps (a tool call, then an
// answer) driven synchronously, with every event it emits. Compare with
// BenchmarkCoreBareStateless, the floor: a bare stateless machine firing
// as many guarded transitions as the core logs per step.
func BenchmarkCoreStep(b *testing.B) {
	at, msg, text, res, calls := turnFixture()
	m := session.NewMachines()
	var c *session.Core
	fresh := func() {
		var err error
		if c, err = session.New(session.Config{Session: "S"}, m); err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	ids := make([]vocab.ID, fixtureTurns)
	for i := range ids {
		ids[i] = vocab.ID("p" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	transitions := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%fixtureTurns == 0 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		transitions += driveTurn(b, c, at, ids[i%fixtureTurns], msg, calls[i%fixtureTurns], text, res, nil)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/step")
	b.ReportMetric(float64(transitions)/float64(2*b.N), "transitions/step")
}

// BenchmarkCoreBareStateless is the floor for BenchmarkCoreStep: a bare
// stateless machine (FiringImmediate, a guard and an entry callback per
// transition) firing 8 transitions per op, the number of transitions the
// core logs per step (see its transitions/step metric).
func BenchmarkCoreBareStateless(b *testing.B) {
	const n = 8
	state := stateless.State(0)
	sm := stateless.NewStateMachineWithExternalStorage(
		func(context.Context) (stateless.State, error) { return state, nil },
		func(_ context.Context, s stateless.State) error { state = s; return nil },
		stateless.FiringImmediate)
	k := 0
	guard := func(context.Context, ...any) bool { return k >= 0 }
	entry := func(context.Context, ...any) error { k++; return nil }
	for s := 0; s < n; s++ {
		sm.Configure(s).OnEntry(entry).Permit(s, (s+1)%n, guard)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for t := 0; t < n; t++ {
			if err := sm.FireCtx(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/step")
}
