// Package diagrams renders loopchart's machines as DOT and Mermaid
// stateDiagram-v2 text, straight from their definitions, and keeps the
// golden copies in testdata/diagrams in sync (go generate ./...).
package diagrams

//go:generate go run ../../cmd/loopchart diagram --write ../../testdata/diagrams

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/loopchart/loopchart/machines/agent"
	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/tool"
	"github.com/loopchart/loopchart/machines/turn"
)

// Format is a diagram syntax.
type Format string

// Formats.
const (
	DOT     Format = "dot"
	Mermaid Format = "mermaid"
)

// Ext returns the file extension of f.
func (f Format) Ext() string {
	if f == Mermaid {
		return "mmd"
	}
	return "dot"
}

type renderer struct {
	dot, mermaid func() string
}

func entry[C any](d *chart.Def[C]) renderer {
	return renderer{dot: func() string { return chart.DOT(d) }, mermaid: func() string { return chart.Mermaid(d) }}
}

var machines = map[string]renderer{
	"agent": entry(agent.Definition),
	"turn":  entry(turn.Definition),
	"tool":  entry(tool.Definition),
}

// Machines lists the machines that can be drawn, sorted.
func Machines() []string {
	names := make([]string, 0, len(machines))
	for n := range machines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Render returns the diagram of machine in format f.
func Render(machine string, f Format) (string, error) {
	r, ok := machines[machine]
	if !ok {
		return "", fmt.Errorf("unknown machine %q (have %s)", machine, strings.Join(Machines(), ", "))
	}
	switch f {
	case DOT:
		return r.dot(), nil
	case Mermaid:
		return r.mermaid(), nil
	}
	return "", fmt.Errorf("unknown format %q (have dot, mermaid)", f)
}

// WriteAll writes every machine in both formats into dir as
// <machine>.dot and <machine>.mmd.
func WriteAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range Machines() {
		for _, f := range []Format{DOT, Mermaid} {
			s, err := Render(m, f)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, m+"."+f.Ext()), []byte(s), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
