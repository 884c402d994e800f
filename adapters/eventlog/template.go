package eventlog

import (
	"slices"
	"sync/atomic"
)

// A new log would find each kind of its session's events missing from its
// kind cache once (a scan of its kinds with string compares, over twenty
// times a new session), and each edge of the tool machine missing from
// its edge cache (a map lookup and insert of a six-string key): about a
// tenth of the instructions of a new session's first three-step prompt,
// and the same tables built again in every session, though every session
// of a process logs the same few kinds and edges.
//
// So a new Memory starts from a template: the kinds, the kind cache and
// the edge cache of the log that held the most kinds so far, up to
// templateKinds of them. The template is immutable and shared: a log
// appends to its kinds by copying them (their capacity is their length),
// and uses the template's two caches until it must change one, when it
// makes it its own copy (most logs never do). Shared, the caches stay in
// the processor's cache from one session to the next, where each log's
// own copy (3 KB) was cold when its session's first prompt read it: in
// callgrind's cache simulation of such prompts (a 1 MB last-level cache)
// the log's misses of that cache fell from 31 to 6 a prompt. A cache
// entry finds a kind or an edge by where its texts are, which is sound
// because the template's kinds keep those texts alive (see kindMiss). A
// log whose kinds outgrow the template's publishes its own, so the
// template grows until it holds what a session logs, and then stays.

// templateKinds is the most kinds a template holds: a session logs about
// twenty pairs of kind and payload type and a tool machine's edges, and
// a template keeps its kinds' texts alive for as long as the process
// runs, so a log of kinds made at run time does not make it grow without
// bound.
const templateKinds = 96

// template is what a new Memory starts from (see above).
type template struct {
	kinds []kindType // never appended to in place: len == cap
	cache [kindSlots]kindSlot
	edges [edgeSlots]edgeSlot
}

// memTemplate is the current template (nil until a log publishes one).
var memTemplate atomic.Pointer[template]

// adopt gives a new log its kind cache, and the template's kinds and
// caches when there is one (under mu).
func (m *Memory) adopt() {
	t := memTemplate.Load()
	if t == nil {
		m.kindCache = new([kindSlots]kindSlot)
		return
	}
	m.kinds = t.kinds
	m.published = len(t.kinds)
	m.kindCache, m.compact.cache = &t.cache, &t.edges
	m.sharedKinds, m.sharedEdges = true, true
}

// ownKinds makes the log's kind cache its own before it changes it.
func (m *Memory) ownKinds() {
	if m.sharedKinds {
		own := *m.kindCache
		m.kindCache, m.sharedKinds = &own, false
	}
}

// ownEdges makes the log's edge cache its own before it changes it.
func (m *Memory) ownEdges() {
	if m.sharedEdges {
		own := *m.compact.cache
		m.compact.cache, m.sharedEdges = &own, false
	}
}

// publish makes the log's kinds and caches the template, unless another
// log has published as many kinds or more (under mu).
func (m *Memory) publish() {
	m.published = len(m.kinds)
	if old := memTemplate.Load(); old != nil && len(old.kinds) >= len(m.kinds) {
		return // as many kinds or more already: nothing to build
	}
	t := &template{kinds: slices.Clip(slices.Clone(m.kinds)), cache: *m.kindCache}
	if m.compact.cache != nil {
		t.edges = *m.compact.cache
	}
	for {
		old := memTemplate.Load()
		if old != nil && len(old.kinds) >= len(t.kinds) {
			return
		}
		if memTemplate.CompareAndSwap(old, t) {
			return
		}
	}
}
