// Package tools holds the tool registry the engine executes calls through,
// helpers to write tools as typed Go functions (Typed, TypedText, Func),
// what a running tool reaches through its context (Progress, Detach), the
// retention of streamed output (Output), the spill store for outputs too
// large for the history (Blobs, read_output) and the small built-in tools
// the demo uses.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// SpillChars is the default spill limit: a result whose content has more
// characters (runes) than this is cut, and spilled to the registry's blob
// store when it has one.
const SpillChars = 50_000

// Outcomer is implemented by tools that reduce a result to the facts loop
// detection compares (a poll's status, say): Execute sets the result's
// Facts to what Facts returns. A panic in Facts is recovered and leaves
// Facts empty.
type Outcomer interface {
	Facts(call vocab.ToolCall, res vocab.ToolResult) string
}

// Registry maps tool names to tools and executes calls. It is safe for
// concurrent use.
type Registry struct {
	mu sync.Mutex // serializes changes
	// cur is what Execute and Specs read, without a lock: a change
	// publishes a new registryState, never alters a published one.
	cur atomic.Pointer[registryState]
}

// registryState is one version of a registry's tools and spill store.
type registryState struct {
	tools map[string]vocab.Tool
	blobs Blobs // nil: large outputs are cut, the rest dropped
	limit int   // spill limit in characters, > 0
}

