package eventlog

import (
	"math"
	"time"
	"unsafe"

	"github.com/loopchart/loopchart/vocab"
)

// The two payloads a session logs most often are held compactly: a
// machine transition (about seven a step) and a model or tool completion
// input (two a step). A vocab.TransitionPayload in an interface is 112
// bytes with five string pointers whose texts are a few dozen names; a
// vocab.Input is 312 bytes (a 320-byte object), nearly all zero. Memory
// keeps instead a transRec (32 bytes, one pointer) or an inRec (80 bytes,
// six pointers, four of them the input's own) in an arena of its own, and
// its record's payload points at it: a pointer in an interface costs no
// allocation, and the boxed payload the log was given becomes garbage at
// once instead of living as long as the log. Reading rebuilds the payload
// as it was appended (equal field by field; see TestMemoryCompactRoundTrip).
//
// A payload that does not fit (a field these records lack is set, a name
// table is full) is held as given.

// transRec is a vocab.TransitionPayload as Memory holds it: its names
// index Memory.names.
type transRec struct {
	instance                          string
	machine, from, to, trigger, guard uint16
	internal                          bool
}

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

// newTrans returns room for one more transRec (under mu).
func (m *Memory) newTrans() *transRec {
	if n := len(m.trans); n == 0 || len(m.trans[n-1]) == cap(m.trans[n-1]) {
		m.trans = append(m.trans, make([]transRec, 0, arenaCap(n)))
	}
	c := &m.trans[len(m.trans)-1]
	*c = (*c)[:len(*c)+1]
	return &(*c)[len(*c)-1]
}

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
// a *transRec or *inRec when ev's payload fits one, else the payload.
func (m *Memory) compact(ev *vocab.Event) any {
	switch p := ev.Payload.(type) {
	case vocab.TransitionPayload:
		var r transRec
		var ok bool
		if r.machine, ok = m.nameIndex(p.Machine); !ok {
			return ev.Payload
		}
		if r.from, ok = m.nameIndex(p.From); !ok {
			return ev.Payload
		}
		if r.to, ok = m.nameIndex(p.To); !ok {
			return ev.Payload
		}
		if r.trigger, ok = m.nameIndex(p.Trigger); !ok {
			return ev.Payload
		}
		if r.guard, ok = m.nameIndex(p.Guard); !ok {
			return ev.Payload
		}
		r.instance, r.internal = p.Instance, p.Internal
		t := m.newTrans()
		*t = r
		return t
	case vocab.Input:
		if !compactInput(&p) {
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
	return ev.Payload
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
	switch r := p.(type) {
	case *transRec:
		return vocab.TransitionPayload{Machine: m.names[r.machine], Instance: r.instance, From: m.names[r.from],
			To: m.names[r.to], Trigger: m.names[r.trigger], Guard: m.names[r.guard], Internal: r.internal}
	case *inRec:
		return vocab.Input{Kind: vocab.InputKind(m.names[r.kind]), At: r.at, ID: r.id, Work: r.work, Reply: r.reply,
			Finish: vocab.FinishReason(m.names[r.finish]), Usage: r.usage, Result: r.result}
	}
	return p
}

// nameIndex returns the index of s in names, adding it when it is new, or
// false when names is full (under mu). The names of machines, states,
// triggers and guards are few, and nearly always the same strings: the
// cache finds one by where its text is (equal pointer and length: equal
// text) without hashing it; a miss looks in the map.
func (m *Memory) nameIndex(s string) (uint16, bool) {
	if len(s) == 0 {
		return 0, true // names[0] is ""
	}
	if m.nameCache == nil {
		m.nameCache = new([128]kindSlot)
		m.nameMap = map[string]uint16{"": 0}
		m.names = []string{""}
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	slot := &m.nameCache[uint64(p)*0x9E3779B97F4A7C15>>57] // 7 bits: 128 slots
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
