package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// TestTwoStoresOneFile: two Stores on one file behave as two processes.
// flock locks belong to open file descriptions, so the second Store's
// probe of the first's lock file fails while the first is open, even in
// the same process.
func TestTwoStoresOneFile(t *testing.T) {
	ctx := context.Background()
	a, path := openTemp(t, Options{})
	b := open(t, path, Options{})
	defer b.Close()
	if a.holder == b.holder {
		t.Fatal("two Stores share a holder id")
	}
	ca := mustClaim(t, a, sessA, runA, true)
	evs := storetest.Fixture(sessA, 12, t0)
	mustAppend(t, a, sessA, ca, evs[:3])

	_, _, err := b.Claim(ctx, sessA, runB, false)
	wantCode(t, err, vocab.CodeClaimed, "Claim of a session a live Store holds")
	if !errors.Is(err, store.ErrClaimed) {
		t.Fatalf("%v is not store.ErrClaimed", err)
	}
	// b's writer sees a's appends (its cache is reloaded when the file
	// changes): a claim after a release starts at a's head.
	mustAppend(t, a, sessA, ca, evs[3:5])
	if err := a.Release(ctx, sessA, ca); err != nil {
		t.Fatal(err)
	}
	cb, head, err := b.Claim(ctx, sessA, runB, false)
	if err != nil || head != 5 || cb.Epoch != ca.Epoch+1 {
		t.Fatalf("Claim after a release: %+v head %d, %v; want epoch %d head 5", cb, head, err, ca.Epoch+1)
	}
	mustAppend(t, b, sessA, cb, evs[5:7])
	// a's writer knew sessA at head 5 under its own claim: it must see
	// b's claim and head in the file, not its memory.
	wantCode(t, a.Append(ctx, sessA, ca, evs[7:8]), vocab.CodeClaimLost, "an append of the first Store after the second took over")
	_, _, err = a.Claim(ctx, sessA, runA, false)
	wantCode(t, err, vocab.CodeClaimed, "Claim back while the second Store holds it")

	// The second Store "dies": its lock goes away (the kernel drops the
	// lock of a dead process) but its claims stay in the file.
	b.lock.Close()
	cTake, head, err := a.Claim(ctx, sessA, runA, false)
	if err != nil || head != 7 || cTake.Epoch != cb.Epoch+1 {
		t.Fatalf("Claim of a dead holder's session: %+v head %d, %v; want epoch %d head 7", cTake, head, err, cb.Epoch+1)
	}
	if _, err := os.Stat(b.lock.Name()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead holder's lock file is still there: %v", err)
	}
	wantCode(t, b.Append(ctx, sessA, cb, evs[7:8]), vocab.CodeClaimLost, "an append of the taken-over Store")
	mustAppend(t, a, sessA, cTake, evs[7:])
	if seqs, err := readAll(b, sessA); err != nil || len(seqs) != 12 {
		t.Fatalf("the other Store reads %v, %v", seqs, err)
	}
}

// TestCloseReleases: Close gives up the Store's claims and removes its
// lock file, so that another Store claims at once.
func TestCloseReleases(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "loop.db")
	a := open(t, path, Options{})
	ca := mustClaim(t, a, sessA, runA, true)
	mustAppend(t, a, sessA, ca, storetest.Fixture(sessA, 2, t0))
	lock := a.lock.Name()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after Close: %v", err)
	}
	b := open(t, path, Options{})
	defer b.Close()
	for in, err := range b.Sessions(ctx) {
		if err != nil || in.Claim.Run != "" || in.Claim.Epoch != 1 || in.Head != 2 {
			t.Fatalf("Sessions after Close: %+v, %v; want a released claim of epoch 1 at head 2", in, err)
		}
	}
	cb, _, err := b.Claim(ctx, sessA, runB, false)
	if err != nil || cb.Epoch != 2 {
		t.Fatalf("Claim after the holder closed: %+v, %v", cb, err)
	}
}

// Child processes: the test binary run again with childEnv set runs
// TestChild, which does what childEnv says and reports on stdout.
const (
	childEnv   = "LOOPCHART_SQLITE_CHILD"
	childDBEnv = "LOOPCHART_SQLITE_CHILD_DB"
)

