package hooks_test

import (
	"testing"

	"github.com/acme/widget" // test files of hooks may use third-party packages
	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/machines/chart" // want `rule "machines-importers": package github.com/loopchart/loopchart/hooks_test must not import "github.com/loopchart/loopchart/machines/chart"`
)

func TestName(t *testing.T) {
	_ = hooks.Name
	_ = stateless.NewStateMachine
	_ = widget.Name
	_ = chart.New
}
