// Package vocab is the leaf layer.
package vocab

import (
	"strings" // standard library: fine

	"github.com/acme/widget" // third party: vocab-leaf only restricts module imports

	"github.com/loopchart/loopchart/lib/strutil"    // want `^boundaries: rule "vocab-leaf": package github\.com/loopchart/loopchart/vocab must not import "github\.com/loopchart/loopchart/lib/strutil" \(vocab is the leaf layer and may import nothing else from the module\)$`
	"github.com/loopchart/loopchart/machines/chart" // want `rule "vocab-leaf": .* must not import "github.com/loopchart/loopchart/machines/chart"` `rule "machines-importers": package github.com/loopchart/loopchart/vocab must not import "github.com/loopchart/loopchart/machines/chart"`
)

// Event names something that happened.
type Event string

var (
	_ = strings.ToLower
	_ = widget.Name
	_ = strutil.Up
	_ = chart.New
)
