package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// sessionRE finds the session id in the demo's log line.
var sessionRE = regexp.MustCompile(`^log: .* \(session ([^,)]+)`)

// demoInto runs the demo on a virtual clock into db and returns its
// session id.
func demoInto(t *testing.T, db string, args ...string) vocab.ID {
	t.Helper()
	code, out, errOut := runCmd(t, append([]string{"demo", "--instant", "--db", db}, args...)...)
	if code != 0 {
		t.Fatalf("demo: exit %d\nstderr: %s\nstdout:\n%s", code, errOut, out)
	}
	m := sessionRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("demo: no log line on stderr: %q", errOut)
	}
	return vocab.ID(m[1])
}

// logCmdOK runs a log command that must succeed and returns its output.
func logCmdOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, append([]string{"log"}, args...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("log %v: exit %d, stderr %q\nstdout:\n%s", args, code, errOut, out)
	}
	return out
}

// sessionRow is one row of log sessions.
type sessionRow struct {
	id, status, state, writer string
	head, epoch               int
}

func logSessionRows(t *testing.T, db string) []sessionRow {
	t.Helper()
	out := logCmdOK(t, "sessions", "--db", db)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "SESSION HEAD STATUS STATE CREATED UPDATED EPOCH WRITER" {
		t.Fatalf("header %q", lines[0])
	}
	var rows []sessionRow
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 8 {
			t.Fatalf("row %q", l)
		}
		head, err1 := strconv.Atoi(f[1])
		epoch, err2 := strconv.Atoi(f[6])
		if err1 != nil || err2 != nil {
			t.Fatalf("row %q", l)
		}
		rows = append(rows, sessionRow{id: f[0], head: head, status: f[2], state: f[3], epoch: epoch, writer: f[7]})
	}
	return rows
}

