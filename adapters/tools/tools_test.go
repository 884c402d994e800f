package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

func TestExecute(t *testing.T) {
	fsys := fstest.MapFS{"a.txt": {Data: []byte("one two three")}, "d/b.txt": {Data: []byte("x")}}
	panicky := Func("boom", "", "{}", func(context.Context, struct{}) (string, error) { panic("kaboom") })
	failing := Func("fail", "", "{}", func(context.Context, struct{}) (string, error) { return "", errors.New("disk on fire") })
	r, err := NewRegistry(append(FileTools(fsys), panicky, failing)...)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call vocab.ToolCall
		want vocab.ToolResult
	}{
		{"list", vocab.ToolCall{ID: "1", Name: "list_files", Args: json.RawMessage(`{"path":"."}`)},
			vocab.ToolResult{CallID: "1", Name: "list_files", Content: "a.txt\nd/b.txt", Started: true}},
		{"read", vocab.ToolCall{ID: "2", Name: "read_file", Args: json.RawMessage(`{"path":"a.txt"}`)},
			vocab.ToolResult{CallID: "2", Name: "read_file", Content: "one two three", Started: true}},
		{"count", vocab.ToolCall{ID: "3", Name: "word_count", Args: json.RawMessage(`{"path":"a.txt"}`)},
			vocab.ToolResult{CallID: "3", Name: "word_count", Content: "3 words", Started: true}},
		{"unknown", vocab.ToolCall{ID: "4", Name: "nope"},
			vocab.ToolResult{CallID: "4", Name: "nope", Content: "Tool nope not found", IsError: true, Code: vocab.CodeToolUnknown}},
		{"bad json", vocab.ToolCall{ID: "5", Name: "read_file", Args: json.RawMessage(`{"path":`)},
			vocab.ToolResult{CallID: "5", Name: "read_file", Content: `Tool "read_file" was not run: invalid arguments: the arguments are not valid JSON: unexpected end of JSON input (at byte 8): {"path":`, IsError: true, Code: vocab.CodeToolBadArguments}},
		{"wrong field", vocab.ToolCall{ID: "6", Name: "read_file", Args: json.RawMessage(`{"path":7}`)},
			vocab.ToolResult{CallID: "6", Name: "read_file", Content: `Tool "read_file" was not run: invalid arguments: field "path": got a JSON number, want a string`, IsError: true, Code: vocab.CodeToolBadArguments}},
		{"unknown field", vocab.ToolCall{ID: "6b", Name: "read_file", Args: json.RawMessage(`{"path":"a.txt","Path":"b"}`)},
			vocab.ToolResult{CallID: "6b", Name: "read_file", Content: `Tool "read_file" was not run: invalid arguments: unknown field "Path" in the top-level object (field names are case-sensitive: did you mean "path"?)`, IsError: true, Code: vocab.CodeToolBadArguments}},
		{"duplicate key", vocab.ToolCall{ID: "6c", Name: "read_file", Args: json.RawMessage(`{"path":"a.txt","path":"zz"}`)},
			vocab.ToolResult{CallID: "6c", Name: "read_file", Content: `Tool "read_file" was not run: invalid arguments: duplicate key "path" in the top-level object`, IsError: true, Code: vocab.CodeToolBadArguments}},
		{"empty args are {}", vocab.ToolCall{ID: "6d", Name: "list_files"},
			vocab.ToolResult{CallID: "6d", Name: "list_files", Content: "a.txt\nd/b.txt", Started: true}},
		{"panic", vocab.ToolCall{ID: "7", Name: "boom"},
			vocab.ToolResult{CallID: "7", Name: "boom", Content: `Tool "boom" failed: panic: kaboom`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"error", vocab.ToolCall{ID: "8", Name: "fail"},
			vocab.ToolResult{CallID: "8", Name: "fail", Content: `Tool "fail" failed: disk on fire`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
		{"missing file", vocab.ToolCall{ID: "9", Name: "read_file", Args: json.RawMessage(`{"path":"zz"}`)},
			vocab.ToolResult{CallID: "9", Name: "read_file", Content: `Tool "read_file" failed: open zz: file does not exist`, IsError: true, Code: vocab.CodeToolFailed, Started: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := r.Execute(context.Background(), c.call, nil)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	fsys := fstest.MapFS{}
	if _, err := NewRegistry(ReadFile(fsys), ReadFile(fsys)); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("duplicate tool: got %v", err)
	}
	r, _ := NewRegistry(FileTools(fsys)...)
	var names []string
	for _, s := range r.Specs() {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"list_files", "read_file", "word_count"}, names); diff != "" {
		t.Error(diff)
	}
}

// TestRegistryConcurrentUse adds tools and changes the spill store while
// calls execute and specs are listed: every call of a tool added before
// it started finds it, and (under -race) nothing is shared unsafely.
func TestRegistryConcurrentUse(t *testing.T) {
	r, err := NewRegistry(Func("t0", "", `{}`, func(context.Context, struct{}) (string, error) { return "ok", nil }))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	added := make(chan int, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			name := fmt.Sprint("t", i)
			if err := r.Add(Func(name, "", `{}`, func(context.Context, struct{}) (string, error) { return name, nil })); err != nil {
				t.Error(err)
				return
			}
			if err := r.SetSpill(nil, 1000+i); err != nil {
				t.Error(err)
				return
			}
			added <- i
		}
		close(added)
	}()
	for i := range added {
		name := fmt.Sprint("t", i)
		res := r.Execute(context.Background(), vocab.ToolCall{ID: "c", Name: name, Args: json.RawMessage(`{}`)}, nil)
		if res.IsError || res.Content != name {
			t.Fatalf("call of %s after it was added: %+v", name, res)
		}
		if got := len(r.Specs()); got < i+1 {
			t.Fatalf("after adding t%d: %d specs", i, got)
		}
	}
	<-done
	if got := len(r.Specs()); got != n+1 {
		t.Fatalf("%d specs, want %d", got, n+1)
	}
	if err := r.Add(Func("t1", "", `{}`, func(context.Context, struct{}) (string, error) { return "", nil })); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Fatalf("second t1: %v, want a bad-input error", err)
	}
}
