package agentsvc_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

var (
	hammerSeed     = flag.Uint64("hammer.seed", 0, "TestHostEvictionHammer: the seed (0: from the time)")
	hammerWorkers  = flag.Int("hammer.workers", 8, "TestHostEvictionHammer: goroutines")
	hammerSessions = flag.Int("hammer.sessions", 5, "TestHostEvictionHammer: session ids")
)

var evictT0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// claimLedger is a store that checks the host never holds two claims on a
// session at once: a load claims, an eviction releases, so a second claim
// while one is held would be a second fold of a loaded session.
type claimLedger struct {
	store.Store
	mu       sync.Mutex
	held     map[vocab.ID]bool
	claims   map[vocab.ID]int
	twice    []vocab.ID
	stacks   []string // of the first claims made while held
	releases int
}

func newLedger(st store.Store) *claimLedger {
	return &claimLedger{Store: st, held: map[vocab.ID]bool{}, claims: map[vocab.ID]int{}}
}

func (l *claimLedger) Claim(ctx context.Context, id, run vocab.ID, create bool) (store.Claim, uint64, error) {
	l.mu.Lock()
	if l.held[id] {
		l.twice = append(l.twice, id)
		if len(l.stacks) < 2 {
			l.stacks = append(l.stacks, string(debug.Stack()))
		}
	}
	l.held[id] = true
	l.claims[id]++
	l.mu.Unlock()
	c, head, err := l.Store.Claim(ctx, id, run, create)
	if err != nil {
		l.mu.Lock()
		l.held[id] = false
		l.mu.Unlock()
	}
	return c, head, err
}

func (l *claimLedger) Release(ctx context.Context, id vocab.ID, c store.Claim) error {
	l.mu.Lock()
	l.held[id] = false
	l.releases++
	l.mu.Unlock()
	return l.Store.Release(ctx, id, c)
}

func (l *claimLedger) total() (claims int, twice []vocab.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.claims {
		claims += n
	}
	return claims, slices.Clone(l.twice)
}

// echo answers every prompt with its text.
func echo() replies {
	return func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		return "re: " + last(req).Text(), nil, nil
	}
}

