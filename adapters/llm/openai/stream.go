package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// Stream implements vocab.Provider: it sends req as one streamed chat
// completion and yields the reply's parts as they arrive (see the package
// documentation for their order), or an error, after which the stream
// ends. Ranging over the sequence twice sends the request twice.
func (p *Provider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		if ctx.Err() != nil {
			yield(vocab.StreamPart{}, p.cancelled(ctx))
			return
		}
		body, err := p.params(req)
		if err != nil {
			yield(vocab.StreamPart{}, err)
			return
		}
		// What the SDK's NewStreaming does, with chunks of this package's
		// type: the SDK's struct lacks the fields other servers send, and
		// its reflective decoder costs several times encoding/json's.
		var resp *http.Response
		_, err = p.svc.New(ctx, body, option.WithJSONSet("stream", true), option.WithResponseBodyInto(&resp))
		if err != nil {
			if resp != nil && resp.Body != nil {
				defer resp.Body.Close()
			}
			yield(vocab.StreamPart{}, p.failure(ctx, err, resp))
			return
		}
		dec := ssestream.NewDecoder(resp)
		if dec == nil {
			yield(vocab.StreamPart{}, &vocab.Error{Code: vocab.CodeTransport, Retryable: true, Message: p.name + ": a response without a body"})
			return
		}
		defer dec.Close()
		r := reader{p: p, yield: yield}
		for dec.Next() {
			ev := dec.Event()
			if bytes.HasPrefix(ev.Data, doneData) {
				break
			}
			var c chunk
			if ev.Type != "error" {
				if err := c.decode(ev.Data); err != nil {
					yield(vocab.StreamPart{}, &vocab.Error{Code: vocab.CodeSyntax,
						Message: p.name + ": a stream chunk is not valid JSON: " + wire.Redact(err.Error(), p.secrets...)})
					return
				}
			}
			if ev.Type == "error" || len(c.Error) > 0 && !bytes.Equal(c.Error, nullJSON) {
				// An error event inside a stream that started well (an
				// "error" member, or an event of type error): no status.
				f := parseErrorBody(ev.Data)
				f.Provider = p.name
				r.fail(p.classify(f))
				return
			}
			if !r.chunk(&c) {
				return
			}
		}
		if err := dec.Err(); err != nil {
			r.fail(p.failure(ctx, err, nil))
			return
		}
		if ctx.Err() != nil {
			r.fail(p.cancelled(ctx))
			return
		}
		r.end()
	}
}

var (
	doneData = []byte("[DONE]")
	nullJSON = []byte("null")
)

// chunk is one chunk of a streamed chat completion, with the fields every
// server row sends (the SDK's type lacks reasoning, reasoning_content and
// usage inside a choice).
type chunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int64      `json:"index"`
		Delta        delta      `json:"delta"`
		FinishReason string     `json:"finish_reason"`
		Usage        *usageJSON `json:"usage"` // Moonshot
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	// Error is set in an error event.
	Error json.RawMessage `json:"error"`
}

// delta is what one chunk adds to the reply.
type delta struct {
	Content          content `json:"content"`
	Refusal          string  `json:"refusal"`
	ReasoningContent string  `json:"reasoning_content"` // DeepSeek, Moonshot, llama.cpp, vLLM before 0.10
	Reasoning        string  `json:"reasoning"`         // Ollama, newer vLLM
	ToolCalls        []struct {
		Index    int64  `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string    `json:"name"`
			Arguments arguments `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	FunctionCall struct {
		Name      string    `json:"name"`
		Arguments arguments `json:"arguments"`
	} `json:"function_call"`
}

// decode reads a chunk as well as it can: a field of an unexpected type
// is skipped, not fatal (one odd field must not sink a reply). A chunk
// that is not JSON is an error.
func (c *chunk) decode(b []byte) error {
	err := json.Unmarshal(b, c)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return nil
	}
	return err
}

// content is a delta's content: a string, or (Mistral's reasoning models)
// a list of parts, text and thinking.
type content struct{ text, thinking string }

// UnmarshalJSON reads a string or a list of parts; anything else is no
// content.
func (c *content) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		c.text = unquote(b)
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Thinking []struct {
				Text string `json:"text"`
			} `json:"thinking"`
		}
		if json.Unmarshal(b, &parts) != nil {
			return nil
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				c.text += p.Text
			case "thinking":
				for _, t := range p.Thinking {
					c.thinking += t.Text
				}
			}
		}
	}
	return nil
}

