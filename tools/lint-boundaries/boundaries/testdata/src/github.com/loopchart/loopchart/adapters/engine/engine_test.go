package engine_test

import (
	"testing"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/machines/turn"
)

func TestRun(t *testing.T) {
	var x turn.Turn
	_ = x
	_ = engine.Run
}
