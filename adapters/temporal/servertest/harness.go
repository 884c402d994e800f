package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// Provider answers from the request alone, so a request repeated on
// another worker gets the same answer. The last user message decides:
// "fail" fails with llm.auth; "slow" streams some text and waits for
// its context; "flaky" fails the first attempt of a step
// with a retryable 503 (Retry-After 1 s); each "tool" asks for one echo
// call and each "block" for one block call, in one step; each "chain"
// asks for one echo call per step, one step after the other (with
// "flaky", every step's first attempt fails). Once tools answered, it
// replies "done:" and their results.
type Provider struct {
	// Calls counts the requests this provider received.
	Calls atomic.Int64
	// Streaming, when set, is sent a value once a "slow" request streamed
	// its first text; the request then waits for its context to end, and
	// Cancelled is sent the time it did.
	Streaming chan struct{}
	Cancelled chan time.Time
}

// Stream implements vocab.Provider.
func (p *Provider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	p.Calls.Add(1)
	return func(yield func(vocab.StreamPart, error) bool) {
		last := req.Messages[len(req.Messages)-1]
		text := last.Text()
		if last.Role == vocab.RoleUser {
			switch {
			case strings.Contains(text, "fail"):
				yield(vocab.StreamPart{}, vocab.Errorf(vocab.CodeAuth, "bad key"))
				return
			case strings.Contains(text, "slow"):
				if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "partial answer"}, nil) {
					return
				}
				if p.Streaming != nil {
					p.Streaming <- struct{}{}
				}
				<-ctx.Done()
				if p.Cancelled != nil {
					p.Cancelled <- time.Now()
				}
				yield(vocab.StreamPart{}, context.Cause(ctx))
				return
			case strings.Contains(text, "flaky") && req.Attempt <= 1:
				yield(vocab.StreamPart{}, vocab.StatusError(503, time.Second, "overloaded"))
				return
			}
			var calls []vocab.ToolCall
			if strings.Contains(text, "chain") {
				// One echo call per step, as many steps as "chain"s.
				args, _ := json.Marshal(map[string]string{"text": text})
				calls = append(calls, vocab.ToolCall{ID: "call_chain_0", Name: "echo", Args: args})
			}
			for _, w := range strings.Fields(text) {
				if w == "tool" || w == "block" {
					name := map[string]string{"tool": "echo", "block": "block"}[w]
					args, _ := json.Marshal(map[string]string{"text": text})
					calls = append(calls, vocab.ToolCall{ID: "call_" + string(rune('a'+len(calls))), Name: name, Args: args})
				}
			}
			if len(calls) > 0 {
				for i := range calls {
					if !yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &calls[i]}, nil) {
						return
					}
				}
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
				return
			}
		}
		if u := req.Messages[lastUser(req.Messages)]; last.Role == vocab.RoleTool && strings.Contains(u.Text(), "chain") {
			done := len(req.Messages) - 1 - lastUser(req.Messages)
			done /= 2 // an assistant message and a tool result per round
			if strings.Contains(u.Text(), "flaky") && req.Attempt <= 1 {
				yield(vocab.StreamPart{}, vocab.StatusError(503, time.Second, "overloaded"))
				return
			}
			if done < strings.Count(u.Text(), "chain") {
				args, _ := json.Marshal(map[string]string{"text": u.Text()})
				c := vocab.ToolCall{ID: fmt.Sprintf("call_chain_%d", done), Name: "echo", Args: args}
				if yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &c}, nil) {
					yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
				}
				return
			}
		}
		var b strings.Builder
		b.WriteString("done:")
		for _, m := range req.Messages[lastUser(req.Messages):] {
			if m.Role == vocab.RoleTool {
				b.WriteString(" " + m.Text())
			}
		}
		if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: b.String()}, nil) {
			return
		}
		yield(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 10, OutputTokens: 3}}, nil)
		yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
	}
}

func lastUser(msgs []vocab.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == vocab.RoleUser {
			return i
		}
	}
	return 0
}

// Echo is a tool that answers echo(TEXT).
type Echo struct{}

// Spec implements vocab.Tool.
func (Echo) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "echo", NoAccess: true, Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
}

// Run implements vocab.Tool.
func (Echo) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct{ Text string }
	_ = json.Unmarshal(call.Args, &a)
	return vocab.ToolResult{Content: "echo(" + a.Text + ")"}, nil
}

// Block is a tool that blocks until its context ends. Started is sent the
// call's id when it starts and Cancelled the time its context ended; Dir,
// when set, gets a file started-ID (for a worker in another process).
type Block struct {
	// Release makes the tool answer "released" at once.
	Release   bool
	Started   chan string
	Cancelled chan time.Time
	Dir       string
}

// Spec implements vocab.Tool.
func (Block) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "block", NoAccess: true, Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
}

// Run implements vocab.Tool.
func (b Block) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	if b.Release {
		return vocab.ToolResult{Content: "released"}, nil
	}
	if b.Dir != "" {
		_ = os.WriteFile(filepath.Join(b.Dir, "started-"+call.ID), nil, 0o600)
	}
	if b.Started != nil {
		b.Started <- call.ID
	}
	<-ctx.Done()
	if b.Cancelled != nil {
		b.Cancelled <- time.Now()
	}
	return vocab.ToolResult{}, context.Cause(ctx)
}

// Activities returns the activities of a test worker.
func Activities(p *Provider, content lt.ContentStore, block Block) (*lt.Activities, error) {
	reg, err := tools.NewRegistry(Echo{}, block)
	if err != nil {
		return nil, err
	}
	return &lt.Activities{Provider: p, Tools: reg, Content: content}, nil
}

// Specs are the tool specs of the test sessions.
func Specs() []vocab.ToolSpec { return []vocab.ToolSpec{Echo{}.Spec(), Block{}.Spec()} }
