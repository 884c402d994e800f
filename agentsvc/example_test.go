package agentsvc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// newExample starts a service on a scripted provider and a virtual clock.
func newExample(script string) (*agentsvc.Service, *clock.Fake) {
	return newExampleSink(script, nil)
}

// newExampleWith is newExample with an event sink.
func newExampleWith(script string, sink agentsvc.Sink) *agentsvc.Service {
	svc, _ := newExampleSink(script, sink)
	return svc
}

func newExampleSink(script string, sink agentsvc.Sink) (*agentsvc.Service, *clock.Fake) {
	s, err := scripted.Parse([]byte(script), "example")
	if err != nil {
		panic(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	svc, err := agentsvc.New(agentsvc.Options{Provider: scripted.New(s, clk), Clock: clk, IDs: &vocab.SeqSource{}, Sink: sink})
	if err != nil {
		panic(err)
	}
	return svc, clk
}

// Submit a prompt and wait for how it ended.
func ExampleService_Submit() {
	svc, _ := newExample(`{"steps": [{"parts": [{"text": "Hello!"}]}]}`)
	defer svc.Close(context.Background())

	p, err := svc.SubmitText("hi")
	if err != nil {
		panic(err)
	}
	res, err := p.Wait(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println(res)
	// Output: completed{steps=1}
}

// Run a prompt to its end on the calling goroutine: Submit then Wait in
// one call, the caller running the prompt's model requests, tool calls
// and hooks itself.
func ExampleService_Run() {
	svc, _ := newExample(`{"steps": [{"parts": [{"text": "Hello!"}]}]}`)
	defer svc.Close(context.Background())

	res, err := svc.RunText(context.Background(), "hi")
	if err != nil {
		panic(err)
	}
	fmt.Println(res)
	h, _ := svc.History(context.Background())
	fmt.Println(h.Messages()[h.Len()-1].Text())
	// Output:
	// completed{steps=1}
	// Hello!
}

// Events streams every transition and domain event of the session, from
// the first (from = 0), then live ones.
func ExampleService_Events() {
	svc, _ := newExample(`{"steps": [{"parts": [{"text": "Hello!"}]}]}`)
	defer svc.Close(context.Background())

	p, _ := svc.SubmitText("hi")
	p.Wait(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			panic(err) // the reader fell behind, or ctx ended
		}
		switch p := ev.Payload.(type) {
		case vocab.TransitionPayload:
			if p.Machine == "turn" {
				fmt.Printf("turn %d: %s -> %s (%s)\n", ev.Turn, p.From, p.To, p.Trigger)
			}
		case vocab.TurnEndPayload:
			fmt.Printf("turn %d ended %s\n", ev.Turn, p.Reason)
		}
		if ev.Kind == vocab.EventAgentEnd {
			break
		}
	}
	// Output:
	// turn 1: gating -> thinking (gate.proceed)
	// turn 1: thinking -> draining (model.done)
	// turn 1: draining -> done (drained)
	// turn 1 ended completed
}

// Cancel aborts the running turn; the prompt ends cancelled with the cause.
func ExampleService_Cancel() {
	svc, clk := newExample(`{"steps": [{"delay": "10s", "parts": [{"text": "too late"}]}]}`)
	defer svc.Close(context.Background())

	p, _ := svc.SubmitText("take your time")
	// The model is streaming (waiting on the virtual clock); cancel it.
	clk.WaitForPending(context.Background(), 1)
	svc.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{})

	res, _ := p.Wait(context.Background())
	fmt.Println(res)
	// Output: cancelled{steps=1 reason=user}
}
