package eventlog

import (
	"context"
	"iter"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/loopchart/loopchart/vocab"
)

// Memory is an in-memory Sink and Reader for one session that keeps every
// event it is given: for tests and the demo. It is safe for concurrent use.
//
// Storage grows in chunks allocated on demand: an unused Memory holds no
// event storage at all, and the log never copies an event it holds: chunk
// k has room for 8<<k events up to chunkSize, and is allocated whole when
// the one before it is full.
//
// An event is held as a record of what it does not share with its
// neighbours (16 bytes instead of a vocab.Event's 112, and one pointer
// instead of six): its sequence number is its position, its session the
// log's (see session), its time, turn and step (its stamp) and its kind
// and its payload's type index into small tables, and only its payload's
// value word is its own (an event's id is derived, see vocab.Event.ID);
// a tool machine's transition keeps not even its box, only its edge, in
// those tables, and its instance (see compact.go).
// A whole log holds a record per event it
// ever took, so this is most of what an in-memory session retains, and
// of what the garbage collector scans on every cycle.
type Memory struct {
	mu sync.Mutex
	// chunks hold the events in order; every chunk but the last is full
	// (chunkCap). A record is never changed once appended, so a reader may
	// use a chunk's slice header taken under mu after releasing it.
	chunks [][]record
	n      int
	first  uint64 // seq of the first event held; 0 while empty
	closed bool
	// session is the session of the first event held. An event of
	// another session (which a one-session log does not expect, but
	// takes) has its session in others, by position, and so does one
	// whose turn or step does not fit a stamp (wide).
	session vocab.ID
	others  map[int]vocab.ID
	wide    map[int][2]int
	// stamps and kinds are the distinct stamps (time, turn and step) and
	// pairs of kind and payload type of the events held, which records
	// index (kindCache finds a kind's index).
	stamps     [][]stamp // in pages of stampPage (the first grows to it), never copied once full
	nstamps    int
	last       stamp // stamps' last entry (when nstamps > 0), compared without finding its page
	kinds      []kindType
	kindCache  *[kindSlots]kindSlot // the template's or its own, from the first append (see template.go)
	kindMisses int                  // events whose kind the cache did not hold (tests)
	kindIndex  map[kindType]uint32  // kinds by pair, once there are more than kindScan
	// published is how many of kinds the template held when the log
	// adopted it or last published its own (see template);
	// sharedKinds and sharedEdges are set while the kind and edge caches
	// are the template's, which the log copies before it changes them.
	published                int
	sharedKinds, sharedEdges bool

	// compact holds tool transitions as their edge and instance (see
	// compact.go).
	compact compact

	// Failure injection (FailAfter).
	failArmed bool
	failLeft  int
	failErr   error
}

var (
	_ Sink   = (*Memory)(nil)
	_ Reader = (*Memory)(nil)
)

const (
	// chunkSize is the number of events in a full chunk (8 KB of records).
	chunkSize = 512
	// firstChunkCap is the room of the first chunk; each next one has
	// twice as much, up to chunkSize.
	firstChunkCap = 8
	// geomChunks chunks grow (8, 16, ... 256); geomEvents events fill them.
	geomChunks = 6
	geomEvents = firstChunkCap * (1<<geomChunks - 1)
)

// record is an event as Memory holds it (see Memory). Its stamp and kind
// are indexes into the log's tables (the events of a step share their
// time, turn and step; kinds are few, and so are the types of their
// payloads), so the collector, which visits every record of a log on each
// of its cycles, finds one pointer in it (the payload's value) instead of
// six.
type record struct {
	data  unsafe.Pointer // the payload's value word (its type is in kinds)
	stamp uint32         // index in stamps
	kind  uint32         // index in kinds (the record is 16 bytes with a uint16 too)
}

// kindType is an entry of Memory.kinds: an event kind and the dynamic type
// of its payload (the type word of an interface holding it; nil for a nil
// payload). A kind is nearly always logged with one payload type. An entry
// with an edge is the edge of tool transitions held compactly (see
// compact.go): its records point to their instance.
type kindType struct {
	kind vocab.EventKind
	typ  unsafe.Pointer
	edge *vocab.TransitionPayload
}

// eface is the layout of an interface{} value (runtime.eface): a record
// keeps the value word, the log's kinds the type word.
type eface struct {
	typ, data unsafe.Pointer
}

// stamp is the time, turn and step that consecutive events share.
type stamp struct {
	at         time.Time
	turn, step int32
}

// memoryCap is the most events a Memory holds: a record indexes its stamp
// and its kind with a uint32, and a log has at most a stamp and a kind per
// event. A variable, so that a test can make it small.
var memoryCap uint64 = math.MaxUint32

