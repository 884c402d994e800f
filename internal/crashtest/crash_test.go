//go:build unix

package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

var (
	seedFlag  = flag.Int64("crash.seed", 0, "seed of the crash tests' schedule of kills (0: from the clock)")
	killsFlag = flag.Int("crash.kills", 50, "number of random kills of TestCrashRecovery/random")
	keepFlag  = flag.Bool("crash.keep", false, "keep the database files of a failed crash test (their path is logged)")
)

// childLimit is the longest one run of the child may take before the test
// gives up on it (a safety net: every run normally ends in well under a
// second).
const childLimit = 30 * time.Second

// killsPerDB is the number of random kills on one database file.
const killsPerDB = 10

// TestCrashRecovery kills the child (see package child) over and over on
// one SQLite file, at random points and at the store's failpoints, and
// checks the file and its sessions after every kill (see checker.check);
// a last run goes to a normal end.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash tests build and kill a child process")
	}
	start := time.Now()
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d", seed)
	reproduce := func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("seed %d; reproduce with: go test ./internal/crashtest -run '^%s$' -v -crash.seed=%d -crash.kills=%d -crash.keep",
					seed, t.Name(), seed, *killsFlag)
			}
		})
	}
	reproduce(t)
	bin := buildChild(t)
	var total atomic.Int64
	t.Run("random", func(t *testing.T) {
		reproduce(t)
		// Rounds of killsPerDB kills on a new file each, ending with a run
		// to a normal end: the checks after each kill read the whole file,
		// so a file that grew without end would make the test quadratic.
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		for kills := 0; kills < *killsFlag; {
			h := newHarness(t, bin, rng.Int64(), []string{"crash", "crash-2"})
			for range min(killsPerDB, *killsFlag-kills) {
				h.crash(h.randomPlan(), "", 0)
				if t.Failed() {
					return
				}
			}
			h.finish()
			kills += h.kills
			total.Add(int64(h.kills))
			h.logStats()
		}
	})
	for i, fp := range []struct {
		name     string
		sessions []string
		maxAt    int // FAILPOINT_AT is drawn from 1..maxAt
		kills    int
	}{
		// One session: the batch committing at the failpoint is the one
		// append in flight, so its fate is exact.
		{"before-commit", []string{"crash"}, 60, 5},
		{"after-commit", []string{"crash"}, 60, 5},
		// Two sessions side by side: a group commit of two appends.
		{"mid-batch", []string{"crash", "crash-2"}, 4, 5},
		{"checkpoint", []string{"crash"}, 6, 5},
	} {
		t.Run(fp.name, func(t *testing.T) {
			reproduce(t)
			h := newHarness(t, bin, seed+int64(i)+1, fp.sessions)
			for range fp.kills {
				h.crash(killPlan{}, fp.name, 1+h.rng.IntN(fp.maxAt))
				if t.Failed() {
					return
				}
			}
			h.finish()
			total.Add(int64(h.kills))
			h.logStats()
		})
	}
	t.Logf("%d kills in %v (seed %d)", total.Load(), time.Since(start).Round(time.Millisecond), seed)
}

// buildChild builds the child program, without the race detector whatever
// this test binary was built with, and returns its path.
func buildChild(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/loopchart/loopchart/internal/crashtest/child")
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "--race" && !strings.HasPrefix(f, "-race=") {
			flags = append(flags, f)
		}
	}
	// Never the network: the build uses the module cache only.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "), "GOPROXY=off", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the child: %v\n%s", err, b)
	}
	return out
}

// killPlan says when the test kills a run of the child: when the at-th
// line of kind (any kind when "") arrives. at 0: never.
type killPlan struct {
	kind string
	at   int
}

func (p killPlan) String() string {
	if p.at == 0 {
		return "no kill"
	}
	k := p.kind
	if k == "" {
		k = "line"
	}
	return fmt.Sprintf("kill at %s #%d", k, p.at)
}

// harness runs the child on one database and checks it after each run.
type harness struct {
	t        *testing.T
	bin, db  string
	rng      *rand.Rand
	sessions []string
	check    *checker
	runs     int
	kills    int
	byPlan   map[string]int
	// torn counts the reports the child was killed while writing
	torn int
	// scratch holds copies of the database
	scratch string
	// time spent running the child and checking the database
	inChild, inCheck time.Duration
}

func newHarness(t *testing.T, bin string, seed int64, sessions []string) *harness {
	dir := t.TempDir()
	if *keepFlag {
		var err error
		if dir, err = os.MkdirTemp("", "crashtest-*"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the database is kept in %s", dir)
			} else {
				os.RemoveAll(dir)
			}
		})
	}
	return &harness{t: t, bin: bin, db: filepath.Join(dir, "loop.db"), rng: rand.New(rand.NewPCG(uint64(seed), 0x63726173)),
		sessions: sessions, check: newChecker(sessions), byPlan: map[string]int{}}
}

