package eventlog

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// FuzzMemory drives a Memory with appends the fuzzer writes: each byte of
// the input picks an event's kind (vocab's constants and kinds made at run
// time, some with equal text at another address), its payload (shapes an
// interface holds, alternating under one kind), whether its time, turn,
// step or session change (turns and steps that do not fit a stamp
// included) and where a batch ends; now and then a batch with a gap,
// which must be refused and change nothing. What the log holds must equal
// what it accepted, from Events and from Since.
func FuzzMemory(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte("the quick brown fox jumps over the lazy dog"))
	f.Add([]byte{255, 254, 253, 0, 128, 64, 32, 16, 8, 4, 2, 1})
	consts := []vocab.EventKind{vocab.EventTransition, vocab.EventToolCall, vocab.EventToolExecutionStart, vocab.EventUsage,
		vocab.EventStepStart, vocab.EventStepEnd, vocab.EventAssistant, vocab.EventPrompt}
	made := make([]vocab.EventKind, 40)
	for i := range made {
		made[i] = vocab.EventKind("kind/" + strconv.Itoa(i%30)) // ten texts twice, at two addresses
	}
	u := &vocab.Usage{InputTokens: 1}
	// Tool transitions (an instance: held compactly under
	// vocab.EventTransition): two calls on one edge, another edge, the
	// first edge and call with texts made at run time, an edge with no
	// names.
	exec := vocab.TransitionPayload{Machine: "tool", Instance: "c1", From: "running", To: "after", Trigger: "exec.done"}
	exec2, other, made1 := exec, exec, exec
	exec2.Instance = "c2"
	other.To, other.Guard, other.Internal = "running", "knownCall", true
	made1.Instance, made1.From, made1.Trigger = strings.Clone("c1"), strings.Clone("running"), strings.Clone("exec.done")
	payloads := []any{nil, 0, 300, "s", u, vocab.UsagePayload{}, struct{}{}, []int{1}, map[string]int{}, vocab.TransitionPayload{From: "a"},
		exec, exec2, other, made1, vocab.TransitionPayload{Instance: "c3"}}
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops = ops[:min(len(ops), 512)] // longer inputs add time (minimizing them most), not cases
		m := NewMemory()
		held := []vocab.Event{} // Events returns an empty slice, not nil
		var batch []vocab.Event
		at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		turn, step := 0, 0
		seq := uint64(1)
		flush := func() {
			if len(batch) == 0 {
				return
			}
			if err := m.Append(t.Context(), batch); err != nil {
				t.Fatalf("append of %d events at seq %d: %v", len(batch), batch[0].Seq, err)
			}
			held = append(held, batch...)
			batch = nil
		}
		for i, op := range ops {
			switch op % 16 {
			case 0:
				at = at.Add(time.Millisecond)
			case 1:
				turn++
			case 2:
				step++
			case 3:
				turn, step = math.MaxInt32+int(op), math.MinInt32-1 // does not fit a stamp
			case 4:
				flush()
			case 5:
				// A batch with a gap after what the log holds (an empty
				// log takes any first seq): refused, nothing appended.
				flush()
				if m.Len() > 0 {
					bad := []vocab.Event{{Session: "s", Seq: seq + 1, Kind: vocab.EventUsage}}
					if err := m.Append(t.Context(), bad); vocab.CodeOf(err) != vocab.CodeBadInput {
						t.Fatalf("a batch with a gap: %v, want code %s", err, vocab.CodeBadInput)
					}
				}
			}
			var kind vocab.EventKind
			if op&0x80 != 0 {
				kind = made[int(op>>1)%len(made)]
			} else {
				kind = consts[int(op>>4)%len(consts)]
			}
			session := vocab.ID("s")
			if op == 0x7f {
				session = "other"
			}
			ev := vocab.Event{Session: session, Seq: seq, At: at, Kind: kind, Turn: turn, Step: step,
				Payload: payloads[(int(op)+i)%len(payloads)]}
			seq++
			batch = append(batch, ev)
		}
		flush()
		if m.Len() != len(held) {
			t.Fatalf("Len %d, want %d", m.Len(), len(held))
		}
		// reflect.DeepEqual first: cmp.Diff, for the message, is slow
		// enough to stall the fuzzer's minimization of long inputs.
		if got := m.Events(); !reflect.DeepEqual(held, got) {
			t.Fatalf("Events (-accepted +held):\n%s", cmp.Diff(held, got))
		}
		if len(held) == 0 {
			return
		}
		from := uint64(len(ops)%len(held)) + 1
		var since []vocab.Event
		for ev, err := range m.Since(t.Context(), from) {
			if err != nil {
				t.Fatal(err)
			}
			since = append(since, ev)
		}
		if !reflect.DeepEqual(held[from-1:], since) {
			t.Fatalf("Since(%d) (-accepted +held):\n%s", from, cmp.Diff(held[from-1:], since))
		}
	})
}
