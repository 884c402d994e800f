package vocab

import (
	"encoding/binary"
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
	want := []int{4, 8, 16, 32, 64, 128, 157, 157}
	if len(caps) < len(want) {
		t.Fatalf("blocks of %v IDs, want %v first", caps, want)
	}
	for i, w := range want {
		if caps[i] != w {
			t.Fatalf("blocks of %v IDs, want %v first", caps, want)
		}
	}
	for i, id := range ids {
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(at))
		binary.BigEndian.PutUint64(u[8:], uint64(i+1))
		if string(id) != u.String() {
			t.Fatalf("id %d = %s, want %s", i, id, u.String())
		}
	}
}
