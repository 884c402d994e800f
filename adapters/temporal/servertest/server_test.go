package servertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"

	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// The test binary doubles as a worker process (for the crash test): with
// LOOPCHART_TEMPORAL_WORKER set it runs a worker until it is killed.
func TestMain(m *testing.M) {
	if os.Getenv("LOOPCHART_TEMPORAL_WORKER") != "" {
		os.Exit(workerProcess())
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

var (
	srvOnce sync.Once
	srv     *temporaltest.TestServer
)

// server is the one in-process server of this test binary.
func server(t *testing.T) *temporaltest.TestServer {
	t.Helper()
	srvOnce.Do(func() { srv = temporaltest.NewServer() })
	return srv
}

// workerProcess runs a worker on the queue the environment names, with its
// content in a shared SQLite file; it says "ready" once it polls.
func workerProcess() int {
	hostport, ns, queue := os.Getenv("LT_HOSTPORT"), os.Getenv("LT_NAMESPACE"), os.Getenv("LT_QUEUE")
	if os.Getenv("LT_NOSTICKY") != "" {
		worker.SetStickyWorkflowCacheSize(0)
	}
	c, err := client.Dial(client.Options{HostPort: hostport, Namespace: ns, Logger: quiet{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	content, err := lt.OpenSQLiteContent(context.Background(), os.Getenv("LT_CONTENT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	acts, err := Activities(&Provider{}, content, Block{Dir: os.Getenv("LT_DIR")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := worker.New(c, queue, worker.Options{})
	if err := lt.Register(w, acts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	// Until killed, or until the test closes stdin.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	w.Stop()
	return 0
}

// quiet is an SDK logger that drops everything below warnings.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"WARN", msg}, kv...)...)
}
func (quiet) Error(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"ERROR", msg}, kv...)...)
}

// rig is one test's worker(s) and client on a queue of its own.
type rig struct {
	t       *testing.T
	srv     *temporaltest.TestServer
	queue   string
	c       client.Client
	lc      *lt.Client
	content lt.ContentStore
}

func newRig(t *testing.T) *rig {
	t.Helper()
	s := server(t)
	queue := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	c := s.NewClientWithOptions(client.Options{Logger: quiet{}})
	t.Cleanup(c.Close)
	lc, err := lt.NewClient(c, queue)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, srv: s, queue: queue, c: c, lc: lc, content: lt.NewMemoryContent()}
}

// worker starts an in-process worker; it stops with the test.
func (r *rig) worker(p *Provider, b Block) worker.Worker {
	r.t.Helper()
	acts, err := Activities(p, r.content, b)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.workerWith(acts)
}

func (r *rig) workerWith(acts *lt.Activities) worker.Worker {
	r.t.Helper()
	w := worker.New(r.c, r.queue, worker.Options{})
	if err := lt.Register(w, acts); err != nil {
		r.t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(w.Stop)
	return w
}

func (r *rig) start(id vocab.ID, o lt.Options) {
	r.t.Helper()
	cfg := session.Config{Session: id, Tools: Specs()}
	if err := r.lc.Start(context.Background(), cfg, lt.StartOptions{Options: o}); err != nil {
		r.t.Fatal(err)
	}
}

func user(text string) vocab.Message {
	return vocab.Message{Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: text}}}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// transcript renders a history as role:text lines.
func transcript(msgs []vocab.Message) string {
	var lines []string
	for _, m := range msgs {
		lines = append(lines, string(m.Role)+":"+m.Text())
	}
	return strings.Join(lines, "\n")
}

func (r *rig) submit(ctx context.Context, s vocab.ID, text string) vocab.ID {
	r.t.Helper()
	ack, err := r.lc.Submit(ctx, s, user(text))
	if err != nil {
		r.t.Fatalf("submit %q: %v", text, err)
	}
	if ack.ID == "" || ack.Seq == 0 {
		r.t.Fatalf("ack %+v", ack)
	}
	return ack.ID
}

func (r *rig) wait(ctx context.Context, s, id vocab.ID) vocab.PromptResult {
	r.t.Helper()
	res, err := r.lc.Wait(ctx, s, id)
	if err != nil {
		r.t.Fatalf("wait %s: %v", id, err)
	}
	return res
}

func (r *rig) close(ctx context.Context, s vocab.ID) lt.Summary {
	r.t.Helper()
	if err := r.lc.Close(ctx, s); err != nil {
		r.t.Fatal(err)
	}
	sum, err := r.lc.WaitClosed(ctx, s)
	if err != nil {
		r.t.Fatalf("closed: %v", err)
	}
	return sum
}

func TestTwoToolRounds(t *testing.T) {
	r := newRig(t)
	p := &Provider{}
	r.worker(p, Block{})
	ctx := ctxT(t, time.Minute)
	r.start("two-rounds", lt.Options{})
	id := r.submit(ctx, "two-rounds", "use a tool please")
	if res := r.wait(ctx, "two-rounds", id); res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("first prompt %+v", res)
	}
	id = r.submit(ctx, "two-rounds", "tool and tool")
	if res := r.wait(ctx, "two-rounds", id); res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("second prompt %+v", res)
	}
	h, err := r.lc.History(ctx, "two-rounds")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"user:use a tool please", "assistant:", "tool:echo(use a tool please)", "assistant:done: echo(use a tool please)",
		"user:tool and tool", "assistant:", "tool:echo(tool and tool)", "tool:echo(tool and tool)",
		"assistant:done: echo(tool and tool) echo(tool and tool)",
	}, "\n")
	if got := transcript(h); got != want {
		t.Fatalf("history:\n%s\nwant:\n%s", got, want)
	}
	if n := p.Calls.Load(); n != 4 {
		t.Errorf("provider calls = %d, want 4", n)
	}
	// The events are gapless from 1 and end with the closed session.
	sum := r.close(ctx, "two-rounds")
	var seq uint64
	for ev, err := range r.lc.Events(ctx, "two-rounds", 1) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != seq+1 {
			t.Fatalf("event %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
	}
	if seq != sum.Seq || sum.Runs != 1 {
		t.Fatalf("events end at %d, summary %+v", seq, sum)
	}
	r.record(ctx, "tools", "two-rounds")
	// A session id is used once, even after the session closed.
	err = r.lc.Start(ctx, session.Config{Session: "two-rounds"}, lt.StartOptions{})
	if !errors.Is(err, vocab.CodeDuplicateID.Err()) {
		t.Fatalf("second start: %v", err)
	}
}