// randomPlan draws when to kill the next run: after any number of lines
// (early ones kill the child while it opens and recovers), or right as it
// hands a batch to the store (the commit races the kill), or after an
// append returned, an event was published, or a prompt was submitted.
func (h *harness) randomPlan() killPlan {
	switch x := h.rng.IntN(100); {
	case x < 10:
		return killPlan{at: 1 + h.rng.IntN(12)}
	case x < 40:
		return killPlan{at: 1 + h.rng.IntN(600)}
	case x < 70:
		return killPlan{kind: LinePend, at: 1 + h.rng.IntN(80)}
	case x < 80:
		return killPlan{kind: LineOK, at: 1 + h.rng.IntN(80)}
	case x < 90:
		return killPlan{kind: LineEvent, at: 1 + h.rng.IntN(400)}
	default:
		return killPlan{kind: LineSubmit, at: 1 + h.rng.IntN(8)}
	}
}

// args are the child's arguments for the next run.
func (h *harness) args(prompts int) []string {
	h.runs++
	return []string{"-db", h.db, "-sessions", strings.Join(h.sessions, ","), "-run", strconv.Itoa(h.runs),
		"-seed", strconv.FormatInt(h.rng.Int64(), 10), "-prompts", strconv.Itoa(prompts),
		"-store-checkpoint", strconv.Itoa(1 + h.rng.IntN(12)), "-core-checkpoint", strconv.Itoa(20 + h.rng.IntN(150))}
}

// crash runs the child until it is killed: by the test (plan) or by
// itself at failpoint fp's at-th hit; then checks the database.
func (h *harness) crash(plan killPlan, fp string, at int) {
	h.t.Helper()
	args := h.args(0)
	var env []string
	what, kind := plan.String(), "kill at "+plan.kind
	if plan.kind == "" {
		kind = "kill at line"
	}
	if fp != "" {
		kind = "failpoint " + fp
		env = []string{"FAILPOINT=" + fp, "FAILPOINT_AT=" + strconv.Itoa(at)}
		what = fmt.Sprintf("failpoint %s #%d", fp, at)
		if fp == "checkpoint" {
			args = append(args, "-store-checkpoint", "4")
		}
	}
	t0 := time.Now()
	res := h.runChild(args, env, plan)
	h.inChild += time.Since(t0)
	label := fmt.Sprintf("run %d (%s)", h.runs, what)
	if !res.signalled() {
		h.t.Fatalf("%s: the child was not killed: %v%s", label, res.state, res.diag())
	}
	if fp != "" && res.fp != fp {
		h.t.Fatalf("%s: the child died without reaching the failpoint (it reported %q)%s", label, res.fp, res.diag())
	}
	if fp == "" && !res.killed {
		h.t.Fatalf("%s: the child died before the test killed it%s", label, res.diag())
	}
	h.kills++
	h.byPlan[kind]++
	h.torn += res.torn
	t0 = time.Now()
	// Half the time the checks run on a copy of the files as the kill
	// left them, so that the next child itself opens a write-ahead log
	// that its dead writer left behind (the checks' own Store would
	// checkpoint it away on its close).
	db := h.db
	if h.rng.IntN(2) == 0 {
		db = h.copyDB()
		label += " (on a copy)"
	}
	// SQLite's integrity check reads every page: under the race detector
	// (which slows the store's transpiled C tenfold) only the failpoint
	// kills and the final run of each round run it.
	rep := h.check.check(h.t, label, db, res.lines, false, fp != "" || !raceEnabled)
	h.inCheck += time.Since(t0)
	if h.t.Failed() {
		return
	}
	h.failpointAssertions(label, fp, rep)
}

