package loopguard_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/loopchart/loopchart/machines/loopguard"
)

// call builds a Call with hashed arguments.
func call(id, tool, args string) loopguard.Call {
	return loopguard.Call{ID: id, Tool: tool, ArgsHash: loopguard.HashArgs(tool, json.RawMessage(args))}
}

func result(h uint64) loopguard.Outcome { return loopguard.Outcome{HasResult: true, ResultHash: h} }

// exported is the part of a State that is data.
func exported(s *loopguard.State) loopguard.State { return s.Clone() }

// TestStateJSONRoundTrip: a state with every kind of record, warning
// buckets and the critical flag survives encoding/json exactly, and the
// restored state goes on to judge exactly as the original.
func TestStateJSONRoundTrip(t *testing.T) {
	var st loopguard.State
	big := loopguard.Call{ID: "big", Tool: "read", ArgsHash: 0xfedcba9876543210} // > 2^63: no float64 loss
	st.Launched(big)
	st.Finished(big, loopguard.Outcome{HasResult: true, ResultHash: 0xffffffffffffffff, NoProgress: true})
	st.Launched(call("u", "browse", ""))
	st.Finished(call("u", "browse", ""), loopguard.Outcome{HasResult: true, ResultHash: 7, NoProgress: true, UnknownTool: "browse"})
	st.Launched(call("r", "ls", `{"d":"/"}`)) // still running
	st.Finished(call("v", "deploy", ""), loopguard.Outcome{Veto: true})
	for i := range 19 {
		c := call("g"+string(rune('a'+i)), "grep", `{"q":1}`)
		st.Launched(c)
		st.Finished(c, result(42))
	}
	a := st.Admit([]loopguard.Call{call("w", "grep", `{"q":1}`)})
	if a.Verdicts[0].Level != loopguard.LevelWarning || !a.Verdicts[0].Emit {
		t.Fatalf("setup: want an emitted warning, got %+v", a.Verdicts[0])
	}
	c := call("x", "grep", `{"q":1}`)
	st.Launched(c)
	st.Finished(c, result(42))
	a = st.Admit([]loopguard.Call{c})
	if a.Blocked != 0 {
		t.Fatalf("setup: want a critical, got %+v", a)
	}
	st.Block([]loopguard.Call{c}, a)

	back, b := roundTrip(t, &st)
	if d := cmp.Diff(exported(&st), exported(&back), cmpopts.IgnoreUnexported(loopguard.State{})); d != "" {
		t.Fatalf("round trip (-want +got):\n%s\n%s", d, b)
	}
	b2, _ := json.Marshal(&back)
	if string(b) != string(b2) {
		t.Fatalf("re-encoding differs:\n%s\n%s", b, b2)
	}
	for _, want := range []string{`"a":"fedcba9876543210"`, `"r":"ffffffffffffffff"`, `"criticalSeen":true`, `"u":"browse"`, `"v":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("snapshot lacks %s:\n%s", want, b)
		}
	}

	// Both go on alike (the restored one rebuilds its scratch and index).
	for i, c := range []loopguard.Call{call("y", "grep", `{"q":1}`), call("z", "browse", ""), big, call("n", "new", "")} {
		va := st.Admit([]loopguard.Call{c}).Verdicts[0]
		vb := back.Admit([]loopguard.Call{c}).Verdicts[0]
		if va != vb {
			t.Errorf("call %d: original %+v, restored %+v", i, va, vb)
		}
	}

	// A zero State encodes as {} and decodes to a zero State.
	var zero loopguard.State
	if b, _ := json.Marshal(&zero); string(b) != "{}" {
		t.Errorf("zero state = %s", b)
	}
}

func TestHashText(t *testing.T) {
	var h loopguard.Hash
	for _, bad := range []string{`""`, `"xyz"`, `"00000000000000000"`} {
		if err := json.Unmarshal([]byte(bad), &h); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
	if err := json.Unmarshal([]byte(`"0aBc"`), &h); err != nil || h != 0xabc {
		t.Errorf("Unmarshal(0aBc) = %x, %v", uint64(h), err)
	}
	if s := loopguard.Hash(0xabc).String(); s != "0000000000000abc" {
		t.Errorf("String = %s", s)
	}
}

// TestFinishedMatching: an outcome goes to the newest unfinished record of
// the same call id, tool and arguments; without an id, to the newest
// unfinished record of the action; without one, to a new record.
func TestFinishedMatching(t *testing.T) {
	var st loopguard.State
	a1, a2 := call("a1", "read", `{"p":1}`), call("a2", "read", `{"p":1}`)
	st.Launched(a1)
	st.Launched(a2)
	st.Finished(a1, result(1)) // the older one, by id
	if r := st.History; !r[0].HasResult || r[0].Result != 1 || r[1].HasResult {
		t.Fatalf("by id: %+v", r)
	}
	anon := a1
	anon.ID = ""
	st.Finished(anon, result(2)) // no id: the newest unfinished (a2)
	if r := st.History; !r[1].HasResult || r[1].Result != 2 || len(r) != 2 {
		t.Fatalf("without id: %+v", r)
	}
	st.Finished(call("a3", "read", `{"p":1}`), loopguard.Outcome{Veto: true}) // nothing to fill
	if r := st.History; len(r) != 3 || !r[2].Veto || r[2].ID != "a3" {
		t.Fatalf("appended veto: %+v", r)
	}
	st.Finished(call("a4", "read", `{"p":1}`), loopguard.Outcome{}) // neither result nor veto
	if len(st.History) != 3 {
		t.Fatalf("an empty outcome was recorded: %+v", st.History)
	}
	// Another action's record is never filled.
	st.Launched(call("b", "read", `{"p":2}`))
	st.Finished(call("b", "read", `{"p":3}`), result(3))
	if r := st.History; r[3].HasResult || !r[4].HasResult {
		t.Fatalf("other action: %+v", r)
	}
}

// TestHistoryBound: the history never holds more than HistorySize records,
// keeps the newest and does not reallocate once full.
func TestHistoryBound(t *testing.T) {
	var st loopguard.State
	for i := range 100 {
		c := loopguard.Call{ID: "c", Tool: "t", ArgsHash: uint64(i)}
		st.Launched(c)
		st.Finished(c, result(uint64(i)))
	}
	if len(st.History) != loopguard.HistorySize {
		t.Fatalf("len = %d", len(st.History))
	}
	if st.History[0].Args != 70 || st.History[29].Args != 99 {
		t.Fatalf("kept %v..%v", st.History[0].Args, st.History[29].Args)
	}
	c := loopguard.Call{ID: "c", Tool: "t", ArgsHash: 1}
	if n := testing.AllocsPerRun(100, func() { st.Launched(c) }); n != 0 && !raceEnabled {
		t.Errorf("Launched on a full history: %v allocs", n)
	}
}

// TestHistoryGrowsInSteps: a run of a few calls holds room for a few
// records, not for the whole window; a clone or a decoded state has no
// spare room, so a state restored from one (twice, say) copies its
// history before adding to it instead of writing into storage another
// state shares.
func TestHistoryGrowsInSteps(t *testing.T) {
	var st loopguard.State
	st.Launched(call("a", "t", ""))
	st.Launched(call("b", "t", ""))
	if c := cap(st.History); c >= loopguard.HistorySize {
		t.Fatalf("two calls hold room for %d records, want fewer than the window's %d", c, loopguard.HistorySize)
	}
	snap := st.Clone()
	r1, r2 := snap, snap // two states restored from one snapshot
	r1.Launched(call("c", "t", ""))
	r2.Launched(call("d", "t", ""))
	if len(r1.History) != 3 || r1.History[2].ID != "c" || r2.History[2].ID != "d" {
		t.Fatalf("states restored from one snapshot share their history: %v, %v", r1.History, r2.History)
	}
	dec, _ := roundTrip(t, &st)
	if len(dec.History) != cap(dec.History) {
		t.Fatalf("a decoded history has room for %d more records, want none", cap(dec.History)-len(dec.History))
	}
}

// roundTrip encodes st as a snapshot and decodes it into a new State: it
// returns the decoded state and the encoding.
func roundTrip(t testing.TB, st *loopguard.State) (loopguard.State, []byte) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back loopguard.State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back, b
}

// TestCloneIndependent: a clone shares nothing with its original.
func TestCloneIndependent(t *testing.T) {
	var st loopguard.State
	st.Launched(call("a", "t", ""))
	st.Warnings = append(st.Warnings, loopguard.Bucket{Key: "k", Bucket: 1})
	cl := st.Clone()
	cl.History[0].Tool = "changed"
	cl.Warnings[0].Bucket = 9
	if st.History[0].Tool != "t" || st.Warnings[0].Bucket != 1 {
		t.Error("the clone shares its slices")
	}
}

// TestAdmitEdges: the zero State is ready; an empty batch admits; Block of an
// admitted batch does nothing; NewRun resets.
func TestAdmitEdges(t *testing.T) {
	var st loopguard.State
	if a := st.Admit(nil); a.Blocked != -1 || len(a.Verdicts) != 0 || a.Terminate {
		t.Errorf("empty batch: %+v", a)
	}
	calls := []loopguard.Call{call("a", "t", ""), call("b", "u", "")}
	a := st.Admit(calls)
	if a.Blocked != -1 || len(a.Verdicts) != 2 {
		t.Errorf("fresh batch: %+v", a)
	}
	st.Block(calls, a)
	if len(st.History) != 0 || st.CriticalSeen {
		t.Errorf("Block of an admitted batch changed the state: %+v", st)
	}
	st.Block(calls, loopguard.Admission{Blocked: 5})
	if len(st.History) != 0 || st.CriticalSeen {
		t.Errorf("Block out of range changed the state: %+v", st)
	}
	for range 25 {
		st.Launched(calls[0])
		st.Finished(calls[0], result(1))
	}
	a = st.Admit(calls)
	if a.Blocked != 0 || len(a.Verdicts) != 1 {
		t.Fatalf("want the first call blocked: %+v", a)
	}
	st.Block(calls, a)
	if !st.CriticalSeen || len(st.History) != 26 || !st.History[25].Veto { // only the trigger's action
		t.Fatalf("after Block: critical %v, %d records", st.CriticalSeen, len(st.History))
	}
	if got := loopguard.ResultText(a, 1); got != loopguard.SiblingBlocked {
		t.Errorf("sibling text %q", got)
	}
	if got := loopguard.ResultText(a, 0); !strings.HasPrefix(got, a.Verdicts[0].Message+"\n\n") || !strings.HasSuffix(got, loopguard.TriggerAdvice) {
		t.Errorf("trigger text %q", got)
	}
	st.NewRun()
	if len(st.History) != 0 || len(st.Warnings) != 0 || st.CriticalSeen {
		t.Errorf("NewRun left %+v", exported(&st))
	}
	if a := st.Admit(calls); a.Blocked != -1 {
		t.Errorf("after NewRun: %+v", a)
	}
	if got := loopguard.SiblingText(true); got != loopguard.SiblingTerminal {
		t.Errorf("terminal sibling text %q", got)
	}
	if got := loopguard.TriggerText("R", true); got != "R\n\n"+loopguard.TriggerTerminal {
		t.Errorf("terminal trigger text %q", got)
	}
}

// TestAdmitAllocs: admission allocates nothing per call once its scratch
// space exists, on a clean full history and on a stuck one whose warning is
// not emitted again.
func TestAdmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, name := range []string{"clean", "stuck", "churn"} {
		st := fullHistory(name)
		for _, n := range []int{1, 8} {
			calls := batch(n)
			v := st.Admit(calls).Verdicts[0] // also warms the scratch space
			want := map[string]loopguard.Verdict{
				"stuck": {Level: loopguard.LevelWarning, Detector: loopguard.GenericRepeat, Count: 15,
					Key: "generic:edit:0000000000000001"},
				"churn": {Level: loopguard.LevelWarning, Detector: loopguard.ArgumentChurn, Count: 30,
					Key: "argument-churn:edit", Variants: 10},
			}[name]
			if v != want {
				t.Fatalf("%s: verdict %+v, want %+v", name, v, want)
			}
			if allocs := testing.AllocsPerRun(200, func() { st.Admit(calls) }); allocs != 0 {
				t.Errorf("%s, batch of %d: %v allocs per Admit", name, n, allocs)
			}
		}
	}
}

// fullHistory returns a state with HistorySize records of one tool:
//
//   - clean: 30 distinct arguments failing the same way; every detector
//     scans the whole history (the churn scan up to its variant bound) and
//     none fires;
//   - stuck: the batch's first call repeated 15 times with changing results
//     between 15 other calls: a generic warning, already emitted;
//   - churn: arguments 1..10 three times each, failing the same way: every
//     call of the batch continues the churn, a warning already emitted.
func fullHistory(kind string) *loopguard.State {
	var st loopguard.State
	for i := range loopguard.HistorySize {
		c := loopguard.Call{ID: "h", Tool: "edit", ArgsHash: uint64(1000 + i)}
		o := loopguard.Outcome{HasResult: true, ResultHash: 5, NoProgress: true}
		switch {
		case kind == "stuck" && i%2 == 0:
			c = batch(1)[0]
			o = result(uint64(i))
		case kind == "churn":
			c.ArgsHash = uint64(1 + i%10)
		}
		st.Launched(c)
		st.Finished(c, o)
	}
	if kind != "clean" {
		st.Admit(batch(1)) // emit the warning once
	}
	return &st
}

// batch returns n calls of the same tool with distinct arguments.
func batch(n int) []loopguard.Call {
	calls := make([]loopguard.Call, n)
	for i := range calls {
		calls[i] = loopguard.Call{ID: "b", Tool: "edit", ArgsHash: uint64(1 + i)}
	}
	return calls
}

// TestUnmarshalIntoLiveState: decoding a snapshot into a State in use
// replaces it whole; its warning index follows the new buckets (a stale
// index would emit the restored key's warning a second time).
func TestUnmarshalIntoLiveState(t *testing.T) {
	var src loopguard.State
	c := call("a", "read", `{"p":1}`)
	for range 10 {
		src.Launched(c)
		src.Finished(c, result(1))
	}
	if v := src.Admit([]loopguard.Call{c}).Verdicts[0]; !v.Emit {
		t.Fatalf("setup: %+v", v)
	}
	snap, _ := json.Marshal(&src)

	var live loopguard.State
	d := call("b", "grep", `{"q":1}`)
	for range 10 {
		live.Launched(d)
		live.Finished(d, result(2))
	}
	if v := live.Admit([]loopguard.Call{d}).Verdicts[0]; !v.Emit {
		t.Fatalf("setup: %+v", v)
	}
	if err := json.Unmarshal(snap, &live); err != nil {
		t.Fatal(err)
	}
	if v := live.Admit([]loopguard.Call{c}).Verdicts[0]; v.Level != loopguard.LevelWarning || v.Emit {
		t.Errorf("after restore: %+v, want the warning already emitted", v)
	}
	if len(live.Warnings) != 1 || len(live.History) != 10 {
		t.Errorf("restored state: %+v", exported(&live))
	}
	if err := json.Unmarshal([]byte(`{"history":[{"t":"x","a":"zz"}]}`), &live); err == nil {
		t.Error("a bad hash decoded")
	}
}

// TestHistoryWindow: the full history slides along its storage; whatever
// the sequence of launches, outcomes (some late, some never) and new runs,
// it holds exactly the last HistorySize records, oldest first, as a plain
// slice model of the same calls does.
func TestHistoryWindow(t *testing.T) {
	var st loopguard.State
	var model []loopguard.Record
	var open []loopguard.Call // launched, no outcome yet
	push := func(h []loopguard.Record, r loopguard.Record) []loopguard.Record {
		h = append(h, r)
		return h[max(0, len(h)-loopguard.HistorySize):]
	}
	seed := uint64(1)
	next := func(n uint64) uint64 { // xorshift: deterministic, no package state
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed % n
	}
	for i := range 20000 {
		switch r := next(100); {
		case r < 1:
			st.NewRun()
			model, open = nil, nil
		case r < 40 && len(open) > 0:
			k := int(next(uint64(len(open))))
			c := open[k]
			open = append(open[:k], open[k+1:]...)
			st.Finished(c, result(uint64(i)))
			found := false
			for j := len(model) - 1; j >= 0 && !found; j-- {
				if found = model[j].ID == c.ID && !model[j].HasResult; found {
					model[j].HasResult, model[j].Result = true, loopguard.Hash(i)
				}
			}
			if !found { // its launch was dropped: the outcome is a record of its own
				model = push(model, loopguard.Record{ID: c.ID, Tool: c.Tool, Args: loopguard.Hash(c.ArgsHash),
					HasResult: true, Result: loopguard.Hash(i)})
			}
		default:
			c := loopguard.Call{ID: fmt.Sprint("c", i), Tool: "t", ArgsHash: uint64(i)}
			st.Launched(c)
			open = append(open, c)
			model = push(model, loopguard.Record{ID: c.ID, Tool: c.Tool, Args: loopguard.Hash(i)})
		}
		if !slices.Equal(st.History, model) {
			t.Fatalf("op %d: history differs (-got +want):\n%s", i, cmp.Diff(st.History, model, cmpopts.EquateEmpty()))
		}
	}
}
