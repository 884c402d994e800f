package agentsvc

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/engine"
	"github.com/loopchart/loopchart/vocab"
)

// Sub-agent limits from the seed, the defaults of HostOptions.
const (
	// DefaultMaxSpawnDepth: sub-agents are leaves (they cannot spawn).
	DefaultMaxSpawnDepth = 1
	// DefaultMaxChildren is how many live (neither ended nor archived)
	// sub-agents one agent may have.
	DefaultMaxChildren = 5
	// DefaultMaxRunningSubAgents is how many sub-agents run at once across
	// the host; further spawns queue.
	DefaultMaxRunningSubAgents = 8
	// DefaultArchiveAfter is how long an ended sub-agent stays loaded
	// before it is archived (closed; its log is kept).
	DefaultArchiveAfter = 60 * time.Minute
	// DefaultMaxRunning is how many top-level sessions of a host run at
	// once (the global lane): the seed's DEFAULT_AGENT_MAX_CONCURRENT.
	// Four keeps a host's concurrent model requests and tool calls, and
	// so its provider's rate limits and its cost, bounded by default;
	// an application that serves many users raises it, or turns the lane
	// off with NoRunningLimit.
	DefaultMaxRunning = 4
	// DefaultEvictAfter is how long a session rests before its Host
	// evicts it.
	DefaultEvictAfter = 10 * time.Minute
)

// subMark separates a sub-agent's id from its parent's: a child's id is
// PARENT/sub-HASH, HASH derived from the spawning tool call's id, so the
// child of a call recorded in the parent's log is always the same session.
const subMark = vocab.SubAgentMark

// SessionInfo says which session a Host opens, for HostOptions.Session.
type SessionInfo struct {
	ID vocab.ID
	// Parent is the spawning agent of a sub-agent ("" for a top-level
	// session) and Depth its depth (0 top level, 1 a child…).
	Parent vocab.ID
	Depth  int
	// System and Tools are what the spawning call asked for: a system
	// prompt, and the names of the tools to keep (empty: all). The host
	// applies them to the options Session returns; a sub-agent reopened
	// later gets them back from the configuration its log recorded.
	System string
	Tools  []string
}