// unquote returns the value of a JSON string: its bytes when it has no
// escapes, else what encoding/json makes of it.
func unquote(b []byte) string {
	if len(b) >= 2 && b[len(b)-1] == '"' {
		inner, plain, ascii := b[1:len(b)-1], true, true
		for _, c := range inner {
			if c == '\\' || c == '"' || c < 0x20 {
				plain = false
				break
			}
			ascii = ascii && c < utf8.RuneSelf
		}
		if plain && (ascii || utf8.Valid(inner)) {
			return string(inner)
		}
	}
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}

// arguments are a tool call's arguments: a string as the OpenAI API sends
// them, or the JSON value itself (some servers send an object).
type arguments string

// UnmarshalJSON takes a string's value or another value's JSON text.
func (a *arguments) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		*a = arguments(unquote(b))
	case string(b) != "null":
		*a = arguments(b)
	}
	return nil
}

// reader turns the chunks of one reply into stream parts.
type reader struct {
	p       *Provider
	yield   func(vocab.StreamPart, error) bool
	stopped bool // the consumer stopped ranging

	thinking bool     // a reasoning block is open
	call     *callBuf // the tool call being assembled
	calls    int      // tool calls emitted
	ids      wire.IDs
	finish   string
	refused  bool
	usage    *vocab.Usage
	// told is set once the response's id and model were reported.
	told bool
}

// callBuf is a tool call being assembled from its deltas.
type callBuf struct {
	index    int64
	id, name string
	args     strings.Builder
}

// chunk takes one chunk; it returns false when the consumer stopped.
func (r *reader) chunk(c *chunk) bool {
	if !r.told && (c.ID != "" || c.Model != "") {
		r.told = true
		if !r.emit(vocab.StreamPart{Kind: vocab.StreamResponse, Provider: r.p.name, Model: c.Model, ResponseID: c.ID}) {
			return false
		}
	}
	if c.Usage != nil && c.Usage.ok {
		r.readUsage(c.Usage)
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // only the first choice is asked for
		}
		if ch.Usage != nil && ch.Usage.ok {
			r.readUsage(ch.Usage) // Moonshot reports usage inside the choice
		}
		d := &ch.Delta
		for _, s := range [...]string{d.ReasoningContent, d.Reasoning, d.Content.thinking} {
			if s != "" {
				r.thinking = true
				if !r.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Text: s}) {
					return false
				}
				break // servers in transition send both fields
			}
		}
		if d.Content.text != "" {
			if !r.closeThinking() || !r.emit(vocab.StreamPart{Kind: vocab.StreamText, Text: d.Content.text}) {
				return false
			}
		}
		if d.Refusal != "" {
			r.refused = true
			if !r.closeThinking() || !r.emit(vocab.StreamPart{Kind: vocab.StreamText, Text: d.Refusal}) {
				return false
			}
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			if !r.toolDelta(tc.Index, tc.ID, tc.Function.Name, string(tc.Function.Arguments)) {
				return false
			}
		}
		if fc := &d.FunctionCall; fc.Name != "" || fc.Arguments != "" {
			// The deprecated single function call: one call, no id.
			if !r.toolDelta(0, "", fc.Name, string(fc.Arguments)) {
				return false
			}
		}
		if ch.FinishReason != "" {
			r.finish = ch.FinishReason
		}
	}
	return true
}

// toolDelta takes one piece of a tool call. A new call starts when the
// id changes or the index does: servers that send parallel calls all at
// index 0 tell them apart by their ids only. The call before it is then
// complete and is emitted.
func (r *reader) toolDelta(index int64, id, name, args string) bool {
	if !r.closeThinking() {
		return false
	}
	c := r.call
	if c == nil || index != c.index || id != "" && id != c.id {
		if c != nil && !r.emitCall() {
			return false
		}
		c = &callBuf{index: index, id: id}
		r.call = c
	}
	if c.name == "" {
		c.name = name
	}
	c.args.WriteString(args)
	return true
}

// emitCall emits the call being assembled, its arguments as the model
// wrote them (JSON or not), its id made safe and unique.
func (r *reader) emitCall() bool {
	c := r.call
	r.call = nil
	call := &vocab.ToolCall{ID: r.ids.Normalize(c.id), Name: c.name}
	if strings.TrimSpace(c.args.String()) != "" {
		call.Args = json.RawMessage(c.args.String())
	}
	r.calls++
	return r.emit(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: call})
}

