package agentsvc_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var hostSessions = flag.Int("host.sessions", 0, "TestHostResidentFootprint: how many sessions (0: skip the measurement)")

// TestHostResidentFootprint measures what resident idle sessions of a Host
// cost: each opened, one prompt answered, at rest. Run it with
// -host.sessions=100000 (not under -race). It reports the heap after GC
// per session with the memory store's copy of the events included (the
// history size is stated), the process's RSS, and the goroutines.
func TestHostResidentFootprint(t *testing.T) {
	n := *hostSessions
	if n == 0 {
		t.Skip("a measurement: run with -host.sessions=N")
	}
	st := memory.New()
	h := footprintHost(t, agentsvc.HostOptions{Store: st})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	g0, h0, r0 := runtime.NumGoroutine(), heapAfterGC(), rss(t)
	start := time.Now()
	events := uint64(0)
	for i := range n {
		svc := promptedSession(t, h, vocab.ID(fmt.Sprintf("s%07d", i)), "hi")
		if i == 0 {
			snap, _ := svc.Snapshot(ctx)
			events = snap.Seq
		}
	}
	took := time.Since(start)
	h1, r1, g1 := heapAfterGC(), rss(t), runtime.NumGoroutine()
	t.Logf("%d resident idle sessions (one prompt each, %d events and 2 messages of history each, kept by the memory store too): heap %d bytes per session, RSS %d MB → %d MB, goroutines %d → %d; opening and running them took %v (%.0f µs each)",
		n, events, int64(h1-h0)/int64(n), r0>>20, r1>>20, g0, g1, took.Round(time.Millisecond), float64(took.Microseconds())/float64(n))
	if g1 > g0+2 {
		t.Errorf("%d idle sessions hold %d goroutines", n, g1-g0)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// rss reads the process's resident set size (Linux), 0 elsewhere.
func rss(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// footprintHost is the host of the footprint measurements: its sessions
// answer "ok" at once and keep an 8-event window in process.
func footprintHost(t *testing.T, o agentsvc.HostOptions) *agentsvc.Host {
	t.Helper()
	o.Session = func(agentsvc.SessionInfo) (agentsvc.Options, error) {
		return agentsvc.Options{Provider: replies(func(context.Context, vocab.Request) (string, []vocab.ToolCall, error) { return "ok", nil, nil }),
			NoRunTimeout: true, Window: 8}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
