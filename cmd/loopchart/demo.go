package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	"github.com/loopchart/loopchart"
	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

// demoFiles seed the demo's workspace.
var demoFiles = fstest.MapFS{
	"notes.txt":     {Data: []byte("loopchart runs the agent loop as explicit statecharts: every phase is a named state.\n")},
	"docs/todo.txt": {Data: []byte("draw the turn machine\nwrite the tables\n")},
}

// demoTools returns the demo's tools over its workspace; tests add tools
// of their own.
var demoTools = func(ws *workspace.Workspace) []vocab.Tool { return ws.Tools() }

// newDemoWorkspace makes a temporary workspace holding demoFiles; remove
// deletes it.
func newDemoWorkspace() (ws *workspace.Workspace, remove func(), err error) {
	dir, err := os.MkdirTemp("", "loopchart-demo-")
	if err != nil {
		return nil, nil, err
	}
	rm := func() { os.RemoveAll(dir) }
	if err := os.CopyFS(dir, demoFiles); err != nil {
		rm()
		return nil, nil, err
	}
	if ws, err = workspace.Open(dir, workspace.Options{}); err != nil {
		rm()
		return nil, nil, err
	}
	return ws, func() { ws.Close(); rm() }, nil
}

// driveHorizon bounds how far --instant moves its virtual clock at once:
// past every retry wait and scripted delay, short of the stream watchdog's
// limits (minutes) and the run's timeout (48 h).
const driveHorizon = 2 * time.Minute

