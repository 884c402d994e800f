package vocab

import (
	"strconv"
	"testing"
)

// TestEventIDsGrow checks that EventIDs' blocks start small and double up
// to eventIDBlock, that an id longer than a block gets a block of its own,
// and that every id keeps its text while later blocks are made.
func TestEventIDsGrow(t *testing.T) {
	var a EventIDs
	var ids []ID
	var sizes []int
	for n := range 300 {
		ids = append(ids, a.ID("session", uint64(n+1)))
		if len(a.buf) == len(ids[n]) { // the id opened a block
			sizes = append(sizes, cap(a.buf))
		}
	}
	wantFirst(t, "bytes", sizes, []int{64, 128, 256, 512, 512})
	for n, id := range ids {
		if want := EventID("session", uint64(n+1)); id != want {
			t.Fatalf("id %d = %q, want %q", n, id, want)
		}
	}
	// Released, the next block is as large as the last one was.
	a.Release()
	if id := a.ID("session", 1); len(a.buf) != len(id) || cap(a.buf) != eventIDBlock || id != EventID("session", 1) {
		t.Fatalf("after Release: %q, block of %d, want %d", id, cap(a.buf), eventIDBlock)
	}
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'x'
	}
	if id := a.Join(string(long), "-", strconv.Itoa(1)); len(id) != 2002 || len(a.buf) != 2002 {
		t.Fatalf("a 2,002-byte id: %d bytes, block of %d", len(id), len(a.buf))
	}
}
