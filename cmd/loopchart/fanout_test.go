package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// The fan-out demos run on the real clock (about a second and a half
// each: the children's scripted delays), so they run in parallel.

func fanoutScriptPath(name string) string {
	return filepath.Join("..", "..", "testdata", "scripts", name)
}

// fanoutRun runs the demo with a fan-out script, logged to a new
// temporary database.
func fanoutRun(t *testing.T, script string, args ...string) (db string, code int, stdout, stderr string) {
	t.Helper()
	db = tempDB(t)
	code, stdout, stderr = runCmd(t, append([]string{"demo", "--db", db, "--script", script}, args...)...)
	return db, code, stdout, stderr
}

// subAgent is one sub-agent section of the demo's output.
type subAgent struct {
	id, result, task, answer string
}

var sectionRE = regexp.MustCompile(`(?m)^sub-agent (\S+): (.*)\n  task:   (.*)\n  answer: (.*(?:\n {10}.*)*)`)

// splitFanout splits the fan-out demo's output into the parent's timeline
// and the sub-agent sections.
func splitFanout(t *testing.T, out string) (timeline string, subs []subAgent) {
	t.Helper()
	i := strings.Index(out, "\nsub-agent ")
	if i < 0 {
		t.Fatalf("no sub-agent section:\n%s", out)
	}
	timeline = out[:i]
	for _, m := range sectionRE.FindAllStringSubmatch(out[i:], -1) {
		answer := regexp.MustCompile(`\n {10}`).ReplaceAllString(m[4], "\n")
		subs = append(subs, subAgent{id: m[1], result: m[2], task: m[3], answer: answer})
	}
	return timeline, subs
}

// childSessions returns the sub-agent sessions logged in db.
func childSessions(t *testing.T, db string) []vocab.ID {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := sessions(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var kids []vocab.ID
	for _, in := range all {
		if strings.Contains(string(in.Session), "/sub-") {
			kids = append(kids, in.Session)
		}
	}
	return kids
}

func TestDemoFanout(t *testing.T) {
	t.Parallel()
	db, code, out, errOut := fanoutRun(t, fanoutScriptPath("fanout.json"))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	if !regexp.MustCompile(`^log: ` + regexp.QuoteMeta(db) + ` \(session [0-9A-Z]{26}\)\n$`).MatchString(errOut) {
		t.Errorf("stderr %q, want only the log line", errOut)
	}
	timeline, subs := splitFanout(t, out)
	answers := map[string]string{
		"summarise notes.txt":          "notes.txt says that loopchart runs the agent loop as explicit statecharts: every phase is a named state.",
		"list the todo items":          "docs/todo.txt has two items:\n1. draw the turn machine\n2. write the tables",
		"count the words of notes.txt": "notes.txt has 14 words (one line).",
	}
	if len(subs) != len(answers) {
		t.Fatalf("%d sub-agent sections, want %d:\n%s", len(subs), len(answers), out)
	}
	for i, s := range subs {
		want, ok := answers[s.task]
		if !ok || s.answer != want || s.result != "completed{steps=2}" {
			t.Errorf("sub-agent %d: %+v", i+1, s)
		}
		// Its end reached the parent once: in the agents_wait result,
		// or (had the child ended before the parent waited) as a
		// notification, the wait then saying "already delivered".
		if n := strings.Count(timeline, "[subagent completed] "+s.id+"\n"); n != 1 {
			t.Errorf("the end of %s reached the parent's timeline %d times", s.id, n)
		}
		indented := strings.ReplaceAll(want, "\n", "\n"+strings.Repeat(" ", 27))
		if n := strings.Count(timeline, indented); n != 1 {
			t.Errorf("the answer of %q shows %d times in the parent's timeline, want once", s.task, n)
		}
	}
	// The spawns in the model's order, then the wait and the composed
	// answer.
	inOrder(t, timeline,
		`call spawn_1 sessions_spawn({"task":"summarise notes.txt"})`,
		`call spawn_2 sessions_spawn({"task":"list the todo items"})`,
		`call spawn_3 sessions_spawn({"task":"count the words of notes.txt"})`,
		"result spawn_1: spawned sub-agent "+subs[0].id+" (running)",
		"result spawn_2: spawned sub-agent "+subs[1].id+" (running)",
		"result spawn_3: spawned sub-agent "+subs[2].id+" (running)",
		`call wait_1 agents_wait({"timeout":"1m"})`,
		"result wait_1: ",
		"assistant: Here is your briefing, from three sub-agents:",
		"- notes.txt has 14 words.",
		"turn end: completed after 3 steps",
	)
	if !strings.HasSuffix(out, "\nresult: completed{steps=3}\n") {
		t.Errorf("the output does not end with the prompt's result:\n%s", out)
	}
	if kids := childSessions(t, db); len(kids) != 3 {
		t.Errorf("sub-agent sessions in the log: %q", kids)
	}
}

// fanout_yield.json: the parent yields instead of waiting; the first
// delivery resumes its prompt, which then completes; the second delivery
// gets a turn of its own. The log verifies.
func TestDemoFanoutYield(t *testing.T) {
	t.Parallel()
	db, code, out, errOut := fanoutRun(t, fanoutScriptPath("fanout_yield.json"))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	timeline, subs := splitFanout(t, out)
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent sections, want 2:\n%s", len(subs), out)
	}
	inOrder(t, timeline,
		`call yield_1 sessions_yield({})`,
		"result yield_1: yielded: waiting for 2 sub-agents",
		"turn end: yielded after 2 steps",
		"prompt yielded ",
		"prompt resumed ",
		"user: [subagent completed] "+subs[0].id,
		"assistant: notes.txt: loopchart runs the agent loop",
		"turn end: completed after 1 steps",
		"user: [subagent completed] "+subs[1].id,
		"assistant: And the todo items",
	)
	if !strings.HasSuffix(out, "\nresult: completed{steps=1}\n") {
		t.Errorf("the output does not end with the prompt's result:\n%s", out)
	}
	if code, vout, verr := runCmd(t, "log", "verify", "--db", db); code != 0 {
		t.Fatalf("log verify: exit %d\n%s%s", code, vout, verr)
	}
}

