package eventlog

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// goldenEvents returns vocab's sample event of every kind (its testdata),
// renumbered from seq 1 in one session, sorted by file name.
func goldenEvents(t *testing.T) []vocab.Event {
	t.Helper()
	files, err := filepath.Glob("../../vocab/testdata/events/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	slices.Sort(files)
	var evs []vocab.Event
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ev vocab.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		ev.Session, ev.Seq = "s", uint64(len(evs)+1)
		evs = append(evs, ev)
	}
	return evs
}

// edgeEvents returns transitions and inputs with unusual fields (a
// dynamic name, an input At other than the event's, a negative zero, an
// empty slice), numbered from seq.
func edgeEvents(seq uint64) []vocab.Event {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	reply := &vocab.Message{ID: "m1", Role: vocab.RoleAssistant}
	usage := &vocab.Usage{InputTokens: 3, OutputTokens: 4}
	result := &vocab.ToolResult{CallID: "c1"}
	dyn := strings.Repeat("x", 3) // a name whose text is not a constant's
	payloads := []any{
		vocab.TransitionPayload{Machine: "turn", From: "a", To: "b", Trigger: "t"},
		vocab.TransitionPayload{Machine: "tool", Instance: "c1", From: "a", To: "a", Trigger: "t", Guard: "g", Internal: true},
		vocab.TransitionPayload{Machine: dyn, From: dyn, To: "xxx", Trigger: strings.Repeat("x", 3), Guard: "g"},
		vocab.TransitionPayload{},
		vocab.TransitionPayload{Machine: "tool", Instance: "c2", From: "a", To: "b", Trigger: "t"},
		vocab.TransitionPayload{Machine: "tool", Instance: "c1", From: "b", To: "c", Trigger: "t"},
		vocab.Input{Kind: vocab.InModelDone, At: at, Work: 3, Reply: reply, Finish: vocab.FinishReason("toolCalls"), Usage: usage},
		vocab.Input{Kind: vocab.InToolDone, At: at, ID: "c1", Work: 4, Result: result},
		vocab.Input{Kind: vocab.InToolDone, At: at.Add(time.Nanosecond), Work: 4, Result: result}, // At not the event's
		vocab.Input{Kind: vocab.InToolDone, At: at.UTC(), Work: 4},                                // same instant, other location
		vocab.Input{Kind: vocab.InModelDone, At: at, Jitter: math.Copysign(0, -1)},                // -0 is not 0
		vocab.Input{Kind: vocab.InModelParts, At: at, Parts: []vocab.StreamPart{}},                // empty, not nil
		vocab.Input{Kind: vocab.InSubmit, At: at, Text: "go"},
		vocab.Input{Kind: vocab.InModelDone, At: at, Message: reply},
		vocab.Input{Kind: vocab.InModelDone, At: at, Err: &vocab.Error{Code: vocab.CodeTransport}},
	}
	evs := make([]vocab.Event, len(payloads))
	for i, p := range payloads {
		kind := vocab.EventTransition
		if in, ok := p.(vocab.Input); ok {
			kind = in.EventKind()
		}
		evs[i] = vocab.Event{Session: "s", Seq: seq, At: at, Kind: kind, Turn: 1, Step: i, Payload: p}
		seq++
	}
	return evs
}

// TestMemoryRoundTripEveryKind: every event kind (vocab's samples) and
// some unusual payloads come back from Events and Since exactly as
// appended (go-cmp), in batches of several sizes.
func TestMemoryRoundTripEveryKind(t *testing.T) {
	in := goldenEvents(t)
	in = append(in, edgeEvents(uint64(len(in)+1))...)
	kinds := map[vocab.EventKind]bool{}
	for _, ev := range in {
		kinds[ev.Kind] = true
	}
	for _, k := range vocab.KnownKinds() {
		if !kinds[k] && k != vocab.EventInputStale {
			t.Logf("no sample of kind %s", k)
		}
	}
	for _, size := range []int{1, 2, 7, len(in)} {
		m := NewMemory()
		for b := in; len(b) > 0; {
			k := min(size, len(b))
			if err := m.Append(t.Context(), b[:k]); err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
		if d := cmp.Diff(in, m.Events()); d != "" {
			t.Fatalf("batches of %d: Events (-appended +held):\n%s", size, d)
		}
		for from := range uint64(len(in)) {
			var got []vocab.Event
			for ev, err := range m.Since(t.Context(), from+1) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ev)
			}
			if d := cmp.Diff(in[from:], got); d != "" {
				t.Fatalf("batches of %d: Since(%d) (-appended +held):\n%s", size, from+1, d)
			}
		}
	}
}

