package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/loopchart/loopchart"
	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/inspect"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// The browser tests drive the inspector's pages in a headless Chromium
// (Debian's chromium, found on PATH) with chromedp. Without a browser they
// skip, unless LOOPCHART_BROWSER=required (as in CI), which makes a
// missing browser a failure.
//
// One browser serves every subtest of TestBrowser, each in a tab of its
// own. The package's TestMain (helpers_test.go) checks that no goroutine
// outlives the tests, and offers no hook after the last test, so the
// browser lives as long as TestBrowser: it starts with the first tab a
// subtest opens and stops when TestBrowser ends.

var screenshotFlag = flag.String("screenshot", "", "also write the screenshot of the inspector's session page to this PNG file (or set LOOPCHART_SCREENSHOT)")

// browserWait bounds every wait of the browser tests: a failure guard,
// never a way to let something happen.
const browserWait = 15 * time.Second

// Sessions of the browser tests.
const (
	demoID   = vocab.ID("01JINSPECTBROWSERDEMO00001")
	scriptID = vocab.ID("01JINSPECTBROWSERSCRIPT001")
	liveID   = vocab.ID("01JINSPECTBROWSERLIVE00001")
)

// demoPrompt is the prompt of `loopchart demo`.
const demoPrompt = "Make notes.txt say that every transition is logged."

