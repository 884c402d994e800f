// Package turn is a machine that exercises every machines rule.
package turn

import (
	"fmt"
	"os" // want `^boundaries: rule "machines-pure": package github\.com/loopchart/loopchart/machines/turn must not import "os" \(machines may import only vocab, machines/\.\.\., stateless and pure standard packages\)$`
	"time"
	clock "time"

	"github.com/qmuntal/stateless"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// Turn is one turn of the conversation.
type Turn struct {
	sm    *stateless.StateMachine
	At    time.Time
	Event vocab.Event
}

// Step advances the turn.
func (t *Turn) Step(now time.Time) error {
	go fmt.Println("async") // want `^boundaries: rule "machines-no-goroutines": package github\.com/loopchart/loopchart/machines/turn must not start goroutines \(go statement\) \(machines are synchronous; concurrency belongs in adapters\)$`

	go func() {}() // want `rule "machines-no-goroutines"`

	_ = time.Now() // want `^boundaries: rule "machines-no-clock": package github\.com/loopchart/loopchart/machines/turn must not use time\.Now \(machines must be deterministic; take time from inputs and leave clocks and timers to adapters\)$`

	_ = clock.Now()            // want `rule "machines-no-clock": .* must not use time.Now`
	_ = clock.Since(now)       // want `rule "machines-no-clock": .* must not use time.Since`
	after := time.After        // want `rule "machines-no-clock": .* must not use time.After`
	_ = time.NewTimer(0)       // want `must not use time.NewTimer`
	_ = time.NewTicker(1)      // want `must not use time.NewTicker`
	_ = time.Tick(1)           // want `must not use time.Tick`
	_ = time.Until(now)        // want `must not use time.Until`
	_ = time.AfterFunc(0, nil) // want `must not use time.AfterFunc`
	_ = after

	// Pure uses of package time are fine.
	_ = time.Unix(0, 0)
	_ = now.Add(3 * time.Second).Sub(now)
	_ = clock.Duration(5)
	Now := func() int { return 1 } // a local Now is not time.Now
	_ = Now()

	t.sm = chart.New()
	t.At = now
	_ = os.Getenv
	return nil
}
