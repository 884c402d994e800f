package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/vocab"
)

// A writer claims a session, appends a batch under its claim, and reads
// the events back with their typed payloads.
func Example() {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()

	session := vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	claim, head, err := st.Claim(ctx, session, "01J9Z3NDEKTSV4RRFFQ69G5FB3", true)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("epoch", claim.Epoch, "head", head)

	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	batch := []vocab.Event{
		{Session: session, Seq: head + 1, At: at, Kind: vocab.EventStatus, Payload: vocab.StatusPayload{Status: "running"}},
		{Session: session, Seq: head + 2, At: at.Add(time.Second), Kind: vocab.EventTurnStart, Turn: 1},
		{Session: session, Seq: head + 3, At: at.Add(2 * time.Second), Kind: vocab.EventTurnEnd, Turn: 1,
			Payload: vocab.TurnEndPayload{Reason: vocab.TurnEnd{Kind: vocab.EndCompleted}, Steps: 1}},
	}
	if err := st.Append(ctx, session, claim, batch); err != nil {
		fmt.Println(err)
		return
	}

	for e, err := range store.Events(ctx, st, session, 0) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(e.Seq, e.Kind, e.Turn, e.Payload)
	}
	// Output:
	// epoch 1 head 0
	// 1 agent/status 0 {running}
	// 2 turn/start 1 <nil>
	// 3 turn/end 1 {completed 1}
}
