// Package hooks holds standard-library-only helpers.
package hooks

import (
	"os"
	"strings"

	"github.com/acme/widget" // want `^boundaries: rule "hooks-std-only": package github\.com/loopchart/loopchart/hooks must not import "github\.com/acme/widget" \(hooks may import only vocab and the standard library\)$`

	"github.com/loopchart/loopchart/lib/strutil"    // want `rule "hooks-std-only": .* must not import "github.com/loopchart/loopchart/lib/strutil"`
	"github.com/loopchart/loopchart/machines/chart" // want `rule "hooks-std-only": .* must not import "github.com/loopchart/loopchart/machines/chart"` `rule "machines-importers": package github.com/loopchart/loopchart/hooks must not import "github.com/loopchart/loopchart/machines/chart"`
	"github.com/loopchart/loopchart/vocab"
)

// Name returns the hook name.
func Name() vocab.Event {
	_ = widget.Name
	_ = strutil.Up
	_ = chart.New
	return vocab.Event(strings.TrimSpace(os.Args[0]))
}
