package agentsvc_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var (
	hostSeeds = flag.Int("host.seeds", 40, "TestHostSimulation: how many seeds")
	hostSeed  = flag.Int("host.seed", -1, "TestHostSimulation: run this seed only")
)

// TestHostSimulation runs seeded random fan-outs against a Host: parents
// spawn random numbers of children (some over the limits), wait for them,
// yield to them (sessions_yield) or neither;
// children answer after random delays, fail, or hold their running slot
// until the test's cancels are done; the test cancels parents, or closes
// the host, at random moments. Whatever the timing:
// every spawn the parent was told succeeded is answered exactly once in
// the parent's conversation (a wait result or a delivery), unless the
// host closed first; no refused spawn starts a child; after Close, no
// child session runs. The global lane has one to three slots, so parents
// queue for it too.
func TestHostSimulation(t *testing.T) {
	if *hostSeed >= 0 {
		simulateHost(t, uint64(*hostSeed))
		return
	}
	for seed := range uint64(*hostSeeds) {
		simulateHost(t, seed)
	}
	t.Logf("%d seeds: %d evictions (odd seeds evict what rests for 1 ms)", *hostSeeds, simEvictions.Load())
	if *hostSeeds >= 20 && simEvictions.Load() == 0 {
		t.Error("no session was evicted: the odd seeds tested nothing")
	}
}

// simEvictions counts the evictions of the simulation's hosts.
var simEvictions atomic.Int64

func simulateHost(t *testing.T, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xf00d))
	var mu sync.Mutex
	plan := map[string]string{} // task → what the child does
	parents := 1 + rng.IntN(3)
	prompts := map[vocab.ID]string{}
	for p := range parents {
		var words []string
		mode := rng.IntN(3) // wait for the children, yield to them, or neither
		for c := range rng.IntN(8) {
			task := fmt.Sprintf("t%d.%d", p, c)
			switch k := rng.IntN(6); {
			case k == 0:
				plan[task] = "fail"
			case k == 1:
				plan[task] = "block"
			default:
				plan[task] = fmt.Sprintf("sleep%d", rng.IntN(5))
			}
			words = append(words, task)
		}
		switch mode {
		case 0:
			words = append(words, "wait")
		case 1:
			words = append(words, "yield")
		}
		prompts[vocab.ID(fmt.Sprintf("p%d", p))] = "spawn " + strings.Join(words, " ")
	}
	release := make(chan struct{})
	child := replies(func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		task := firstUser(req).Text()
		mu.Lock()
		what := plan[task]
		mu.Unlock()
		switch {
		case what == "fail":
			return "", nil, vocab.Errorf(vocab.CodeAuth, "no key for %s", task)
		case what == "block":
			// Until the test's cancels are done (a blocked child holds a
			// running slot other parents' children may queue behind).
			select {
			case <-release:
			case <-ctx.Done():
				return "", nil, context.Cause(ctx)
			}
		case strings.HasPrefix(what, "sleep"):
			d := time.Duration(what[5]-'0') * time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return "", nil, context.Cause(ctx)
			}
		}
		return "answer(" + task + ")", nil, nil
	})
	o := agentsvc.HostOptions{Store: memory.New(), MaxRunningSubAgents: 1 + rng.IntN(8), MaxChildren: 1 + rng.IntN(5), MaxRunning: 1 + rng.IntN(3),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if seed%2 == 1 {
		// Odd seeds evict every session a millisecond after it rests
		// (the real clock): parents and children are evicted and
		// reloaded throughout, which must change nothing.
		o.EvictAfter = time.Millisecond
	}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
		}
		return agentsvc.Options{Provider: child, NoRunTimeout: true, MaxAttempts: 1, HardStop: 50 * time.Millisecond}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	svcs := map[vocab.ID]*agentsvc.Service{}
	var waits []*agentsvc.Prompt
	for id, text := range prompts {
		svc, err := h.Open(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		svcs[id] = svc
		p, err := svc.SubmitText(text)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, p)
	}
	closeEarly := rng.IntN(4) == 0
	if rng.IntN(3) == 0 {
		ids := slices.Sorted(maps.Keys(svcs)) // the seed decides which, whatever the map's order
		for _, id := range ids {
			if svc := svcs[id]; rng.IntN(2) == 0 {
				// KeepInbox: a cancel that clears the queue also drops the
				// deliveries still in it (their events stay in the log).
				_ = svc.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{KeepInbox: true})
			}
		}
	}
	close(release)
	if !closeEarly {
		for _, p := range waits {
			if _, err := p.Wait(ctx); err != nil {
				var b strings.Builder
				for id, svc := range svcs {
					snap, _ := svc.Snapshot(context.Background())
					fmt.Fprintf(&b, "== %s (%s %s) %q\n%s", id, snap.Agent, snap.Turn, prompts[id], dumpHistory(t, svc))
				}
				t.Fatalf("seed %d: %v (max running %d, max children %d, plan %v)\n%s", seed, err, o.MaxRunningSubAgents, o.MaxChildren, plan, b.String())
			}
		}
		// Let every end reach its parent.
		for id, svc := range svcs {
			want := spawnedChildren(t, svc)
			deadline := time.Now().Add(20 * time.Second)
			for {
				if err := svc.WhenIdle(ctx); err != nil {
					t.Fatal(err)
				}
				got := answeredChildren(t, svc)
				missing := 0
				for _, c := range want {
					if got[c] == 0 {
						missing++
					}
					if got[c] > 1 {
						t.Fatalf("seed %d: %s heard of %s %d times:\n%s", seed, id, c, got[c], dumpHistory(t, svc))
					}
				}
				if missing == 0 {
					break
				}
				if time.Now().After(deadline) {
					var kids strings.Builder
					for _, c := range want {
						if got[c] == 0 {
							cs, err := h.Open(ctx, c)
							if err != nil {
								fmt.Fprintf(&kids, "%s: %v\n", c, err)
								continue
							}
							snap, _ := cs.Snapshot(ctx)
							fmt.Fprintf(&kids, "%s: %s %s %s\n%s", c, snap.Status, snap.Agent, snap.Turn, dumpHistory(t, cs))
						}
					}
					t.Fatalf("seed %d: %s never heard of %d of its %d children:\n%s\nthose children:\n%s", seed, id, missing, len(want), dumpHistory(t, svc), kids.String())
				}
				// The deliveries are on their way: wait for the next event.
				// A delivery queued before a cancel (which keeps the inbox)
				// stays queued while the parent rests: a cancelled turn
				// starts nothing. The user going on (Continue) runs it.
				// (With a global lane a turn may wait long for its slot,
				// and deliveries pile up in its inbox meanwhile.)
				if err := svc.Continue(); err != nil {
					t.Fatal(err)
				}
				snap, _ := svc.Snapshot(ctx)
				wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				for range svc.Events(wctx, snap.Seq+1) {
					break
				}
				wcancel()
			}
		}
	}
	simEvictions.Add(int64(h.Stats().Evictions))
	if err := h.Close(ctx); err != nil {
		t.Fatalf("seed %d: close: %v", seed, err)
	}
	// After Close, nothing runs: every session, children included, is closed.
	for id := range svcs {
		if _, err := svcs[id].SubmitText("more"); vocab.CodeOf(err) != vocab.CodeClosed {
			t.Fatalf("seed %d: %s after Close: %v", seed, id, err)
		}
		// Its log, lane decisions included, folds back to the same events.
		if _, err := store.Verify(ctx, o.Store, id); err != nil {
			t.Fatalf("seed %d: %s: log verify: %v", seed, id, err)
		}
	}
}

