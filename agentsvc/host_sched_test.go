package agentsvc_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"math/rand/v2"

	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var (
	schedSeeds = flag.Int("sched.seeds", 100, "TestHostScheduled: how many seeds")
	schedSeed  = flag.Int("sched.seed", -1, "TestHostScheduled: run this seed only")
	// With -sched.events the traces compared hold every parent's events
	// too (kinds, and the text of the inputs), about 5 times slower.
	schedEvents = flag.Bool("sched.events", false, "TestHostScheduled: trace every parent's events too")
)

// TestHostScheduled drives a Host with a deterministic scheduler: every
// model request of every session (parents and sub-agents) is held until
// the seeded scheduler releases it, and between two decisions the test
// waits, in a synctest bubble, until every goroutine of the host is
// blocked (so each decision sees a settled host, and time is the
// bubble's fake clock). The seed decides, one decision at a time, which
// request is answered next and how (an answer, a provider failure), when
// parents are cancelled or closed, when time jumps (agents_wait
// timeouts, the archive delay), and whether the host closes early.
//
// After every decision it checks: no session runs work whose parent is
// closed, no more sub-agents run than MaxRunningSubAgents, no agent has
// more live children than MaxChildren. At the end: every spawn a parent
// was told succeeded is heard of exactly once in that parent's
// conversation (a delivery or an agents_wait result), no refused spawn
// started a child, and after Close no goroutine is left (synctest fails
// the test otherwise). Each seed runs twice and the two traces of
// decisions and settled states must be identical (determinism).
func TestHostScheduled(t *testing.T) {
	seeds := make([]uint64, 0, *schedSeeds)
	if *schedSeed >= 0 {
		seeds = append(seeds, uint64(*schedSeed))
	} else {
		for s := range uint64(*schedSeeds) {
			seeds = append(seeds, s)
		}
	}
	start, lines, evictions := time.Now(), 0, 0
	for _, seed := range seeds {
		var traces [2][]string
		for run := range traces {
			synctest.Test(t, func(t *testing.T) {
				defer func() {
					if t.Failed() {
						t.Logf("decisions and settled states so far:\n%s", strings.Join(traces[run], "\n"))
					}
				}()
				counted := &evictions
				if run == 1 {
					counted = new(int) // counted once per seed
				}
				scheduleHost(t, seed, &traces[run], counted)
			})
			if t.Failed() {
				t.Fatalf("seed %d failed; reproduce with: go test ./agentsvc -run 'TestHostScheduled$' -sched.seed %d -v", seed, seed)
			}
		}
		if i := firstDiff(traces[0], traces[1]); i >= 0 {
			if testing.Verbose() {
				t.Logf("first run:\n%s", strings.Join(traces[0][:i+1], "\n"))
				t.Logf("second run:\n%s", strings.Join(traces[1][:min(i+1, len(traces[1]))], "\n"))
			}
			t.Fatalf("seed %d: two runs differ at decision %d:\n  %s\n  %s\nreproduce with: go test ./agentsvc -run 'TestHostScheduled$' -sched.seed %d -v",
				seed, i, at(traces[0], i), at(traces[1], i), seed)
		}
		lines += len(traces[0])
	}
	t.Logf("scheduled %d seeds twice each, %d trace lines per run, identical runs, %d evictions per run, in %v", len(seeds), lines, evictions, time.Since(start).Round(time.Millisecond))
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i
		}
	}
	return -1
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<end>"
}

// held is a model request the scheduler has not released yet. A request
// whose context ends (a cancel, a close) is held too, marked cancelled,
// until the scheduler releases it: when each cancelled request returns,
// and so in which order cancelled sessions end, is a decision as well.
type held struct {
	seq       int // the order in which requests were made
	session   vocab.ID
	n         int // messages in the request: which step of the session
	cancelled bool
	reply     chan error
}

func (h *held) String() string {
	if h.cancelled {
		return fmt.Sprintf("%s@%d!", h.session, h.n)
	}
	return fmt.Sprintf("%s@%d", h.session, h.n)
}

// scheduler holds every model request until the test releases it.
type scheduler struct {
	mu      sync.Mutex
	made    int
	pending []*held
}

// madeSoFar is how many requests were made so far.
func (s *scheduler) madeSoFar() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made
}

// provider holds each request; on release it answers with answer(req),
// or fails with the error it is released with; a cancelled request
// returns its context's cause once released.
func (s *scheduler) provider(id vocab.ID, answer replies) replies {
	return func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		s.mu.Lock()
		s.made++
		h := &held{seq: s.made, session: id, n: len(req.Messages), reply: make(chan error, 1)}
		s.pending = append(s.pending, h)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.pending = slices.DeleteFunc(s.pending, func(x *held) bool { return x == h })
			s.mu.Unlock()
		}()
		select {
		case err := <-h.reply:
			if err != nil {
				return "", nil, err
			}
			return answer(ctx, req)
		case <-ctx.Done():
			s.mu.Lock()
			h.cancelled = true
			s.mu.Unlock()
			<-h.reply
			return "", nil, context.Cause(ctx)
		}
	}
}

