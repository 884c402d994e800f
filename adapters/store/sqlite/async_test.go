package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// Asynchronous appends of one session commit in the order they were
// queued; a wait reports its own append's outcome; a later append behind a
// failed one fails too, and nothing of either is stored.
func TestAppendAsyncKeepsOrder(t *testing.T) {
	st, _ := openTemp(t, Options{})
	ctx := context.Background()
	claim, _, err := st.Claim(ctx, "s", "w", true)
	if err != nil {
		t.Fatal(err)
	}
	evs := storetest.Fixture("s", 30, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var waits []func(context.Context) error
	for i := 0; i < 30; i += 10 {
		waits = append(waits, st.AppendAsync(ctx, "s", claim, evs[i:i+10]))
	}
	for i, w := range waits {
		if err := w(ctx); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	n := uint64(0)
	for r, err := range st.Read(ctx, "s", 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if r.Seq != n {
			t.Fatalf("record %d has seq %d", n, r.Seq)
		}
	}
	if n != 30 {
		t.Fatalf("%d records, want 30", n)
	}

	more := storetest.Fixture("s", 50, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))[30:]
	stale := store.Claim{Run: "old", Epoch: claim.Epoch - 1}
	bad := st.AppendAsync(ctx, "s", stale, more[:10])
	behind := st.AppendAsync(ctx, "s", claim, more[10:])
	if err := bad(ctx); !errors.Is(err, store.ErrClaimLost) {
		t.Errorf("append under a stale claim: %v", err)
	}
	if err := behind(ctx); !errors.Is(err, store.ErrSequence) {
		t.Errorf("append queued behind a failed one: %v, want %s", err, vocab.CodeSequence)
	}
	if head, err := st.Latest(ctx, "s", more[0].Kind); err != nil || head > 30 {
		t.Errorf("after two failed appends: latest %d %v", head, err)
	}
}