// errInterrupted ends a run that was interrupted (Ctrl-C): exit status 130.
var errInterrupted = errors.New("interrupted")

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	scriptPath := fs.String("script", "", "run this script instead of the embedded demo")
	events := fs.String("events", "", `"json" prints the raw event stream as JSON lines`)
	color := fs.Bool("color", false, "colour the timeline (NO_COLOR disables)")
	instant := fs.Bool("instant", false, "run on a virtual clock: no real waiting (not a fan-out script)")
	prompt := fs.String("prompt", "Make notes.txt say that every transition is logged.", "the prompt to submit")
	approve := fs.String("approve", "auto", `how the demo answers the approval its edits ask for: "auto" approves, "deny" refuses`)
	db := fs.String("db", defaultDB, "the SQLite file the session is logged to")
	sessionFlag := fs.String("session", "", "open this session: resume it when the log holds it, else start it")
	resume := fs.Bool("resume", false, "resume the newest unfinished session of the log (or --session); an error when there is none")
	fresh := fs.Bool("new", false, "start a new session even when the log holds an unfinished one")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: demo takes no arguments, got %q", errUsage, fs.Args())
	}
	promptSet := false
	fs.Visit(func(f *flag.Flag) { promptSet = promptSet || f.Name == "prompt" })
	if *events != "" && *events != "json" {
		return fmt.Errorf("%w: --events takes only json", errUsage)
	}
	if *approve != "auto" && *approve != "deny" {
		return fmt.Errorf("%w: --approve takes auto or deny", errUsage)
	}
	var (
		script *scripted.Script
		fan    *fanoutScript
		err    error
	)
	if *scriptPath != "" {
		script, fan, err = loadDemoScript(*scriptPath)
	} else {
		script, err = scripted.Parse(loopchart.DemoScript, "testdata/scripts/demo.json")
	}
	if err != nil {
		return err
	}
	if fan != nil {
		if *resume || *sessionFlag != "" {
			return fmt.Errorf("%w: a fan-out script (%s) always starts new sessions: --resume and --session do not apply", errUsage, *scriptPath)
		}
		if *instant {
			fmt.Fprintf(stderr, "note: --instant does not apply to a fan-out script: it runs on the real clock\n")
		}
		p := *prompt
		if fan.prompt != "" && !promptSet {
			p = fan.prompt
		}
		return fanoutDemo(ctx, fan, fanoutConfig{
			db: *db, prompt: p,
			json: *events == "json", color: *color && os.Getenv("NO_COLOR") == "",
		}, stdout, stderr)
	}
	var clk clock.Clock = clock.Real()
	var fake *clock.Fake
	if *instant {
		// Virtual time starts now, so that the log's times (and the
		// order of its sessions) stay true; the timeline shows times
		// relative to the session's first event.
		fake = clock.NewFake(time.Now().Round(0).UTC())
		clk = fake
	}

	// --resume only reads a log that exists; otherwise the log is created.
	st, err := openDB(ctx, *db, *resume)
	if err != nil {
		return err
	}
	var stClosed bool
	closeStore := func() error {
		if stClosed {
			return nil
		}
		stClosed = true
		return st.Close()
	}
	defer closeStore()

	id := vocab.ID(*sessionFlag)
	var resumedAt uint64 // the head of a resumed session's log before this run
	switch {
	case *resume && id == "":
		in, err := resumable(ctx, st, *db)
		if err != nil {
			return err
		}
		id, resumedAt = in.Session, in.Head
	case id != "":
		in, err := findSession(ctx, st, *db, id)
		switch {
		case err == nil:
			resumedAt = in.Head
		case *resume || vocab.CodeOf(err) != vocab.CodeNoSession:
			return err
		}
		if resumedAt > 0 {
			if done, err := finished(ctx, st, id); err != nil {
				return err
			} else if done {
				return vocab.Errorf(vocab.CodeClosed, "session %s in %s was closed: it cannot be resumed (loopchart log show --db %s --session %s shows it)", id, *db, *db, id)
			}
		}
	case !*fresh:
		// Run again after a kill, the demo picks its session up.
		in, err := resumable(ctx, st, *db)
		switch {
		case err == nil:
			id, resumedAt = in.Session, in.Head
		case vocab.CodeOf(err) != vocab.CodeNoSession:
			return err
		}
	}
	if id == "" {
		id = vocab.NewULIDSource(nil).NewID(time.Now())
	}

	// The clock driver runs until the very end: closing an interrupted
	// session waits on the clock too.
	stopDriving := driveClock(fake)
	defer stopDriving()
	ws, removeWS, err := newDemoWorkspace()
	if err != nil {
		return err
	}
	defer removeWS()
	svc, err := agentsvc.Open(ctx, st, id, agentsvc.Options{
		Provider: &replayProvider{script: script, clk: clk},
		Tools:    demoTools(ws),
		Clock:    clk,
		Model:    "scripted",
	})
	if err != nil {
		return err
	}
	ap := newApprover(svc, *approve == "deny", stderr)
	defer ap.wait()
	how := ""
	if resumedAt > 0 {
		how = ", resumed"
	}
	fmt.Fprintf(stderr, "log: %s (session %s%s)\n", *db, id, how)

	tl := &timeline{w: stdout, color: *color && os.Getenv("NO_COLOR") == "", resumedAt: resumedAt}
	enc := json.NewEncoder(stdout)
	var lastEnd *vocab.Event // the last turn/end this run logged
	pr := startPrinter(svc.Events, func(ev vocab.Event) {
		if ev.Kind == vocab.EventTurnEnd && ev.Seq > resumedAt {
			lastEnd = &ev
		}
		if p, ok := ev.Payload.(vocab.ApprovalPayload); ok && p.State == vocab.ApprovalRequested && ev.Seq > resumedAt {
			ap.answer(p.Call.ID)
		}
		if *events == "json" {
			_ = enc.Encode(ev)
		} else {
			tl.print(ev)
		}
	})

	// A new session runs the demo prompt. A resumed one runs what it has
	// queued, and then the prompt only when --prompt asks for one.
	ask := resumedAt == 0 || promptSet
	res, err := runDemo(ctx, svc, resumedAt > 0, ask, *prompt)
	if err != nil {
		if ctx.Err() == nil {
			svc.Close(context.Background())
			pr.abort()
			return err
		}
		// Interrupted: leave the session open in the log, so that a
		// resume has something to recover. Closing the store first
		// freezes the log (and releases the claim); closing the service
		// then only stops its work, whose last events the closed store
		// refuses.
		serr := closeStore()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		svc.Close(cctx)
		cancel()
		pr.abort()
		if serr != nil {
			return serr
		}
		return fmt.Errorf("%w: session %s stays open in %s; run the demo again (loopchart demo --db %s) to resume it", errInterrupted, id, *db, *db)
	}
	streamErr := pr.until(res.head)
	if err := svc.Close(context.Background()); err != nil {
		return err
	}
	if err := closeStore(); err != nil {
		return err
	}
	if streamErr != nil {
		return fmt.Errorf("event stream: %w", streamErr)
	}
	if !ask {
		return resumed(stdout, *events != "json", lastEnd)
	}
	if *events != "json" {
		fmt.Fprintf(stdout, "\nresult: %s\n", displayText(res.String(), 0))
	}
	if res.Kind != vocab.PromptCompleted {
		return errors.New("the demo prompt did not complete: " + displayText(res.String(), 0))
	}
	return nil
}

