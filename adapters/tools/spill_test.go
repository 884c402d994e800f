package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// failingBlobs refuses every Put.
type failingBlobs struct{ Blobs }

func (failingBlobs) Put(context.Context, []byte) (vocab.Spill, error) {
	return vocab.Spill{}, errors.New("disk full")
}

// constTool returns content.
func constTool(content string) vocab.Tool {
	return rawTool{"big", returns(vocab.ToolResult{Content: content}, nil)}
}

func TestSpill(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	e := func(n int) string { return strings.Repeat("é", n) }
	cases := []struct {
		name    string
		content string
		store   string // "memory", "none", "failing"
		limit   int    // 0 = default
		head    string // "" = kept whole
	}{
		{"49,999 stays whole", a(49_999), "memory", 0, ""},
		{"50,000 stays whole", a(50_000), "memory", 0, ""},
		{"50,001 spills", a(50_001), "memory", 0, a(50_000)},
		{"50,000 multibyte stay whole", e(50_000), "memory", 0, ""},
		{"50,001 multibyte spill", e(50_001), "memory", 0, e(50_000)},
		{"cut between multibyte runes", a(49_999) + "😀😀", "memory", 0, a(49_999) + "😀"},
		{"custom limit", "0123456789€", "memory", 10, "0123456789"},
		{"no store drops the rest", a(50_001), "none", 0, a(50_000)},
		{"failing store shows the head", e(50_010), "failing", 0, e(50_000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRegistry(constTool(c.content))
			if err != nil {
				t.Fatal(err)
			}
			mem := MemoryBlobs()
			switch c.store {
			case "memory":
				err = r.SetSpill(mem, c.limit)
			case "failing":
				err = r.SetSpill(failingBlobs{mem}, c.limit)
			case "none":
				err = r.SetSpill(nil, c.limit)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := r.Execute(context.Background(), vocab.ToolCall{ID: "c", Name: "big"}, nil)
			want := vocab.ToolResult{CallID: "c", Name: "big", Content: c.content, Started: true}
			if c.head != "" {
				total := len([]rune(c.content))
				limit := len([]rune(c.head))
				if c.limit == 0 && limit != SpillChars && !strings.Contains(c.name, "between") {
					t.Fatalf("bad case: head of %d", limit)
				}
				ref, _ := refOf([]byte(c.content))
				switch c.store {
				case "memory":
					want.Content = c.head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters. The full output is stored as %s; "+
						"read_output(ref, offset, limit) pages through it by characters: call read_output with {\"ref\": %q, \"offset\": %d} to read on.]",
						cutLimit(c.limit), total, ref, ref, cutLimit(c.limit))
					want.Spill = &vocab.Spill{Ref: ref, Chars: total, Bytes: len(c.content)}
				case "none":
					want.Content = c.head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters; the rest was dropped.]", cutLimit(c.limit), total)
					want.Truncated = true
				case "failing":
					want.Content = c.head + fmt.Sprintf("\n\n[Output cut: showing the first %d of %d characters; the rest could not be stored (disk full) and was dropped.]", cutLimit(c.limit), total)
					want.Truncated, want.IsError, want.Code = true, true, vocab.CodeSpill
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%.2000s", diff)
			}
			if got.Spill != nil {
				whole, err := mem.Get(context.Background(), got.Spill.Ref)
				if err != nil || string(whole) != c.content {
					t.Errorf("stored %d bytes, %v; want the whole content", len(whole), err)
				}
			}
		})
	}
}

func cutLimit(limit int) int {
	if limit == 0 {
		return SpillChars
	}
	return limit
}

func TestSetSpill(t *testing.T) {
	r, _ := NewRegistry()
	if err := r.SetSpill(MemoryBlobs(), -1); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("negative limit: %v", err)
	}
	if err := r.SetSpill(MemoryBlobs(), 0); err != nil || r.cur.Load().limit != SpillChars {
		t.Errorf("limit 0: %v, limit %d", err, r.cur.Load().limit)
	}
	fresh, _ := NewRegistry()
	if cur := fresh.cur.Load(); cur.limit != SpillChars || cur.blobs != nil {
		t.Errorf("new registry: limit %d, blobs %v", cur.limit, cur.blobs)
	}
}

// TestSpillKeepsTruncated: output a tool already cut while streaming is
// still spilled, and stays marked Truncated with the tool's note.
func TestSpillKeepsTruncated(t *testing.T) {
	out := NewOutput(60_000)
	_, _ = out.WriteString(strings.Repeat("x", 70_000))
	tool := rawTool{"stream", returns(out.Result(), nil)}
	r, _ := NewRegistry(tool)
	_ = r.SetSpill(MemoryBlobs(), 0)
	got := r.Execute(context.Background(), vocab.ToolCall{ID: "c", Name: "stream"}, nil)
	if !got.Truncated || got.Spill == nil || got.Spill.Chars != 60_000 || !strings.Contains(got.Note, "60000 of the 70000") {
		t.Errorf("truncated %v, spill %+v, note %q", got.Truncated, got.Spill, got.Note)
	}
}

