// Package loopchart is the module root; the root package is governed too.
package loopchart

import _ "github.com/loopchart/loopchart/machines/turn" // want `rule "machines-importers": package github.com/loopchart/loopchart must not import "github.com/loopchart/loopchart/machines/turn"`