// TestMemoryKindCacheReuse: a kind whose text is freed and whose place is
// reused for another text of the same length is not mistaken for it (the
// kind cache remembers only texts the log holds). The reuse depends on
// the allocator, so this exercises the path rather than reproducing the
// old aliasing on every run.
func TestMemoryKindCacheReuse(t *testing.T) {
	m := NewMemory()
	var want []vocab.Event
	for i := range 2000 {
		kind := "input/" + string([]byte{byte('a' + i%26), byte('a' + i/26%26)}) // fresh text each time
		ev := vocab.Event{Session: "s", Seq: uint64(i + 1), Kind: vocab.EventKind(kind)}
		if err := m.Append(t.Context(), []vocab.Event{ev}); err != nil {
			t.Fatal(err)
		}
		ev.Kind = vocab.EventKind(strings.Clone(kind)) // the appended text may be freed
		want = append(want, ev)
		if i%64 == 0 {
			runtime.GC()
		}
	}
	if d := cmp.Diff(want, m.Events()); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}
}

// TestMemoryToolTransitions: tool transitions (vocab.EventTransition with
// an instance) are held as their edge and instance, not as the boxes
// appended: read back equal to what was appended (calls one after the
// other and two at once, names whose texts are made at run time, an edge
// with no names, the same edge under another kind), each edge once in
// the log's kinds (beside the pair of kind and type the first one met), an instance once per run of transitions of its call.
func TestMemoryToolTransitions(t *testing.T) {
	withoutTemplate(t)
	edges := []vocab.TransitionPayload{
		{Machine: "tool", From: "before", To: "running", Trigger: "before.proceed"},
		{Machine: "tool", From: "running", To: "running", Trigger: "exec.started", Internal: true},
		{Machine: "tool", From: "running", To: "after", Trigger: "exec.done"},
		{Machine: "tool", From: "after", To: "succeeded", Trigger: "after.done", Guard: "resultOK"},
	}
	var in []vocab.Event
	add := func(kind vocab.EventKind, tp vocab.TransitionPayload) {
		in = append(in, vocab.Event{Session: "s", Seq: uint64(len(in) + 1), Kind: kind, Turn: 1, Step: len(in) / 8, Payload: tp})
	}
	runs := 0
	for c := range 100 {
		id := "c" + strconv.Itoa(c) // one text for the call's transitions, as the core logs them
		for _, e := range edges {   // one call after the other
			e.Instance = id
			add(vocab.EventTransition, e)
		}
		runs++
	}
	for c := range 50 {
		ids := []string{"a" + strconv.Itoa(c), "b" + strconv.Itoa(c)}
		for _, e := range edges { // two calls at once
			for _, id := range ids {
				e.Instance = id
				add(vocab.EventTransition, e)
				runs++
			}
		}
	}
	made := edges[2]
	made.Machine, made.From, made.To, made.Trigger, made.Instance = strings.Clone("tool"), strings.Clone("running"),
		strings.Clone("after"), strings.Clone("exec.done"), strings.Clone("c0")
	add(vocab.EventTransition, made)
	add(vocab.EventTransition, vocab.TransitionPayload{Instance: "c0"})
	add(vocab.EventKind("other"), vocab.TransitionPayload{Machine: "tool", Instance: "c0", From: "a", To: "b"}) // held as given
	runs += 2
	m := NewMemory()
	for b := in; len(b) > 0; {
		k := min(7, len(b))
		if err := m.Append(t.Context(), b[:k]); err != nil {
			t.Fatal(err)
		}
		b = b[k:]
	}
	if d := cmp.Diff(in, m.Events()); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}
	compact, plain := 0, 0
	for _, kt := range m.kinds {
		if kt.edge != nil {
			compact++
		} else {
			plain++
		}
	}
	if compact != len(edges)+1 || plain != 2 {
		t.Errorf("kinds hold %d edges and %d other pairs, want %d and 2", compact, plain, len(edges)+1)
	}
	insts := 0
	for i, page := range m.compact.insts {
		insts += len(page)
		// Pages grow from instFirst, doubling, up to instPage.
		if want := min(instFirst<<i, instPage); cap(page) != want {
			t.Errorf("instance page %d holds %d, want %d", i, cap(page), want)
		}
	}
	if insts != runs {
		t.Errorf("%d instances held, want %d (one per run of a call's transitions)", insts, runs)
	}
	// No record keeps the box of a tool transition it was given.
	held := 0
	for _, c := range m.chunks {
		for _, r := range c {
			for k := range in {
				if (*eface)(unsafe.Pointer(&in[k].Payload)).data == r.data && in[k].Kind == vocab.EventTransition {
					t.Fatalf("a record keeps the box of event %d", k+1)
				}
			}
			held++
		}
	}
	if held != len(in) {
		t.Fatalf("%d records, want %d", held, len(in))
	}
}