// HostOptions configure a Host.
type HostOptions struct {
	// Store keeps every session's log, sub-agents' included; required.
	Store Store
	// Session returns the options of the session the host opens: its
	// provider, tools, model… (Sink and Session are ignored: the host
	// opens sessions on Store). The host adds the sub-agent tools to
	// sessions that may spawn. Required.
	Session func(info SessionInfo) (Options, error)
	// MaxSpawnDepth, MaxChildren, MaxRunningSubAgents and ArchiveAfter
	// bound sub-agents; zero means the Default… constant, negative is an
	// error. MaxSpawnDepth 1 makes sub-agents leaves; 2 lets them spawn
	// once more.
	MaxSpawnDepth       int
	MaxChildren         int
	MaxRunningSubAgents int
	ArchiveAfter        time.Duration
	// MaxRunning caps how many top-level sessions run at once (the global
	// lane); zero means DefaultMaxRunning, negative is an error. A session
	// holds its slot only while it has work running (a model request, a
	// tool call, a hook) and gives it back while it waits for input,
	// yields, awaits an approval, waits for a retry, is paused, or sits
	// in agents_wait: a parent waiting for its children holds no slot.
	// Work that finds every slot held waits, deferred, in first-come
	// order (no caller blocks); each wait and grant is in the session's
	// log (lane/slot, input/slot.granted). Sub-agents are outside this
	// lane: they have their own (MaxRunningSubAgents), so parents can
	// never starve their children. NoRunningLimit turns the lane off.
	MaxRunning     int
	NoRunningLimit bool
	// EvictAfter is how long a session may rest before the host evicts
	// it: it drops the session's lane and core (the log stays, and so do
	// the *Service values callers hold: the next call on one reloads the
	// session from the store). A session rests when no work runs or is
	// queued, no prompt, acknowledgement or WhenIdle caller waits, no
	// event stream of a caller is open, none of its sub-agents runs or
	// is queued, and no agents_wait result is still to be settled. 0
	// means DefaultEvictAfter; negative is an error. NoEviction turns
	// eviction off (Evict still evicts on demand).
	EvictAfter time.Duration
	NoEviction bool
	// Clock times archiving and eviction; the real clock when nil.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Host keeps many sessions over one store: Open restores or creates a
// session, once however many callers ask at the same time, and runs its
// sub-agents. Sub-agents are sessions of the same store whose ids name
// their parent; the sessions_spawn, agents_wait, sessions_yield and
// subagents tools drive them, within the limits of HostOptions. A child's
// end reaches its parent once: as the agents_wait result that consumed
// it, or else as one notification ("[subagent completed] ID" and its
// final answer; failed and cancelled variants), which also resumes a
// parent that yielded. Cancelling a parent's turn cancels its running
// children; closing a parent closes them. Top-level sessions share a
// global lane (HostOptions.MaxRunning). All methods are safe for
// concurrent use.
//
// A session that rests for HostOptions.EvictAfter is evicted: its lane
// and core are dropped, its claim released, and the *Service that Open
// returned stays valid: the next call on it reloads the session from the
// store (once, however many callers ask), and an input that arrives while
// the session is being evicted waits for the reload. A reload of a
// session whose log did not change since its eviction leaves no trace in
// the log. While a caller holds a session's *Service, Open returns that
// same value; a session nobody holds costs the host nothing once evicted
// (a later Open reopens it from its log like a restart does). Timers do
// not hold an evicted session: the core arms them only during a turn,
// and the host's own deadlines (eviction checks, sub-agents' archiving)
// are kept in one timer wheel, on one clock timer for the whole host.
type Host struct {
	opt    HostOptions
	clock  clock.Clock
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[vocab.ID]*hosted
	// specs are what spawning calls asked for, until their child opens.
	specs  map[vocab.ID]spawnSpec
	closed bool
	// running counts sub-agents holding a slot; waiting are spawned
	// children queued for one, first come first served.
	running int
	waiting []*child
	// lane is the global lane of the top-level sessions (nil: none).
	lane *engine.GlobalLane
	// wheel holds the host's deadlines; tick is its one clock timer, due
	// at tickAt.
	wheel    wheel
	wheelSeq uint64
	tick     clock.Timer
	tickAt   time.Time
	// loads and evictions count what the host did, for Stats; raced the
	// calls that found their lane unloaded under them (and went on on
	// the reloaded one).
	loads, evictions int
	raced            atomic.Int64
}

// loadState is where a hosted session's lane is.
type loadState uint8

const (
	unloaded loadState = iota // no lane: the session is in its log only
	loading                   // one caller folds it; the others wait
	live                      // its lane runs, or rests
	evicting                  // its lane is gone; its claim is being released
)

// hosted is one session of the host.
type hosted struct {
	host  *Host
	info  SessionInfo
	state loadState
	// gen counts the loads; ready is closed when the load or eviction
	// under way ends (nil otherwise).
	gen   uint64
	ready chan struct{}
	// waiters counts the callers waiting for that load or eviction to
	// end: while there are any the record stays (see forget), so the
	// load one of them then makes is of the record Open finds.
	waiters int
	// loaded is set once a load succeeded; resume is what the last
	// eviction left for the next load.
	loaded bool
	resume *engine.Resume
	// failed is why its first load failed: the callers that waited for
	// that load get it too.
	failed error
	// svc is the session's handle: held while the session is loaded, and
	// while evicted when it must stay the same (see pinned); weak finds it
	// while a caller holds it.
	svc  *Service
	weak weak.Pointer[Service]
	// children are the sub-agents this session spawned, in spawn order;
	// watch is set once its events are followed (watchFrom).
	children []*child
	watch    *watchStart
	// watchNext is where the watch stopped by an eviction goes on.
	watchNext uint64
	// waits are the ends each agents_wait call took, by call id, until
	// the call's recorded result says whether they reached the parent.
	waits map[string][]*child
}

// childState is where a sub-agent is.
type childState string

const (
	childQueued   childState = "queued"
	childRunning  childState = "running"
	childEnded    childState = "ended"
	childArchived childState = "archived"
)

// child is one sub-agent.
type child struct {
	id, parent vocab.ID
	task       string
	state      childState
	svc        *Service
	prompt     *Prompt
	result     vocab.PromptResult
	answer     string
	done       chan struct{} // closed when it ended
	// note is its delivery while queued in the parent; consumed is set
	// once an agents_wait took its result instead.
	note     *Notification
	consumed bool
	// after and turn order the deliveries of the children one cancel of
	// their parent ends: a child's delivery waits for after (the
	// previous such child's turn, or the cancelled turn's end) and
	// closes turn once made, so they reach the parent in spawn order
	// after the parent's own last results, whatever the timing.
	after, turn chan struct{}
}

// NewHost returns a host over opt.Store.
func NewHost(opt HostOptions) (*Host, error) {
	if opt.Store == nil || opt.Session == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: a Host needs a Store and a Session function")
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"MaxSpawnDepth", opt.MaxSpawnDepth}, {"MaxChildren", opt.MaxChildren}, {"MaxRunningSubAgents", opt.MaxRunningSubAgents},
		{"MaxRunning", opt.MaxRunning}} {
		if n.v < 0 {
			return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: negative %s %d", n.name, n.v)
		}
	}
	if opt.ArchiveAfter < 0 || opt.EvictAfter < 0 {
		return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: negative ArchiveAfter %v or EvictAfter %v", opt.ArchiveAfter, opt.EvictAfter)
	}
	if opt.EvictAfter == 0 {
		opt.EvictAfter = DefaultEvictAfter
	}
	if opt.MaxSpawnDepth == 0 {
		opt.MaxSpawnDepth = DefaultMaxSpawnDepth
	}
	if opt.MaxChildren == 0 {
		opt.MaxChildren = DefaultMaxChildren
	}
	if opt.MaxRunningSubAgents == 0 {
		opt.MaxRunningSubAgents = DefaultMaxRunningSubAgents
	}
	if opt.ArchiveAfter == 0 {
		opt.ArchiveAfter = DefaultArchiveAfter
	}
	if opt.MaxRunning == 0 {
		opt.MaxRunning = DefaultMaxRunning
	}
	h := &Host{opt: opt, clock: opt.Clock, log: opt.Logger, sessions: map[vocab.ID]*hosted{}, specs: map[vocab.ID]spawnSpec{}}
	if !opt.NoRunningLimit {
		var err error
		if h.lane, err = engine.NewGlobalLane(opt.MaxRunning); err != nil {
			return nil, err
		}
	}
	if h.clock == nil {
		h.clock = clock.Real()
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h, nil
}

