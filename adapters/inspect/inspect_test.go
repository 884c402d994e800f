package inspect

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// sessionsResponse is the answer of api/sessions.
type sessionsResponse struct {
	Sessions []SessionRow `json:"sessions"`
	More     bool         `json:"more"`
}

// eventsResponse is the answer of api/sessions/{id}/events.
type eventsResponse struct {
	Events []Row  `json:"events"`
	Head   uint64 `json:"head"`
	More   bool   `json:"more"`
}

func seqsOf(rows []Row) []uint64 {
	var out []uint64
	for _, r := range rows {
		out = append(out, r.Seq)
	}
	return out
}

// The list is newest first; search matches the id literally (% and _
// are no wildcards) and without case.
func TestSessionListOrderAndSearch(t *testing.T) {
	path, agentID := agentDB(t)
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	later := time.Now().Add(time.Hour)
	ids := []vocab.ID{"run-100%", "run_2", "run-3", "plain"}
	for i, id := range ids {
		c, _, err := st.Claim(context.Background(), id, "01JINSPECTRUN0000000000001", true)
		if err != nil {
			t.Fatal(err)
		}
		appendEvents(t, st, id, c, 0, later.Add(time.Duration(i)*time.Minute), vocab.StatusPayload{Status: "running"})
	}
	h := newHandler(t, path, Options{})

	list := func(q string) []string {
		t.Helper()
		var res sessionsResponse
		getJSON(t, h, "/api/sessions?q="+q, &res)
		var out []string
		for _, s := range res.Sessions {
			out = append(out, s.ID)
		}
		return out
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"", []string{"plain", "run-3", "run_2", "run-100%", string(agentID)}},
		{"%25", []string{"run-100%"}}, // %
		{"_", []string{"run_2"}},
		{"RUN-", []string{"run-3", "run-100%"}},
		{"%25%25", nil},
		{"0001", []string{string(agentID)}},
	} {
		if got := list(c.q); !slices.Equal(got, c.want) {
			t.Errorf("search %q: %v, want %v", c.q, got, c.want)
		}
	}

	var res sessionsResponse
	getJSON(t, h, "/api/sessions?q=INSPECTAGENT", &res)
	if len(res.Sessions) != 1 {
		t.Fatalf("agent session: %+v", res)
	}
	s := res.Sessions[0]
	if s.Turns != 2 || !s.Closed || s.Status != "idle" || s.Result != "completed{steps=2}" || s.Events < 50 || s.Updated.IsZero() {
		t.Errorf("agent session row: %+v", s)
	}
	getJSON(t, h, "/api/sessions?limit=2&offset=1", &res)
	if len(res.Sessions) != 2 || res.Sessions[0].ID != "run-3" || !res.More {
		t.Errorf("page 2: %+v", res)
	}
	if r, _ := get(t, h, "/api/sessions?limit=x"); r.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad limit: %s", r.Status)
	}
}