// pwn is what the leak tool returns: markup that would run if the page
// parsed tool text as HTML.
const pwn = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`

// TestBrowser opens the inspector's session pages in Chromium: time
// travel on the demo's session (TimeTravel, Keys), a live session's page
// following its log (Live), and a tool result holding markup shown as
// text (ScriptAsText). TimeTravel saves a screenshot of the demo's page
// with an event selected (see screenshot); to refresh the README's:
//
//	go test -run Browser/TimeTravel ./adapters/inspect -screenshot "$PWD/docs/inspector.png"
func TestBrowser(t *testing.T) {
	b := newBrowser(t)
	site := newDemoSite(t)
	t.Run("TimeTravel", func(t *testing.T) { testTimeTravel(t, b, site) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, b, site) })
	t.Run("Live", func(t *testing.T) { testLive(t, b) })
	t.Run("ScriptAsText", func(t *testing.T) { testScriptAsText(t, b, site) })
	t.Run("FollowDropsTheEvent", func(t *testing.T) { testFollowDropsTheEvent(t, b, site) })
	t.Run("Zoom", func(t *testing.T) { testZoom(t, b, site) })
}

// ---- the sessions ----

// demoFiles seed the demo's workspace, as cmd/loopchart's demo does.
var demoFiles = fstest.MapFS{
	"notes.txt":     {Data: []byte("loopchart runs the agent loop as explicit statecharts: every phase is a named state.\n")},
	"docs/todo.txt": {Data: []byte("draw the turn machine\nwrite the tables\n")},
}

// demoScript is the CLI demo's script (testdata/scripts/demo.json).
func demoScript(t *testing.T) *scripted.Script {
	t.Helper()
	s, err := scripted.Parse(loopchart.DemoScript, "testdata/scripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// parseScript parses a script written in a test.
func parseScript(t *testing.T, name, src string) *scripted.Script {
	t.Helper()
	s, err := scripted.Parse([]byte(src), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// demoTools are the demo's workspace tools on a temporary copy of its
// files.
func demoTools(t *testing.T) []vocab.Tool {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, demoFiles); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws.Tools()
}

// textTool is a tool that returns a fixed text; with gate, each call
// first says so on started and waits until gate is closed.
type textTool struct {
	name, result string
	started      chan<- string
	gate         <-chan struct{}
}

func (x textTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: x.name, Description: "returns a text", NoAccess: true, Schema: json.RawMessage(`{"type":"object"}`)}
}

func (x textTool) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	if x.gate != nil {
		x.started <- call.ID
		select {
		case <-x.gate:
		case <-ctx.Done():
			return vocab.ToolResult{}, ctx.Err()
		}
	}
	return vocab.ToolResult{CallID: call.ID, Name: x.name, Content: x.result}, nil
}

// writer is an agentsvc session logging to a SQLite file, as the demo
// does: the inspector reads the same file. It plays its script on a
// fake clock that a goroutine moves on (the demo's --instant), and
// approves the calls it asks about (edit_file and write_file, as the demo
// asks).
type writer struct {
	t    *testing.T
	st   *sqlite.Store
	svc  *agentsvc.Service
	stop context.CancelFunc
	bg   sync.WaitGroup
	done bool
}

func openWriter(t *testing.T, path string, id vocab.ID, script *scripted.Script, tools []vocab.Tool) *writer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserWait)
	defer cancel()
	st, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now().Round(0).UTC())
	svc, err := agentsvc.Open(ctx, st, id, agentsvc.Options{
		Provider: scripted.New(script, clk),
		Tools:    tools,
		Clock:    clk,
		Model:    "scripted",
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	svc.OnBeforeTool.Register("ask", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		if c.Call.Name == "edit_file" || c.Call.Name == "write_file" {
			c.Ask = "Let the agent change the workspace?"
		}
		return next(ctx, c)
	})
	bgCtx, stop := context.WithCancel(context.Background())
	w := &writer{t: t, st: st, svc: svc, stop: stop}
	w.bg.Go(func() {
		// Only what is due within a minute: not the run's timeout nor
		// the stream watchdog's.
		for clk.WaitForDue(bgCtx, time.Minute) == nil {
			clk.AdvanceToNextWithin(time.Minute)
		}
	})
	w.bg.Go(func() {
		for ev, err := range svc.Events(bgCtx, 0) {
			if err != nil {
				return
			}
			if p, ok := ev.Payload.(vocab.ApprovalPayload); ok && p.State == vocab.ApprovalRequested {
				if err := svc.Approve(p.Call.ID, agentsvc.Approved()); err != nil && !errors.Is(err, agentsvc.ErrClosed) {
					t.Errorf("approve %s: %v", p.Call.ID, err)
				}
			}
		}
	})
	t.Cleanup(w.close)
	return w
}

// submit submits a prompt.
func (w *writer) submit(text string) *agentsvc.Prompt {
	w.t.Helper()
	p, err := w.svc.SubmitText(text)
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

// wait waits until p completed.
func (w *writer) wait(p *agentsvc.Prompt) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserWait)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil || res.Kind != vocab.PromptCompleted {
		w.t.Fatalf("prompt: %v, %v", res, err)
	}
}

// prompt submits a prompt and waits until it completed.
func (w *writer) prompt(text string) { w.t.Helper(); w.wait(w.submit(text)) }

// close closes the session, then its store.
func (w *writer) close() {
	if w.done {
		return
	}
	w.done = true
	ctx, cancel := context.WithTimeout(context.Background(), browserWait)
	defer cancel()
	if err := w.svc.Close(ctx); err != nil {
		w.t.Errorf("close the session: %v", err)
	}
	w.stop()
	w.bg.Wait()
	if err := w.st.Close(); err != nil {
		w.t.Errorf("close the store: %v", err)
	}
}

// readLog reads every event of session id from the file at path.
func readLog(t *testing.T, path string, id vocab.ID) []vocab.Event {
	t.Helper()
	r, err := sqlite.OpenReadOnly(context.Background(), path, sqlite.ReadOnlyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	page, err := r.Events(context.Background(), id, sqlite.EventQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var out []vocab.Event
	for _, rec := range page.Records {
		e, err := rec.Event()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// ---- the browser ----

// browser is the Chromium the subtests share, started with the first
// tab.
type browser struct {
	ctx    context.Context // the first chromedp context: the browser's life
	cancel context.CancelFunc
	start  sync.Once
	err    error
}

// newBrowser finds chromium (skipping the test when there is none and
// LOOPCHART_BROWSER is not "required") and prepares the allocator; the
// browser stops when t ends.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("LOOPCHART_BROWSER") == "required" {
			t.Fatalf("LOOPCHART_BROWSER=required and no browser: %v", err)
		}
		t.Skipf("no browser for the inspector's browser tests (%v); LOOPCHART_BROWSER=required makes this a failure", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(path))
	// Chromium's sandbox refuses root, and cannot start on runners that
	// restrict user namespaces: the pages under test are our own.
	opts = append(opts, chromedp.NoSandbox)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()      // closes the browser and waits for it
		cancelAlloc() // waits for the allocator
	})
	return &browser{ctx: ctx, cancel: cancel}
}

// tab opens a tab for t, closed when t ends, with a 1280×800 viewport.
// It fails t at the end if the page threw or logged an error.
func (b *browser) tab(t *testing.T) *tab {
	t.Helper()
	b.start.Do(func() {
		// The first Run starts the browser and binds it to b.ctx: no
		// timeout on it, but a guard that gives up on a browser that
		// does not start.
		started := make(chan error, 1)
		go func() { started <- chromedp.Do(b.ctx) }()
		select {
		case b.err = <-started:
		case <-time.After(browserWait):
			b.cancel()
			b.err = fmt.Errorf("chromium did not start in %v (%v)", browserWait, <-started)
		}
	})
	if b.err != nil {
		t.Fatalf("start chromium: %v", b.err)
	}
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx}
	// The tab's first Run opens it: no timeout on it either.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	if err := chromedp.Listen(ctx, tb.listen); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, p := range tb.problems {
			t.Errorf("the page: %s", p)
		}
	})
	return tb
}

// tab is a browser tab.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // exceptions thrown and errors logged by the page
}

// listen notes the page's exceptions and errors (on the tab's reading
// goroutine: it must not block).
func (tb *tab) listen(ev any) {
	var p string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		p = "exception: " + d.Text
		if d.Exception != nil {
			p += " " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		p = "console.error:"
		for _, a := range ev.Args {
			p += " " + string(a.Value) + a.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		p = fmt.Sprintf("%s error: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	tb.mu.Lock()
	tb.problems = append(tb.problems, p)
	tb.mu.Unlock()
}

// do runs actions, each call bounded by browserWait.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v", what, err)
	}
}

// run runs one action that returns a value, bounded by browserWait.
func run[T any](tb *tab, what string, a chromedp.Action[T]) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open loads url in the tab (until the load event: the page keeps an
// event stream open, so never until the network is idle).
func (tb *tab) open(url string) {
	tb.t.Helper()
	tb.do("open "+url, chromedp.Navigate(url))
}

// pageView is what a session page shows: the turn and tool diagrams'
// lit states and transitions, the names beside them, and the timeline.
type pageView struct {
	Leaf     []string `json:"leaf"`     // #diagram-turn g.state.current.leaf
	Lit      []string `json:"lit"`      // #diagram-turn g.state.current
	Taken    []string `json:"taken"`    // #diagram-turn g.transition.taken
	Just     []string `json:"just"`     // #diagram-turn g.transition.just
	ToolLeaf []string `json:"toolLeaf"` // #diagram-tool g.state.current.leaf
	TurnName string   `json:"turnName"` // #state-turn
	ToolName string   `json:"toolName"` // #state-tool
	Selected []string `json:"selected"` // #timeline-rows tr.selected
	Rows     int      `json:"rows"`
	First    uint64   `json:"first"` // the first and last rows' seqs
	Last     uint64   `json:"last"`
	Position string   `json:"position"`
	Live     string   `json:"live"`
	Hash     string   `json:"hash"`
	Detail   string   `json:"detail"`
}

const viewJS = `(() => {
	const all = (root, sel, attr) => root ? Array.from(root.querySelectorAll(sel), (e) => e.getAttribute(attr)) : [];
	const text = (id) => { const e = document.getElementById(id); return e ? e.textContent : ''; };
	const turn = document.getElementById('diagram-turn');
	const tool = document.getElementById('diagram-tool');
	const rows = document.querySelectorAll('#timeline-rows tr[data-seq]');
	return {
		leaf: all(turn, 'g.state.current.leaf', 'data-state'),
		lit: all(turn, 'g.state.current', 'data-state'),
		taken: all(turn, 'g.transition.taken', 'data-transition'),
		just: all(turn, 'g.transition.just', 'data-transition'),
		toolLeaf: all(tool, 'g.state.current.leaf', 'data-state'),
		turnName: text('state-turn'),
		toolName: text('state-tool'),
		selected: all(document, '#timeline-rows tr.selected', 'data-seq'),
		rows: rows.length,
		first: rows.length ? Number(rows[0].dataset.seq) : 0,
		last: rows.length ? Number(rows[rows.length - 1].dataset.seq) : 0,
		position: text('position'),
		live: text('live'),
		hash: location.hash,
		detail: text('detail'),
	};
})()`

// view reads what the page shows.
func (tb *tab) view() (pageView, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[pageView](viewJS))
}

// waitView polls the page until ok holds, for at most browserWait, and
// returns what it shows then.
func (tb *tab) waitView(what string, ok func(pageView) bool) pageView {
	tb.t.Helper()
	deadline := time.Now().Add(browserWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := tb.view()
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			v.Detail = clipText(v.Detail, 300)
			tb.t.Fatalf("waiting for %s: the page shows %+v (%v)", what, v, err)
		}
		<-tick.C
	}
}

// waitSelected waits until event seq is selected and the page shows the
// states as of it and its detail.
func (tb *tab) waitSelected(seq uint64) pageView {
	tb.t.Helper()
	pos := fmt.Sprintf("event %d of ", seq)
	return tb.waitView(fmt.Sprintf("event %d selected", seq), func(v pageView) bool {
		return strings.HasPrefix(v.Position, pos) && slices.Equal(v.Selected, []string{strconv.FormatUint(seq, 10)}) &&
			strings.HasPrefix(v.Detail, fmt.Sprintf("#%d ", seq))
	})
}

// screenshot saves the viewport as inspector.png in t's artifact
// directory, and in the file -screenshot (or LOOPCHART_SCREENSHOT) names.
func (tb *tab) screenshot() {
	tb.t.Helper()
	png := run(tb, "screenshot", chromedp.CaptureScreenshot())
	paths := []string{filepath.Join(tb.t.ArtifactDir(), "inspector.png")}
	if p := *screenshotFlag; p != "" {
		paths = append(paths, p)
	} else if p := os.Getenv("LOOPCHART_SCREENSHOT"); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
		tb.t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}

// clipText cuts s to n runes.
func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// ---- what the log says ----

// turnDef is this build's turn machine, as the inspector draws it.
func turnDef(t *testing.T) inspect.Definition {
	t.Helper()
	for _, d := range inspect.BuiltinDefinitions() {
		if d.Machine == "turn" {
			return d
		}
	}
	t.Fatal("no turn definition")
	return inspect.Definition{}
}

// statePath is state and its superstates in d, innermost first.
func statePath(d inspect.Definition, state string) []string {
	parent := map[string]string{}
	for _, s := range d.States {
		parent[s.Name] = s.Parent
	}
	out := []string{state}
	for s := parent[state]; s != "" && len(out) <= len(d.States); s = parent[s] {
		out = append(out, s)
	}
	return out
}

// turnState is where the turn machine stands as of an event, by the
// log: the turn started last, the leaf state its last transition
// entered, and that transition.
type turnState struct {
	Turn int
	Leaf string
	Last *vocab.Event
}

// turnAt replays the log's turn/start and turn transition events up to
// event at; false when no turn has taken a transition since it started.
func turnAt(events []vocab.Event, at uint64) (turnState, bool) {
	var s turnState
	for _, e := range events {
		if e.Seq > at {
			break
		}
		if e.Kind == vocab.EventTurnStart {
			s = turnState{Turn: e.Turn}
		}
		if p, ok := e.Payload.(vocab.TransitionPayload); ok && p.Machine == "turn" {
			s.Leaf, s.Last = p.To, &e
		}
	}
	return s, s.Turn > 0 && s.Last != nil
}

// takes reports whether transition i of d is one the logged transition p
// may have taken: its trigger, guard and kind, declared on p's source or
// a superstate of it, leading to p's destination or a superstate of it.
func takes(d inspect.Definition, i int, p vocab.TransitionPayload) bool {
	if i < 0 || i >= len(d.Transitions) {
		return false
	}
	tr := d.Transitions[i]
	return tr.On == p.Trigger && tr.Guard == p.Guard && tr.Internal() == p.Internal &&
		slices.Contains(statePath(d, p.From), tr.From) && (tr.Internal() || slices.Contains(statePath(d, p.To), tr.To))
}

// checkTurn checks the turn diagram of v, the page as of event at,
// against the log.
func checkTurn(t *testing.T, d inspect.Definition, events []vocab.Event, at uint64, v pageView) {
	t.Helper()
	want, ok := turnAt(events, at)
	if !ok {
		t.Fatalf("event %d: no turn transition since the last turn started: choose another event", at)
	}
	p := want.Last.Payload.(vocab.TransitionPayload)
	if !slices.Equal(v.Leaf, []string{want.Leaf}) {
		t.Errorf("at event %d the turn diagram lights the leaf %q; the log says %s (event %d: %s → %s on %s)",
			at, v.Leaf, want.Leaf, want.Last.Seq, p.From, p.To, p.Trigger)
	}
	lit := slices.Sorted(slices.Values(v.Lit))
	if wantLit := slices.Sorted(slices.Values(statePath(d, want.Leaf))); !slices.Equal(lit, wantLit) {
		t.Errorf("at event %d the turn diagram lights %q, want %q (%s and its superstates)", at, lit, wantLit, want.Leaf)
	}
	if name := fmt.Sprintf("turn %d: %s", want.Turn, want.Leaf); v.TurnName != name {
		t.Errorf("at event %d the turn machine is named %q, want %q", at, v.TurnName, name)
	}
	if len(v.Taken) != 1 {
		t.Fatalf("at event %d the turn diagram marks transitions %q as taken, want one (event %d)", at, v.Taken, want.Last.Seq)
	}
	i, err := strconv.Atoi(v.Taken[0])
	if err != nil || !takes(d, i, p) {
		t.Errorf("at event %d the turn diagram marks transition %s as taken; the log took %s → %s on %s [%s] at event %d",
			at, v.Taken[0], p.From, p.To, p.Trigger, p.Guard, want.Last.Seq)
	}
	if wantJust := want.Last.Seq == at; !slices.Equal(v.Just, v.Taken) && wantJust || len(v.Just) > 0 && !wantJust {
		t.Errorf("at event %d: transitions %q marked just; the last transition was event %d", at, v.Just, want.Last.Seq)
	}
}

// checkTool checks the tool diagram of v, the page as of event at,
// against the log: it shows the call that moved last (made last, or
// took the last transition), in the state its last transition entered.
func checkTool(t *testing.T, events []vocab.Event, at uint64, v pageView) {
	t.Helper()
	call, state := "", ""
	for _, e := range events {
		if e.Seq > at {
			break
		}
		switch p := e.Payload.(type) {
		case vocab.ToolPayload:
			if e.Kind == vocab.EventToolCall && p.Call.ID != call {
				call, state = p.Call.ID, ""
			}
		case vocab.TransitionPayload:
			if p.Machine == "tool" {
				call, state = p.Instance, p.To
			}
		}
	}
	if state == "" {
		t.Fatalf("event %d: no transition of the last tool call %q yet: choose another event", at, call)
	}
	if !slices.Equal(v.ToolLeaf, []string{state}) || v.ToolName != call+": "+state {
		t.Errorf("at event %d the tool diagram lights %q and names %q; the log says %s: %s", at, v.ToolLeaf, v.ToolName, call, state)
	}
}

// find returns the first event ok accepts.
func find(t *testing.T, events []vocab.Event, what string, ok func(vocab.Event) bool) uint64 {
	t.Helper()
	for _, e := range events {
		if ok(e) {
			return e.Seq
		}
	}
	t.Fatalf("the log has no %s", what)
	return 0
}

func turnTo(state string) func(vocab.Event) bool {
	return func(e vocab.Event) bool {
		p, ok := e.Payload.(vocab.TransitionPayload)
		return ok && p.Machine == "turn" && p.To == state
	}
}

// ---- the site ----

// demoSite is an inspector serving a log that holds the demo's session
// and the session whose tool returns markup.
type demoSite struct {
	url          string
	demo, markup []vocab.Event
}

func newDemoSite(t *testing.T) *demoSite {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loopchart.db")
	w := openWriter(t, path, demoID, demoScript(t), demoTools(t))
	w.prompt(demoPrompt)
	w.close()
	w = openWriter(t, path, scriptID, parseScript(t, "markup", markupScript), []vocab.Tool{textTool{name: "leak", result: pwn}})
	w.prompt("What does the leak tool say?")
	w.close()

	h, err := inspect.New(inspect.Options{DB: path})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close() // ends the pages' event streams
		srv.Close()
	})
	return &demoSite{url: srv.URL, demo: readLog(t, path, demoID), markup: readLog(t, path, scriptID)}
}

// markupScript calls the leak tool, then answers with markup of its own.
const markupScript = `{
  "name": "markup",
  "steps": [
    {
      "parts": [{"text": "Let me ask the <b>leak</b> tool."}],
      "tool_calls": [{"id": "call_leak", "name": "leak", "args": {"q": "<img src=x onerror=\"window.__pwned=3\">"}}],
      "usage": {"input": 10, "output": 5},
      "finish": "tool-calls"
    },
    {
      "parts": [{"text": "It said <script>window.__pwned=4</script>."}],
      "usage": {"input": 20, "output": 5}
    }
  ]
}`

// ---- the tests ----

// Three events chosen from the demo's log (the end of its turn, the
// failed request the turn retries, the approval its edit asks for),
// selected by #seq=N, by ?at=N and by a click on the timeline: the turn
// diagram lights the state the log's transitions say, with its
// superstates, and marks the transition that led there; the tool diagram
// shows the call that moved last. The page with the approval selected is
// the screenshot.
func testTimeTravel(t *testing.T, b *browser, site *demoSite) {
	d := turnDef(t)
	events := site.demo
	ended := find(t, events, "turn/end", func(e vocab.Event) bool { return e.Kind == vocab.EventTurnEnd })
	retrying := find(t, events, "turn → retrying", turnTo("retrying"))
	asked := find(t, events, "approval request", func(e vocab.Event) bool {
		p, ok := e.Payload.(vocab.ApprovalPayload)
		return ok && p.State == vocab.ApprovalRequested
	})
	tb := b.tab(t)
	page := site.url + "/s/" + string(demoID)

	tb.open(fmt.Sprintf("%s#seq=%d", page, ended))
	v := tb.waitSelected(ended)
	checkTurn(t, d, events, ended, v)
	checkTool(t, events, ended, v)

	tb.open(fmt.Sprintf("%s?at=%d", page, retrying))
	v = tb.waitSelected(retrying)
	checkTurn(t, d, events, retrying, v)
	checkTool(t, events, retrying, v)

	tb.do("click event "+strconv.FormatUint(asked, 10), chromedp.Click(chromedp.CSS(fmt.Sprintf(`#timeline-rows tr[data-seq="%d"]`, asked))))
	v = tb.waitSelected(asked)
	checkTurn(t, d, events, asked, v)
	checkTool(t, events, asked, v)
	if v.Hash != fmt.Sprintf("#seq=%d", asked) {
		t.Errorf("after a click on event %d the URL's fragment is %q", asked, v.Hash)
	}
	tb.do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	tb.screenshot()
}

