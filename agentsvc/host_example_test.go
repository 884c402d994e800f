package agentsvc_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
)

// A Host keeps many sessions over one store and runs their sub-agents:
// here a parent spawns one sub-agent, waits for it with agents_wait and
// answers with what it heard.
func ExampleHost() {
	scripts := map[bool]string{
		true: `{"steps": [
			{"tool_calls": [{"id": "spawn_1", "name": "sessions_spawn", "args": {"task": "count to three"}}]},
			{"tool_calls": [{"id": "wait_1", "name": "agents_wait", "args": {"timeout": "1m"}}]},
			{"parts": [{"text": "The sub-agent counted: 1, 2, 3."}]}]}`,
		false: `{"steps": [{"parts": [{"text": "1, 2, 3"}]}]}`,
	}
	h, err := agentsvc.NewHost(agentsvc.HostOptions{
		Store: memory.New(),
		// The options of each session the host opens; info says whether
		// it is a sub-agent (info.Parent) and what its spawn asked for.
		Session: func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
			s, err := scripted.Parse([]byte(scripts[info.Parent == ""]), string(info.ID))
			if err != nil {
				return agentsvc.Options{}, err
			}
			return agentsvc.Options{Provider: scripted.New(s, clock.Real())}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	defer h.Close(ctx)

	parent, err := h.Open(ctx, "parent")
	if err != nil {
		panic(err)
	}
	p, err := parent.SubmitText("Count to three, with a sub-agent.")
	if err != nil {
		panic(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("parent:", res)

	ids, err := h.Sessions(ctx)
	if err != nil {
		panic(err)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if agentsvc.ParentOf(id) != "parent" {
			continue
		}
		child, err := h.Open(ctx, id)
		if err != nil {
			panic(err)
		}
		hist, err := child.History(ctx)
		if err != nil {
			panic(err)
		}
		last := hist.At(hist.Len() - 1)
		fmt.Printf("sub-agent of %s: %s said %q\n", agentsvc.ParentOf(id), last.Role, last.Text())
	}
	// Output:
	// parent: completed{steps=3}
	// sub-agent of parent: assistant said "1, 2, 3"
}
