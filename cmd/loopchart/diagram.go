package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/loopchart/loopchart/adapters/diagrams"
)

func diagramCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("diagram", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "mermaid", "dot or mermaid")
	write := fs.String("write", "", "write every diagram into this directory")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *write != "" {
		return diagrams.WriteAll(*write)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: diagram needs one machine: %v", errUsage, diagrams.Machines())
	}
	s, err := diagrams.Render(fs.Arg(0), diagrams.Format(*format))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	_, err = io.WriteString(stdout, s)
	return err
}
