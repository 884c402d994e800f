// Command lctemporal runs a loopchart session on Temporal end to end: a
// worker that runs the session workflow and its activities, and a client
// that starts a session, submits one prompt, prints the transcript and
// closes the session.
//
// Usage, from adapters/temporal, with a Temporal server running (for
// example `go run ./servertest/cmd/devserver`, which prints its address):
//
//	go run ./cmd/lctemporal worker -hostport 127.0.0.1:PORT -namespace default -queue demo
//	go run ./cmd/lctemporal run -hostport 127.0.0.1:PORT -namespace default -queue demo -session s1 -prompt "Count the words of go.mod."
//
// # worker
//
// worker registers the session workflow and its activities (temporal.Register)
// on the task queue and runs until SIGINT or SIGTERM, then stops the worker
// and exits with status 0. Once it polls the queue it prints exactly one
// line to stdout:
//
//	worker ready on queue QUEUE
//
// Its logs (warnings of the Temporal SDK, and a line per tool call a model
// asks for) go to stderr.
//
// The model is the scripted provider (adapters/llm/scripted) playing the
// JSON script -script, or by default the embedded demo.json: the model calls
// word_count on go.mod once and then answers. The tools are the read-only
// file tools of adapters/tools (list_files, read_file, word_count) over the
// directory -workspace (default "."). Content (messages, snapshots) goes to
// the SQLite file -content (default loopchart-content.db in the current
// directory); worker processes on one machine can share it.
//
// The scripted provider consumes the next step of its script on every model
// request, in the worker process: the demo script serves one prompt of one
// session per worker process (a second prompt fails with "no step 3 left"),
// and it is meant for exactly one worker on the queue. Restart the worker
// before the next run.
//
// # run
//
// run starts the session -session (a new workflow; the id must not be in
// use on the server) offering the worker's tools to the model, submits
// -prompt, waits until the prompt ends (at most -timeout, default 5m),
// prints the transcript and the prompt's result, closes the session and
// waits until its workflow ended. It exits with status 0 when the prompt
// completed and 1 otherwise.
//
// # Flags and status
//
// Both subcommands take -hostport (default localhost:7233, the Temporal
// CLI's dev server), -namespace (default "default") and -queue (required).
// Invalid or missing flags exit with status 2, failures with status 1.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// demoScript is the default script of the worker's model.
//
//go:embed demo.json
var demoScript []byte

// demoScriptName names the embedded script in errors.
const demoScriptName = "demo.json"