func TestReadOutput(t *testing.T) {
	ctx := context.Background()
	mem := MemoryBlobs()
	content := strings.Repeat("é", 60_000) + strings.Repeat("b", 50_005)
	r, err := NewRegistry(constTool(content), ReadOutput(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetSpill(mem, 0); err != nil {
		t.Fatal(err)
	}
	res := r.Execute(ctx, vocab.ToolCall{ID: "c1", Name: "big"}, nil)
	if res.Spill == nil {
		t.Fatalf("not spilled: %.200s", res.Content)
	}
	ref := res.Spill.Ref

	// Page through it as the model is told to.
	var all strings.Builder
	offset := 0
	for page := 0; ; page++ {
		args, _ := json.Marshal(map[string]any{"ref": ref, "offset": offset})
		got := r.Execute(ctx, vocab.ToolCall{ID: fmt.Sprint("p", page), Name: ReadOutputName, Args: args}, nil)
		if got.IsError || got.Spill != nil {
			t.Fatalf("page %d: %+v", page, got)
		}
		all.WriteString(got.Content)
		offset += len([]rune(got.Content))
		if strings.Contains(got.Note, "the end of the output") {
			break
		}
		if !strings.Contains(got.Note, fmt.Sprintf(`"offset": %d}`, offset)) {
			t.Fatalf("page %d note %q does not say where to go on", page, got.Note)
		}
		if page > 5 {
			t.Fatal("too many pages")
		}
	}
	if all.String() != content {
		t.Errorf("pages put together differ from the content (%d vs %d bytes)", all.Len(), len(content))
	}

	cases := []struct {
		name, args string
		want       vocab.ToolResult
	}{
		{"a short page", fmt.Sprintf(`{"ref":%q,"limit":3}`, ref),
			vocab.ToolResult{Content: "ééé", Started: true,
				Note: fmt.Sprintf(`[3 characters from offset 0 of the 110005 of %s; 110002 more: call read_output with {"ref": %q, "offset": 3} to read on.]`, ref, ref)}},
		{"last characters", fmt.Sprintf(`{"ref":%q,"offset":110003}`, ref),
			vocab.ToolResult{Content: "bb", Started: true, Note: fmt.Sprintf(`[2 characters from offset 110003 of the 110005 of %s: the end of the output.]`, ref)}},
		{"offset at the end", fmt.Sprintf(`{"ref":%q,"offset":110005}`, ref),
			bad(`field "offset": 110005 is past the end of the output, which has 110005 characters (offsets 0 to 110004)`)},
		{"offset past the end", fmt.Sprintf(`{"ref":%q,"offset":999999}`, ref),
			bad(`field "offset": 999999 is past the end of the output, which has 110005 characters (offsets 0 to 110004)`)},
		{"negative offset", fmt.Sprintf(`{"ref":%q,"offset":-1}`, ref),
			bad(`field "offset": minimum: -1 is less than 0`)},
		{"limit over the max", fmt.Sprintf(`{"ref":%q,"limit":50001}`, ref),
			bad(`field "limit": maximum: 50001 is greater than 50000`)},
		{"limit zero", fmt.Sprintf(`{"ref":%q,"limit":0}`, ref),
			bad(`field "limit": minimum: 0 is less than 1`)},
		{"missing ref", `{}`, bad(`required: missing properties: ["ref"]`)},
		{"malformed ref", `{"ref":"../etc/passwd"}`,
			bad(`field "ref": pattern: "../etc/passwd" does not match regular expression "^sha256:[0-9a-f]{64}$"`)},
		{"unknown ref", `{"ref":"sha256:` + strings.Repeat("0", 64) + `"}`,
			bad(`field "ref": no output is stored under sha256:` + strings.Repeat("0", 64))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.CallID, c.want.Name = "r", ReadOutputName
			got := r.Execute(ctx, vocab.ToolCall{ID: "r", Name: ReadOutputName, Args: json.RawMessage(c.args)}, nil)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// bad is the result read_output gives for a bad argument.
func bad(problem string) vocab.ToolResult {
	return vocab.ToolResult{Content: `Tool "read_output" was not run: invalid arguments: ` + problem, IsError: true, Code: vocab.CodeToolBadArguments}
}

func TestReadOutputSpec(t *testing.T) {
	tool := ReadOutput(MemoryBlobs())
	spec := tool.Spec()
	if spec.Name != ReadOutputName || !spec.NoAccess || !json.Valid(spec.Schema) {
		t.Errorf("spec %+v", spec)
	}
	if _, err := FlattenSchema(spec.Schema); err != nil {
		t.Errorf("schema does not flatten: %v", err)
	}
	// Pages keep within the registry's spill limit, and are never
	// spilled again.
	mem := MemoryBlobs()
	sp, _ := mem.Put(context.Background(), []byte(strings.Repeat("z", 100)))
	r, _ := NewRegistry(ReadOutput(mem))
	_ = r.SetSpill(mem, 10)
	got := r.Execute(context.Background(), vocab.ToolCall{Name: ReadOutputName, Args: json.RawMessage(`{"ref":"` + sp.Ref + `","limit":50}`)}, nil)
	want := vocab.ToolResult{Name: ReadOutputName, Content: strings.Repeat("z", 10), Started: true,
		Note: fmt.Sprintf(`[10 characters from offset 0 of the 100 of %s; 90 more: call read_output with {"ref": %q, "offset": 10} to read on.]`, sp.Ref, sp.Ref)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}
	// No store.
	got = runReadOutput(t, ReadOutput(nil), sp.Ref)
	if got.Code != vocab.CodeToolBadArguments || !strings.Contains(got.Content, "no outputs are stored") {
		t.Errorf("nil store: %+v", got)
	}
}

// runReadOutput runs tool for ref directly.
func runReadOutput(t *testing.T, tool vocab.Tool, ref string) vocab.ToolResult {
	t.Helper()
	res, err := tool.Run(context.Background(), vocab.ToolCall{Args: json.RawMessage(`{"ref":"` + ref + `"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
