package openai

import (
	"github.com/loopchart/loopchart/adapters/tools"

	"bytes"
	"encoding/json"
	"errors"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/vocab"
)

// emptySchema is the parameters of a tool that declares none.
var emptySchema = map[string]any{"type": "object", "properties": map[string]any{}}

// params builds the chat completion request of req. stream=true is added
// by the SDK's streaming call.
func (p *Provider) params(req vocab.Request) (sdk.ChatCompletionNewParams, error) {
	model := p.model
	if req.Model != "" {
		model = req.Model
	}
	out := sdk.ChatCompletionNewParams{Model: shared.ChatModel(model)}
	out.Messages = make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.System != "" {
		out.Messages = append(out.Messages, sdk.SystemMessage(req.System))
	}
	var echo []bool
	if p.row.echoes(model) {
		echo = toolTurns(req.Messages)
	}
	for i, m := range req.Messages {
		switch m.Role {
		case vocab.RoleSystem:
			out.Messages = append(out.Messages, sdk.SystemMessage(m.Text()))
		case vocab.RoleUser:
			out.Messages = append(out.Messages, sdk.UserMessage(m.Text()))
		case vocab.RoleAssistant:
			out.Messages = append(out.Messages, p.assistant(m, echo != nil && echo[i]))
		case vocab.RoleTool:
			if m.Result == nil {
				continue // a tool message without a result has nothing to say
			}
			out.Messages = append(out.Messages, sdk.ToolMessage(m.Result.ModelText(), p.callID(m.Result.CallID)))
		}
	}
	for _, spec := range req.Tools {
		raw := spec.Schema
		if p.flatten {
			flat, err := tools.FlattenSchema(raw)
			if err != nil {
				return out, vocab.Errorf(vocab.CodeBadInput, "%s: tool %q: %v", p.name, spec.Name, err)
			}
			raw = flat
		}
		schema, err := toolSchema(raw)
		if err != nil {
			return out, vocab.Errorf(vocab.CodeBadInput, "%s: tool %q: %v", p.name, spec.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: spec.Name, Parameters: schema}
		if spec.Description != "" {
			fn.Description = param.NewOpt(spec.Description)
		}
		out.Tools = append(out.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	max := p.max
	if req.MaxTokens > 0 {
		max = req.MaxTokens
	}
	if max > 0 {
		if p.row.MaxTokensField == FieldMaxCompletionTokens {
			out.MaxCompletionTokens = param.NewOpt(int64(max))
		} else {
			out.MaxTokens = param.NewOpt(int64(max))
		}
	}
	if p.temp != nil {
		out.Temperature = param.NewOpt(*p.temp)
	}
	if p.row.IncludeUsage {
		out.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return out, nil
}

// assistant converts an assistant message: its text, its tool calls
// (arguments as the model wrote them, even when they are not JSON) and,
// when echo is set, this provider's reasoning as reasoning_content.
// Thinking from another provider, or cut off (no provider), is dropped.
func (p *Provider) assistant(m vocab.Message, echo bool) sdk.ChatCompletionMessageParamUnion {
	var text, reasoning strings.Builder
	var a sdk.ChatCompletionAssistantMessageParam
	for _, part := range m.Parts {
		switch part.Kind {
		case vocab.PartText:
			text.WriteString(part.Text)
		case vocab.PartThinking:
			if part.Provider == p.name {
				reasoning.WriteString(part.Text)
			}
		case vocab.PartToolCall:
			if part.Call == nil {
				continue
			}
			args := string(part.Call.Args)
			if len(bytes.TrimSpace(part.Call.Args)) == 0 {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       p.callID(part.Call.ID),
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: part.Call.Name, Arguments: args},
				},
			})
		}
	}
	if text.Len() > 0 || len(a.ToolCalls) == 0 {
		a.Content.OfString = param.NewOpt(text.String())
	}
	if echo && (reasoning.Len() > 0 || len(a.ToolCalls) > 0) {
		a.SetExtraFields(map[string]any{"reasoning_content": reasoning.String()})
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// callID maps a tool call id to the form the server accepts.
func (p *Provider) callID(id string) string {
	if p.row.MistralIDs {
		return wire.MistralID(id)
	}
	return id
}

// toolTurns marks the assistant messages of tool turns: the messages
// between two user messages (or after the last) among which an assistant
// message calls a tool.
func toolTurns(msgs []vocab.Message) []bool {
	marks := make([]bool, len(msgs))
	start := 0
	flush := func(end int) {
		calls := false
		for _, m := range msgs[start:end] {
			calls = calls || m.Role == vocab.RoleAssistant && m.HasToolCalls()
		}
		for i := start; calls && i < end; i++ {
			marks[i] = msgs[i].Role == vocab.RoleAssistant
		}
	}
	for i, m := range msgs {
		if m.Role == vocab.RoleUser {
			flush(i)
			start = i + 1
		}
	}
	flush(len(msgs))
	return marks
}

// toolSchema turns a tool's JSON Schema into the SDK's parameters: the
// top-level object's members, kept as raw JSON; an empty schema is an
// object without properties.
func toolSchema(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return emptySchema, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, errSchema
	}
	out := make(map[string]any, len(members))
	for k, v := range members {
		out[k] = v
	}
	return out, nil
}

// errSchema reports a tool schema that is not a JSON object.
var errSchema = errors.New("its schema is not a JSON object")
