package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/loopchart/loopchart/vocab"
)

// Typed makes a tool of fn, whose arguments are a Go value of type A.
//
// The arguments' JSON Schema is spec.Schema when it is set, used as is;
// when it is empty it is inferred from A (jsonschema.For: exported fields
// by their json names, fields without omitempty/omitzero required, no
// other fields allowed, a jsonschema tag as the description), and the
// returned tool's Spec carries it. A schema that cannot be inferred or
// resolved, or one whose top-level type is not "object", is an error.
//
// Each call's arguments are first checked as JSON (empty arguments mean
// {}, a duplicate key at any depth is refused), then validated against the
// schema, then decoded into A strictly: a field A does not have (or that
// matches one only case-insensitively) is refused, so what passes the
// schema is exactly what fn gets. Any failure gives an error result with
// code vocab.CodeToolBadArguments, Started false, and a Content that names
// the field and the rule; fn does not run. A call's progress func is put
// in the ctx fn gets (see Progress and Detach).
func Typed[A any](spec vocab.ToolSpec, fn func(ctx context.Context, args A) (vocab.ToolResult, error)) (vocab.Tool, error) {
	if spec.Name == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "tool without a name")
	}
	if fn == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "tool %q: nil function", spec.Name)
	}
	rs, raw, err := resolveSchema[A](spec.Schema)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "tool %q: %w", spec.Name, err)
	}
	spec.Schema = raw
	spec.Access = slices.Clone(spec.Access)
	return &typedTool[A]{spec: spec, schema: rs, fn: fn}, nil
}

// TypedText is Typed for a function whose result is its text: the string
// fn returns is the result's Content (an empty one gives an empty Content
// and the Note NoOutputNote, so the model sees that there was no output).
func TypedText[A any](spec vocab.ToolSpec, fn func(ctx context.Context, args A) (string, error)) (vocab.Tool, error) {
	if fn == nil {
		return Typed[A](spec, nil)
	}
	return Typed(spec, textFn(fn))
}

// MustTyped is Typed for package-level tools: it panics on an error.
func MustTyped[A any](spec vocab.ToolSpec, fn func(ctx context.Context, args A) (vocab.ToolResult, error)) vocab.Tool {
	t, err := Typed(spec, fn)
	if err != nil {
		panic(err)
	}
	return t
}

// MustTypedText is TypedText for package-level tools: it panics on an
// error.
func MustTypedText[A any](spec vocab.ToolSpec, fn func(ctx context.Context, args A) (string, error)) vocab.Tool {
	t, err := TypedText(spec, fn)
	if err != nil {
		panic(err)
	}
	return t
}

// Func adapts a typed function to vocab.Tool: schema is published as the
// tool's schema but not checked (use Typed for that); the call's arguments
// are decoded into A strictly (empty means {}, duplicate keys and unknown
// fields are refused, at any depth) and the string returned is the
// result's content, as with TypedText. Bad arguments give an error result with code
// vocab.CodeToolBadArguments that says what is wrong.
func Func[A any](name, description string, schema string, fn func(ctx context.Context, args A) (string, error)) vocab.Tool {
	spec := vocab.ToolSpec{Name: name, Description: description}
	if schema != "" {
		spec.Schema = json.RawMessage(schema)
	}
	return &typedTool[A]{spec: spec, fn: textFn(fn)}
}

// NoOutputNote is the model-only note of a text tool's result when the
// text is empty: an empty text is an answer, not a missing result.
const NoOutputNote = "(no output)"

// textFn turns a text function into a result function.
func textFn[A any](fn func(ctx context.Context, args A) (string, error)) func(context.Context, A) (vocab.ToolResult, error) {
	return func(ctx context.Context, a A) (vocab.ToolResult, error) {
		s, err := fn(ctx, a)
		if err != nil {
			return vocab.ToolResult{}, err
		}
		if s == "" {
			return vocab.ToolResult{Note: NoOutputNote}, nil
		}
		return vocab.ToolResult{Content: s}, nil
	}
}

// typedTool is the tool Typed, TypedText and Func make.
type typedTool[A any] struct {
	spec   vocab.ToolSpec
	schema *jsonschema.Resolved // nil: no validation (Func)
	fn     func(ctx context.Context, args A) (vocab.ToolResult, error)
}

var _ vocab.Tool = (*typedTool[struct{}])(nil)

// Spec implements vocab.Tool.
func (t *typedTool[A]) Spec() vocab.ToolSpec { return t.spec }

// Run implements vocab.Tool.
func (t *typedTool[A]) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	args, problem := decodeArgs[A](call.Args, t.schema)
	if problem != "" {
		return BadArguments(t.spec.Name, problem), nil
	}
	if progress != nil && progressFrom(ctx) == nil {
		ctx = withProgress(ctx, progress) // a registry's ctx carries it already
	}
	return t.fn(ctx, args)
}

// BadArguments returns the error result of a call of tool name whose
// arguments were refused because of problem: code
// vocab.CodeToolBadArguments, not started.
func BadArguments(name, problem string) vocab.ToolResult {
	return vocab.ToolResult{
		Name:    name,
		Content: fmt.Sprintf("Tool %q was not run: invalid arguments: %s", name, problem),
		IsError: true,
		Code:    vocab.CodeToolBadArguments,
	}
}

// inferredTypes are the schemas of types jsonschema.For does not infer
// as they decode: raw JSON takes any value, a json.Number a number.
var inferredTypes = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {},
	reflect.TypeFor[json.Number]():     {Type: "number"},
}

// resolveSchema returns the resolved schema of A's arguments and its JSON:
// given is used as is unless empty, else the schema is inferred from A.
func resolveSchema[A any](given json.RawMessage) (*jsonschema.Resolved, json.RawMessage, error) {
	var (
		s   *jsonschema.Schema
		raw json.RawMessage
	)
	if len(bytes.TrimSpace(given)) == 0 {
		inferred, err := jsonschema.For[A](&jsonschema.ForOptions{TypeSchemas: inferredTypes})
		if err != nil {
			return nil, nil, fmt.Errorf("cannot infer the arguments' schema: %w", err)
		}
		b, err := json.Marshal(inferred)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot encode the arguments' schema: %w", err)
		}
		s, raw = inferred, b
	} else {
		s = new(jsonschema.Schema)
		if err := json.Unmarshal(given, s); err != nil {
			return nil, nil, fmt.Errorf("the arguments' schema is not a JSON Schema: %w", err)
		}
		raw = bytes.Clone(given)
	}
	if !objectSchema(s) {
		return nil, nil, fmt.Errorf("the arguments' schema must describe an object, not %s", describeTypes(s))
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("the arguments' schema cannot be resolved: %w", err)
	}
	return rs, raw, nil
}

// objectSchema reports whether s admits objects by its type keyword (a
// schema without one admits anything).
func objectSchema(s *jsonschema.Schema) bool {
	switch {
	case s.Type != "":
		return s.Type == "object"
	case s.Types != nil:
		return slices.Contains(s.Types, "object")
	}
	return true
}

// describeTypes renders s's type keyword.
func describeTypes(s *jsonschema.Schema) string {
	if s.Type != "" {
		return fmt.Sprintf("%q", s.Type)
	}
	return fmt.Sprintf("%q", s.Types)
}
