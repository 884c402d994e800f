package session_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// FuzzCore steps the session core with inputs the fuzzer writes, where
// TestSimulation's world only writes inputs a well-behaved lane and
// caller would: any input kind (the lane's too, and kinds that do not
// exist) with any of its fields set or not, from small tables of good
// and hostile values — messages of every role (and none), parts of
// every kind with a tool call or none, texts with invalid UTF-8 and
// terminal escapes, replies whose calls share ids, have none or name no
// tool, arguments that are not JSON, finishes that do not exist, usage
// below zero, errors without a code, jitter out of range, NaN or
// infinite, times that go back or are zero, work numbers that were
// never handed out or are long done, hook verdicts for the wrong hook,
// approvals of calls that wait for none, configurations that are not
// JSON. The first byte picks the session's hook slots and limits.
//
// After every input: Validate agrees with Step; a rejected input changes
// nothing (no event, work or result, the same sequence number) and its
// error has a code other than internal; an accepted one is logged first,
// as its input/<kind> event or as input/stale. After every Ready: event
// sequence numbers run on without a gap, and Advance leaves nothing
// ready. At the end: stepping the accepted inputs again on a fresh core,
// with Ready at the same points, gives the same Readys (determinism); the
// log, through its JSON form and back, folds into the same events; and a
// snapshot restores into a core whose snapshot, once the work it hands
// out again is advanced, is the same.
func FuzzCore(f *testing.F) {
	for _, seed := range [][]byte{
		{0},
		{1, 0, 0, 2, 3, 1, 1, 0, 4, 5, 6, 7},
		[]byte("submit then a reply with calls that share an id"),
		{7, 0, 1, 1, 12, 2, 2, 9, 1, 1, 0, 0, 0, 14, 3, 3, 3, 0, 0, 14, 1, 2, 3},
		bytes.Repeat([]byte{0, 13, 1, 14, 2, 15, 3}, 12),
		bytes.Repeat([]byte{255, 128, 64, 32, 16, 8, 4, 2, 1}, 10),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 600 {
			data = data[:600] // longer programs only slow each run down
		}
		fuzzCore(t, data)
	})
}

// fuzzIn reads the fuzzer's bytes as choices; past the end every choice
// is 0.
type fuzzIn struct {
	data []byte
	at   time.Time
	ids  int
	work []uint64 // every work number handed out, in order
}

func (z *fuzzIn) more() bool { return len(z.data) > 0 }

func (z *fuzzIn) byte() byte {
	if len(z.data) == 0 {
		return 0
	}
	b := z.data[0]
	z.data = z.data[1:]
	return b
}

func (z *fuzzIn) n(n int) int { return int(z.byte()) % n }

func (z *fuzzIn) chance(in8 int) bool { return z.n(8) < in8 }

// fuzzTexts are the texts inputs carry: plain, empty, long, not UTF-8,
// with terminal escapes and control characters, a JSON object.
var fuzzTexts = []string{"", "ok", "a.txt", "A.TXT", "\xff\xfe broken", "\x1b[2J\x1b]0;title\x07", "tab\tnew\nline\x00nul",
	strings.Repeat("long ", 200), `{"path":"a.txt"}`, "é中文🙂"}

func (z *fuzzIn) text() string { return fuzzTexts[z.n(len(fuzzTexts))] }

// id returns an id from a small pool (so that ids repeat), an empty one,
// or a fresh one.
func (z *fuzzIn) id() vocab.ID {
	switch r := z.n(8); {
	case r == 0:
		return ""
	case r < 6:
		return vocab.ID(fmt.Sprintf("i%d", r))
	default:
		z.ids++
		return vocab.ID(fmt.Sprintf("n%d", z.ids))
	}
}

func (z *fuzzIn) callID() string {
	switch r := z.n(6); {
	case r == 0:
		return ""
	default:
		return fmt.Sprintf("c%d", r)
	}
}