func TestCancelDuringTool(t *testing.T) {
	r := newRig(t)
	b := Block{Started: make(chan string, 1), Cancelled: make(chan time.Time, 1)}
	r.worker(&Provider{}, b)
	ctx := ctxT(t, time.Minute)
	const hb = 2 * time.Second
	r.start("cancel-tool", lt.Options{HeartbeatTimeout: hb})
	id := r.submit(ctx, "cancel-tool", "block please")
	select {
	case <-b.Started:
	case <-ctx.Done():
		t.Fatal("the tool never started")
	}
	sent := time.Now()
	if err := r.lc.Cancel(ctx, "cancel-tool", vocab.CancelCause{}, false); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	select {
	case at = <-b.Cancelled:
	case <-ctx.Done():
		t.Fatal("the tool's context was never cancelled")
	}
	if lat := at.Sub(sent); lat > hb+time.Second {
		t.Errorf("cancel reached the tool after %v, want at most %v", lat, hb+time.Second)
	} else {
		t.Logf("cancel reached the tool after %v (heartbeat timeout %v)", lat, hb)
	}
	res := r.wait(ctx, "cancel-tool", id)
	if res.Kind != vocab.PromptCancelled {
		t.Fatalf("prompt %+v", res)
	}
	// The transcript stays valid: the call has its (aborted) result.
	h, err := r.lc.History(ctx, "cancel-tool")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) < 3 || h[1].Role != vocab.RoleAssistant || h[2].Role != vocab.RoleTool || !strings.Contains(h[2].Text(), "aborted") {
		t.Fatalf("history:\n%s", transcript(h))
	}
	// The session goes on.
	id = r.submit(ctx, "cancel-tool", "tool now")
	if res := r.wait(ctx, "cancel-tool", id); res.Kind != vocab.PromptCompleted {
		t.Fatalf("after cancel %+v", res)
	}
	r.close(ctx, "cancel-tool")
	r.record(ctx, "cancel", "cancel-tool")
}