// j and k (and the arrow keys) select the next and the previous event,
// and the diagrams follow; past the timeline's page they load the next
// or the previous page.
func testKeys(t *testing.T, b *browser, site *demoSite) {
	d := turnDef(t)
	events := site.demo
	from := find(t, events, "turn → retrying", turnTo("retrying")) - 1
	tb := b.tab(t)
	tb.open(fmt.Sprintf("%s/s/%s#seq=%d", site.url, demoID, from))
	checkTurn(t, d, events, from, tb.waitSelected(from))
	press := func(key string, want uint64) pageView {
		t.Helper()
		tb.do("press "+key, chromedp.KeyEvent(key))
		v := tb.waitSelected(want)
		checkTurn(t, d, events, want, v)
		if v.Hash != fmt.Sprintf("#seq=%d", want) {
			t.Errorf("after %q the URL's fragment is %q, want #seq=%d", key, v.Hash, want)
		}
		return v
	}
	press("j", from+1)
	press("j", from+2)
	press("k", from+1)
	press("k", from)
	press(kb.ArrowDown, from+1)
	press(kb.ArrowUp, from)

	// The last row of the first page (selected through the URL's
	// fragment), then across the page boundary and back.
	tb.open(fmt.Sprintf("%s/s/%s#seq=1", site.url, demoID))
	end := tb.waitSelected(1).Last
	if end == events[len(events)-1].Seq {
		t.Logf("the first page holds the whole log (%d events): no page boundary to cross", end)
		return
	}
	tb.do("select the page's last row", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#seq=%d'`, end)))
	checkTurn(t, d, events, end, tb.waitSelected(end))
	if v := press("j", end+1); v.First != end+1 {
		t.Errorf("j past the page's end shows rows %d..%d, want the page from %d", v.First, v.Last, end+1)
	}
	if v := press("k", end); v.Last != end {
		t.Errorf("k before the page's start shows rows %d..%d, want the page up to %d", v.First, v.Last, end)
	}
}

// A live session's page follows its log: a second prompt, submitted
// while the page is open, adds rows and lights new states, first while a
// tool call runs, then when the turn is done.
func testLive(t *testing.T, b *browser) {
	d := turnDef(t)
	path := filepath.Join(t.TempDir(), "live.db")
	started := make(chan string, 1)
	gate := make(chan struct{})
	w := openWriter(t, path, liveID, parseScript(t, "live", liveScript), []vocab.Tool{textTool{name: "wait", result: "waited", started: started, gate: gate}})
	var opened sync.Once
	release := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the session closes
	w.prompt("Say hello.")

	h, err := inspect.New(inspect.Options{DB: path, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close() // ends the page's event stream
		srv.Close()
	})

	// follows reads the log and reports whether the page shows it up to
	// its head: the last row, and the turn's and the shown tool call's
	// states as of it.
	follows := func(v pageView) (ok bool, turn turnState, call, callState string, events []vocab.Event) {
		events = readLog(t, path, liveID)
		head := events[len(events)-1].Seq
		turn, ok = turnAt(events, head)
		for _, e := range events {
			if p, isTr := e.Payload.(vocab.TransitionPayload); isTr && p.Machine == "tool" {
				call, callState = p.Instance, p.To
			}
		}
		tool := []string{}
		if call != "" {
			tool = []string{callState}
		}
		ok = ok && v.Last == head && slices.Equal(v.Leaf, []string{turn.Leaf}) &&
			v.TurnName == fmt.Sprintf("turn %d: %s", turn.Turn, turn.Leaf) &&
			slices.Equal(v.ToolLeaf, tool) && strings.HasPrefix(v.Live, "live")
		return ok, turn, call, callState, events
	}
	following := func(v pageView) bool { ok, _, _, _, _ := follows(v); return ok }

	tb := b.tab(t)
	tb.open(srv.URL + "/s/" + string(liveID))
	before := tb.waitView("the page of the first turn", following)
	if _, turn, _, _, _ := follows(before); turn.Turn != 1 {
		t.Fatalf("the first prompt ran turn %d", turn.Turn)
	}

	p := w.submit("Wait, then answer.")
	select {
	case <-started:
	case <-time.After(browserWait):
		t.Fatal("the wait tool did not start")
	}
	running := tb.waitView("the page of the second turn, its tool call running", following)
	_, turn, call, callState, events := follows(running)
	t.Logf("while the tool runs: rows %d..%d, turn %d %s, tool %s %s", running.First, running.Last, turn.Turn, turn.Leaf, call, callState)
	if turn.Turn != 2 || call != "call_wait" || running.Last <= before.Last || running.First != before.First {
		t.Errorf("while the tool runs: turn %d, call %q, rows %d..%d (before the prompt %d..%d)",
			turn.Turn, call, running.First, running.Last, before.First, before.Last)
	}
	if running.ToolName != call+": "+callState {
		t.Errorf("while the tool runs, the tool machine is named %q, want %q", running.ToolName, call+": "+callState)
	}
	checkTurn(t, d, events, running.Last, running)

	release()
	w.wait(p)
	done := tb.waitView("the page of the second turn, done", following)
	_, last, _, _, events := follows(done)
	t.Logf("once the turn is done: rows %d..%d, turn %d %s", done.First, done.Last, last.Turn, last.Leaf)
	if last.Turn != 2 || last.Leaf == turn.Leaf || done.Last <= running.Last {
		t.Errorf("the turn did not move on: turn %d %s, then turn %d %s", turn.Turn, turn.Leaf, last.Turn, last.Leaf)
	}
	checkTurn(t, d, events, done.Last, done)
}

// liveScript answers the first prompt, then calls the wait tool and
// answers the second.
const liveScript = `{
  "name": "live",
  "steps": [
    {"parts": [{"text": "Hello."}], "usage": {"input": 10, "output": 2}},
    {
      "parts": [{"text": "Let me wait."}],
      "tool_calls": [{"id": "call_wait", "name": "wait", "args": {}}],
      "usage": {"input": 20, "output": 4},
      "finish": "tool-calls"
    },
    {"parts": [{"text": "Waited."}], "usage": {"input": 30, "output": 2}}
  ]
}`

// markupView is what a page shows of markup from the log.
type markupView struct {
	Summary  string `json:"summary"`  // the result's row in the timeline
	Elements int    `json:"elements"` // elements inside the timeline's cells and the detail
	Scripts  int    `json:"scripts"`  // script elements in the document
	Images   int    `json:"images"`   // img elements in the document
	Pwned    string `json:"pwned"`    // typeof window.__pwned
}

// A tool result holding a script and an img with onerror shows as text,
// in the timeline and in the detail, and runs nothing: also with the
// page's Content-Security-Policy bypassed, so that textContent, not the
// policy, is what keeps it text.
func testScriptAsText(t *testing.T, b *browser, site *demoSite) {
	result := find(t, site.markup, "tool/result", func(e vocab.Event) bool { return e.Kind == vocab.EventToolResult })
	// The detail shows the payload as JSON.stringify writes it.
	var quoted strings.Builder
	enc := json.NewEncoder(&quoted)
	enc.SetEscapeHTML(false)
	enc.Encode(pwn)
	for _, bypass := range []bool{false, true} {
		t.Run(map[bool]string{false: "CSP", true: "NoCSP"}[bypass], func(t *testing.T) {
			tb := b.tab(t)
			if bypass {
				tb.do("bypass the CSP", chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
					_, err := cdp.Call(ctx, tgt, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true})
					return err
				}))
			}
			tb.open(fmt.Sprintf("%s/s/%s#seq=%d", site.url, scriptID, result))
			v := tb.waitSelected(result)
			if want := strings.TrimSpace(quoted.String()); !strings.Contains(v.Detail, want) {
				t.Errorf("the detail does not show the result's text %s: %s", want, v.Detail)
			}
			got := run(tb, "read the page", chromedp.Evaluate[markupView](fmt.Sprintf(`({
				summary: document.querySelector('#timeline-rows tr[data-seq="%d"] td.summary').textContent,
				elements: document.querySelectorAll('#timeline-rows td *, #detail *').length,
				scripts: document.scripts.length,
				images: document.images.length,
				pwned: typeof window.__pwned,
			})`, result)))
			if !strings.Contains(got.Summary, pwn) {
				t.Errorf("the timeline shows %q for the result, not its text", got.Summary)
			}
			if got.Elements != 0 || got.Scripts != 1 || got.Images != 0 || got.Pwned != "undefined" {
				t.Errorf("markup from the log reached the page: %+v", got)
			}
			if bypass {
				// The policy is bypassed indeed: a script the page adds runs.
				ran := run(tb, "probe the policy", chromedp.Evaluate[bool](`(() => {
					const s = document.createElement('script');
					s.textContent = 'window.__probe = true';
					document.head.append(s);
					s.remove();
					return window.__probe === true;
				})()`))
				if !ran {
					t.Error("Page.setBypassCSP did not bypass the page's policy: this subtest proves nothing")
				}
			}
		})
	}
}

