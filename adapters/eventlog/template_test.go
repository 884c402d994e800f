package eventlog

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// withoutTemplate makes the logs t creates start with no template, and
// puts the template back when t ends (tests that count a new log's kinds
// or misses).
func withoutTemplate(t *testing.T) {
	old := memTemplate.Swap(nil)
	t.Cleanup(func() { memTemplate.Store(old) })
}

// toolStep returns the events of a tool step from seq on: the kinds a
// session logs, with tool transitions of call id.
func toolStep(seq uint64, id string) []vocab.Event {
	evs := []vocab.Event{
		{Kind: vocab.EventStepStart}, {Kind: vocab.Input{Kind: vocab.InModelDone}.EventKind(), Payload: vocab.Input{Kind: vocab.InModelDone}},
		{Kind: vocab.EventMessageEnd, Payload: vocab.MessagePayload{Message: vocab.Message{ID: vocab.ID("m" + id)}}},
		{Kind: vocab.EventToolCall, Payload: vocab.ToolPayload{Call: vocab.ToolCall{ID: id, Name: "noop"}}},
		{Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{Machine: "tool", Instance: id, From: "before", To: "running", Trigger: "before.proceed"}},
		{Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{Machine: "tool", Instance: id, From: "running", To: "after", Trigger: "exec.done"}},
		{Kind: vocab.Input{Kind: vocab.InToolDone}.EventKind(), Payload: vocab.Input{Kind: vocab.InToolDone}},
		{Kind: vocab.EventToolResult, Payload: vocab.MessagePayload{Message: vocab.Message{ID: vocab.ID("r" + id)}}},
		{Kind: vocab.EventStepEnd, Payload: vocab.StepEndPayload{}},
	}
	for i := range evs {
		evs[i].Session, evs[i].Seq, evs[i].Turn, evs[i].Step = "s", seq+uint64(i), 1, int(seq)
	}
	return evs
}

// TestMemoryTemplate: a new log starts from the template the first log
// published, so a step of the kinds and edges that log met misses
// neither cache, and reads back as appended; a log that meets a kind the
// template lacks adds it to its own kinds without changing the
// template's, and publishes its larger set; a log of more kinds than a
// template may hold publishes none.
func TestMemoryTemplate(t *testing.T) {
	withoutTemplate(t)
	a := NewMemory()
	if err := a.Append(t.Context(), toolStep(1, "c1")); err != nil {
		t.Fatal(err)
	}
	tp := memTemplate.Load()
	if tp == nil || len(tp.kinds) != len(a.kinds) {
		t.Fatalf("template after the first log's step: %v, want its %d kinds", tp, len(a.kinds))
	}

	b := NewMemory()
	in := append(toolStep(1, "c7"), toolStep(10, "c8")...)
	if err := b.Append(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	if b.kindMisses != 0 || b.compact.edges != nil {
		t.Errorf("a log started from the template: %d kind misses, edge map %v; want none and none", b.kindMisses, b.compact.edges)
	}
	if d := cmp.Diff(in, b.Events()); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}

	if b.kindCache != &tp.cache || b.compact.cache != &tp.edges {
		t.Errorf("a log that met only the template's kinds and edges made caches of its own")
	}
	kinds := append([]kindType(nil), tp.kinds...)
	cache, edges := tp.cache, tp.edges
	extra := []vocab.Event{
		{Session: "s", Seq: 19, Kind: "custom/kind", Payload: 7},
		{Session: "s", Seq: 20, Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{Machine: "tool", Instance: "c8", From: "after", To: "failed", Trigger: "after.done"}},
	}
	if err := b.Append(t.Context(), extra); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(kinds, tp.kinds, cmp.Comparer(func(x, y kindType) bool { return x == y })); d != "" {
		t.Fatalf("the template's kinds changed under a log that adopted them (-before +after):\n%s", d)
	}
	if cache != tp.cache || edges != tp.edges {
		t.Fatalf("a log that met a new kind and a new edge changed the template's caches")
	}
	if d := cmp.Diff(append(in, extra...), b.Events()); d != "" {
		t.Fatalf("Events after new kinds (-appended +held):\n%s", d)
	}
	if got := memTemplate.Load(); got == tp || len(got.kinds) != len(b.kinds) {
		t.Fatalf("template after a log outgrew it: %d kinds, want the log's %d", len(got.kinds), len(b.kinds))
	}

	before := memTemplate.Load()
	c := NewMemory()
	var many []vocab.Event
	for i := range templateKinds + 1 {
		many = append(many, vocab.Event{Session: "s", Seq: uint64(i + 1), Kind: vocab.EventKind(fmt.Sprintf("run-time/%d", i))})
	}
	if err := c.Append(t.Context(), many); err != nil {
		t.Fatal(err)
	}
	if memTemplate.Load() != before {
		t.Fatalf("a log of %d kinds published a template; at most %d may be held", len(c.kinds), templateKinds)
	}
}

// TestMemoryTemplateConcurrent: logs made and appended to on many
// goroutines at once, each meeting kinds of its own, publish and adopt
// templates while others do, and each reads back what it was given (run
// with -race).
func TestMemoryTemplateConcurrent(t *testing.T) {
	withoutTemplate(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 20 {
				m := NewMemory()
				in := toolStep(1, fmt.Sprintf("c%d-%d", g, n))
				in = append(in, vocab.Event{Session: "s", Seq: uint64(len(in) + 1), Kind: vocab.EventKind(fmt.Sprintf("own/%d", g*100+n%5))})
				if err := m.Append(t.Context(), in); err != nil {
					t.Error(err)
					return
				}
				if d := cmp.Diff(in, m.Events()); d != "" {
					t.Errorf("goroutine %d log %d (-appended +held):\n%s", g, n, d)
					return
				}
			}
		}()
	}
	wg.Wait()
}
