package loopguard_test

import (
	"encoding/json"
	"testing"

	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/vocab"
)

// fuzzTools are the tools of FuzzAdmit; the last one is a poll.
var fuzzTools = []string{"read", "edit", "browse", "ci"}

// FuzzAdmit drives a State with a random sequence of admissions, launches,
// outcomes, blocks, new runs and snapshot round trips, and checks the
// invariants after every step: no panic, at most HistorySize records and
// MaxWarningKeys buckets, verdicts well formed (non-negative counts, a
// critical only at Blocked and always emitted, Terminate only after a
// critical was seen). The same sequence run twice ends in the same state
// (determinism).
func FuzzAdmit(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		a := play(t, ops)
		b := play(t, ops)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("not deterministic:\n%s\n%s", ja, jb)
		}
	})
}

// fuzzSeeds are the seed corpus: a mix, one call repeated with the same
// outcome (warnings, a block, a termination), two calls alternating
// (ping-pong), and batches.
func fuzzSeeds() [][]byte {
	rep := make([]byte, 60)    // op 0: one call of read {"a":0}, outcome r0
	alt := make([]byte, 0, 60) // read {"a":0}, read {"a":1}, …
	for i := range 60 {
		alt = append(alt, byte(i%2))
	}
	return [][]byte{
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		rep,
		alt,
		{0x70, 0x13, 0x70, 0x13, 0x70, 0x13, 0x70, 0x13, 0xf0, 0xe0, 0xd0},
	}
}

// TestFuzzSeeds: the seeds reach what the fuzz target must survive (a
// termination, a ping-pong critical), so fuzzing starts from the hard paths.
func TestFuzzSeeds(t *testing.T) {
	seeds := fuzzSeeds()
	for _, k := range []int{1, 2} {
		st := play(t, seeds[k])
		if !st.CriticalSeen {
			t.Errorf("seed %d reaches no critical", k)
		}
	}
}

// play runs ops on a fresh State, checking invariants as it goes. Each op
// is one byte read as: bits 0-1 the action argument, bits 2-3 the tool,
// bits 4-7 the operation.
func play(t *testing.T, ops []byte) *loopguard.State {
	st := new(loopguard.State)
	mk := func(b byte, k int) loopguard.Call {
		tool := fuzzTools[(b>>2)&3]
		args := `{"a":` + string(rune('0'+(int(b&3)+k)%4)) + `}`
		return loopguard.Call{ID: string(rune('a' + k)), Tool: tool,
			ArgsHash: loopguard.HashArgs(tool, json.RawMessage(args)), Poll: tool == "ci"}
	}
	outcome := func(c loopguard.Call, b byte) loopguard.Outcome {
		res := vocab.ToolResult{Name: c.Tool, Content: "r" + string(rune('0'+b&3))}
		switch b >> 6 {
		case 1:
			res.IsError, res.Code = true, vocab.CodeToolFailed
		case 2:
			res.IsError, res.Code = true, vocab.CodeToolUnknown
		case 3:
			res.IsError, res.Code = true, vocab.CodeToolDenied
		}
		return loopguard.OutcomeOf(res, nil)
	}
	for i, b := range ops {
		switch op := b >> 4; {
		case op <= 9: // a batch of 1..8 calls, then Block or run them
			n := 1 + int(op)%8
			if op <= 5 {
				n = 1
			}
			calls := make([]loopguard.Call, n)
			for k := range calls {
				calls[k] = mk(b, k)
			}
			wasCritical := st.CriticalSeen
			a := st.Admit(calls)
			check(t, i, a, calls, wasCritical)
			if a.Blocked >= 0 {
				st.Block(calls, a)
				if !st.CriticalSeen {
					t.Fatalf("op %d: Block did not set the critical flag", i)
				}
				break
			}
			for _, c := range calls {
				st.Launched(c)
			}
			for k, c := range calls {
				if k%3 != 2 { // some stay running
					st.Finished(c, outcome(c, b^byte(k)))
				}
			}
		case op == 10 || op == 11:
			st.Launched(mk(b, 0))
		case op == 12:
			c := mk(b, 0)
			st.Finished(c, outcome(c, b))
		case op == 13:
			st.NewRun()
			if len(st.History) != 0 || len(st.Warnings) != 0 || st.CriticalSeen {
				t.Fatalf("op %d: NewRun left state", i)
			}
		case op == 14:
			back, _ := roundTrip(t, st)
			st = &back
		default: // an unfinished call finished with a veto
			c := mk(b, 1)
			st.Finished(c, loopguard.Outcome{Veto: true})
		}
		if len(st.History) > loopguard.HistorySize {
			t.Fatalf("op %d: %d records", i, len(st.History))
		}
		if len(st.Warnings) > loopguard.MaxWarningKeys {
			t.Fatalf("op %d: %d warning keys", i, len(st.Warnings))
		}
	}
	return st
}

// check validates one admission.
func check(t *testing.T, op int, a loopguard.Admission, calls []loopguard.Call, wasCritical bool) {
	t.Helper()
	if len(a.Verdicts) == 0 || len(a.Verdicts) > len(calls) {
		t.Fatalf("op %d: %d verdicts for %d calls", op, len(a.Verdicts), len(calls))
	}
	if a.Blocked < -1 || a.Blocked >= len(calls) {
		t.Fatalf("op %d: Blocked = %d", op, a.Blocked)
	}
	if a.Blocked == -1 && len(a.Verdicts) != len(calls) {
		t.Fatalf("op %d: admitted with %d of %d verdicts", op, len(a.Verdicts), len(calls))
	}
	if a.Terminate && (a.Blocked < 0 || !wasCritical) {
		t.Fatalf("op %d: Terminate without a second critical", op)
	}
	for k, v := range a.Verdicts {
		if v.Count < 0 || v.Variants < 0 {
			t.Fatalf("op %d: negative count %+v", op, v)
		}
		switch v.Level {
		case loopguard.LevelNone:
			if v != (loopguard.Verdict{}) {
				t.Fatalf("op %d: empty verdict with fields %+v", op, v)
			}
		case loopguard.LevelCritical:
			if k != a.Blocked || !v.Emit || v.Message == "" || v.Key == "" {
				t.Fatalf("op %d: critical verdict %d %+v (blocked %d)", op, k, v, a.Blocked)
			}
		case loopguard.LevelWarning:
			if v.Count < loopguard.WarningThreshold || v.Key == "" || v.Emit != (v.Message != "") {
				t.Fatalf("op %d: warning %+v", op, v)
			}
		default:
			t.Fatalf("op %d: level %q", op, v.Level)
		}
	}
}