func TestValidatorRejectionTouchesNoHistory(t *testing.T) {
	r := newRig(t)
	r.worker(&Provider{}, Block{})
	ctx := ctxT(t, time.Minute)
	r.start("reject", lt.Options{})
	id := r.submit(ctx, "reject", "hello")
	r.wait(ctx, "reject", id)
	before := r.historyLen(ctx, "reject")
	_, err := r.lc.Withdraw(ctx, "reject", "nothing-queued")
	if !errors.Is(err, vocab.CodeNotQueued.Err()) {
		t.Fatalf("withdraw of nothing: %v", err)
	}
	_, err = r.lc.Submit(ctx, "reject", vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "hi"}}})
	if !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Fatalf("an assistant message as a prompt: %v", err)
	}
	if after := r.historyLen(ctx, "reject"); after != before {
		t.Fatalf("history grew from %d to %d events on rejected updates", before, after)
	}
	r.close(ctx, "reject")
}

func (r *rig) historyLen(ctx context.Context, s vocab.ID) int {
	r.t.Helper()
	it := r.c.GetWorkflowHistory(ctx, string(s), "", false, 0)
	n := 0
	for it.HasNext() {
		if _, err := it.Next(); err != nil {
			r.t.Fatal(err)
		}
		n++
	}
	return n
}

// A submit and a cancel that reach the session before a worker runs
// land in one workflow task: both are recorded, the signal first (history
// order), and nothing is lost.
func TestSubmitAndCancelInOneTask(t *testing.T) {
	r := newRig(t)
	ctx := ctxT(t, time.Minute)
	r.start("one-task", lt.Options{})
	if err := r.lc.Cancel(ctx, "one-task", vocab.CancelCause{}, false); err != nil {
		t.Fatal(err)
	}
	type res struct {
		ack lt.Ack
		err error
	}
	done := make(chan res, 1)
	go func() {
		ack, err := r.lc.Submit(ctx, "one-task", user("tool please"))
		done <- res{ack, err}
	}()
	r.worker(&Provider{}, Block{})
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if got := r.wait(ctx, "one-task", s.ack.ID); got.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %+v", got)
	}
	var kinds []string
	for ev, err := range r.lc.Events(ctx, "one-task", 1) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(ev.Kind), "input/") {
			kinds = append(kinds, string(ev.Kind))
		}
	}
	got := strings.Join(kinds, " ")
	if !strings.Contains(got, "input/cancel input/submit") {
		t.Fatalf("inputs in order: %s", got)
	}
	r.close(ctx, "one-task")
}

