package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Defaults of [CommandOptions].
const (
	DefaultCommandTimeout = 2 * time.Minute
	DefaultCommandGrace   = 2 * time.Second
	DefaultMaxOutput      = 32 << 10
)

// DefaultEnv is the environment variables a command inherits when
// CommandOptions.Env is nil.
var DefaultEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM"}

// CommandOptions configure run_command. A zero field takes its default; a
// negative one is an error.
type CommandOptions struct {
	// Shell is the program and leading arguments the command line is
	// appended to. Default {"/bin/sh", "-c"}.
	Shell []string
	// Timeout bounds each command; at the timeout its process group is
	// stopped as on cancellation. Default 2 minutes.
	Timeout time.Duration
	// Grace is how long a stopped command's process group has between
	// SIGTERM and SIGKILL, and how long output pipes held open by a
	// background process are waited for after the command exits. Default
	// 2 seconds.
	Grace time.Duration
	// MaxOutput bounds the output (stdout and stderr, interleaved) kept:
	// the first and last halves; the bytes in between are dropped and
	// counted. Default 32 KiB.
	MaxOutput int
	// Env names the environment variables passed on from this process;
	// nil means DefaultEnv, an empty non-nil slice passes none.
	Env []string
}

// Validate reports a CodeBadInput error for negative limits or an empty
// shell program.
func (o CommandOptions) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o CommandOptions) withDefaults() (CommandOptions, error) {
	switch {
	case o.Timeout < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: CommandOptions.Timeout is negative (%v)", o.Timeout)
	case o.Grace < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: CommandOptions.Grace is negative (%v)", o.Grace)
	case o.MaxOutput < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: CommandOptions.MaxOutput is negative (%d)", o.MaxOutput)
	case o.Shell != nil && (len(o.Shell) == 0 || o.Shell[0] == ""):
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: CommandOptions.Shell has no program")
	}
	for _, name := range o.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return o, vocab.Errorf(vocab.CodeBadInput, "workspace: CommandOptions.Env entry %q is not a variable name", name)
		}
	}
	if o.Shell == nil {
		o.Shell = []string{"/bin/sh", "-c"}
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultCommandTimeout
	}
	if o.Grace == 0 {
		o.Grace = DefaultCommandGrace
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.Env == nil {
		o.Env = DefaultEnv
	}
	return o, nil
}

// RunCommand returns the run_command tool: it runs a shell command line in
// the workspace directory, in its own process group, with stdin from the
// null device and only the allowed environment. Its spec asks for approval
// and declares no accesses, so a call runs alone. When the call's context
// is cancelled or the timeout passes, the whole group gets SIGTERM, then
// SIGKILL after Grace; when the command ends, whatever it left running in
// its group is killed. A non-zero exit is an error result carrying the
// output and the exit code.
//
// RunCommand panics with the error of [CommandOptions.Validate] when opt
// is invalid: options are the program's, not the model's.
func (w *Workspace) RunCommand(opt CommandOptions) vocab.Tool {
	opt, err := opt.withDefaults()
	if err != nil {
		panic(err)
	}
	c := &commandTool{w: w, opt: opt}
	return newTool(
		vocab.ToolSpec{
			Name: "run_command",
			Description: "Run a shell command line (" + strings.Join(opt.Shell, " ") + ") in the workspace directory, with no input. " +
				"Returns its output (stdout and stderr together; at most " + strconv.Itoa(opt.MaxOutput) + " bytes, the middle dropped when longer) and exit code. " +
				"Time limit " + opt.Timeout.String() + "; background processes are killed when the command ends.",
			Schema:   json.RawMessage(runCommandSchema),
			Approval: true,
		},
		c.run)
}

type commandArgs struct {
	Command string `json:"command"`
}

type commandTool struct {
	w   *Workspace
	opt CommandOptions
}

// errTimedOut is the cancel cause of a command that ran out of time.
var errTimedOut = errors.New("command timed out")