func newEvictHost(t *testing.T, st store.Store, clk clock.Clock, p vocab.Provider) *agentsvc.Host {
	t.Helper()
	h, err := agentsvc.NewHost(agentsvc.HostOptions{Store: st, Clock: clk, Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) {
		return agentsvc.Options{Provider: p, Clock: clk, NoRunTimeout: true, NoStreamWatchdog: true}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func storedEvents(t *testing.T, st store.Store, id vocab.ID) []vocab.Event {
	t.Helper()
	var out []vocab.Event
	for ev, err := range store.Events(context.Background(), st, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func gapless(t *testing.T, evs []vocab.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
}

// TestHostEvictAndReload: a resting session is evicted once it rested for
// EvictAfter on the host's clock, and the next call on the *Service the
// caller kept reloads it with the same history, status and events; the
// reload leaves no trace in the log, and what follows continues it
// without a gap.
func TestHostEvictAndReload(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := newLedger(memory.New())
	h := newEvictHost(t, st, clk, echo())
	defer h.Close(context.Background())
	svc, err := h.Open(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"one", "two"} {
		if res := runPrompt(t, svc, p); res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %s: %v", p, res)
		}
	}
	if err := svc.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := svc.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logged := storedEvents(t, st, "s1")

	clk.Advance(agentsvc.DefaultEvictAfter - time.Second)
	if s := h.Stats(); s.Evictions != 0 || s.Resident != 1 {
		t.Fatalf("evicted before EvictAfter: %+v", s)
	}
	clk.Advance(time.Second)
	if s := h.Stats(); s.Evictions != 1 || s.Resident != 0 || s.Known != 1 {
		t.Fatalf("after EvictAfter at rest: %+v, want one eviction, nothing resident, the held session known", s)
	}
	if again, err := h.Open(ctx, "s1"); err != nil || again != svc {
		t.Fatalf("Open of an evicted session a caller holds = %p, %v; want the same *Service %p", again, err, svc)
	}
	if s := h.Stats(); s.Resident != 0 {
		t.Fatalf("Open reloaded eagerly: %+v", s)
	}

	after, err := svc.Snapshot(ctx) // reloads
	if err != nil {
		t.Fatal(err)
	}
	if s := h.Stats(); s.Loads != 2 || s.Resident != 1 {
		t.Fatalf("after a call on the evicted session: %+v, want 2 loads", s)
	}
	if after.Status != before.Status || after.Seq != before.Seq || after.Agent != before.Agent ||
		fmt.Sprint(after.History.Messages()) != fmt.Sprint(before.History.Messages()) {
		t.Fatalf("reloaded session differs:\nbefore %s/%s seq %d %v\nafter  %s/%s seq %d %v", before.Status, before.Agent, before.Seq,
			before.History.Messages(), after.Status, after.Agent, after.Seq, after.History.Messages())
	}
	if string(after.Core) != string(before.Core) {
		t.Errorf("the reloaded core's snapshot differs:\n%s\n%s", before.Core, after.Core)
	}
	if got := storedEvents(t, st, "s1"); len(got) != len(logged) {
		t.Fatalf("the reload logged %d events: %v", len(got)-len(logged), got[len(logged):])
	}

	if res := runPrompt(t, svc, "three"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt after reload: %v", res)
	}
	if err := svc.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	all := storedEvents(t, st, "s1")
	gapless(t, all)
	for _, ev := range all[len(logged):] {
		if ev.Kind == vocab.EventKind("input/"+string(vocab.InOpen)) {
			t.Errorf("the reload stepped an open input: seq %d", ev.Seq)
		}
	}
	// The handle's stream replays the whole log, across the reload.
	sctx, stop := context.WithCancel(ctx)
	var seen []vocab.Event
	for ev, err := range svc.Events(sctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
		if ev.Seq == all[len(all)-1].Seq {
			break
		}
	}
	stop()
	gapless(t, seen)
	if len(seen) != len(all) {
		t.Fatalf("Events replayed %d of %d events", len(seen), len(all))
	}
	if claims, twice := st.total(); claims != 2 || len(twice) > 0 {
		t.Fatalf("claims %d (want 2: a load and a reload), claimed while held: %v", claims, twice)
	}
}

// TestHostEvictsOnlyRestingSessions: a session whose turn runs, whose
// retry wait is armed, or that a caller streams is not evicted; it is once
// it rests.
func TestHostEvictsOnlyRestingSessions(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	gate := make(chan struct{})
	var calls atomic.Int32
	p := replies(func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		switch last(req).Text() {
		case "block":
			select {
			case <-gate:
			case <-ctx.Done():
				return "", nil, context.Cause(ctx)
			}
		case "retry":
			if calls.Add(1) == 1 {
				return "", nil, &vocab.Error{Code: vocab.CodeRateLimited, Message: "slow down", Retryable: true, RetryAfter: 30 * time.Second}
			}
		}
		return "ok", nil, nil
	})
	h := newEvictHost(t, memory.New(), clk, p)
	defer h.Close(context.Background())
	svc, err := h.Open(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}

	// A running turn.
	pr, err := svc.SubmitText("block")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Evict(ctx, "busy"); ok || err != nil {
		t.Fatalf("Evict of a running session = %v, %v", ok, err)
	}
	clk.Advance(2 * agentsvc.DefaultEvictAfter)
	if s := h.Stats(); s.Evictions != 0 {
		t.Fatalf("a running session was evicted: %+v", s)
	}
	close(gate)
	if res, err := pr.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v %v", res, err)
	}

	// An armed retry wait (a timer of the core).
	pr, err = svc.SubmitText("retry")
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitForDue(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := agentsvc.LaneStats(svc); st.Timers != 1 {
		t.Fatalf("lane stats %+v, want the retry timer armed", st)
	}
	if ok, err := h.Evict(ctx, "busy"); ok || err != nil {
		t.Fatalf("Evict of a session with its retry timer armed = %v, %v", ok, err)
	}
	clk.AdvanceToNextWithin(time.Minute) // the retry runs
	if res, err := pr.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v %v", res, err)
	}
	if err := svc.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}

	// A caller's event stream.
	sctx, stop := context.WithCancel(ctx)
	streaming := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		first := true
		for _, err := range svc.Events(sctx, 0) {
			if first {
				close(streaming)
				first = false
			}
			if err != nil {
				return
			}
		}
	}()
	<-streaming
	if ok, err := h.Evict(ctx, "busy"); ok || err != nil {
		t.Fatalf("Evict of a streamed session = %v, %v", ok, err)
	}
	stop()
	<-ended
	if ok, err := h.Evict(ctx, "busy"); !ok || err != nil {
		t.Fatalf("Evict of a resting session = %v, %v", ok, err)
	}
	if ok, _ := h.Evict(ctx, "busy"); ok {
		t.Fatal("evicted twice")
	}
	if res := runPrompt(t, svc, "after"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt on the evicted session: %v", res)
	}
}