// fits reports whether n fits a stamp's turn or step.
func fits(n int) bool { return n >= math.MinInt32 && n <= math.MaxInt32 }

// event rebuilds the idx-th event held from its record.
func (m *Memory) event(idx int, r *record) vocab.Event {
	st := &m.stamps[r.stamp/stampPage][r.stamp%stampPage]
	kt := &m.kinds[r.kind]
	var payload any
	if kt.edge != nil {
		tp := *kt.edge
		tp.Instance = *(*string)(r.data)
		payload = tp
	} else {
		pl := (*eface)(unsafe.Pointer(&payload))
		pl.typ, pl.data = kt.typ, r.data
	}
	ev := vocab.Event{Session: m.session, Seq: m.first + uint64(idx), At: st.at, Kind: kt.kind,
		Turn: int(st.turn), Step: int(st.step), Payload: payload}
	if m.others != nil || m.wide != nil {
		m.exceptions(idx, &ev)
	}
	return ev
}

// addStamp adds ev's stamp to stamps and returns its index.
func (m *Memory) addStamp(ev *vocab.Event) uint32 {
	if m.nstamps%stampPage == 0 {
		// The first page grows as a slice does (a short log holds a
		// short one), the others are made whole.
		n := stampPage
		if m.nstamps == 0 {
			n = 8
		}
		m.stamps = append(m.stamps, make([]stamp, 0, n))
	}
	page := &m.stamps[len(m.stamps)-1]
	m.last = stamp{at: ev.At, turn: int32(ev.Turn), step: int32(ev.Step)}
	*page = append(*page, m.last)
	m.nstamps++
	return uint32(m.nstamps - 1)
}

// ofSession reports whether id is the session of the log's first event.
// An equal id whose text is stored elsewhere (a session core decodes its
// configuration, and with it a copy of its id, after its first event)
// becomes the one the log keeps, so the next events' ids compare by
// pointer instead of byte by byte.
func (m *Memory) ofSession(id vocab.ID) bool {
	return len(id) == len(m.session) && unsafe.StringData(string(id)) == unsafe.StringData(string(m.session)) || m.adoptSession(id)
}

// adoptSession is ofSession for an id whose text is not the log's.
func (m *Memory) adoptSession(id vocab.ID) bool {
	if id != m.session {
		return false
	}
	m.session = id
	return true
}

// stampPage is the number of stamps in a page of Memory.stamps.
const stampPage = 256

// The kind cache: kindSlots entries, each pair of kind text and payload
// type in one of two (kindHash). With a single place per kind, two of the
// twenty-odd kinds of a session share one in nearly every layout of the
// binary's strings and evict each other at every step (that cost a scan of
// kinds several times a step); with two, and an entry moved to its other
// place to make room, that is rare (kindSlots is four times the kinds of
// a step).
const kindSlots = 128

// kindScan is the most pairs of kind and payload type a miss of the kind
// cache looks up one by one; past it the log keeps a map of them (a
// session logs about twenty).
const kindScan = 48

// kindHash returns the two places of the kind whose text is at p.
func kindHash(p uintptr) (first, second int) {
	h := uint64(p) * 0x9E3779B97F4A7C15
	return int(h >> 57), int(h >> 50 & (kindSlots - 1))
}

// kindMiss returns the index of kind k with payload type typ in kinds, for
// a pair the kind cache's first place for p, the address of k's text, does
// not hold: the second place, or else a look at the pairs one by one (a
// map for every log would cost each a kilobyte or two; past kindScan pairs
// the log keeps one), adding the pair when it is new; the answer is
// cached.
func (m *Memory) kindMiss(k vocab.EventKind, typ unsafe.Pointer, p uintptr) uint32 {
	first, second := kindHash(p)
	if s := &m.kindCache[second]; s.p == p && int(s.n) == len(k) && p != 0 && m.kinds[s.idx].typ == typ {
		return s.idx
	}
	m.kindMisses++
	kt := kindType{kind: k, typ: typ}
	var idx int
	if m.kindIndex != nil {
		i, ok := m.kindIndex[kt]
		idx = int(i)
		if !ok {
			idx = -1
		}
	} else {
		idx = slices.Index(m.kinds, kt)
	}
	if idx < 0 {
		idx = len(m.kinds)
		m.kinds = append(m.kinds, kt)
		if m.kindIndex != nil {
			m.kindIndex[kt] = uint32(idx)
		} else if len(m.kinds) > kindScan {
			// Past a few dozen pairs a scan per miss would make a log
			// of many kinds quadratic: index them all.
			m.kindIndex = make(map[kindType]uint32, 2*len(m.kinds))
			for i, e := range m.kinds {
				m.kindIndex[e] = uint32(i)
			}
		}
	}
	// The cache keeps only the text kinds holds (and so keeps alive): the
	// text of another string could be freed and its place reused.
	if p != 0 && p == uintptr(unsafe.Pointer(unsafe.StringData(string(m.kinds[idx].kind)))) && len(k) <= math.MaxUint32 {
		m.cacheKind(kindSlot{p: p, n: uint32(len(k)), idx: uint32(idx)}, first, second)
	}
	return uint32(idx) // kinds cannot outgrow a uint32: each pair is made by events held
}

