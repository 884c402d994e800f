package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

const (
	sess = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	run  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB3")
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// heads returns the sequence numbers Read yields for sess.
func heads(t *testing.T, st *memory.Store) []uint64 {
	t.Helper()
	var out []uint64
	for r, err := range st.Read(t.Context(), sess, 0) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Seq)
	}
	return out
}

func TestFailAfter(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	defer st.Close()
	c, _, err := st.Claim(ctx, sess, run, true)
	if err != nil {
		t.Fatal(err)
	}
	evs := storetest.Fixture(sess, 12, t0)
	st.FailAfter(2)
	for _, b := range [][]vocab.Event{evs[:2], evs[2:2], evs[2:5]} {
		if err := st.Append(ctx, sess, c, b); err != nil {
			t.Fatalf("append %d..: %v", b[0].Seq, err)
		}
	}
	for range 2 { // it stays failed
		err = st.Append(ctx, sess, c, evs[5:8])
		if vocab.CodeOf(err) != vocab.CodeAppendFailed || !errors.Is(err, vocab.CodeAppendFailed.Err()) {
			t.Fatalf("third non-empty append: %v, want code %s", err, vocab.CodeAppendFailed)
		}
		if got := heads(t, st); len(got) != 5 {
			t.Fatalf("after a failed append the log holds %v, want 1..5", got)
		}
	}
	// A refused batch is still refused for its own reason first.
	if err := st.Append(ctx, sess, c, evs[6:8]); !errors.Is(err, store.ErrSequence) {
		t.Fatalf("a wrongly numbered batch: %v, want %v", err, store.ErrSequence)
	}
	if err := st.Append(ctx, sess, c, nil); err != nil {
		t.Fatalf("an empty batch while failing: %v", err)
	}

	st.FailAfter(-1)
	if err := st.Append(ctx, sess, c, evs[5:8]); err != nil {
		t.Fatalf("append after FailAfter(-1): %v", err)
	}
	st.FailAfter(0)
	if err := st.Append(ctx, sess, c, evs[8:]); vocab.CodeOf(err) != vocab.CodeAppendFailed {
		t.Fatalf("append after FailAfter(0): %v, want code %s", err, vocab.CodeAppendFailed)
	}
	st.FailAfter(1)
	if err := st.Append(ctx, sess, c, evs[8:]); err != nil {
		t.Fatalf("append after FailAfter(1): %v", err)
	}
	if got := heads(t, st); len(got) != 12 || got[11] != 12 {
		t.Fatalf("log %v, want 1..12", got)
	}
}

// TestReadCopies checks that a record Read yields does not alias the
// store: a reader that changes it changes nothing stored.
func TestReadCopies(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	defer st.Close()
	c, _, err := st.Claim(ctx, sess, run, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, sess, c, storetest.Fixture(sess, 3, t0)); err != nil {
		t.Fatal(err)
	}
	var want []byte
	for r, err := range st.Read(ctx, sess, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq == 1 {
			want = append(want, r.Payload...)
			for i := range r.Payload {
				r.Payload[i] = 'x'
			}
		}
	}
	for r, err := range st.Read(ctx, sess, 1) {
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Payload) != string(want) {
			t.Fatalf("payload of 1 after a reader changed its copy: %s, want %s", r.Payload, want)
		}
		break
	}
}

// TestUnencodable checks that a payload json cannot encode fails the whole
// batch.
func TestUnencodable(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	defer st.Close()
	c, _, err := st.Claim(ctx, sess, run, true)
	if err != nil {
		t.Fatal(err)
	}
	evs := storetest.Fixture(sess, 3, t0)
	evs[2].Payload = vocab.RawPayload("{not json")
	if err := st.Append(ctx, sess, c, evs); err == nil {
		t.Fatal("append of an unencodable payload succeeded")
	}
	if got := heads(t, st); len(got) != 0 {
		t.Fatalf("log %v after a failed append, want empty", got)
	}
}
