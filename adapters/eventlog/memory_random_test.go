package eventlog

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// fill sets v (addressable) to random values: every field of a struct, a
// pointer to a filled value or nil, a slice nil, empty or of a few filled
// elements, strings of random text (sometimes empty), numbers of every
// sign and size (floats including -0 and NaN aside: DeepEqual fails NaN).
func fill(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<40), r.Int64N(1e9)).In(time.FixedZone("z", r.IntN(7)*3600))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), depth)
			}
		}
	case reflect.Pointer:
		if depth > 2 || r.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		switch n := r.IntN(4); {
		case depth > 2 || n == 0:
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, r.IntN(3)))
		default:
			s := reflect.MakeSlice(v.Type(), n, n+r.IntN(3))
			for i := range n {
				fill(r, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.String:
		if r.IntN(4) > 0 {
			v.SetString(strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(12)))
		}
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(r.Int64() >> r.IntN(64) * int64(1-2*r.IntN(2)))
	case reflect.Uint64, reflect.Uint32, reflect.Uint8, reflect.Uint:
		v.SetUint(r.Uint64() >> r.IntN(64)) // truncated to the field's size
	case reflect.Float64:
		switch r.IntN(4) {
		case 0:
			v.SetFloat(math.Copysign(0, -1))
		case 1:
		default:
			v.SetFloat(r.NormFloat64())
		}
	case reflect.Interface, reflect.Map, reflect.Func, reflect.Chan:
		// Not in the payloads the codec encodes.
	default:
		panic("fill: " + v.Kind().String())
	}
}

// TestMemoryRoundTripRandom: random payloads of the types a step logs
// (inputs, tool calls, messages, transitions, usage, a step's end) and
// another, with every field set in some and none in others, some the
// previous event's own box again, appended in random batches with random
// stamps and sessions, read back from Events and from Since equal to what
// was appended (go-cmp), and the texts and arrays read back are the
// appended ones (not copies).
func TestMemoryRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	types := []reflect.Type{reflect.TypeOf(vocab.Input{}), reflect.TypeOf(vocab.ToolPayload{}), reflect.TypeOf(vocab.MessagePayload{}),
		reflect.TypeOf(vocab.TransitionPayload{}), reflect.TypeOf(vocab.UsagePayload{}), reflect.TypeOf(vocab.StepEndPayload{}),
		reflect.TypeOf(vocab.StatusPayload{})}
	var in []vocab.Event
	var prev any
	for i := range 3000 {
		var p any
		switch k := r.IntN(len(types) + 2); {
		case k == len(types):
			// nil
		case k == len(types)+1 && prev != nil:
			p = prev // the same box again
		default:
			v := reflect.New(types[k%len(types)]).Elem()
			if r.IntN(5) > 0 {
				fill(r, v, 0)
			}
			if in, ok := v.Addr().Interface().(*vocab.Input); ok {
				switch r.IntN(3) {
				case 0:
					in.At = at // the event's
				case 1:
					in.At = time.Now() // a monotonic reading
				}
			}
			p = v.Interface()
		}
		if p != nil {
			prev = p
		}
		if r.IntN(4) == 0 {
			at = at.Add(time.Duration(r.IntN(1000)))
		}
		session := vocab.ID("s")
		if r.IntN(50) == 0 {
			session = "other"
		}
		kind := vocab.EventKind("k" + string(rune('a'+r.IntN(5))))
		if _, ok := p.(vocab.TransitionPayload); ok && r.IntN(2) == 0 {
			kind = vocab.EventTransition // held compactly when it has an instance
		}
		in = append(in, vocab.Event{Session: session, Seq: uint64(i + 1), At: at, Kind: kind,
			Turn: r.IntN(3), Step: r.IntN(9), Payload: p})
	}
	m := NewMemory()
	for b := in; len(b) > 0; {
		k := min(1+r.IntN(30), len(b))
		if err := m.Append(t.Context(), b[:k]); err != nil {
			t.Fatal(err)
		}
		b = b[k:]
	}
	got := m.Events()
	if d := cmp.Diff(in, got); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}
	for _, from := range []uint64{1, 2, 63, 64, 65, 1000, 2999, 3000} {
		var since []vocab.Event
		for ev, err := range m.Since(t.Context(), from) {
			if err != nil {
				t.Fatal(err)
			}
			since = append(since, ev)
		}
		if d := cmp.Diff(in[from-1:], since); d != "" {
			t.Fatalf("Since(%d) (-appended +held):\n%s", from, d)
		}
	}
	// The texts and arrays are the appended ones.
	for i, ev := range in {
		switch p := ev.Payload.(type) {
		case vocab.ToolPayload:
			q := got[i].Payload.(vocab.ToolPayload)
			if p.Call.ID != "" && unsafe.StringData(p.Call.ID) != unsafe.StringData(q.Call.ID) || p.Result != q.Result {
				t.Fatalf("event %d: a copy of the call's id or result", i+1)
			}
		case vocab.MessagePayload:
			q := got[i].Payload.(vocab.MessagePayload)
			if len(p.Message.Parts) > 0 && &p.Message.Parts[0] != &q.Message.Parts[0] {
				t.Fatalf("event %d: a copy of the message's parts", i+1)
			}
		}
	}
}