// GlobalLaneStats counts the slots of a host's global lane.
type GlobalLaneStats struct {
	// Max is the number of slots (HostOptions.MaxRunning; 0 when the lane
	// is off), Held how many top-level sessions hold one, Waiting how many
	// wait for one.
	Max, Held, Waiting int
}

// GlobalLane reports the global lane's slots.
func (h *Host) GlobalLane() GlobalLaneStats {
	if h.lane == nil {
		return GlobalLaneStats{}
	}
	st := h.lane.Stats()
	return GlobalLaneStats{Max: st.Max, Held: st.Held, Waiting: st.Waiting}
}

// infoOf reads a session's place in the tree from its id.
func infoOf(id vocab.ID) SessionInfo {
	return SessionInfo{ID: id, Depth: strings.Count(string(id), subMark), Parent: vocab.ParentOf(id)}
}

// ParentOf returns the id of the agent that spawned sub-agent id, or ""
// for a top-level session.
func ParentOf(id vocab.ID) vocab.ID { return vocab.ParentOf(id) }

// childID is the id of the sub-agent a parent's tool call spawns.
func childID(parent vocab.ID, callID string) vocab.ID {
	sum := sha256.Sum256([]byte(callID))
	return parent + subMark + vocab.ID(hex.EncodeToString(sum[:5]))
}

// Open returns session id, restoring it from the store or creating it.
// Callers that ask for a session while it loads share the one load. An
// evicted session whose *Service a caller still holds is returned as it
// is: its next call reloads it.
func (h *Host) Open(ctx context.Context, id vocab.ID) (*Service, error) {
	if id == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "agentsvc: Host.Open: no session id")
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errHostClosed()
	}
	e := h.sessions[id]
	if e == nil {
		e = &hosted{host: h, info: infoOf(id)}
		h.sessions[id] = e
	}
	if e.state == unloaded && e.loaded {
		if s := e.handle(); s != nil {
			h.mu.Unlock()
			return s, nil
		}
	}
	s, _, err := h.acquire(ctx, e)
	return s, err
}

func errHostClosed() error { return vocab.Errorf(vocab.CodeClosed, "agentsvc: the host is closed") }

// handle returns e's handle when there is one; h.mu is held.
func (e *hosted) handle() *Service {
	if e.svc != nil {
		return e.svc
	}
	return e.weak.Value()
}

// reload returns the lane of s, loading its session when it was
// evicted.
func (h *Host) reload(s *Service) (*engine.Engine, error) {
	h.mu.Lock()
	_, eng, err := h.acquire(h.ctx, s.home)
	return eng, err
}

// acquire returns e's handle with its lane live, loading the session when
// it is unloaded (once, however many callers ask; the others wait). h.mu
// is held, and released.
func (h *Host) acquire(ctx context.Context, e *hosted) (*Service, *engine.Engine, error) {
	for {
		if h.closed {
			h.mu.Unlock()
			return nil, nil, errHostClosed()
		}
		switch e.state {
		case live:
			s := e.svc
			h.mu.Unlock()
			return s, s.eng.Load(), nil
		case loading, evicting:
			ch := e.ready
			e.waiters++
			h.mu.Unlock()
			var err error
			select {
			case <-ch:
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
			if testHookWoke != nil {
				testHookWoke(e)
			}
			h.mu.Lock()
			e.waiters--
			if err != nil {
				h.mu.Unlock()
				return nil, nil, err
			}
			if err := e.failed; err != nil && e.state == unloaded {
				h.mu.Unlock()
				return nil, nil, err
			}
		default:
			return h.loadLocked(ctx, e)
		}
	}
}

// loadLocked loads unloaded e (h.mu is held, and released).
func (h *Host) loadLocked(ctx context.Context, e *hosted) (*Service, *engine.Engine, error) {
	s := e.handle()
	if s == nil {
		s = newService()
		s.id, s.home = e.info.ID, e
		e.weak = weak.Make(s)
		// Once no caller holds it, an evicted session's record goes too.
		runtime.AddCleanup(s, h.forget, e)
	}
	e.svc = s
	e.state, e.ready = loading, make(chan struct{})
	e.gen++
	resume, first := e.resume, !e.loaded
	e.resume = nil
	h.mu.Unlock()
	err := h.load(ctx, e, s, resume)
	h.mu.Lock()
	close(e.ready)
	e.ready = nil
	if err != nil {
		e.state, e.resume = unloaded, resume
		if first && len(e.children) == 0 && h.sessions[e.info.ID] == e {
			// The next Open tries afresh, with a record of its own.
			delete(h.sessions, e.info.ID)
			e.failed = err
		}
		h.mu.Unlock()
		return nil, nil, err
	}
	e.state, e.loaded = live, true
	h.loads++
	eng := s.eng.Load()
	if !h.opt.NoEviction {
		h.at(h.clock.Now().Add(h.opt.EvictAfter), wheelItem{e: e, gen: e.gen})
	}
	rewatch := e.watch == nil && e.watchNext > 0 && slices.ContainsFunc(e.children, func(c *child) bool { return c.state != childArchived })
	h.mu.Unlock()
	if first && e.info.Depth < h.opt.MaxSpawnDepth {
		// The children it spawned before a restart: the first opener
		// gets the session once they are accounted for.
		h.recoverChildren(e, s)
	}
	if rewatch {
		h.rewatch(e)
	}
	return s, eng, nil
}

// testHookWoke, when set (by tests), runs when a caller waiting in
// acquire for a load or eviction of e to end wakes, before it takes h.mu.
var testHookWoke func(e *hosted)

// forget drops the record of an evicted session nobody holds (a cleanup
// of its handle).
func (h *Host) forget(e *hosted) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.state == unloaded && e.svc == nil && e.weak.Value() == nil && e.waiters == 0 && len(e.children) == 0 && len(e.waits) == 0 &&
		h.sessions[e.info.ID] == e {
		delete(h.sessions, e.info.ID)
	}
}