// snapshot lists the held requests in a stable order.
func (s *scheduler) snapshot() []*held {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*held, len(s.pending))
	for i, h := range s.pending {
		c := *h
		out[i] = &c
	}
	slices.SortFunc(out, func(a, b *held) int {
		if c := strings.Compare(string(a.session), string(b.session)); c != 0 {
			return c
		}
		return a.n - b.n
	})
	return out
}

func scheduleHost(t *testing.T, seed uint64, trace *[]string, evicted *int) {
	rng := rand.New(rand.NewPCG(seed, 0x5ced))
	sched := &scheduler{}
	o := agentsvc.HostOptions{Store: memory.New(), MaxRunningSubAgents: 1 + rng.IntN(4), MaxChildren: 1 + rng.IntN(5), MaxRunning: 1 + rng.IntN(3)}
	// The stream watchdog is off and the hard stop far away: a stalled
	// stream and a cancelled request's return are the scheduler's
	// decisions, not races of timers that share a deadline.
	opts := func(p vocab.Provider) agentsvc.Options {
		return agentsvc.Options{Provider: p, NoRunTimeout: true, NoStreamWatchdog: true, MaxAttempts: 1, HardStop: 1000 * time.Hour}
	}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return opts(sched.provider(info.ID, parentProvider(nil))), nil
		}
		return opts(sched.provider(info.ID, func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
			return "answer(" + firstUser(req).Text() + ")", nil, nil
		})), nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	note := func(format string, args ...any) { *trace = append(*trace, fmt.Sprintf(format, args...)) }
	note("max running sub-agents %d, max children %d, global lane %d", o.MaxRunningSubAgents, o.MaxChildren, o.MaxRunning)

	parents := make([]vocab.ID, 1+rng.IntN(3))
	lastSeq := map[vocab.ID]uint64{}
	svcs := map[vocab.ID]*agentsvc.Service{}
	for i := range parents {
		id := vocab.ID(fmt.Sprintf("p%d", i))
		parents[i] = id
		words := []string{"spawn"}
		for c := range rng.IntN(7) {
			words = append(words, fmt.Sprintf("t%d.%d", i, c))
		}
		switch rng.IntN(3) { // wait for the children, yield to them, or neither
		case 0:
			words = append(words, "wait")
		case 1:
			words = append(words, "yield")
		}
		svc, err := h.Open(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		svcs[id] = svc
		if _, err := svc.SubmitText(strings.Join(words, " ")); err != nil {
			t.Fatal(err)
		}
		note("%s: %s", id, strings.Join(words, " "))
	}

	// Closes run on goroutines of their own: a close waits for cancelled
	// requests, which only the scheduler releases.
	closing := map[vocab.ID]chan error{} // "" is the host
	closedAt := map[vocab.ID]int{}       // requests made before the close
	closeAsync := func(id vocab.ID, close func(context.Context) error) {
		done := make(chan error, 1)
		closing[id] = done
		closedAt[id] = sched.madeSoFar()
		go func() { done <- close(ctx) }()
	}
	closed := func(id vocab.ID) bool { _, ok := closing[id]; return ok }
	evictions := 0
	// madeAfterClose: p was made after the host, its session or its
	// parent began to close (ParentOf of a top-level session is "", the
	// host's key).
	madeAfterClose := func(p *held) bool {
		for _, id := range []vocab.ID{"", p.session, vocab.ParentOf(p.session)} {
			if n, ok := closedAt[id]; ok && p.seq > n {
				return true
			}
		}
		return false
	}
	// A broken invariant stops the decisions; the host is then closed and
	// drained all the same, so no goroutine is left blocked.
	failed := false
	fail := func(format string, args ...any) {
		t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
		failed = true
	}
	settle := func() []*held {
		synctest.Wait()
		pend := sched.snapshot()
		var b strings.Builder
		for _, p := range pend {
			fmt.Fprintf(&b, " %s", p)
		}
		st := h.Stats()
		note("settled:%s (resident %d, loads %d, evictions %d)", b.String(), st.Resident, st.Loads, st.Evictions)
		evictions = st.Evictions
		for _, id := range parents {
			if !*schedEvents || closed(id) || closed("") {
				continue
			}
			snap, _ := svcs[id].Snapshot(ctx)
			if snap.Seq <= lastSeq[id] {
				continue
			}
			var kinds []string
			for ev, err := range svcs[id].Events(ctx, lastSeq[id]+1) {
				if err != nil || ev.Seq > snap.Seq {
					break
				}
				k := string(ev.Kind)
				if in, ok := ev.Payload.(vocab.Input); ok && in.Message != nil && in.Message.Text() != "" {
					k += "(" + in.Message.Text()[:min(30, len(in.Message.Text()))] + ")"
				}
				kinds = append(kinds, k)
				if ev.Seq == snap.Seq {
					break
				}
			}
			lastSeq[id] = snap.Seq
			note("   %s: %s", id, strings.Join(kinds, " "))
		}
		// What must hold at every settled point: nothing asks its model
		// once it, its parent or the host began to close, and no more
		// sub-agents run than the limit.
		running := map[vocab.ID]bool{}
		for _, p := range pend {
			if madeAfterClose(p) {
				fail("%s asked its model after it, its parent or the host began to close", p)
			}
			if vocab.ParentOf(p.session) != "" && !p.cancelled {
				running[p.session] = true
			}
		}
		if len(running) > o.MaxRunningSubAgents {
			fail("%d sub-agents run at once, limit %d", len(running), o.MaxRunningSubAgents)
		}
		return pend
	}
	release := func(p *held, err error, how string) {
		note("%s %s", how, p)
		p.reply <- err
	}

	pend := settle()
	for range 80 {
		if closed("") || failed {
			break
		}
		// Each decision at an instant of its own: timers its consequences
		// arm never share a deadline with an earlier decision's.
		time.Sleep(time.Millisecond)
		synctest.Wait()
		switch k := rng.IntN(100); {
		case k < 70 && len(pend) > 0:
			p := pend[rng.IntN(len(pend))]
			var err error
			how := "answer"
			switch {
			case p.cancelled:
				how = "return"
			case vocab.ParentOf(p.session) != "":
				switch rng.IntN(8) {
				case 0:
					err, how = vocab.Errorf(vocab.CodeAuth, "no key for %s", p.session), "fail"
				case 1:
					err, how = vocab.Errorf(vocab.CodeStreamIdle, "stream of %s stalled", p.session), "stall"
				}
			}
			release(p, err, how)
		case k < 78:
			id := parents[rng.IntN(len(parents))]
			if closed(id) {
				continue
			}
			// KeepInbox: a cancel that clears the queue drops the
			// deliveries still in it (documented).
			err := svcs[id].Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{KeepInbox: true})
			note("cancel %s: %v", id, vocab.CodeOf(err))
		case k < 81:
			id := parents[rng.IntN(len(parents))]
			if closed(id) {
				continue
			}
			note("close %s", id)
			closeAsync(id, svcs[id].Close)
		case k < 90:
			d := time.Duration(1+rng.IntN(120)) * time.Second
			if rng.IntN(10) == 0 {
				d = 61 * time.Minute // past the archive delay
			}
			note("sleep %v", d)
			time.Sleep(d)
		case k < 92:
			note("close the host")
			closeAsync("", h.Close)
		default:
			continue
		}
		pend = settle()
	}
	if !closed("") && !failed {
		// Drain: answer everything, let timeouts fire, until nothing is
		// held and every parent rests.
		for range 1000 {
			if len(pend) == 0 {
				// A parent cancelled with KeepInbox rests with the
				// deliveries that came after the cancel still queued: a
				// Continue runs them.
				for _, id := range parents {
					if !closed(id) {
						err := svcs[id].Continue()
						note("continue %s: %v", id, vocab.CodeOf(err))
					}
				}
				time.Sleep(2 * time.Minute)
				if pend = settle(); len(pend) == 0 {
					break
				}
			}
			release(pend[0], nil, "drain")
			pend = settle()
		}
		if len(pend) > 0 {
			fail("requests still held after the drain: %v", pend)
		}
		for _, id := range parents {
			if closed(id) || failed {
				continue
			}
			svc := svcs[id]
			told := spawnedChildren(t, svc)
			heard := answeredChildren(t, svc)
			for _, c := range told {
				if heard[c] != 1 {
					t.Errorf("seed %d: %s heard of its child %s %d times:\n%s", seed, id, c, heard[c], dumpHistory(t, svc))
				}
			}
			for c, n := range heard {
				if !slices.Contains(told, c) {
					t.Errorf("seed %d: %s heard %d times of %s, a child it was never told it spawned", seed, id, n, c)
				}
			}
			note("%s told %d, heard %d", id, len(told), len(heard))
		}
	}
	if !closed("") {
		note("close the host")
		closeAsync("", h.Close)
	}
	*evicted += evictions
	// Let every close finish: release what they cancelled.
	for range 1000 {
		if pend = settle(); len(pend) == 0 {
			break
		}
		release(pend[0], nil, "drain")
	}
	for id, done := range closing {
		select {
		case err := <-done:
			if err != nil && vocab.CodeOf(err) != vocab.CodeClosed {
				t.Errorf("seed %d: close %q: %v", seed, id, err)
			}
		default:
			t.Fatalf("seed %d: close %q never returned", seed, id)
		}
	}
	for _, svc := range svcs {
		if _, err := svc.SubmitText("more"); vocab.CodeOf(err) != vocab.CodeClosed {
			t.Fatalf("seed %d: %s after Close: %v", seed, svc.Session(), err)
		}
	}
}