func TestDemoFanoutLimits(t *testing.T) {
	t.Parallel()
	db, code, out, errOut := fanoutRun(t, fanoutScriptPath("fanout_limits.json"))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	timeline, subs := splitFanout(t, out)
	for i := 1; i <= 5; i++ {
		if !regexp.MustCompile(`result spawn_` + strconv.Itoa(i) + `: spawned sub-agent \S+ \(running\)`).MatchString(timeline) {
			t.Errorf("spawn_%d did not spawn:\n%s", i, timeline)
		}
	}
	if !strings.Contains(timeline, "result spawn_6: limit of 5 live sub-agents reached: wait for one to end (agents_wait) or cancel one (subagents), then spawn again\n") {
		t.Errorf("the sixth spawn was not refused:\n%s", timeline)
	}
	if !strings.Contains(timeline, "The sixth spawn was refused") {
		t.Errorf("no final answer:\n%s", timeline)
	}
	if len(subs) != 5 {
		t.Fatalf("%d sub-agents ran, want 5:\n%s", len(subs), out)
	}
	for _, s := range subs {
		if s.task == "name the last todo item" || s.result != "completed{steps=1}" {
			t.Errorf("sub-agent %+v", s)
		}
	}
	if kids := childSessions(t, db); len(kids) != 5 {
		t.Errorf("sub-agent sessions in the log: %q", kids)
	}
	if !strings.HasSuffix(out, "\nresult: completed{steps=3}\n") {
		t.Errorf("the output does not end with the prompt's result:\n%s", out)
	}
}