// load starts the lane of e's session on handle s, with its options and,
// for an agent that may spawn, the sub-agent tools.
func (h *Host) load(ctx context.Context, e *hosted, s *Service, resume *engine.Resume) error {
	if e.info.Parent != "" && !e.loaded {
		h.mu.Lock()
		spec, ok := h.specs[e.info.ID]
		delete(h.specs, e.info.ID)
		h.mu.Unlock()
		if !ok {
			spec = h.loggedSpec(ctx, e.info.ID)
		}
		e.info.System, e.info.Tools = spec.System, spec.Tools
	}
	opt, err := h.opt.Session(e.info)
	if err != nil {
		return err
	}
	if e.info.System != "" {
		opt.System = e.info.System
	}
	if len(e.info.Tools) > 0 {
		var kept []vocab.Tool
		var names []string
		for _, t := range opt.Tools {
			name := t.Spec().Name
			names = append(names, name)
			if slices.Contains(e.info.Tools, name) {
				kept = append(kept, t)
			}
		}
		for _, want := range e.info.Tools {
			if !slices.Contains(names, want) && !isHostTool(want) {
				return vocab.Errorf(vocab.CodeBadInput, "no tool %q for a sub-agent (there are: %s)", want, strings.Join(names, ", "))
			}
		}
		opt.Tools = kept
	}
	if e.info.Depth < h.opt.MaxSpawnDepth {
		opt.Tools = append(slices.Clone(opt.Tools), spawnTool{h, e}, waitTool{h, e}, subagentsTool{h, e}, yieldTool{h, e})
	}
	if e.info.Depth == 0 {
		opt.lane = h.lane // sub-agents run in their own lane
	}
	if opt.CheckpointEvery < 0 {
		return vocab.Errorf(vocab.CodeBadInput, "agentsvc: negative CheckpointEvery %d", opt.CheckpointEvery)
	}
	if opt.CheckpointEvery == 0 {
		opt.CheckpointEvery = DefaultCheckpointEvery
	}
	return s.attach(ctx, h.opt.Store, opt, resume)
}

// watchFrom starts following e's events, once, when it spawns its first
// child (a session that never spawns costs no goroutine). It reads the
// session's head first: a cancel recorded after it reaches the children;
// one recorded before it has already cancelled the spawning call's
// context (a session cancels its work before it answers a query), which
// the caller checks after watchFrom returns.
func (h *Host) watchFrom(ctx context.Context, e *hosted) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errHostClosed()
	}
	if w := e.watch; w != nil {
		// Started, or starting: wait for the outcome.
		h.mu.Unlock()
		select {
		case <-w.ready:
			return w.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	w := &watchStart{ready: make(chan struct{})}
	e.watch = w
	h.wg.Add(1)
	svc := e.svc
	h.mu.Unlock()
	snap, err := svc.Snapshot(ctx)
	if err != nil {
		h.mu.Lock()
		e.watch = nil // the next spawn tries again
		h.mu.Unlock()
		w.err = err
		close(w.ready)
		h.wg.Done()
		return err
	}
	go h.watch(e, svc, snap.Seq+1, true)
	close(w.ready)
	return nil
}

// rewatch follows a reloaded parent's events again from where the watch
// its eviction stopped left off, when no watch runs.
func (h *Host) rewatch(e *hosted) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || e.watch != nil || e.state != live {
		return
	}
	w := &watchStart{ready: make(chan struct{})}
	close(w.ready)
	e.watch = w
	h.wg.Add(1)
	go h.watch(e, e.svc, e.watchNext, false)
}