func (c *commandTool) run(ctx context.Context, a commandArgs) (vocab.ToolResult, error) {
	line := a.Command
	if strings.TrimSpace(line) == "" {
		return failf(vocab.CodeToolBadArguments, "bad arguments for run_command: command is empty"), nil
	}
	if strings.IndexByte(line, 0) >= 0 {
		return failf(vocab.CodeToolBadArguments, "bad arguments for run_command: command contains a NUL byte"), nil
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, c.opt.Timeout, errTimedOut)
	defer cancel()

	out := newHeadTail(c.opt.MaxOutput)
	args := append(append([]string(nil), c.opt.Shell[1:]...), line)
	cmd := exec.CommandContext(runCtx, c.opt.Shell[0], args...)
	cmd.Dir = c.w.abs
	cmd.Env = environ(c.opt.Env)
	cmd.Stdin = nil // the null device
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = c.opt.Grace
	stopper := ownGroup(cmd)

	if err := cmd.Start(); err != nil {
		return failf(vocab.CodeToolFailed, "run_command: could not start %s: %v", c.opt.Shell[0], err), nil
	}
	err := cmd.Wait()
	stopper.finish() // kill what the command left behind in its group

	if ctx.Err() != nil {
		return vocab.ToolResult{}, fmt.Errorf("run_command cancelled; its process group was stopped: %w", context.Cause(ctx))
	}
	timedOut := errors.Is(context.Cause(runCtx), errTimedOut)
	var notes []string
	if errors.Is(err, exec.ErrWaitDelay) && !timedOut {
		notes = append(notes, "[a background process kept the output open after the command exited; it was killed]")
	}

	var b strings.Builder
	text, dropped := out.Text()
	if text == "" {
		b.WriteString("(no output)\n")
	} else {
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	for _, n := range notes {
		b.WriteString(n + "\n")
	}
	res := vocab.ToolResult{Truncated: dropped > 0}
	st := cmd.ProcessState
	switch {
	case timedOut:
		fmt.Fprintf(&b, "[timed out after %v: the process group was stopped]\n", c.opt.Timeout)
		res.IsError, res.Code = true, vocab.CodeToolFailed
	case st == nil:
		fmt.Fprintf(&b, "[failed: %v]\n", err)
		res.IsError, res.Code = true, vocab.CodeToolFailed
	case st.ExitCode() >= 0:
		fmt.Fprintf(&b, "[exit code %d]\n", st.ExitCode())
		if st.ExitCode() != 0 {
			res.IsError, res.Code = true, vocab.CodeToolFailed
		}
	default:
		fmt.Fprintf(&b, "[ended by %s]\n", exitSignal(st))
		res.IsError, res.Code = true, vocab.CodeToolFailed
	}
	res.Content = b.String()
	return res, nil
}

// environ picks the allowed variables out of this process's environment.
func environ(names []string) []string {
	env := []string{}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// headTail keeps the first and last bytes written to it, up to max in
// all, and counts the ones in between. It is safe for concurrent writes.
type headTail struct {
	mu      sync.Mutex
	headMax int
	tailMax int
	head    []byte
	tail    []byte // the latest bytes; trimmed to tailMax when twice as long
	total   int64
}

func newHeadTail(max int) *headTail {
	return &headTail{headMax: max / 2, tailMax: max - max/2}
}

func (b *headTail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if room := b.headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || b.tailMax == 0 {
		return n, nil
	}
	if len(p) >= b.tailMax {
		b.tail = append(b.tail[:0], p[len(p)-b.tailMax:]...)
		return n, nil
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*b.tailMax {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-b.tailMax:]...)
	}
	return n, nil
}

// Text returns what was kept, with a note where bytes were dropped, and
// how many were.
func (b *headTail) Text() (string, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := b.tail
	if len(tail) > b.tailMax {
		tail = tail[len(tail)-b.tailMax:]
	}
	dropped := b.total - int64(len(b.head)) - int64(len(tail))
	head := strings.ToValidUTF8(string(b.head), "\uFFFD")
	t := strings.ToValidUTF8(string(tail), "\uFFFD")
	if dropped == 0 {
		return head + t, 0
	}
	return fmt.Sprintf("%s\n[... %d bytes of output dropped ...]\n%s", head, dropped, t), dropped
}
