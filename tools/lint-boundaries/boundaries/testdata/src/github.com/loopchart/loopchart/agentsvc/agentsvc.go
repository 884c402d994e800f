// Package agentsvc is a service; it must reach machines through adapters.
package agentsvc

import (
	"os"
	"time"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/machines/turn" // want `^boundaries: rule "machines-importers": package github\.com/loopchart/loopchart/agentsvc must not import "github\.com/loopchart/loopchart/machines/turn" \(only adapters/\.\.\. and machines/\.\.\. may import machines\)$`
	"github.com/loopchart/loopchart/vocab"
)

// Serve runs the service.
func Serve() {
	go func() { _ = engine.Run() }()
	var t turn.Turn
	_ = t.Step(time.Now())
	_ = vocab.Event(os.Args[0])
}