// watchStart is the start of a parent's watch: ready is closed once it
// started (err nil) or failed.
type watchStart struct {
	ready chan struct{}
	err   error
}

// spawnSpec is what a spawning call asked for besides the task.
type spawnSpec struct {
	System string
	Tools  []string
}

func isHostTool(name string) bool {
	return name == ToolSpawn || name == ToolWait || name == ToolSubagents || name == ToolYield
}

// loggedSpec reads the system prompt and tool names a sub-agent was
// first opened with, from the configuration its log recorded (a
// reopened child keeps what its spawn asked for).
func (h *Host) loggedSpec(ctx context.Context, id vocab.ID) spawnSpec {
	var spec spawnSpec
	for r, err := range h.opt.Store.Read(ctx, id, 0) {
		if err != nil || r.Kind != vocab.EventKind("input/"+string(vocab.InOpen)) {
			if err != nil {
				return spec
			}
			continue
		}
		var in struct {
			Config struct {
				System string `json:"system"`
				Tools  []struct {
					Name string `json:"name"`
				} `json:"tools"`
			} `json:"config"`
		}
		if json.Unmarshal(r.Payload, &in) == nil {
			spec.System = in.Config.System
			for _, t := range in.Config.Tools {
				if !isHostTool(t.Name) {
					spec.Tools = append(spec.Tools, t.Name)
				}
			}
		}
		return spec
	}
	return spec
}

// recoverChildren picks up the sub-agents a parent spawned before this
// host opened it (a restart): the spawning calls are in the parent's
// history, and each child's id derives from its call. A child that never
// got its task is closed and reported failed; one whose task ended (the
// reopen's recovery ends a task cut off by the restart as cancelled) is
// reported as it ended. Each report is a delivery with the child's
// delivery id, refused as a duplicate when it was made before the
// restart: the parent hears of each child once.
func (h *Host) recoverChildren(e *hosted, svc *Service) {
	ctx := h.ctx
	hist, err := svc.History(ctx)
	if err != nil {
		return
	}
	var calls []vocab.ToolCall
	for _, m := range hist.All() {
		for _, c := range m.ToolCalls() {
			if c.Name == ToolSpawn {
				calls = append(calls, c)
			}
		}
	}
	for _, call := range calls {
		id := childID(e.info.ID, call.ID)
		h.mu.Lock()
		known := slices.ContainsFunc(e.children, func(c *child) bool { return c.id == id })
		h.mu.Unlock()
		if known {
			continue
		}
		if _, err := h.opt.Store.Latest(ctx, id, vocab.EventPrompt); err != nil {
			continue // never created: the parent's call ended interrupted
		}
		state, detail := h.taskState(ctx, id)
		csvc, err := h.Open(ctx, id)
		if err != nil {
			h.log.Error("agentsvc: sub-agent recovery", "child", id, "err", err)
			continue
		}
		if state == "" || state == "running" || state == "queued" {
			// Never started, or cut off: its reopen cancelled it.
			state, detail = h.taskState(ctx, id)
		}
		c := &child{id: id, parent: e.info.ID, state: childRunning, svc: csvc, done: make(chan struct{})}
		var a struct {
			Task string `json:"task"`
		}
		_ = json.Unmarshal(call.Args, &a)
		c.task = a.Task
		res := vocab.PromptResult{Kind: vocab.PromptKind(state)}
		switch res.Kind {
		case vocab.PromptCompleted, vocab.PromptFailed, vocab.PromptCancelled, vocab.PromptBlocked:
		default:
			res = vocab.PromptResult{Kind: vocab.PromptFailed, Err: vocab.Errorf(vocab.CodeCancelled, "interrupted by a restart before it started")}
			_ = csvc.Close(ctx)
		}
		if res.Kind == vocab.PromptFailed && res.Err == nil {
			res.Err = vocab.Errorf(vocab.CodeInternal, "%s", detail)
		}
		h.mu.Lock()
		e.children = append(e.children, c)
		h.running++ // end() gives the slot back
		h.mu.Unlock()
		h.end(c, res)
	}
}

// taskState reads the last state a child's task prompt logged.
func (h *Host) taskState(ctx context.Context, id vocab.ID) (state, detail string) {
	task := id + "/task"
	for r, err := range h.opt.Store.Read(ctx, id, 0) {
		if err != nil {
			return state, detail
		}
		if r.Kind != vocab.EventPrompt {
			continue
		}
		var p vocab.PromptPayload
		if json.Unmarshal(r.Payload, &p) == nil && p.Prompt == task {
			state, detail = p.State, p.Detail
		}
	}
	return state, detail
}

// Sessions lists the store's sessions, most recently updated first.
func (h *Host) Sessions(ctx context.Context) ([]vocab.ID, error) {
	var ids []vocab.ID
	for info, err := range h.opt.Store.Sessions(ctx) {
		if err != nil {
			return ids, err
		}
		ids = append(ids, info.Session)
	}
	return ids, nil
}

