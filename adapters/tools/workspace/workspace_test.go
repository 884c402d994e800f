package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

func TestOpenValidatesOptions(t *testing.T) {
	dir := t.TempDir()
	for _, opt := range []Options{
		{MaxReadBytes: -1}, {MaxFileBytes: -1}, {MaxGrepMatches: -1}, {MaxListEntries: -1},
		{SkipDirs: []string{"a/b"}}, {SkipDirs: []string{""}}, {SkipDirs: []string{".."}},
	} {
		w, err := Open(dir, opt)
		if !errors.Is(err, vocab.CodeBadInput.Err()) {
			t.Errorf("Open(%+v) = %v, %v; want a %s error", opt, w, err, vocab.CodeBadInput)
		}
	}
	if _, err := Open(dir+"/missing", Options{}); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("Open(missing dir) = %v; want a %s error", err, vocab.CodeBadInput)
	}
	w, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := Options{MaxReadBytes: 1 << 20, MaxFileBytes: 10 << 20, MaxGrepMatches: 200, MaxListEntries: 1000, SkipDirs: []string{".git"}}
	if diff := cmp.Diff(want, w.opt); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if w.Root() != dir {
		t.Errorf("Root() = %q, want %q", w.Root(), dir)
	}
}

func TestSpecsDeclareAccesses(t *testing.T) {
	w := open(t, Options{}, nil)
	specs := map[string]vocab.ToolSpec{}
	for _, tl := range append(w.Tools(), w.RunCommand(CommandOptions{})) {
		specs[tl.Spec().Name] = tl.Spec()
	}
	if got := slices.Sorted(maps.Keys(specs)); !slices.Equal(got, []string{"edit_file", "grep", "list_dir", "read_file", "run_command", "write_file"}) {
		t.Fatalf("tools: %v", got)
	}
	for _, tc := range []struct {
		tool, args string
		want       vocab.Accesses
	}{
		{"read_file", `{"path":"a/b.txt"}`, vocab.Accesses{Paths: []vocab.Access{{Path: "a/b.txt", Mode: vocab.AccessRead}}}},
		{"write_file", `{"path":"a/b/c.txt","content":""}`, vocab.Accesses{Paths: []vocab.Access{
			{Path: "a/b/c.txt", Mode: vocab.AccessWrite}, {Path: "a/b", Mode: vocab.AccessWrite}, {Path: "a", Mode: vocab.AccessWrite}}}},
		{"edit_file", `{"path":"x.go","old":"a","new":"b"}`, vocab.Accesses{Paths: []vocab.Access{{Path: "x.go", Mode: vocab.AccessReadWrite}}}},
		{"list_dir", `{}`, vocab.Accesses{Paths: []vocab.Access{{Path: ".", Mode: vocab.AccessRead, Recursive: true}}}},
		{"list_dir", `{"path":"src"}`, vocab.Accesses{Paths: []vocab.Access{{Path: "src", Mode: vocab.AccessRead, Recursive: true}}}},
		{"grep", `{"pattern":"x"}`, vocab.Accesses{Paths: []vocab.Access{{Path: ".", Mode: vocab.AccessSearch, Recursive: true}}}},
		{"grep", `{"pattern":"x","path":"src"}`, vocab.Accesses{Paths: []vocab.Access{{Path: "src", Mode: vocab.AccessSearch, Recursive: true}}}},
		// Paths the scheduler cannot place lexically make the call run alone.
		{"read_file", `{"path":"/abs/x"}`, vocab.AllAccess},
		{"read_file", `{"path":"../x"}`, vocab.AllAccess},
		{"run_command", `{"command":"ls"}`, vocab.AllAccess},
	} {
		got := specs[tc.tool].CallAccesses(json.RawMessage(tc.args), false)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s %s accesses (-want +got):\n%s", tc.tool, tc.args, diff)
		}
	}
	rc := specs["run_command"]
	if !rc.Approval || rc.NoAccess || len(rc.Access) != 0 {
		t.Errorf("run_command spec: Approval=%v NoAccess=%v Access=%v; want approval and no declaration", rc.Approval, rc.NoAccess, rc.Access)
	}
	for name, s := range specs {
		if name != "run_command" && s.Approval {
			t.Errorf("%s asks for approval", name)
		}
	}
}