var (
	fuzzKinds = []vocab.InputKind{vocab.InSubmit, vocab.InSteer, vocab.InInject, vocab.InNotify, vocab.InRemind, vocab.InWithdraw,
		vocab.InCancel, vocab.InPause, vocab.InContinue, vocab.InMaintenanceStart, vocab.InMaintenanceDone, vocab.InClose,
		vocab.InHooks, vocab.InOpen, vocab.InCheckpoint, vocab.InApprove, vocab.InModelParts, vocab.InModelDone,
		vocab.InModelFailed, vocab.InToolUpdate, vocab.InToolDone, vocab.InToolDetached, vocab.InHookDone,
		vocab.InTimerFired, vocab.InStopped, vocab.InSlotGranted, "", "bogus"}
	fuzzRoles    = []vocab.Role{vocab.RoleUser, vocab.RoleAssistant, vocab.RoleTool, vocab.RoleSystem, "", "bogus"}
	fuzzParts    = []vocab.PartKind{vocab.PartText, vocab.PartThinking, vocab.PartToolCall, "", "bogus"}
	fuzzStreams  = []vocab.StreamPartKind{vocab.StreamText, vocab.StreamThinking, vocab.StreamToolCall, vocab.StreamUsage, vocab.StreamFinish, vocab.StreamResponse, "", "bogus"}
	fuzzFinishes = []vocab.FinishReason{vocab.FinishStop, vocab.FinishToolCalls, vocab.FinishMaxTokens, vocab.FinishError, vocab.FinishAborted,
		vocab.FinishFiltered, vocab.FinishPause, vocab.FinishRefusal, vocab.FinishContextOverflow, vocab.FinishInterrupted, "", "bogus"}
	fuzzTools  = []string{"read", "write", "calc", "finish", "unknown", ""}
	fuzzArgs   = []string{`{}`, `{"path":"a.txt"}`, `{"path":"A.TXT"}`, `{"path":7}`, `not json`, `[]`, ``, `{"path":"a.txt","path":"b"}`}
	fuzzCodes  = []vocab.Code{vocab.CodeInternal, vocab.CodeBadInput, vocab.CodeToolFailed, "provider.rate_limited", "", "bogus"}
	fuzzCauses = []vocab.CancelKind{vocab.CancelUser, vocab.CancelParent, vocab.CancelHook, vocab.CancelDisposed,
		vocab.CancelInterrupted, vocab.CancelTimeout, "", "bogus"}
	fuzzHooks = []vocab.HookName{vocab.HookWillBeginStep, vocab.HookDidFinishStep, vocab.HookTurnStopping, vocab.HookBeforeSubmitPrompt,
		vocab.HookRequestError, vocab.HookBeforeTool, vocab.HookAfterTool, vocab.HookLoopWarning, "bogus"}
	fuzzDecisions = []vocab.Decision{vocab.Approve, vocab.Deny, vocab.Edit, "", "bogus"}
	fuzzJitters   = []float64{0, 0.5, 0.999, 1, -1, 7, math.NaN(), math.Inf(1)}
	fuzzDurations = []time.Duration{0, time.Millisecond, 3 * time.Second, -time.Second, time.Duration(math.MaxInt64)}
)

func (z *fuzzIn) call() *vocab.ToolCall {
	if z.n(8) == 0 {
		return nil
	}
	return &vocab.ToolCall{ID: z.callID(), Name: fuzzTools[z.n(len(fuzzTools))], Args: json.RawMessage(fuzzArgs[z.n(len(fuzzArgs))])}
}