// The session page inlines the three diagrams, with an id, a class and a
// data attribute on every state and transition, and runs no inline code.
func TestSessionPage(t *testing.T) {
	path, id := agentDB(t)
	h := newHandler(t, path, Options{})
	res, body := get(t, h, "/s/"+string(id))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("session page: %s: %s", res.Status, body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); csp != "default-src 'self'" {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, want := range []string{
		`id="diagram-agent"`, `id="diagram-turn"`, `id="diagram-tool"`, `id="timeline"`, `id="calls"`,
		`data-session="` + string(id) + `"`,
		`<g id="turn&#45;state&#45;thinking" class="node state" data-machine="turn" data-state="thinking">`,
		`<g id="turn&#45;state&#45;acting" class="cluster state composite" data-machine="turn" data-state="acting">`,
		`<g id="tool&#45;state&#45;succeeded" class="node state final" data-machine="tool" data-state="succeeded">`,
		`<script src="../static/app.js" defer></script>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// Every transition of the turn definition, once, by its index.
	for i := range turn.Definition.Transitions {
		want := fmt.Sprintf(`<g id="turn&#45;tr&#45;%d" class="edge transition" data-machine="turn" data-transition="%d">`, i, i)
		if n := strings.Count(body, want); n != 1 {
			t.Errorf("turn transition %d appears %d times", i, n)
		}
	}
	if n := strings.Count(body, "<script"); n != 1 {
		t.Errorf("%d script elements, want the one app.js", n)
	}
	for _, bad := range []string{` style="`, ` onclick=`, ` onload=`, `javascript:`, `src="http`, `href="http`, `<?xml`, `<!DOCTYPE svg`} {
		if strings.Contains(body, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}

	res, js := get(t, h, "/static/app.js")
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Type"), "javascript") || !strings.Contains(js, "textContent") {
		t.Errorf("app.js: %s %q", res.Status, res.Header.Get("Content-Type"))
	}
	if strings.Contains(js, "innerHTML") || strings.Contains(js, "insertAdjacentHTML") || strings.Contains(js, "eval(") {
		t.Error("app.js parses strings as markup or code")
	}
	if res, _ := get(t, h, "/static/app.css"); res.StatusCode != http.StatusOK {
		t.Errorf("app.css: %s", res.Status)
	}
	if res, _ := get(t, h, "/static/session.html"); res.StatusCode != http.StatusNotFound {
		t.Errorf("a template is served as a static file: %s", res.Status)
	}
	if res, _ := get(t, h, "/s/no-such-session"); res.StatusCode != http.StatusNotFound {
		t.Errorf("a missing session's page: %s", res.Status)
	}
	if res, _ := get(t, h, "/api/sessions/no-such-session/events"); res.StatusCode != http.StatusNotFound {
		t.Errorf("a missing session's events: %s", res.Status)
	}
	res, svg := get(t, h, "/diagrams/turn.svg")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(svg, "<svg") {
		t.Errorf("turn.svg: %s %q", res.Status, svg[:min(len(svg), 40)])
	}
	var info struct {
		Machines []struct {
			Machine  string `json:"machine"`
			Version  int    `json:"version"`
			Drawable bool   `json:"drawable"`
		} `json:"machines"`
	}
	getJSON(t, h, "/api/sessions/"+string(id), &info)
	if len(info.Machines) != 3 || !info.Machines[0].Drawable || !info.Machines[1].Drawable || !info.Machines[2].Drawable {
		t.Errorf("machines: %+v", info.Machines)
	}
}

// Each definition is drawn once, however many pages ask for it at once.
func TestDiagramsDrawnOnce(t *testing.T) {
	path, id := agentDB(t)
	h := newHandler(t, path, Options{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if res, _ := get(t, h, "/s/"+string(id)); res.StatusCode != http.StatusOK {
				t.Errorf("page: %s", res.Status)
			}
		})
	}
	wg.Wait()
	h.draw.mu.Lock()
	n := h.draw.renders
	h.draw.mu.Unlock()
	if n != 3 {
		t.Errorf("%d drawings for 3 definitions", n)
	}
}

// foldStates is the reference for time travel: a plain replay of the
// transition events up to at.
func foldStates(events []vocab.Event, at uint64) (agent, turnState string, turnNo int, tools map[string]string, last map[string]uint64) {
	tools, last = map[string]string{}, map[string]uint64{}
	for _, e := range events {
		if e.Seq > at {
			break
		}
		switch p := e.Payload.(type) {
		case vocab.TransitionPayload:
			switch p.Machine {
			case "agent":
				agent = p.To
			case "turn":
				turnState = p.To
			case "tool":
				tools[p.Instance] = p.To
				last["tool "+p.Instance] = e.Seq
			}
			last[p.Machine] = e.Seq
		}
		if e.Kind == vocab.EventTurnStart {
			turnNo, turnState = e.Turn, "gating"
			delete(last, "turn")
		}
	}
	return
}