// testFollowDropsTheEvent: a page opened on an event (?at=N or #seq=N)
// that is switched to follow the head no longer names the event in its
// URL, so a reload or a shared link follows too.
func testFollowDropsTheEvent(t *testing.T, b *browser, site *demoSite) {
	tb := b.tab(t)
	tb.open(fmt.Sprintf("%s/s/%s?at=30", site.url, demoID))
	tb.waitSelected(30)
	// The demo's session was closed: the page says so, not "live".
	tb.waitView("the session shown closed", func(v pageView) bool { return strings.HasPrefix(v.Live, "closed") })
	tb.do("follow the head", chromedp.Click(chromedp.CSS("#follow")))
	tb.waitView("the URL without the event", func(pageView) bool {
		u := run(tb, "read the URL", chromedp.Evaluate[string]("location.search + location.hash"))
		return u == ""
	})
}

// testZoom: a click on a diagram shows it at its natural size (wider
// than its box, so it scrolls, the lit state in view); another click
// fits it again.
func testZoom(t *testing.T, b *browser, site *demoSite) {
	tb := b.tab(t)
	tb.open(fmt.Sprintf("%s/s/%s#seq=30", site.url, demoID))
	tb.waitSelected(30)
	const measure = `(() => { const d = document.getElementById('diagram-agent');
		return [d.scrollWidth, d.clientWidth, d.classList.contains('zoomed') ? 1 : 0]; })()`
	fitted := run(tb, "measure", chromedp.Evaluate[[]int](measure))
	if fitted[2] != 0 || fitted[0] > fitted[1]+1 {
		t.Fatalf("before a click the agent diagram is %v (scroll width, width, zoomed), want it fitted", fitted)
	}
	tb.do("zoom", chromedp.Click(chromedp.CSS("#diagram-agent")))
	zoomed := run(tb, "measure", chromedp.Evaluate[[]int](measure))
	if zoomed[2] != 1 || zoomed[0] <= zoomed[1] {
		t.Errorf("after a click the agent diagram is %v, want it zoomed past its box", zoomed)
	}
	tb.do("fit", chromedp.Click(chromedp.CSS("#diagram-agent")))
	if again := run(tb, "measure", chromedp.Evaluate[[]int](measure)); again[2] != 0 || again[0] > again[1]+1 {
		t.Errorf("after a second click the agent diagram is %v, want it fitted", again)
	}
}