func (z *fuzzIn) result() *vocab.ToolResult {
	if z.n(6) == 0 {
		return nil
	}
	r := &vocab.ToolResult{CallID: z.callID(), Name: fuzzTools[z.n(len(fuzzTools))], Content: z.text()}
	switch f := z.byte(); {
	case f&1 != 0:
		r.IsError, r.Code = true, fuzzCodes[z.n(len(fuzzCodes))]
	case f&2 != 0:
		r.StopTurn, r.StopReason = true, z.text()
	case f&4 != 0:
		r.Yield = true
	case f&8 != 0:
		r.Delivery = &vocab.Delivery{Kind: []vocab.DeliveryKind{vocab.DeliverySteer, "", "bogus"}[z.n(3)], Message: vocab.UserText(z.text())}
	case f&16 != 0:
		r.Parts = z.parts()
	}
	r.Started = z.chance(6)
	return r
}

func (z *fuzzIn) parts() []vocab.Part {
	var ps []vocab.Part
	for range z.n(4) {
		p := vocab.Part{Kind: fuzzParts[z.n(len(fuzzParts))], Text: z.text()}
		if z.chance(3) {
			p.Call = z.call()
		}
		if p.Kind == vocab.PartThinking && z.chance(4) {
			p.Provider, p.Signature = "anthropic", z.text()
		}
		ps = append(ps, p)
	}
	return ps
}

func (z *fuzzIn) message() *vocab.Message {
	if z.n(8) == 0 {
		return nil
	}
	m := &vocab.Message{Role: fuzzRoles[z.n(len(fuzzRoles))], Parts: z.parts()}
	if z.chance(3) {
		m.ID = z.id()
	}
	if z.chance(2) {
		m.Result = z.result()
	}
	if z.chance(1) {
		m.Key = z.text()
	}
	return m
}

func (z *fuzzIn) messages() []vocab.Message {
	var ms []vocab.Message
	for range z.n(3) {
		if m := z.message(); m != nil {
			ms = append(ms, *m)
		}
	}
	return ms
}

func (z *fuzzIn) reply() *vocab.Message {
	if z.n(8) == 0 {
		return nil
	}
	m := &vocab.Message{Role: vocab.RoleAssistant}
	if z.chance(1) {
		m.Role = fuzzRoles[z.n(len(fuzzRoles))]
	}
	for range z.n(4) {
		if z.chance(5) {
			m.Parts = append(m.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: z.call()})
		} else {
			m.Parts = append(m.Parts, vocab.Part{Kind: fuzzParts[z.n(len(fuzzParts))], Text: z.text()})
		}
	}
	return m
}

func (z *fuzzIn) usage() *vocab.Usage {
	switch z.n(4) {
	case 0:
		return nil
	case 1:
		return &vocab.Usage{InputTokens: -5, OutputTokens: math.MaxInt}
	default:
		return &vocab.Usage{InputTokens: z.n(100), OutputTokens: z.n(100), CacheReadTokens: z.n(3)}
	}
}

func (z *fuzzIn) err() *vocab.Error {
	if z.n(4) == 0 {
		return nil
	}
	return &vocab.Error{Code: fuzzCodes[z.n(len(fuzzCodes))], Message: z.text(), Retryable: z.chance(4),
		RetryAfter: fuzzDurations[z.n(len(fuzzDurations))], Status: []int{0, 429, 500, -1}[z.n(4)]}
}

// work returns a work number: one handed out (the latest ones most
// often), none, or one never handed out.
func (z *fuzzIn) workID() uint64 {
	switch r := z.n(8); {
	case r == 0 || len(z.work) == 0:
		return uint64(z.n(4)) * 1000
	case r < 6:
		return z.work[max(0, len(z.work)-1-z.n(4))]
	default:
		return z.work[z.n(len(z.work))]
	}
}

// tick returns the next input's time: mostly later, sometimes the same,
// earlier, or zero.
func (z *fuzzIn) tick() time.Time {
	switch r := z.n(16); {
	case r == 0:
		return time.Time{}
	case r == 1:
		return z.at.Add(-time.Duration(z.n(10)) * time.Second)
	case r < 4:
		return z.at
	default:
		z.at = z.at.Add(time.Duration(z.byte()) * 37 * time.Millisecond)
		if z.chance(1) {
			z.at = z.at.Add(time.Duration(z.byte()) * time.Minute)
		}
		return z.at
	}
}

