package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/diagrams"
)

// TestMain fails the package if a command leaves a goroutine behind, or
// if a test wrote the default log database into the package directory.
// Run with LOOPCHART_CRASH_CHILD set, the test binary is the demo process
// that TestResumeAfterKill kills.
func TestMain(m *testing.M) {
	if db := os.Getenv(crashChildEnv); db != "" {
		os.Exit(crashChild(db))
	}
	_, err := os.Stat(defaultDB)
	goleak.VerifyTestMain(guardDefaultDB{m: m, existed: err == nil})
}

// guardDefaultDB runs the tests and fails them if they left loopchart.db
// behind: every test names a temporary --db.
type guardDefaultDB struct {
	m       *testing.M
	existed bool
}

func (g guardDefaultDB) Run() int {
	code := g.m.Run()
	if _, err := os.Stat(defaultDB); err == nil && !g.existed {
		fmt.Fprintf(os.Stderr, "a test wrote %s into the package directory\n", defaultDB)
		for _, suffix := range []string{"", "-wal", "-shm", "-holders"} {
			os.RemoveAll(defaultDB + suffix)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}

// runCmd calls run as main does and returns the exit code and both outputs.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// tempDB is a log database in a new temporary directory.
func tempDB(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "loopchart.db")
}

// demo runs the demo on a virtual clock, logged to a new temporary
// database, with more args.
func demo(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, append([]string{"demo", "--instant", "--db", tempDB(t)}, args...)...)
}

func TestDemoInstantTimeline(t *testing.T) {
	db := tempDB(t)
	code, out, errOut := runCmd(t, "demo", "--instant", "--db", db)
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	if !regexp.MustCompile(`^log: ` + regexp.QuoteMeta(db) + ` \(session [0-9A-Z]{26}\)\n$`).MatchString(errOut) {
		t.Errorf("stderr %q, want only the log line", errOut)
	}
	for _, want := range []string{
		"turn 1 step 1",
		"turn 1 step 3",
		"user: Make notes.txt say that every transition is logged.",
		"call call_1 list_dir",
		"approval asked for call_3: Let the agent change notes.txt?",
		"approval given for call_3: approve",
		"retry: attempt 1 failed (llm.server: overloaded, please retry); attempt 2/10 in 1s",
		"result call_3: edited notes.txt",
		"result call_4: notes.txt:1: loopchart runs the agent loop as explicit statecharts: every phase is a named state, an",
		"turn end: completed after 3 steps",
		"result: completed{steps=3}",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour codes without --color")
	}
	// The virtual clock starts at 0 and the demo's waits add up (1 s of
	// retry-after included), so the last reply lands after 3 s.
	// The two reads run together; the edit, which conflicts with both,
	// starts only after both ended.
	at := func(line string) int {
		i := strings.Index(out, line+"\n")
		if i < 0 {
			t.Errorf("timeline lacks %q", line)
		}
		return i
	}
	run1, run2, ran1, ran2, run3 := at("run call_1 list_dir"), at("run call_2 read_file"), at("ran call_1 list_dir"), at("ran call_2 read_file"), at("run call_3 edit_file")
	if max(run1, run2) > min(ran1, ran2) {
		t.Errorf("the reads did not run together:\n%s", out)
	}
	if run3 < max(ran1, ran2) {
		t.Errorf("the edit started before both reads ended:\n%s", out)
	}
	if !strings.Contains(out, "  0.000s ") || !strings.Contains(out, "  3.590s turn 1 step 3") {
		t.Errorf("timeline times are not the virtual clock's:\n%s", out)
	}
}

// TestDemoInstantIsDeterministic runs the demo twice on the virtual clock:
// the timelines agree but for the order of lines within one instant (the
// parallel reads end in either order).
func TestDemoInstantIsDeterministic(t *testing.T) {
	_, first, _ := demo(t)
	_, second, _ := demo(t)
	if sortInstants(first) != sortInstants(second) {
		t.Errorf("two instant runs differ:\n%s\n---\n%s", first, second)
	}
}

