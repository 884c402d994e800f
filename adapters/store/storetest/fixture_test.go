package storetest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// TestGoldenCopies keeps testdata/events identical to the vocab golden
// files it copies: after `go test ./vocab -update`, copy them again.
func TestGoldenCopies(t *testing.T) {
	files, err := golden.ReadDir("testdata/events")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden copies")
	}
	for _, f := range files {
		ours, err := golden.ReadFile("testdata/events/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := os.ReadFile(filepath.Join("..", "..", "..", "vocab", "testdata", "events", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("testdata/events/%s differs from vocab/testdata/events/%[1]s: copy it again", f.Name())
		}
	}
}

func TestFixture(t *testing.T) {
	const s = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	at := time.Date(2025, 3, 1, 12, 0, 0, 5, time.FixedZone("X", -7200))
	evs := Fixture(s, 30, at)
	if len(evs) != 30 {
		t.Fatalf("Fixture(30) made %d events", len(evs))
	}
	kinds := map[vocab.EventKind]int{}
	for i, e := range evs {
		seq := uint64(i + 1)
		if e.Session != s || e.Seq != seq {
			t.Fatalf("event %d: %s #%d", i, e.Session, e.Seq)
		}
		if want := at.Add(time.Duration(i) * FixtureStep); !e.At.Equal(want) {
			t.Fatalf("event %d at %v, want %v", i, e.At, want)
		}
		if !vocab.KnownKind(e.Kind) {
			t.Fatalf("event %d: unknown kind %s", i, e.Kind)
		}
		kinds[e.Kind]++
		// Canonical: encoding and decoding gives the same event back.
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back vocab.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(e, back); d != "" {
			t.Fatalf("event %d does not round-trip (-fixture +decoded):\n%s", i, d)
		}
	}
	for _, k := range []vocab.EventKind{"input/submit", vocab.EventTurnStart, vocab.EventStepStart, vocab.EventTransition,
		vocab.EventAssistant, vocab.EventToolCall, vocab.EventToolResult, vocab.EventStepEnd, vocab.EventTurnEnd,
		vocab.EventUsage, vocab.EventStatus} {
		if kinds[k] == 0 {
			t.Errorf("Fixture(30) has no %s event", k)
		}
	}
	if e := evs[13]; e.Kind != vocab.EventStatus || e.Payload != (vocab.StatusPayload{Status: "running"}) || e.Turn != 0 {
		t.Errorf("event 14: %+v, want agent/status running outside a turn", e)
	}
	if e := evs[22]; e.Kind != vocab.EventTurnEnd || e.Turn != 2 || e.Step != 1 {
		t.Errorf("event 23: %+v, want the end of turn 2 in step 1", e)
	}

	// Calls share nothing.
	a, b := Fixture(s, 12, at), Fixture(s, 12, at)
	a[0].Payload.(vocab.Input).Message.Parts[0].Text = "changed"
	if got := b[0].Payload.(vocab.Input).Message.Text(); got != "Read the README." {
		t.Fatalf("changing one Fixture's payload changed another's: %q", got)
	}
	if got := Fixture(s, 0, at); len(got) != 0 {
		t.Fatalf("Fixture(0) made %d events", len(got))
	}
}