// input writes one input: its kind, then any of the fields (those of its
// kind more often).
func (z *fuzzIn) input(cfg json.RawMessage) vocab.Input {
	in := vocab.Input{Kind: fuzzKinds[z.n(len(fuzzKinds))], At: z.tick()}
	other := z.byte() // which fields of other kinds to set too
	set := func(bit byte, own bool) bool { return own || other&bit != 0 && z.chance(2) }
	k := in.Kind
	if set(1, k == vocab.InSubmit || k == vocab.InSteer || k == vocab.InInject || k == vocab.InNotify || k == vocab.InRemind ||
		k == vocab.InWithdraw || k == vocab.InCancel || k == vocab.InPause || k == vocab.InContinue || k == vocab.InOpen ||
		k == vocab.InMaintenanceStart || k == vocab.InClose || k == vocab.InApprove) {
		in.ID = z.id()
	}
	if set(2, k == vocab.InSubmit || k == vocab.InSteer || k == vocab.InInject || k == vocab.InNotify || k == vocab.InRemind) {
		in.Message = z.message()
		in.Key = z.text()
		in.Bypass = z.chance(3)
	}
	if set(4, k == vocab.InWithdraw || k == vocab.InCancel || k == vocab.InContinue) {
		in.Target = z.id()
		if z.chance(5) {
			in.Cause = &vocab.CancelCause{Kind: fuzzCauses[z.n(len(fuzzCauses))], Reason: z.text()}
		}
		in.KeepInbox, in.Resume = z.chance(4), z.chance(2)
	}
	if set(8, k == vocab.InModelParts || k == vocab.InModelDone || k == vocab.InModelFailed || k == vocab.InToolUpdate ||
		k == vocab.InToolDone || k == vocab.InToolDetached || k == vocab.InHookDone || k == vocab.InTimerFired ||
		k == vocab.InMaintenanceDone || k == vocab.InSlotGranted) {
		in.Work = z.workID()
	}
	if set(16, k == vocab.InModelParts) {
		for range z.n(4) {
			p := vocab.StreamPart{Kind: fuzzStreams[z.n(len(fuzzStreams))], Text: z.text()}
			switch z.n(4) {
			case 0:
				p.Call = z.call()
			case 1:
				p.Usage = z.usage()
			case 2:
				p.Finish = fuzzFinishes[z.n(len(fuzzFinishes))]
			}
			in.Parts = append(in.Parts, p)
		}
	}
	if set(32, k == vocab.InModelDone || k == vocab.InModelFailed) {
		in.Reply = z.reply()
		in.Finish = fuzzFinishes[z.n(len(fuzzFinishes))]
		in.Usage = z.usage()
		in.Err = z.err()
		in.Jitter = fuzzJitters[z.n(len(fuzzJitters))]
	}
	if set(64, k == vocab.InToolDone || k == vocab.InToolUpdate || k == vocab.InToolDetached || k == vocab.InStopped) {
		in.Result = z.result()
		in.Text = z.text()
		if z.chance(2) {
			in.Stuck = []vocab.StuckWork{{Work: z.workID(), What: z.text()}}
		}
	}
	if set(128, k == vocab.InHookDone || k == vocab.InHooks || k == vocab.InApprove || k == vocab.InOpen) {
		if z.chance(6) {
			h := &vocab.HookVerdict{Err: z.err(), Refuse: z.chance(3), Reason: z.text(), Retry: z.chance(2), Ask: []string{"", "ok?"}[z.n(2)]}
			if z.chance(3) {
				h.Messages = z.messages()
			}
			if z.chance(2) {
				h.Rewritten = z.message()
			}
			if z.chance(2) {
				h.History = z.messages()
			}
			if z.chance(2) {
				h.Args = json.RawMessage(fuzzArgs[z.n(len(fuzzArgs))])
			}
			if z.chance(2) {
				h.Result = z.result()
			}
			in.Hook = h
		}
		for range z.n(4) {
			in.Slots = append(in.Slots, fuzzHooks[z.n(len(fuzzHooks))])
		}
		if z.chance(5) {
			in.Approval = &vocab.Approval{CallID: z.callID(), Decision: fuzzDecisions[z.n(len(fuzzDecisions))], Reason: z.text(),
				Args: json.RawMessage(fuzzArgs[z.n(len(fuzzArgs))])}
		}
		switch z.n(4) {
		case 0:
			in.Config = cfg
		case 1:
			in.Config = json.RawMessage(`{"session":"other"}`)
		case 2:
			in.Config = json.RawMessage(`not json`)
		}
	}
	return in
}