// copyDB copies the database and its write-ahead log (no process has
// them open) to a scratch directory and returns the copy's path.
func (h *harness) copyDB() string {
	h.t.Helper()
	if h.scratch == "" {
		h.scratch = h.t.TempDir()
	}
	dst := filepath.Join(h.scratch, "copy.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(dst + suffix)
		if suffix == "-shm" {
			continue // the copy rebuilds its index of the log
		}
		b, err := os.ReadFile(h.db + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
	return dst
}

// failpointAssertions checks the fate of the batches in flight at the
// failpoint.
func (h *harness) failpointAssertions(label, fp string, rep runReport) {
	t := h.t
	switch fp {
	case "before-commit":
		// One session: its one append in flight is the batch whose commit
		// never ran.
		if len(rep.inflightPresent) != 0 || len(rep.inflightAbsent) != 1 {
			t.Errorf("%s: in flight at before-commit: %d batches in the file, %d not; want none in, exactly one not",
				label, len(rep.inflightPresent), len(rep.inflightAbsent))
		}
	case "after-commit":
		// The batch committed, the appender was never told: it must be in
		// the file, though never acknowledged.
		if len(rep.inflightPresent) != 1 || len(rep.inflightAbsent) != 0 {
			t.Errorf("%s: in flight at after-commit: %d batches in the file, %d not; want exactly one in, none missing",
				label, len(rep.inflightPresent), len(rep.inflightAbsent))
		}
		for _, b := range rep.inflightPresent {
			for _, k := range b.Events {
				if rep.published[b.S][k.Seq] {
					t.Errorf("%s: event %d of %s was published before its commit returned", label, k.Seq, b.S)
				}
			}
		}
	case "mid-batch":
		// Between two appends of one transaction: both sessions' appends
		// are in it, neither committed.
		if len(rep.inflightPresent) != 0 || len(rep.inflightAbsent) < 2 {
			t.Errorf("%s: in flight at mid-batch: %d batches in the file, %d not; want none in, at least two not",
				label, len(rep.inflightPresent), len(rep.inflightAbsent))
		}
	case "checkpoint":
		// After a commit whose appender was told, before the write-ahead
		// log is copied into the database: the batch in flight is either
		// that commit's (in the file, though perhaps not yet reported) or
		// the session's next one (not committed: the writer is stopped).
		// Either way the general checks hold; the point of this failpoint
		// is the reopen of a file whose log holds every commit since the
		// last checkpoint.
		if n := len(rep.inflightPresent) + len(rep.inflightAbsent); n > 1 {
			t.Errorf("%s: %d batches in flight at checkpoint, want at most one", label, n)
		}
	}
}

// finish runs the child once more without a kill: it must recover every
// session, complete prompts in each, close them and exit 0; then the
// database is checked once more, as a finished one.
func (h *harness) finish() {
	h.t.Helper()
	const prompts = 3
	t0 := time.Now()
	res := h.runChild(h.args(prompts), nil, killPlan{})
	h.inChild += time.Since(t0)
	label := fmt.Sprintf("run %d (final)", h.runs)
	if res.state == nil || !res.state.Success() || !res.exited {
		h.t.Fatalf("%s: the child did not finish: %v%s", label, res.state, res.diag())
	}
	completed := map[string]int{}
	for _, l := range res.lines {
		if l.T == LineDone && l.R == string(vocab.PromptCompleted) {
			completed[l.S]++
		}
	}
	for _, s := range h.sessions {
		if completed[s] < prompts {
			h.t.Errorf("%s: session %s completed %d prompts, want %d", label, s, completed[s], prompts)
		}
	}
	t0 = time.Now()
	h.check.check(h.t, label, h.db, res.lines, true, true)
	h.inCheck += time.Since(t0)
}

func (h *harness) logStats() {
	c := h.check
	var sum logStats
	for _, s := range c.logs {
		sum.events += s.events
		sum.opens += s.opens
		sum.recovered += s.recovered
		sum.interrupted += s.interrupted
	}
	h.t.Logf("%d kills (%v, %d reports cut short); batches in flight at a kill: %d found in the file, %d not; in the end %d events, %d opens, %d turns ended interrupted by a reopen, %d tool calls given the interrupted result; %v in the child, %v checking",
		h.kills, h.byPlan, h.torn, c.inflightIn, c.inflightOut, sum.events, sum.opens, sum.recovered, sum.interrupted,
		h.inChild.Round(time.Millisecond), h.inCheck.Round(time.Millisecond))
}

// runResult is what one run of the child did.
type runResult struct {
	lines    []Line
	torn     int // an incomplete last line (the child died writing it)
	killed   bool
	timedOut bool
	fp       string // the failpoint the child killed itself at
	exited   bool   // it reported LineExit
	errMsg   string // it reported LineError
	state    *os.ProcessState
	stderr   string
}

// signalled reports whether the child died of SIGKILL.
func (r runResult) signalled() bool {
	if r.state == nil {
		return false
	}
	ws, ok := r.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// diag describes what went wrong with a run, for failure messages.
func (r runResult) diag() string {
	var b strings.Builder
	if r.timedOut {
		fmt.Fprintf(&b, "\n(the run took longer than %v and was killed)", childLimit)
	}
	if r.errMsg != "" {
		fmt.Fprintf(&b, "\nchild error: %s", r.errMsg)
	}
	if r.stderr != "" {
		fmt.Fprintf(&b, "\nchild stderr:\n%s", r.stderr)
	}
	return b.String()
}

// runChild runs the child with args and env, reading its reports from the
// pipe on its descriptor 3 and killing it as plan says; it returns once
// the child has exited and the pipe is drained.
func (h *harness) runChild(args, env []string, plan killPlan) runResult {
	t := h.t
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(h.bin, args...)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatalf("start the child: %v", err)
	}
	pw.Close() // the child holds the only write end: its death ends the stream
	var res runResult
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(childLimit, func() {
		timedOut.Store(true)
		cmd.Process.Kill()
	})
	seen := 0
	rd := bufio.NewReader(pr)
	for {
		b, err := rd.ReadBytes('\n')
		if err != nil {
			if len(b) > 0 {
				res.torn++
			}
			if !errors.Is(err, io.EOF) {
				t.Errorf("read the child's reports: %v", err)
			}
			break
		}
		var l Line
		if err := json.Unmarshal(b, &l); err != nil {
			t.Errorf("a report of the child does not decode: %v: %q", err, b)
			continue
		}
		res.lines = append(res.lines, l)
		switch l.T {
		case LineFailpoint:
			res.fp = l.Name
		case LineExit:
			res.exited = true
		case LineError:
			res.errMsg = l.Msg
		}
		if plan.at > 0 && !res.killed && (plan.kind == "" || plan.kind == l.T) {
			if seen++; seen == plan.at {
				if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
					res.killed = true
				}
			}
		}
	}
	cmd.Wait()
	watchdog.Stop()
	res.timedOut = timedOut.Load()
	res.state = cmd.ProcessState
	res.stderr = stderr.String()
	return res
}

// ---- checks ----

// checker keeps what the runs of the child acknowledged, across runs, and
// checks the database against it.
type checker struct {
	sess map[string]*sessAcks
	// statistics: of the batches in flight at the kills, and of the logs
	// as last checked
	inflightIn, inflightOut int
	logs                    map[string]logStats
}

// logStats count what a session's log holds.
type logStats struct {
	events, opens, recovered, interrupted int
}

// sessAcks is what was acknowledged of one session.
type sessAcks struct {
	// durable are the events known to be in the file: acknowledged (an
	// append returned, the Events stream delivered them) or found there
	// after a kill.
	durable map[uint64]EventKey
	// submitted are the prompts whose Submit returned; ended how they
	// ended, as the child was told.
	submitted map[string]bool
	ended     map[string]string
	opens     int
}

func newChecker(sessions []string) *checker {
	c := &checker{sess: map[string]*sessAcks{}, logs: map[string]logStats{}}
	for _, s := range sessions {
		c.sess[s] = &sessAcks{durable: map[uint64]EventKey{}, submitted: map[string]bool{}, ended: map[string]string{}}
	}
	return c
}

// runReport is what check learned of one run's batches in flight.
type runReport struct {
	inflightPresent, inflightAbsent []Line
	// published[session][seq]: the Events stream delivered the event.
	published map[string]map[uint64]bool
}

// check opens the database after a run whose reports are lines and checks
// it: the file opens (and passes SQLite's integrity check when integrity
// is set: see sqlite.Store.Verify); every session verifies (store.Verify)
// and folds (store.Fold) to the same history; every event acknowledged in
// this run or an earlier one is in the file as acknowledged, at or below
// the head; every batch in flight at the kill is there whole or not at
// all. Then checkSession checks each session's log and conversation.
// final: the run ended normally, so nothing may be left open.
func (c *checker) check(t *testing.T, label, db string, lines []Line, final, integrity bool) runReport {
	t.Helper()
	ctx := context.Background()
	rep := runReport{published: map[string]map[uint64]bool{}}
	st, err := sqlite.Open(ctx, db, sqlite.Options{NoCheckpointOnClose: true})
	if err != nil {
		t.Fatalf("%s: the store does not open after the kill: %v", label, err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Errorf("%s: close the store: %v", label, err)
		}
	}()
	if integrity {
		if err := st.Verify(ctx); err != nil {
			t.Errorf("%s: the store's integrity check: %v", label, err)
		}
	}
	heads := map[string]uint64{}
	for info, err := range st.Sessions(ctx) {
		if err != nil {
			t.Fatalf("%s: list the sessions: %v", label, err)
		}
		heads[string(info.Session)] = info.Head
	}
	// Sort the run's reports by session, pairing each pend with its ok.
	type pending struct {
		line Line
		ok   bool
	}
	pends := map[string][]*pending{}
	bySession := map[string][]Line{}
	for _, l := range lines {
		if l.S == "" {
			continue
		}
		if c.sess[l.S] == nil {
			t.Errorf("%s: a report names session %q, not one of the test's", label, l.S)
			continue
		}
		switch l.T {
		case LinePend:
			pends[l.S] = append(pends[l.S], &pending{line: l})
		case LineOK:
			found := false
			for _, p := range pends[l.S] {
				if p.line.Seq == l.Seq && !p.ok {
					p.ok, found = true, true
				}
			}
			if !found {
				t.Errorf("%s: an append to %s at %d returned that was never handed over", label, l.S, l.Seq)
			}
		case LineFail:
			t.Errorf("%s: an append to %s at %d failed: %s", label, l.S, l.Seq, l.Msg)
		}
		bySession[l.S] = append(bySession[l.S], l)
	}
	for _, name := range sortedKeys(c.sess) {
		acks := c.sess[name]
		head := heads[name]
		recs, verified, err := verifyLog(ctx, st, vocab.ID(name), head)
		if err != nil {
			t.Errorf("%s: session %s: %v", label, name, err)
			// Check the acknowledgements against what can be read.
			recs = map[uint64]record{}
			tee := &teeStore{Store: st, recs: recs}
			for _, err := range tee.Read(ctx, vocab.ID(name), 1) {
				if err != nil {
					break
				}
			}
		}
		// The batches of this run: acknowledged ones must be in the file;
		// one in flight at the kill whole or not at all.
		for _, p := range pends[name] {
			in, out := 0, 0
			for _, k := range p.line.Events {
				if r, ok := recs[k.Seq]; ok && r.key == k {
					in++
				} else if !ok {
					out++
				}
			}
			switch {
			case in == len(p.line.Events):
				for _, k := range p.line.Events {
					acks.durable[k.Seq] = k
				}
				if !p.ok {
					rep.inflightPresent = append(rep.inflightPresent, p.line)
					c.inflightIn++
				}
			case out == len(p.line.Events) && !p.ok:
				rep.inflightAbsent = append(rep.inflightAbsent, p.line)
				c.inflightOut++
			case p.ok:
				t.Errorf("%s: session %s: the acknowledged batch of %d events at %d is not in the file as appended (%d of its events are, %d missing, the rest differ)",
					label, name, len(p.line.Events), p.line.Seq, in, out)
			default:
				t.Errorf("%s: session %s: the batch of %d events at %d, in flight at the kill, is torn: %d of its events are in the file, %d missing, the rest differ",
					label, name, len(p.line.Events), p.line.Seq, in, out)
			}
		}
		rep.published[name] = map[uint64]bool{}
		before := maps.Clone(acks.submitted)
		var opens []Line
		var maxAck uint64
		for _, l := range bySession[name] {
			switch l.T {
			case LineEvent:
				k := EventKey{Seq: l.Seq, Kind: l.Kind, At: l.At}
				if old, ok := acks.durable[l.Seq]; ok && old != k {
					t.Errorf("%s: session %s: event %d was published as %+v, appended as %+v", label, name, l.Seq, k, old)
				}
				acks.durable[l.Seq] = k
				rep.published[name][l.Seq] = true
				maxAck = max(maxAck, l.Seq)
			case LineSubmit:
				acks.submitted[l.ID] = true
				maxAck = max(maxAck, l.Seq)
			case LineDone:
				acks.ended[l.ID] = l.R
				maxAck = max(maxAck, l.Seq)
			case LineOpen:
				opens = append(opens, l)
				acks.opens++
				maxAck = max(maxAck, l.Seq)
			}
		}
		if maxAck > head {
			t.Errorf("%s: session %s: the child acknowledged sequence number %d, the head in the file is %d", label, name, maxAck, head)
		}
		// Everything ever acknowledged, in this run or before, is still
		// there, as it was.
		for _, seq := range sortedKeys(acks.durable) {
			k := acks.durable[seq]
			r, ok := recs[seq]
			switch {
			case !ok:
				t.Errorf("%s: session %s: acknowledged event %d (%s) is not in the file (head %d)", label, name, seq, k.Kind, head)
			case r.key != k:
				t.Errorf("%s: session %s: acknowledged event %d is %+v, the file has %+v", label, name, seq, k, r.key)
			}
		}
		if head == 0 {
			if acks.opens > 0 || len(acks.submitted) > 0 {
				t.Errorf("%s: session %s has no events, yet was acknowledged", label, name)
			}
			continue
		}
		if verified == nil {
			continue
		}
		c.checkSession(t, label, st, name, head, recs, verified, opens, before, final)
	}
	return rep
}

// record is one stored event, decoded when its payload matters here.
type record struct {
	key EventKey
	ev  vocab.Event
}

// decoded are the kinds whose payloads the checks read (store.Verify and
// Fold check the rest).
var decoded = map[vocab.EventKind]bool{
	vocab.Input{Kind: vocab.InSubmit}.EventKind(): true,
	vocab.Input{Kind: vocab.InCancel}.EventKind(): true,
	vocab.EventToolCall:                           true,
	vocab.EventToolExecutionEnd:                   true,
	vocab.EventToolResult:                         true,
	vocab.EventTurnEnd:                            true,
	vocab.EventPrompt:                             true,
}

// verifyLog replays session id from its first event (store.Verify) and
// returns its records, read as the replay reads them, and what it folded.
// The log must end at head.
func verifyLog(ctx context.Context, st store.Store, id vocab.ID, head uint64) (map[uint64]record, *store.Folded, error) {
	recs := map[uint64]record{}
	if head == 0 {
		return recs, nil, nil
	}
	tee := &teeStore{Store: st, recs: recs}
	f, err := store.Verify(ctx, tee, id)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("does not verify: %w", err)
	case tee.err != nil:
		return nil, nil, tee.err
	case f.Head != head || uint64(len(recs)) != head:
		return nil, nil, fmt.Errorf("verify read %d events up to %d, the head is %d", len(recs), f.Head, head)
	}
	return recs, f, nil
}

