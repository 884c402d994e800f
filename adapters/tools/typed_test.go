package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

type testInner struct {
	N    int      `json:"n"`
	Tags []string `json:"tags,omitempty"`
}

type testEmbedded struct {
	Mode string `json:"mode,omitempty"`
}

type testArgs struct {
	testEmbedded
	Path  string            `json:"path" jsonschema:"the path"`
	Count int               `json:"count,omitempty"`
	In    *testInner        `json:"in,omitempty"`
	List  []testInner       `json:"list,omitempty"`
	M     map[string]int    `json:"m,omitempty"`
	Small int8              `json:"small,omitempty"`
	When  *time.Time        `json:"when,omitempty"`
	Raw   json.RawMessage   `json:"raw,omitempty"`
	Any   map[string]any    `json:"any,omitempty"`
	Deep  map[string][]bool `json:"deep,omitempty"`
}

// echoArgs returns a tool that shows the arguments it got.
func echoArgs(t *testing.T, schema string) vocab.Tool {
	t.Helper()
	tool, err := TypedText(vocab.ToolSpec{Name: "x", Schema: json.RawMessage(schema)}, func(_ context.Context, a testArgs) (string, error) {
		b, err := json.Marshal(a)
		return string(b), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestTypedArguments(t *testing.T) {
	const bad = `Tool "x" was not run: invalid arguments: `
	cases := []struct {
		name, args string
		want       string // the content; bad arguments start with bad
	}{
		{"minimal", `{"path":"a"}`, `{"path":"a"}`},
		{"whitespace around", " \n{\"path\":\"a\"}\t", `{"path":"a"}`},
		{"everything", `{"mode":"m","path":"a","count":3,"in":{"n":1,"tags":["t"]},"list":[{"n":2}],"m":{"k":4},"small":-128,"when":"2025-01-02T03:04:05Z","raw":{"Any":[1]},"any":{"X":1,"x":2},"deep":{"k":[true]}}`,
			`{"mode":"m","path":"a","count":3,"in":{"n":1,"tags":["t"]},"list":[{"n":2}],"m":{"k":4},"small":-128,"when":"2025-01-02T03:04:05Z","raw":{"Any":[1]},"any":{"X":1,"x":2},"deep":{"k":[true]}}`},
		{"null pointer field", `{"path":"a","in":null}`, `{"path":"a"}`},
		{"empty args are {}", ``, bad + `required: missing properties: ["path"]`},
		{"missing required", `{}`, bad + `required: missing properties: ["path"]`},
		{"missing nested required", `{"path":"a","in":{}}`, bad + `field "in": required: missing properties: ["n"]`},
		{"wrong type", `{"path":7}`, bad + `field "path": type: 7 has type "integer", want "string"`},
		{"wrong nested type", `{"path":"a","in":{"n":"1"}}`, bad + `field "in.n": type: 1 has type "string", want "integer"`},
		{"wrong item type", `{"path":"a","in":{"n":1,"tags":[1]}}`, bad + `field "in.tags[]": type: 1 has type "integer", want "string"`},
		{"wrong map value", `{"path":"a","m":{"k":"v"}}`, bad + `field "m.*": type: v has type "string", want "integer"`},
		{"fraction for integer", `{"path":"a","count":1.5}`, bad + `field "count": type: 1.5 has type "number", want "integer"`},
		{"over int8 range", `{"path":"a","small":300}`, bad + `field "small": maximum: 300 is greater than 127`},
		{"not an object", `[1]`, bad + `type: [1] has type "array", want "object"`},
		{"null", `null`, bad + `type: null has type "null", want "object"`},
		{"unknown field", `{"path":"a","extra":1}`, bad + `unknown field "extra" in the top-level object (its fields are "any", "count", "deep", "in", "list", "m", "mode", "path", "raw", "small", "when")`},
		{"case-insensitive match", `{"Path":"a"}`, bad + `unknown field "Path" in the top-level object (field names are case-sensitive: did you mean "path"?)`},
		{"nested unknown field", `{"path":"a","list":[{"n":1},{"n":2,"x":3}]}`, bad + `unknown field "x" in the object at "list[1]" (its fields are "n", "tags")`},
		{"nested case mismatch", `{"path":"a","in":{"N":1}}`, bad + `unknown field "N" in the object at "in" (field names are case-sensitive: did you mean "n"?)`},
		{"embedded field case", `{"path":"a","Mode":"m"}`, bad + `unknown field "Mode" in the top-level object (field names are case-sensitive: did you mean "mode"?)`},
		{"duplicate key", `{"path":"a","path":"b"}`, bad + `duplicate key "path" in the top-level object`},
		{"nested duplicate key", `{"path":"a","list":[{"n":1},{"n":2,"n":3}]}`, bad + `duplicate key "n" in the object at "list[1]"`},
		{"duplicate inside free-form value", `{"path":"a","raw":{"k":1,"k":2}}`, bad + `duplicate key "k" in the object at "raw"`},
		{"duplicate inside map", `{"path":"a","any":{"a b":{"z":1,"z":1}}}`, bad + `duplicate key "z" in the object at "any[\"a b\"]"`},
		{"invalid JSON", `{"path":`, bad + `the arguments are not valid JSON: unexpected end of JSON input (at byte 8)`},
		{"trailing data", `{"path":"a"} {}`, bad + `the arguments are not valid JSON: invalid character '{' after top-level value (at byte 14)`},
		{"number out of range", `{"path":"a","count":1e400}`, bad + `number 1e400 is out of range`},
		{"bad time", `{"path":"a","when":"yesterday"}`, bad + `parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`},
	}
	tool := echoArgs(t, "")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := tool.Run(context.Background(), vocab.ToolCall{ID: "1", Name: "x", Args: json.RawMessage(c.args)}, nil)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := vocab.ToolResult{Content: c.want}
			if strings.HasPrefix(c.want, bad) {
				want = vocab.ToolResult{Name: "x", Content: c.want, IsError: true, Code: vocab.CodeToolBadArguments}
			}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTypedGivenSchema(t *testing.T) {
	// A given schema is used as is: here it is looser than testArgs
	// (path not required) and stricter (count at most 10).
	const schema = `{"type":"object","properties":{"path":{"type":"string"},"count":{"type":"integer","maximum":10}},"additionalProperties":true}`
	tool := echoArgs(t, schema)
	if got := string(tool.Spec().Schema); got != schema {
		t.Errorf("spec schema = %s, want the given one", got)
	}
	cases := []struct{ name, args, want string }{
		{"not required by the schema", `{}`, `{"path":""}`},
		{"schema rule", `{"count":11}`, `Tool "x" was not run: invalid arguments: field "count": maximum: 11 is greater than 10`},
		{"schema allows, decoding refuses", `{"other":1}`, `Tool "x" was not run: invalid arguments: unknown field "other" in the top-level object (its fields are "any", "count", "deep", "in", "list", "m", "mode", "path", "raw", "small", "when")`},
		{"decoding type error", `{"in":{"n":"1"}}`, `Tool "x" was not run: invalid arguments: field "in.n": got a JSON string, want an integer (int)`},
		{"decoding range error", `{"small":300}`, `Tool "x" was not run: invalid arguments: field "small": number 300 does not fit an integer (int8)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := tool.Run(context.Background(), vocab.ToolCall{Name: "x", Args: json.RawMessage(c.args)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Content != c.want {
				t.Errorf("content\n got %s\nwant %s", res.Content, c.want)
			}
		})
	}
}

func TestTypedInferredSchema(t *testing.T) {
	type args struct {
		Name  string   `json:"name" jsonschema:"who to greet"`
		Times int      `json:"times,omitempty"`
		Tags  []string `json:"tags,omitzero"`
	}
	tool := MustTyped(vocab.ToolSpec{Name: "greet", Description: "Greet.", NoAccess: true}, func(context.Context, args) (vocab.ToolResult, error) {
		return vocab.ToolResult{Content: "hi"}, nil
	})
	want := vocab.ToolSpec{Name: "greet", Description: "Greet.", NoAccess: true,
		Schema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"who to greet"},"times":{"type":"integer"},"tags":{"type":["null","array"],"items":{"type":"string"}}},"required":["name"],"additionalProperties":false}`)}
	if diff := cmp.Diff(want, tool.Spec(), cmp.Transformer("raw", func(r json.RawMessage) string { return string(r) })); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestTypedConstruction(t *testing.T) {
	ok := func(context.Context, testArgs) (string, error) { return "", nil }
	cases := []struct {
		name    string
		spec    vocab.ToolSpec
		wantErr string // "" = no error
	}{
		{"inferred", vocab.ToolSpec{Name: "x"}, ""},
		{"given", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{"type":"object"}`)}, ""},
		{"given without type", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{}`)}, ""},
		{"given with local ref", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"$ref":"#/$defs/p"}},"$defs":{"p":{"type":"string"}}}`)}, ""},
		{"no name", vocab.ToolSpec{}, "input.bad: tool without a name"},
		{"not JSON", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{"type":`)}, `input.bad: tool "x": the arguments' schema is not a JSON Schema: unexpected end of JSON input`},
		{"not an object", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{"type":"string"}`)}, `input.bad: tool "x": the arguments' schema must describe an object, not "string"`},
		{"unresolvable ref", vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`)},
			`input.bad: tool "x": the arguments' schema cannot be resolved: JSON Pointer "/$defs/missing": no key "missing" in map`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := TypedText(c.spec, ok)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, vocab.CodeBadInput.Err()) {
					t.Errorf("error %v has not code %s", err, vocab.CodeBadInput)
				}
			}
			if got != c.wantErr {
				t.Errorf("error\n got %q\nwant %q", got, c.wantErr)
			}
		})
	}
	t.Run("uninferable type", func(t *testing.T) {
		_, err := TypedText(vocab.ToolSpec{Name: "x"}, func(context.Context, struct{ F func() }) (string, error) { return "", nil })
		if err == nil || !strings.Contains(err.Error(), "cannot infer") {
			t.Errorf("got %v, want a cannot-infer error", err)
		}
	})
	t.Run("nil func", func(t *testing.T) {
		if _, err := TypedText[testArgs](vocab.ToolSpec{Name: "x"}, nil); err == nil {
			t.Error("no error for a nil func")
		}
	})
}

