package vocab_test

import (
	"encoding/json"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		fold, ok bool
	}{
		{"a.txt", "a.txt", true, true},
		{"A.TXT", "a.txt", true, true},
		{"A.TXT", "A.TXT", false, true},
		{"./a//b/", "a/b", true, true},
		{`a\b`, "a/b", true, true},
		{"a/../b", "b", true, true},
		{"", ".", true, true},
		{".", ".", true, true},
		{"../x", "", true, false},
		{"a/../../x", "", true, false},
		{"/etc/passwd", "", true, false},
		{`C:\x`, "", true, false},
	} {
		got, ok := vocab.NormalizePath(tc.in, tc.fold)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NormalizePath(%q, %v) = %q, %v; want %q, %v", tc.in, tc.fold, got, ok, tc.want, tc.ok)
		}
	}
}

func TestConflicts(t *testing.T) {
	r := func(p string) vocab.Accesses {
		return vocab.Accesses{Paths: []vocab.Access{{Path: p, Mode: vocab.AccessRead}}}
	}
	w := func(p string) vocab.Accesses {
		return vocab.Accesses{Paths: []vocab.Access{{Path: p, Mode: vocab.AccessWrite}}}
	}
	rr := func(p string) vocab.Accesses {
		return vocab.Accesses{Paths: []vocab.Access{{Path: p, Mode: vocab.AccessRead, Recursive: true}}}
	}
	none := vocab.Accesses{}
	for _, tc := range []struct {
		name string
		a, b vocab.Accesses
		want bool
	}{
		{"two reads", r("a"), r("a"), false},
		{"read and write of one file", r("a"), w("a"), true},
		{"writes of two files", w("a"), w("b"), false},
		{"recursive read above a write", rr("d"), w("d/x"), true},
		{"recursive read of the root", rr("."), w("x"), true},
		{"prefix that is not a parent", rr("d"), w("dd/x"), false},
		{"write above a plain read", w("d"), r("d/x"), false},
		{"all with a read", vocab.AllAccess, r("a"), true},
		{"all with all", vocab.AllAccess, vocab.AllAccess, true},
		{"nothing with all", none, vocab.AllAccess, false},
	} {
		if got := tc.a.Conflicts(tc.b); got != tc.want {
			t.Errorf("%s: Conflicts = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.b.Conflicts(tc.a); got != tc.want {
			t.Errorf("%s (reversed): Conflicts = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCallAccesses(t *testing.T) {
	spec := vocab.ToolSpec{Name: "w", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite, Parents: true}}}
	got := spec.CallAccesses(json.RawMessage(`{"path":"A/B/c.txt"}`), true)
	want := []vocab.Access{{Path: "a/b/c.txt", Mode: vocab.AccessWrite}, {Path: "a/b", Mode: vocab.AccessWrite}, {Path: "a", Mode: vocab.AccessWrite}}
	if got.All || len(got.Paths) != len(want) {
		t.Fatalf("CallAccesses = %+v, want %+v", got, want)
	}
	for i := range want {
		if got.Paths[i] != want[i] {
			t.Errorf("path %d = %+v, want %+v", i, got.Paths[i], want[i])
		}
	}
	for _, args := range []string{`[1]`, `{"path":1}`, `{}`, `{"path":"../x"}`, `not json`} {
		if a := spec.CallAccesses(json.RawMessage(args), true); !a.All {
			t.Errorf("args %s: %+v, want all", args, a)
		}
	}
	if a := (vocab.ToolSpec{Name: "x"}).CallAccesses(nil, true); !a.All {
		t.Errorf("no declaration: %+v, want all", a)
	}
	if a := (vocab.ToolSpec{Name: "x", NoAccess: true}).CallAccesses(nil, true); !a.None() {
		t.Errorf("NoAccess: %+v, want none", a)
	}
}

func TestModelText(t *testing.T) {
	for _, tc := range []struct{ content, note, want string }{
		{"out", "", "out"},
		{"", "note", "note"},
		{"out", "note", "out\n\nnote"},
	} {
		if got := (vocab.ToolResult{Content: tc.content, Note: tc.note}).ModelText(); got != tc.want {
			t.Errorf("ModelText(%q, %q) = %q, want %q", tc.content, tc.note, got, tc.want)
		}
	}
}

// Arguments that are not JSON survive encoding byte for byte.
func TestToolCallRawArgs(t *testing.T) {
	for _, args := range []string{`{"path":"a"}`, `{"path":`, "not json", "\xff\xfe{", ""} {
		c := vocab.ToolCall{ID: "c1", Name: "read", Args: json.RawMessage(args)}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		var back vocab.ToolCall
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %s: %v", args, b, err)
		}
		if back.ID != c.ID || back.Name != c.Name || string(back.Args) != args {
			t.Errorf("%q: encoded %s, decoded %+v", args, b, back)
		}
	}
}
