package turn_test

import (
	"fmt"
	"os"

	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/machines/turn"
)

// An external test package of a machine is exempt in the same way.
func Example() {
	var t turn.Turn
	fmt.Fprintln(os.Stdout, t.Event, engine.Run)
}