// States as of three chosen events match what the transition events say.
func TestTimeTravel(t *testing.T) {
	path, id := agentDB(t)
	events := readLog(t, path, id)
	h := newHandler(t, path, Options{})

	find := func(what string, ok func(vocab.Event) bool) uint64 {
		t.Helper()
		for _, e := range events {
			if ok(e) {
				return e.Seq
			}
		}
		t.Fatalf("no event %s in the log", what)
		return 0
	}
	tr := func(e vocab.Event) vocab.TransitionPayload { p, _ := e.Payload.(vocab.TransitionPayload); return p }
	chosen := []uint64{
		// the first tool call leaving "before"
		find("tool call_1 before →", func(e vocab.Event) bool { return tr(e).Instance == "call_1" && tr(e).From == "before" }),
		// the failed request that waits to be retried
		find("turn → retrying", func(e vocab.Event) bool { return tr(e).Machine == "turn" && tr(e).To == "retrying" }),
		// turn 2's tool call (not a transition): its turn is running
		find("tool/call call_3", func(e vocab.Event) bool {
			p, ok := e.Payload.(vocab.ToolPayload)
			return ok && e.Kind == vocab.EventToolCall && p.Call.ID == "call_3"
		}),
	}
	for _, at := range chosen {
		agent, turnState, turnNo, tools, last := foldStates(events, at)
		var got States
		getJSON(t, h, fmt.Sprintf("/api/sessions/%s/states?at=%d", id, at), &got)
		if got.At != at || got.Turn != turnNo || len(got.Machines) != 3 {
			t.Fatalf("at %d: %+v", at, got)
		}
		a, tu, to := got.Machines[0], got.Machines[1], got.Machines[2]
		if a.State != agent || a.Last == nil || a.Last.Seq != last["agent"] {
			t.Errorf("at %d: agent %+v, want %s (last at %d)", at, a, agent, last["agent"])
		}
		if tu.State != turnState || tu.Turn != turnNo {
			t.Errorf("at %d: turn %+v, want turn %d in %s", at, tu, turnNo, turnState)
		}
		if l, ok := last["turn"]; ok != (tu.Last != nil) || ok && tu.Last.Seq != l {
			t.Errorf("at %d: turn's last transition %+v, want at %d", at, tu.Last, l)
		}
		want := tools[to.Instance]
		if want == "" {
			want = "before" // a call with no transition yet
		}
		if to.Instance == "" || to.State != want {
			t.Errorf("at %d: tool %+v, want %s", at, to, want)
		}
		// The index of the transition taken is the definition's.
		if tu.Last != nil {
			d := turn.Definition.Transitions[tu.Last.Index]
			if string(d.On) != tu.Last.Trigger {
				t.Errorf("at %d: turn transition %d is %s, the log took %s", at, tu.Last.Index, d.On, tu.Last.Trigger)
			}
		}
		// A nested state lights its superstates.
		if tu.State == "running" && !slices.Equal(tu.Path, []string{"running", "acting", "open"}) {
			t.Errorf("at %d: path of running: %v", at, tu.Path)
		}
		for _, c := range got.Calls {
			if c.State != tools[c.ID] && !(tools[c.ID] == "" && c.State == "before") {
				t.Errorf("at %d: call %s in %s, want %s", at, c.ID, c.State, tools[c.ID])
			}
		}
	}
	// The second chosen event: the turn waits to retry.
	var got States
	getJSON(t, h, fmt.Sprintf("/api/sessions/%s/states?at=%d", id, chosen[1]), &got)
	if got.Machines[1].State != "retrying" || got.Machines[1].Last.Seq != chosen[1] {
		t.Errorf("at the retry: %+v", got.Machines[1])
	}
	// A chosen call is shown instead of the latest.
	got = States{}
	getJSON(t, h, fmt.Sprintf("/api/sessions/%s/states?at=%d&call=call_1", id, chosen[2]), &got)
	if got.Machines[2].Instance != "call_1" || got.Machines[2].State != "succeeded" {
		t.Errorf("call_1 chosen: %+v", got.Machines[2])
	}
	// Before any turn, no turn instance.
	got = States{}
	getJSON(t, h, fmt.Sprintf("/api/sessions/%s/states?at=1", id), &got)
	if got.Turn != 0 || got.Machines[1].State != "" || got.Machines[0].State != "ready" || got.Machines[2].Instance != "" {
		t.Errorf("at 1: %+v", got)
	}
}

