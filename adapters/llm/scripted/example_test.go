package scripted_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/vocab"
)

func Example() {
	s, err := scripted.Parse([]byte(`{
		"name": "example",
		"steps": [
			{"error": {"status": 503, "message": "overloaded", "retry_after": "2s"}},
			{"parts": [{"thinking": "Greet them."}, {"text": "Hello"}, {"text": " world"}],
			 "tool_calls": [{"id": "c1", "name": "read_file", "args": {"path": "a.txt"}}],
			 "usage": {"input": 12, "output": 5}}
		]}`), "example.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	p := scripted.New(s, clock.Real()) // no delays in this script
	ctx := context.Background()
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("hi")}}

	for attempt := 1; ; attempt++ {
		req.Attempt = attempt
		var failed *vocab.Error
		for part, err := range p.Stream(ctx, req) {
			switch {
			case errors.As(err, &failed):
				fmt.Printf("error: %v (retryable %v, after %v)\n", err, failed.Retryable, failed.RetryAfter)
			case part.Kind == vocab.StreamToolCall:
				fmt.Printf("%s: %s %s\n", part.Kind, part.Call.Name, part.Call.Args)
			case part.Kind == vocab.StreamUsage:
				fmt.Printf("%s: %d in, %d out\n", part.Kind, part.Usage.InputTokens, part.Usage.OutputTokens)
			case part.Kind == vocab.StreamFinish:
				fmt.Printf("%s: %s\n", part.Kind, part.Finish)
			default:
				fmt.Printf("%s: %q\n", part.Kind, part.Text)
			}
		}
		if failed == nil || !failed.Retryable {
			break
		}
	}
	for _, err := range p.Stream(ctx, req) {
		fmt.Println(err)
	}
	// Output:
	// error: llm.server: overloaded (retryable true, after 2s)
	// thinking: "Greet them."
	// text: "Hello"
	// text: " world"
	// tool-call: read_file {"path":"a.txt"}
	// usage: 12 in, 5 out
	// finish: tool-calls
	// input.bad: script example: no step 3 left
}
