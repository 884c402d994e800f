package servertest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer a subprocess writes and the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLctemporalEndToEnd builds cmd/lctemporal and runs it as a newcomer
// would: a worker process and a run process against the in-process server.
// The run must show the demo script's word_count call, its result and the
// final answer; the worker must stop cleanly on SIGINT.
func TestLctemporalEndToEnd(t *testing.T) {
	s := server(t)
	ctx := ctxT(t, 5*time.Minute)

	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build cmd/lctemporal: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "lctemporal")
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/lctemporal")
	build.Dir = ".." // adapters/temporal, where go.work is
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lctemporal: %v\n%s", err, out)
	}

	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "go.mod"), []byte("module example.com/demo\n\ngo 1.26\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	content := filepath.Join(t.TempDir(), "content.db")
	const queue = "lctemporal-e2e"
	conn := []string{"-hostport", s.GetFrontendHostPort(), "-namespace", s.GetDefaultNamespace(), "-queue", queue}

	// The worker: wait for its readiness line.
	wk := exec.CommandContext(ctx, bin, append(append([]string{"worker"}, conn...), "-content", content, "-workspace", ws)...)
	var wkErr lockedBuffer
	wk.Stderr = &wkErr
	wkOut, err := wk.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	outDone := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(wkOut)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "worker ready") {
				ready <- sc.Text()
			}
		}
		_, _ = io.Copy(io.Discard, wkOut)
		outDone <- lines
	}()
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = wk.Process.Kill()
			<-outDone
			_ = wk.Wait()
		}
	})
	select {
	case line := <-ready:
		if want := "worker ready on queue " + queue; line != want {
			t.Errorf("readiness line %q, want %q", line, want)
		}
	case lines := <-outDone:
		waited = true
		err := wk.Wait()
		t.Fatalf("the worker ended before it was ready (%v); stdout %q; stderr:\n%s", err, lines, wkErr.String())
	case <-ctx.Done():
		t.Fatalf("no readiness line from the worker; stderr:\n%s", wkErr.String())
	}

	// One session, one prompt.
	var runOut, runErr bytes.Buffer
	rn := exec.CommandContext(ctx, bin, append(append([]string{"run"}, conn...),
		"-session", "lctemporal-e2e-s1", "-prompt", "Count the words of go.mod.", "-timeout", "2m")...)
	rn.Stdout, rn.Stderr = &runOut, &runErr
	if err := rn.Run(); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s\nworker stderr:\n%s", err, runOut.String(), runErr.String(), wkErr.String())
	}
	t.Logf("run's output:\n%s", runOut.String())
	for _, want := range []string{
		"session lctemporal-e2e-s1 started on queue " + queue,
		"user: Count the words of go.mod.",
		`assistant: calls word_count {"path":"go.mod"}`,
		"tool word_count: 4 words",
		"assistant: The word_count tool ran on a Temporal worker and counted the words of go.mod",
		": completed{steps=2}",
		"session lctemporal-e2e-s1 closed:",
	} {
		if !strings.Contains(runOut.String(), want) {
			t.Errorf("run's stdout lacks %q", want)
		}
	}

	// The session id is taken now, by a closed workflow: run refuses it.
	runOut.Reset()
	runErr.Reset()
	dup := exec.CommandContext(ctx, bin, append(append([]string{"run"}, conn...),
		"-session", "lctemporal-e2e-s1", "-prompt", "again")...)
	dup.Stdout, dup.Stderr = &runOut, &runErr
	if err := dup.Run(); dup.ProcessState == nil || dup.ProcessState.ExitCode() != 1 {
		t.Errorf("run of a taken session id: %v, want exit status 1", err)
	}
	if want := "session lctemporal-e2e-s1 already exists"; !strings.Contains(runErr.String(), want) {
		t.Errorf("run of a taken session id: stderr lacks %q:\n%s", want, runErr.String())
	}

	// SIGINT stops the worker with status 0.
	if err := wk.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	lines := <-outDone
	waited = true
	if err := wk.Wait(); err != nil {
		t.Fatalf("worker after SIGINT: %v (want exit status 0); stderr:\n%s", err, wkErr.String())
	}
	if len(lines) != 1 {
		t.Errorf("worker stdout %q, want only the readiness line", lines)
	}
	for _, want := range []string{`model calls word_count {"path":"go.mod"}`, "lctemporal worker: stopped"} {
		if !strings.Contains(wkErr.String(), want) {
			t.Errorf("worker stderr lacks %q:\n%s", want, wkErr.String())
		}
	}
	if _, err := os.Stat(content); err != nil {
		t.Errorf("content store: %v", err)
	}
}
