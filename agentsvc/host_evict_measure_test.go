package agentsvc_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var (
	hostEvicted = flag.Int("host.evicted", 0, "TestHostEvictedFootprint: how many sessions (0: skip the measurement)")
	hostPrompts = flag.Int("host.evicted.prompts", 1, "TestHostEvictedFootprint: prompts per session before its eviction")
	hostReloads = flag.Int("host.reloads", 0, "TestHostReloadLatency: how many sessions (0: skip the measurement)")
)

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHostEvictedFootprint measures what evicted sessions cost a Host, on
// the memory store: each session opened, -host.evicted.prompts prompts
// answered (1 by default), evicted. Run it with -host.evicted=1000000
// (not under -race). It reports the
// heap after GC per session three ways: the store's copy of the events
// alone (measured after the host is closed and everything dropped), the
// host's share while callers still hold every session's *Service, and
// once they dropped them; and the process's RSS.
func TestHostEvictedFootprint(t *testing.T) {
	n := *hostEvicted
	if n == 0 {
		t.Skip("a measurement: run with -host.evicted=N")
	}
	st := memory.New()
	h := footprintHost(t, agentsvc.HostOptions{Store: st, NoEviction: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	g0, h0, r0 := runtime.NumGoroutine(), heapAfterGC(), rss(t)
	start := time.Now()
	held := make([]*agentsvc.Service, n)
	var events uint64
	var msgs int
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	const par = 2
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += par {
				id := vocab.ID(fmt.Sprintf("s%07d", i))
				svc, err := h.Open(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				for range *hostPrompts {
					p, err := svc.SubmitText("hi")
					if err != nil {
						errs <- err
						return
					}
					if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
						errs <- fmt.Errorf("prompt %v %v", res, err)
						return
					}
				}
				if err := svc.WhenIdle(ctx); err != nil {
					errs <- err
					return
				}
				if i == 0 {
					snap, _ := svc.Snapshot(ctx)
					events, msgs = snap.Seq, snap.History.Len()
				}
				if ok, err := h.Evict(ctx, id); !ok || err != nil {
					errs <- fmt.Errorf("evict %s: %v %v", id, ok, err)
					return
				}
				held[i] = svc
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	hHeld, rHeld, gHeld := heapAfterGC(), rss(t), runtime.NumGoroutine()
	stHeld := h.Stats()
	clear(held)
	// The handles' cleanups drop the host's records after a collection.
	for range 100 {
		if h.Stats().Known == 0 {
			break
		}
		runtime.GC()
		runtime.Gosched()
	}
	hDropped, rDropped := heapAfterGC(), rss(t)
	stDropped := h.Stats()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h = nil
	hStore := heapAfterGC()
	per := func(a, b uint64) int64 { return (int64(a) - int64(b)) / int64(n) }
	t.Logf("%d evicted sessions on the memory store (%d prompts each: %d events, %d messages of history): opening, running and evicting them took %v (%.0f µs each)",
		n, *hostPrompts, events, msgs, took.Round(time.Millisecond), float64(took.Microseconds())/float64(n))
	t.Logf("  heap after GC: the store's copy of the events %d bytes per session; the host's share %d bytes per session while callers hold every *Service (%d records, %d resident), %d bytes per session once they dropped them (%d records left)",
		per(hStore, h0), per(hHeld, hStore), stHeld.Known, stHeld.Resident, per(hDropped, hStore), stDropped.Known)
	t.Logf("  RSS %d MB before, %d MB with the handles held, %d MB after they were dropped; goroutines %d → %d",
		r0>>20, rHeld>>20, rDropped>>20, g0, gHeld)
	runtime.KeepAlive(st)
	if stHeld.Resident != 0 {
		t.Errorf("%d sessions still resident", stHeld.Resident)
	}
	if gHeld > g0+2 {
		t.Errorf("%d evicted sessions hold %d goroutines", n, gHeld-g0)
	}
}

// TestHostReloadLatency measures how long the first call on an evicted
// session takes (the reload: claim, fold from the log, new lane, then the
// call, a History query), on a SQLite file (synchronous FULL, the
// default) in a temporary directory. Each session has three turns (one of
// them with a tool call). Run it with -host.reloads=2000.
func TestHostReloadLatency(t *testing.T) {
	n := *hostReloads
	if n == 0 {
		t.Skip("a measurement: run with -host.reloads=N")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "host.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tool := namedTool("lookup")
	o := agentsvc.HostOptions{Store: st, NoEviction: true}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		p := replies(func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
			m := last(req)
			if m.Role == vocab.RoleUser && m.Text() == "look it up" {
				return "", []vocab.ToolCall{call("c-"+string(info.ID), "lookup", map[string]string{"q": "answer"})}, nil
			}
			return "the answer to " + firstUser(req).Text() + " is 42", nil, nil
		})
		return agentsvc.Options{Provider: p, Tools: []vocab.Tool{tool}, NoRunTimeout: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	svcs := make([]*agentsvc.Service, n)
	var events uint64
	var msgs int
	for i := range n {
		id := vocab.ID(fmt.Sprintf("r%06d", i))
		svc := promptedSession(t, h, id, "what is the question?", "look it up", "thanks")
		if i == 0 {
			snap, _ := svc.Snapshot(ctx)
			events, msgs = snap.Seq, snap.History.Len()
		}
		svcs[i] = svc
	}
	evict := make([]time.Duration, n)
	for i, svc := range svcs {
		start := time.Now()
		if ok, err := h.Evict(ctx, svc.Session()); !ok || err != nil {
			t.Fatalf("evict: %v %v", ok, err)
		}
		evict[i] = time.Since(start)
	}
	if s := h.Stats(); s.Resident != 0 {
		t.Fatalf("%d still resident", s.Resident)
	}
	reload := make([]time.Duration, n)
	for i, svc := range svcs {
		start := time.Now()
		hist, err := svc.History(ctx)
		reload[i] = time.Since(start)
		if err != nil || hist.Len() != msgs {
			t.Fatalf("reload: %d messages, %v", hist.Len(), err)
		}
	}
	if s := h.Stats(); s.Loads != 2*n {
		t.Fatalf("%d loads for %d sessions", s.Loads, n)
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[min(len(d)-1, int(float64(len(d))*p))]
	}
	t.Logf("%d sessions on SQLite (synchronous FULL; %d events and %d messages of history each, three turns, one tool call): reload (first call after eviction) p50 %v p99 %v max %v; eviction p50 %v p99 %v",
		n, events, msgs, pct(reload, 0.5).Round(time.Microsecond), pct(reload, 0.99).Round(time.Microsecond), pct(reload, 1).Round(time.Microsecond),
		pct(evict, 0.5).Round(time.Microsecond), pct(evict, 0.99).Round(time.Microsecond))
}
