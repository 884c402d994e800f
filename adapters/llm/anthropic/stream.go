package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// blockKind says what an open content block is.
type blockKind uint8

const (
	blockOther blockKind = iota // a block this adapter does not stream (server tools, say)
	blockText
	blockThinking
	blockRedacted
	blockTool
)

// block is a content block between its start and its stop.
type block struct {
	index int64
	kind  blockKind
	// id and name of a tool_use block; args collects its partial_json
	// (linear time), start holds the input given at the block's start.
	id, name string
	args     bytes.Buffer
	deltas   bool
	start    string
	// signature of a thinking block; data of a redacted one.
	signature string
	data      string
}

// assembler turns the events of one reply into stream parts.
type assembler struct {
	yield  func(vocab.StreamPart, error) bool
	open   []*block
	ids    wire.IDs
	usage  vocab.Usage
	stop   sdk.StopReason
	calls  int
	ended  bool // message_stop seen
	halted bool // the consumer stopped
}

// emit yields a part, unless the consumer has stopped; it records when
// the consumer stops.
func (a *assembler) emit(part vocab.StreamPart) {
	if !a.halted && !a.yield(part, nil) {
		a.halted = true
	}
}

// event is one event of the Messages stream, as far as the adapter reads
// it. It is decoded with encoding/json into this small struct, not into
// the SDK's union of every event, block and delta type: that costs many
// times more per event than the rest of the adapter together.
type event struct {
	Type    string `json:"type"`
	Index   int64  `json:"index"`
	Message struct {
		ID    string `json:"id"`
		Model string `json:"model"`
		Usage usage  `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type      string          `json:"type"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
		Input     json.RawMessage `json:"input"`
	} `json:"content_block"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage usage `json:"usage"`
}

// usage is the usage of message_start and message_delta; a field that is
// absent or null stays nil.
type usage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

func (u *usage) empty() bool {
	return u.InputTokens == nil && u.OutputTokens == nil && u.CacheReadInputTokens == nil && u.CacheCreationInputTokens == nil
}

// play reads the event stream of resp to its end and yields what it
// carries.
func (p *Provider) play(ctx context.Context, resp *http.Response, yield func(vocab.StreamPart, error) bool) {
	dec := ssestream.NewDecoder(resp)
	a := &assembler{yield: yield}
	var ev event
	for dec.Next() {
		if ctx.Err() != nil { // stop at once, even with events buffered
			yield(vocab.StreamPart{}, p.cancelled(ctx))
			return
		}
		sse := dec.Event()
		data := bytes.TrimSpace(sse.Data)
		switch {
		case sse.Type == "ping":
			continue
		case sse.Type == "error":
			yield(vocab.StreamPart{}, p.failure(ctx, streamError(resp, data)))
			return
		case len(data) == 0:
			continue
		}
		ev = event{}
		if err := json.Unmarshal(data, &ev); err != nil {
			var typ *json.UnmarshalTypeError
			if !errors.As(err, &typ) {
				yield(vocab.StreamPart{}, p.failure(ctx, err))
				return
			}
			// A field of an unexpected type is left out; the rest stands.
		}
		if ev.Type == "error" {
			yield(vocab.StreamPart{}, p.failure(ctx, streamError(resp, data)))
			return
		}
		a.event(&ev)
		if a.halted {
			return
		}
		if a.ended {
			a.finish()
			return
		}
	}
	if err := dec.Err(); err != nil {
		yield(vocab.StreamPart{}, p.failure(ctx, err))
		return
	}
	if ctx.Err() != nil {
		yield(vocab.StreamPart{}, p.cancelled(ctx))
		return
	}
	yield(vocab.StreamPart{}, &vocab.Error{Code: vocab.CodeTransport, Retryable: true,
		Message: providerName + ": the stream ended before message_stop"})
}

// streamError makes the SDK's error of an error event inside a stream, as
// the SDK's own stream does: the response's status (200) and the event's
// error type and message.
func streamError(resp *http.Response, data []byte) *sdk.Error {
	e := &sdk.Error{StatusCode: resp.StatusCode, Response: resp, RequestID: resp.Header.Get("request-id")}
	_ = e.UnmarshalJSON(data) // a body that is not JSON stays raw
	return e
}

// event takes one event of the stream.
func (a *assembler) event(ev *event) {
	switch ev.Type {
	case "message_start":
		if ev.Message.ID != "" || ev.Message.Model != "" {
			a.emit(vocab.StreamPart{Kind: vocab.StreamResponse, Provider: providerName, Model: ev.Message.Model, ResponseID: ev.Message.ID})
		}
		u := &ev.Message.Usage
		in, read, write := val(u.InputTokens), val(u.CacheReadInputTokens), val(u.CacheCreationInputTokens)
		a.usage = vocab.Usage{
			InputTokens:      in + read + write,
			OutputTokens:     val(u.OutputTokens),
			CacheReadTokens:  read,
			CacheWriteTokens: write,
		}
		a.emitUsage()
	case "content_block_start":
		a.start(ev)
	case "content_block_delta":
		a.delta(ev)
	case "content_block_stop":
		if i := a.find(ev.Index); i >= 0 {
			b := a.open[i]
			a.open = append(a.open[:i], a.open[i+1:]...)
			a.close(b)
		}
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.stop = sdk.StopReason(ev.Delta.StopReason)
		}
		a.deltaUsage(&ev.Usage)
	case "message_stop":
		a.ended = true
	}
}

func val(p *int64) int {
	if p == nil {
		return 0
	}
	return int(*p)
}

// deltaUsage takes message_delta's usage. Its counts are running totals,
// so each one present replaces the one before (never adds to it); an
// input count of zero does not erase one message_start reported (some
// servers send zeros for what they do not count again).
func (a *assembler) deltaUsage(u *usage) {
	if u.empty() {
		return
	}
	uncached := a.usage.InputTokens - a.usage.CacheReadTokens - a.usage.CacheWriteTokens
	replace := func(dst *int, v *int64) {
		if v != nil && (*v != 0 || *dst == 0) {
			*dst = int(*v)
		}
	}
	replace(&uncached, u.InputTokens)
	replace(&a.usage.CacheReadTokens, u.CacheReadInputTokens)
	replace(&a.usage.CacheWriteTokens, u.CacheCreationInputTokens)
	if u.OutputTokens != nil {
		a.usage.OutputTokens = int(*u.OutputTokens)
	}
	a.usage.InputTokens = uncached + a.usage.CacheReadTokens + a.usage.CacheWriteTokens
	a.emitUsage()
}

func (a *assembler) emitUsage() {
	u := a.usage
	a.emit(vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &u})
}

// find returns the position of the open block with index i, or -1.
func (a *assembler) find(i int64) int {
	for k := len(a.open) - 1; k >= 0; k-- {
		if a.open[k].index == i {
			return k
		}
	}
	return -1
}

func (a *assembler) start(ev *event) {
	cb := &ev.ContentBlock
	b := &block{index: ev.Index}
	switch cb.Type {
	case "text":
		b.kind = blockText
		if cb.Text != "" {
			a.emit(vocab.StreamPart{Kind: vocab.StreamText, Text: cb.Text})
		}
	case "thinking":
		b.kind = blockThinking
		b.signature = cb.Signature
		if cb.Thinking != "" {
			a.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Text: cb.Thinking})
		}
	case "redacted_thinking":
		b.kind, b.data = blockRedacted, cb.Data
	case "tool_use":
		b.kind, b.id, b.name = blockTool, cb.ID, cb.Name
		b.start = string(cb.Input)
	}
	if i := a.find(ev.Index); i >= 0 {
		a.open[i] = b // a block started twice: the later one stands
		return
	}
	a.open = append(a.open, b)
}

func (a *assembler) delta(ev *event) {
	d := &ev.Delta
	switch d.Type {
	case "text_delta":
		if d.Text != "" {
			a.emit(vocab.StreamPart{Kind: vocab.StreamText, Text: d.Text})
		}
	case "thinking_delta":
		if d.Thinking != "" {
			a.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Text: d.Thinking})
		}
	case "signature_delta":
		if i := a.find(ev.Index); i >= 0 && a.open[i].kind == blockThinking {
			a.open[i].signature += d.Signature
		}
	case "input_json_delta":
		if i := a.find(ev.Index); i >= 0 && a.open[i].kind == blockTool {
			a.open[i].args.WriteString(d.PartialJSON)
			a.open[i].deltas = true
		}
	}
}

// close ends a block: a thinking block's closing part, a redacted block,
// or a whole tool call.
func (a *assembler) close(b *block) {
	switch b.kind {
	case blockThinking:
		a.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Provider: providerName, Signature: b.signature})
	case blockRedacted:
		a.emit(vocab.StreamPart{Kind: vocab.StreamThinking, Provider: providerName, Redacted: b.data})
	case blockTool:
		a.calls++
		call := &vocab.ToolCall{ID: a.ids.Normalize(b.id), Name: b.name, Args: b.input()}
		a.emit(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: call})
	}
}

// input returns a tool call's arguments: the concatenated partial_json as
// the model wrote it (kept raw when it is not JSON), else the input given
// at the block's start, else {}.
func (b *block) input() json.RawMessage {
	raw := b.args.Bytes()
	if !b.deltas || len(bytes.TrimSpace(raw)) == 0 {
		start := bytes.TrimSpace([]byte(b.start))
		if len(start) == 0 || string(start) == "null" {
			return json.RawMessage(`{}`)
		}
		return json.RawMessage(start)
	}
	return json.RawMessage(bytes.Clone(raw))
}

// finish ends a reply whose message_stop arrived: blocks left open are
// closed in order, then the finish part follows.
func (a *assembler) finish() {
	for len(a.open) > 0 && !a.halted {
		b := a.open[0]
		a.open = a.open[1:]
		a.close(b)
	}
	if a.halted {
		return
	}
	if a.stop == "" {
		a.yield(vocab.StreamPart{}, &vocab.Error{Code: vocab.CodeTransport, Retryable: true,
			Message: providerName + ": the stream ended without a stop reason"})
		return
	}
	a.emit(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: finishReason(a.stop, a.calls > 0)})
}

// finishReason maps Anthropic's stop reason; an unknown one is taken as
// the end of the reply.
func finishReason(r sdk.StopReason, calls bool) vocab.FinishReason {
	switch r {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence:
		return vocab.FinishStop
	case sdk.StopReasonToolUse:
		return vocab.FinishToolCalls
	case sdk.StopReasonMaxTokens:
		return vocab.FinishMaxTokens
	case sdk.StopReasonPauseTurn:
		return vocab.FinishPause
	case sdk.StopReasonRefusal:
		return vocab.FinishRefusal
	case sdk.StopReasonModelContextWindowExceeded:
		return vocab.FinishContextOverflow
	}
	if calls {
		return vocab.FinishToolCalls
	}
	return vocab.FinishStop
}
