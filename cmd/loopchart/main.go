// Command loopchart runs and explains loopchart agent loops, and reads
// their durable logs.
//
//	loopchart demo [--db FILE] [--new | --resume | --session ID] [--script FILE] [--events json] [--color] [--instant]
//	loopchart run --provider openai|anthropic --model M [--base-url U] [--workspace DIR] [--allow-commands] [--db FILE] "task"
//	loopchart log sessions [--db FILE]                  list the logged sessions, newest first
//	loopchart log show [--db FILE] [--session ID] [--turn N] [--kind K] [--tree]
//	loopchart log verify [--db FILE] [--session ID]     check the file and replay the logs
//	loopchart log fold [--db FILE] [--session ID]       print a session's folded state as JSON
//	loopchart log export [--db FILE] [--session ID]     print events as JSON lines
//	loopchart diagram [--format dot|mermaid] <machine>  print a machine's diagram
//	loopchart diagram --write DIR                       write every diagram into DIR
//	loopchart inspect [--db FILE] [--addr 127.0.0.1:7777]  browse the log's sessions: diagrams, timeline, live
//
// The demo logs its session to a SQLite file, loopchart.db in the working
// directory unless --db names another one, and says so on stderr ("log:
// loopchart.db (session ...)"). A demo that is interrupted (Ctrl-C, or
// killed) leaves its session open in the log; `loopchart demo --resume`
// reopens the newest session that was not closed (--session ID names
// one): recovery closes what the interrupted run left open (a running tool
// gets the result "Tool execution was interrupted before its result was
// recorded", the turn ends interrupted), and the session then runs what it
// still owes: its queued input, and the model's reply to tool results it
// already has. With --prompt, the resumed session is then asked that
// prompt too. A demo that ends normally closes its session, which can then
// no longer be resumed.
//
// With a fan-out script (a "parent" script and one script per sub-agent
// task, see testdata/scripts/fanout.json), the demo opens the session
// through an agentsvc.Host, whose sub-agents play the script of their
// task; it prints the parent's timeline and each sub-agent's task, answer
// and result, on the real clock, always in new sessions, closed at the end.
//
// The log commands and inspect only read: they never create a database. Without
// --session they show the most recently updated session (export and
// verify: every session). `loopchart log export` is the safe way to copy a
// log (never copy the database file alone: its last commits may still be
// in its -wal file).
//
// Exit status: 0 on success, 1 on an error (a log that does not verify,
// an unknown session: code log.no_session), 2 on a usage error, 130 when
// interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks command-line mistakes (exit code 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "run":
		err = agentRunCmd(ctx, args[1:], stdout, stderr)
	case "log":
		err = logCmd(ctx, args[1:], stdout)
	case "diagram":
		err = diagramCmd(args[1:], stdout)
	case "inspect":
		err = inspectCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "loopchart:", err)
		switch {
		case errors.Is(err, errUsage):
			return 2
		case errors.Is(err, errInterrupted):
			return 130
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: loopchart <command> [flags]

commands:
  demo [--db FILE] [--new | --resume | --session ID] [--script FILE] [--prompt TEXT]
       [--events json] [--color] [--instant]
        run a scripted session, logged to --db, and print its timeline.
        A demo that ends closes its session. Ctrl-C (or a kill) leaves it
        open in the log instead, and the next demo on the same --db picks
        it up: it reopens the newest session that was not closed, prints
        its timeline with what recovery recorded (interrupted tool
        results, the interrupted turn) and runs what the session still
        owes (queued input, the model's reply to tool results); with
        --prompt it then asks that prompt too. --new starts a new session
        anyway; --resume insists on resuming (an error when nothing is
        unfinished); --session ID opens that session (resumes it when the
        log holds it, else starts it under that id).
        A fan-out script (testdata/scripts/fanout.json: "parent" and
        "children" scripts, children keyed by their task) runs a parent
        that spawns sub-agents (agentsvc.Host: sessions_spawn, agents_wait,
        subagents), each playing its task's script; the demo prints the
        parent's timeline, then each sub-agent's id, task, answer and
        result. It always starts new sessions (--resume and --session do
        not apply), asks no approval (--approve does not apply) and runs
        on the real clock: --instant does not apply, as the children's
        scripted delays are what let the parent reach agents_wait first.
  run --provider openai|anthropic --model M [--base-url URL] [--workspace DIR]
      [--allow-commands] [--db FILE] [--max-tokens N] [--server ROW]
      [--api-key-env VAR] [--thinking-budget N] [--system TEXT]
      [--events json] [--color] "task"
        run a real agent on the workspace (default: the working directory)
        with the workspace tools (read_file, write_file, edit_file,
        list_dir, grep; run_command with --allow-commands), logged to
        --db. The provider's own API takes its key from OPENAI_API_KEY,
        ANTHROPIC_API_KEY (or DEEPSEEK_API_KEY, MOONSHOT_API_KEY,
        MISTRAL_API_KEY for those APIs); a --base-url of a local server
        (Ollama, vLLM, llama.cpp) needs none, and gets no key unless
        --api-key-env names the variable holding one.
        Ctrl-C cancels the run (cause user); a second Ctrl-C stops at
        once. Exit status 0 when the task completed, 130 when cancelled,
        1 otherwise.
  log sessions [--db FILE]
        list the sessions of the log, newest first
  log show [--db FILE] [--session ID] [--turn N] [--kind PREFIX] [--tree]
        print a session's timeline (default: the newest session); --kind
        keeps the events whose kind starts with PREFIX (e.g. tool/, input/);
        --tree then prints its sub-agents' timelines, each below its parent
  log verify [--db FILE] [--session ID]
        check the file's integrity and replay each session's log (or one),
        reporting the first divergence; exit status 1 unless all verify
  log fold [--db FILE] [--session ID]
        print the session state folded from the log, as JSON
  log export [--db FILE] [--session ID]
        print the events as JSON lines (every session, oldest first, when no
        --session): the safe way to copy a log, never cp of the file
  diagram [--format dot|mermaid] <machine>
        print the diagram of agent, turn or tool
  diagram --write DIR
        write every diagram into DIR
  inspect [--db FILE] [--addr 127.0.0.1:7777]
        serve the session inspector on the address (printed on stdout)
        until Ctrl-C: the sessions of the log, each with its machines'
        diagrams as of any event, its timeline, and new events live while
        another process writes the log. It only reads the log, and only
        answers requests for localhost, 127.0.0.1 or [::1].

--db defaults to loopchart.db in the working directory; the log commands
never create it, nor does inspect.
`)
}
