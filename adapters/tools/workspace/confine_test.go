//go:build unix

package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// confined builds a workspace with symlinks that point out of it or
// around inside it, and a secret 0600 file outside it.
func confined(t *testing.T) (w *Workspace, outside string) {
	t.Helper()
	outside = t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w = open(t, Options{}, map[string]string{"hello.txt": "hello\n", "sub/a.txt": "in sub\n"})
	for link, target := range map[string]string{
		"rootlink":   "/",              // a symlink to /
		"dirlink":    "sub",            // a symlinked directory inside the workspace
		"secretlink": secret,           // a symlink to a 0600 file outside
		"outlink":    outside,          // a symlinked directory outside
		"filelink":   "hello.txt",      // a symlink to a file inside
		"sub/up":     "../../",         // a relative link climbing out
		"dangling":   "does/not/exist", // a link to nothing
	} {
		if err := os.Symlink(target, filepath.Join(w.Root(), link)); err != nil {
			t.Fatal(err)
		}
	}
	return w, outside
}

func TestConfinementRefusesEscapes(t *testing.T) {
	w, outside := confined(t)
	secret := filepath.Join(outside, "secret.txt")
	for _, tc := range []struct{ path, why string }{
		{"../../etc/passwd", "leaves the workspace"},
		{"..", "leaves the workspace"},
		{"sub/../../x", "leaves the workspace"},
		{"/etc/passwd", "absolute path outside the workspace"},
		{secret, "absolute path outside the workspace"},
		{w.Root() + "/../x", "absolute path outside the workspace"},
		{"rootlink/etc/passwd", `component "rootlink" is a symbolic link`},
		{"rootlink", "is a symbolic link"},
		{"dirlink/a.txt", `component "dirlink" is a symbolic link`},
		{"dirlink", "is a symbolic link"},
		{"secretlink", "is a symbolic link"},
		{"outlink/secret.txt", `component "outlink" is a symbolic link`},
		{"filelink", "is a symbolic link"},
		{"sub/up/x", `component "sub/up" is a symbolic link`},
		{"dangling", "is a symbolic link"},
		{w.Root() + "/dirlink/a.txt", `component "dirlink" is a symbolic link`},
	} {
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"read_file", map[string]any{"path": tc.path}},
			{"write_file", map[string]any{"path": tc.path, "content": "pwned\n"}},
			{"edit_file", map[string]any{"path": tc.path, "old": "TOPSECRET", "new": "pwned"}},
			{"list_dir", map[string]any{"path": tc.path, "recursive": true}},
			{"grep", map[string]any{"pattern": ".", "path": tc.path}},
		} {
			res := run(t, toolNamed(t, w, call.tool), call.args)
			wantErr(t, res, vocab.CodeToolRefused, tc.path, tc.why)
			if strings.Contains(res.Content, "TOPSECRET") || strings.Contains(res.Content, "root:") {
				t.Errorf("%s %q leaked: %s", call.tool, tc.path, res.Content)
			}
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "TOPSECRET\n" {
		t.Errorf("secret is now %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "x")); err == nil {
		t.Errorf("a file was created outside the workspace")
	}
	if fi, err := os.Lstat(filepath.Join(w.Root(), "dangling")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("dangling link replaced: %v %v", fi, err)
	}
}

func TestConfinementAllowsInsidePaths(t *testing.T) {
	w, _ := confined(t)
	read := toolNamed(t, w, "read_file")
	for _, p := range []string{"hello.txt", "./hello.txt", "sub/../hello.txt", w.Root() + "/hello.txt", w.Root() + "/sub/../hello.txt"} {
		if got := wantOK(t, run(t, read, map[string]any{"path": p})); got != "     1\thello\n" {
			t.Errorf("read_file %q = %q", p, got)
		}
	}
	// Walks list links without following them, and grep does not search
	// through them.
	list := wantOK(t, run(t, toolNamed(t, w, "list_dir"), map[string]any{"recursive": true}))
	want := "dangling@\ndirlink@\nfilelink@\nhello.txt\noutlink@\nrootlink@\nsecretlink@\nsub/\nsub/a.txt\nsub/up@\n"
	if list != want {
		t.Errorf("list_dir:\n%s\nwant:\n%s", list, want)
	}
	grep := wantOK(t, run(t, toolNamed(t, w, "grep"), map[string]any{"pattern": "TOPSECRET|in sub|hello|root:"}))
	if want := "hello.txt:1: hello\nsub/a.txt:1: in sub\n"; grep != want {
		t.Errorf("grep:\n%s\nwant:\n%s", grep, want)
	}
}

// TestRootAloneConfines turns off the lexical and symlink checks and shows
// that os.Root still refuses every escape: the second layer holds on its
// own. (It does follow links that stay inside, which is why the first
// layer refuses those too.)
func TestRootAloneConfines(t *testing.T) {
	w, outside := confined(t)
	w.noLinkCheck = true
	read := toolNamed(t, w, "read_file")
	for _, p := range []string{"../../etc/passwd", "rootlink/etc/passwd", "secretlink", "outlink/secret.txt", "sub/up/x"} {
		res := run(t, read, map[string]any{"path": p})
		wantErr(t, res, vocab.CodeToolRefused, p, "escapes")
	}
	if _, err := w.root.Open(filepath.Join(outside, "secret.txt")); err == nil {
		t.Errorf("os.Root opened an absolute path outside it")
	}
	if got := wantOK(t, run(t, read, map[string]any{"path": "dirlink/a.txt"})); got != "     1\tin sub\n" {
		t.Errorf("dirlink/a.txt through os.Root alone = %q", got)
	}
}

// A workspace opened through a symlinked path accepts absolute paths
// under either spelling.
func TestWorkspaceThroughSymlink(t *testing.T) {
	real := t.TempDir()
	writeTree(t, real, map[string]string{"f.txt": "x\n"})
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	w, err := Open(link, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	read := toolNamed(t, w, "read_file")
	for _, p := range []string{link + "/f.txt", real + "/f.txt"} {
		wantOK(t, run(t, read, map[string]any{"path": p}))
	}
}

// FIFOs and other special files are refused (or skipped by walks)
// without blocking: nothing ever opens the FIFO's other end.
func TestFIFODoesNotHang(t *testing.T) {
	w := open(t, Options{}, map[string]string{"a.txt": "fifo? no\n"})
	if err := mkfifo(filepath.Join(w.Root(), "pipe")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "pipe"}},
		{"edit_file", map[string]any{"path": "pipe", "old": "a", "new": "b"}},
		{"write_file", map[string]any{"path": "pipe", "content": "x"}},
		{"grep", map[string]any{"pattern": "x", "path": "pipe"}},
	} {
		wantErr(t, run(t, toolNamed(t, w, c.tool), c.args), vocab.CodeToolRefused, `"pipe"`, "named pipe")
	}
	if got := wantOK(t, run(t, toolNamed(t, w, "grep"), map[string]any{"pattern": "fifo"})); got != "a.txt:1: fifo? no\n" {
		t.Errorf("grep over a dir with a FIFO = %q", got)
	}
	if got := wantOK(t, run(t, toolNamed(t, w, "list_dir"), map[string]any{})); got != "a.txt\npipe|\n" {
		t.Errorf("list_dir = %q", got)
	}
	wantErr(t, run(t, toolNamed(t, w, "list_dir"), map[string]any{"path": "pipe"}), vocab.CodeToolFailed, "not a directory")
	if fi, err := os.Lstat(filepath.Join(w.Root(), "pipe")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
}
