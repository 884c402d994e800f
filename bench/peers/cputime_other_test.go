//go:build !unix

package peers

import "time"

// processCPU cannot tell the processor time here.
func processCPU() (time.Duration, bool) { return 0, false }
