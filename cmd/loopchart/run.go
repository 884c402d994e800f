package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/llm/anthropic"
	"github.com/loopchart/loopchart/adapters/llm/openai"
	"github.com/loopchart/loopchart/adapters/tools/workspace"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// defaultRunSystem is the system prompt of `loopchart run` unless
// --system gives another.
const defaultRunSystem = `You are a careful software agent working in a workspace directory.
Use the tools to look before you change anything: list_dir and grep to find files, read_file to read them,
edit_file for small changes and write_file for new files. Paths are relative to the workspace.
When the task is done, answer with a short summary of what you did.`

// secondInterrupt delivers the interrupts that arrive after the first
// one (which cancels the command's context): a second Ctrl-C stops the
// run at once. Tests replace it.
var secondInterrupt = func() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	return ch, func() { signal.Stop(ch) }
}

// runOptions are the flags of `loopchart run`.
type runOptions struct {
	provider, model, baseURL, server string
	keyEnv                           string
	workspace, db, system, events    string
	maxTokens, thinking              int
	allowCommands, color             bool
	task                             string
}

func parseRun(args []string) (runOptions, error) {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.provider, "provider", "", "openai (any OpenAI-compatible server) or anthropic")
	fs.StringVar(&o.model, "model", "", "the model to ask")
	fs.StringVar(&o.baseURL, "base-url", "", "the provider's base URL (a local server needs no key)")
	fs.StringVar(&o.server, "server", "", "openai only: the server's behaviour row (openai, deepseek, moonshot, vllm, ollama, llamacpp, mistral); default from the base URL")
	fs.StringVar(&o.keyEnv, "api-key-env", "", "read the API key from this environment variable (for a --base-url that needs one; the provider's own API reads OPENAI_API_KEY, DEEPSEEK_API_KEY, MOONSHOT_API_KEY, MISTRAL_API_KEY or ANTHROPIC_API_KEY)")
	fs.StringVar(&o.workspace, "workspace", ".", "the directory the agent's tools work in")
	fs.StringVar(&o.db, "db", defaultDB, "the SQLite file the session is logged to")
	fs.StringVar(&o.system, "system", defaultRunSystem, "the system prompt")
	fs.StringVar(&o.events, "events", "", `"json" prints the raw event stream as JSON lines`)
	fs.IntVar(&o.maxTokens, "max-tokens", 0, "the output token limit per reply (0: the provider's default)")
	fs.IntVar(&o.thinking, "thinking-budget", 0, "anthropic only: extended thinking with this token budget (0: off)")
	fs.BoolVar(&o.allowCommands, "allow-commands", false, "give the agent run_command (a shell in the workspace)")
	fs.BoolVar(&o.color, "color", false, "colour the timeline (NO_COLOR disables)")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case fs.NArg() != 1:
		return o, fmt.Errorf(`%w: run takes one task, quoted: loopchart run --provider openai --model M "the task"`, errUsage)
	case o.provider != "openai" && o.provider != "anthropic":
		return o, fmt.Errorf("%w: --provider takes openai or anthropic", errUsage)
	case o.model == "":
		return o, fmt.Errorf("%w: --model is required", errUsage)
	case o.events != "" && o.events != "json":
		return o, fmt.Errorf("%w: --events takes only json", errUsage)
	case o.maxTokens < 0 || o.thinking < 0:
		return o, fmt.Errorf("%w: --max-tokens and --thinking-budget cannot be negative", errUsage)
	case o.server != "" && o.provider != "openai":
		return o, fmt.Errorf("%w: --server is for --provider openai", errUsage)
	case o.thinking > 0 && o.provider != "anthropic":
		return o, fmt.Errorf("%w: --thinking-budget is for --provider anthropic", errUsage)
	}
	o.task = fs.Arg(0)
	if strings.TrimSpace(o.task) == "" {
		return o, fmt.Errorf("%w: the task is empty", errUsage)
	}
	return o, nil
}

// runTools returns the agent's tools over ws: the workspace tools, and
// run_command when commands are allowed. Tests add tools of their own.
var runTools = func(ws *workspace.Workspace, allowCommands bool) []vocab.Tool {
	tools := ws.Tools()
	if allowCommands {
		tools = append(tools, ws.RunCommand(workspace.CommandOptions{}))
	}
	return tools
}

// hardStopWait bounds how long a hard stop (a second Ctrl-C) waits for
// the session's work to end before it returns anyway.
var hardStopWait = 5 * time.Second

// runHTTPClient is the HTTP client of the providers; tests replace it.
var runHTTPClient = http.DefaultClient

// newProvider builds the provider the flags name. Without a key it says
// which environment variable to set (unless --base-url names a server of
// one's own, which may need none).
func newProvider(o runOptions) (vocab.Provider, error) {
	var key string
	if o.keyEnv != "" {
		if key = os.Getenv(o.keyEnv); key == "" {
			return nil, &vocab.Error{Code: vocab.CodeAuth, Message: "no API key: set " + o.keyEnv + " (--api-key-env names it)"}
		}
	}
	switch o.provider {
	case "openai":
		return openai.New(openai.Options{BaseURL: o.baseURL, APIKey: key, Model: o.model, MaxTokens: o.maxTokens, Server: o.server, HTTPClient: runHTTPClient})
	default:
		return anthropic.New(anthropic.Options{BaseURL: o.baseURL, APIKey: key, Model: o.model, MaxTokens: o.maxTokens, ThinkingBudget: o.thinking, HTTPClient: runHTTPClient})
	}
}

