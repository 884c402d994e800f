// Package agentsvc imports a machine of another module.
package agentsvc

import (
	"example.com/other/machines/m" // want `rule "machines-importers": package example.com/other/agentsvc must not import "example.com/other/machines/m"`

	"github.com/loopchart/loopchart/machines/chart" // not this module's machine: fine
)

var (
	_ = m.F
	_ = chart.New
)