// teeStore keeps the records that a read of a whole session yields.
type teeStore struct {
	store.Store
	recs map[uint64]record
	err  error
}

func (s *teeStore) Read(ctx context.Context, session vocab.ID, from uint64) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		for r, err := range s.Store.Read(ctx, session, from) {
			if err == nil && from <= 1 && s.err == nil {
				rec := record{key: EventKey{Seq: r.Seq, Kind: string(r.Kind), At: r.At.UnixNano()}}
				if decoded[r.Kind] {
					var derr error
					if rec.ev, derr = r.Event(); derr != nil {
						s.err = fmt.Errorf("event %d does not decode: %w", r.Seq, derr)
					}
				}
				s.recs[r.Seq] = rec
			}
			if !yield(r, err) {
				return
			}
		}
	}
}

// checkSession checks one session whose log is recs (1..head), as
// verified: the log nests its turns; every tool call of a turn gets one
// result before the turn ends, a call that ended before its process died
// keeps its outcome, and a reopen closes the turn left open as
// interrupted, its calls without an outcome with
// vocab.InterruptedToolText; every acknowledged prompt is in the log, and
// ended as the child was told; a prompt that started and has not ended is
// the open turn's; after each reopen (opens: this run's reports of them;
// before: the prompts acknowledged by earlier runs) every earlier prompt
// ended or is still queued; the folded history has unique message ids and
// pairs every tool call with exactly one result (only the last calls of a
// turn still open may lack theirs).
func (c *checker) checkSession(t *testing.T, label string, st store.Store, name string, head uint64, recs map[uint64]record,
	verified *store.Folded, opens []Line, before map[string]bool, final bool) {
	t.Helper()
	ctx := context.Background()
	id := vocab.ID(name)
	acks := c.sess[name]
	f, err := store.Fold(ctx, st, id)
	if err != nil {
		t.Errorf("%s: session %s does not fold: %v", label, name, err)
		return
	}
	if f.Head != head {
		t.Errorf("%s: session %s folds to head %d, the file's head is %d", label, name, f.Head, head)
	}
	// The fold from the last snapshot (what Open does) and the replay of
	// the whole log (Verify) must agree.
	if a, b := historyJSON(f.Core.History()), historyJSON(verified.Core.History()); !bytes.Equal(a, b) {
		t.Errorf("%s: session %s: the history folded from snapshot %d differs from the one replayed from the first event:\n%s\n%s",
			label, name, f.Snapshot, a, b)
	}
	sub := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: session %s: %s", label, name, fmt.Sprintf(format, args...))
	}

	// The log, in order: turns nest, every tool call of a turn has one
	// result before the turn ends, and a reopen closes a turn left open
	// as interrupted, its calls with the interrupted result.
	var (
		inTurn        bool
		calls         = map[string]bool{}   // calls of the open turn without a result
		outcomes      = map[string]string{} // their outcomes (tool/execution-end) so far
		interrupted   map[string]bool       // calls without an outcome at the last reopen
		mustEnd       bool                  // the open turn was left by a dead process
		abortCause    *vocab.CancelCause    // the first cancel of the open turn
		deadAbort     *vocab.CancelCause    // abortCause at the reopen that must end the turn (for messages)
		openEvents    int
		lastOpen      uint64
		submits       = map[string]uint64{}
		states        = map[string][]string{} // prompt id → the states logged
		completedAt   []uint64
		stats         logStats
		runningAt     = map[string]uint64{} // prompt id → its prompt/state running
		terminalAt    = map[string]uint64{} // prompt id → its prompt/state that ended it
		lastTurnStart uint64
	)
	for seq := uint64(1); seq <= head; seq++ {
		ev := recs[seq].ev
		switch vocab.EventKind(recs[seq].key.Kind) {
		case vocab.Input{Kind: vocab.InOpen}.EventKind():
			openEvents++
			lastOpen = seq
			if inTurn && !mustEnd {
				mustEnd, deadAbort = true, abortCause
				interrupted = map[string]bool{}
				for id := range calls {
					if _, ok := outcomes[id]; !ok {
						interrupted[id] = true
					}
				}
			}
		case vocab.Input{Kind: vocab.InSubmit}.EventKind():
			in, _ := ev.Payload.(vocab.Input)
			if in.Message == nil || in.Message.ID == "" {
				sub("input/submit %d carries no message id", seq)
			} else {
				submits[string(in.Message.ID)] = seq
			}
		case vocab.EventTurnStart:
			if inTurn {
				sub("turn/start %d while turn %d is open", seq, ev.Turn)
			}
			inTurn, lastTurnStart, abortCause = true, seq, nil
			clear(calls)
			clear(outcomes)
		case vocab.Input{Kind: vocab.InCancel}.EventKind():
			if in, _ := ev.Payload.(vocab.Input); inTurn && abortCause == nil && in.Cause != nil {
				abortCause = in.Cause
			}
		case vocab.EventToolCall:
			p, _ := ev.Payload.(vocab.ToolPayload)
			if !inTurn {
				sub("tool/call %d outside a turn", seq)
			}
			if calls[p.Call.ID] {
				sub("tool/call %d repeats call %s", seq, p.Call.ID)
			}
			calls[p.Call.ID] = true
		case vocab.EventToolExecutionEnd:
			p, _ := ev.Payload.(vocab.ToolPayload)
			if !calls[p.Call.ID] {
				sub("tool/execution-end %d for call %s, which has no call without a result in this turn", seq, p.Call.ID)
			}
			if _, ok := outcomes[p.Call.ID]; ok {
				sub("tool/execution-end %d: call %s has ended before", seq, p.Call.ID)
			}
			if p.Result != nil {
				outcomes[p.Call.ID] = p.Result.Content
			}
		case vocab.EventToolResult:
			p, _ := ev.Payload.(vocab.ToolPayload)
			if !calls[p.Call.ID] {
				sub("tool/result %d for call %s, which has no call without a result in this turn", seq, p.Call.ID)
			}
			delete(calls, p.Call.ID)
			switch {
			case p.Result == nil:
				sub("tool/result %d of call %s has no result", seq, p.Call.ID)
			case interrupted[p.Call.ID]:
				stats.interrupted++
				if p.Result.Content != vocab.InterruptedToolText {
					sub("tool/result %d of call %s, running when its process died, is not the interrupted result: %+v (the turn was aborting with cause %v)",
						seq, p.Call.ID, p.Result, deadAbort)
				}
			default:
				// A call that ended before its process died keeps its
				// outcome through the recovery.
				if out, ok := outcomes[p.Call.ID]; ok && out != p.Result.Content {
					sub("tool/result %d of call %s is %q, its execution ended with %q", seq, p.Call.ID, p.Result.Content, out)
				}
			}
		case vocab.EventTurnEnd:
			p, _ := ev.Payload.(vocab.TurnEndPayload)
			if !inTurn {
				sub("turn/end %d outside a turn", seq)
			}
			if len(calls) > 0 {
				sub("turn/end %d leaves tool calls without a result: %v", seq, sortedKeys(calls))
			}
			if mustEnd {
				stats.recovered++
				if p.Reason.Kind != vocab.EndInterrupted {
					sub("turn/end %d of the turn left open by a dead process ends %+v, not interrupted (the turn was aborting with cause %v)",
						seq, p.Reason, deadAbort)
				}
			}
			inTurn, mustEnd, interrupted, abortCause, deadAbort = false, false, nil, nil, nil
		case vocab.EventPrompt:
			p, _ := ev.Payload.(vocab.PromptPayload)
			id := string(p.Prompt)
			states[id] = append(states[id], p.State)
			switch {
			case p.State == "running":
				if runningAt[id] != 0 {
					sub("prompt %s runs again at %d (first at %d)", id, seq, runningAt[id])
				}
				runningAt[id] = seq
			case terminalAt[id] != 0:
				sub("prompt %s ends again at %d (first at %d)", id, seq, terminalAt[id])
			default:
				terminalAt[id] = seq
			}
			if p.State == string(vocab.PromptCompleted) {
				completedAt = append(completedAt, seq)
			}
		}
	}
	stats.events, stats.opens = int(head), openEvents
	c.logs[name] = stats
	if openEvents < acks.opens {
		sub("%d input/open events, but the children reported %d opens", openEvents, acks.opens)
	}
	terminal := func(id string) string {
		for _, s := range states[id] {
			if s != "running" {
				return s
			}
		}
		return ""
	}

	// The prompts. Before the kill: every prompt whose Submit returned is
	// in the log; one that started and has not ended is the open turn's.
	for _, id := range sortedKeys(acks.submitted) {
		switch {
		case submits[id] == 0:
			sub("submitted prompt %s (Submit returned) has no input/submit event", id)
		case terminal(id) == "" && len(states[id]) > 0 && (!inTurn || runningAt[id] < lastTurnStart):
			sub("prompt %s started at %d and never ended, and is not the prompt of a turn still open (last turn/start %d, open %v)",
				id, runningAt[id], lastTurnStart, inTurn)
		case final && terminal(id) == "":
			sub("prompt %s has not ended after the final run", id)
		}
	}
	for id, r := range acks.ended {
		if got := terminal(id); got != r {
			sub("prompt %s ended %s for the child, the log says %q", id, r, got)
		}
	}
	// After each reopen of this run, as the recovered core showed itself:
	// every prompt acknowledged by an earlier run ended, or never started
	// and is still queued for its turn; nothing else is queued.
	for _, o := range opens {
		queued := map[string]bool{}
		for _, id := range o.Queued {
			queued[id] = true
			if submits[id] == 0 || submits[id] > o.Seq {
				sub("prompt %s is queued after the reopen at %d, but was not submitted before it", id, o.Seq)
			}
			if at := runningAt[id]; at != 0 && at <= o.Seq {
				sub("prompt %s is queued after the reopen at %d, but started at %d", id, o.Seq, at)
			}
		}
		for _, id := range sortedKeys(before) {
			ended := terminalAt[id] != 0 && terminalAt[id] <= o.Seq
			started := runningAt[id] != 0 && runningAt[id] <= o.Seq
			switch {
			case ended:
				if queued[id] || slices.Contains(o.Prompts, id) {
					sub("prompt %s ended at %d, yet the core reopened at %d holds it", id, terminalAt[id], o.Seq)
				}
			case started:
				sub("prompt %s started at %d and was not ended by the reopen at %d", id, runningAt[id], o.Seq)
			case !queued[id] || !slices.Contains(o.Prompts, id):
				sub("prompt %s was submitted and never started, and is not queued after the reopen at %d (queued %v, prompts %v)",
					id, o.Seq, o.Queued, o.Prompts)
			}
		}
	}

	// The conversation: message ids are unique, and every tool call has
	// exactly one result after it and every result its call; only the
	// last batch of calls of a turn still open may lack results.
	core := f.Core
	h := core.History()
	seenIDs := map[vocab.ID]int{}
	callAt := map[string]int{}
	results := map[string]int{}
	lastCalls := -1
	for i, m := range h.All() {
		if m.ID != "" {
			if j, ok := seenIDs[m.ID]; ok {
				sub("message id %s is at %d and %d of the history", m.ID, j, i)
			}
			seenIDs[m.ID] = i
		}
		for _, call := range m.ToolCalls() {
			if _, ok := callAt[call.ID]; ok {
				sub("tool call id %s repeats in the history", call.ID)
			}
			callAt[call.ID] = i
			lastCalls = i
		}
		if m.Role == vocab.RoleTool {
			if m.Result == nil {
				sub("tool message %d has no result", i)
				continue
			}
			if _, ok := callAt[m.Result.CallID]; !ok {
				sub("the result at %d of the history answers call %s, which has no call before it", i, m.Result.CallID)
			}
			results[m.Result.CallID]++
		}
	}
	for _, id := range sortedKeys(callAt) {
		switch n := results[id]; {
		case n > 1:
			sub("tool call %s has %d results in the history", id, n)
		case n == 0 && (final || !inTurn || callAt[id] != lastCalls):
			sub("tool call %s (history %d) has no result", id, callAt[id])
		}
	}

	if final {
		if inTurn || !core.Closed() {
			sub("after the final run: a turn is open: %v, closed: %v", inTurn, core.Closed())
		}
		after := false
		for _, seq := range completedAt {
			after = after || seq > lastOpen
		}
		if !after {
			sub("no prompt completed after the last open (event %d)", lastOpen)
		}
	}
}

func sortedKeys[K interface{ ~string | ~uint64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func historyJSON(h vocab.History) []byte {
	b, err := json.Marshal(h.Messages())
	if err != nil {
		return []byte(err.Error())
	}
	return b
}
