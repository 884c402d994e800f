package session_test

import (
	"fmt"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// The loop an adapter writes around the core: step inputs, then carry out
// Ready in order — events durable first, then work, then results — and
// Advance. Here the "model" answers every request at once with text.
func Example() {
	core, err := session.New(session.Config{Session: "demo"}, session.NewMachines())
	if err != nil {
		panic(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prompt := vocab.UserText("hi")
	inputs := []vocab.Input{{Kind: vocab.InSubmit, At: at, ID: "p1", Message: &prompt}}
	for len(inputs) > 0 {
		in := inputs[0]
		inputs = inputs[1:]
		if err := core.Step(in); err != nil {
			fmt.Println("rejected:", err)
			continue
		}
		rd, ok := core.Ready()
		if !ok {
			continue
		}
		for _, ev := range rd.Events { // 1. append to the durable log
			if ev.Kind == vocab.EventTurnEnd {
				fmt.Println(ev.Seq, ev.Kind, ev.Payload.(vocab.TurnEndPayload).Reason)
			}
		}
		for _, w := range rd.Work { // 2. start the work
			if w.Op == session.Start && w.Kind == session.WorkModel {
				reply := vocab.Message{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "hello"}}}
				inputs = append(inputs, vocab.Input{Kind: vocab.InModelDone, At: at.Add(time.Second), Work: w.ID, Reply: &reply})
			}
		}
		for _, r := range rd.Results { // 3. answer the callers
			fmt.Println(r.Kind, r.Input, r.Prompt)
		}
		core.Advance(rd)
	}
	// A re-used id is refused, and nothing is logged.
	err = core.Step(vocab.Input{Kind: vocab.InSubmit, At: at, ID: "p1", Message: &prompt})
	fmt.Println(vocab.CodeOf(err))
	// Output:
	// accepted p1 <nil>
	// 21 turn/end completed
	// prompt p1 completed{steps=1}
	// input.duplicate_id
}