// fuzzConfig is the session's configuration, chosen by b.
func fuzzConfig(b byte) session.Config {
	cfg := session.Config{Session: "S", Tools: []vocab.ToolSpec{
		{Name: "read", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessRead}}},
		{Name: "write", Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite}}, Approval: b&1 != 0},
		{Name: "calc", NoAccess: true},
		{Name: "finish", NoAccess: true, StopBatch: true}}}
	var slots []vocab.HookName
	for i, h := range fuzzHooks[:8] {
		if b&(1<<(i%8)) != 0 && (i+int(b))%3 == 0 {
			slots = append(slots, h)
		}
	}
	cfg.Hooks = session.HooksOf(slots)
	if b&2 != 0 {
		cfg.MaxSteps = 1 + int(b>>5)
	}
	if b&4 != 0 {
		cfg.MaxAttempts = 1 + int(b>>6)
	}
	if b&8 != 0 {
		cfg.MaxParallelTools = 1
	}
	cfg.Lane = b&16 != 0
	cfg.CaseSensitivePaths = b&32 != 0
	return cfg
}

// fuzzStep is one entry of a fuzz run's log: an accepted input, or a
// Ready taken (and advanced).
type fuzzStep struct {
	in    vocab.Input
	ready bool
}

func fuzzCore(t *testing.T, data []byte) {
	z := &fuzzIn{data: data, at: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	cfg := fuzzConfig(z.byte())
	cfgJSON, err := session.ConfigJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := session.NewMachines()
	core, err := session.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	var (
		log  []fuzzStep
		rds  []session.Ready
		next uint64 = 1 // the next event's sequence number
	)
	ready := func() {
		log = append(log, fuzzStep{ready: true})
		rd, ok := core.Ready()
		if !ok {
			return
		}
		for i, ev := range rd.Events {
			if ev.Seq != next {
				t.Fatalf("event %d of a Ready (%s) has seq %d, want %d", i, ev.Kind, ev.Seq, next)
			}
			next++
		}
		for _, w := range rd.Work {
			if w.Op == session.Start {
				z.work = append(z.work, w.ID)
			}
		}
		rds = append(rds, cloneReady(rd))
		core.Advance(rd)
		if rd2, ok := core.Ready(); ok {
			t.Fatalf("Ready after Advance still has %d events, %d work, %d results", len(rd2.Events), len(rd2.Work), len(rd2.Results))
		}
	}
	open := vocab.Input{Kind: vocab.InOpen, At: z.at, ID: "o", Config: cfgJSON}
	if err := core.Step(open); err != nil {
		t.Fatalf("open: %v", err)
	}
	log = append(log, fuzzStep{in: cloneInput(open)})
	ready()
	for z.more() {
		in := z.input(cfgJSON)
		orig := cloneInput(in)
		rd0, _ := core.Ready()
		ne, nw, nr, seq0 := len(rd0.Events), len(rd0.Work), len(rd0.Results), core.Seq()
		verr := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Validate(%s) panicked: %v", describeInput(orig), p)
				}
			}()
			return core.Validate(in)
		}()
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Step(%s) panicked: %v", describeInput(orig), p)
				}
			}()
			return core.Step(in)
		}()
		if (verr == nil) != (err == nil) {
			t.Fatalf("Validate(%s) = %v but Step = %v", describeInput(orig), verr, err)
		}
		rd, _ := core.Ready()
		if err != nil {
			if len(rd.Events) != ne || len(rd.Work) != nw || len(rd.Results) != nr || core.Seq() != seq0 {
				t.Fatalf("%s was rejected (%v) but left %d events, %d work, %d results", describeInput(orig), err,
					len(rd.Events)-ne, len(rd.Work)-nw, len(rd.Results)-nr)
			}
			var ve *vocab.Error
			if !errors.As(err, &ve) || vocab.CodeOf(err) == vocab.CodeInternal {
				t.Fatalf("%s was rejected with %v (code %s): want a typed error with a code of its own", describeInput(orig), err, vocab.CodeOf(err))
			}
		} else {
			log = append(log, fuzzStep{in: orig})
			if testing.Verbose() {
				t.Logf("> %s", describeInput(orig))
			}
			switch {
			case len(rd.Events) == ne:
				t.Fatalf("%s was accepted but logged nothing", describeInput(orig))
			case rd.Events[ne].Kind == vocab.EventInputStale:
			case rd.Events[ne].Kind != in.EventKind():
				t.Fatalf("%s was accepted but its first event is %s, want %s", describeInput(orig), rd.Events[ne].Kind, in.EventKind())
			}
		}
		if z.chance(5) {
			ready()
		}
	}
	ready()

	// Determinism: the accepted inputs again, on a fresh core.
	core.Use(nil)
	again, err := session.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range log {
		if !e.ready {
			if err := again.Step(cloneInput(e.in)); err != nil {
				t.Fatalf("replay: %s, accepted in the run, is rejected: %v", describeInput(e.in), err)
			}
			continue
		}
		rd, ok := again.Ready()
		if !ok {
			continue
		}
		if n >= len(rds) || !equalReady(rds[n], rd) {
			if n >= len(rds) {
				t.Fatalf("replay: more Readys than the run's %d", len(rds))
			}
			t.Fatalf("replay: Ready %d differs (-run +replay):\n%s", n, diffReady(rds[n], rd))
		}
		n++
		again.Advance(rd)
	}
	if n != len(rds) {
		t.Fatalf("replay: %d Readys, the run had %d", n, len(rds))
	}

	// The log through its JSON form folds into the same events.
	var logged []vocab.Event
	for _, rd := range rds {
		for _, ev := range rd.Events {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("event %d (%s) has no JSON form: %v", ev.Seq, ev.Kind, err)
			}
			var back vocab.Event
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("event %d (%s) does not decode: %v\n%s", ev.Seq, ev.Kind, err, b)
			}
			logged = append(logged, back)
		}
	}
	again.Use(nil)
	folded, err := session.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	refolded, err := stepLogged(folded, logged)
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	if len(refolded) != len(logged) {
		t.Fatalf("fold: %d events, the run logged %d", len(refolded), len(logged))
	}
	for i := range logged {
		a, _ := json.Marshal(logged[i])
		b, _ := json.Marshal(refolded[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("fold: event %d differs (-logged +folded):\n%s", logged[i].Seq, cmp.Diff(logged[i], refolded[i], cmpopts.EquateEmpty()))
		}
	}

	// A snapshot restores into the same core.
	folded.Use(nil)
	core.Use(m)
	snap, err := core.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	core.Use(nil)
	back, err := session.Restore(snap, m)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if rd, ok := back.Ready(); ok {
		if len(rd.Events) != 0 {
			t.Fatalf("a restored core logs %d events before any input", len(rd.Events))
		}
		back.Advance(rd) // the outstanding work, handed out again
	}
	snap2, err := back.Snapshot()
	if err != nil {
		t.Fatalf("snapshot of the restored core: %v", err)
	}
	if !bytes.Equal(snap, snap2) {
		t.Fatalf("a restored core snapshots differently:\n%s\n%s", snap, snap2)
	}
}