// The timeline pages, filters by turn and kind, and keeps model and tool
// text as JSON strings.
func TestEvents(t *testing.T) {
	path, id := agentDB(t)
	events := readLog(t, path, id)
	h := newHandler(t, path, Options{})
	base := "/api/sessions/" + string(id) + "/events"

	var res eventsResponse
	getJSON(t, h, base+"?from=10&limit=5", &res)
	if !slices.Equal(seqsOf(res.Events), []uint64{10, 11, 12, 13, 14}) || !res.More || res.Head != uint64(len(events)) {
		t.Errorf("from 10: %v more %v head %d", seqsOf(res.Events), res.More, res.Head)
	}
	getJSON(t, h, base+"?before=10&limit=3", &res)
	if !slices.Equal(seqsOf(res.Events), []uint64{7, 8, 9}) || !res.More {
		t.Errorf("before 10: %v more %v", seqsOf(res.Events), res.More)
	}
	getJSON(t, h, base+"?before=1", &res)
	if len(res.Events) != 0 {
		t.Errorf("before 1: %v", seqsOf(res.Events))
	}
	getJSON(t, h, base+"?turn=2&kind=tool/,machine/transition&limit=1000", &res)
	var want []uint64
	for _, e := range events {
		if e.Turn == 2 && (strings.HasPrefix(string(e.Kind), "tool/") || e.Kind == vocab.EventTransition) {
			want = append(want, e.Seq)
		}
	}
	if !slices.Equal(seqsOf(res.Events), want) || len(want) == 0 {
		t.Errorf("turn 2, tool and transitions: %v, want %v", seqsOf(res.Events), want)
	}
	for _, r := range res.Events {
		if r.Kind == string(vocab.EventTransition) && r.Machine == "" || strings.HasPrefix(r.Kind, "tool/") && r.Call != "call_3" {
			t.Errorf("row %+v", r)
		}
	}
	getJSON(t, h, base+"?kind=tool_", &res)
	if len(res.Events) != 0 {
		t.Errorf("_ matched as a wildcard: %v", seqsOf(res.Events))
	}
	if r, _ := get(t, h, base+"?turn=x"); r.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad turn: %s", r.Status)
	}

	// The shout tool's result holds a script: it comes back encoded.
	body := getJSON(t, h, base+"?kind=tool/result", &res)
	if strings.Contains(body, "<script") || !strings.Contains(body, `\u003cscript\u003e`) {
		t.Errorf("the markup is not escaped: %s", body)
	}
	found := uint64(0)
	for _, r := range res.Events {
		if strings.Contains(r.Summary, markup) {
			found = r.Seq
		}
	}
	if found == 0 {
		t.Fatalf("no result holds %s: %+v", markup, res.Events)
	}
	var one struct {
		Event   Row            `json:"event"`
		Payload map[string]any `json:"payload"`
	}
	body = getJSON(t, h, fmt.Sprintf("%s/%d", base, found), &one)
	if strings.Contains(body, "<script") || one.Event.Seq != found || one.Payload["result"].(map[string]any)["content"] != markup {
		t.Errorf("event %d: %s", found, body)
	}
}