// A task the script has no child for fails that sub-agent with an error
// naming the task and the known ones, and the demo with it.
func TestDemoFanoutUnknownTask(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "unknown.json")
	if err := os.WriteFile(script, []byte(`{
  "parent": {"steps": [
    {"tool_calls": [{"id": "spawn_1", "name": "sessions_spawn", "args": {"task": "translate notes.txt"}}]},
    {"tool_calls": [{"id": "wait_1", "name": "agents_wait", "args": {"timeout": "1m"}}]},
    {"parts": [{"text": "The sub-agent failed."}]}
  ]},
  "children": {
    "summarise notes.txt": {"steps": [{"parts": [{"text": "a summary"}]}]},
    "count the words": {"steps": [{"parts": [{"text": "14"}]}]}
  }
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, code, out, errOut := fanoutRun(t, script, "--prompt", "Translate notes.txt.")
	want := `input.bad: script ` + script + `: no child script for the task "translate notes.txt" (its children: "count the words", "summarise notes.txt")`
	if code != 1 || errOut == "" || !strings.Contains(errOut, "loopchart: "+want+"\n") {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	_, subs := splitFanout(t, out)
	if len(subs) != 1 || subs[0].task != "translate notes.txt" || subs[0].result != "failed{steps=1 error="+want+"}" {
		t.Errorf("sub-agents %+v\n%s", subs, out)
	}
	// The parent heard of it: in the wait's result or as a notification.
	if !strings.Contains(out, "[subagent failed] "+subs[0].id+": failed{steps=1 error="+want+"}") &&
		!strings.Contains(out, subs[0].id+": failed{steps=1 error="+want+"} (already delivered above)") {
		t.Errorf("the parent did not hear of the failure:\n%s", out)
	}
}

func TestDemoFanoutEventsJSON(t *testing.T) {
	t.Parallel()
	_, code, out, errOut := fanoutRun(t, fanoutScriptPath("fanout.json"), "--events", "json")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	bySession := map[string]int{}
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev struct {
			Session string `json:"session"`
			Seq     uint64 `json:"seq"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Session == "" {
			t.Fatalf("line %d is not an event: %v\n%s", i+1, err, line)
		}
		if ev.Seq != uint64(bySession[ev.Session]+1) {
			t.Fatalf("line %d: session %s seq %d after %d", i+1, ev.Session, ev.Seq, bySession[ev.Session])
		}
		bySession[ev.Session]++
	}
	if len(bySession) != 4 {
		t.Errorf("events of %d sessions, want the parent's and three sub-agents'", len(bySession))
	}
}

// Fan-out scripts are checked before anything runs.
func TestDemoFanoutBadScript(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ok := `{"steps": [{"parts": [{"text": "hi"}]}]}`
	for _, c := range []struct {
		name, text string
		args       []string
		code       int
		want       string
	}{
		{"no_children.json", `{"parent": ` + ok + `}`, nil, 2, `a fan-out script needs "children"`},
		{"empty_children.json", `{"parent": ` + ok + `, "children": {}}`, nil, 2, `a fan-out script needs "children"`},
		{"bad_child.json", `{"parent": ` + ok + `, "children": {"sum up": {"steps": [{"halt": true}]}}}`, nil, 1, `(child "sum up"): step 1: unknown field "halt"`},
		{"bad_parent.json", `{"parent": {"steps": []}, "children": {"sum up": ` + ok + `}}`, nil, 1, `(parent): no steps`},
		{"unknown_field.json", `{"parent": ` + ok + `, "children": {"sum up": ` + ok + `}, "kids": {}}`, nil, 1, `fan-out script: unknown field "kids"`},
		{"resume.json", `{"parent": ` + ok + `, "children": {"sum up": ` + ok + `}}`, []string{"--resume"}, 2, "--resume and --session do not apply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := write(c.name, c.text)
			code, out, errOut := runCmd(t, append([]string{"demo", "--db", tempDB(t), "--script", path}, c.args...)...)
			if code != c.code || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, path) {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, c.code, out, errOut, c.want)
			}
		})
	}
}

// log show --tree follows the tree: the parent's timeline, then each
// sub-agent's below it, indented, in spawn order.
func TestLogShowTree(t *testing.T) {
	t.Parallel()
	db, code, _, errOut := fanoutRun(t, fanoutScriptPath("fanout.json"))
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}
	kids := childSessions(t, db)
	if len(kids) != 3 {
		t.Fatalf("children %v", kids)
	}
	parent := agentsvc.ParentOf(kids[0])
	code, out, errOut := runCmd(t, "log", "show", "--db", db, "--session", string(parent), "--tree")
	if code != 0 {
		t.Fatalf("log show --tree: exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "└─ sub-agent of "+string(parent)); n != 3 {
		t.Fatalf("%d sub-agent sections:\n%s", n, out)
	}
	for _, k := range kids {
		if !strings.Contains(out, "    session "+string(k)+" in ") {
			t.Errorf("no indented timeline of %s:\n%s", k, out)
		}
	}
	// A child's own tree is its timeline alone (children are leaves).
	code, out, _ = runCmd(t, "log", "show", "--db", db, "--session", string(kids[0]), "--tree")
	if code != 0 || strings.Contains(out, "└─") {
		t.Fatalf("a leaf's tree: exit %d\n%s", code, out)
	}
}
