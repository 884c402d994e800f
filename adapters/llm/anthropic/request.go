package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// emptyObject is the input of a tool_use block whose arguments are not a
// JSON object, and the properties of a schema that has none.
var emptyObject = json.RawMessage(`{}`)

// params builds the Messages API request for req. It reads req and never
// changes it: its slices are shared with the session.
func (p *Provider) params(req vocab.Request) (sdk.MessageNewParams, []option.RequestOption, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	maxTokens := p.maxTokens
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	if p.budget > 0 && p.budget >= maxTokens {
		return sdk.MessageNewParams{}, nil, badInput("thinking budget %d must be below the request's max tokens %d", p.budget, maxTokens)
	}
	msgs, system := messages(req.Messages)
	params := sdk.MessageNewParams{
		Model:     sdk.Model(model),
		MaxTokens: int64(maxTokens),
		Messages:  msgs,
	}
	if s := strings.TrimSpace(req.System); s != "" {
		params.System = append(params.System, sdk.TextBlockParam{Text: req.System})
	}
	for _, s := range system {
		params.System = append(params.System, sdk.TextBlockParam{Text: s})
	}
	for _, spec := range req.Tools {
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: toolParam(spec)})
	}
	if p.budget > 0 {
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(p.budget))
	}
	var opts []option.RequestOption
	if p.temperature != nil {
		// The SDK's parameters have no temperature field; the API takes it.
		opts = append(opts, option.WithJSONSet("temperature", *p.temperature))
	}
	return params, opts, nil
}

// wireTurn is one message on the wire: consecutive history messages with
// the same wire role merge into one. A user turn's tool results go first.
type wireTurn struct {
	assistant bool
	results   []sdk.ContentBlockParamUnion
	blocks    []sdk.ContentBlockParamUnion
}

// messages converts the history into wire messages, and returns the text
// of system-role messages, which go into the system prompt.
func messages(history []vocab.Message) ([]sdk.MessageParam, []string) {
	var turns []wireTurn
	var system []string
	for i := range history {
		m := &history[i]
		var t wireTurn
		switch m.Role {
		case vocab.RoleUser:
			t.blocks = textBlocks(m.Parts)
		case vocab.RoleAssistant:
			t.assistant = true
			t.blocks = assistantBlocks(m.Parts)
		case vocab.RoleTool:
			if m.Result == nil {
				continue
			}
			t.results = []sdk.ContentBlockParamUnion{toolResult(m.Result)}
		case vocab.RoleSystem:
			if s := m.Text(); strings.TrimSpace(s) != "" {
				system = append(system, s)
			}
			continue
		default:
			continue
		}
		if len(t.blocks) == 0 && len(t.results) == 0 {
			continue // nothing the API would take (a reply of dropped thinking, say)
		}
		if n := len(turns); n > 0 && turns[n-1].assistant == t.assistant {
			last := &turns[n-1]
			last.results = append(last.results, t.results...)
			last.blocks = append(last.blocks, t.blocks...)
			continue
		}
		turns = append(turns, t)
	}
	out := make([]sdk.MessageParam, 0, len(turns))
	for _, t := range turns {
		content := append(t.results, t.blocks...)
		if t.assistant {
			out = append(out, sdk.NewAssistantMessage(content...))
		} else {
			out = append(out, sdk.NewUserMessage(content...))
		}
	}
	return out, system
}

// textBlocks returns a user message's text parts as text blocks; empty
// texts are left out (the API refuses them).
func textBlocks(parts []vocab.Part) []sdk.ContentBlockParamUnion {
	var out []sdk.ContentBlockParamUnion
	for _, part := range parts {
		if part.Kind == vocab.PartText && strings.TrimSpace(part.Text) != "" {
			out = append(out, sdk.NewTextBlock(part.Text))
		}
	}
	return out
}

// assistantBlocks returns a reply's parts in order: thinking this adapter
// wrote and the API signed (or redacted), text, and tool calls. Thinking
// that is unsigned, cut off or another provider's is dropped: the API
// refuses it.
func assistantBlocks(parts []vocab.Part) []sdk.ContentBlockParamUnion {
	var out []sdk.ContentBlockParamUnion
	for _, part := range parts {
		switch part.Kind {
		case vocab.PartThinking:
			switch {
			case part.Provider != providerName:
			case part.Redacted != "":
				out = append(out, sdk.NewRedactedThinkingBlock(part.Redacted))
			case part.Signature != "":
				out = append(out, sdk.NewThinkingBlock(part.Signature, part.Text))
			}
		case vocab.PartText:
			if strings.TrimSpace(part.Text) != "" {
				out = append(out, sdk.NewTextBlock(part.Text))
			}
		case vocab.PartToolCall:
			if part.Call != nil {
				c := part.Call
				out = append(out, sdk.NewToolUseBlock(wire.SafeID(c.ID), objectArgs(c.Args), c.Name))
			}
		}
	}
	return out
}

// objectArgs returns args when they are a JSON object, else {}: the API
// takes only an object as a tool_use input. Malformed arguments were
// already reported to the model in the call's error result.
func objectArgs(args json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(args)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return json.RawMessage(t)
	}
	return emptyObject
}

// toolResult returns a tool_result block for r: its model text, and
// is_error when the call failed. An empty text sends no content (the API
// refuses an empty text block).
func toolResult(r *vocab.ToolResult) sdk.ContentBlockParamUnion {
	b := sdk.ToolResultBlockParam{ToolUseID: wire.SafeID(r.CallID)}
	if text := r.ModelText(); text != "" {
		b.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: text}}}
	}
	if r.IsError {
		b.IsError = param.NewOpt(true)
	}
	return sdk.ContentBlockParamUnion{OfToolResult: &b}
}

// toolParam describes a tool to the API. The schema's properties and
// required list go into their fields and its other keywords along; the
// type is always object. A missing or unreadable schema gives an object
// without properties.
func toolParam(spec vocab.ToolSpec) *sdk.ToolParam {
	t := &sdk.ToolParam{Name: spec.Name}
	if spec.Description != "" {
		t.Description = param.NewOpt(spec.Description)
	}
	var schema map[string]json.RawMessage
	if len(bytes.TrimSpace(spec.Schema)) > 0 {
		if json.Unmarshal(spec.Schema, &schema) != nil {
			schema = nil
		}
	}
	t.InputSchema.Properties = emptyObject
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			if bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
				t.InputSchema.Properties = v
			}
		case "required":
			var req []string
			if json.Unmarshal(v, &req) == nil {
				t.InputSchema.Required = req
				continue
			}
			fallthrough
		default:
			if t.InputSchema.ExtraFields == nil {
				t.InputSchema.ExtraFields = make(map[string]any, len(schema))
			}
			t.InputSchema.ExtraFields[k] = v
		}
	}
	return t
}