// cacheKind puts e in the kind cache at its first or second place: a free
// one, or one it makes free by moving the entry there to that entry's
// other place, or else the first.
func (m *Memory) cacheKind(e kindSlot, first, second int) {
	m.ownKinds()
	c := m.kindCache
	for _, i := range [2]int{first, second} {
		if c[i].p == 0 {
			c[i] = e
			return
		}
	}
	for _, i := range [2]int{first, second} {
		a, b := kindHash(c[i].p)
		other := a
		if other == i {
			other = b
		}
		if c[other].p == 0 {
			c[other], c[i] = c[i], e
			return
		}
	}
	c[first] = e
}

// kindSlot is an entry of Memory's kind cache (p is 0 in a free one).
type kindSlot struct {
	p   uintptr
	n   uint32
	idx uint32
}

// exceptions puts in ev what its record could not hold (under mu).
func (m *Memory) exceptions(idx int, ev *vocab.Event) {
	if s, ok := m.others[idx]; ok {
		ev.Session = s
	}
	if w, ok := m.wide[idx]; ok {
		ev.Turn, ev.Step = w[0], w[1]
	}
}

// chunkCap is the room of chunk k.
func chunkCap(k int) int {
	if k >= geomChunks {
		return chunkSize
	}
	return firstChunkCap << k
}

// locate returns the chunk holding the idx-th event held, and its offset
// there.
func locate(idx int) (chunk, off int) {
	if idx >= geomEvents {
		idx -= geomEvents
		return geomChunks + idx/chunkSize, idx % chunkSize
	}
	k := bits.Len(uint(idx/firstChunkCap+1)) - 1
	return k, idx - firstChunkCap*(1<<k-1)
}

// NewMemory returns an empty in-memory log.
func NewMemory() *Memory { return &Memory{} }

