package loopguard_test

import (
	"fmt"
	"testing"

	"github.com/loopchart/loopchart/machines/loopguard"
)

// BenchmarkAdmit measures admission against a full 30-record history, for a
// batch of 1 and of 8 calls, reporting ns/call (target < 2000) and
// allocations per batch (target 0). The histories are fullHistory's: clean
// (nothing fires, every scan runs), stuck (a generic warning already
// emitted) and churn (an argument-churn warning already emitted, the
// longest churn scan).
func BenchmarkAdmit(b *testing.B) {
	for _, hist := range []string{"clean", "stuck", "churn"} {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("history=%s/batch=%d", hist, n), func(b *testing.B) {
				st := fullHistory(hist)
				calls := batch(n)
				st.Admit(calls)
				b.ReportAllocs()
				for b.Loop() {
					st.Admit(calls)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
			})
		}
	}
}

// BenchmarkRecord measures the bookkeeping around a call that runs:
// Launched and Finished on a full history.
func BenchmarkRecord(b *testing.B) {
	st := fullHistory("clean")
	c := loopguard.Call{ID: "r", Tool: "read", ArgsHash: 77}
	o := loopguard.Outcome{HasResult: true, ResultHash: 1}
	b.ReportAllocs()
	for b.Loop() {
		st.Launched(c)
		st.Finished(c, o)
	}
}