func TestContinueAsNewMidTurn(t *testing.T) {
	r := newRig(t)
	p := &Provider{}
	r.worker(p, Block{})
	ctx := ctxT(t, 2*time.Minute)
	r.start("long", lt.Options{ContinueAfter: 60, EventWindow: 10000})
	// One prompt, one turn of seven steps; every step's first attempt
	// fails, and its retry wait (a timer, nothing in flight) is a
	// boundary in the middle of the turn.
	id := r.submit(ctx, "long", "flaky chain chain chain chain chain chain")
	res := r.wait(ctx, "long", id)
	if res.Kind != vocab.PromptCompleted || res.Steps != 7 {
		t.Fatalf("prompt %+v", res)
	}
	st, err := r.lc.Status(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if st.Run < 2 {
		t.Fatalf("no continue-as-new: %+v", st)
	}
	// The events stay gapless across runs, and the retry is in them.
	var seq uint64
	retried := 0
	for ev, err := range r.lc.Events(ctx, "long", 1) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != seq+1 {
			t.Fatalf("event %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
		if ev.Kind == vocab.EventRetry {
			retried++
		}
	}
	if retried != 7 {
		t.Errorf("%d llm/retry events, want 7", retried)
	}
	h, err := r.lc.History(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1+2*6+1 {
		t.Errorf("history has %d messages:\n%s", len(h), transcript(h))
	}
	sum := r.close(ctx, "long")
	if sum.Runs != st.Run {
		t.Errorf("summary %+v, status %+v", sum, st)
	}
	t.Logf("runs %d, events %d", sum.Runs, sum.Seq)
	r.record(ctx, "continue", "long")
}

func TestThreeWorkersThirtySessions(t *testing.T) {
	r := newRig(t)
	p := &Provider{}
	for range 3 {
		r.worker(p, Block{})
	}
	ctx := ctxT(t, 3*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := vocab.ID(fmt.Sprintf("shared-%02d", i))
			cfg := session.Config{Session: s, Tools: Specs()}
			if err := r.lc.Start(ctx, cfg, lt.StartOptions{}); err != nil {
				errs <- err
				return
			}
			ack, err := r.lc.Submit(ctx, s, user("tool and tool"))
			if err != nil {
				errs <- err
				return
			}
			res, err := r.lc.Wait(ctx, s, ack.ID)
			if err != nil || res.Kind != vocab.PromptCompleted {
				errs <- fmt.Errorf("%s: %+v %v", s, res, err)
				return
			}
			if err := r.lc.Close(ctx, s); err != nil {
				errs <- err
				return
			}
			if _, err := r.lc.WaitClosed(ctx, s); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := p.Calls.Load(); n != 60 {
		t.Errorf("provider calls = %d, want 60 (two per session, none repeated)", n)
	}
}

// startWorkerProcess runs a worker in a child process and waits until it
// polls.
func (r *rig) startWorkerProcess(contentPath, dir string, noSticky bool) *exec.Cmd {
	r.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOOPCHART_TEMPORAL_WORKER=1", "LT_HOSTPORT="+r.srv.GetFrontendHostPort(),
		"LT_NAMESPACE="+r.srv.GetDefaultNamespace(), "LT_QUEUE="+r.queue, "LT_CONTENT="+contentPath, "LT_DIR="+dir)
	if noSticky {
		cmd.Env = append(cmd.Env, "LT_NOSTICKY=1")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		r.t.Fatalf("worker process: %q %v", line, err)
	}
	return cmd
}

// A worker process killed (SIGKILL) during a tool call: a new worker takes
// the session over; the recorded model reply is not asked again, and the
// call lost with its worker is reported interrupted.
func TestWorkerKilledMidTurn(t *testing.T) {
	r := newRig(t)
	dir, cmd := r.workerProcessSharingContent()
	ctx := ctxT(t, 2*time.Minute)
	r.start("killed", lt.Options{HeartbeatTimeout: 2 * time.Second})
	id := r.submit(ctx, "killed", "block please")
	killWhenStarted(ctx, t, cmd, filepath.Join(dir, "started-call_a"))
	p := &Provider{}
	r.worker(p, Block{})
	res := r.wait(ctx, "killed", id)
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %+v", res)
	}
	if n := p.Calls.Load(); n != 1 {
		t.Errorf("the new worker asked the model %d times, want 1 (only the step after the tool)", n)
	}
	h, err := r.lc.History(ctx, "killed")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4 || h[2].Role != vocab.RoleTool || h[2].Text() != vocab.InterruptedToolText {
		t.Fatalf("history:\n%s", transcript(h))
	}
	r.close(ctx, "killed")
}

// With the sticky cache off, every workflow task replays the whole
// history: the session must come out the same.
func TestNoStickyCacheReplaysEveryTask(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	contentPath := filepath.Join(dir, "content.db")
	r.startWorkerProcess(contentPath, dir, true)
	ctx := ctxT(t, 2*time.Minute)
	r.start("nosticky", lt.Options{})
	for _, text := range []string{"tool please", "tool and tool", "flaky", "hello"} {
		if res := r.wait(ctx, "nosticky", r.submit(ctx, "nosticky", text)); res.Kind != vocab.PromptCompleted {
			t.Fatalf("%q: %+v", text, res)
		}
	}
	h, err := r.lc.History(ctx, "nosticky")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4+5+2+2 {
		t.Fatalf("history:\n%s", transcript(h))
	}
	r.close(ctx, "nosticky")
}

// A model request cancelled mid-stream: the cancellation reaches the
// provider within the heartbeat timeout (the activity beats from a
// ticker, not per delta), the partial reply comes back in the cancel
// error's details, and deltas went only to the live side channel.
func TestCancelDuringModelRequest(t *testing.T) {
	r := newRig(t)
	p := &Provider{Streaming: make(chan struct{}, 1), Cancelled: make(chan time.Time, 1)}
	acts, err := Activities(p, r.content, Block{})
	if err != nil {
		t.Fatal(err)
	}
	live := make(chan vocab.StreamPart, 16)
	acts.Live = func(_ vocab.ID, part vocab.StreamPart) { live <- part }
	r.workerWith(acts)
	ctx := ctxT(t, time.Minute)
	const hb = 2 * time.Second
	r.start("cancel-model", lt.Options{HeartbeatTimeout: hb})
	id := r.submit(ctx, "cancel-model", "be slow")
	select {
	case <-p.Streaming:
	case <-ctx.Done():
		t.Fatal("the request never streamed")
	}
	sent := time.Now()
	if err := r.lc.Cancel(ctx, "cancel-model", vocab.CancelCause{}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-p.Cancelled:
		if lat := at.Sub(sent); lat > hb+time.Second {
			t.Errorf("cancel reached the provider after %v, want at most %v", lat, hb+time.Second)
		} else {
			t.Logf("cancel reached the provider after %v (heartbeat timeout %v)", lat, hb)
		}
	case <-ctx.Done():
		t.Fatal("the request's context was never cancelled")
	}
	if res := r.wait(ctx, "cancel-model", id); res.Kind != vocab.PromptCancelled {
		t.Fatalf("prompt %+v", res)
	}
	if part := <-live; part.Text != "partial answer" {
		t.Errorf("live part %+v", part)
	}
	r.close(ctx, "cancel-model")
	// The partial reply is in the cancelled activity's details; no delta
	// is anywhere else in the history.
	var partial string
	deltas := 0
	it := r.c.GetWorkflowHistory(ctx, "cancel-model", "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskCanceledEventAttributes(); a != nil && a.GetDetails() != nil {
			var mr lt.ModelResult
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetDetails(), &mr); err != nil {
				t.Fatal(err)
			}
			if mr.Reply != nil {
				partial = mr.Reply.Text()
			}
			continue
		}
		if strings.Contains(ev.String(), "partial answer") {
			deltas++
		}
	}
	if partial != "partial answer" {
		t.Errorf("partial reply in the cancel details: %q", partial)
	}
	if deltas != 0 {
		t.Errorf("%d other history events carry the streamed text", deltas)
	}
}

