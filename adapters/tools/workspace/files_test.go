package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// tenLines is "line 1\n" … "line 10\n".
func tenLines() string {
	var b strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// numbered is what read_file shows for lines from..to of tenLines.
func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%6d\tline %d\n", i, i)
	}
	return b.String()
}

func TestReadFileRanges(t *testing.T) {
	w := open(t, Options{}, map[string]string{
		"ten.txt":     tenLines(),
		"nonl.txt":    "a\nb",
		"crlf.txt":    "a\r\nb\r\n",
		"empty.txt":   "",
		"bin.dat":     "ELF\x00\x01\x02",
		"dir/":        "",
		"latin1.txt":  "caf\xe9\n",
		"blank.txt":   "\n\n",
		"one.txt":     "only",
		"sub/two.txt": "x\ny\n",
	})
	read := toolNamed(t, w, "read_file")
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"path": "ten.txt"}, numbered(1, 10)},
		{map[string]any{"path": "ten.txt", "offset_line": 3, "limit_lines": 2}, numbered(3, 4) + "[more lines follow: continue with offset_line=5]\n"},
		{map[string]any{"path": "ten.txt", "offset_line": 9, "limit_lines": 5}, numbered(9, 10)},
		{map[string]any{"path": "ten.txt", "offset_line": 10}, numbered(10, 10)},
		{map[string]any{"path": "ten.txt", "limit_lines": 10}, numbered(1, 10)},
		{map[string]any{"path": "ten.txt", "limit_lines": 1}, numbered(1, 1) + "[more lines follow: continue with offset_line=2]\n"},
		{map[string]any{"path": "nonl.txt"}, "     1\ta\n     2\tb\n"},
		{map[string]any{"path": "nonl.txt", "offset_line": 2}, "     2\tb\n"},
		{map[string]any{"path": "crlf.txt"}, "     1\ta\n     2\tb\n"},
		{map[string]any{"path": "empty.txt"}, "(empty.txt is empty)"},
		{map[string]any{"path": "latin1.txt"}, "     1\tcaf\uFFFD\n"},
		{map[string]any{"path": "blank.txt"}, "     1\t\n     2\t\n"},
		{map[string]any{"path": "one.txt"}, "     1\tonly\n"},
		{map[string]any{"path": "sub/two.txt", "offset_line": 2, "limit_lines": 1}, "     2\ty\n"},
	} {
		res := run(t, read, tc.args)
		if got := wantOK(t, res); got != tc.want {
			t.Errorf("read_file %v = %q, want %q", tc.args, got, tc.want)
		}
		if res.Truncated {
			t.Errorf("read_file %v is marked truncated", tc.args)
		}
	}
	wantErr(t, run(t, read, map[string]any{"path": "ten.txt", "offset_line": 11}), vocab.CodeToolBadArguments, "offset_line 11 is past the end", "10 lines")
	wantErr(t, run(t, read, map[string]any{"path": "nonl.txt", "offset_line": 3}), vocab.CodeToolBadArguments, "2 lines")
	wantErr(t, run(t, read, map[string]any{"path": "bin.dat"}), vocab.CodeToolRefused, `"bin.dat"`, "binary")
	wantErr(t, run(t, read, map[string]any{"path": "dir"}), vocab.CodeToolRefused, `"dir"`, "directory")
	wantErr(t, run(t, read, map[string]any{"path": "."}), vocab.CodeToolRefused, "directory")
	wantErr(t, run(t, read, map[string]any{"path": "missing.txt"}), vocab.CodeToolFailed, `"missing.txt" does not exist`)
	wantErr(t, run(t, read, map[string]any{"path": "one.txt/x"}), vocab.CodeToolFailed, "one.txt/x")
}

func TestReadFileSizeCap(t *testing.T) {
	// Each numbered line of tenLines is 14 or 15 bytes.
	w := open(t, Options{MaxReadBytes: 45}, map[string]string{"ten.txt": tenLines(), "long.txt": strings.Repeat("x", 100) + "\nnext\n"})
	read := toolNamed(t, w, "read_file")
	res := run(t, read, map[string]any{"path": "ten.txt"})
	if want := numbered(1, 3) + "[output cut at the 45-byte read limit: continue with offset_line=4]\n"; res.Content != want || !res.Truncated || res.IsError {
		t.Errorf("capped read = %q (truncated %v), want %q", res.Content, res.Truncated, want)
	}
	res = run(t, read, map[string]any{"path": "ten.txt", "offset_line": 4})
	if !strings.HasPrefix(res.Content, numbered(4, 6)+"[output cut") {
		t.Errorf("continued read = %q", res.Content)
	}
	// A line longer than the cap shows its start.
	res = run(t, read, map[string]any{"path": "long.txt"})
	if want := "     1\t" + strings.Repeat("x", 45-8) + "\n[line 1 is longer than the 45-byte read limit: only its start is shown; the next line is 2]\n"; res.Content != want || !res.Truncated {
		t.Errorf("long line = %q, want %q", res.Content, want)
	}
	if got := wantOK(t, run(t, read, map[string]any{"path": "long.txt", "offset_line": 2})); got != "     2\tnext\n" {
		t.Errorf("after the long line = %q", got)
	}
}

