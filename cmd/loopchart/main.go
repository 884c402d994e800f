// Command loopchart runs and explains loopchart agent loops.
//
//	loopchart demo [--script FILE] [--events json] [--color] [--instant]
//	loopchart diagram [--format dot|mermaid] <machine>   print a machine's diagram
//	loopchart diagram --write DIR                        write every diagram into DIR
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
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
		err = demoCmd(ctx, args[1:], stdout)
	case "diagram":
		err = diagramCmd(args[1:], stdout)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "loopchart:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: loopchart <command> [flags]

commands:
  demo [--script FILE] [--events json] [--color] [--instant]
                                            run a scripted session and print its timeline
  diagram [--format dot|mermaid] <machine>  print the diagram of agent, turn or tool
  diagram --write DIR                       write every diagram into DIR
`)
}
