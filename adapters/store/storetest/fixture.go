package storetest

import (
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// golden holds copies of vocab's golden event files (vocab/testdata/events)
// for the kinds Fixture uses; TestGoldenCopies keeps them identical.
//
//go:embed testdata/events/*.json
var golden embed.FS

// templates maps each kind of golden to its event, decoded and encoded
// again: the canonical JSON, which decodes to the same event however often
// it is encoded and decoded (the files are indented, and indentation
// survives in raw JSON such as tool arguments until re-encoded).
var templates = sync.OnceValue(func() map[vocab.EventKind][]byte {
	files, err := golden.ReadDir("testdata/events")
	if err != nil {
		panic(err)
	}
	m := make(map[vocab.EventKind][]byte, len(files))
	for _, f := range files {
		b, err := golden.ReadFile("testdata/events/" + f.Name())
		if err != nil {
			panic(err)
		}
		var e vocab.Event
		if err := json.Unmarshal(b, &e); err != nil {
			panic(fmt.Sprintf("storetest: golden %s: %v", f.Name(), err))
		}
		if want := strings.ReplaceAll(string(e.Kind), "/", "_") + ".json"; want != f.Name() {
			panic(fmt.Sprintf("storetest: golden %s holds a %s event", f.Name(), e.Kind))
		}
		if m[e.Kind], err = json.Marshal(e); err != nil {
			panic(fmt.Sprintf("storetest: golden %s: %v", f.Name(), err))
		}
	}
	return m
})

// goldenEvent returns a fresh copy of the golden event of kind (sharing no
// memory with any other), numbered seq in session and happening at at.
func goldenEvent(kind vocab.EventKind, session vocab.ID, seq uint64, at time.Time) vocab.Event {
	b, ok := templates()[kind]
	if !ok {
		panic(fmt.Sprintf("storetest: no golden %s event", kind))
	}
	var e vocab.Event
	if err := json.Unmarshal(b, &e); err != nil {
		panic(fmt.Sprintf("storetest: golden %s: %v", kind, err))
	}
	e.Session, e.Seq, e.At = session, seq, at
	return e
}

// turnCycle is the shape of one turn of Fixture: what a session logs for
// a prompt answered in one step that calls one tool.
var turnCycle = []struct {
	kind vocab.EventKind
	// turn, step say whether the event belongs to the turn, the step.
	turn, step bool
	// status overrides an agent/status payload's status.
	status string
}{
	{kind: vocab.EventKind(vocab.InputEventPrefix + vocab.InSubmit)},
	{kind: vocab.EventStatus, status: "running"},
	{kind: vocab.EventTurnStart, turn: true},
	{kind: vocab.EventStepStart, turn: true, step: true},
	{kind: vocab.EventTransition, turn: true, step: true},
	{kind: vocab.EventUsage, turn: true, step: true},
	{kind: vocab.EventAssistant, turn: true, step: true},
	{kind: vocab.EventToolCall, turn: true, step: true},
	{kind: vocab.EventToolResult, turn: true, step: true},
	{kind: vocab.EventStepEnd, turn: true, step: true},
	{kind: vocab.EventTurnEnd, turn: true, step: true},
	{kind: vocab.EventStatus, status: "idle"},
}

// FixtureStep is the time between two consecutive events of Fixture: a
// millisecond and a nanosecond, so that a store that loses precision
// shows it.
const FixtureStep = time.Millisecond + time.Nanosecond

// Fixture returns n events of session numbered 1 to n, with realistic
// payloads decoded from vocab's golden files: turn after turn of input/
// submit, agent/status running, turn/start, step/start, machine/
// transition, usage, assistant/message, tool/call, tool/result, step/end,
// turn/end and agent/status idle (twelve events a turn; turns count from
// 1, each has one step). Event seq happens at at + (seq-1)·FixtureStep, in
// at's location. Every call returns new events sharing no memory with
// others, already in canonical form: encoding one and decoding it again
// gives an event equal to it. The events have the shape of a session's
// log but are not meant to be folded (ids repeat across turns).
func Fixture(session vocab.ID, n int, at time.Time) []vocab.Event {
	events := make([]vocab.Event, n)
	for i := range events {
		c := turnCycle[i%len(turnCycle)]
		seq := uint64(i + 1)
		e := goldenEvent(c.kind, session, seq, at.Add(time.Duration(i)*FixtureStep))
		e.Turn, e.Step = 0, 0
		if c.turn {
			e.Turn = i/len(turnCycle) + 1
		}
		if c.step {
			e.Step = 1
		}
		switch p := e.Payload.(type) {
		case vocab.StatusPayload:
			p.Status = c.status
			e.Payload = p
		case vocab.TurnEndPayload:
			p.Steps = 1
			e.Payload = p
		}
		events[i] = e
	}
	return events
}
