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

func tree(t *testing.T, opt Options) *Workspace {
	w := open(t, opt, map[string]string{
		"a.txt":       "alpha\nbeta\n",
		"b/c.go":      "package c\n// TODO: alpha\n",
		"b/d/e.txt":   "gamma alpha\n",
		"b/empty/":    "",
		".git/config": "alpha in git\n",
		"bin.dat":     "alpha\x00binary",
	})
	if err := os.Symlink("a.txt", filepath.Join(w.Root(), "link")); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestListDir(t *testing.T) {
	w := tree(t, Options{})
	list := toolNamed(t, w, "list_dir")
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, ".git/\na.txt\nb/\nbin.dat\nlink@\n"},
		{map[string]any{"path": ""}, ".git/\na.txt\nb/\nbin.dat\nlink@\n"},
		{map[string]any{"path": ".", "recursive": true}, ".git/  (not entered)\na.txt\nb/\nb/c.go\nb/d/\nb/d/e.txt\nb/empty/\nbin.dat\nlink@\n"},
		{map[string]any{"path": "b"}, "b/c.go\nb/d/\nb/empty/\n"},
		{map[string]any{"path": w.Root() + "/b/d/"}, "b/d/e.txt\n"},
		{map[string]any{"path": ".git"}, ".git/config\n"},
		{map[string]any{"path": "b/empty"}, "(b/empty is empty)\n"},
	} {
		res := run(t, list, tc.args)
		if got := wantOK(t, res); got != tc.want {
			t.Errorf("list_dir %v =\n%s\nwant:\n%s", tc.args, got, tc.want)
		}
	}
	wantErr(t, run(t, list, map[string]any{"path": "a.txt"}), vocab.CodeToolFailed, `"a.txt" is not a directory`)
	wantErr(t, run(t, list, map[string]any{"path": "nope"}), vocab.CodeToolFailed, `"nope" does not exist`)
	wantErr(t, run(t, list, map[string]any{"recursive": "yes"}), vocab.CodeToolBadArguments, `want one of "boolean, null"`)

	// Bounded.
	small := tree(t, Options{MaxListEntries: 3})
	res := run(t, toolNamed(t, small, "list_dir"), map[string]any{"recursive": true})
	if want := ".git/  (not entered)\na.txt\nb/\n[listing cut at 3 entries: list a subdirectory, or without recursive]\n"; res.Content != want || !res.Truncated {
		t.Errorf("bounded list_dir = %q (truncated %v)", res.Content, res.Truncated)
	}
	// SkipDirs can be emptied.
	all := tree(t, Options{SkipDirs: []string{}})
	if got := wantOK(t, run(t, toolNamed(t, all, "list_dir"), map[string]any{"recursive": true})); !strings.HasPrefix(got, ".git/\n.git/config\n") {
		t.Errorf("list_dir without SkipDirs = %q", got)
	}
}

func TestWalksReportUnreadableDirectories(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads directories without permission")
	}
	w := open(t, Options{}, map[string]string{"a/locked/x.txt": "needle\n", "a/open/y.txt": "needle\n"})
	locked := filepath.Join(w.Root(), "a", "locked")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(locked, 0o755) })
	got := wantOK(t, run(t, toolNamed(t, w, "list_dir"), map[string]any{"recursive": true}))
	if want := "a/\na/locked/  (not listed: \"a/locked\": permission denied)\na/open/\na/open/y.txt\n"; got != want {
		t.Errorf("list_dir =\n%s\nwant:\n%s", got, want)
	}
	got = wantOK(t, run(t, toolNamed(t, w, "grep"), map[string]any{"pattern": "needle"}))
	if want := "a/open/y.txt:1: needle\n[skipped: 1 unreadable directory]\n"; got != want {
		t.Errorf("grep = %q, want %q", got, want)
	}
}

func TestListDirHonoursContext(t *testing.T) {
	w := tree(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := runCtx(t, ctx, toolNamed(t, w, "list_dir"), map[string]any{"recursive": true}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("list_dir with a cancelled context: %v", err)
	}
	// Cancelled while walking: the walk stops at the next entry.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	n := 0
	err := w.walk(ctx, ".", true, func(e entry) error {
		n++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("walk after cancel: err %v after %d entries, want context.Canceled after 1", err, n)
	}
}

func TestGrep(t *testing.T) {
	w := tree(t, Options{})
	grep := toolNamed(t, w, "grep")
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"pattern": "alpha"}, "a.txt:1: alpha\nb/c.go:2: // TODO: alpha\nb/d/e.txt:1: gamma alpha\n[skipped: 1 binary file]\n"},
		{map[string]any{"pattern": "alpha", "glob": "*.txt"}, "a.txt:1: alpha\nb/d/e.txt:1: gamma alpha\n"},
		{map[string]any{"pattern": "alpha", "glob": "b/*/*.txt"}, "b/d/e.txt:1: gamma alpha\n"},
		{map[string]any{"pattern": "(?i)ALPHA", "path": "b"}, "b/c.go:2: // TODO: alpha\nb/d/e.txt:1: gamma alpha\n"},
		{map[string]any{"pattern": "^beta$", "path": "a.txt"}, "a.txt:2: beta\n"},
		{map[string]any{"pattern": "alpha", "path": ".git"}, ".git/config:1: alpha in git\n"},
		{map[string]any{"pattern": "zeta"}, "no matches for \"zeta\" in . (4 files searched)\n[skipped: 1 binary file]\n"},
	} {
		res := run(t, grep, tc.args)
		if got := wantOK(t, res); got != tc.want {
			t.Errorf("grep %v =\n%s\nwant:\n%s", tc.args, got, tc.want)
		}
	}
	wantErr(t, run(t, grep, map[string]any{"pattern": "a(b"}), vocab.CodeToolBadArguments, "not a valid Go regular expression")
	wantErr(t, run(t, grep, map[string]any{"pattern": "a", "glob": "[x"}), vocab.CodeToolBadArguments, `glob "[x"`)
	wantErr(t, run(t, grep, map[string]any{"pattern": ""}), vocab.CodeToolBadArguments, `field "pattern": minLength`)
	wantErr(t, run(t, grep, map[string]any{"pattern": "a", "path": "link"}), vocab.CodeToolRefused, "symbolic link")
	wantErr(t, run(t, grep, map[string]any{"pattern": "a", "path": "nope"}), vocab.CodeToolFailed, "does not exist")
}