// Close closes every session the host opened: it first stops them all
// (each takes no more input, starts no more work and cancels what runs;
// parents first), so that no session, parent or child, starts work
// while another is still closing, then waits for each, and for the
// host's goroutines. It returns once all of them, sub-agents included,
// are closed, or ctx ends. Evicted sessions are already at rest: their
// logs stay as they are.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	if h.tick != nil {
		h.tick.Stop()
		h.tick = nil
	}
	h.wheel = nil
	all := make([]*hosted, 0, len(h.sessions))
	for _, e := range h.sessions {
		all = append(all, e)
	}
	h.mu.Unlock()
	if h.lane != nil {
		// No session starts work because another closed before it.
		h.lane.Close()
	}
	// Parents first: a child stopped before its parent would end, and its
	// end could feed the parent one more step.
	slices.SortFunc(all, func(a, b *hosted) int {
		return cmp.Or(a.info.Depth-b.info.Depth, strings.Compare(string(a.info.ID), string(b.info.ID)))
	})
	errs := make([]error, len(all))
	svcs := make([]*Service, len(all))
	for i, e := range all {
		svcs[i], errs[i] = h.settled(ctx, e)
		if svcs[i] != nil && errs[i] == nil {
			if err := svcs[i].beginClose(ctx); err != nil && vocab.CodeOf(err) != vocab.CodeClosed {
				errs[i] = err
			}
		}
	}
	var wg sync.WaitGroup
	for i, svc := range svcs {
		if errs[i] != nil || svc == nil {
			continue
		}
		wg.Go(func() {
			if err := svc.Close(ctx); err != nil && vocab.CodeOf(err) != vocab.CodeClosed {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	h.cancel(errHostClosed())
	h.wg.Wait()
	if h.lane != nil {
		h.lane.Wait() // grants on their way to sessions now closed
	}
	return errors.Join(errs...)
}

// settled waits until e is neither loading nor being evicted, and returns
// its handle when it is live.
func (h *Host) settled(ctx context.Context, e *hosted) (*Service, error) {
	h.mu.Lock()
	for e.state == loading || e.state == evicting {
		ch := e.ready
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if e.state == live {
		return e.svc, nil
	}
	return nil, nil
}

// watch follows a parent's events: a cancelled turn cancels its running
// children (cause parent); the parent's end closes them.
func (h *Host) watch(e *hosted, svc *Service, from uint64, inTurn bool) {
	defer h.wg.Done()
	// The ends a cancel causes are delivered once the cancelled turn has
	// ended, in spawn order (see child.after). The first watch starts in
	// a turn (the one whose call spawned the first child); one that goes
	// on after an eviction starts at rest.
	var gate chan struct{} // closed when the cancelled turn ended
	open := func() {
		if gate != nil {
			close(gate)
			gate = nil
		}
	}
	defer open()
	next := from
	for ev, err := range svc.follow(h.ctx, from, false) {
		if err == errEvicted {
			// The parent was evicted: the watch goes on when it is
			// reloaded (loadLocked), from here.
			h.mu.Lock()
			e.watch, e.watchNext = nil, next
			h.mu.Unlock()
			h.rewatch(e) // reloaded meanwhile
			return
		}
		if err != nil {
			// The host closing (its context), or a stream that could not
			// go on: neither says the parent closed, so its children stay.
			if h.ctx.Err() == nil {
				h.log.Error("agentsvc: following a parent's events stopped", "parent", e.info.ID, "err", err)
			}
			return
		}
		next = ev.Seq + 1
		switch ev.Kind {
		case vocab.EventToolResult:
			h.settleWait(e, ev)
		case vocab.EventTurnStart:
			inTurn = true
		case vocab.EventTurnEnd:
			inTurn = false
			open()
		case vocab.EventKind("input/" + string(vocab.InCancel)), vocab.EventKind("input/" + string(vocab.InClose)):
			// A close cancels the parent's work at once: its children go
			// with it now, not when its close ends.
			if gate == nil {
				gate = make(chan struct{})
			}
			h.cancelChildren(e, gate)
			if !inTurn {
				open()
			}
		}
	}
	// The stream ended: the parent is closed, and so are its children.
	if gate == nil {
		gate = make(chan struct{})
	}
	h.cancelChildren(e, gate)
	open()
	for _, c := range h.childrenOf(e, childRunning, childEnded) {
		h.mu.Lock()
		csvc := c.svc
		h.mu.Unlock()
		if csvc != nil {
			_ = csvc.Close(context.WithoutCancel(h.ctx))
		}
	}
}

// cancelChildren cancels e's queued and running children (cause parent)
// and chains their deliveries behind gate, in spawn order. The queued
// ones are taken off the queue before any running one is cancelled: a
// running child's end frees its slot for the next queued child, which
// must not be a sibling about to be cancelled.
func (h *Host) cancelChildren(e *hosted, gate chan struct{}) {
	h.mu.Lock()
	var queued, running []*child
	prev := gate
	for _, c := range e.children {
		if c.turn != nil || c.state != childQueued && c.state != childRunning {
			continue // ended, or already cancelled by an earlier cancel
		}
		c.after, c.turn = prev, make(chan struct{})
		prev = c.turn
		if c.state == childQueued {
			h.waiting = slices.DeleteFunc(h.waiting, func(w *child) bool { return w == c })
			c.state = childRunning // finish moves it on
			queued = append(queued, c)
		} else {
			running = append(running, c)
		}
	}
	h.mu.Unlock()
	for _, c := range queued {
		// It never started: it ends here, once its turn to be delivered
		// comes.
		h.wg.Go(func() {
			h.finish(c, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &vocab.CancelCause{Kind: vocab.CancelParent}}, false)
		})
	}
	for _, c := range running {
		h.cancelChild(c)
	}
}

// childrenOf returns e's children in the given states.
func (h *Host) childrenOf(e *hosted, states ...childState) []*child {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*child
	for _, c := range e.children {
		if slices.Contains(states, c.state) {
			out = append(out, c)
		}
	}
	return out
}

// cancelChild cancels a child with cause parent: a queued one never
// starts, a running one's turn is cancelled.
func (h *Host) cancelChild(c *child) {
	h.mu.Lock()
	if c.state == childQueued {
		// It never started: it ends here, and its parent hears of it.
		h.waiting = slices.DeleteFunc(h.waiting, func(w *child) bool { return w == c })
		c.state = childRunning // finish moves it on
		h.mu.Unlock()
		h.finish(c, vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &vocab.CancelCause{Kind: vocab.CancelParent}}, false)
		return
	}
	svc := c.svc
	h.mu.Unlock()
	if svc != nil {
		_ = svc.Cancel(vocab.CancelCause{Kind: vocab.CancelParent}, CancelOptions{})
	}
}

// spawn starts (or queues) the child of parent e for a tool call.
func (h *Host) spawn(ctx context.Context, e *hosted, callID, task string, spec spawnSpec) (*child, error) {
	if e.info.Depth+1 > h.opt.MaxSpawnDepth {
		return nil, vocab.Errorf(vocab.CodeToolRefused, "spawn depth limit %d reached: a sub-agent cannot spawn sub-agents; do the task yourself", h.opt.MaxSpawnDepth)
	}
	id := childID(e.info.ID, callID)
	if err := h.watchFrom(ctx, e); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// The spawning turn is being cancelled.
		return nil, context.Cause(ctx)
	}
	h.mu.Lock()
	for _, c := range e.children {
		if c.id == id {
			h.mu.Unlock()
			return c, nil // the same call again
		}
	}
	live := 0 // neither ended nor archived
	for _, c := range e.children {
		if c.state == childQueued || c.state == childRunning {
			live++
		}
	}
	if live >= h.opt.MaxChildren {
		h.mu.Unlock()
		return nil, vocab.Errorf(vocab.CodeToolRefused, "limit of %d live sub-agents reached: wait for one to end (agents_wait) or cancel one (subagents), then spawn again", h.opt.MaxChildren)
	}
	c := &child{id: id, parent: e.info.ID, task: task, state: childQueued, done: make(chan struct{})}
	e.children = append(e.children, c)
	h.specs[id] = spec
	h.mu.Unlock()
	svc, err := h.Open(ctx, id)
	if err != nil {
		h.mu.Lock()
		e.children = slices.DeleteFunc(e.children, func(x *child) bool { return x == c })
		delete(h.specs, id)
		h.mu.Unlock()
		return nil, err
	}
	h.mu.Lock()
	c.svc = svc
	if c.state != childQueued { // cancelled meanwhile
		h.mu.Unlock()
		return c, nil
	}
	if h.running < h.opt.MaxRunningSubAgents {
		h.running++
		c.state = childRunning
		h.mu.Unlock()
		h.start(c)
		return c, nil
	}
	h.waiting = append(h.waiting, c)
	h.mu.Unlock()
	h.log.Info("agentsvc: sub-agent queued", "child", id, "parent", e.info.ID, "running", h.opt.MaxRunningSubAgents)
	return c, nil
}

// start submits a child's task and watches it to its end.
func (h *Host) start(c *child) {
	msg := vocab.UserText(c.task)
	msg.ID = c.id + "/task"
	p, err := c.svc.Submit(msg)
	if err != nil {
		h.end(c, vocab.PromptResult{Kind: vocab.PromptFailed, Err: vocab.AsError(err)})
		return
	}
	h.mu.Lock()
	c.prompt = p
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		res, err := p.Wait(h.ctx)
		if err != nil {
			res = vocab.PromptResult{Kind: vocab.PromptCancelled, Reason: &vocab.CancelCause{Kind: vocab.CancelDisposed}}
		}
		h.end(c, res)
	}()
}

