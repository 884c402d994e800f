package vocab

import (
	"context"
	"encoding/json"
	"iter"
)

// ToolSpec describes a tool to the model (name, description, JSON Schema
// of the arguments) and to the scheduler (what its calls touch, whether
// they stop their batch). It is data: it travels in the session's
// configuration and so in its log.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	// Access declares the paths a call touches, from its arguments; none
	// declared means the call touches everything and runs alone.
	Access []AccessDecl `json:"access,omitempty"`
	// NoAccess declares that calls touch nothing the scheduler guards
	// (a pure computation, a lookup): they never wait for others.
	NoAccess bool `json:"noAccess,omitempty"`
	// Poll marks a tool that polls for progress (a job's status): loop
	// detection judges its repeats by their outcomes, with thresholds of
	// its own.
	Poll bool `json:"poll,omitempty"`
	// Volatile names result fields (keys of a JSON object result, at any
	// depth) that change on every call without saying anything (a
	// timestamp, a request id): loop detection ignores them when it
	// compares results.
	Volatile []string `json:"volatile,omitempty"`
	// StopBatch declares that a call of this tool ends its batch: the calls
	// after it in the same reply are not run (they get a skipped result).
	StopBatch bool `json:"stopBatch,omitempty"`
	// Idempotent declares that running a call twice does no harm: a
	// runner that lost a call with its worker (adapters/temporal) may run
	// it again; other calls run at most once and a lost one is reported
	// interrupted.
	Idempotent bool `json:"idempotent,omitempty"`
	// Approval: every call waits for a person's approval before it runs
	// (after the before-tool hooks let it), unless a hook denied it.
	Approval bool `json:"approval,omitempty"`
	// Waits declares that a call mostly waits for other sessions (the
	// sub-agents' agents_wait): in a capped lane (a Host's global lane)
	// it neither needs nor holds a slot, so a parent waiting for its
	// children never keeps the slots they or other sessions need.
	Waits bool `json:"waits,omitempty"`
}

// Request is one model request, built by the step gate from the current
// history and tool registry.
type Request struct {
	Model     string     `json:"model,omitempty"`
	System    string     `json:"system,omitempty"`
	Messages  []Message  `json:"messages"`
	Tools     []ToolSpec `json:"tools,omitempty"`
	MaxTokens int        `json:"maxTokens,omitempty"`
	// Turn, Step and Attempt locate the request in the session.
	Turn    int `json:"turn"`
	Step    int `json:"step"`
	Attempt int `json:"attempt"`
}

// StreamPartKind says what a streamed part holds.
type StreamPartKind string

// Stream part kinds.
const (
	StreamText     StreamPartKind = "text"
	StreamThinking StreamPartKind = "thinking"
	StreamToolCall StreamPartKind = "tool-call"
	StreamUsage    StreamPartKind = "usage"
	StreamFinish   StreamPartKind = "finish"
	// StreamResponse names who answered: Provider (the adapter, with its
	// server: "anthropic", "openai/deepseek"), Model (the model the
	// provider says answered) and ResponseID (its id of the response).
	// It may come anywhere; the reply's message keeps the last one.
	StreamResponse StreamPartKind = "response"
)

// StreamPart is one piece of a streamed reply. Text and thinking arrive as
// deltas; a tool call arrives whole; usage and finish close the reply.
//
// A thinking block ends with a thinking part that sets Provider (and
// Signature or Redacted when the provider gave them): its Text, if any,
// is the block's last delta, and the next thinking delta starts a new
// block. Thinking deltas that no such part closes (a reply cut off) form
// a part without a provider, which request builders drop.
//
// Usage may arrive more than once: each report replaces the one before
// (providers report running totals), and InputTokens counts every input
// token, cached ones included.
type StreamPart struct {
	Kind      StreamPartKind `json:"kind"`
	Text      string         `json:"text,omitempty"`
	Call      *ToolCall      `json:"call,omitempty"`
	Usage     *Usage         `json:"usage,omitempty"`
	Finish    FinishReason   `json:"finish,omitempty"`
	Provider  string         `json:"provider,omitempty"`
	Signature string         `json:"signature,omitempty"`
	Redacted  string         `json:"redacted,omitempty"`
	// Model and ResponseID belong to a StreamResponse part.
	Model      string `json:"model,omitempty"`
	ResponseID string `json:"responseId,omitempty"`
}

// Provider streams model replies. A failed request yields a non-nil error,
// ideally an *Error whose Retryable and RetryAfter drive the retry policy;
// the stream ends after an error. Implementations must stop promptly when
// ctx is cancelled, and must treat the request as read-only: its slices are
// shared with the session.
type Provider interface {
	Stream(ctx context.Context, req Request) iter.Seq2[StreamPart, error]
}