// TestChild is a child process's work (see startChild); it does nothing
// in an ordinary test run.
func TestChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("run by startChild only")
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	fail := func(err error) {
		say("error %v", err)
		os.Exit(1)
	}
	wait := func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) } // until killed or stdin closes
	o := Options{CheckpointEvery: 1 << 20}
	point, atPoint := strings.CutPrefix(mode, "failpoint:")
	var armed atomic.Bool
	if atPoint {
		o.CheckpointEvery = 2
		o.Failpoint = func(name string) {
			if name == point && armed.Load() {
				say("at %s", name)
				wait()
			}
		}
	}
	st, err := Open(ctx, os.Getenv(childDBEnv), o)
	if err != nil {
		fail(err)
	}
	c, head, err := st.Claim(ctx, sessA, runA, true)
	if err != nil {
		fail(err)
	}
	evs := storetest.Fixture(sessA, 30, t0)
	switch {
	case mode == "claim":
		say("claimed %d", c.Epoch)
	case mode == "wal":
		// 20 events in the database file, 10 more only in the log.
		for i := 0; i < 20; i += 5 {
			if err := st.Append(ctx, sessA, c, evs[i:i+5]); err != nil {
				fail(err)
			}
		}
		if err := st.Checkpoint(ctx); err != nil {
			fail(err)
		}
		for i := 20; i < 30; i += 5 {
			if err := st.Append(ctx, sessA, c, evs[i:i+5]); err != nil {
				fail(err)
			}
		}
		say("appended %d", 30)
	case atPoint:
		// A batch of 4 events, then a batch of 6 that stops at point (the
		// second commit is also the first to checkpoint).
		if head != 0 {
			fail(fmt.Errorf("head %d", head))
		}
		if err := st.Append(ctx, sessA, c, evs[:4]); err != nil {
			fail(err)
		}
		armed.Store(true)
		err := st.Append(ctx, sessA, c, evs[4:10])
		if err == nil && point == "checkpoint" {
			wait() // the writer checkpoints after it told the appender
		}
		fail(fmt.Errorf("the failpoint was not reached: %v", err))
	}
	wait()
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startChild runs the test binary as a child that works on the store at
// path in mode (see TestChild) and returns once it said its first line,
// which it returns.
func startChild(t *testing.T, path, mode string) (*child, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDBEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() { c.kill() })
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("child %s: %v", mode, err)
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "error") {
		t.Fatalf("child %s: %s", mode, line)
	}
	return c, line
}

// kill kills the child with SIGKILL (no deferred function, no Close runs)
// and waits for it.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// TestClaimAcrossProcesses: a session a live process holds is
// store.ErrClaimed; once the process is killed, the claim takes it over
// with a higher epoch, and the dead writer's claim is fenced.
func TestClaimAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "loop.db")
	ch, line := startChild(t, path, "claim")
	childEpoch, err := strconv.ParseUint(strings.TrimPrefix(line, "claimed "), 10, 64)
	if err != nil {
		t.Fatalf("child said %q", line)
	}
	st := open(t, path, Options{})
	defer st.Close()
	_, _, err = st.Claim(ctx, sessA, runB, false)
	wantCode(t, err, vocab.CodeClaimed, "Claim of a session a live process holds")

	ch.kill()
	c, head, err := st.Claim(ctx, sessA, runB, false)
	if err != nil || c.Epoch <= childEpoch || head != 0 {
		t.Fatalf("Claim after the holder was killed: %+v head %d, %v; want an epoch above %d", c, head, err, childEpoch)
	}
	evs := storetest.Fixture(sessA, 2, t0)
	wantCode(t, st.Append(ctx, sessA, store.Claim{Run: runA, Epoch: childEpoch}, evs), vocab.CodeClaimLost, "an append under the killed writer's claim")
	mustAppend(t, st, sessA, c, evs)
}

// TestCrashFailpoints kills a writer process at its failpoints: killed
// before its commit, a batch is not in the file; killed after, it is,
// though the appender was never told. ("mid-batch" needs two appends in
// one transaction; TestGroupCommit checks where it is called.)
func TestCrashFailpoints(t *testing.T) {
	for _, tc := range []struct {
		point string
		head  int
	}{
		{"before-commit", 4},
		{"after-commit", 10},
		{"checkpoint", 10},
	} {
		t.Run(tc.point, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "loop.db")
			ch, line := startChild(t, path, "failpoint:"+tc.point)
			if line != "at "+tc.point {
				t.Fatalf("child said %q", line)
			}
			ch.kill()
			st := open(t, path, Options{})
			defer st.Close()
			seqs, err := readAll(st, sessA)
			if err != nil || len(seqs) != tc.head {
				t.Fatalf("killed at %s: read %v, %v; want %d events", tc.point, seqs, err, tc.head)
			}
			if err := st.Verify(context.Background()); err != nil {
				t.Fatal(err)
			}
			// The dead writer's session is taken over and appended to.
			c, head, err := st.Claim(context.Background(), sessA, runB, false)
			if err != nil || head != uint64(tc.head) {
				t.Fatalf("Claim: head %d, %v", head, err)
			}
			mustAppend(t, st, sessA, c, storetest.Fixture(sessA, tc.head+1, t0)[tc.head:])
		})
	}
}