func TestMustPanics(t *testing.T) {
	cases := []struct {
		name string
		make func()
	}{
		{"MustTyped", func() {
			MustTyped(vocab.ToolSpec{}, func(context.Context, testArgs) (vocab.ToolResult, error) { return vocab.ToolResult{}, nil })
		}},
		{"MustTypedText", func() {
			MustTypedText(vocab.ToolSpec{Name: "x", Schema: json.RawMessage(`[]`)}, func(context.Context, testArgs) (string, error) { return "", nil })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			c.make()
		})
	}
}

func TestTypedResultAndProgress(t *testing.T) {
	var got []string
	tool := MustTyped(vocab.ToolSpec{Name: "x"}, func(ctx context.Context, a struct {
		Steps int `json:"steps"`
	}) (vocab.ToolResult, error) {
		for i := range a.Steps {
			Progress(ctx, fmt.Sprint("step ", i))
		}
		if a.Steps < 0 {
			return vocab.ToolResult{}, errors.New("negative")
		}
		return vocab.ToolResult{Content: "done", Note: "n", StopTurn: true}, nil
	})
	res, err := tool.Run(context.Background(), vocab.ToolCall{Args: json.RawMessage(`{"steps":2}`)}, func(s string) { got = append(got, s) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vocab.ToolResult{Content: "done", Note: "n", StopTurn: true}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"step 0", "step 1"}, got); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if _, err := tool.Run(context.Background(), vocab.ToolCall{Args: json.RawMessage(`{"steps":-1}`)}, nil); err == nil || err.Error() != "negative" {
		t.Errorf("error = %v, want the function's", err)
	}
}