// NewRegistry returns a registry holding ts. It has no spill store: a
// result over SpillChars characters is cut and the rest dropped until
// SetSpill gives it one.
func NewRegistry(ts ...vocab.Tool) (*Registry, error) {
	r := &Registry{}
	r.cur.Store(&registryState{tools: map[string]vocab.Tool{}, limit: SpillChars})
	for _, t := range ts {
		if err := r.Add(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add registers t; a nil tool, a tool without a name and a second tool
// with the same name are errors.
func (r *Registry) Add(t vocab.Tool) error {
	if t == nil {
		return vocab.Errorf(vocab.CodeBadInput, "nil tool")
	}
	name := t.Spec().Name
	if name == "" {
		return vocab.Errorf(vocab.CodeBadInput, "tool without a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	if _, dup := cur.tools[name]; dup {
		return vocab.Errorf(vocab.CodeBadInput, "tool %q registered twice", name)
	}
	next := *cur
	next.tools = maps.Clone(cur.tools)
	next.tools[name] = t
	r.cur.Store(&next)
	return nil
}

// SetSpill sets where results too large for the history go: a result
// whose content has more than limit characters keeps its first limit
// characters and a line giving the ref under which b holds the whole
// content (register ReadOutput(b) too, so the model can page through it).
// A nil b keeps no store: the rest is dropped and the result marked
// Truncated. limit 0 means SpillChars; a negative limit is an error.
func (r *Registry) SetSpill(b Blobs, limit int) error {
	if limit < 0 {
		return vocab.Errorf(vocab.CodeBadInput, "negative spill limit %d", limit)
	}
	if limit == 0 {
		limit = SpillChars
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := *r.cur.Load()
	next.blobs, next.limit = b, limit
	r.cur.Store(&next)
	return nil
}

// Specs returns the specs of every tool, sorted by name.
func (r *Registry) Specs() []vocab.ToolSpec {
	cur := r.cur.Load()
	specs := make([]vocab.ToolSpec, 0, len(cur.tools))
	for _, t := range cur.tools {
		specs = append(specs, t.Spec())
	}
	slices.SortFunc(specs, func(a, b vocab.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	return specs
}

// Execute runs call and always returns one result, stamped with the call's
// id and name:
//
//   - an unknown tool gives vocab.CodeToolUnknown, arguments that are not
//     JSON vocab.CodeToolBadArguments (neither started);
//   - a result with code vocab.CodeToolBadArguments (a typed tool refusing
//     its arguments) is reported not started; every other result started;
//   - an error gives vocab.CodeToolFailed, or vocab.CodeToolAborted when
//     ctx was cancelled by then; a panic gives vocab.CodeToolFailed;
//   - an empty result (no content, parts, note or delivery) gives
//     vocab.CodeToolNoResult; an error result without a code gets
//     vocab.CodeToolFailed;
//   - a tool implementing Outcomer sets the result's Facts;
//   - content over the spill limit is cut and spilled (see SetSpill).
//
// progress is passed to the tool and put in its ctx (Progress); when it is
// nil the progress func ctx carries (WithRun) is used. Detaching is
// offered to the tool only when ctx offers it (WithRun).
func (r *Registry) Execute(ctx context.Context, call vocab.ToolCall, progress func(string)) vocab.ToolResult {
	cur := r.cur.Load()
	t, ok := cur.tools[call.Name]
	blobs, limit := cur.blobs, cur.limit
	if !ok {
		return errResult(call, vocab.CodeToolUnknown, fmt.Sprintf("Tool %s not found", call.Name), false)
	}
	if len(call.Args) > 0 && !plainObject(call.Args) && !json.Valid(call.Args) { // plainObject: the quick proof
		var v json.RawMessage
		problem := describeJSONError(json.Unmarshal(call.Args, &v))
		res := BadArguments(call.Name, fmt.Sprintf("%s: %s", problem, truncate(string(call.Args), 200)))
		res.CallID = call.ID
		return res
	}
	ctx = withProgress(ctx, progress)
	if _, ro := t.(spillExempt); ro {
		ctx = context.WithValue(ctx, spillLimitKey{}, limit) // read_output pages within it
	}
	if progress == nil {
		progress = progressFrom(ctx)
	}
	res := run(ctx, t, call, progress)
	if o, ok := t.(Outcomer); ok {
		res.Facts = facts(o, call, res)
	}
	if _, exempt := t.(spillExempt); !exempt {
		res = spill(ctx, blobs, limit, res)
	}
	return res
}

// run runs t and turns what it returns, or its panic, into one result.
func run(ctx context.Context, t vocab.Tool, call vocab.ToolCall, progress func(string)) (res vocab.ToolResult) {
	defer func() {
		if p := recover(); p != nil {
			res = errResult(call, vocab.CodeToolFailed, fmt.Sprintf("Tool %q failed: panic: %v", call.Name, p), true)
		}
	}()
	out, err := t.Run(ctx, call, progress)
	if err != nil {
		if ctx.Err() != nil {
			return errResult(call, vocab.CodeToolAborted, fmt.Sprintf("Tool %q was aborted: %v", call.Name, err), true)
		}
		return errResult(call, vocab.CodeToolFailed, fmt.Sprintf("Tool %q failed: %v", call.Name, err), true)
	}
	out.CallID, out.Name = call.ID, call.Name
	out.Started = out.Code != vocab.CodeToolBadArguments
	switch {
	case empty(out):
		return errResult(call, vocab.CodeToolNoResult, fmt.Sprintf("Tool %q returned no result", call.Name), true)
	case out.IsError && out.Code == "":
		out.Code = vocab.CodeToolFailed
	}
	if out.IsError && out.Content == "" && len(out.Parts) == 0 {
		out.Content = fmt.Sprintf("Tool %q failed (%s)", call.Name, out.Code)
	}
	return out
}

// empty reports whether a tool's result carries nothing at all.
func empty(r vocab.ToolResult) bool {
	return r.Content == "" && len(r.Parts) == 0 && r.Note == "" && r.Delivery == nil &&
		!r.IsError && r.Code == "" && !r.StopTurn && r.Spill == nil
}

// facts calls o's Facts, recovering a panic as no facts.
func facts(o Outcomer, call vocab.ToolCall, res vocab.ToolResult) (f string) {
	defer func() {
		if recover() != nil {
			f = ""
		}
	}()
	return o.Facts(call, res)
}

// spillLimitKey is the context key of the spill limit of the registry
// running a call: read_output keeps its pages within it.
type spillLimitKey struct{}

// spillLimitFrom returns the spill limit ctx carries, 0 when none.
func spillLimitFrom(ctx context.Context) int {
	l, _ := ctx.Value(spillLimitKey{}).(int)
	return l
}

// spillExempt is implemented by tools whose results are never spilled:
// read_output, whose pages come from the spill store already.
type spillExempt interface{ spillExempt() }

// spill cuts res's content to limit characters when it is longer: the
// whole content goes to blobs (when set) and the head tells the model how
// to read the rest. The blobs are written under ctx without its
// cancellation (a call cut off still has its output kept).
func spill(ctx context.Context, blobs Blobs, limit int, res vocab.ToolResult) vocab.ToolResult {
	cut, over := runeOffset(res.Content, limit)
	if !over {
		return res
	}
	head := res.Content[:cut]
	if blobs == nil {
		total := limit + utf8.RuneCountInString(res.Content[cut:])
		res.Content = head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters; the rest was dropped.]", limit, total)
		res.Truncated = true
		return res
	}
	sp, err := blobs.Put(context.WithoutCancel(ctx), []byte(res.Content))
	if err != nil {
		total := limit + utf8.RuneCountInString(res.Content[cut:])
		res.Content = head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters; the rest could not be stored (%v) and was dropped.]", limit, total, err)
		res.Truncated, res.IsError, res.Code = true, true, vocab.CodeSpill
		return res
	}
	res.Content = head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters. The full output is stored as %s; "+
		"%s(ref, offset, limit) pages through it by characters: call %s with {\"ref\": %q, \"offset\": %d} to read on.]",
		limit, sp.Chars, sp.Ref, ReadOutputName, ReadOutputName, sp.Ref, limit)
	res.Spill = &sp
	return res
}

// runeOffset returns the byte offset of the n-th rune of s, and whether s
// has more than n runes.
func runeOffset(s string, n int) (int, bool) {
	if len(s) <= n {
		return len(s), false // n bytes hold at most n runes
	}
	i := 0
	for range n {
		if i >= len(s) {
			return len(s), false
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i, i < len(s)
}

func errResult(call vocab.ToolCall, code vocab.Code, msg string, started bool) vocab.ToolResult {
	return vocab.ToolResult{CallID: call.ID, Name: call.Name, Content: msg, IsError: true, Code: code, Started: started}
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
