// Package x only looks like a machine: machinesextra is not machines,
// so the machines rules do not govern it, but it may not import machines.
package x

import (
	"os"
	"time"

	"github.com/loopchart/loopchart/machines/chart" // want `rule "machines-importers": package github.com/loopchart/loopchart/machinesextra/x must not import`
)

// F may use goroutines and the clock.
func F() {
	go func() {}()
	_ = time.Now()
	_ = os.Args
	_ = chart.New
}