// TestMemoryPayloadShapes: a record keeps a payload's value word and the
// log's kinds its type, so payloads of every shape an interface holds
// come back as appended, alternating under one kind and across kinds:
// nil, a typed nil pointer, pointers (the same pointer), maps, small and
// large integers, strings, zero-size values, arrays, booleans, floats and
// slices.
func TestMemoryPayloadShapes(t *testing.T) {
	u := &vocab.Usage{InputTokens: 3}
	mp := map[string]int{"a": 1}
	payloads := []any{nil, (*vocab.Usage)(nil), u, mp, 0, 7, 1 << 40, -3, "", "text", struct{}{}, [2]int{4, 5}, true, false, 2.5,
		[]byte("bytes"), vocab.UsagePayload{Usage: *u}, &vocab.Message{ID: "m"}, uint8(200), vocab.ID("id")}
	var in []vocab.Event
	for i := range 4 * len(payloads) {
		kind := vocab.EventKind("k")
		if i%3 == 1 {
			kind = vocab.EventKind(strings.Repeat("k", 1+i%2)) // texts made at run time
		}
		in = append(in, vocab.Event{Session: "s", Seq: uint64(i + 1), Kind: kind, Payload: payloads[(i*7)%len(payloads)]})
	}
	m := NewMemory()
	if err := m.Append(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	got := m.Events()
	if d := cmp.Diff(in, got); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}
	for i, ev := range got {
		switch p := ev.Payload.(type) {
		case *vocab.Usage:
			if p != u && (p != nil || in[i].Payload.(*vocab.Usage) != nil) {
				t.Fatalf("event %d: %p, want the appended pointer", i+1, p)
			}
		case map[string]int:
			p["b"] = 2 // the same map
			if len(mp) != 2 {
				t.Fatalf("event %d: a copy of the map payload", i+1)
			}
			delete(mp, "b")
		}
	}
}