// TestHostEvictedParentKeepsItsChildren: a parent and its ended children
// are evicted; their archiving, a host timer, reloads each evicted child
// to close it; the parent, reloaded, heard of each child once and spawns
// and waits again.
func TestHostEvictedParentKeepsItsChildren(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := newLedger(memory.New())
	o := agentsvc.HostOptions{Store: st, Clock: clk}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(nil), Clock: clk, NoRunTimeout: true, NoStreamWatchdog: true}, nil
		}
		return agentsvc.Options{Provider: childProvider(nil, info.ID, nil), Clock: clk, NoRunTimeout: true, NoStreamWatchdog: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	parent, err := h.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if res := runPrompt(t, parent, "spawn a b"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v", res)
	}
	// Both children end and are delivered (each delivery wakes the
	// parent for a turn of its own).
	deliveries := func() int {
		n := 0
		for _, m := range transcriptOf(t, parent) {
			if m.Role == vocab.RoleUser && strings.HasPrefix(m.Text(), "[subagent completed]") {
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool {
		if err := parent.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		return deliveries() == 2 && h.Stats().Resident == 3
	})
	// The parent rests once its children's deliveries are over (a child
	// being delivered keeps it loaded).
	waitFor(t, func() bool {
		if err := parent.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		if !agentsvc.HostRests(h, "p") {
			return false
		}
		for info, err := range st.Sessions(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if agentsvc.ParentOf(info.Session) == "p" && !agentsvc.HostRests(h, info.Session) {
				return false
			}
		}
		return true
	})
	clk.Advance(agentsvc.DefaultEvictAfter)
	if s := h.Stats(); s.Resident != 0 || s.Evictions != 3 {
		t.Fatalf("after EvictAfter: %+v, want the parent and both children evicted", s)
	}
	loads := h.Stats().Loads
	clk.Advance(agentsvc.DefaultArchiveAfter)
	if s := h.Stats(); s.Loads != loads+2 {
		t.Fatalf("archiving the evicted children made %d loads, want 2", s.Loads-loads)
	}
	if n := len(callsOf(t, parent, agentsvc.ToolSpawn)); n != 2 {
		t.Fatalf("%d spawning calls", n)
	}
	var children []vocab.ID
	for info, err := range st.Sessions(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if agentsvc.ParentOf(info.Session) == "p" {
			children = append(children, info.Session)
		}
	}
	if len(children) != 2 {
		t.Fatalf("children %v", children)
	}
	for _, id := range children {
		evs := storedEvents(t, st, id)
		gapless(t, evs)
		disposed := false
		for _, ev := range evs[len(evs)-4:] {
			disposed = disposed || ev.Kind == vocab.EventKind("machine/transition") && strings.Contains(fmt.Sprint(ev.Payload), "disposed")
		}
		if !disposed {
			t.Errorf("archived child %s's log does not end with its close: %v", id, evs[len(evs)-4:])
		}
	}
	if got := deliveries(); got != 2 {
		t.Fatalf("the reloaded parent heard %d deliveries, want 2", got)
	}
	// Archived children do not count against the limit; the reloaded
	// parent spawns again and hears of its new child.
	if res := runPrompt(t, parent, "spawn c"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v", res)
	}
	waitFor(t, func() bool {
		if err := parent.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		return deliveries() == 3
	})
	if _, twice := st.total(); len(twice) > 0 {
		t.Fatalf("claimed while held: %v", twice)
	}
}

func callsOf(t *testing.T, svc *agentsvc.Service, name string) []vocab.ToolCall {
	var out []vocab.ToolCall
	for _, m := range transcriptOf(t, svc) {
		for _, c := range m.ToolCalls() {
			if c.Name == name {
				out = append(out, c)
			}
		}
	}
	return out
}

// waitFor polls cond, which waits on something itself (WhenIdle), a
// bounded number of times.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 10000 {
		if cond() {
			return
		}
		runtime.Gosched()
	}
	t.Fatal("condition not met")
}