// TestSchemasMatchDecoders checks each hand-written schema against its
// decoder: the same property names, closed objects, and every required
// property refused when missing.
func TestSchemasMatchArguments(t *testing.T) {
	w := open(t, Options{}, nil)
	for _, tl := range append(w.Tools(), w.RunCommand(CommandOptions{})) {
		spec := tl.Spec()
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
			Additional *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(spec.Schema, &schema); err != nil {
			t.Fatalf("%s schema: %v", spec.Name, err)
		}
		if schema.Type != "object" || schema.Additional == nil || *schema.Additional {
			t.Errorf("%s schema is not a closed object", spec.Name)
		}
		wantErr(t, run(t, tl, `{"no_such_field":1}`), vocab.CodeToolBadArguments, `no_such_field`)
		// A value of its type for every property: the schema and the
		// argument struct (decoded strictly) agree on every name.
		values := map[string]any{}
		for name, raw := range schema.Properties {
			var p struct{ Type any }
			json.Unmarshal(raw, &p)
			typ, _ := p.Type.(string)
			if ts, ok := p.Type.([]any); ok {
				typ, _ = ts[0].(string)
			}
			values[name] = map[string]any{"string": name, "integer": 1, "boolean": true}[typ]
		}
		if res := run(t, tl, values); res.Code == vocab.CodeToolBadArguments {
			t.Errorf("%s refuses arguments its schema allows: %s", spec.Name, res.Content)
		}
		for _, req := range schema.Required {
			if _, ok := schema.Properties[req]; !ok {
				t.Errorf("%s: required %q is not a property", spec.Name, req)
			}
			a := maps.Clone(values)
			delete(a, req)
			wantErr(t, run(t, tl, a), vocab.CodeToolBadArguments, fmt.Sprintf(`missing properties: [%q]`, req))
		}
	}
}

func TestStrictArguments(t *testing.T) {
	w := open(t, Options{}, map[string]string{"a.txt": "hello\n"})
	read := toolNamed(t, w, "read_file")
	for _, tc := range []struct{ args, want string }{
		{``, `missing properties: ["path"]`},
		{`{}`, `missing properties: ["path"]`},
		{`null`, `want "object"`},
		{`[1]`, `want "object"`},
		{`"a.txt"`, `want "object"`},
		{`{"path":null}`, `field "path": type: null has type "null", want "string"`},
		{`{"PATH":"a.txt"}`, `"PATH"`},
		{`{"path":"a.txt","path":"a.txt"}`, `duplicate key "path"`},
		{`{"path":null,"path":"a.txt"}`, `duplicate key "path"`},
		{`{"path":"a.txt"} {}`, `not valid JSON`},
		{`{"path":"a.txt"}x`, `not valid JSON`},
		{`{"path":1}`, `field "path": type: 1 has type "integer", want "string"`},
		{`{"path":"a.txt","offset_line":1.5}`, `field "offset_line"`},
		{`{"path":"a.txt","offset_line":"2"}`, `field "offset_line"`},
		{`{"path":"a.txt","offset_line":0}`, `field "offset_line": minimum`},
		{`{"path":"a.txt","limit_lines":-2}`, `field "limit_lines": minimum`},
		{`{"path":""}`, `path is empty`},
		{`{"path":"a\u0000b"}`, `NUL`},
	} {
		res := run(t, read, tc.args)
		wantErr(t, res, vocab.CodeToolBadArguments, tc.want)
	}
	// And a well-formed call still works.
	if got := wantOK(t, run(t, read, `{"path":"a.txt","offset_line":null}`)); got != "     1\thello\n" {
		t.Errorf("read = %q", got)
	}
}