func TestGrepBounds(t *testing.T) {
	lines := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "match %d\n", i+1)
		}
		return b.String()
	}
	w := open(t, Options{MaxGrepMatches: 5, MaxFileBytes: 100}, map[string]string{
		"exact.txt": lines(5),
		"more.txt":  lines(6),
		"huge.txt":  strings.Repeat("match\n", 20),
	})
	grep := toolNamed(t, w, "grep")
	res := run(t, grep, map[string]any{"pattern": "match", "path": "exact.txt"})
	if res.Truncated || strings.Contains(res.Content, "stopped") || strings.Count(res.Content, "\n") != 5 {
		t.Errorf("exactly the limit: %q", res.Content)
	}
	res = run(t, grep, map[string]any{"pattern": "match", "path": "more.txt"})
	if want := "more.txt:1: match 1\nmore.txt:2: match 2\nmore.txt:3: match 3\nmore.txt:4: match 4\nmore.txt:5: match 5\n" +
		"[stopped after 5 matches: narrow the pattern, path or glob]\n"; res.Content != want || !res.Truncated {
		t.Errorf("over the limit: %q (truncated %v)", res.Content, res.Truncated)
	}
	// huge.txt is over MaxFileBytes; long.txt has a line too long to
	// search.
	res = run(t, grep, map[string]any{"pattern": "zzz", "glob": "huge.txt"})
	if want := "no matches for \"zzz\" in . (0 files searched)\n[skipped: 1 file over 100 bytes]\n"; res.Content != want {
		t.Errorf("huge: %q", res.Content)
	}
	big := open(t, Options{}, map[string]string{"long.txt": "match 1\n" + strings.Repeat("x", grepMaxLine+1) + "\nmatch 3\n"})
	res = run(t, toolNamed(t, big, "grep"), map[string]any{"pattern": "match"})
	if want := "long.txt:1: match 1\n[skipped: 1 file with a line over 1048576 bytes (searched up to it)]\n"; res.Content != want {
		t.Errorf("long line: %q", res.Content)
	}
	// A matching line is shown cut.
	wide := open(t, Options{}, map[string]string{"w.txt": strings.Repeat("y", 1000) + "\n"})
	res = run(t, toolNamed(t, wide, "grep"), map[string]any{"pattern": "y"})
	if want := "w.txt:1: " + strings.Repeat("y", grepShowLine) + "…\n"; res.Content != want {
		t.Errorf("wide line: %q", res.Content)
	}
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n          int
		what, want string
	}{
		{1, "binary file", "1 binary file"},
		{2, "binary file", "2 binary files"},
		{3, "file with a line over 9 bytes (searched up to it)", "3 files with a line over 9 bytes (searched up to it)"},
		{0, "unreadable directory", "0 unreadable directories"},
	} {
		if got := plural(tc.n, tc.what); got != tc.want {
			t.Errorf("plural(%d, %q) = %q, want %q", tc.n, tc.what, got, tc.want)
		}
	}
}

func TestGrepStopsWhenCancelled(t *testing.T) {
	files := map[string]string{}
	for i := range 3 * grepProgressEvery {
		files[fmt.Sprintf("f%04d.txt", i)] = "needle\n"
	}
	w := open(t, Options{MaxGrepMatches: 10000}, files)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var reports []string
	_, err := runCtx(t, ctx, toolNamed(t, w, "grep"), map[string]any{"pattern": "needle"}, func(s string) {
		reports = append(reports, s)
		cancel() // cancel at the first report, after 100 files
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("grep after cancel returned %v, want context.Canceled", err)
	}
	if len(reports) != 1 || reports[0] != "grep: searched 100 files, 100 matches" {
		t.Errorf("progress after cancel: %q; the search went on", reports)
	}
	// Without the cancel it would have reported three times.
	reports = nil
	res, err := runCtx(t, t.Context(), toolNamed(t, w, "grep"), map[string]any{"pattern": "needle"}, func(s string) { reports = append(reports, s) })
	if err != nil || len(reports) != 3 || strings.Count(res.Content, "\n") != 300 {
		t.Errorf("uncancelled grep: %v, %d reports, %d lines", err, len(reports), strings.Count(res.Content, "\n"))
	}
}
