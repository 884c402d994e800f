package peers

import (
	"testing"
	"time"
)

// cpuTime adds up the processor time (user and system, every thread of
// the process) that timed ops take. The throughput benchmarks report it
// per step beside steps/s: on a machine shared with others, wall-clock
// throughput moves with what the others do (a run's steps/s varied by a
// quarter from one run to the next here), the processor time a step costs
// much less, so it tells two builds apart where steps/s cannot.
type cpuTime struct {
	total time.Duration
	ok    bool
}

// run runs op and adds the processor time the process spent meanwhile.
func (c *cpuTime) run(op func()) {
	start, ok := processCPU()
	op()
	end, _ := processCPU()
	c.total += end - start
	c.ok = ok
}

// report reports the processor time per step of steps steps, as
// cpu-ns/step (nothing where processCPU cannot tell).
func (c *cpuTime) report(b *testing.B, steps int) {
	if c.ok && steps > 0 {
		b.ReportMetric(float64(c.total.Nanoseconds())/float64(steps), "cpu-ns/step")
	}
}
