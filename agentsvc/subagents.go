package agentsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Names of the sub-agent tools a Host gives the agents that may spawn.
const (
	ToolSpawn     = "sessions_spawn"
	ToolWait      = "agents_wait"
	ToolSubagents = "subagents"
	ToolYield     = "sessions_yield"
)

// maxWait bounds one agents_wait.
const maxWait = time.Hour

func refused(call vocab.ToolCall, format string, args ...any) vocab.ToolResult {
	return vocab.ToolResult{CallID: call.ID, Name: call.Name, IsError: true, Code: vocab.CodeToolRefused, Content: fmt.Sprintf(format, args...)}
}

func decodeArgs(call vocab.ToolCall, v any) *vocab.ToolResult {
	d := json.NewDecoder(strings.NewReader(string(call.Args)))
	d.DisallowUnknownFields()
	if len(call.Args) == 0 {
		return nil
	}
	if err := d.Decode(v); err != nil {
		r := vocab.ToolResult{CallID: call.ID, Name: call.Name, IsError: true, Code: vocab.CodeToolBadArguments, Content: "bad arguments: " + err.Error()}
		return &r
	}
	return nil
}

// spawnTool is sessions_spawn.
type spawnTool struct {
	h *Host
	e *hosted
}

// Spec declares no access: a spawn runs alone, so the spawns of one
// reply start (or queue for a running slot) in the order the model wrote
// them, whatever the timing.
func (spawnTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: ToolSpawn,
		Description: "Start a sub-agent on a task. Returns its id at once; its answer arrives later as a [subagent completed] notification, or wait for it with agents_wait.",
		Schema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","description":"what the sub-agent should do, self-contained"},` +
			`"system":{"type":"string","description":"a system prompt of its own (optional)"},` +
			`"tools":{"type":"array","items":{"type":"string"},"description":"the names of the tools it may use (optional; default: all of yours)"}},"required":["task"],"additionalProperties":false}`)}
}

func (t spawnTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct {
		Task   string   `json:"task"`
		System string   `json:"system"`
		Tools  []string `json:"tools"`
	}
	if r := decodeArgs(call, &a); r != nil {
		return *r, nil
	}
	if strings.TrimSpace(a.Task) == "" {
		return refused(call, "sessions_spawn needs a task"), nil
	}
	c, err := t.h.spawn(ctx, t.e, call.ID, a.Task, spawnSpec{System: a.System, Tools: a.Tools})
	if err != nil {
		if code := vocab.CodeOf(err); code == vocab.CodeToolRefused || code == vocab.CodeBadInput {
			return refused(call, "%s", vocab.AsError(err).Message), nil
		}
		return vocab.ToolResult{}, err
	}
	t.h.mu.Lock()
	state := c.state
	t.h.mu.Unlock()
	text := fmt.Sprintf("spawned sub-agent %s (%s)", c.id, state)
	if state == childQueued {
		text += fmt.Sprintf(": %d sub-agents already run, it starts when one ends", t.h.opt.MaxRunningSubAgents)
	}
	return vocab.ToolResult{Content: text}, nil
}

// waitTool is agents_wait.
type waitTool struct {
	h *Host
	e *hosted
}

func (waitTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: ToolWait, NoAccess: true, Waits: true,
		Description: "Wait for sub-agents to end (the given ids, or all running ones) and return their answers. A timeout (like \"30s\", default 5m) returns early with those still running.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"string"}},"timeout":{"type":"string"}},"additionalProperties":false}`)}
}

func (t waitTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct {
		IDs     []string `json:"ids"`
		Timeout string   `json:"timeout"`
	}
	if r := decodeArgs(call, &a); r != nil {
		return *r, nil
	}
	timeout := 5 * time.Minute
	if a.Timeout != "" {
		d, err := time.ParseDuration(a.Timeout)
		if err != nil || d <= 0 || d > maxWait {
			return refused(call, "agents_wait: timeout %q is not a duration between 0 and %v", a.Timeout, maxWait), nil
		}
		timeout = d
	}
	h := t.h
	h.mu.Lock()
	var cs []*child
	if len(a.IDs) == 0 {
		for _, c := range t.e.children {
			// An ended child whose done is still open is being delivered:
			// it is waited for too.
			delivering := false
			select {
			case <-c.done:
			default:
				delivering = c.state == childEnded
			}
			if c.state == childRunning || c.state == childQueued || c.state == childEnded && !c.consumed && (c.note != nil || delivering) {
				cs = append(cs, c)
			}
		}
	} else {
		for _, id := range a.IDs {
			var found *child
			for _, c := range t.e.children {
				if string(c.id) == id {
					found = c
				}
			}
			if found == nil {
				h.mu.Unlock()
				return refused(call, "agents_wait: %s is not a sub-agent of this agent", id), nil
			}
			cs = append(cs, found)
		}
	}
	h.mu.Unlock()
	if len(cs) == 0 {
		return refused(call, "agents_wait: no sub-agent is running"), nil
	}
	expired := make(chan struct{})
	timer := h.clock.AfterFunc(timeout, func() { close(expired) })
	defer timer.Stop()
	// Wait first, consume after: a wait cut off by its context takes no
	// end away from its deliveries.
	if err := waitEnds(ctx, cs, expired); err != nil {
		return vocab.ToolResult{}, err
	}
	var b strings.Builder
	var consumed []*child
	defer func() {
		if len(consumed) == 0 {
			return
		}
		// Whether its result is recorded is known once the parent logs
		// it: the host's watch of the parent settles it (settleWait).
		h.mu.Lock()
		if t.e.waits == nil {
			t.e.waits = map[string][]*child{}
		}
		t.e.waits[call.ID] = consumed
		h.mu.Unlock()
		if ctx.Err() != nil {
			// The call was cut off while it took the ends. Its result
			// still counts within the turn's abort grace; after it the
			// turn recorded an aborted result, maybe before the ends
			// were registered above: read what the parent recorded. (A
			// second redelivery of an end is refused as a duplicate.)
			t.settleCutOff(call.ID)
		}
	}()
	for _, c := range cs {
		select {
		case <-c.done:
			h.mu.Lock()
			res, answer := c.result, c.answer
			h.mu.Unlock()
			if !h.consume(c) {
				fmt.Fprintf(&b, "%s: %s (already delivered above)\n", c.id, res)
				continue
			}
			consumed = append(consumed, c)
			fmt.Fprintf(&b, "%s\n", deliveryText(c.id, res, answer))
		default:
			fmt.Fprintf(&b, "[subagent running] %s: still running after %v\n", c.id, timeout)
		}
	}
	return vocab.ToolResult{Content: strings.TrimRight(b.String(), "\n")}, nil
}

