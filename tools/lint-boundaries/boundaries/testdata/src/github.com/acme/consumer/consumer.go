// Package consumer lives outside the module, so no rule governs it.
package consumer

import "github.com/loopchart/loopchart/machines/chart"

var _ = chart.New