// TestHostEvictionHammer: seeded goroutines open sessions, submit
// prompts, stream events, evict on demand and advance the host's clock
// (which evicts what rested) all at once. No input is lost (every
// prompt's turn ran, once, and is in the history), no session is claimed
// twice at once (never folded twice), the loads are the claims, and no
// goroutine is left after Close.
func TestHostEvictionHammer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if *hammerSeed != 0 {
		seed = *hammerSeed
	}
	t.Logf("seed %d (-hammer.seed to repeat)", seed)
	before := goleak.IgnoreCurrent()
	g0 := runtime.NumGoroutine()
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := newLedger(memory.New())
	h := newEvictHost(t, st, clk, echo())
	workers, ops, sessions := *hammerWorkers, 60, *hammerSessions
	var mu sync.Mutex
	sent := map[vocab.ID][]string{}
	var explicit atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ops {
				id := vocab.ID(fmt.Sprintf("h%d", rng.IntN(sessions)))
				switch op := rng.IntN(11); {
				case op == 10:
					// Handles nobody holds go, and so do their records.
					runtime.GC()
				case op < 5:
					svc, err := h.Open(ctx, id)
					if err != nil {
						errs <- err
						return
					}
					text := fmt.Sprintf("w%d-%d", w, i)
					msg := vocab.UserText(text)
					msg.ID = vocab.ID(text)
					p, err := svc.Submit(msg)
					if err != nil {
						errs <- fmt.Errorf("submit %s to %s: %w", text, id, err)
						return
					}
					mu.Lock()
					sent[id] = append(sent[id], text)
					mu.Unlock()
					if rng.IntN(2) == 0 {
						if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
							errs <- fmt.Errorf("prompt %s: %v %v", text, res, err)
							return
						}
					}
				case op < 7:
					ok, err := h.Evict(ctx, id)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						explicit.Add(1)
					}
				case op < 9:
					clk.Advance(time.Duration(rng.IntN(int(agentsvc.DefaultEvictAfter))))
				default:
					svc, err := h.Open(ctx, id)
					if err != nil {
						errs <- err
						return
					}
					sctx, stop := context.WithCancel(ctx)
					n := 0
					for _, err := range svc.Events(sctx, 0) {
						if err != nil || n == 3 {
							break
						}
						n++
					}
					stop()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		_, twice := st.total()
		t.Fatalf("%v (sessions claimed while held: %v; %+v)\n%s", err, twice, h.Stats(), strings.Join(st.stacks, "\n"))
	}
	for id, texts := range sent {
		svc, err := h.Open(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		hist, err := svc.History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range hist.Messages() {
			if m.Role == vocab.RoleUser {
				got = append(got, m.Text())
			}
		}
		slices.Sort(got)
		slices.Sort(texts)
		if !slices.Equal(got, texts) {
			t.Fatalf("session %s: history has prompts %v, sent %v", id, got, texts)
		}
		gapless(t, storedEvents(t, st, id))
	}
	claims, twice := st.total()
	stats := h.Stats()
	if len(twice) > 0 {
		t.Fatalf("sessions claimed while held (folded twice): %v", twice)
	}
	if claims != stats.Loads {
		t.Fatalf("%d claims for %d loads", claims, stats.Loads)
	}
	t.Logf("%d loads, %d evictions (%d by Evict, the others by the clock), %d calls evicted under them and retried on the reload, prompts per session %v",
		stats.Loads, stats.Evictions, explicit.Load(), agentsvc.HostRaced(h), lens(sent))
	if stats.Evictions == 0 || int64(stats.Evictions) == explicit.Load() {
		t.Fatal("the clock evicted nothing: the hammer did not test eviction by EvictAfter")
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
	t.Logf("goroutines: %d before the host, %d after its Close", g0, runtime.NumGoroutine())
}

func lens(m map[vocab.ID][]string) map[vocab.ID]int {
	out := map[vocab.ID]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// TestHostEvictAfterValidated: a negative EvictAfter is input.bad.
func TestHostEvictAfterValidated(t *testing.T) {
	_, err := agentsvc.NewHost(agentsvc.HostOptions{Store: memory.New(), EvictAfter: -time.Second,
		Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) { return agentsvc.Options{}, nil }})
	if vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Fatalf("negative EvictAfter: %v", err)
	}
}