func TestLocalOnly(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := LocalOnly(ok)
	for host, want := range map[string]int{
		"localhost:7777":     http.StatusOK,
		"LOCALHOST":          http.StatusOK,
		"127.0.0.1:7777":     http.StatusOK,
		"127.0.0.1":          http.StatusOK,
		"[::1]:7777":         http.StatusOK,
		"[::1]":              http.StatusOK,
		"evil.example":       http.StatusMisdirectedRequest,
		"evil.example:7777":  http.StatusMisdirectedRequest,
		"localhost.evil.com": http.StatusMisdirectedRequest,
		"127.0.0.2:7777":     http.StatusMisdirectedRequest,
		"":                   http.StatusMisdirectedRequest,
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
}

// Mounted under a prefix, the pages' relative URLs resolve under it; the
// handler refuses anything but reads.
func TestMountedUnderPrefix(t *testing.T) {
	path, id := agentDB(t)
	h := newHandler(t, path, Options{})
	mux := http.NewServeMux()
	mux.Handle("/inspect/", http.StripPrefix("/inspect", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, body := get(t, mux, "/inspect/")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `src="static/app.js"`) || !strings.Contains(body, `id="session-rows"`) {
		t.Fatalf("the list under /inspect/: %s", res.Status)
	}
	res, body = get(t, mux, "/inspect/s/"+string(id))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `src="../static/app.js"`) || !strings.Contains(body, `href="../"`) {
		t.Fatalf("a session under /inspect/: %s", res.Status)
	}
	// What the page's relative URLs resolve to.
	for _, u := range []string{"/inspect/static/app.js", "/inspect/api/sessions/" + string(id) + "/states", "/inspect/api/sessions?q=INSPECT"} {
		r, err := srv.Client().Get(srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", u, r.Status)
		}
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inspect/api/sessions", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Content-Security-Policy") != "default-src 'self'" {
		t.Errorf("POST: %d", rec.Code)
	}
}

func TestNewErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := New(Options{DB: missing}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing database: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Error("New created the database")
	}
	if _, err := New(Options{}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("no database: %v", err)
	}
	if _, err := New(Options{DB: missing, PollInterval: -1}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("a negative interval: %v", err)
	}
	if _, err := New(Options{DB: missing, Definitions: []Definition{{Machine: "turn", Initial: "x"}}}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("a bad definition: %v", err)
	}
}

// A log whose transitions this build's definition does not explain is
// drawn with another definition that does, or the page says it cannot be
// drawn; a snapshot recording another version is noticed too.
func TestOtherDefinitionVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	const id = vocab.ID("old-session")
	c, _, err := st.Claim(context.Background(), id, "01JINSPECTRUN0000000000001", true)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	head := appendEvents(t, st, id, c, 0, now, vocab.EventTurnStart,
		vocab.TransitionPayload{Machine: "turn", From: "gating", To: "pondering", Trigger: "gate.ponder"},
		vocab.TransitionPayload{Machine: "turn", From: "pondering", To: "thinking", Trigger: "pondered"},
	)
	snap := vocab.Event{Session: id, Seq: head + 1, At: now, Kind: vocab.EventSnapshot,
		Payload: vocab.SnapshotPayload{Seq: head, Core: []byte(`{"agent":{"machine":"agent","version":7,"state":"ready"}}`)}}
	if err := st.Append(context.Background(), id, c, []vocab.Event{snap}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	h := newHandler(t, path, Options{})
	_, body := get(t, h, "/s/"+string(id))
	for _, want := range []string{
		`id="problem-turn"`, "event 2 (turn gating → pondering on gate.ponder) is not a transition of the turn definition version 1",
		`id="problem-agent"`, "the log&#39;s snapshots record version 7 of the agent machine",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not say %s", want)
		}
	}
	if strings.Contains(body, `data-machine="turn" data-state=`) || !strings.Contains(body, `data-machine="tool" data-state=`) {
		t.Error("the turn machine is drawn with a definition that does not explain its log, or the tool machine is not drawn")
	}
	var got States
	getJSON(t, h, "/api/sessions/"+string(id)+"/states", &got)
	if tu := got.Machines[1]; tu.Drawable || tu.State != "thinking" || tu.Last == nil || tu.Last.Index != -1 || tu.Problem == "" {
		t.Errorf("turn without a definition: %+v", tu)
	}

	older := Definition{Machine: "turn", Version: 1, Initial: "open",
		States: []DefState{{Name: "open", Initial: "gating"}, {Name: "gating", Parent: "open"}, {Name: "pondering", Parent: "open"}, {Name: "thinking", Parent: "open"}},
		Transitions: []DefTransition{
			{From: "gating", On: "gate.ponder", To: "pondering"},
			{From: "pondering", On: "pondered", To: "thinking"},
		}}
	h2 := newHandler(t, path, Options{Definitions: []Definition{older}})
	_, body = get(t, h2, "/s/"+string(id))
	if strings.Contains(body, `id="problem-turn"`) || !strings.Contains(body, `data-machine="turn" data-state="pondering"`) {
		t.Error("the turn machine is not drawn with the definition that explains its log")
	}
	getJSON(t, h2, "/api/sessions/"+string(id)+"/states?at=3", &got)
	if tu := got.Machines[1]; !tu.Drawable || tu.State != "thinking" || tu.Last.Index != 1 || !slices.Equal(tu.Path, []string{"thinking", "open"}) {
		t.Errorf("turn with the older definition: %+v", tu)
	}
}

