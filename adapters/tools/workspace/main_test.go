package workspace

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/vocab"
)

// TestMain fails the package if a goroutine outlives the tests: every
// command, file and walk a tool starts must be finished when it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open makes a workspace over a fresh temporary directory holding files
// (path → content; a path ending in / is a directory).
func open(t *testing.T, opt Options, files map[string]string) *Workspace {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	w, err := Open(dir, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// toolNamed returns w's file tool called name.
func toolNamed(t *testing.T, w *Workspace, name string) vocab.Tool {
	t.Helper()
	for _, tl := range w.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

// args encodes a (a string is taken as raw JSON).
func args(t *testing.T, a any) json.RawMessage {
	t.Helper()
	if s, ok := a.(string); ok {
		return json.RawMessage(s)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run calls tl with a under a watchdog: a tool that blocks (on a FIFO,
// say) fails the test instead of hanging it. A Go error fails the test.
func run(t *testing.T, tl vocab.Tool, a any) vocab.ToolResult {
	t.Helper()
	res, err := runCtx(t, t.Context(), tl, a, nil)
	if err != nil {
		t.Fatalf("%s(%s): Go error %v", tl.Spec().Name, args(t, a), err)
	}
	return res
}

func runCtx(t *testing.T, ctx context.Context, tl vocab.Tool, a any, progress func(string)) (vocab.ToolResult, error) {
	t.Helper()
	type out struct {
		res vocab.ToolResult
		err error
	}
	done := make(chan out, 1)
	call := vocab.ToolCall{ID: "c1", Name: tl.Spec().Name, Args: args(t, a)}
	go func() {
		res, err := tl.Run(ctx, call, progress)
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s(%s) did not return within 20s", call.Name, call.Args)
		return vocab.ToolResult{}, nil
	}
}

// wantOK fails unless res is a success.
func wantOK(t *testing.T, res vocab.ToolResult) string {
	t.Helper()
	if res.IsError {
		t.Fatalf("unexpected error result (%s): %s", res.Code, res.Content)
	}
	return res.Content
}

// wantErr fails unless res is an error result with code and a content
// holding every one of subs.
func wantErr(t *testing.T, res vocab.ToolResult, code vocab.Code, subs ...string) {
	t.Helper()
	if !res.IsError || res.Code != code {
		t.Fatalf("want an error result with code %s, got IsError=%v code=%q: %s", code, res.IsError, res.Code, res.Content)
	}
	for _, s := range subs {
		if !strings.Contains(res.Content, s) {
			t.Errorf("error result %q does not mention %q", res.Content, s)
		}
	}
}

func readBack(t *testing.T, w *Workspace, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.Root(), filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
