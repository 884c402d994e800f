// Package fake only looks like an adapter: adaptersx is not adapters.
package fake

import "github.com/loopchart/loopchart/machines/chart" // want `rule "machines-importers": package github.com/loopchart/loopchart/adaptersx/fake must not import`

var _ = chart.New