// end records a child's end, frees its slot for the next queued child,
// delivers the end to the parent and arms the archive timer.
func (h *Host) end(c *child, res vocab.PromptResult) { h.finish(c, res, true) }

// finish is end; held says whether the child held a running slot.
func (h *Host) finish(c *child, res vocab.PromptResult, held bool) {
	answer := ""
	h.mu.Lock()
	svc := c.svc
	h.mu.Unlock()
	if svc == nil {
		// Cancelled before it was even opened: nothing to read.
	} else if hist, err := svc.History(context.WithoutCancel(h.ctx)); err == nil {
		for i := hist.Len() - 1; i >= 0; i-- {
			if m := hist.At(i); m.Role == vocab.RoleAssistant && m.Text() != "" {
				answer = m.Text()
				break
			}
		}
	}
	h.mu.Lock()
	c.state, c.result, c.answer = childEnded, res, answer
	if held {
		h.running--
	}
	var next *child
	if len(h.waiting) > 0 && h.running < h.opt.MaxRunningSubAgents && !h.closed {
		next = h.waiting[0]
		h.waiting = h.waiting[1:]
		h.running++
		next.state = childRunning
	}
	var psvc *Service
	if parent := h.sessions[c.parent]; parent != nil {
		psvc = parent.handle()
	}
	// A host that closes closes the parents too: an end then would only
	// wake a parent (a yielded one would resume) on its way out. A later
	// host that reopens the parent delivers it (recoverChildren).
	closing := h.closed
	after, turn := c.after, c.turn
	h.mu.Unlock()
	if next != nil {
		h.start(next)
	}
	if turn != nil {
		defer close(turn)
		select {
		case <-after:
		case <-h.ctx.Done():
		}
		h.mu.Lock()
		closing = h.closed
		h.mu.Unlock()
	}
	if psvc != nil && !closing {
		msg := vocab.UserText(deliveryText(c.id, res, answer))
		msg.ID = c.id + "/delivery"
		n, err := psvc.Notify(msg, NotifyOptions{})
		if err != nil && vocab.CodeOf(err) != vocab.CodeClosed {
			h.log.Error("agentsvc: sub-agent delivery refused", "child", c.id, "err", err)
		}
		h.mu.Lock()
		if !c.consumed {
			c.note = n
		}
		h.mu.Unlock()
	}
	close(c.done)
	h.mu.Lock()
	h.at(h.clock.Now().Add(h.opt.ArchiveAfter), wheelItem{c: c})
	h.mu.Unlock()
}

