package vocab_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// TestPayloadSlab checks that a payload boxed by a PayloadSlab is what
// any(v) gives: the same type, an equal value, the same JSON, unchanged
// by later writes to the source, to the slab (past one array) and by
// collections.
func TestPayloadSlab(t *testing.T) {
	var s vocab.PayloadSlab[vocab.Input]
	const n = 100 // three arrays and part of a fourth
	var boxed []any
	var want []vocab.Input
	for i := range n {
		msg := vocab.UserText(strings.Repeat("x", i)) // heap text, reachable only through the box
		in := vocab.Input{Kind: vocab.InSubmit, ID: vocab.ID(fmt.Sprint("m", i)), Message: &msg, Work: uint64(i)}
		boxed = append(boxed, s.Box(&in))
		want = append(want, in)
		in.ID, in.Work = "changed", 0 // the box holds a copy
	}
	runtime.GC()
	for i, b := range boxed {
		got, ok := b.(vocab.Input)
		if !ok {
			t.Fatalf("box %d holds %T, want vocab.Input", i, b)
		}
		if reflect.TypeOf(b) != reflect.TypeOf(any(want[i])) {
			t.Fatalf("box %d: type %v, want %v", i, reflect.TypeOf(b), reflect.TypeOf(any(want[i])))
		}
		if got.ID != want[i].ID || got.Work != want[i].Work || got.Message.Text() != strings.Repeat("x", i) {
			t.Fatalf("box %d = %+v, want %+v", i, got, want[i])
		}
		if !reflect.DeepEqual(b, any(want[i])) {
			t.Fatalf("box %d is not deeply equal to any(its value)", i)
		}
		gj, _ := json.Marshal(b)
		wj, _ := json.Marshal(want[i])
		if string(gj) != string(wj) {
			t.Fatalf("box %d encodes as %s, want %s", i, gj, wj)
		}
	}
}

// TestPayloadSlabAllocs checks the point of a PayloadSlab: one allocation
// per array of 32 payloads instead of one per payload.
func TestPayloadSlabAllocs(t *testing.T) {
	p := vocab.TransitionPayload{Machine: "tool", Instance: "c1", From: "pending", To: "running", Trigger: "start"}
	var sink []any
	direct := testing.AllocsPerRun(10, func() {
		sink = sink[:0]
		for range 64 {
			sink = append(sink, any(p))
		}
	})
	var s vocab.PayloadSlab[vocab.TransitionPayload]
	slabbed := testing.AllocsPerRun(10, func() {
		sink = sink[:0]
		for range 64 {
			sink = append(sink, s.Box(&p))
		}
	})
	if direct < 64 || slabbed > 2 {
		t.Fatalf("64 payloads: any(v) %v allocations, Box %v; want at least 64 and at most 2", direct, slabbed)
	}
	for _, b := range sink {
		if b != any(p) {
			t.Fatalf("boxed %+v, want %+v", b, p)
		}
	}
}
