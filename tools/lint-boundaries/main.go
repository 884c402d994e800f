// Command lint-boundaries checks the module's import-layer boundaries.
//
// It runs the [boundaries.Analyzer] as a standalone checker:
//
//	go run ./tools/lint-boundaries ./...
//
// and exits non-zero when any rule is violated. The built binary also
// works as a vet tool:
//
//	go build -o /tmp/lb ./tools/lint-boundaries
//	go vet -vettool=/tmp/lb ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/loopchart/loopchart/tools/lint-boundaries/boundaries"
)

func main() { singlechecker.Main(boundaries.Analyzer) }