func TestReadFileHonoursContext(t *testing.T) {
	w := open(t, Options{}, map[string]string{"a.txt": "a\n"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := runCtx(t, ctx, toolNamed(t, w, "read_file"), map[string]any{"path": "a.txt"}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("read_file with a cancelled context: %v", err)
	}
}

func TestWriteFile(t *testing.T) {
	w := open(t, Options{MaxFileBytes: 16}, map[string]string{"old.txt": "old\n", "d/": "", "f.txt": "file"})
	write := toolNamed(t, w, "write_file")
	if got := wantOK(t, run(t, write, map[string]any{"path": "a/b/c.txt", "content": "new\n"})); got != "created a/b/c.txt (4 bytes)" {
		t.Errorf("write = %q", got)
	}
	if got := readBack(t, w, "a/b/c.txt"); got != "new\n" {
		t.Errorf("a/b/c.txt = %q", got)
	}
	if err := os.Chmod(filepath.Join(w.Root(), "old.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got := wantOK(t, run(t, write, map[string]any{"path": w.Root() + "/old.txt", "content": ""})); got != "replaced old.txt (0 bytes)" {
		t.Errorf("write = %q", got)
	}
	if got := readBack(t, w, "old.txt"); got != "" {
		t.Errorf("old.txt = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(w.Root(), "old.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("old.txt mode %v, want 0640 kept", fi.Mode().Perm())
	}
	wantErr(t, run(t, write, map[string]any{"path": "big.txt", "content": strings.Repeat("x", 17)}), vocab.CodeToolRefused, `"big.txt"`, "17 bytes", "16-byte limit")
	wantErr(t, run(t, write, map[string]any{"path": "d", "content": "x"}), vocab.CodeToolRefused, `"d"`, "directory")
	wantErr(t, run(t, write, map[string]any{"path": ".", "content": "x"}), vocab.CodeToolRefused, "workspace directory itself")
	wantErr(t, run(t, write, map[string]any{"path": "f.txt/x", "content": "x"}), vocab.CodeToolFailed, "f.txt/x")
	wantErr(t, run(t, write, map[string]any{"path": "x.txt"}), vocab.CodeToolBadArguments, `missing properties: ["content"]`)
	if _, err := os.Stat(filepath.Join(w.Root(), "big.txt")); err == nil {
		t.Errorf("big.txt was written")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := runCtx(t, ctx, write, map[string]any{"path": "late.txt", "content": "x"}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("write with a cancelled context: %v", err)
	}
	// No temporary files are left anywhere.
	filepath.WalkDir(w.Root(), func(p string, d os.DirEntry, err error) error {
		if strings.Contains(d.Name(), ".tmp-") || d.Name() == "late.txt" {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

func TestEditFile(t *testing.T) {
	w := open(t, Options{}, map[string]string{"f.go": "package f\n\nfunc A() {}\n\nfunc B() {}\n"})
	if err := os.Chmod(filepath.Join(w.Root(), "f.go"), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := toolNamed(t, w, "edit_file")
	before := readBack(t, w, "f.go")
	wantErr(t, run(t, edit, map[string]any{"path": "f.go", "old": "func C", "new": "x"}), vocab.CodeToolFailed, "not found", `"f.go"`)
	wantErr(t, run(t, edit, map[string]any{"path": "f.go", "old": "() {}", "new": "() { return }"}), vocab.CodeToolFailed, "occurs 2 times")
	wantErr(t, run(t, edit, map[string]any{"path": "f.go", "old": "", "new": "x"}), vocab.CodeToolBadArguments, `field "old": minLength`)
	wantErr(t, run(t, edit, map[string]any{"path": "f.go", "old": "A", "new": "A"}), vocab.CodeToolBadArguments, "the same")
	wantErr(t, run(t, edit, map[string]any{"path": "f.go", "old": "A"}), vocab.CodeToolBadArguments, `missing properties: ["new"]`)
	wantErr(t, run(t, edit, map[string]any{"path": "nope.go", "old": "A", "new": "B"}), vocab.CodeToolFailed, "does not exist")
	if got := readBack(t, w, "f.go"); got != before {
		t.Fatalf("failed edits changed the file: %q", got)
	}
	if got := wantOK(t, run(t, edit, map[string]any{"path": "f.go", "old": "func B() {}", "new": "func B() { A() }"})); got != "edited f.go: replaced 1 occurrence at line 5" {
		t.Errorf("edit = %q", got)
	}
	if got, want := readBack(t, w, "f.go"), "package f\n\nfunc A() {}\n\nfunc B() { A() }\n"; got != want {
		t.Errorf("f.go = %q, want %q", got, want)
	}
	if fi, _ := os.Stat(filepath.Join(w.Root(), "f.go")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 kept", fi.Mode().Perm())
	}
	small := open(t, Options{MaxFileBytes: 8}, map[string]string{"big.txt": "0123456789"})
	wantErr(t, run(t, toolNamed(t, small, "edit_file"), map[string]any{"path": "big.txt", "old": "0", "new": "x"}), vocab.CodeToolRefused, "10 bytes", "8-byte limit")
}
