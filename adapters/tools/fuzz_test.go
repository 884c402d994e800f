package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// fuzzLimit is the spill limit of the fuzzed registry: small, so spills
// happen.
const fuzzLimit = 64

// fuzzRegistry returns a registry of tools of every kind: file tools, a
// typed tool with nested arguments, a Func tool, read_output, one that
// panics and one that echoes its raw arguments (so they may spill).
func fuzzRegistry(f *testing.F) (*Registry, Blobs) {
	fsys := fstest.MapFS{"a.txt": {Data: []byte("one two three")}, "d/b.txt": {Data: []byte("x")}}
	mem := MemoryBlobs()
	typed := MustTyped(vocab.ToolSpec{Name: "typed"}, func(_ context.Context, a testArgs) (vocab.ToolResult, error) {
		b, err := json.Marshal(a)
		return vocab.ToolResult{Content: string(b)}, err
	})
	given := MustTypedText(vocab.ToolSpec{Name: "given", Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":["integer","null"],"minimum":0},"s":{"$ref":"#/$defs/S"}},"$defs":{"S":{"type":"string","maxLength":8}}}`)},
		func(_ context.Context, a struct {
			N *int   `json:"n"`
			S string `json:"s"`
		}) (string, error) {
			return strings.Repeat(a.S, 20), nil
		})
	echo := Func("echo", "", "{}", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		return a.Text, nil
	})
	raw := rawTool{"raw", func(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
		if strings.Contains(string(call.Args), "panic") {
			panic("asked to")
		}
		return vocab.ToolResult{Content: string(call.Args)}, nil
	}}
	tools := append(FileTools(fsys), typed, given, echo, raw, ReadOutput(mem))
	r, err := NewRegistry(tools...)
	if err != nil {
		f.Fatal(err)
	}
	if err := r.SetSpill(mem, fuzzLimit); err != nil {
		f.Fatal(err)
	}
	return r, mem
}

// FuzzExecute checks that Execute never panics and always returns one
// well-formed result, whatever the arguments.
func FuzzExecute(f *testing.F) {
	r, mem := fuzzRegistry(f)
	spilled, _ := mem.Put(context.Background(), []byte(strings.Repeat("é", 200)))
	names := []string{"list_files", "read_file", "word_count", "typed", "given", "echo", "raw", ReadOutputName, "nope"}
	seeds := []struct {
		tool uint8
		args string
	}{
		{0, `{"path":"."}`}, {1, `{"path":"a.txt"}`}, {1, `{"path":`}, {1, `{"path":7}`}, {2, `{"path":"a.txt","path":"x"}`},
		{3, `{"path":"a","in":{"n":1,"tags":["x"]},"list":[{"n":2}],"m":{"k":1},"any":{"a":[1,{"b":null}]}}`},
		{3, `{"Path":"a"}`}, {3, `{"path":"a","small":1e400}`}, {3, `{"path":"a","when":"2025-01-01T00:00:00Z"}`},
		{3, `{"path":"a","raw":{"k":1,"k":2}}`}, {3, `[]`}, {3, `null`}, {3, `"str"`}, {3, ``}, {3, `{"path":"a"} x`},
		{4, `{"n":null,"s":"abcdefgh"}`}, {4, `{"n":-1}`}, {4, `{"s":"abcdefghi"}`},
		{5, `{"text":"` + strings.Repeat("😀", 100) + `"}`}, {5, `{"text":"\ud800"}`}, {5, "{\"text\":\"\xff\"}"},
		{6, `{"x":"panic"}`}, {6, strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000)},
		{7, `{"ref":"` + spilled.Ref + `","offset":150,"limit":20}`}, {7, `{"ref":"` + spilled.Ref + `","offset":200}`}, {7, `{"ref":"sha256:x"}`},
		{8, `{}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, tool uint8, args []byte) {
		call := vocab.ToolCall{ID: "id", Name: names[int(tool)%len(names)], Args: args}
		res := r.Execute(context.Background(), call, func(string) {})
		if res.CallID != call.ID || res.Name != call.Name {
			t.Fatalf("result not stamped: %+v", res)
		}
		if res.IsError != (res.Code != "") {
			t.Fatalf("IsError %v with code %q: %q", res.IsError, res.Code, res.Content)
		}
		if res.IsError && res.Content == "" {
			t.Fatalf("error result without a text: %+v", res)
		}
		if res.Code == vocab.CodeToolBadArguments && res.Started {
			t.Fatalf("bad arguments reported started: %+v", res)
		}
		if res.Started && call.Name != ReadOutputName { // what a tool returned, not a refusal of Execute's
			if head, _, _ := strings.Cut(res.Content, "\n\n[Output cut:"); utf8.RuneCountInString(head) > fuzzLimit {
				t.Fatalf("content of %d characters was not cut", utf8.RuneCountInString(head))
			}
		}
		if res.Spill != nil {
			whole, err := mem.Get(context.Background(), res.Spill.Ref)
			if err != nil || utf8.RuneCount(whole) != res.Spill.Chars || len(whole) != res.Spill.Bytes {
				t.Fatalf("spill %+v: %d bytes, %v", res.Spill, len(whole), err)
			}
		}
	})
}
