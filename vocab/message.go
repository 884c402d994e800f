package vocab

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Role says who wrote a message.
type Role string

// Message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartKind says what a part of a message holds.
type PartKind string

// Part kinds.
const (
	PartText     PartKind = "text"
	PartThinking PartKind = "thinking"
	PartToolCall PartKind = "tool-call"
)

// Part is one piece of a message: text, thinking, or a tool call.
type Part struct {
	Kind PartKind `json:"kind"`
	// Text holds the text or thinking content.
	Text string `json:"text,omitempty"`
	// Call is set for PartToolCall.
	Call *ToolCall `json:"call,omitempty"`
	// Provider, Signature and Redacted belong to a thinking part whose
	// block the provider closed: Provider names the adapter that wrote it
	// ("anthropic", "openai/deepseek"…), Signature is the provider's
	// proof of the thinking (Anthropic's signature), Redacted the opaque
	// data of thinking the provider hid (Text is then empty). A thinking
	// part without Provider was cut off (a cancel, a failure): a request
	// builder drops it, as it drops thinking another provider wrote.
	Provider  string `json:"provider,omitempty"`
	Signature string `json:"signature,omitempty"`
	Redacted  string `json:"redacted,omitempty"`
}

// Source says where a message came from: the user, a steer, a notification,
// a reminder, the model, a tool, or a salvaged partial reply.
type Source string

// Message sources.
const (
	SourceInput     Source = "input"
	SourceSteer     Source = "steer"
	SourceNotify    Source = "notify"
	SourceReminder  Source = "reminder"
	SourceModel     Source = "model"
	SourceTool      Source = "tool"
	SourceSalvaged  Source = "salvaged"
	SourceAsyncTool Source = "async-tool"
)

// Message is one entry of a conversation's history.
type Message struct {
	ID     ID     `json:"id,omitempty"`
	Role   Role   `json:"role"`
	Source Source `json:"source,omitempty"`
	Parts  []Part `json:"parts,omitempty"`
	// Result is set for RoleTool messages.
	Result *ToolResult `json:"result,omitempty"`
	// Key identifies a reminder; a newer reminder with the same key replaces
	// an older one that is still queued.
	Key string `json:"key,omitempty"`
	// BypassMaxSteps lets a notification start a step past the max-steps guard.
	BypassMaxSteps bool `json:"bypassMaxSteps,omitempty"`
	// Response says who wrote a model's reply, as its provider reported
	// it (nil when the provider said nothing).
	Response *Response `json:"response,omitempty"`
}

// Response names the provider, model and response id of a model's reply.
type Response struct {
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	ID       string `json:"id,omitempty"`
}

// UserText returns a user message holding text.
func UserText(text string) Message {
	return Message{Role: RoleUser, Source: SourceInput, Parts: []Part{{Kind: PartText, Text: text}}}
}

// Text returns the concatenated text parts of m (thinking excluded).
func (m Message) Text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Kind == PartText {
			b.WriteString(p.Text)
		}
	}
	if m.Result != nil {
		b.WriteString(m.Result.Content)
	}
	return b.String()
}

// ToolCalls returns the tool calls of m in the order the model wrote them.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, p := range m.Parts {
		if p.Kind == PartToolCall && p.Call != nil {
			calls = append(calls, *p.Call)
		}
	}
	return calls
}

// HasToolCalls reports whether m holds at least one tool call.
func (m Message) HasToolCalls() bool {
	for _, p := range m.Parts {
		if p.Kind == PartToolCall && p.Call != nil {
			return true
		}
	}
	return false
}

// IsEmptyReply reports whether an assistant reply has no usable content: no
// text and no tool call (a reply with only thinking, signed or not, is
// empty too).
func (m Message) IsEmptyReply() bool {
	for _, p := range m.Parts {
		switch p.Kind {
		case PartToolCall:
			if p.Call != nil {
				return false
			}
		case PartText:
			if strings.TrimSpace(p.Text) != "" {
				return false
			}
		}
	}
	return true
}

// ToolCall is one call the model asked for. Args are the model's
// arguments as it wrote them, which need not be JSON (a reply cut off
// mid-call, a model's mistake): such arguments encode as "rawArgs" (a
// string, or "rawArgs64", base64, when they are not UTF-8) and decode back
// byte for byte, so a log, a snapshot and a history keep them whole.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// toolCallJSON is ToolCall's encoding.
type toolCallJSON struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	RawArgs   *string         `json:"rawArgs,omitempty"`
	RawArgs64 []byte          `json:"rawArgs64,omitempty"`
}