func TestDemoColor(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	code, out, errOut := demo(t, "--color")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "\x1b[") {
		t.Error("no colour codes with --color")
	}
	t.Setenv("NO_COLOR", "1")
	if _, out, _ := demo(t, "--color"); strings.Contains(out, "\x1b[") {
		t.Error("colour codes although NO_COLOR is set")
	}
}

func TestDemoEventsJSON(t *testing.T) {
	code, out, errOut := demo(t, "--events", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 20 {
		t.Fatalf("only %d lines:\n%s", len(lines), out)
	}
	var prev uint64
	kinds := map[string]int{}
	for i, line := range lines {
		var ev struct {
			ID      string          `json:"id"`
			Session string          `json:"session"`
			Seq     uint64          `json:"seq"`
			Kind    string          `json:"kind"`
			At      time.Time       `json:"at"`
			Payload json.RawMessage `json:"payload"`
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, line)
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if ev.Seq <= prev {
			t.Fatalf("line %d: seq %d after %d", i+1, ev.Seq, prev)
		}
		if ev.ID == "" || ev.Session == "" || ev.Kind == "" || ev.At.IsZero() {
			t.Errorf("line %d: incomplete envelope: %s", i+1, line)
		}
		prev = ev.Seq
		kinds[ev.Kind]++
	}
	if first := lines[0]; !strings.Contains(first, `"seq":1,`) {
		t.Errorf("the stream does not start at seq 1: %s", first)
	}
	for _, k := range []string{"agent/start", "turn/start", "llm/retry", "tool/result", "turn/end", "agent/end"} {
		if kinds[k] == 0 {
			t.Errorf("no %s event", k)
		}
	}
	if !strings.Contains(lines[len(lines)-1], `"kind":"agent/end"`) {
		t.Errorf("the stream does not end at agent/end: %s", lines[len(lines)-1])
	}
	if strings.Contains(out, "result: ") {
		t.Error("the JSON stream carries the human-readable result line")
	}
}

func TestDemoBadScript(t *testing.T) {
	for file, want := range map[string]string{
		"bad_finish.json":      `step 2: unknown finish "halt"`,
		"unknown_field.json":   `step 2: unknown field "halt"`,
		"bad_duration.json":    `step 1: part 2: bad delay "fast"`,
		"tool_call_no_id.json": `step 1: tool call 2: missing "id"`,
		"malformed.json":       "malformed JSON at line 4",
	} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("..", "..", "testdata", "scripts", "bad", file)
			code, out, errOut := demo(t, "--script", path)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if out != "" {
				t.Errorf("stdout: %s", out)
			}
			if !strings.HasPrefix(errOut, "loopchart: input.bad: script "+path+": ") || !strings.Contains(errOut, want) {
				t.Errorf("stderr %q, want the script and %q", errOut, want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		code, _, errOut := demo(t, "--script", filepath.Join(t.TempDir(), "nope.json"))
		if code != 1 || !strings.Contains(errOut, "nope.json") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

func TestDemoScriptThatFails(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "scripts", "fails.json")
	code, out, errOut := demo(t, "--script", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	if !strings.Contains(errOut, "the demo prompt did not complete: failed{steps=1 error=llm.syntax: ") {
		t.Errorf("stderr %q", errOut)
	}
	if !strings.Contains(out, "result: failed{steps=1") || !strings.Contains(out, "turn end: error{llm.syntax") {
		t.Errorf("timeline:\n%s", out)
	}
}

func TestDemoCustomPromptAndScript(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "scripts", "demo.json")
	code, out, errOut := demo(t, "--script", path, "--prompt", "count the words")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "user: count the words") || !strings.Contains(out, "result: completed{steps=3}") {
		t.Errorf("timeline:\n%s", out)
	}
}

func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--events", "yaml"},
		{"demo", "--bogus"},
		{"demo", "extra"},
		{"demo", "--db", ""},
	} {
		code, out, errOut := runCmd(t, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "loopchart: usage: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "diagrams", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDiagram(t *testing.T) {
	code, out, errOut := runCmd(t, "diagram", "turn")
	if code != 0 || errOut != "" {
		t.Fatalf("diagram turn: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "\nstateDiagram-v2\n") || out != golden(t, "turn.mmd") {
		t.Errorf("diagram turn differs from testdata/diagrams/turn.mmd:\n%s", out)
	}

	code, out, errOut = runCmd(t, "diagram", "--format", "dot", "agent")
	if code != 0 || errOut != "" {
		t.Fatalf("diagram --format dot agent: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "\ndigraph \"agent\" {") || out != golden(t, "agent.dot") {
		t.Errorf("diagram --format dot agent differs from testdata/diagrams/agent.dot:\n%s", out)
	}
}

func TestDiagramWrite(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, "diagram", "--write", dir)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, m := range diagrams.Machines() {
		for _, ext := range []string{"dot", "mmd"} {
			b, err := os.ReadFile(filepath.Join(dir, m+"."+ext))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != golden(t, m+"."+ext) {
				t.Errorf("%s.%s differs from the golden copy", m, ext)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown machine": {[]string{"diagram", "nope"}, "loopchart: usage: "},
		"unknown format":  {[]string{"diagram", "--format", "svg", "turn"}, "loopchart: usage: "},
		"no machine":      {[]string{"diagram"}, "loopchart: usage: diagram needs one machine: [agent tool turn]"},
		"two machines":    {[]string{"diagram", "turn", "tool"}, "loopchart: usage: diagram needs one machine"},
		"bad flag":        {[]string{"diagram", "--colour"}, "loopchart: usage: "},
		"unknown command": {[]string{"frobnicate"}, `loopchart: usage: unknown command "frobnicate"`},
		"no args":         {nil, "usage: loopchart <command> [flags]"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCmd(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if !strings.HasPrefix(errOut, tc.want) {
				t.Errorf("stderr %q, want it to start with %q", errOut, tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		code, out, errOut := runCmd(t, arg)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d, stderr %q", arg, code, errOut)
		}
		for _, want := range []string{"usage: loopchart <command>", "demo ", "--resume", "log sessions", "log show", "log verify", "log fold", "log export", "diagram "} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: help lacks %q:\n%s", arg, want, out)
			}
		}
	}
}

// sortInstants sorts the lines of each run of lines with one time.
func sortInstants(out string) string {
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && len(lines[j]) > 9 && len(lines[i]) > 9 && lines[j][:9] == lines[i][:9] {
			j++
		}
		slices.Sort(lines[i:j])
		i = j
	}
	return strings.Join(lines, "\n")
}

// --approve deny refuses the edit: the model gets the denial and the edit
// never runs.
func TestDemoApproveDeny(t *testing.T) {
	code, out, errOut := demo(t, "--approve", "deny")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"approval given for call_3: deny: the person running the demo said no",
		`result call_3: Tool "edit_file" was not approved: the person running the demo said no`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "run call_3 edit_file") {
		t.Errorf("the denied edit ran:\n%s", out)
	}
	if code, _, _ := demo(t, "--approve", "maybe"); code == 0 {
		t.Error("--approve maybe was accepted")
	}
}

// The stuck script shows loop detection's three acts: a warning, a blocked
// batch, and the run stopped with its detector named (exit status 1: the
// prompt failed).
func TestDemoStuckScript(t *testing.T) {
	code, out, _ := demo(t, "--script", "../../testdata/scripts/stuck.json", "--prompt", "Read missing.txt.")
	if code != 1 {
		t.Errorf("exit %d, want 1 (the prompt failed)", code)
	}
	for _, want := range []string{
		"loop warning on call_11: generic_repeat ×10 (read_file)",
		"loop blocks the batch at call_21: generic_repeat ×20 (read_file)",
		`result call_22: docs/\nnotes.txt\n`,
		"loop terminates the run at call_23: generic_repeat ×21 (read_file)",
		`result: failed{steps=23 error=loop.critical_repeat: a critical tool loop was detected again (generic_repeat, 21 times, tool "read_file")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
}
