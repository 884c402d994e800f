package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/storetest"
	"github.com/loopchart/loopchart/vocab"
)

// t0 is the time of the tests' first events.
var t0 = time.Date(2025, 3, 1, 13, 0, 0, 123456789, time.UTC)

// Session and run ids of the tests.
const (
	sessA = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	sessB = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAW")
	sessC = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAX")
	runA  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB3")
	runB  = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FB4")
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "loop.db"), Options{})
	})
}

// open opens the store at path, failing the test on an error. It does not
// close it.
func open(t testing.TB, path string, o Options) *Store {
	t.Helper()
	st, err := Open(context.Background(), path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return st
}

// openTemp opens a store in a new file and closes it when the test ends.
func openTemp(t testing.TB, o Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loop.db")
	st := open(t, path, o)
	t.Cleanup(func() { st.Close() })
	return st, path
}

func mustClaim(t testing.TB, st store.Store, session, run vocab.ID, create bool) store.Claim {
	t.Helper()
	c, _, err := st.Claim(context.Background(), session, run, create)
	if err != nil {
		t.Fatalf("Claim(%s): %v", session, err)
	}
	return c
}

func mustAppend(t testing.TB, st store.Store, session vocab.ID, c store.Claim, evs []vocab.Event) {
	t.Helper()
	if err := st.Append(context.Background(), session, c, evs); err != nil {
		t.Fatalf("Append(%s, %d events from %d): %v", session, len(evs), evs[0].Seq, err)
	}
}

// readAll reads session whole, returning the sequence numbers and the first
// error.
func readAll(st store.Store, session vocab.ID) ([]uint64, error) {
	var seqs []uint64
	for r, err := range st.Read(context.Background(), session, 0) {
		if err != nil {
			return seqs, err
		}
		seqs = append(seqs, r.Seq)
	}
	return seqs, nil
}

func wantCode(t testing.TB, err error, code vocab.Code, what string) {
	t.Helper()
	if vocab.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %q), want code %s", what, err, vocab.CodeOf(err), code)
	}
}

func TestOptionsValidated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.db")
	for _, o := range []Options{
		{Synchronous: "EXTRA"},
		{Synchronous: "sometimes"},
		{BusyTimeout: -time.Second},
		{MaxBatch: -1},
		{CheckpointEvery: -1},
		{JournalSizeLimit: -1},
	} {
		_, err := Open(context.Background(), path, o)
		wantCode(t, err, vocab.CodeBadInput, "Open with options "+optString(o))
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Open created the file: %v", err)
	}
	st := open(t, path, Options{Synchronous: "normal"})
	if st.opts.Synchronous != "NORMAL" {
		t.Fatalf("Synchronous %q, want NORMAL", st.opts.Synchronous)
	}
	st.Close()
}

func optString(o Options) string {
	return o.Synchronous + " " + o.BusyTimeout.String()
}
