//go:build unix

package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

func TestRunCommandExitCodes(t *testing.T) {
	w := open(t, Options{}, map[string]string{"marker.txt": "in the workspace\n"})
	rc := w.RunCommand(CommandOptions{})
	res := run(t, rc, map[string]any{"command": "echo hi; cat marker.txt"})
	if got := wantOK(t, res); got != "hi\nin the workspace\n[exit code 0]\n" {
		t.Errorf("echo = %q", got)
	}
	res = run(t, rc, map[string]any{"command": "echo out; echo oops >&2; exit 3"})
	wantErr(t, res, vocab.CodeToolFailed, "out\n", "oops\n", "[exit code 3]")
	res = run(t, rc, map[string]any{"command": "true"})
	if got := wantOK(t, res); got != "(no output)\n[exit code 0]\n" {
		t.Errorf("true = %q", got)
	}
	res = run(t, rc, map[string]any{"command": "printf partial"})
	if got := wantOK(t, res); got != "partial\n[exit code 0]\n" {
		t.Errorf("printf = %q", got)
	}
	res = run(t, rc, map[string]any{"command": "kill -9 $$"})
	wantErr(t, res, vocab.CodeToolFailed, "[ended by signal killed]")
	res = run(t, rc, map[string]any{"command": "read x; echo \"read:$x:$?\""})
	if got := wantOK(t, res); got != "read::1\n[exit code 0]\n" {
		t.Errorf("stdin is not the null device: %q", got)
	}
	wantErr(t, run(t, rc, map[string]any{"command": "  "}), vocab.CodeToolBadArguments, "command is empty")
	wantErr(t, run(t, rc, map[string]any{}), vocab.CodeToolBadArguments, `missing properties: ["command"]`)
	bad := w.RunCommand(CommandOptions{Shell: []string{filepath.Join(w.Root(), "no-such-shell")}})
	wantErr(t, run(t, bad, map[string]any{"command": "x"}), vocab.CodeToolFailed, "could not start")
}

func TestRunCommandEnvAllowlist(t *testing.T) {
	t.Setenv("LOOPCHART_TEST_SECRET", "s3cret")
	w := open(t, Options{}, nil)
	cmd := map[string]any{"command": `echo "[$LOOPCHART_TEST_SECRET]"`}
	if got := wantOK(t, run(t, w.RunCommand(CommandOptions{}), cmd)); got != "[]\n[exit code 0]\n" {
		t.Errorf("default env leaked: %q", got)
	}
	if got := wantOK(t, run(t, w.RunCommand(CommandOptions{Env: []string{"LOOPCHART_TEST_SECRET"}}), cmd)); got != "[s3cret]\n[exit code 0]\n" {
		t.Errorf("allowed env: %q", got)
	}
	if got := wantOK(t, run(t, w.RunCommand(CommandOptions{Env: []string{}, Shell: []string{"/bin/sh", "-c"}}), map[string]any{"command": "env | wc -l | tr -d ' '"})); got != "1\n[exit code 0]\n" && got != "0\n[exit code 0]\n" {
		// sh may export PWD itself; nothing else.
		t.Errorf("empty env: %q", got)
	}
}

func TestRunCommandOutputHeadAndTail(t *testing.T) {
	w := open(t, Options{}, nil)
	var full strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}
	all := full.String()
	res := run(t, w.RunCommand(CommandOptions{MaxOutput: 100}), map[string]any{
		"command": `i=1; while [ $i -le 2000 ]; do echo $i; [ $((i % 500)) = 0 ] && echo $i >&2; i=$((i+1)); done`,
	})
	// stderr interleaves, so count on the total only.
	total := len(all) + len("500\n1000\n1500\n2000\n")
	want := fmt.Sprintf("%s\n[... %d bytes of output dropped ...]\n", all[:50], total-100)
	got := wantOK(t, res)
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "\n1999\n2000\n2000\n[exit code 0]\n") || !res.Truncated {
		t.Errorf("bounded output = %q (truncated %v), want prefix %q", got, res.Truncated, want)
	}
	if body := strings.TrimSuffix(strings.TrimPrefix(got, want), "[exit code 0]\n"); len(body) != 50 {
		t.Errorf("tail is %d bytes, want 50: %q", len(body), body)
	}
}

func TestHeadTail(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{0, 1, 2, 7, 64} {
		for range 50 {
			b := newHeadTail(max)
			var all []byte
			for range r.IntN(20) {
				p := make([]byte, r.IntN(3*max+3))
				for i := range p {
					p[i] = 'a' + byte(r.IntN(26))
				}
				all = append(all, p...)
				b.Write(p)
			}
			got, dropped := b.Text()
			want, wantDropped := string(all), int64(0)
			if len(all) > max {
				h, tl := max/2, max-max/2
				wantDropped = int64(len(all) - max)
				want = fmt.Sprintf("%s\n[... %d bytes of output dropped ...]\n%s", all[:h], wantDropped, all[len(all)-tl:])
			}
			if got != want || dropped != wantDropped {
				t.Fatalf("max %d, input %q: got %q (%d dropped), want %q (%d)", max, all, got, dropped, want, wantDropped)
			}
		}
	}
}

