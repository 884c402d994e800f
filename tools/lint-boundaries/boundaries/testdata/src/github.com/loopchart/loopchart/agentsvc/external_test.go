package agentsvc_test

import (
	"testing"

	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/machines/turn" // want `rule "machines-importers": package github.com/loopchart/loopchart/agentsvc_test must not import "github.com/loopchart/loopchart/machines/turn"`
)

func TestExternal(t *testing.T) {
	var x turn.Turn
	_ = x
	_ = agentsvc.Serve
}
