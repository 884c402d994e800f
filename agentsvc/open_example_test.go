package agentsvc_test

import (
	"context"
	"fmt"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
)

// Open a session in a store, run a prompt, and open it again later: the
// second service folds the session back from its log and goes on with
// its history. (A real application passes the SQLite store:
// sqlite.Open(ctx, "agent.db", sqlite.Options{}).)
func ExampleOpen() {
	ctx := context.Background()
	st := memory.New()
	script, err := scripted.Parse([]byte(`{"steps": [{"parts": [{"text": "Hello!"}]}, {"parts": [{"text": "Still here."}]}]}`), "example")
	if err != nil {
		panic(err)
	}
	provider := scripted.New(script, nil)

	svc, err := agentsvc.Open(ctx, st, "session-1", agentsvc.Options{Provider: provider})
	if err != nil {
		panic(err)
	}
	p, _ := svc.SubmitText("hi")
	res, _ := p.Wait(ctx)
	fmt.Println("first run:", res)

	// The process stops without closing the session; another opens it.
	again, err := agentsvc.Open(ctx, st, "session-1", agentsvc.Options{Provider: provider})
	if err != nil {
		panic(err)
	}
	defer again.Close(ctx)
	h, _ := again.History(ctx)
	fmt.Println("history after the reopen:", h.Len(), "messages")
	p, _ = again.SubmitText("still there?")
	res, _ = p.Wait(ctx)
	h, _ = again.History(ctx)
	fmt.Println("second run:", res, "-", h.At(h.Len()-1).Text())
	// Output:
	// first run: completed{steps=1}
	// history after the reopen: 2 messages
	// second run: completed{steps=1} - Still here.
}