// Control characters and long texts make one clipped line.
func TestClip(t *testing.T) {
	if got := clip("a\n\tb  c", 10); got != "a b c" {
		t.Errorf("clip: %q", got)
	}
	if got := clip(strings.Repeat("é", 300), 5); got != "ééééé…" {
		t.Errorf("clip: %q", got)
	}
	if !regexp.MustCompile(`^turn-state-a_b$`).MatchString("turn-state-" + idPart("a.b")) {
		t.Error("idPart")
	}
}

// A handler on a store the caller opened leaves it open when it closes.
func TestCallersStore(t *testing.T) {
	path, id := agentDB(t)
	ro, err := sqlite.OpenReadOnly(context.Background(), path, sqlite.ReadOnlyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := New(Options{DB: path, Store: ro}); vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("both DB and Store: %v", err)
	}
	h, err := New(Options{Store: ro})
	if err != nil {
		t.Fatal(err)
	}
	var res sessionsResponse
	getJSON(t, h, "/api/sessions", &res)
	if len(res.Sessions) != 1 || res.Sessions[0].ID != string(id) {
		t.Errorf("sessions: %+v", res)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := get(t, h, "/api/sessions"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: %s", r.Status)
	}
	if _, err := ro.DataVersion(context.Background()); err != nil {
		t.Errorf("the caller's store after the handler closed: %v", err)
	}
}

// A sub-agent's page links its parent; a parent's page links its own
// children, not its grandchildren.
func TestSessionPageLinksTheSubAgentTree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tree.db")
	parent := vocab.ID("01JINSPECTPARENT0000000001")
	child := parent + vocab.SubAgentMark + "0123456789"
	grandchild := child + vocab.SubAgentMark + "abcdef0123"
	for _, id := range []vocab.ID{parent, child, grandchild} {
		writeAgentSession(t, path, id)
	}
	h := newHandler(t, path, Options{})
	_, body := get(t, h, "/s/"+string(parent))
	if !strings.Contains(body, `<a class="child" href="`+url.PathEscape(string(child))+`">`) {
		t.Errorf("the parent's page does not link its child:\n%s", body)
	}
	if strings.Contains(body, url.PathEscape(string(grandchild))) || strings.Contains(body, `id="parent"`) {
		t.Errorf("the parent's page links a grandchild or a parent")
	}
	res, body := get(t, h, "/s/"+url.PathEscape(string(child)))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("child page: %s", res.Status)
	}
	if !strings.Contains(body, `<a id="parent" href="`+string(parent)+`">`) {
		t.Errorf("the child's page does not link its parent")
	}
	if !strings.Contains(body, `<a class="child" href="`+url.PathEscape(string(grandchild))+`">`) {
		t.Errorf("the child's page does not link its own child")
	}
}