// waitEnds waits until every child of cs ended or expired is closed; it
// fails with ctx's cause when ctx ends first.
func waitEnds(ctx context.Context, cs []*child, expired <-chan struct{}) error {
	for _, c := range cs {
		select {
		case <-c.done:
		case <-expired:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// subagentsTool is subagents: list, steer or cancel a child.
type subagentsTool struct {
	h *Host
	e *hosted
}

func (subagentsTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: ToolSubagents, NoAccess: true,
		Description: "List this agent's sub-agents, steer one with a message, or cancel one.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["list","steer","cancel"]},"id":{"type":"string"},"text":{"type":"string"}},"required":["action"],"additionalProperties":false}`)}
}

func (t subagentsTool) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct {
		Action string `json:"action"`
		ID     string `json:"id"`
		Text   string `json:"text"`
	}
	if r := decodeArgs(call, &a); r != nil {
		return *r, nil
	}
	h := t.h
	h.mu.Lock()
	var found *child
	var list strings.Builder
	for _, c := range t.e.children {
		fmt.Fprintf(&list, "%s %s: %s\n", c.id, c.state, c.task)
		if string(c.id) == a.ID {
			found = c
		}
	}
	h.mu.Unlock()
	switch a.Action {
	case "list":
		if list.Len() == 0 {
			return vocab.ToolResult{Content: "no sub-agents"}, nil
		}
		return vocab.ToolResult{Content: strings.TrimRight(list.String(), "\n")}, nil
	case "steer", "cancel":
	default:
		return refused(call, "subagents: unknown action %q (list, steer or cancel)", a.Action), nil
	}
	if found == nil {
		return refused(call, "subagents: %q is not a sub-agent of this agent", a.ID), nil
	}
	h.mu.Lock()
	state, svc := found.state, found.svc
	h.mu.Unlock()
	if state != childRunning && state != childQueued {
		return refused(call, "subagents: %s has %s", found.id, state), nil
	}
	if a.Action == "cancel" {
		h.cancelChild(found)
		return vocab.ToolResult{Content: "cancelled " + string(found.id)}, nil
	}
	if strings.TrimSpace(a.Text) == "" || svc == nil {
		return refused(call, "subagents: steer needs a text and a started sub-agent"), nil
	}
	if _, err := svc.Steer(vocab.UserText(a.Text)); err != nil {
		return refused(call, "subagents: steer %s: %v", found.id, err), nil
	}
	return vocab.ToolResult{Content: "steered " + string(found.id)}, nil
}

// yieldTool is sessions_yield: end the turn and wait, holding nothing,
// for the children's deliveries.
type yieldTool struct {
	h *Host
	e *hosted
}

func (yieldTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: ToolYield, NoAccess: true,
		Description: "End this turn and wait for your running sub-agents: the first [subagent completed] notification (or a message from the user) resumes the conversation in a new turn. Use it instead of agents_wait when there is nothing else to do meanwhile.",
		Schema:      json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)}
}

func (t yieldTool) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct{}
	if r := decodeArgs(call, &a); r != nil {
		return *r, nil
	}
	h := t.h
	h.mu.Lock()
	var ids []string
	for _, c := range t.e.children {
		if c.state == childRunning || c.state == childQueued {
			ids = append(ids, string(c.id))
		}
	}
	h.mu.Unlock()
	if len(ids) == 0 {
		// Nothing would resume the conversation: the turn goes on.
		return refused(call, "sessions_yield: no sub-agent is running, so nothing would resume this conversation; spawn one first (sessions_spawn), or go on yourself"), nil
	}
	return vocab.ToolResult{Content: fmt.Sprintf("yielded: waiting for %d sub-agents (%s); the first delivery resumes the conversation", len(ids), strings.Join(ids, ", ")),
		Yield: true}, nil
}

// settleCutOff settles an agents_wait call cut off by its context whose
// result the parent may have recorded already (as aborted, once the abort
// grace ran out), before its ends were registered for settleWait.
func (t waitTool) settleCutOff(callID string) {
	h := t.h
	hist, err := t.e.svc.History(context.WithoutCancel(h.ctx))
	if err != nil {
		return // the parent is closing: nothing is delivered to it any more
	}
	for _, m := range hist.All() {
		if r := m.Result; r != nil && r.CallID == callID {
			h.mu.Lock()
			took := t.e.waits[callID]
			delete(t.e.waits, callID)
			h.mu.Unlock()
			if r.IsError && r.Code == vocab.CodeToolAborted {
				for _, c := range took {
					h.redeliver(c)
				}
			}
			return
		}
	}
}
