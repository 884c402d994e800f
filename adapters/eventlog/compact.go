package eventlog

import (
	"math"
	"time"
	"unsafe"

	"github.com/loopchart/loopchart/vocab"
)

// A model or tool completion input (two a step, each a vocab.Input of 312
// bytes, a 320-byte object in an interface, nearly all zero, which a log
// would otherwise keep as long as it lives) is held compactly: Memory
// keeps instead an inRec (80 bytes; its pointers are the input's own) in
// an arena of its own, and the record's payload points at it (a pointer
// in an interface costs no allocation), so the input's box becomes garbage
// at once. Reading rebuilds the input as it was appended (equal field by
// field; see TestMemoryCompactRoundTrip). An input that sets a field inRec
// lacks, or whose names do not fit the table, is held as given, as is
// every other payload.
//
// Transitions (about eleven a step) are held as given: a 16-byte
// pointer-free form retained less, but interning their five names per
// transition cost more CPU than the smaller heap saved (the session core
// already shares the boxes of most of them), and the concurrent benchmark
// got slower.

// inRec is a vocab.Input as Memory holds it, when it sets no field but
// these (see compactInput). Its kind and finish index Memory.names.
type inRec struct {
	at     time.Time
	id     vocab.ID
	work   uint64
	reply  *vocab.Message
	usage  *vocab.Usage
	result *vocab.ToolResult
	kind   uint16
	finish uint16
}

// arenaCap is the room of the next arena chunk after n chunks: 16, 32,
// ... up to 256 records.
func arenaCap(n int) int { return 16 << min(n, 4) }

// newIn returns room for one more inRec (under mu).
func (m *Memory) newIn() *inRec {
	if n := len(m.ins); n == 0 || len(m.ins[n-1]) == cap(m.ins[n-1]) {
		m.ins = append(m.ins, make([]inRec, 0, arenaCap(n)))
	}
	c := &m.ins[len(m.ins)-1]
	*c = (*c)[:len(*c)+1]
	return &(*c)[len(*c)-1]
}

// compact returns what the record of ev holds as its payload (under mu):
// an *inRec when ev's payload fits one, else the payload.
func (m *Memory) compact(ev *vocab.Event) any {
	p, ok := ev.Payload.(vocab.Input)
	if !ok || !compactInput(&p) {
		return ev.Payload
	}
	kind, ok := m.nameIndex(string(p.Kind))
	if !ok {
		return ev.Payload
	}
	finish, ok := m.nameIndex(string(p.Finish))
	if !ok {
		return ev.Payload
	}
	r := m.newIn()
	*r = inRec{at: p.At, id: p.ID, work: p.Work, reply: p.Reply, usage: p.Usage, result: p.Result, kind: kind, finish: finish}
	return r
}

// compactInput reports whether an inRec holds in: every field it lacks is
// zero (a nil slice, not an empty one; a positive zero Jitter).
func compactInput(in *vocab.Input) bool {
	return in.Message == nil && in.Key == "" && !in.Bypass && in.Target == "" &&
		in.Cause == nil && !in.KeepInbox && !in.Resume && in.Parts == nil && in.Err == nil &&
		math.Float64bits(in.Jitter) == 0 && in.Text == "" && in.Hook == nil && in.Slots == nil &&
		in.Stuck == nil && in.Config == nil && in.Approval == nil
}

// payload returns the payload a record holds as p (under mu).
func (m *Memory) payload(p any) any {
	if r, ok := p.(*inRec); ok {
		return vocab.Input{Kind: vocab.InputKind(m.names[r.kind]), At: r.at, ID: r.id, Work: r.work, Reply: r.reply,
			Finish: vocab.FinishReason(m.names[r.finish]), Usage: r.usage, Result: r.result}
	}
	return p
}

// nameIndex returns the index of s in names, adding it when it is new, or
// false when names is full (under mu). The names (input kinds, finish
// reasons) are few, and nearly always the same strings: the cache finds
// one by where its text is (equal pointer and length: equal text) without
// hashing it; a miss looks in the map.
func (m *Memory) nameIndex(s string) (uint16, bool) {
	if len(s) == 0 {
		return 0, true // names[0] is ""
	}
	if m.nameCache == nil {
		m.nameCache = new([16]kindSlot)
		m.nameMap = map[string]uint16{"": 0}
		m.names = []string{""}
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	slot := &m.nameCache[uint64(p)*0x9E3779B97F4A7C15>>60] // 4 bits: 16 slots
	if slot.p == p && int(slot.n) == len(s) {
		return slot.idx, true
	}
	idx, ok := m.nameMap[s]
	if !ok {
		if len(m.names) > math.MaxUint16 {
			return 0, false
		}
		idx = uint16(len(m.names))
		m.names = append(m.names, s)
		m.nameMap[s] = idx
	}
	// The cache keeps only the text names holds (and so keeps alive): the
	// text of another string could be freed and its place reused.
	if p == uintptr(unsafe.Pointer(unsafe.StringData(m.names[idx]))) && len(s) <= math.MaxUint32 {
		*slot = kindSlot{p: p, n: uint32(len(s)), idx: idx}
	}
	return idx, true
}
