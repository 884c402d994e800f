package vocab

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestArenaGrows checks that an ID source's text blocks start small and
// double up to arenaMax IDs, and that every ID keeps its text while later
// blocks are made.
func TestArenaGrows(t *testing.T) {
	var s SeqSource
	at := time.Unix(1700000000, 0)
	var ids []ID
	var caps []int
	for range 700 {
		ids = append(ids, s.NewID(at))
		if len(s.arena.buf) == ulid.EncodedSize { // the ID opened a block
			caps = append(caps, cap(s.arena.buf)/ulid.EncodedSize)
		}
	}
	wantFirst(t, "IDs", caps, []int{4, 8, 16, 32, 64, 128, 157, 157})
	for i, id := range ids {
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(at))
		binary.BigEndian.PutUint64(u[8:], uint64(i+1))
		if string(id) != u.String() {
			t.Fatalf("id %d = %s, want %s", i, id, u.String())
		}
	}
}

// wantFirst fails t unless got starts with want (the sizes of blocks, in
// unit).
func wantFirst(t *testing.T, unit string, got, want []int) {
	t.Helper()
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("blocks of %v %s, want %v first", got, unit, want)
	}
}
