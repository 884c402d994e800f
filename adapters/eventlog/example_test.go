package eventlog_test

import (
	"context"
	"fmt"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/vocab"
)

// ExampleFeed_Subscribe shows the lane's order (append, then publish) and a
// subscriber that replays from the start through a window of two events:
// what has left the window is read from the durable log.
func ExampleFeed_Subscribe() {
	ctx := context.Background()
	log := eventlog.NewMemory()
	feed, err := eventlog.NewFeed(2, log)
	if err != nil {
		panic(err)
	}

	batch := []vocab.Event{
		{Seq: 1, Kind: vocab.EventTurnStart},
		{Seq: 2, Kind: vocab.EventStepStart},
		{Seq: 3, Kind: vocab.EventStepEnd},
		{Seq: 4, Kind: vocab.EventTurnEnd},
	}
	if err := log.Append(ctx, batch); err != nil { // durable first
		panic(err)
	}
	feed.Publish(batch) // then live
	feed.Close()        // the stream ends once everything is delivered

	for ev, err := range feed.Subscribe(ctx, 1) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(ev.Seq, ev.Kind)
	}
	// Output:
	// 1 turn/start
	// 2 step/start
	// 3 step/end
	// 4 turn/end
}
