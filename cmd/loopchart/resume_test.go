package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// gateScript makes the model call the gate tool (testdata/gate.json).
var gateScript = filepath.Join("testdata", "gate.json")

// gateTool blocks until its run is cancelled; started is closed when it
// first runs.
type gateTool struct {
	started chan struct{}
	once    sync.Once
}

func newGate() *gateTool { return &gateTool{started: make(chan struct{})} }

func (g *gateTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "gate", Description: "Blocks until cancelled."}
}

func (g *gateTool) Run(ctx context.Context, _ vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	g.once.Do(func() { close(g.started) })
	<-ctx.Done()
	return vocab.ToolResult{Content: "cancelled", IsError: true}, nil
}

// withGate adds g to the demo's tools.
func withGate(t *testing.T, g *gateTool) {
	old := demoTools
	demoTools = func(ws *workspace.Workspace) []vocab.Tool { return append(ws.Tools(), g) }
	t.Cleanup(func() { demoTools = old })
}

// guard bounds a wait that only a bug makes long.
const guard = 30 * time.Second

// inOrder checks that out holds every want, in that order.
func inOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("lacks %q (in this order):\n%s", w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// resumeOK resumes the newest unfinished session of db with the embedded
// demo and returns the timeline; the session must be id.
func resumeOK(t *testing.T, db string, id vocab.ID, flags ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, append(append([]string{"demo", "--instant"}, flags...), "--db", db)...)
	if code != 0 {
		t.Fatalf("demo --resume: exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	if want := "log: " + db + " (session " + string(id) + ", resumed)\n"; errOut != want {
		t.Errorf("demo --resume: stderr %q, want %q", errOut, want)
	}
	return out
}

// A demo interrupted (Ctrl-C) while a tool runs leaves its session open;
// demo --resume shows the interruption recovery recorded, then runs what
// the session owed (the model's reply to the tool results) to its end,
// and the log verifies.
func TestDemoInterruptedThenResumed(t *testing.T) {
	db := tempDB(t)
	g := newGate()
	withGate(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--instant", "--db", db, "--script", gateScript}, &out, &errOut)
	}()
	select {
	case <-g.started:
	case code := <-done:
		t.Fatalf("the demo ended (exit %d) before its tool ran\nstderr: %s\nstdout:\n%s", code, errOut.String(), out.String())
	case <-time.After(guard):
		t.Fatal("the gate tool never ran")
	}
	cancel() // Ctrl-C
	var code int
	select {
	case code = <-done:
	case <-time.After(guard):
		t.Fatal("the interrupted demo does not end")
	}
	m := sessionRE.FindStringSubmatch(errOut.String())
	if code != 130 || m == nil {
		t.Fatalf("interrupted demo: exit %d, want 130\nstderr: %s", code, errOut.String())
	}
	id := vocab.ID(m[1])
	if want := "loopchart: interrupted: session " + string(id) + " stays open in " + db + "; run the demo again (loopchart demo --db " + db + ") to resume it\n"; !strings.HasSuffix(errOut.String(), want) {
		t.Errorf("stderr %q, want it to end with %q", errOut.String(), want)
	}
	if rows := logSessionRows(t, db); len(rows) != 1 || rows[0].state != "open" || rows[0].status != "running" || rows[0].writer != "-" {
		t.Errorf("after the interrupt: %+v, want one open, released session", rows)
	}
	shown := logCmdOK(t, "show", "--db", db)
	if !strings.Contains(shown, "call c1 gate({})") || strings.Contains(shown, "result c1") {
		t.Errorf("the log before the resume:\n%s", shown)
	}

	resumed := resumeOK(t, db, id) // a plain demo on the same log resumes
	inOrder(t, resumed,
		"turn 1 step 1   call c1 gate({})",
		"--- resumed: ",
		"turn 1 step 1   result c1: "+vocab.InterruptedToolText,
		"turn 1 step 1   turn end: interrupted after 1 steps",
		"model request header: resume",
		"turn 2 step 1   call ",
		"turn 2 step 3   turn end: completed after 3 steps",
		"\nresult: resumed; turn 2 ended completed after 3 steps\n",
	)
	if rows := logSessionRows(t, db); len(rows) != 1 || rows[0].state != "closed" || rows[0].epoch != 2 {
		t.Errorf("after the resume: %+v, want the session closed under a second claim", rows)
	}
	logCmdOK(t, "verify", "--db", db)
	shown = logCmdOK(t, "show", "--db", db, "--kind", "tool/result")
	if !strings.Contains(shown, "result c1: "+vocab.InterruptedToolText) {
		t.Errorf("log show --kind tool/result:\n%s", shown)
	}

	// Nothing is left to resume.
	code, _, stderr := runCmd(t, "demo", "--instant", "--resume", "--db", db)
	if code != 1 || !strings.Contains(stderr, "log.no_session: ") || !strings.Contains(stderr, "no unfinished session") {
		t.Errorf("a second resume: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, "demo", "--instant", "--session", string(id), "--db", db)
	if code != 1 || !strings.Contains(stderr, "agent.closed: session "+string(id)) {
		t.Errorf("demo --session of a closed session: exit %d, stderr %q", code, stderr)
	}
}

// A writer that stops without any goodbye (only its store handle is
// closed, as a process exit would) leaves a queued prompt behind: the
// resume records the interruption, then Continue runs the queued prompt.
// With --prompt the resume asks that prompt too.
func TestResumeRunsQueuedInput(t *testing.T) {
	db := tempDB(t)
	abandon(t, db, "abandoned", "open the gate", "and then this")

	out := resumeOK(t, db, "abandoned", "--resume")
	inOrder(t, out,
		"user: open the gate",
		"call c1 gate({})",
		"--- resumed: ",
		"result c1: "+vocab.InterruptedToolText,
		"turn end: interrupted after 1 steps",
		"user: and then this",
		"turn end: completed after 3 steps",
		"\nresult: resumed; turn 2 ended completed after 3 steps\n",
	)
	logCmdOK(t, "verify", "--db", db)

	// A closed session is not resumed; --prompt on a fresh session is a
	// normal demo, and --session names it.
	code, out, errOut := runCmd(t, "demo", "--instant", "--db", db, "--session", "named", "--prompt", "count the words")
	if code != 0 || errOut != "log: "+db+" (session named)\n" || !strings.Contains(out, "user: count the words") {
		t.Fatalf("demo --session named: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if rows := logSessionRows(t, db); len(rows) != 2 || rows[0].id != "named" {
		t.Errorf("sessions %+v", rows)
	}
}

// crashChildEnv names the database of the child process
// TestResumeAfterKill starts (see TestMain).
const crashChildEnv = "LOOPCHART_CRASH_CHILD"

// crashChild runs the demo whose model calls the gate tool, which never
// returns: the parent kills the process while it runs.
func crashChild(db string) int {
	withGateTools := func(ws *workspace.Workspace) []vocab.Tool { return append(ws.Tools(), newGate()) }
	demoTools = withGateTools
	return run(context.Background(), []string{"demo", "--instant", "--db", db, "--script", gateScript}, os.Stdout, os.Stderr)
}

// A demo process killed (SIGKILL) while its tool runs keeps nothing
// running and releases nothing; demo --resume takes the session over from
// the dead writer and recovers it.
func TestResumeAfterKill(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("liveness of another process's claim is detected with flock")
	}
	db := tempDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+db)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	running := false
	for !running && sc.Scan() {
		running = strings.Contains(sc.Text(), "tool c1 before → running")
	}
	if !running {
		cmd.Wait()
		t.Fatalf("the child never ran its tool\nstderr: %s", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	m := sessionRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("child stderr: %q", stderr.String())
	}
	id := vocab.ID(m[1])
	if rows := logSessionRows(t, db); len(rows) != 1 || rows[0].state != "open" || rows[0].writer != "held" {
		t.Errorf("after the kill: %+v, want the session open and still held by the dead writer", rows)
	}

	out := resumeOK(t, db, id, "--resume")
	inOrder(t, out,
		"call c1 gate({})",
		"--- resumed: ",
		"result c1: "+vocab.InterruptedToolText,
		"turn end: interrupted after 1 steps",
		"\nresult: resumed; turn 2 ended completed after 3 steps\n",
	)
	if rows := logSessionRows(t, db); len(rows) != 1 || rows[0].state != "closed" || rows[0].epoch != 2 {
		t.Errorf("after the resume: %+v", rows)
	}
	logCmdOK(t, "verify", "--db", db)
}

// abandon leaves session id of db unfinished, as a process that exits
// while its gate tool runs would: the first prompt runs into the gate, the
// others are queued behind it, then the log ends (the store is closed
// under the service).
func abandon(t *testing.T, db string, id vocab.ID, prompts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	script, err := scripted.Load(gateScript)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	svc, err := agentsvc.Open(ctx, st, id, agentsvc.Options{Provider: scripted.New(script, nil), Tools: []vocab.Tool{g}, Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		if _, err := svc.SubmitText(p); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-g.started
		}
	}
	if err := st.Close(); err != nil { // the log ends here
		t.Fatal(err)
	}
	svc.Close(ctx) // only stops this test's goroutines: the closed store takes no more events
}

// demo --new leaves an unfinished session as it is and starts another.
func TestDemoNewLeavesTheUnfinishedSession(t *testing.T) {
	db := tempDB(t)
	abandon(t, db, "unfinished", "open the gate")

	code, out, errOut := runCmd(t, "demo", "--instant", "--new", "--db", db)
	if code != 0 || strings.Contains(errOut, "resumed") || strings.Contains(errOut, "unfinished") {
		t.Fatalf("demo --new: exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	rows := logSessionRows(t, db)
	states := map[string]string{}
	for _, r := range rows {
		states[r.id] = r.state
	}
	if len(rows) != 2 || states["unfinished"] != "open" {
		t.Errorf("after demo --new: %+v, want the unfinished session still open beside a new one", rows)
	}
}
