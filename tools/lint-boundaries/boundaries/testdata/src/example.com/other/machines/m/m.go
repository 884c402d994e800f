// Package m is a machine in a module chosen with the -module flag.
package m

import (
	"os" // want `rule "machines-pure": package example.com/other/machines/m must not import "os"`
	"time"
)

// F uses the clock.
func F() {
	_ = time.Now() // want `rule "machines-no-clock"`
	_ = os.Args
	for range map[int]int{} { // want `rule "machines-no-map-range": package example.com/other/machines/m must not range over a map`
	}
}
