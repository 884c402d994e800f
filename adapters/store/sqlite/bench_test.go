package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// readyEvents is the number of events of one Ready in the append
// benchmarks.
const readyEvents = 10

// appendResult is what one append benchmark measured.
type appendResult struct {
	eventsPerSec, eventsPerCommit, eventsPerReady, meanUs, p99Us float64
}

// report adds r's metrics to b.
func (r appendResult) report(b *testing.B) {
	b.ReportMetric(r.eventsPerSec, "events/s")
	b.ReportMetric(r.eventsPerCommit, "events/commit")
	b.ReportMetric(r.eventsPerReady, "events/Ready")
	b.ReportMetric(r.meanUs, "mean-µs")
	b.ReportMetric(r.p99Us, "p99-µs")
	b.ReportMetric(0, "ns/op") // an op is a round of every session; events/s says more
}

// latencies summarizes the durations of appends: mean and 99th
// percentile, in µs.
func latencies(ds []time.Duration) (mean, p99 float64) {
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return us(sum) / float64(len(ds)), us(ds[(len(ds)*99)/100])
}

// runSessions runs sessions goroutines, each calling appendOne b.N times
// (a round is one Ready of every session), and measures the appends.
func runSessions(b *testing.B, sessions int, appendOne func(s, round int) error) (elapsed time.Duration, lat []time.Duration) {
	per := make([][]time.Duration, sessions)
	for i := range per {
		per[i] = make([]time.Duration, 0, b.N)
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for s := range sessions {
		wg.Go(func() {
			for round := range b.N {
				t := time.Now()
				if err := appendOne(s, round); err != nil {
					b.Error(err)
					return
				}
				per[s] = append(per[s], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	b.StopTimer()
	for _, p := range per {
		lat = append(lat, p...)
	}
	return elapsed, lat
}

// BenchmarkAppend appends Readies of 10 events from concurrent sessions,
// one goroutine each, through the group commit, with each synchronous
// setting; file-floor does the same work (the events' JSON lines, an fsync
// per group) on a plain file. At the end it prints the targets,
// met or not.
func BenchmarkAppend(b *testing.B) {
	results := map[string]appendResult{}
	for _, c := range []struct {
		sessions int
		sync     string
	}{{64, "FULL"}, {64, "NORMAL"}, {64, "OFF"}, {1, "FULL"}} {
		name := fmt.Sprintf("sessions=%d/sync=%s", c.sessions, c.sync)
		b.Run(name, func(b *testing.B) {
			r := benchAppend(b, c.sessions, c.sync)
			r.report(b)
			results[name] = r
		})
	}
	for _, sessions := range []int{64, 1} {
		name := fmt.Sprintf("sessions=%d/file-floor", sessions)
		b.Run(name, func(b *testing.B) {
			r := benchFileFloor(b, sessions)
			r.report(b)
			results[name] = r
		})
	}
	full, off, one := results["sessions=64/sync=FULL"], results["sessions=64/sync=OFF"], results["sessions=1/sync=FULL"]
	if full.eventsPerSec == 0 || off.eventsPerSec == 0 || one.eventsPerSec == 0 {
		return // a -bench filter ran only some
	}
	check := func(what string, ok bool, format string, args ...any) {
		verdict := "met"
		if !ok {
			verdict = "NOT met"
		}
		// Printed, not logged: benchmark logs show only with -v.
		fmt.Printf("target %s: %s ("+format+")\n", append([]any{what, verdict}, args...)...)
	}
	check("64 sessions FULL >= 50,000 events/s", full.eventsPerSec >= 50000, "%.0f events/s", full.eventsPerSec)
	check("64 sessions FULL >= 0.7x OFF", full.eventsPerSec >= 0.7*off.eventsPerSec, "%.2fx", full.eventsPerSec/off.eventsPerSec)
	check("64 sessions >= 2.5x one session (FULL)", full.eventsPerSec >= 2.5*one.eventsPerSec, "%.1fx", full.eventsPerSec/one.eventsPerSec)
	check("events/commit >= sessions x events/Ready / 2", full.eventsPerCommit >= 64*full.eventsPerReady/2, "%.0f >= %.0f", full.eventsPerCommit, 64*full.eventsPerReady/2)
	check("p99 commit <= 3x mean (64 sessions FULL)", full.p99Us <= 3*full.meanUs, "p99 %.0f µs, mean %.0f µs", full.p99Us, full.meanUs)
}

// benchAppend measures sessions appending through a Store.
func benchAppend(b *testing.B, sessions int, sync string) appendResult {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var src vocab.SeqSource
	type sess struct {
		id    vocab.ID
		claim store.Claim
		batch []vocab.Event
	}
	ss := make([]sess, sessions)
	for i := range ss {
		id := src.NewID(t0)
		c, _, err := st.Claim(ctx, id, runA, true)
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = sess{id: id, claim: c, batch: storetest.Fixture(id, readyEvents, t0)}
	}
	commits, events, appends := st.stats.commits.Load(), st.stats.events.Load(), st.stats.appends.Load()
	elapsed, lat := runSessions(b, sessions, func(s, round int) error {
		x := &ss[s]
		for i := range x.batch {
			x.batch[i].Seq = uint64(round*readyEvents + i + 1)
		}
		return st.Append(ctx, x.id, x.claim, x.batch)
	})
	commits, events, appends = st.stats.commits.Load()-commits, st.stats.events.Load()-events, st.stats.appends.Load()-appends
	mean, p99 := latencies(lat)
	return appendResult{
		eventsPerSec:    float64(events) / elapsed.Seconds(),
		eventsPerCommit: float64(events) / float64(commits),
		eventsPerReady:  float64(events) / float64(appends),
		meanUs:          mean,
		p99Us:           p99,
	}
}

// fileLog is the floor: JSON lines appended to a file with a group commit
// of its own (the first waiting appender writes and fsyncs what every
// appender queued; the others wait for it).
type fileLog struct {
	f    *os.File
	mu   sync.Mutex
	cond *sync.Cond
	// pending is the data of generation gen; every generation below done
	// is on disk.
	pending       []byte
	gen, done     uint64
	flushing      bool
	syncs, events int
}

// append writes lines and returns once they are on disk.
func (l *fileLog) append(lines []byte, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, lines...)
	l.events += n
	my := l.gen
	for l.done <= my {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flushing = true
		buf, g := l.pending, l.gen
		l.pending, l.gen = nil, l.gen+1
		l.mu.Unlock()
		_, err := l.f.Write(buf)
		if err == nil {
			err = l.f.Sync()
		}
		l.mu.Lock()
		l.flushing, l.done = false, g+1
		l.syncs++
		l.cond.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

// benchFileFloor measures sessions appending the same events' JSON lines
// to a plain file.
func benchFileFloor(b *testing.B, sessions int) appendResult {
	f, err := os.Create(filepath.Join(b.TempDir(), "floor.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	l := &fileLog{f: f}
	l.cond = sync.NewCond(&l.mu)
	var src vocab.SeqSource
	batches := make([][]vocab.Event, sessions)
	for i := range batches {
		id := src.NewID(t0)
		batches[i] = storetest.Fixture(id, readyEvents, t0)
	}
	bufs := make([][]byte, sessions)
	elapsed, lat := runSessions(b, sessions, func(s, round int) error {
		buf := bufs[s][:0]
		for i := range batches[s] {
			e := &batches[s][i]
			e.Seq = uint64(round*readyEvents + i + 1)
			line, err := json.Marshal(e)
			if err != nil {
				return err
			}
			buf = append(append(buf, line...), '\n')
		}
		bufs[s] = buf
		return l.append(buf, len(batches[s]))
	})
	mean, p99 := latencies(lat)
	return appendResult{
		eventsPerSec:    float64(l.events) / elapsed.Seconds(),
		eventsPerCommit: float64(l.events) / float64(l.syncs),
		eventsPerReady:  readyEvents,
		meanUs:          mean,
		p99Us:           p99,
	}
}

// BenchmarkRead folds a session of 10,000 events: raw counts the records
// and their payload bytes without decoding, decode turns every record
// into a vocab.Event with its typed payload.
func BenchmarkRead(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "read.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c, _, err := st.Claim(ctx, sessA, runA, true)
	if err != nil {
		b.Fatal(err)
	}
	evs := storetest.Fixture(sessA, n, t0)
	for i := 0; i < n; i += 1000 {
		if err := st.Append(ctx, sessA, c, evs[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	var payload int64
	for r, err := range st.Read(ctx, sessA, 0) {
		if err != nil {
			b.Fatal(err)
		}
		payload += int64(len(r.Payload))
	}
	for _, decode := range []bool{false, true} {
		name := "raw"
		if decode {
			name = "decode"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(payload)
			b.ReportAllocs()
			for b.Loop() {
				count := 0
				for r, err := range st.Read(ctx, sessA, 0) {
					if err != nil {
						b.Fatal(err)
					}
					if decode {
						if _, err := r.Event(); err != nil {
							b.Fatal(err)
						}
					}
					count++
				}
				if count != n {
					b.Fatalf("read %d records", count)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