// TestMemoryKindCache: the kinds of a tool step, logged step after step,
// are found in the kind cache (at most one miss a step once each was seen,
// with one place per kind, two of them shared a place in most builds and
// missed at every step); and 300 kinds made at run time, each with two
// payload types, in random order (evicting and moving entries), read back
// as appended.
func TestMemoryKindCache(t *testing.T) {
	step := []vocab.Event{
		{Kind: vocab.EventStepStart}, {Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{}},
		{Kind: vocab.Input{Kind: vocab.InModelDone}.EventKind(), Payload: vocab.Input{}},
		{Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{}}, {Kind: vocab.EventMessageStart, Payload: vocab.MessagePayload{}},
		{Kind: vocab.EventUsage, Payload: vocab.UsagePayload{}}, {Kind: vocab.EventMessageEnd, Payload: vocab.MessagePayload{}},
		{Kind: vocab.EventAssistant, Payload: vocab.MessagePayload{}}, {Kind: vocab.EventToolCall, Payload: vocab.ToolPayload{}},
		{Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{}}, {Kind: vocab.EventToolExecutionStart, Payload: vocab.ToolPayload{}},
		{Kind: vocab.Input{Kind: vocab.InToolDone}.EventKind(), Payload: vocab.Input{}},
		{Kind: vocab.EventToolExecutionEnd, Payload: vocab.ToolPayload{}}, {Kind: vocab.EventToolResult, Payload: vocab.MessagePayload{}},
		{Kind: vocab.EventStepEnd, Payload: vocab.StepEndPayload{}}, {Kind: vocab.EventTurnStart}, {Kind: vocab.EventTurnEnd, Payload: vocab.TurnEndPayload{}},
		{Kind: vocab.EventUserMessage, Payload: vocab.MessagePayload{}}, {Kind: vocab.EventStatus, Payload: vocab.StatusPayload{}},
		{Kind: vocab.EventPrompt, Payload: vocab.PromptPayload{}}, {Kind: vocab.EventAgentStart},
	}
	withoutTemplate(t)
	m := NewMemory()
	seq := uint64(0)
	const steps = 50
	var after1 int
	for i := range steps {
		batch := slices.Clone(step)
		for j := range batch {
			seq++
			batch[j].Session, batch[j].Seq = "s", seq
		}
		if err := m.Append(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			after1 = m.kindMisses
		}
	}
	if steady := m.kindMisses - after1; steady > steps-1 {
		t.Errorf("%d kind cache misses in %d steps after the first, want at most one a step", steady, steps-1)
	}

	r := rand.New(rand.NewPCG(3, 4))
	kinds := make([]vocab.EventKind, 300)
	for i := range kinds {
		kinds[i] = vocab.EventKind(fmt.Sprintf("kind/%d", i))
	}
	var in []vocab.Event
	for i := range 6000 {
		var p any = i
		if r.IntN(2) == 0 {
			p = vocab.UsagePayload{Usage: vocab.Usage{InputTokens: i}}
		}
		in = append(in, vocab.Event{Session: "s", Seq: uint64(i + 1), Kind: kinds[r.IntN(len(kinds))], Payload: p})
	}
	m = NewMemory()
	if err := m.Append(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, m.Events()); d != "" {
		t.Fatalf("Events (-appended +held):\n%s", d)
	}
}

// TestMemoryFull: a batch that would take the log past its capacity (made
// small here) fails with log.append_failed and appends nothing; the log
// stays usable up to the capacity.
func TestMemoryFull(t *testing.T) {
	defer func(c uint64) { memoryCap = c }(memoryCap)
	memoryCap = 5
	m := NewMemory()
	evs := func(from, n int) []vocab.Event {
		var b []vocab.Event
		for i := range n {
			b = append(b, vocab.Event{Session: "s", Seq: uint64(from + i), Kind: vocab.EventUsage})
		}
		return b
	}
	if err := m.Append(t.Context(), evs(1, 3)); err != nil {
		t.Fatal(err)
	}
	err := m.Append(t.Context(), evs(4, 3))
	if vocab.CodeOf(err) != vocab.CodeAppendFailed {
		t.Fatalf("append past the capacity: %v, want code %s", err, vocab.CodeAppendFailed)
	}
	if m.Len() != 3 {
		t.Fatalf("Len %d after the refused batch, want 3", m.Len())
	}
	if err := m.Append(t.Context(), evs(4, 2)); err != nil || m.Len() != 5 {
		t.Fatalf("append up to the capacity: %v, Len %d, want nil and 5", err, m.Len())
	}
}