func TestLogSessions(t *testing.T) {
	db := tempDB(t)
	first := demoInto(t, db)
	second := demoInto(t, db)
	rows := logSessionRows(t, db)
	if len(rows) != 2 || rows[0].id != string(second) || rows[1].id != string(first) {
		t.Fatalf("sessions %+v, want %s then %s (newest first)", rows, second, first)
	}
	for _, r := range rows {
		if r.head < 50 || r.status != "idle" || r.state != "closed" || r.epoch != 1 || r.writer != "-" {
			t.Errorf("row %+v: want a closed, released session of one claim", r)
		}
	}
	out := logCmdOK(t, "sessions", "--db", db)
	if !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`).MatchString(out) {
		t.Errorf("no created/updated times:\n%s", out)
	}
}

func TestLogShow(t *testing.T) {
	db := tempDB(t)
	id := demoInto(t, db)
	out := logCmdOK(t, "show", "--db", db)
	for _, want := range []string{
		"session " + string(id) + " in " + db + ": ",
		"closed, last status idle\n",
		"turn 1 step 1   user: Make notes.txt say that every transition is logged.",
		"turn 1 step 1   call call_1 list_dir",
		"turn 1 step 2   retry: attempt 1 failed (llm.server: overloaded, please retry); attempt 2/10 in 1s",
		"turn 1 step 1   result call_3: edited notes.txt",
		"turn 1 step 3   turn end: completed after 3 steps",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log show lacks %q:\n%s", want, out)
		}
	}
	// Each line has the event's sequence number, and the times count from
	// the first event.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !regexp.MustCompile(`^ +\d+   0\.000s `).MatchString(lines[1]) {
		t.Errorf("first event line %q", lines[1])
	}
	if !strings.Contains(out, "  3.590s turn 1 step 3 ") {
		t.Errorf("times are not the session's:\n%s", out)
	}
	if again := logCmdOK(t, "show", "--db", db, "--session", string(id)); again != out {
		t.Errorf("--session %s shows another timeline:\n%s", id, again)
	}

	t.Run("turn", func(t *testing.T) {
		out := logCmdOK(t, "show", "--db", db, "--turn", "1")
		if strings.Contains(out, "agent  ready → active") || !strings.Contains(out, "turn 1 step 3   turn end") {
			t.Errorf("--turn 1:\n%s", out)
		}
		out = logCmdOK(t, "show", "--db", db, "--turn", "2")
		if !strings.HasSuffix(out, "\n(no event matches)\n") {
			t.Errorf("--turn 2:\n%s", out)
		}
	})
	t.Run("kind", func(t *testing.T) {
		out := logCmdOK(t, "show", "--db", db, "--kind", "tool/result")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")[1:]
		if len(lines) != 4 {
			t.Fatalf("--kind tool/result shows %d lines:\n%s", len(lines), out)
		}
		for _, l := range lines {
			if !strings.Contains(l, " result call_") {
				t.Errorf("--kind tool/result shows %q", l)
			}
		}
		// Kinds the timeline leaves out are shown raw when asked for.
		out = logCmdOK(t, "show", "--db", db, "--kind", "input/")
		for _, want := range []string{`input/open {"kind":"open"`, `input/submit {"kind":"submit"`, "input/close"} {
			if !strings.Contains(out, want) {
				t.Errorf("--kind input/ lacks %q:\n%s", want, out)
			}
		}
	})
}

func TestLogVerify(t *testing.T) {
	db := tempDB(t)
	first := demoInto(t, db)
	id := demoInto(t, db)
	out := logCmdOK(t, "verify", "--db", db)
	for _, want := range []string{
		"ok   " + db + ": integrity check\n",
		"ok   session " + string(id) + ": ",
		"ok   session " + string(first) + ": ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify lacks %q:\n%s", want, out)
		}
	}

	// Change the token count of the second session's first usage event
	// behind the store's back: the replay derives the original one.
	seq := tamper(t, db, id, `UPDATE events SET payload = json_set(payload, '$.usage.outputTokens', 999)
		WHERE session = ?1 AND seq = (SELECT min(seq) FROM events WHERE session = ?1 AND kind = 'usage')
		RETURNING seq`)
	for _, args := range [][]string{{"verify", "--db", db}, {"verify", "--db", db, "--session", string(id)}} {
		code, out, errOut := runCmd(t, append([]string{"log"}, args...)...)
		if code != 1 {
			t.Errorf("%v after tampering: exit %d, want 1\n%s", args, code, out)
		}
		for _, want := range []string{
			"ok   " + db + ": integrity check\n",
			"FAIL session " + string(id) + ": event " + strconv.FormatUint(seq, 10) + " diverges (log.diverged)\n",
			`  logged:   usage turn 1 step 1 {"usage":{"inputTokens":412,"outputTokens":999}}`,
			`  replayed: usage turn 1 step 1 {"usage":{"inputTokens":412,"outputTokens":58}}`,
			"  diff (-logged +replayed):\n",
			"999",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%v lacks %q:\n%s", args, want, out)
			}
		}
		if !strings.HasPrefix(errOut, "loopchart: verify: 1 of ") {
			t.Errorf("%v: stderr %q", args, errOut)
		}
	}
	// The untouched session still verifies on its own.
	logCmdOK(t, "verify", "--db", db, "--session", string(first))
}

// tamper runs q (with the session as ?1, returning one seq) on db with
// plain database/sql, the way any SQLite client could, and returns the
// seq. The "sqlite" driver is modernc.org/sqlite's, registered by the
// store package.
func tamper(t *testing.T, db string, id vocab.ID, q string) uint64 {
	t.Helper()
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var seq uint64
	if err := conn.QueryRow(q, string(id)).Scan(&seq); err != nil {
		t.Fatalf("tamper: %v", err)
	}
	return seq
}

func TestLogExport(t *testing.T) {
	db := tempDB(t)
	first := demoInto(t, db)
	second := demoInto(t, db)
	heads := map[vocab.ID]int{}
	for _, r := range logSessionRows(t, db) {
		heads[vocab.ID(r.id)] = r.head
	}

	out := logCmdOK(t, "export", "--db", db)
	next := map[vocab.ID]uint64{}
	var order []vocab.ID
	usage := 0
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev vocab.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d does not decode as a vocab.Event: %v\n%s", i+1, err, line)
		}
		if next[ev.Session] == 0 {
			order = append(order, ev.Session)
			next[ev.Session] = 1
		}
		if ev.Seq != next[ev.Session] {
			t.Fatalf("line %d: event %s seq %d, want seq %d", i+1, ev.ID(), ev.Seq, next[ev.Session])
		}
		next[ev.Session]++
		if ev.Kind == vocab.EventUsage {
			if _, ok := ev.Payload.(vocab.UsagePayload); !ok {
				t.Errorf("line %d: usage payload decodes as %T", i+1, ev.Payload)
			}
			usage++
		}
	}
	if len(order) != 2 || order[0] != first || order[1] != second {
		t.Errorf("sessions exported in the order %v, want %s then %s (oldest first)", order, first, second)
	}
	for id, n := range next {
		if int(n-1) != heads[id] {
			t.Errorf("session %s: %d events exported, its head is %d", id, n-1, heads[id])
		}
	}
	if usage != 6 {
		t.Errorf("%d usage events, want 3 per session", usage)
	}

	one := logCmdOK(t, "export", "--db", db, "--session", string(second))
	if n := strings.Count(one, "\n"); n != heads[second] || strings.Contains(one, string(first)) {
		t.Errorf("export --session %s: %d lines, want its %d events only", second, n, heads[second])
	}
}

func TestLogFold(t *testing.T) {
	db := tempDB(t)
	id := demoInto(t, db)
	out := logCmdOK(t, "fold", "--db", db)
	var got struct {
		Session  vocab.ID        `json:"session"`
		Head     int             `json:"head"`
		Snapshot *uint64         `json:"snapshot"`
		Inputs   int             `json:"inputs"`
		Events   int             `json:"events"`
		Closed   bool            `json:"closed"`
		Agent    string          `json:"agent"`
		History  int             `json:"history"`
		Core     json.RawMessage `json:"core"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("fold prints no JSON object: %v\n%s", err, out)
	}
	head := logSessionRows(t, db)[0].head
	if got.Session != id || got.Head != head || got.Events != head || got.Snapshot == nil || got.Inputs == 0 || !got.Closed {
		t.Errorf("fold: %+v, want session %s folded from its %d events, closed", got, id, head)
	}
	var core struct {
		Version int `json:"version"`
		Seq     int `json:"seq"`
	}
	if err := json.Unmarshal(got.Core, &core); err != nil || core.Version == 0 || core.Seq != head {
		t.Errorf("core snapshot %.200s: %v", got.Core, err)
	}
	if got.History == 0 {
		t.Errorf("fold: no history")
	}
}

func TestLogErrors(t *testing.T) {
	t.Run("missing database", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "nope.db")
		for _, sub := range []string{"sessions", "show", "verify", "fold", "export"} {
			code, out, errOut := runCmd(t, "log", sub, "--db", db)
			if code != 1 || out != "" || errOut != "loopchart: no log database "+db+" (loopchart demo --db "+db+" writes one)\n" {
				t.Errorf("log %s: exit %d, stdout %q, stderr %q", sub, code, out, errOut)
			}
		}
		entries, err := os.ReadDir(filepath.Dir(db))
		if err != nil || len(entries) != 0 {
			t.Errorf("the log commands wrote %v (%v)", entries, err)
		}
		// The same holds for a resume.
		code, _, errOut := runCmd(t, "demo", "--instant", "--resume", "--db", db)
		if code != 1 || !strings.Contains(errOut, "no log database") {
			t.Errorf("demo --resume: exit %d, stderr %q", code, errOut)
		}
		if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("demo --resume created %s", db)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		db := tempDB(t)
		demoInto(t, db)
		for _, sub := range []string{"show", "verify", "fold", "export"} {
			code, out, errOut := runCmd(t, "log", sub, "--db", db, "--session", "nope")
			if code != 1 || out != "" || !strings.HasPrefix(errOut, "loopchart: log.no_session: ") || !strings.Contains(errOut, "nope") {
				t.Errorf("log %s --session nope: exit %d, stdout %q, stderr %q", sub, code, out, errOut)
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"log"},
			{"log", "bogus"},
			{"log", "show", "--bogus"},
			{"log", "show", "extra"},
			{"log", "show", "--turn", "-1"},
			{"log", "show", "--turn", "x"},
			{"log", "sessions", "--session", "x"},
			{"log", "verify", "--kind", "usage"},
			{"log", "export", "--db"},
		} {
			code, out, errOut := runCmd(t, args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "loopchart: usage: ") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	})
}
