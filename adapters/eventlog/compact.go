package eventlog

import (
	"unsafe"

	"github.com/loopchart/loopchart/vocab"
)

// A tool machine's transition is the one payload a session logs several
// times a step that the session core cannot share: its Instance (the tool
// call's id) makes each one a box of its own, a 104-byte
// vocab.TransitionPayload with six strings, which a log would keep as
// long as it lives (four a tool call, over a tenth of what a long session
// retains, and much of what the collector scans in it). The rest of it,
// the edge (machine, states, trigger, guard), is one of the few of its
// machine.
//
// So Memory holds such a transition as its edge and its instance: the
// edge is an entry of the log's kinds (made on the edge's first
// transition, and found again by where its names' texts are, as a kind
// is), the instance a string header in the log's own pages, one per run
// of transitions of the same call, which the record points to. The box
// the log was given becomes garbage once its batch is delivered. Reading
// rebuilds the payload, equal field by field to the one appended
// (TestMemoryRoundTripEveryKind, TestMemoryToolTransitions).

// transitionTyp is vocab.TransitionPayload's type word (see eface).
var transitionTyp = func() unsafe.Pointer {
	var x any = vocab.TransitionPayload{}
	return (*eface)(unsafe.Pointer(&x)).typ
}()

const (
	// edgeSlots is the size of the edge cache: a tool machine has about
	// twenty edges, a step takes four.
	edgeSlots = 64
	// instPage is the most instance headers in a page of Memory.insts (a
	// page is never copied, so a record may point into it). Pages grow
	// from instFirst, doubling: a short log holds a short page.
	instPage  = 64
	instFirst = 4
)

// edgeSlot is an entry of the edge cache: an edge kinds holds (nil: a
// free slot) and its index there.
type edgeSlot struct {
	edge *vocab.TransitionPayload
	idx  uint32
}

// compact holds the state of the compact transitions of a Memory.
type compact struct {
	cache *[edgeSlots]edgeSlot // made on the first compact transition
	// edges finds an edge's kinds index by value (the payload with no
	// instance) when the cache does not hold it.
	edges map[vocab.TransitionPayload]uint32
	// insts are the instances, in pages of instPage; last is the latest
	// one, which the next transition of the same call shares.
	insts [][]string
	last  *string
}

// textOf is where s's text is.
func textOf(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }

// transitionText is where vocab.EventTransition's text is: the core logs
// a transition under the constant.
var transitionText = textOf(string(vocab.EventTransition))

// same reports whether a and b are the same text by where it is: of the
// same length at the same place (a text the log keeps alive is never
// changed, and its place never reused while it lives).
func same(a, b string) bool { return len(a) == len(b) && textOf(a) == textOf(b) }

// sameEdge reports whether e and tp have the same edge by where its texts
// are (see same).
func sameEdge(e, tp *vocab.TransitionPayload) bool {
	return same(e.From, tp.From) && same(e.To, tp.To) && same(e.Trigger, tp.Trigger) && same(e.Machine, tp.Machine) &&
		same(e.Guard, tp.Guard) && e.Internal == tp.Internal
}

// edgeHash is the place of an edge in the cache.
func edgeHash(from, to, trigger uintptr) int {
	return int((from ^ to<<1 ^ trigger<<2) * 0x9E3779B97F4A7C15 >> 58)
}

// transition returns the kinds index and the record's value word of tool
// transition tp (Instance not empty), logged as vocab.EventTransition.
func (m *Memory) transition(tp *vocab.TransitionPayload) (uint32, unsafe.Pointer) {
	c := &m.compact
	if c.cache == nil {
		c.cache = new([edgeSlots]edgeSlot)
	}
	h := edgeHash(textOf(tp.From), textOf(tp.To), textOf(tp.Trigger))
	var idx uint32
	// sameEdge, written out: a call would cost a third of the lookup.
	if s := &c.cache[h]; s.edge != nil && same(s.edge.From, tp.From) && same(s.edge.To, tp.To) && same(s.edge.Trigger, tp.Trigger) &&
		same(s.edge.Machine, tp.Machine) && same(s.edge.Guard, tp.Guard) && s.edge.Internal == tp.Internal {
		idx = s.idx
	} else {
		idx = m.edgeMiss(tp, h)
	}
	inst := c.last
	if inst == nil || !same(*inst, tp.Instance) {
		if n := len(c.insts); n == 0 || len(c.insts[n-1]) == cap(c.insts[n-1]) {
			size := instFirst
			if n > 0 {
				size = min(2*cap(c.insts[n-1]), instPage)
			}
			c.insts = append(c.insts, make([]string, 0, size))
		}
		page := &c.insts[len(c.insts)-1]
		*page = append(*page, tp.Instance)
		inst = &(*page)[len(*page)-1]
		c.last = inst
	}
	return idx, unsafe.Pointer(inst)
}

// edgeMiss returns the kinds index of tp's edge, adding it when it is new,
// and caches it at place h when tp's texts are those kinds holds (the
// cache compares texts by where they are: a text the log does not keep
// alive could be freed and its place reused by another).
func (m *Memory) edgeMiss(tp *vocab.TransitionPayload, h int) uint32 {
	c := &m.compact
	if c.edges == nil {
		// The edges the log's kinds hold already (from a template):
		// indexed on the log's first miss.
		c.edges = map[vocab.TransitionPayload]uint32{}
		for i, e := range m.kinds {
			if e.edge != nil {
				c.edges[*e.edge] = uint32(i)
			}
		}
	}
	key := *tp
	key.Instance = ""
	idx, ok := c.edges[key]
	if !ok {
		idx = uint32(len(m.kinds))
		m.kinds = append(m.kinds, kindType{kind: vocab.EventTransition, typ: transitionTyp, edge: &key})
		c.edges[key] = idx
	}
	if e := m.kinds[idx].edge; sameEdge(e, tp) {
		m.ownEdges()
		c.cache[h] = edgeSlot{edge: e, idx: idx}
	}
	return idx
}