// driveClock moves fake, when not nil, to whatever falls due next, until
// the returned stop is called: --instant.
func driveClock(fake *clock.Fake) (stop func()) {
	driveCtx, stopDriving := context.WithCancel(context.Background())
	if fake != nil {
		go func() {
			for driveCtx.Err() == nil {
				// Only to what is due within driveHorizon: the run's
				// 48 h timeout and the stream watchdog's minutes are
				// armed during a turn, and must not fire while the demo
				// merely waits for a goroutine.
				if fake.WaitForDue(driveCtx, driveHorizon) != nil {
					return
				}
				fake.AdvanceToNextWithin(driveHorizon)
			}
		}()
	}
	return stopDriving
}

// approver makes a session's edits wait for a person: the demo asks, and
// answers as --approve says (a real application shows the question and
// waits).
type approver struct {
	svc    *agentsvc.Service
	deny   bool
	stderr io.Writer
	wg     sync.WaitGroup
}

// newApprover registers the approval hook on svc.
func newApprover(svc *agentsvc.Service, deny bool, stderr io.Writer) *approver {
	svc.OnBeforeTool.Register("demo-approval", func(ctx context.Context, c *agentsvc.ToolCallContext, next hooks.Next[*agentsvc.ToolCallContext]) (*agentsvc.ToolCallContext, error) {
		if c.Call.Name == "edit_file" || c.Call.Name == "write_file" {
			c.Ask = "Let the agent change " + pathArg(c.Call.Args) + "?"
		}
		return next(ctx, c)
	})
	return &approver{svc: svc, deny: deny, stderr: stderr}
}

// answer answers the approval asked for callID, on a goroutine of its own.
func (a *approver) answer(callID string) {
	d := agentsvc.Approved()
	if a.deny {
		d = agentsvc.Denied("the person running the demo said no")
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.svc.Approve(callID, d); err != nil && !errors.Is(err, agentsvc.ErrClosed) {
			fmt.Fprintf(a.stderr, "approve %s: %v\n", callID, err)
		}
	}()
}

// wait waits until every answer was given.
func (a *approver) wait() { a.wg.Wait() }

// resumed reports what a resume without a prompt ran: the end of the last
// turn it ran, if any. A turn that did not complete is an error.
func resumed(stdout io.Writer, text bool, lastEnd *vocab.Event) error {
	if lastEnd == nil {
		if text {
			fmt.Fprintln(stdout, "\nresult: resumed; nothing was queued")
		}
		return nil
	}
	p, _ := lastEnd.Payload.(vocab.TurnEndPayload)
	end := fmt.Sprintf("turn %d ended %s after %d steps", lastEnd.Turn, displayText(p.Reason.String(), 0), p.Steps)
	if text {
		fmt.Fprintf(stdout, "\nresult: resumed; %s\n", end)
	}
	if p.Reason.Kind != vocab.EndCompleted {
		return errors.New("the resumed session did not complete: " + end)
	}
	return nil
}