// MarshalJSON encodes c, keeping arguments that are not JSON as a string.
func (c ToolCall) MarshalJSON() ([]byte, error) {
	w := toolCallJSON{ID: c.ID, Name: c.Name, Args: c.Args}
	if len(c.Args) > 0 && !json.Valid(c.Args) {
		w.Args = nil
		if utf8.Valid(c.Args) {
			raw := string(c.Args)
			w.RawArgs = &raw
		} else {
			w.RawArgs64 = c.Args
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (c *ToolCall) UnmarshalJSON(b []byte) error {
	var w toolCallJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = ToolCall{ID: w.ID, Name: w.Name, Args: w.Args}
	switch {
	case w.RawArgs != nil:
		c.Args = json.RawMessage(*w.RawArgs)
	case w.RawArgs64 != nil:
		c.Args = json.RawMessage(w.RawArgs64)
	}
	return nil
}

// DeliveryKind says how a tool result's side message is delivered.
type DeliveryKind string

// DeliverySteer delivers the message as a steer (next step of this turn).
const DeliverySteer DeliveryKind = "steer"

// Delivery is a message a tool asks to send into the loop beside its result.
type Delivery struct {
	Kind    DeliveryKind `json:"kind"`
	Message Message      `json:"message"`
}

// ToolResult is the one outcome every tool call ends with. Content is
// its output as text; a tool may add Parts (an image, say) after it.
type ToolResult struct {
	CallID  string `json:"callId"`
	Name    string `json:"name"`
	Content string `json:"content"`
	Parts   []Part `json:"parts,omitempty"`
	IsError bool   `json:"isError,omitempty"`
	// Code is set for error results made by loopchart (aborted, unknown tool…).
	Code Code `json:"code,omitempty"`
	// Started reports whether the tool began executing.
	Started bool `json:"started,omitempty"`
	// StopTurn asks the loop to end the turn after this batch.
	StopTurn   bool   `json:"stopTurn,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	// Yield ends the turn after this batch as yielded (EndYielded): the
	// turn's prompt stays open, without a result, and the next turn (one
	// a notification or a steer starts) resumes it. The sub-agent tool
	// sessions_yield sets it, so a parent waits for its children's
	// deliveries without holding a turn open.
	Yield bool `json:"yield,omitempty"`
	// StopBatchAfterThis is set on the result of a call whose tool
	// declared ToolSpec.StopBatch: the calls after it were skipped.
	StopBatchAfterThis bool `json:"stopBatchAfterThis,omitempty"`
	// Note is for the model only: ModelText appends it to Content.
	Note string `json:"note,omitempty"`
	// Delivery is a steer message to send into the loop.
	Delivery *Delivery `json:"delivery,omitempty"`
	// Truncated reports that the tool's output was cut (it exceeded what
	// the tool retains while it streams).
	Truncated bool `json:"truncated,omitempty"`
	// Spill references the whole output when it was too large to go into
	// the history: Content then holds its head.
	Spill *Spill `json:"spill,omitempty"`
	// Facts reduce the result to what loop detection compares (a poll's
	// status, say); empty means the whole content.
	Facts string `json:"facts,omitempty"`
}

// Spill references an output kept outside the history, in a
// content-addressed store: Ref is its hash ("sha256:…"), Chars and Bytes
// its size.
type Spill struct {
	Ref   string `json:"ref"`
	Chars int    `json:"chars"`
	Bytes int    `json:"bytes"`
}

// ModelText is the result's text as the model sees it: Content, then the
// model-only Note.
func (r ToolResult) ModelText() string {
	if r.Note == "" {
		return r.Content
	}
	if r.Content == "" {
		return r.Note
	}
	return r.Content + "\n\n" + r.Note
}

// ToolMessage wraps r as a tool-role history message.
func ToolMessage(r ToolResult) Message {
	return Message{Role: RoleTool, Source: SourceTool, Result: &r}
}

// Usage counts tokens of one model request. InputTokens is the total
// input, cached tokens included; CacheReadTokens and CacheWriteTokens say
// how many of them were read from or written to the provider's prompt
// cache.
type Usage struct {
	InputTokens      int `json:"inputTokens,omitempty"`
	OutputTokens     int `json:"outputTokens,omitempty"`
	CacheReadTokens  int `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int `json:"cacheWriteTokens,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens, u.CacheReadTokens + v.CacheReadTokens, u.CacheWriteTokens + v.CacheWriteTokens}
}

// InterruptedToolText is the result of a tool call that a crash left
// without one: recovery on reopen writes it (seed-semantics §3.7).
const InterruptedToolText = "Tool execution was interrupted before its result was recorded"

// AbortedResult is the one result of a call cut off by an abort, shared by
// the turn machine (calls it fills in) and the tool machine: `Tool "NAME"
// was aborted` when it had started, `... before execution` when not; a user
// cancel adds that the model should not simply retry; an interruption (a
// crash, closed by recovery) gives InterruptedToolText.
func AbortedResult(call ToolCall, started bool, cause CancelCause) ToolResult {
	text := fmt.Sprintf("Tool %q was aborted before execution", call.Name)
	if started {
		text = fmt.Sprintf("Tool %q was aborted", call.Name)
	}
	switch cause.Kind {
	case CancelUser:
		text += ". The user interrupted this tool call; do not simply retry it, wait for the user's next instruction"
	case CancelInterrupted:
		text = InterruptedToolText
	}
	return ToolResult{CallID: call.ID, Name: call.Name, Content: text, IsError: true, Code: CodeToolAborted, Started: started}
}