// TestHostForgetsEvictedSessionsNobodyHolds: an evicted session whose
// *Service no caller holds leaves no record in the host once the handle
// is collected; Open then reopens it from its log, as after a restart.
func TestHostForgetsEvictedSessionsNobodyHolds(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := memory.New()
	h := newEvictHost(t, st, clk, echo())
	defer h.Close(context.Background())
	func() {
		promptedSession(t, h, "gone", "hello")
		if ok, err := h.Evict(ctx, "gone"); !ok || err != nil {
			t.Fatalf("Evict = %v, %v", ok, err)
		}
	}()
	waitFor(t, func() bool {
		runtime.GC() // the handle's cleanup runs after a collection
		return h.Stats().Known == 0
	})
	logged := len(storedEvents(t, st, "gone"))
	svc, err := h.Open(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	hist, err := svc.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := hist.Len(); n != 2 {
		t.Fatalf("reopened history has %d messages, want 2", n)
	}
	evs := storedEvents(t, st, "gone")
	gapless(t, evs)
	if evs[logged].Kind != vocab.EventKind("input/"+string(vocab.InOpen)) {
		t.Fatalf("a reopen after the record went logs %s first, want its open input", evs[logged].Kind)
	}
}

// TestHostReloadKeepsCheckpointing: a session evicted after every prompt
// still records checkpoints (CheckpointEvery counts across reloads), so
// its reloads do not fold an ever longer log.
func TestHostReloadKeepsCheckpointing(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := memory.New()
	h, err := agentsvc.NewHost(agentsvc.HostOptions{Store: st, Clock: clk, Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) {
		return agentsvc.Options{Provider: echo(), Clock: clk, NoRunTimeout: true, CheckpointEvery: 40}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	svc, err := h.Open(ctx, "cp")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if res := runPrompt(t, svc, fmt.Sprint("prompt ", i)); res.Kind != vocab.PromptCompleted {
			t.Fatalf("%v", res)
		}
		if err := svc.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := h.Evict(ctx, "cp"); !ok || err != nil {
			t.Fatalf("Evict = %v, %v", ok, err)
		}
	}
	evs := storedEvents(t, st, "cp")
	snaps := 0
	for _, ev := range evs {
		if ev.Kind == vocab.EventSnapshot {
			snaps++
		}
	}
	if want := (len(evs) - 1) / 40; snaps < want-1 || snaps == 0 {
		t.Fatalf("%d events, %d checkpoints; want about one per 40 events", len(evs), snaps)
	}
}

// promptedSession opens session id of h and runs a prompt of each text
// on it, one after another, to completion, until the session rests.
func promptedSession(t *testing.T, h *agentsvc.Host, id vocab.ID, texts ...string) *agentsvc.Service {
	t.Helper()
	svc, err := h.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range texts {
		if res := runPrompt(t, svc, text); res.Kind != vocab.PromptCompleted {
			t.Fatalf("%v", res)
		}
	}
	if err := svc.WhenIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	return svc
}

// gatedRelease is a store whose Release waits for gate once armed.
type gatedRelease struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedRelease) Release(ctx context.Context, id vocab.ID, c store.Claim) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Release(ctx, id, c)
}