// demoResult is the demo prompt's result (when it asked one) and the
// session's head once the agent rests again.
type demoResult struct {
	vocab.PromptResult
	head uint64
}

// runDemo runs what a resumed session still has queued, then, with ask,
// the demo prompt, and waits until the agent rests.
func runDemo(ctx context.Context, svc *agentsvc.Service, resumed, ask bool, prompt string) (demoResult, error) {
	if resumed {
		if err := svc.Continue(); err != nil {
			return demoResult{}, err
		}
	}
	var res vocab.PromptResult
	if ask {
		p, err := svc.SubmitText(prompt)
		if err != nil {
			return demoResult{}, err
		}
		if res, err = p.Wait(ctx); err != nil {
			return demoResult{}, err
		}
	}
	if err := svc.WhenIdle(ctx); err != nil {
		return demoResult{}, err
	}
	snap, err := svc.Snapshot(ctx)
	if err != nil {
		return demoResult{}, err
	}
	return demoResult{PromptResult: res, head: snap.Seq}, nil
}

// printer hands a session's events to handle, from the first one, on a
// goroutine of its own, until the event the run ended with.
type printer struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	last    uint64 // the last event handled
	stop    uint64 // the last event to handle; 0 until known
	aborted bool
	err     error
}

func startPrinter(events func(context.Context, uint64) iter.Seq2[vocab.Event, error], handle func(vocab.Event)) *printer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &printer{cancel: cancel, done: make(chan struct{})}
	stream := events(ctx, 0)
	go func() {
		defer close(p.done)
		for ev, err := range stream {
			if err != nil {
				p.mu.Lock()
				if !p.aborted && (p.stop == 0 || p.last < p.stop) {
					p.err = err // never a silent gap: the run fails
				}
				p.mu.Unlock()
				return
			}
			handle(ev)
			p.mu.Lock()
			p.last = ev.Seq
			end := p.stop > 0 && ev.Seq >= p.stop
			p.mu.Unlock()
			if end {
				return
			}
		}
	}()
	return p
}

// until waits until the printer has handled the events up to head and
// returns the stream's error.
func (p *printer) until(head uint64) error {
	p.mu.Lock()
	p.stop = head
	if p.last >= head {
		p.cancel()
	}
	p.mu.Unlock()
	<-p.done
	p.cancel()
	return p.err
}

// abort stops the printer where it is.
func (p *printer) abort() {
	p.mu.Lock()
	p.aborted = true
	p.mu.Unlock()
	p.cancel()
	<-p.done
}

// replayProvider plays a script, and plays it again from its first step
// whenever it ran out: a resumed session asks the model for more than one
// turn.
type replayProvider struct {
	script *scripted.Script
	clk    clock.Clock

	mu  sync.Mutex
	cur *scripted.Provider
}

func (r *replayProvider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	r.mu.Lock()
	if r.cur == nil || r.cur.Remaining() == 0 {
		r.cur = scripted.New(r.script, r.clk)
	}
	p := r.cur
	r.mu.Unlock()
	return p.Stream(ctx, req)
}

// timeline renders events as readable lines.
type timeline struct {
	w     io.Writer
	color bool
	// start is the time shown as 0: the first event's when zero.
	start time.Time
	// seq shows each event's sequence number.
	seq bool
	// resumedAt, when not 0, is the last event written before a resume:
	// a line marks where the resumed run's events start.
	resumedAt uint64
	// whole prints messages and the results of the sub-agent tools
	// whole, one line of theirs per line, rather than cut to one line:
	// the fan-out demo, whose point is what the sub-agents answered.
	whole   bool
	printed bool // whether the event being rendered printed a line
}

const (
	dim    = "\x1b[2m"
	bold   = "\x1b[1m"
	cyan   = "\x1b[36m"
	yellow = "\x1b[33m"
	green  = "\x1b[32m"
	red    = "\x1b[31m"
	reset  = "\x1b[0m"
)