// Defaults of the flags.
const (
	defaultContent = "loopchart-content.db"
	defaultTimeout = 5 * time.Minute
	// closeTimeout bounds the best-effort close of a session whose prompt
	// could not be waited for.
	closeTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal the default behaviour comes back, so a
		// second one kills the process even if stopping hangs.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  lctemporal worker -queue Q [-hostport H] [-namespace N] [-content PATH] [-script PATH] [-workspace DIR]
  lctemporal run    -queue Q -session ID -prompt TEXT [-hostport H] [-namespace N] [-timeout D]

worker runs a loopchart worker on the task queue until SIGINT or SIGTERM.
run starts a session, submits one prompt, prints the transcript and the
prompt's result, and closes the session. 'lctemporal SUBCOMMAND -h' lists
the flags of a subcommand.
`

// run runs the command line args and returns the exit status: 0 on
// success, 1 on a failure, 2 on invalid arguments.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "worker":
		return workerCmd(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "lctemporal: unknown subcommand %q\n\n%s", args[0], usage)
		return 2
	}
}

// demoTools returns the tools of the demo over fsys: the read-only file
// tools of adapters/tools (list_files, read_file, word_count). The worker
// registers them and run offers their specs to the model (demoSpecs): both
// come from here, so the session's tool specs match the worker's tools.
func demoTools(fsys fs.FS) []vocab.Tool { return tools.FileTools(fsys) }

// demoRegistry returns a registry of the demo's tools over fsys.
func demoRegistry(fsys fs.FS) (*tools.Registry, error) { return tools.NewRegistry(demoTools(fsys)...) }

// demoSpecs returns the specs of the demo's tools, sorted by name. Specs do
// not depend on the files, so no file system is needed.
func demoSpecs() ([]vocab.ToolSpec, error) {
	reg, err := demoRegistry(nil)
	if err != nil {
		return nil, err
	}
	return reg.Specs(), nil
}

// loadScript returns the script at path, or the embedded demo script when
// path is empty.
func loadScript(path string) (*scripted.Script, error) {
	if path == "" {
		return scripted.Parse(demoScript, demoScriptName)
	}
	return scripted.Load(path)
}

// conn are the connection flags of both subcommands.
type conn struct {
	hostport, namespace, queue string
}

func (c *conn) register(set *flag.FlagSet) {
	set.StringVar(&c.hostport, "hostport", client.DefaultHostPort, "host:port of the Temporal frontend")
	set.StringVar(&c.namespace, "namespace", client.DefaultNamespace, "Temporal namespace")
	set.StringVar(&c.queue, "queue", "", "task queue of the sessions (required; the same for worker and run)")
}

func (c *conn) validate() error {
	if err := validHostPort(c.hostport); err != nil {
		return err
	}
	if err := validName("-namespace", c.namespace); err != nil {
		return err
	}
	return validName("-queue", c.queue)
}

// validHostPort checks that hp is host:port with a port in 1..65535.
func validHostPort(hp string) error {
	if hp == "" {
		return errors.New("-hostport is required")
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("-hostport %q is not host:port: %v", hp, err)
	}
	if host == "" {
		return fmt.Errorf("-hostport %q has no host", hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("-hostport %q: port %q is not a number from 1 to 65535", hp, port)
	}
	return nil
}

// validName checks a namespace, task queue or session id: not empty, at
// most 1000 bytes (the server's limit), no spaces or control characters.
func validName(flagName, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is required", flagName)
	case len(v) > 1000:
		return fmt.Errorf("%s is %d bytes long, the server accepts at most 1000", flagName, len(v))
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%s %q must not contain spaces or control characters", flagName, v)
	}
	return nil
}

// parse parses args into set; ok false means the command is done with
// status code (0 for -h, 2 for a bad flag, which the flag package
// reported).
func parse(set *flag.FlagSet, args []string) (code int, ok bool) {
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if set.NArg() > 0 {
		fmt.Fprintf(set.Output(), "lctemporal %s: unexpected argument %q: it takes only flags\n", set.Name(), set.Arg(0))
		return 2, false
	}
	return 0, true
}

// badFlag reports an invalid flag and returns status 2.
func badFlag(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "lctemporal %s: %v\nRun 'lctemporal %s -h' for usage.\n", cmd, err, cmd)
	return 2
}

// dial connects to the server; the SDK logs warnings and errors to w.
func dial(ctx context.Context, c conn, w io.Writer) (client.Client, error) {
	logger := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cl, err := client.DialContext(ctx, client.Options{HostPort: c.hostport, Namespace: c.namespace, Logger: sdklog.NewStructuredLogger(logger)})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s (namespace %s): %w", c.hostport, c.namespace, err)
	}
	return cl, nil
}

// lockedWriter serialises writes: the worker's activities and the SDK log
// from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func workerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("worker", flag.ContinueOnError)
	set.SetOutput(stderr)
	var c conn
	c.register(set)
	contentPath := set.String("content", defaultContent, "SQLite file of the content store (shared by the worker processes of a machine)")
	scriptPath := set.String("script", "", "JSON script of the scripted model (default: the embedded demo script)")
	workspace := set.String("workspace", ".", "directory the file tools read")
	set.Usage = func() {
		fmt.Fprint(set.Output(), "usage: lctemporal worker -queue Q [flags]\n\n"+
			"Runs a loopchart worker on the task queue until SIGINT or SIGTERM; prints\n"+
			"\"worker ready on queue Q\" to stdout once it polls. The scripted model consumes\n"+
			"one step of its script per request: the demo script serves one prompt per\n"+
			"worker process.\n\n")
		set.PrintDefaults()
	}
	if code, ok := parse(set, args); !ok {
		return code
	}
	if err := c.validate(); err != nil {
		return badFlag(stderr, "worker", err)
	}
	if *contentPath == "" {
		return badFlag(stderr, "worker", errors.New("-content must not be empty"))
	}
	if st, err := os.Stat(*workspace); err != nil || !st.IsDir() {
		return badFlag(stderr, "worker", fmt.Errorf("-workspace %q is not a directory", *workspace))
	}
	script, err := loadScript(*scriptPath)
	if err != nil {
		return badFlag(stderr, "worker", fmt.Errorf("-script: %v", err))
	}

	logw := &lockedWriter{w: stderr}
	fail := func(err error) int {
		fmt.Fprintf(logw, "lctemporal worker: %v\n", err)
		return 1
	}
	reg, err := demoRegistry(os.DirFS(*workspace))
	if err != nil {
		return fail(err)
	}
	content, err := lt.OpenSQLiteContent(ctx, *contentPath)
	if err != nil {
		return fail(err)
	}
	defer content.Close()
	cl, err := dial(ctx, c, logw)
	if err != nil {
		return fail(err)
	}
	defer cl.Close()

	w := worker.New(cl, c.queue, worker.Options{})
	acts := &lt.Activities{
		Provider: scripted.New(script, nil),
		Tools:    reg,
		Content:  content,
		Live:     live(logw),
		Logger:   slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := lt.Register(w, acts); err != nil {
		return fail(err)
	}
	if err := w.Start(); err != nil {
		return fail(fmt.Errorf("starting the worker: %w", err))
	}
	if _, err := fmt.Fprintf(stdout, "worker ready on queue %s\n", c.queue); err != nil {
		w.Stop()
		return fail(err)
	}
	fmt.Fprintf(logw, "lctemporal worker: polling %s at %s (namespace %s), script %s (%d steps), workspace %s, content %s; Ctrl-C stops\n",
		c.queue, c.hostport, c.namespace, script.Name(), script.Len(), *workspace, *contentPath)
	<-ctx.Done()
	w.Stop()
	fmt.Fprintln(logw, "lctemporal worker: stopped")
	return 0
}

// live logs the tool calls the model asks for and the end of each reply.
func live(w io.Writer) func(vocab.ID, vocab.StreamPart) {
	return func(s vocab.ID, part vocab.StreamPart) {
		switch {
		case part.Kind == vocab.StreamToolCall && part.Call != nil:
			fmt.Fprintf(w, "session %s: model calls %s %s\n", s, part.Call.Name, part.Call.Args)
		case part.Kind == vocab.StreamFinish:
			fmt.Fprintf(w, "session %s: model reply finished (%s)\n", s, part.Finish)
		}
	}
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("run", flag.ContinueOnError)
	set.SetOutput(stderr)
	var c conn
	c.register(set)
	sessionID := set.String("session", "", "id of the new session (its workflow id; required)")
	prompt := set.String("prompt", "", "the prompt to submit (required)")
	timeout := set.Duration("timeout", defaultTimeout, "how long to wait for the prompt and the session's end")
	set.Usage = func() {
		fmt.Fprint(set.Output(), "usage: lctemporal run -queue Q -session ID -prompt TEXT [flags]\n\n"+
			"Starts the session on the task queue, submits the prompt, prints the transcript\n"+
			"and the prompt's result, and closes the session. Exits 0 when the prompt\n"+
			"completed, 1 otherwise. A worker (lctemporal worker) must poll the queue.\n\n")
		set.PrintDefaults()
	}
	if code, ok := parse(set, args); !ok {
		return code
	}
	if err := c.validate(); err != nil {
		return badFlag(stderr, "run", err)
	}
	if err := validName("-session", *sessionID); err != nil {
		return badFlag(stderr, "run", err)
	}
	if strings.TrimSpace(*prompt) == "" {
		return badFlag(stderr, "run", errors.New("-prompt is required (and not blank)"))
	}
	if *timeout <= 0 {
		return badFlag(stderr, "run", fmt.Errorf("-timeout %v must be positive", *timeout))
	}
	specs, err := demoSpecs()
	if err != nil {
		fmt.Fprintf(stderr, "lctemporal run: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	id := vocab.ID(*sessionID)
	fail := func(what string, err error) int {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (after %v: is a worker, lctemporal worker -queue %s, running against %s namespace %s?)",
				err, *timeout, c.queue, c.hostport, c.namespace)
		}
		fmt.Fprintf(stderr, "lctemporal run: %s: %v\n", what, err)
		return 1
	}

	cl, err := dial(ctx, c, stderr)
	if err != nil {
		return fail("dial", err)
	}
	defer cl.Close()
	lc, err := lt.NewClient(cl, c.queue)
	if err != nil {
		return fail("client", err)
	}
	// A session id names a workflow: it is refused while the server keeps
	// a workflow of that id, running or closed. Ask first, for a clear
	// message (Start, as the SDK runs it, hands back an existing run
	// instead of an error).
	taken := fmt.Errorf("session %s already exists on the server (running or closed): choose another -session", id)
	if _, err := cl.DescribeWorkflowExecution(ctx, string(id), ""); err == nil {
		return fail("start", taken)
	} else if _, notFound := errors.AsType[*serviceerror.NotFound](err); !notFound {
		return fail("start", err)
	}
	if err := lc.Start(ctx, session.Config{Session: id, Tools: specs}, lt.StartOptions{}); err != nil {
		if vocab.CodeOf(err) == vocab.CodeDuplicateID {
			return fail("start", taken)
		}
		return fail("start", err)
	}
	fmt.Fprintf(stdout, "session %s started on queue %s\n", id, c.queue)
	// closeQuietly closes a session whose prompt could not be waited for,
	// so that its workflow does not stay open; it does not wait for the
	// workflow's end (that needs a worker).
	closeQuietly := func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer ccancel()
		if err := lc.Close(cctx, id); err != nil {
			fmt.Fprintf(stderr, "lctemporal run: closing session %s: %v\n", id, err)
		}
	}
	ack, err := lc.Submit(ctx, id, vocab.UserText(*prompt))
	if err != nil {
		closeQuietly()
		return fail("submit", err)
	}
	res, err := lc.Wait(ctx, id, ack.ID)
	if err != nil {
		closeQuietly()
		return fail("wait", err)
	}
	msgs, err := lc.History(ctx, id)
	if err != nil {
		closeQuietly()
		return fail("history", err)
	}
	printTranscript(stdout, msgs)
	fmt.Fprintf(stdout, "prompt %s: %s\n", ack.ID, res)
	if res.Err != nil {
		fmt.Fprintf(stdout, "error: %v\n", res.Err)
	}
	if err := lc.Close(ctx, id); err != nil {
		return fail("close", err)
	}
	sum, err := lc.WaitClosed(ctx, id)
	if err != nil {
		return fail("waiting for the session's end", err)
	}
	fmt.Fprintf(stdout, "session %s closed: %d events, %d workflow run(s)\n", sum.Session, sum.Seq, sum.Runs)
	if res.Kind != vocab.PromptCompleted {
		return 1
	}
	return 0
}

// printTranscript prints each message as "role: text", an assistant's tool
// calls as "assistant: calls NAME ARGS" and a tool's result as
// "tool NAME: content".
func printTranscript(w io.Writer, msgs []vocab.Message) {
	indent := func(s string) string { return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") }
	for _, m := range msgs {
		switch {
		case m.Role == vocab.RoleTool && m.Result != nil:
			r := m.Result
			label := "tool " + r.Name
			if r.IsError {
				label += " (error " + string(r.Code) + ")"
			}
			text := r.Content
			if text == "" {
				text = r.Note
			}
			fmt.Fprintf(w, "%s: %s\n", label, indent(text))
		default:
			if t := m.Text(); t != "" || !m.HasToolCalls() {
				fmt.Fprintf(w, "%s: %s\n", m.Role, indent(t))
			}
			for _, call := range m.ToolCalls() {
				fmt.Fprintf(w, "%s: calls %s %s\n", m.Role, call.Name, call.Args)
			}
		}
	}
}