// Append implements Sink. It copies batch. The first event ever appended
// may have any sequence number ≥ 1 (a session reopened from a log continues
// its sequence); every later event must continue it without a gap or a
// repeat. A batch that breaks this returns an error with code
// vocab.CodeBadInput and appends nothing. After Close, Append returns an
// error with code vocab.CodeClosed. A batch that would take the log past
// 2^32−1 events returns an error with code vocab.CodeAppendFailed and
// appends nothing. An empty batch appends nothing and returns nil (unless
// the log is closed). Memory never blocks, so ctx is not consulted.
func (m *Memory) Append(_ context.Context, batch []vocab.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return vocab.Errorf(vocab.CodeClosed, "eventlog: memory log is closed")
	}
	if len(batch) == 0 {
		return nil
	}
	want := m.first + uint64(m.n)
	if m.n == 0 {
		if batch[0].Seq == 0 {
			return vocab.Errorf(vocab.CodeBadInput, "eventlog: event seq 0 at batch index 0: sequence numbers start at 1")
		}
		want = batch[0].Seq
	}
	for i := range batch {
		if seq := batch[i].Seq; seq != want {
			what := "gap"
			if seq < want {
				what = "repeat"
			}
			return vocab.Errorf(vocab.CodeBadInput, "eventlog: event seq %d at batch index %d, want %d (%s)", seq, i, want, what)
		}
		want++
	}
	if uint64(m.n)+uint64(len(batch)) > memoryCap {
		return vocab.Errorf(vocab.CodeAppendFailed, "eventlog: memory log full: it holds at most %d events", memoryCap)
	}
	if m.failArmed {
		if len(batch) > m.failLeft {
			m.failLeft = 0 // sticky: every later non-empty batch fails too
			return m.failErr
		}
		m.failLeft -= len(batch)
	}
	if m.n == 0 {
		m.first, m.session = batch[0].Seq, batch[0].Session
	}
	if m.kindCache == nil {
		m.adopt()
	}
	for len(batch) > 0 {
		if n := len(m.chunks); n == 0 || len(m.chunks[n-1]) == chunkCap(n-1) {
			m.chunks = append(m.chunks, make([]record, 0, chunkCap(n)))
		}
		c := &m.chunks[len(m.chunks)-1]
		k := min(cap(*c)-len(*c), len(batch))
		for i := range batch[:k] {
			ev := &batch[i]
			// The stamp: the last one added, when the event shares it
			// (events come in time order, a step's events at one time);
			// wide holds turn and step when they do not fit.
			st := uint32(m.nstamps - 1)
			if m.nstamps == 0 || m.last.turn != int32(ev.Turn) || m.last.step != int32(ev.Step) || m.last.at != ev.At {
				st = m.addStamp(ev)
			}
			// The kind: nearly always one of vocab's constants, which the
			// cache finds by where its text is (equal pointer and length:
			// equal text) without hashing it; the entry it finds must
			// have the payload's type too.
			pl := (*eface)(unsafe.Pointer(&ev.Payload))
			p := uintptr(unsafe.Pointer(unsafe.StringData(string(ev.Kind))))
			slot := &m.kindCache[uint64(p)*0x9E3779B97F4A7C15>>57] // its first place (kindHash)
			kind := slot.idx
			if slot.p != p || int(slot.n) != len(ev.Kind) || p == 0 || m.kinds[kind].typ != pl.typ {
				kind = m.kindMiss(ev.Kind, pl.typ, p)
			}
			data := pl.data
			if pl.typ == transitionTyp && len((*vocab.TransitionPayload)(data).Instance) != 0 && p == transitionText &&
				len(ev.Kind) == len(vocab.EventTransition) {
				// A tool's transition: held as its edge and instance.
				kind, data = m.transition((*vocab.TransitionPayload)(data))
			}
			*c = append(*c, record{data: data, stamp: st, kind: kind})
			if !m.ofSession(ev.Session) {
				if m.others == nil {
					m.others = map[int]vocab.ID{}
				}
				m.others[m.n] = ev.Session
			}
			if !fits(ev.Turn) || !fits(ev.Step) {
				if m.wide == nil {
					m.wide = map[int][2]int{}
				}
				m.wide[m.n] = [2]int{ev.Turn, ev.Step}
			}
			m.n++
		}
		batch = batch[k:]
	}
	if len(m.kinds) > m.published && len(m.kinds) <= templateKinds {
		m.publish()
	}
	return nil
}

// Since implements Reader. It yields the events from seq from onwards that
// were appended when the iteration started. Asking for a sequence number
// before the first event held (a log that started at a later seq) yields a
// single error matching ErrDropped that names from, rather than silently
// starting later. A done ctx ends the stream with (zero Event,
// context.Cause(ctx)).
func (m *Memory) Since(ctx context.Context, from uint64) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		from = max(from, 1)
		m.mu.Lock()
		first, end := m.first, m.first+uint64(m.n) // end is exclusive
		m.mu.Unlock()
		if end == first {
			return // nothing durable yet
		}
		if from < first {
			yield(vocab.Event{}, dropped(from, "this log starts at seq %d", first))
			return
		}
		for seq := from; seq < end; {
			select {
			case <-ctx.Done():
				yield(vocab.Event{}, context.Cause(ctx))
				return
			default:
			}
			idx := int(seq - first)
			m.mu.Lock()
			ci, off := locate(idx)
			c := m.chunks[ci]
			stop := min(len(c), off+int(end-seq))
			// A visit rebuilds at most readAhead events under the lock (a
			// small buffer: it lives on the reader's stack).
			var buf [readAhead]vocab.Event
			k := min(stop-off, len(buf))
			for j := range k {
				buf[j] = m.event(idx+j, &c[off+j])
			}
			m.mu.Unlock()
			for j := range k {
				if !yield(buf[j], nil) {
					return
				}
			}
			seq += uint64(k)
		}
	}
}

// Len returns the number of events held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Events returns a copy of every event held, in order. It is meant for
// tests.
func (m *Memory) Events() []vocab.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]vocab.Event, 0, m.n)
	for _, c := range m.chunks {
		for i := range c {
			out = append(out, m.event(len(out), &c[i]))
		}
	}
	return out
}

// Close makes every later Append fail with code vocab.CodeClosed. The
// events held stay readable. Close is idempotent.
func (m *Memory) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
}

// FailAfter is a test aid for the lane's handling of a failed append: after
// n more events have been appended successfully, Append returns err, and
// keeps returning it for every later non-empty batch. A batch is
// all-or-nothing: a batch that would take the count past n appends nothing
// and returns err. FailAfter(n, nil) turns the injection off; a negative n
// counts as 0.
func (m *Memory) FailAfter(n int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failArmed = err != nil
	m.failLeft = max(n, 0)
	m.failErr = err
}