// A tool that declares itself idempotent is run again when its worker is
// lost; its new result is the one recorded.
func TestIdempotentToolRunsAgainOnANewWorker(t *testing.T) {
	r := newRig(t)
	dir, cmd := r.workerProcessSharingContent()
	ctx := ctxT(t, 2*time.Minute)
	specs := Specs()
	for i := range specs {
		if specs[i].Name == "block" {
			specs[i].Idempotent = true
		}
	}
	cfg := session.Config{Session: "idempotent", Tools: specs}
	if err := r.lc.Start(ctx, cfg, lt.StartOptions{Options: lt.Options{HeartbeatTimeout: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	id := r.submit(ctx, "idempotent", "block please")
	killWhenStarted(ctx, t, cmd, filepath.Join(dir, "started-call_a"))
	r.worker(&Provider{}, Block{Release: true})
	if res := r.wait(ctx, "idempotent", id); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %+v", res)
	}
	h, err := r.lc.History(ctx, "idempotent")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4 || h[2].Text() != "released" {
		t.Fatalf("history:\n%s", transcript(h))
	}
	r.close(ctx, "idempotent")
}

// The events query serves a window; older events fail with a typed error
// (read them from the export), and an unknown prompt is typed too.
func TestQueriesFailTyped(t *testing.T) {
	r := newRig(t)
	r.worker(&Provider{}, Block{})
	ctx := ctxT(t, time.Minute)
	r.start("window", lt.Options{EventWindow: 10})
	r.wait(ctx, "window", r.submit(ctx, "window", "tool please"))
	var err error
	for _, e := range r.lc.Events(ctx, "window", 1) {
		err = e
		break
	}
	if !errors.Is(err, lt.CodeEventsCompacted.Err()) {
		t.Fatalf("events from 1 with a window of 10: %v", err)
	}
	n := 0
	st, err := r.lc.Status(ctx, "window")
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range r.lc.Events(ctx, "window", st.Seq-9) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != st.Seq-9+uint64(n) {
			t.Fatalf("event %d", ev.Seq)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("%d events in the window", n)
	}
	if _, err := r.lc.Wait(ctx, "window", "no-such-prompt"); !errors.Is(err, lt.CodeNoPrompt.Err()) {
		t.Fatalf("wait for an unknown prompt: %v", err)
	}
	r.close(ctx, "window")
}

// Prompts submitted back to back across many continue-as-news: an update
// that reaches a new run while it loads its snapshot waits for the core;
// none is refused or lost.
func TestSubmitsAcrossContinueAsNew(t *testing.T) {
	r := newRig(t)
	r.worker(&Provider{}, Block{})
	ctx := ctxT(t, 2*time.Minute)
	r.start("hops", lt.Options{ContinueAfter: 70})
	for i := range 30 {
		id := r.submit(ctx, "hops", fmt.Sprintf("hello %d", i))
		if res := r.wait(ctx, "hops", id); res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %d: %+v", i, res)
		}
	}
	h, err := r.lc.History(ctx, "hops")
	if err != nil {
		t.Fatal(err)
	}
	sum := r.close(ctx, "hops")
	if len(h) != 60 || sum.Runs < 4 {
		t.Fatalf("%d messages, %d runs", len(h), sum.Runs)
	}
	t.Logf("30 prompts over %d runs", sum.Runs)
}

// workerProcessSharingContent starts a worker process whose content store
// (an SQLite file in a new directory) the rig's own workers share.
func (r *rig) workerProcessSharingContent() (dir string, cmd *exec.Cmd) {
	r.t.Helper()
	dir = r.t.TempDir()
	contentPath := filepath.Join(dir, "content.db")
	shared, err := lt.OpenSQLiteContent(context.Background(), contentPath)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = shared.Close() })
	r.content = shared
	return dir, r.startWorkerProcess(contentPath, dir, false)
}

// killWhenStarted SIGKILLs the worker process once its block tool wrote
// marker (the tool runs in the other process: its file is the signal).
func killWhenStarted(ctx context.Context, t *testing.T, cmd *exec.Cmd, marker string) {
	t.Helper()
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the tool never started in the worker process")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}