// archive closes an ended child; its log stays.
func (h *Host) archive(c *child) {
	h.mu.Lock()
	if c.state != childEnded {
		h.mu.Unlock()
		return
	}
	c.state = childArchived
	delete(h.sessions, c.id)
	svc := c.svc
	h.mu.Unlock()
	if svc != nil {
		_ = svc.Close(context.WithoutCancel(h.ctx))
	}
}

// deliveryText is what a parent is told of a child's end.
func deliveryText(id vocab.ID, res vocab.PromptResult, answer string) string {
	switch res.Kind {
	case vocab.PromptCompleted:
		return "[subagent completed] " + string(id) + "\n" + answer
	case vocab.PromptCancelled:
		return "[subagent cancelled] " + string(id) + ": " + res.String()
	}
	return "[subagent failed] " + string(id) + ": " + res.String()
}

// settleWait reads the recorded result of an agents_wait call: when the
// call was cut off (its result is not the one it returned), the ends it
// took are delivered again, so none is lost.
func (h *Host) settleWait(e *hosted, ev vocab.Event) {
	p, ok := ev.Payload.(vocab.ToolPayload)
	if !ok || p.Call.Name != ToolWait || p.Result == nil {
		return
	}
	h.mu.Lock()
	took := e.waits[p.Call.ID]
	delete(e.waits, p.Call.ID)
	h.mu.Unlock()
	if p.Result.IsError && p.Result.Code == vocab.CodeToolAborted {
		for _, c := range took {
			h.redeliver(c)
		}
	}
}

// redeliver delivers a child's end again, after an agents_wait that took
// it was cut off (its result, holding the end, may not be recorded).
func (h *Host) redeliver(c *child) {
	h.mu.Lock()
	var psvc *Service
	if parent := h.sessions[c.parent]; parent != nil {
		psvc = parent.handle()
	}
	c.consumed = false
	res, answer := c.result, c.answer
	h.mu.Unlock()
	if psvc == nil || h.ctx.Err() != nil {
		return
	}
	msg := vocab.UserText(deliveryText(c.id, res, answer))
	msg.ID = c.id + "/delivery-again"
	n, err := psvc.Notify(msg, NotifyOptions{})
	if err != nil {
		if vocab.CodeOf(err) != vocab.CodeClosed && vocab.CodeOf(err) != vocab.CodeDuplicateID {
			h.log.Error("agentsvc: sub-agent delivery refused", "child", c.id, "err", err)
		}
		return
	}
	h.mu.Lock()
	c.note = n
	h.mu.Unlock()
}

// consume takes a child's result for agents_wait: its pending delivery is
// withdrawn, so the parent hears of the end once. It reports false when
// the delivery already reached the parent's conversation.
func (h *Host) consume(c *child) bool {
	h.mu.Lock()
	n := c.note
	c.consumed = true
	h.mu.Unlock()
	if n == nil {
		return true // not delivered yet: end() will not deliver it now
	}
	ok, err := n.Drop()
	return ok && err == nil
}
