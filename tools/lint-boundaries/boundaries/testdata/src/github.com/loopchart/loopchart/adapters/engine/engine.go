// Package engine is an adapter: it may use machines and the outside world.
package engine

import (
	"os"
	"time"

	"github.com/acme/widget"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// Run drives a turn with the wall clock.
func Run() error {
	var t turn.Turn
	done := make(chan error, 1)
	go func() { done <- t.Step(time.Now()) }()
	time.Sleep(0)
	_ = chart.New()
	_ = vocab.Event(widget.Name())
	_ = os.Getenv("HOME")
	return <-done
}