// spawnedChildren are the children a parent was told it spawned.
func spawnedChildren(t *testing.T, svc *agentsvc.Service) []vocab.ID {
	t.Helper()
	var ids []vocab.ID
	for _, m := range transcriptOf(t, svc) {
		if m.Role == vocab.RoleTool && m.Result != nil && m.Result.Name == agentsvc.ToolSpawn && !m.Result.IsError {
			f := strings.Fields(m.Text())
			if len(f) >= 3 && f[0] == "spawned" {
				ids = append(ids, vocab.ID(f[2]))
			}
		}
	}
	return ids
}

// answeredChildren counts, per child, the ends its parent heard of: a
// "[subagent completed|failed|cancelled] ID" line, in a delivery or a
// wait result ("[subagent running]" is a wait that timed out).
func answeredChildren(t *testing.T, svc *agentsvc.Service) map[vocab.ID]int {
	t.Helper()
	n := map[vocab.ID]int{}
	for _, m := range transcriptOf(t, svc) {
		wait := m.Role == vocab.RoleTool && m.Result != nil && m.Result.Name == agentsvc.ToolWait
		if !wait && m.Role != vocab.RoleUser {
			continue // the model quoting what it heard is not hearing it again
		}
		for _, line := range strings.Split(m.Text(), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "[subagent" && f[1] != "running]" {
				n[vocab.ID(strings.TrimSuffix(f[2], ":"))]++
			}
		}
	}
	return n
}

func dumpHistory(t *testing.T, svc *agentsvc.Service) string {
	var b strings.Builder
	for _, m := range transcriptOf(t, svc) {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
	}
	return b.String()
}