// agentRunCmd runs a real agent on a workspace: `loopchart run`.
func agentRunCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args)
	if err != nil {
		return err
	}
	prov, err := newProvider(o)
	if err != nil {
		return err
	}
	ws, err := workspace.Open(o.workspace, workspace.Options{})
	if err != nil {
		return err
	}
	defer ws.Close()
	tools := runTools(ws, o.allowCommands)

	// The session's context outlives the command's: the first Ctrl-C
	// (which cancels ctx) becomes a cancel with cause user, and the
	// session then ends its turn and is closed in order.
	st, err := openDB(context.Background(), o.db, false)
	if err != nil {
		return err
	}
	defer st.Close()
	id := vocab.NewULIDSource(nil).NewID(time.Now())
	svc, err := agentsvc.Open(context.Background(), st, id, agentsvc.Options{
		Provider:  prov,
		Tools:     tools,
		Model:     o.model,
		System:    o.system,
		MaxTokens: o.maxTokens,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "log: %s (session %s)\n", o.db, id)

	prog := newProgress(stderr)
	tl := &timeline{w: stdout, color: o.color && os.Getenv("NO_COLOR") == ""}
	enc := json.NewEncoder(stdout)
	pr := startPrinter(svc.Events, func(ev vocab.Event) {
		if o.events == "json" {
			_ = enc.Encode(ev)
			return
		}
		prog.event(ev)
		prog.around(func() { tl.print(ev) })
	})

	p, err := svc.SubmitText(o.task)
	if err != nil {
		svc.Close(context.Background())
		pr.abort()
		return err
	}
	var res vocab.PromptResult
	select {
	case <-p.Done():
		res, _ = p.Wait(context.Background())
	case <-ctx.Done():
		// Ctrl-C: cancel the run, as a user would; a second one stops
		// at once, leaving the session open in the log.
		fmt.Fprintln(stderr, "\ninterrupted: cancelling the run (Ctrl-C again stops at once)")
		again, stop := secondInterrupt()
		defer stop()
		_ = svc.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{})
		select {
		case <-p.Done():
			res, _ = p.Wait(context.Background())
		case <-again:
			prog.clear()
			_ = st.Close() // freeze the log: what is open stays open for a resume
			cctx, cancel := context.WithTimeout(context.Background(), hardStopWait)
			svc.Close(cctx)
			cancel()
			pr.abort()
			return fmt.Errorf("%w: stopped hard; session %s stays open in %s", errInterrupted, id, o.db)
		}
	}
	snap, serr := svc.Snapshot(context.Background())
	if serr == nil {
		serr = pr.until(snap.Seq)
	} else {
		pr.abort()
	}
	prog.clear()
	if err := svc.Close(context.Background()); err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("event stream: %w", serr)
	}
	if o.events != "json" {
		fmt.Fprintf(stdout, "\nresult: %s\n", displayText(res.String(), 0))
		if u := prog.total(); u != (vocab.Usage{}) {
			fmt.Fprintf(stdout, "usage: %d tokens in (%d from cache), %d out\n", u.InputTokens, u.CacheReadTokens, u.OutputTokens)
		}
	}
	switch res.Kind {
	case vocab.PromptCompleted:
		return nil
	case vocab.PromptCancelled:
		return fmt.Errorf("%w: the run was cancelled", errInterrupted)
	}
	return errors.New("the task did not complete: " + displayText(res.String(), 0))
}

// progress keeps one status line on a terminal while the model streams
// ("thinking… 1,234 chars"), and adds up the usage.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	chars int
	state string
	shown bool
	usage vocab.Usage
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			p.tty = true
		}
	}
	return p
}

// event updates the line from ev.
func (p *progress) event(ev vocab.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch pl := ev.Payload.(type) {
	case vocab.Input:
		if pl.Kind == vocab.InModelParts {
			for _, part := range pl.Parts {
				p.chars += len([]rune(part.Text))
				switch part.Kind {
				case vocab.StreamThinking:
					p.state = "thinking"
				case vocab.StreamText:
					p.state = "writing"
				}
			}
			p.drawLocked()
		}
	case vocab.UsagePayload:
		p.usage = p.usage.Add(pl.Usage)
	case vocab.TransitionPayload:
		if pl.Machine == "turn" && pl.To == "thinking" {
			p.chars, p.state = 0, "waiting for the model"
			p.drawLocked()
		}
		if pl.Machine == "turn" && pl.From == "thinking" {
			p.clearLocked()
		}
	}
}

func (p *progress) drawLocked() {
	if !p.tty {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[K  … %s, %d chars", p.state, p.chars)
	p.shown = true
}

func (p *progress) clearLocked() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	p.shown = false
}

// around runs print (which writes timeline lines to stdout) with the
// status line (on stderr) taken off the terminal, and puts it back.
func (p *progress) around(print func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	shown := p.shown
	p.clearLocked()
	print()
	if shown {
		p.drawLocked()
	}
}

func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

func (p *progress) total() vocab.Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage
}