func TestFuncStrict(t *testing.T) {
	type args struct {
		Text string `json:"text"`
	}
	tool := Func("echo", "echo text", `{}`, func(_ context.Context, a args) (string, error) {
		if a.Text == "silence" {
			return "", nil
		}
		return "echo: " + a.Text, nil
	})
	cases := []struct{ name, args, want string }{
		{"no output", `{"text":"silence"}`, NoOutputNote},
		{"ok", `{"text":"hi"}`, "echo: hi"},
		{"empty", ``, "echo: "},
		{"null", `null`, "echo: "},
		{"unknown", `{"txt":"hi"}`, `Tool "echo" was not run: invalid arguments: unknown field "txt" in the top-level object (its fields are "text")`},
		{"duplicate", `{"text":"a","text":"b"}`, `Tool "echo" was not run: invalid arguments: duplicate key "text" in the top-level object`},
		{"type", `{"text":1}`, `Tool "echo" was not run: invalid arguments: field "text": got a JSON number, want a string`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := tool.Run(context.Background(), vocab.ToolCall{Args: json.RawMessage(c.args)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.ModelText(); got != c.want {
				t.Errorf("model text\n got %s\nwant %s", got, c.want)
			}
		})
	}
	if got := string(tool.Spec().Schema); got != `{}` {
		t.Errorf("schema %s", got)
	}
}

func TestProblemIsCapped(t *testing.T) {
	tool := echoArgs(t, "")
	long := strings.Repeat("é", 5000)
	res, _ := tool.Run(context.Background(), vocab.ToolCall{Args: json.RawMessage(`{"path":"a","in":{"n":"` + long + `"}}`)}, nil)
	if n := len([]rune(res.Content)); n > maxProblem+100 {
		t.Errorf("content has %d characters, want at most about %d", n, maxProblem)
	}
	if !strings.HasSuffix(res.Content, "…") {
		t.Errorf("content does not end with an ellipsis: …%s", res.Content[len(res.Content)-20:])
	}
}
