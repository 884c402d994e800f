package tools

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// rawTool is a vocab.Tool made of functions, for tests.
type rawTool struct {
	name string
	run  func(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error)
}

func (r rawTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: r.name} }
func (r rawTool) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	return r.run(ctx, call, progress)
}

// factTool is a rawTool that also reports facts.
type factTool struct {
	rawTool
	facts func(call vocab.ToolCall, res vocab.ToolResult) string
}

func (f factTool) Facts(call vocab.ToolCall, res vocab.ToolResult) string { return f.facts(call, res) }

func returns(res vocab.ToolResult, err error) func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
	return func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) { return res, err }
}

func TestExecuteOutcomes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		tool vocab.Tool
		ctx  context.Context
		want vocab.ToolResult
	}{
		{"zero result is no result", rawTool{"t", returns(vocab.ToolResult{}, nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" returned no result`, IsError: true, Code: vocab.CodeToolNoResult, Started: true}},
		{"parts only is a result", rawTool{"t", returns(vocab.ToolResult{Parts: []vocab.Part{{Kind: vocab.PartText, Text: "x"}}}, nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Parts: []vocab.Part{{Kind: vocab.PartText, Text: "x"}}, Started: true}},
		{"error result gets a code", rawTool{"t", returns(vocab.ToolResult{Content: "nope", IsError: true}, nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: "nope", IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"bare error result gets a text", rawTool{"t", returns(vocab.ToolResult{IsError: true}, nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" failed (tool.failed)`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"stamped with the call", rawTool{"t", returns(vocab.ToolResult{CallID: "other", Name: "other", Content: "ok"}, nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: "ok", Started: true}},
		{"bad arguments are not started", rawTool{"t", returns(BadArguments("t", "no"), nil)}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" was not run: invalid arguments: no`, IsError: true, Code: vocab.CodeToolBadArguments}},
		{"error", rawTool{"t", returns(vocab.ToolResult{Content: "ignored"}, errors.New("boom"))}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" failed: boom`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"error after cancel is aborted", rawTool{"t", returns(vocab.ToolResult{}, context.Canceled)}, cancelled,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" was aborted: context canceled`, IsError: true, Code: vocab.CodeToolAborted, Started: true}},
		{"result after cancel is kept", rawTool{"t", returns(vocab.ToolResult{Content: "done anyway"}, nil)}, cancelled,
			vocab.ToolResult{CallID: "c", Name: "t", Content: "done anyway", Started: true}},
		{"panic with an error", rawTool{"t", func(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
			panic(errors.New("bad state"))
		}}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" failed: panic: bad state`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"facts", factTool{rawTool{"t", returns(vocab.ToolResult{Content: "status: running (42%)"}, nil)},
			func(call vocab.ToolCall, res vocab.ToolResult) string { return call.ID + "/" + res.Content[:15] }}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: "status: running (42%)", Started: true, Facts: "c/status: running"}},
		{"facts see error results", factTool{rawTool{"t", returns(vocab.ToolResult{}, errors.New("x"))},
			func(_ vocab.ToolCall, res vocab.ToolResult) string { return string(res.Code) }}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: `Tool "t" failed: x`, IsError: true, Code: vocab.CodeToolFailed, Started: true, Facts: "tool.failed"}},
		{"facts panic is ignored", factTool{rawTool{"t", returns(vocab.ToolResult{Content: "ok", Facts: "own"}, nil)},
			func(vocab.ToolCall, vocab.ToolResult) string { panic("facts bug") }}, nil,
			vocab.ToolResult{CallID: "c", Name: "t", Content: "ok", Started: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRegistry(c.tool)
			if err != nil {
				t.Fatal(err)
			}
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got := r.Execute(ctx, vocab.ToolCall{ID: "c", Name: "t"}, nil)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddRefuses(t *testing.T) {
	cases := []struct {
		name string
		tool vocab.Tool
	}{
		{"nil", nil},
		{"no name", rawTool{"", returns(vocab.ToolResult{}, nil)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := NewRegistry()
			if err := r.Add(c.tool); !errors.Is(err, vocab.CodeBadInput.Err()) {
				t.Errorf("Add: got %v, want %s", err, vocab.CodeBadInput)
			}
		})
	}
}

// TestExecuteRun checks what a tool reaches through ctx under Execute:
// Execute's progress func, and detaching only when the caller's ctx
// offers it.
func TestExecuteRun(t *testing.T) {
	type seen struct {
		ViaCtx, ViaArg []string
		Detached       []bool
	}
	cases := []struct {
		name      string
		offer     bool // caller's ctx offers detaching
		execProg  bool // Execute gets a progress func
		want      seen
		wantAcks  []string
		wantOuter []string // progress reaching the caller's ctx func
	}{
		{"progress, no detach", false, true, seen{ViaCtx: []string{"p1"}, ViaArg: []string{"p2"}, Detached: []bool{false, false}}, nil, nil},
		{"progress and detach once", true, true, seen{ViaCtx: []string{"p1"}, ViaArg: []string{"p2"}, Detached: []bool{true, false}}, []string{"ack"}, nil},
		{"caller's progress when Execute has none", true, false, seen{Detached: []bool{true, false}}, []string{"ack"}, []string{"p1", "p2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var got seen
			var acks, outer []string
			tool := rawTool{"t", func(ctx context.Context, _ vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
				Progress(ctx, "p1")
				if progress != nil {
					progress("p2")
				}
				d1 := Detach(ctx, "ack")
				d2 := Detach(ctx, "again")
				mu.Lock()
				got.Detached = []bool{d1, d2}
				mu.Unlock()
				return vocab.ToolResult{Content: "ok"}, nil
			}}
			r, _ := NewRegistry(tool)
			ctx := context.Background()
			if c.offer {
				ctx = WithRun(ctx, func(s string) { outer = append(outer, s) }, func(ack string) bool { acks = append(acks, ack); return true })
			}
			var prog func(string)
			if c.execProg {
				prog = func(s string) {
					mu.Lock()
					defer mu.Unlock()
					if s == "p1" {
						got.ViaCtx = append(got.ViaCtx, s)
					} else {
						got.ViaArg = append(got.ViaArg, s)
					}
				}
			}
			if res := r.Execute(ctx, vocab.ToolCall{ID: "c", Name: "t"}, prog); res.IsError {
				t.Fatalf("result %+v", res)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("seen (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantAcks, acks); diff != "" {
				t.Errorf("acks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantOuter, outer); diff != "" {
				t.Errorf("caller's progress (-want +got):\n%s", diff)
			}
		})
	}
}