// closeThinking closes an open reasoning block.
func (r *reader) closeThinking() bool {
	if !r.thinking {
		return true
	}
	r.thinking = false
	return r.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Provider: r.p.name})
}

// fail ends a reply that broke off with err, after the usage the server
// reported before it, if any: a failed request's tokens are spent too.
func (r *reader) fail(err error) {
	if r.usage != nil && !r.emit(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: r.usage}) {
		return
	}
	if !r.stopped {
		r.yield(vocab.StreamPart{}, err)
	}
}

// emit yields a part; false once the consumer stopped.
func (r *reader) emit(part vocab.StreamPart) bool {
	if r.stopped {
		return false
	}
	if !r.yield(part, nil) {
		r.stopped = true
		return false
	}
	return true
}

// end closes the reply after its last chunk: the open reasoning block and
// tool call, then usage and finish. A reply without a finish reason was
// cut off: a retryable transport error.
func (r *reader) end() {
	if r.finish == "" {
		r.fail(&vocab.Error{Code: vocab.CodeTransport, Retryable: true,
			Message: r.p.name + ": the stream ended without a finish reason"})
		return
	}
	if !r.closeThinking() {
		return
	}
	if r.call != nil && !r.emitCall() {
		return
	}
	if r.usage != nil && !r.emit(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: r.usage}) {
		return
	}
	r.emit(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: finishReason(r.finish, r.calls > 0, r.refused)})
}

// finishReason maps a server's finish reason. A reply that streamed a
// refusal finishes with FinishRefusal; one that called tools but says
// "stop" (Ollama, some local servers) finishes with FinishToolCalls.
func finishReason(s string, calls, refused bool) vocab.FinishReason {
	var f vocab.FinishReason
	switch strings.ToLower(s) {
	case "tool_calls", "function_call", "tool_use":
		f = vocab.FinishToolCalls
	case "length", "max_tokens":
		f = vocab.FinishMaxTokens
	case "content_filter", "filtered", "safety", "sensitive":
		f = vocab.FinishFiltered
	case "model_length", "context_length_exceeded", "context_window_exceeded", "model_context_window_exceeded":
		f = vocab.FinishContextOverflow
	case "refusal":
		f = vocab.FinishRefusal
	case "error", "insufficient_system_resource":
		f = vocab.FinishError
	case "abort", "aborted", "cancelled", "canceled":
		f = vocab.FinishAborted
	default: // stop, eos, end_turn, stop_sequence and the unknown
		f = vocab.FinishStop
	}
	switch {
	case refused && (f == vocab.FinishStop || f == vocab.FinishToolCalls):
		return vocab.FinishRefusal
	case f == vocab.FinishStop && calls:
		return vocab.FinishToolCalls
	}
	return f
}

// usageJSON is every form of usage the servers report.
type usageJSON struct {
	PromptTokens        float64 `json:"prompt_tokens"`
	CompletionTokens    float64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens float64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	PromptCacheHitTokens float64 `json:"prompt_cache_hit_tokens"` // DeepSeek
	CachedTokens         float64 `json:"cached_tokens"`           // Moonshot
	ok                   bool    // an object was read
}

// UnmarshalJSON reads a usage object; anything else is no report.
func (u *usageJSON) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	type plain usageJSON
	var v plain
	err := json.Unmarshal(b, &v)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		return nil
	}
	*u = usageJSON(v)
	u.ok = true
	return nil
}

// readUsage takes a usage report; a later one replaces it.
func (r *reader) readUsage(u *usageJSON) {
	cached := u.CachedTokens
	if u.PromptCacheHitTokens > 0 {
		cached = u.PromptCacheHitTokens
	}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens > 0 {
		cached = d.CachedTokens
	}
	r.usage = &vocab.Usage{InputTokens: count(u.PromptTokens), OutputTokens: count(u.CompletionTokens), CacheReadTokens: count(cached)}
}

// count turns a reported token count into an int: negative, fractional
// garbage and overflow are clamped.
func count(f float64) int {
	switch {
	case !(f > 0):
		return 0
	case f > math.MaxInt32:
		return math.MaxInt32
	}
	return int(f)
}
