package session_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// BenchmarkScheduleBatch measures the core's cost per tool call of one
// step's batch, model and tools excluded: a turn whose first reply holds
// n calls, each answered as soon as the core starts it, then a text
// reply. "independent" calls touch nothing in common (each reads its own
// file); "half-conflict" calls are reads of one file, every other one a
// write of it. ns/call and allocs/call divide the whole turn by n.
func BenchmarkScheduleBatch(b *testing.B) {
	specs := []vocab.ToolSpec{
		{Name: "read", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessRead}}},
		{Name: "write", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite}}},
	}
	for _, tc := range []struct {
		name     string
		n        int
		conflict bool
	}{{"independent/1", 1, false}, {"independent/8", 8, false}, {"independent/64", 64, false}, {"half-conflict/64", 64, true}} {
		b.Run(tc.name, func(b *testing.B) {
			reply := &vocab.Message{Role: vocab.RoleAssistant}
			for i := range tc.n {
				call := vocab.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "read", Args: json.RawMessage(fmt.Sprintf(`{"path":"f%d"}`, i))}
				if tc.conflict {
					call.Args = json.RawMessage(`{"path":"shared"}`)
					if i%2 == 1 {
						call.Name = "write"
					}
				}
				reply.Parts = append(reply.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &call})
			}
			text := &vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "done"}}}
			res := &vocab.ToolResult{Content: "ok"}
			msg := &vocab.Message{Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "go"}}}
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			m := session.NewMachines()
			var c *session.Core
			fresh := func() {
				var err error
				if c, err = session.New(session.Config{Session: "S", Tools: specs, MaxParallelTools: 64}, m); err != nil {
					b.Fatal(err)
				}
			}
			fresh()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%50 == 0 {
					b.StopTimer()
					fresh()
					b.StartTimer()
				}
				batchTurn(b, c, at, vocab.ID(fmt.Sprintf("p%d", i%50)), msg, reply, text, res)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tc.n), "ns/call")
		})
	}
}

// batchTurn drives one turn: the reply with the batch, every tool work
// answered in the order it was started, then the text reply.
func batchTurn(b *testing.B, c *session.Core, at time.Time, id vocab.ID, msg, reply, text *vocab.Message, res *vocab.ToolResult) {
	var queue []uint64
	models := 0
	in := vocab.Input{Kind: vocab.InSubmit, At: at, ID: id, Message: msg}
	for {
		if err := c.Step(in); err != nil {
			b.Fatal(err)
		}
		rd, _ := c.Ready()
		ended := false
		for _, r := range rd.Results {
			ended = ended || r.Kind == session.PromptEnded
		}
		var model uint64
		for i := range rd.Work {
			w := &rd.Work[i]
			if w.Op != session.Start {
				continue
			}
			switch w.Kind {
			case session.WorkTool:
				queue = append(queue, w.ID)
			case session.WorkModel:
				model = w.ID
			}
		}
		c.Advance(rd)
		switch {
		case ended:
			return
		case model != 0:
			models++
			r := reply
			if models == 2 {
				r = text
			}
			in = vocab.Input{Kind: vocab.InModelDone, At: at, Work: model, Reply: r, Finish: vocab.FinishToolCalls}
		case len(queue) > 0:
			in = vocab.Input{Kind: vocab.InToolDone, At: at, Work: queue[0], Result: res}
			queue = queue[1:]
		default:
			b.Fatal("no work")
		}
	}
}
