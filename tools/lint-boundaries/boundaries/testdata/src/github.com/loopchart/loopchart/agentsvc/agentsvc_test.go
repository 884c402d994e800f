package agentsvc

import (
	"testing"

	"github.com/loopchart/loopchart/machines/chart" // want `rule "machines-importers": package github.com/loopchart/loopchart/agentsvc must not import "github.com/loopchart/loopchart/machines/chart"`
)

func TestServe(t *testing.T) {
	_ = chart.New()
}
