// Package tools holds the tool registry the engine executes calls through,
// a helper to write tools as plain functions, and the small built-in tools
// the demo uses.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/loopchart/loopchart/vocab"
)

// Registry maps tool names to tools. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]vocab.Tool
}

// NewRegistry returns a registry holding ts.
func NewRegistry(ts ...vocab.Tool) (*Registry, error) {
	r := &Registry{tools: map[string]vocab.Tool{}}
	for _, t := range ts {
		if err := r.Add(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add registers t; a second tool with the same name is an error.
func (r *Registry) Add(t vocab.Tool) error {
	name := t.Spec().Name
	if name == "" {
		return vocab.Errorf(vocab.CodeBadInput, "tool without a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[name]; dup {
		return vocab.Errorf(vocab.CodeBadInput, "tool %q registered twice", name)
	}
	r.tools[name] = t
	return nil
}

// Specs returns the specs of every tool, sorted by name.
func (r *Registry) Specs() []vocab.ToolSpec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	specs := make([]vocab.ToolSpec, 0, len(r.tools))
	for _, t := range r.tools {
		specs = append(specs, t.Spec())
	}
	slices.SortFunc(specs, func(a, b vocab.ToolSpec) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return specs
}

// Execute runs call and always returns one result: an unknown tool, bad
// arguments, an error or a panic become error results with stable codes.
func (r *Registry) Execute(ctx context.Context, call vocab.ToolCall, progress func(string)) (res vocab.ToolResult) {
	r.mu.RLock()
	t, ok := r.tools[call.Name]
	r.mu.RUnlock()
	if !ok {
		return errResult(call, vocab.CodeToolUnknown, fmt.Sprintf("Tool %s not found", call.Name), false)
	}
	if len(call.Args) > 0 && !json.Valid(call.Args) {
		return errResult(call, vocab.CodeToolBadArguments, fmt.Sprintf("Tool %s: arguments are not valid JSON: %s", call.Name, truncate(string(call.Args), 200)), false)
	}
	defer func() {
		if p := recover(); p != nil {
			res = errResult(call, vocab.CodeToolFailed, fmt.Sprintf("Tool %q failed: panic: %v", call.Name, p), true)
			_ = debug.Stack()
		}
	}()
	out, err := t.Run(ctx, call, progress)
	if err != nil {
		code := vocab.CodeToolFailed
		if ctx.Err() != nil {
			code = vocab.CodeToolAborted
		}
		return errResult(call, code, fmt.Sprintf("Tool %q failed: %v", call.Name, err), true)
	}
	out.CallID, out.Name, out.Started = call.ID, call.Name, true
	return out
}

func errResult(call vocab.ToolCall, code vocab.Code, msg string, started bool) vocab.ToolResult {
	return vocab.ToolResult{CallID: call.ID, Name: call.Name, Content: msg, IsError: true, Code: code, Started: started}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Func adapts a typed function to vocab.Tool: the call's arguments are
// decoded into A (unknown fields rejected) and the string returned is the
// result's content.
func Func[A any](name, description string, schema string, fn func(ctx context.Context, args A) (string, error)) vocab.Tool {
	return &funcTool[A]{spec: vocab.ToolSpec{Name: name, Description: description, Schema: json.RawMessage(schema)}, fn: fn}
}

type funcTool[A any] struct {
	spec vocab.ToolSpec
	fn   func(ctx context.Context, args A) (string, error)
}

func (f *funcTool[A]) Spec() vocab.ToolSpec { return f.spec }

func (f *funcTool[A]) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var args A
	if len(call.Args) > 0 {
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return vocab.ToolResult{Content: fmt.Sprintf("bad arguments for %s: %v", f.spec.Name, err), IsError: true, Code: vocab.CodeToolBadArguments}, nil
		}
	}
	s, err := f.fn(ctx, args)
	if err != nil {
		return vocab.ToolResult{}, err
	}
	return vocab.ToolResult{Content: s}, nil
}