func TestRunCommandTimeout(t *testing.T) {
	w := open(t, Options{}, nil)
	start := time.Now()
	res := run(t, w.RunCommand(CommandOptions{Timeout: 200 * time.Millisecond, Grace: 30 * time.Second}), map[string]any{"command": "echo started; sleep 100"})
	wantErr(t, res, vocab.CodeToolFailed, "started\n", "[timed out after 200ms: the process group was stopped]")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

// openFIFO makes a FIFO in w and opens its reading end once a command
// opens it for writing; it fails the test if the command returns first
// (in done) or nothing opens it within 20s.
// makeFIFO makes the FIFO name in w, before the command that writes it
// starts (else its shell's redirection makes a plain file first).
func makeFIFO(t *testing.T, w *Workspace, name string) {
	t.Helper()
	if err := mkfifo(filepath.Join(w.Root(), name)); err != nil {
		t.Fatal(err)
	}
}

// openFIFO opens the FIFO name (made with makeFIFO) for reading, which
// returns once the command opened it for writing.
func openFIFO(t *testing.T, w *Workspace, name string, done <-chan struct{}) *os.File {
	t.Helper()
	p := filepath.Join(w.Root(), name)
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(p) // blocks until a writer opens it
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	select {
	case f := <-opened:
		if f == nil {
			t.FailNow()
		}
		return f
	case <-done:
		// Unblock the opener so it does not leak, then fail.
		if wf, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			wf.Close()
		}
		if f := <-opened; f != nil {
			f.Close()
		}
		t.Fatal("the command returned before opening the FIFO")
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not open the FIFO within 20s")
	}
	return nil
}

// waitEOF reads f to its end, which comes when every process holding its
// writing end has exited, and fails the test if that takes over 20s.
func waitEOF(t *testing.T, f *os.File) {
	t.Helper()
	eof := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, f)
		eof <- err
	}()
	select {
	case err := <-eof:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(20 * time.Second):
		f.Close()
		<-eof
		t.Fatal("a process of the command's group is still alive 20s after it returned")
	}
	f.Close()
}

// Cancelling the call stops the whole process group, a grandchild too,
// promptly: long before the grace period (30s here) after which the
// leader alone would be killed and the pipes closed.
func TestRunCommandCancelKillsProcessGroup(t *testing.T) {
	w := open(t, Options{}, nil)
	rc := w.RunCommand(CommandOptions{Grace: 30 * time.Second})
	makeFIFO(t, w, "alive")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		_, runErr = rc.Run(ctx, vocab.ToolCall{ID: "c", Name: "run_command", Args: args(t, map[string]any{
			"command": `sh -c 'sleep 100 >alive & sleep 100 >alive'`,
		})}, nil)
	}()
	alive := openFIFO(t, w, "alive", done) // a sleep is running
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("run_command did not return within 20s of the cancel")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancel took %v: the group did not get SIGTERM", d)
	}
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("cancelled run returned %v, want context.Canceled", runErr)
	}
	waitEOF(t, alive) // both sleeps are gone
}

// A background process holding the output pipes after the command exits
// does not hang the call past the grace period (cmd.WaitDelay), and is
// killed with its group.
func TestRunCommandBackgroundHoldingPipes(t *testing.T) {
	w := open(t, Options{}, nil)
	rc := w.RunCommand(CommandOptions{Grace: 300 * time.Millisecond})
	makeFIFO(t, w, "alive")
	done := make(chan struct{})
	var res vocab.ToolResult
	var runErr error
	go func() {
		defer close(done)
		res, runErr = rc.Run(t.Context(), vocab.ToolCall{ID: "c", Name: "run_command", Args: args(t, map[string]any{
			"command": `sleep 100 >alive & echo done`,
		})}, nil)
	}()
	alive := openFIFO(t, w, "alive", done)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("run_command hung on a background process holding its pipes")
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	if got := wantOK(t, res); got != "done\n[a background process kept the output open after the command exited; it was killed]\n[exit code 0]\n" {
		t.Errorf("result = %q", got)
	}
	waitEOF(t, alive)
}

func TestRunCommandOptions(t *testing.T) {
	for _, opt := range []CommandOptions{
		{Timeout: -1}, {Grace: -1}, {MaxOutput: -1}, {Shell: []string{}}, {Shell: []string{""}}, {Env: []string{"A=B"}},
	} {
		if err := opt.Validate(); !errors.Is(err, vocab.CodeBadInput.Err()) {
			t.Errorf("Validate(%+v) = %v", opt, err)
		}
		func() {
			defer func() {
				if p := recover(); p == nil {
					t.Errorf("RunCommand(%+v) did not panic", opt)
				}
			}()
			(&Workspace{}).RunCommand(opt)
		}()
	}
	if err := (CommandOptions{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	w := open(t, Options{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := runCtx(t, ctx, w.RunCommand(CommandOptions{}), map[string]any{"command": "touch ran"}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.Root(), "ran")); err == nil {
		t.Errorf("the command ran after its context was cancelled")
	}
	if d := w.RunCommand(CommandOptions{}).Spec().Description; !strings.Contains(d, strconv.Itoa(DefaultMaxOutput)) || !strings.Contains(d, "/bin/sh -c") {
		t.Errorf("description: %s", d)
	}
}