// TestHostInputDuringEvictionWaitsForTheReload: a prompt submitted while
// the session is being evicted (its lane unloaded, its claim not yet
// released) waits, and runs on the reloaded lane; nothing is lost.
func TestHostInputDuringEvictionWaitsForTheReload(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	st := &gatedRelease{Store: memory.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	h := newEvictHost(t, st, clk, echo())
	defer h.Close(context.Background())
	svc := promptedSession(t, h, "mid", "first")
	st.armed.Store(true)
	evicted := make(chan bool, 1)
	go func() {
		ok, err := h.Evict(ctx, "mid")
		if err != nil {
			t.Error(err)
		}
		evicted <- ok
	}()
	<-st.entered // the lane is unloaded; the claim is being released
	type sub struct {
		p   *agentsvc.Prompt
		err error
	}
	submitted := make(chan sub, 1)
	go func() {
		p, err := svc.SubmitText("during")
		submitted <- sub{p, err}
	}()
	select {
	case s := <-submitted:
		t.Fatalf("Submit returned during the eviction: %v %v", s.p, s.err)
	case <-evicted:
		t.Fatal("Evict returned before its release did")
	default:
	}
	close(st.gate)
	if !<-evicted {
		t.Fatal("Evict = false")
	}
	s := <-submitted
	if s.err != nil {
		t.Fatal(s.err)
	}
	if res, err := s.p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v %v", res, err)
	}
	if st := h.Stats(); st.Loads != 2 || st.Evictions != 1 {
		t.Fatalf("%+v, want 2 loads and 1 eviction", st)
	}
	var got []string
	for _, m := range transcriptOf(t, svc) {
		if m.Role == vocab.RoleUser {
			got = append(got, m.Text())
		}
	}
	if !slices.Equal(got, []string{"first", "during"}) {
		t.Fatalf("prompts in history %v", got)
	}
}

// TestHostWaiterKeepsTheRecord: an Open that waits for an eviction to end
// loads the session on the record later Opens find, even when the
// evicted handle is collected and its cleanup runs between the eviction's
// end and the waiter's load. (The cleanup used to drop the record under
// the waiter, which then loaded a record nobody else could find: the
// next Open claimed the session a second time while it was held, and
// the first lane's appends failed with log.claim_lost; the hammer saw it
// about once in a hundred runs.)
func TestHostWaiterKeepsTheRecord(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(evictT0)
	ledger := newLedger(memory.New())
	st := &gatedRelease{Store: ledger, entered: make(chan struct{}), gate: make(chan struct{})}
	h := newEvictHost(t, st, clk, echo())
	defer h.Close(context.Background())
	promptedSession(t, h, "w", "first") // nobody holds the handle from here on
	st.armed.Store(true)
	evicted := make(chan error, 1)
	go func() {
		ok, err := h.Evict(ctx, "w")
		if err == nil && !ok {
			err = fmt.Errorf("Evict = false")
		}
		evicted <- err
	}()
	<-st.entered // evicting: the claim is being released
	forgot := make(chan bool, 1)
	defer agentsvc.SetHostWoke("w", func(forget func()) {
		// The eviction is over; the handle is collected and its cleanup
		// runs before the waiter takes the lock.
		for !agentsvc.HostHandleGone(h, "w") {
			runtime.GC()
		}
		forget()
		forgot <- true
	})()
	type opened struct {
		svc *agentsvc.Service
		err error
	}
	waiter := make(chan opened, 1)
	go func() {
		svc, err := h.Open(ctx, "w")
		waiter <- opened{svc, err}
	}()
	waitFor(t, func() bool { return agentsvc.HostWaiters(h, "w") == 1 })
	close(st.gate)
	if err := <-evicted; err != nil {
		t.Fatal(err)
	}
	o := <-waiter
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !<-forgot {
		t.Fatal("the hook did not run")
	}
	if s := h.Stats(); s.Known != 1 || s.Resident != 1 {
		t.Fatalf("after the waiter's load: %+v, want the session known and resident once", s)
	}
	again, err := h.Open(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if again != o.svc {
		t.Fatal("a second Open returned another handle than the waiter's")
	}
	if res := runPrompt(t, again, "second"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("%v", res)
	}
	claims, twice := ledger.total()
	if len(twice) > 0 || claims != 2 {
		t.Fatalf("%d claims, claimed while held: %v; want 2 (the open and the reload), none while held", claims, twice)
	}
}