func (t *timeline) paint(c, s string) string {
	if !t.color {
		return s
	}
	return c + s + reset
}

func (t *timeline) line(ev vocab.Event, c, text string) {
	t.printed = true
	if t.seq {
		fmt.Fprintf(t.w, "%s ", t.paint(dim, fmt.Sprintf("%6d", ev.Seq)))
	}
	where := ""
	if ev.Turn > 0 {
		where = fmt.Sprintf("turn %d", ev.Turn)
		if ev.Step > 0 {
			where += fmt.Sprintf(" step %d", ev.Step)
		}
	}
	fmt.Fprintf(t.w, "%s %-15s %s\n", t.paint(dim, fmt.Sprintf("%7.3fs", ev.At.Sub(t.start).Seconds())), where, t.paint(c, text))
}

// text prints head and text on a line, cut to max runes; with whole, it
// prints text whole instead, each further line of it indented under the
// first.
func (t *timeline) text(ev vocab.Event, c, head, text string, max int) {
	if !t.whole {
		t.line(ev, c, head+displayText(text, max))
		return
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	t.line(ev, c, head+displayText(lines[0], 0))
	indent := strings.Repeat(" ", 27) // under the text of the first line
	if t.seq {
		indent += strings.Repeat(" ", 7)
	}
	for _, l := range lines[1:] {
		fmt.Fprintf(t.w, "%s%s\n", indent, t.paint(c, displayText(l, 0)))
	}
}

// print renders ev, and reports whether it printed a line: many events
// (inputs, statuses, streaming updates) stay in the raw event stream.
func (t *timeline) print(ev vocab.Event) bool {
	if t.start.IsZero() {
		t.start = ev.At
	}
	if t.resumedAt > 0 && ev.Seq == t.resumedAt+1 {
		fmt.Fprintln(t.w, t.paint(dim, "--- resumed: the run that wrote the events above stopped; recovery and this run follow"))
	}
	t.printed = false
	t.render(ev)
	return t.printed
}

// raw renders any event as its kind and payload.
func (t *timeline) raw(ev vocab.Event) {
	text := string(ev.Kind)
	if ev.Payload != nil {
		b, err := json.Marshal(ev.Payload)
		if err != nil {
			b = []byte(err.Error())
		}
		text += " " + displayText(string(b), 100)
	}
	t.line(ev, dim, displayText(text, 0))
}

func (t *timeline) render(ev vocab.Event) {
	switch p := ev.Payload.(type) {
	case vocab.HeaderPayload:
		if p.Reason == "resume" {
			t.line(ev, dim, "model request header: resume (the first request after a reopen)")
		}
	case vocab.TransitionPayload:
		who := p.Machine
		if p.Instance != "" {
			who += " " + displayText(p.Instance, 0) // a tool call id, from the model
		}
		if p.From == p.To {
			return // internal transitions stay in the raw event stream
		}
		guard := ""
		if p.Guard != "" {
			guard = " [" + p.Guard + "]"
		}
		t.line(ev, cyan, fmt.Sprintf("%-6s %s → %s  (%s%s)", who, p.From, p.To, p.Trigger, guard))
	case vocab.MessagePayload:
		switch ev.Kind {
		case vocab.EventUserMessage:
			t.text(ev, bold, "user: ", p.Message.Text(), 100)
		case vocab.EventAssistant:
			if txt := p.Message.Text(); strings.TrimSpace(txt) != "" {
				t.text(ev, bold, "assistant: ", txt, 100)
			}
			for _, c := range p.Message.ToolCalls() {
				t.line(ev, yellow, fmt.Sprintf("call %s %s(%s)", displayText(c.ID, 0), displayText(c.Name, 0), displayText(string(c.Args), 0)))
			}
		}
	case vocab.LoopPayload:
		switch {
		case ev.Kind == vocab.EventWarning:
			t.line(ev, yellow, fmt.Sprintf("loop warning on %s: %s ×%d (%s)", displayText(p.CallID, 0), p.Detector, p.Count, displayText(p.Tool, 0)))
		case p.Terminate:
			t.line(ev, red, fmt.Sprintf("loop terminates the run at %s: %s ×%d (%s), a second critical loop", displayText(p.CallID, 0), p.Detector, p.Count, displayText(p.Tool, 0)))
		default:
			t.line(ev, red, fmt.Sprintf("loop blocks the batch at %s: %s ×%d (%s); the model is told to change approach", displayText(p.CallID, 0), p.Detector, p.Count, displayText(p.Tool, 0)))
		}
	case vocab.ApprovalPayload:
		switch p.State {
		case vocab.ApprovalRequested:
			t.line(ev, yellow, fmt.Sprintf("approval asked for %s: %s", displayText(p.Call.ID, 0), displayText(p.Question, 100)))
		case vocab.ApprovalAnswered:
			what := string(p.Decision)
			if p.Reason != "" {
				what += ": " + p.Reason
			}
			t.line(ev, yellow, fmt.Sprintf("approval given for %s: %s", displayText(p.Call.ID, 0), displayText(what, 100)))
		default:
			t.line(ev, red, fmt.Sprintf("approval abandoned for %s", displayText(p.Call.ID, 0)))
		}
	case vocab.ToolPayload:
		switch ev.Kind {
		case vocab.EventToolExecutionStart:
			t.line(ev, dim, fmt.Sprintf("run %s %s", displayText(p.Call.ID, 0), displayText(p.Call.Name, 0)))
		case vocab.EventToolExecutionEnd:
			if p.Result != nil {
				t.line(ev, dim, fmt.Sprintf("ran %s %s", displayText(p.Call.ID, 0), displayText(p.Call.Name, 0)))
			}
		}
		if ev.Kind == vocab.EventToolResult && p.Result != nil {
			c := green
			if p.Result.IsError {
				c = red
			}
			head := fmt.Sprintf("result %s: ", displayText(p.Result.CallID, 0))
			name := p.Call.Name
			if name == "" {
				name = p.Result.Name
			}
			switch name {
			case agentsvc.ToolSpawn, agentsvc.ToolWait, agentsvc.ToolSubagents, agentsvc.ToolYield:
				t.text(ev, c, head, p.Result.Content, 100)
			default:
				t.line(ev, c, head+displayText(p.Result.Content, 100))
			}
		}
	case vocab.RetryPayload:
		t.line(ev, red, fmt.Sprintf("retry: attempt %d failed (%s: %s); attempt %d/%d in %s", p.FailedAttempt, displayText(string(p.Code), 0), displayText(p.Message, 0), p.NextAttempt, p.MaxAttempts, p.Delay))
	case vocab.UsagePayload:
		if p.Usage.CacheReadTokens > 0 {
			t.line(ev, dim, fmt.Sprintf("usage: %d in (%d from cache), %d out", p.Usage.InputTokens, p.Usage.CacheReadTokens, p.Usage.OutputTokens))
		} else {
			t.line(ev, dim, fmt.Sprintf("usage: %d in, %d out", p.Usage.InputTokens, p.Usage.OutputTokens))
		}
	case vocab.TurnEndPayload:
		t.line(ev, bold, fmt.Sprintf("turn end: %s after %d steps", displayText(p.Reason.String(), 0), p.Steps))
	case vocab.PromptPayload:
		if ev.Kind == vocab.EventYield {
			// A yield keeps the prompt open; a later turn resumes it.
			t.line(ev, bold, fmt.Sprintf("prompt %s %s", p.State, displayText(string(p.Prompt), 0)))
		}
	}
}

// pathArg returns the path argument of a tool call, for a question.
func pathArg(args json.RawMessage) string {
	var a struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(args, &a) != nil || a.Path == "" {
		return "the workspace"
	}
	return displayText(a.Path, 60)
}
