package vocab

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"sync"
	"time"
	"unsafe"

	"github.com/oklog/ulid/v2"
)

// ID is a ULID rendered as its 26-character Crockford base32 string. IDs of
// one source sort by creation time.
type ID string

// IDSource makes IDs. The engine takes one as a dependency so that tests can
// make deterministic IDs; the pure core never makes IDs itself, it receives
// them on triggers.
type IDSource interface {
	// NewID returns a fresh ID stamped with t.
	NewID(t time.Time) ID
}

// ULIDSource is an IDSource backed by github.com/oklog/ulid/v2 with
// monotonic entropy, so IDs made within the same millisecond still sort in
// creation order. It is safe for concurrent use.
type ULIDSource struct {
	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
	arena   arena
}

// arena renders IDs into shared, append-only text blocks: one allocation
// per 157 IDs instead of one per ID. Bytes are never changed once an ID has
// been cut from them, so the strings stay immutable.
//
// Blocks grow from 4 IDs to 157, doubling: a source that makes a handful
// of IDs (a session's own, say) keeps a block of 104 bytes alive, not one
// of 4 KB.
type arena struct {
	buf  []byte
	next int // IDs in the next block; 0 before the first
}

const (
	arenaFirst = 4
	arenaMax   = 157
)

func (a *arena) text(id ulid.ULID) ID {
	if cap(a.buf)-len(a.buf) < ulid.EncodedSize {
		n := max(a.next, arenaFirst)
		a.buf = make([]byte, 0, n*ulid.EncodedSize)
		a.next = min(2*n, arenaMax)
	}
	start := len(a.buf)
	a.buf = a.buf[:start+ulid.EncodedSize]
	dst := a.buf[start : start+ulid.EncodedSize : start+ulid.EncodedSize]
	_ = id.MarshalTextTo(dst)
	return ID(unsafe.String(&dst[0], len(dst)))
}

// NewULIDSource returns a ULIDSource that draws entropy from r. A nil r uses
// crypto/rand. Pass a deterministic reader to make reproducible IDs.
func NewULIDSource(r io.Reader) *ULIDSource {
	if r == nil {
		r = rand.Reader
	}
	return &ULIDSource{entropy: ulid.Monotonic(r, 0)}
}

// NewID implements IDSource. If the entropy source fails, the ID falls back to
// the zero entropy for that millisecond rather than failing the caller.
func (s *ULIDSource) NewID(t time.Time) ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := ulid.New(ulid.Timestamp(t), s.entropy)
	if err != nil {
		id = ulid.ULID{}
		_ = id.SetTime(ulid.Timestamp(t))
	}
	return s.arena.text(id)
}

// SeqSource is a deterministic IDSource for tests: the entropy of the n-th
// ID is n, so IDs are reproducible across runs and sort in creation order
// even when t does not move. It is safe for concurrent use.
type SeqSource struct {
	mu    sync.Mutex
	n     uint64
	arena arena
}

// NewID implements IDSource.
func (s *SeqSource) NewID(t time.Time) ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t))
	binary.BigEndian.PutUint64(id[8:], s.n)
	return s.arena.text(id)
}

// ParseID reports whether s is a well-formed ULID string and returns it as an
// ID. Malformed input yields an *Error with code CodeBadInput.
func ParseID(s string) (ID, error) {
	if _, err := ulid.ParseStrict(s); err != nil {
		return "", Errorf(CodeBadInput, "bad id %q: %v", s, err)
	}
	return ID(s), nil
}
