package vocab_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/events")

const (
	goldenDir = "testdata/events"
	session   = vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
)

var goldenT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// goldenFile names the golden file of kind: its slashes become underscores
// ("machine/transition" -> "machine_transition.json").
func goldenFile(kind vocab.EventKind) string {
	return filepath.Join(goldenDir, strings.ReplaceAll(string(kind), "/", "_")+".json")
}

// jsonEqual compares JSON texts modulo insignificant whitespace: golden
// files are indented, which re-indents embedded raw JSON (tool arguments).
var jsonEqual = cmp.Options{
	cmp.Comparer(func(a, b json.RawMessage) bool { return compactEqual(a, b) }),
	cmp.Comparer(func(a, b vocab.RawPayload) bool { return compactEqual(a, b) }),
}

func compactEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// goldenEvents returns one representative event per known kind: every
// EventKind constant and every input/ kind.
func goldenEvents() []vocab.Event {
	call := vocab.ToolCall{ID: "call_1", Name: "read", Args: json.RawMessage(`{"path":"README.md","limit":20}`)}
	result := vocab.ToolResult{CallID: "call_1", Name: "read", Content: "# loopchart", Started: true, Note: "truncated to 20 lines"}
	user := vocab.Message{ID: "01J9Z3NDEKTSV4RRFFQ69G5FB0", Role: vocab.RoleUser, Source: vocab.SourceInput,
		Parts: []vocab.Part{{Kind: vocab.PartText, Text: "Read the README."}}}
	reply := vocab.Message{ID: "01J9Z3NDEKTSV4RRFFQ69G5FB1", Role: vocab.RoleAssistant, Source: vocab.SourceModel, Parts: []vocab.Part{
		{Kind: vocab.PartThinking, Text: "I should read it."},
		{Kind: vocab.PartText, Text: "Reading it."},
		{Kind: vocab.PartToolCall, Call: &call},
	}}
	steer := vocab.Message{ID: "01J9Z3NDEKTSV4RRFFQ69G5FB2", Role: vocab.RoleUser, Source: vocab.SourceSteer,
		Parts: []vocab.Part{{Kind: vocab.PartText, Text: "Only the first section."}}}
	usage := vocab.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000, CacheWriteTokens: 200}
	in := func(kind vocab.InputKind, f func(*vocab.Input)) vocab.Input {
		v := vocab.Input{Kind: kind, At: goldenT0.Add(250 * time.Millisecond)}
		f(&v)
		return v
	}
	msg := func(m vocab.Message, id vocab.ID, src vocab.Source) *vocab.Message {
		m.ID, m.Source = id, src
		return &m
	}

	type c struct {
		kind       vocab.EventKind
		turn, step int
		payload    any
	}
	cases := []c{
		{kind: vocab.EventAgentStart},
		{kind: vocab.EventAgentEnd},
		{kind: vocab.EventTurnStart, turn: 1},
		{vocab.EventTurnEnd, 1, 2, vocab.TurnEndPayload{Reason: vocab.TurnEnd{Kind: vocab.EndAborted, Cause: &vocab.CancelCause{Kind: vocab.CancelUser}}, Steps: 2}},
		{vocab.EventMessageStart, 1, 1, vocab.MessagePayload{Message: vocab.Message{Role: vocab.RoleAssistant}}},
		{vocab.EventMessageUpdate, 1, 1, vocab.DeltaPayload{Part: vocab.StreamPart{Kind: vocab.StreamText, Text: "Read"}}},
		{vocab.EventMessageEnd, 1, 1, vocab.MessagePayload{Message: reply}},
		{vocab.EventToolExecutionStart, 1, 1, vocab.ToolPayload{Call: call}},
		{vocab.EventToolExecutionUpdate, 1, 1, vocab.ToolPayload{Call: call, Update: "read 10 lines"}},
		{vocab.EventToolExecutionEnd, 1, 1, vocab.ToolPayload{Call: call, Result: &result}},
		{vocab.EventTransition, 1, 1, vocab.TransitionPayload{Machine: "tool", Instance: "call_1", From: "running", To: "done", Trigger: "finished", Guard: "notAborted"}},
		{kind: vocab.EventStepStart, turn: 1, step: 1},
		{vocab.EventStepEnd, 1, 1, vocab.StepEndPayload{Finish: vocab.FinishToolCalls}},
		{vocab.EventUserMessage, 1, 1, vocab.MessagePayload{Message: user}},
		{vocab.EventAssistant, 1, 1, vocab.MessagePayload{Message: reply, SourceSeqs: []uint64{12, 15}}},
		{vocab.EventToolCall, 1, 1, vocab.ToolPayload{Call: call}},
		{vocab.EventToolResult, 1, 1, vocab.ToolPayload{Call: vocab.ToolCall{ID: "call_1", Name: "read"}, Result: &vocab.ToolResult{
			CallID: "call_1", Name: "read", Content: "denied", IsError: true, Code: vocab.CodeToolDenied,
			StopTurn: true, StopReason: "user said no", Delivery: &vocab.Delivery{Kind: vocab.DeliverySteer, Message: steer},
		}}},
		{vocab.EventInboxSpliced, 1, 2, vocab.InboxPayload{Target: "step", Op: "claimed", Messages: []vocab.Message{steer}}},
		{vocab.EventRetry, 1, 2, vocab.RetryPayload{FailedAttempt: 1, NextAttempt: 2, MaxAttempts: 5, Delay: 1500 * time.Millisecond, Code: vocab.CodeRateLimited, Message: "slow down"}},
		{vocab.EventUsage, 1, 2, vocab.UsagePayload{Usage: usage}},
		{vocab.EventWarning, 1, 2, vocab.LoopPayload{Message: "You have called read_file 10 times with the same arguments.", Detector: "generic_repeat",
			Level: "warning", Count: 10, Tool: "read_file", CallID: "call_1", Key: "generic:read_file:0123456789abcdef"}},
		{vocab.EventLoopIntervention, 1, 2, vocab.LoopPayload{Message: "blocked", Detector: "generic_repeat", Level: "critical", Count: 20,
			Tool: "read_file", CallID: "call_1", Key: "generic:read_file:0123456789abcdef"}},
		{vocab.EventPrompt, 0, 0, vocab.PromptPayload{Prompt: "01J9Z3NDEKTSV4RRFFQ69G5FB0", State: "completed", Detail: "completed{steps=2}"}},
		{vocab.EventStatus, 0, 0, vocab.StatusPayload{Status: "running"}},
		{vocab.EventError, 0, 0, vocab.ErrorPayload{Code: vocab.CodeInternal, Message: "boom"}},
		{vocab.EventInputStale, 1, 2, vocab.StalePayload{Input: vocab.InToolDone, Work: 7, Reason: "tool work 7 was cancelled"}},
		{vocab.EventHistoryReplaced, 1, 2, vocab.HistoryPayload{By: "error-handler", Messages: []vocab.Message{user, reply}}},
		{vocab.EventHookFailed, 1, 2, vocab.HookPayload{Hook: vocab.HookDidFinishStep, Code: vocab.CodeHook, Message: "hook panicked: boom"}},
		{vocab.EventWorkStuck, 0, 0, vocab.StuckPayload{Work: 9, What: `tool "sleep" (call_9)`}},
		{vocab.EventRequestHeader, 1, 1, vocab.HeaderPayload{Reason: "resume", Model: "m-1", System: "Be brief.", MaxTokens: 4096, Tools: []string{"echo", "read_file"}}},
		{vocab.EventRecovering, 1, 1, vocab.ErrorPayload{Code: vocab.CodeEmptyResponse, Message: "the reply was empty"}},
		{vocab.EventSnapshot, 0, 0, vocab.SnapshotPayload{Seq: 41, Core: json.RawMessage(`{"v":1,"session":"01J9Z3NDEKTSV4RRFFQ69G5FAV"}`)}},
		{vocab.EventToolApproval, 1, 1, vocab.ApprovalPayload{Call: call, Question: "Run write_file?", State: vocab.ApprovalAnswered,
			Decision: vocab.Deny, Reason: "not that file"}},
	}
	inputs := []vocab.Input{
		in(vocab.InSubmit, func(v *vocab.Input) { v.ID = user.ID; v.Message = &user }),
		in(vocab.InSteer, func(v *vocab.Input) { v.ID = steer.ID; v.Message = &steer }),
		in(vocab.InInject, func(v *vocab.Input) {
			v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB3"
			v.Message = msg(vocab.UserText("Also check LICENSE."), v.ID, vocab.SourceInput)
		}),
		in(vocab.InNotify, func(v *vocab.Input) {
			v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB4"
			v.Message = msg(vocab.UserText("Build finished."), v.ID, vocab.SourceNotify)
			v.Message.BypassMaxSteps = true
			v.Bypass = true
		}),
		in(vocab.InRemind, func(v *vocab.Input) {
			v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB5"
			v.Message = msg(vocab.UserText("Tests are red."), v.ID, vocab.SourceReminder)
			v.Message.Key = "tests"
			v.Key = "tests"
		}),
		in(vocab.InWithdraw, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB6"; v.Target = "01J9Z3NDEKTSV4RRFFQ69G5FB3" }),
		in(vocab.InCancel, func(v *vocab.Input) {
			v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB7"
			v.Cause = &vocab.CancelCause{Kind: vocab.CancelHook, Reason: "budget"}
			v.KeepInbox = true
		}),
		in(vocab.InPause, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB8" }),
		in(vocab.InContinue, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FB9"; v.Resume = true }),
		in(vocab.InMaintenanceStart, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FBA" }),
		in(vocab.InMaintenanceDone, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FBA" }),
		in(vocab.InClose, func(v *vocab.Input) { v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FBB" }),
		in(vocab.InApprove, func(v *vocab.Input) {
			v.ID = "01J9Z3NDEKTSV4RRFFQ69G5FBC"
			v.Approval = &vocab.Approval{CallID: "call_1", Decision: vocab.Edit, Args: json.RawMessage(`{"path":"b.txt"}`)}
		}),
		in(vocab.InToolDetached, func(v *vocab.Input) { v.Work = 5; v.Text = "build started in the background" }),
		in(vocab.InModelParts, func(v *vocab.Input) {
			v.Work = 3
			v.Parts = []vocab.StreamPart{
				{Kind: vocab.StreamThinking, Text: "I should read it."},
				{Kind: vocab.StreamText, Text: "Reading it."},
				{Kind: vocab.StreamToolCall, Call: &call},
			}
		}),
		in(vocab.InModelDone, func(v *vocab.Input) {
			v.Work = 3
			v.Reply = &reply
			v.Finish = vocab.FinishToolCalls
			v.Usage = &usage
		}),
		in(vocab.InModelFailed, func(v *vocab.Input) {
			v.Work = 3
			v.Err = &vocab.Error{Code: vocab.CodeRateLimited, Message: "slow down", Retryable: true, RetryAfter: 2 * time.Second, Status: 429}
			v.Jitter = 0.25
		}),
		in(vocab.InToolUpdate, func(v *vocab.Input) { v.Work = 4; v.Text = "read 10 lines" }),
		in(vocab.InToolDone, func(v *vocab.Input) { v.Work = 4; v.Result = &result }),
		in(vocab.InHookDone, func(v *vocab.Input) {
			v.Work = 5
			v.Hook = &vocab.HookVerdict{Retry: true, History: []vocab.Message{user}}
		}),
		in(vocab.InTimerFired, func(v *vocab.Input) { v.Work = 6 }),
		in(vocab.InHooks, func(v *vocab.Input) { v.Slots = []vocab.HookName{vocab.HookWillBeginStep, vocab.HookRequestError} }),
		in(vocab.InStopped, func(v *vocab.Input) { v.Stuck = []vocab.StuckWork{{Work: 9, What: `tool "sleep" (call_9)`}} }),
		in(vocab.InOpen, func(v *vocab.Input) {
			v.Config = json.RawMessage(`{"session":"01J9Z3NDEKTSV4RRFFQ69G5FAV","model":"m-1","hooks":{}}`)
		}),
		in(vocab.InCheckpoint, func(v *vocab.Input) {}),
	}
	for _, v := range inputs {
		cases = append(cases, c{kind: v.EventKind(), turn: 1, step: 2, payload: v})
	}
	// Kinds added later come last, so the earlier golden files keep their
	// sequence numbers.
	cases = append(cases,
		c{vocab.EventYield, 0, 0, vocab.PromptPayload{Prompt: "01J9Z3NDEKTSV4RRFFQ69G5FB0", State: vocab.YieldYielded}},
		c{vocab.EventLane, 1, 1, vocab.LanePayload{Op: vocab.LaneWait, Work: 4, Waiting: 1}},
		c{vocab.Input{Kind: vocab.InSlotGranted}.EventKind(), 1, 1, in(vocab.InSlotGranted, func(v *vocab.Input) { v.Work = 4 })},
	)

	events := make([]vocab.Event, len(cases))
	for i, c := range cases {
		seq := uint64(i + 1)
		events[i] = vocab.Event{
			Session: session, Seq: seq,
			At:   goldenT0.Add(time.Duration(seq) * 1500 * time.Millisecond),
			Kind: c.kind, Turn: c.turn, Step: c.step, Payload: c.payload,
		}
	}
	return events
}

func marshalGolden(t *testing.T, ev vocab.Event) []byte {
	t.Helper()
	data, err := json.MarshalIndent(ev, "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return append(data, '\n')
}

// TestEventGolden checks the stable JSON encoding of one event per kind
// against its golden file, and that decoding the golden file gives back the
// event with its payload's Go type.
func TestEventGolden(t *testing.T) {
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range goldenEvents() {
		t.Run(string(want.Kind), func(t *testing.T) {
			path := goldenFile(want.Kind)
			data := marshalGolden(t, want)
			if *update {
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./vocab -run TestEventGolden -update)", err)
			}
			if !bytes.Equal(data, golden) {
				t.Errorf("encoding differs from %s (-golden +got):\n%s", path, cmp.Diff(string(golden), string(data)))
			}

			var got vocab.Event
			if err := json.Unmarshal(golden, &got); err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if diff := cmp.Diff(want, got, jsonEqual); diff != "" {
				t.Errorf("decode(%s) (-want +got):\n%s", path, diff)
			}
			if gt, wt := reflect.TypeOf(got.Payload), reflect.TypeOf(want.Payload); gt != wt {
				t.Errorf("payload type %v, want %v", gt, wt)
			}
			if again := marshalGolden(t, got); !bytes.Equal(again, golden) {
				t.Errorf("re-encoding the decoded event differs from %s:\n%s", path, cmp.Diff(string(golden), string(again)))
			}

			if !vocab.KnownKind(want.Kind) {
				t.Errorf("KnownKind(%q) = false", want.Kind)
			}
			raw, err := json.Marshal(want.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if want.Payload == nil {
				raw = nil
			}
			p, err := vocab.DecodePayload(want.Kind, raw)
			if err != nil {
				t.Fatalf("DecodePayload: %v", err)
			}
			if diff := cmp.Diff(want.Payload, p, jsonEqual); diff != "" {
				t.Errorf("DecodePayload (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoldenCoverage fails when a known kind has no golden case, or a golden
// file belongs to no case.
func TestGoldenCoverage(t *testing.T) {
	cases := map[vocab.EventKind]bool{}
	for _, ev := range goldenEvents() {
		if cases[ev.Kind] {
			t.Errorf("two golden cases for %q", ev.Kind)
		}
		cases[ev.Kind] = true
	}
	for _, k := range vocab.KnownKinds() {
		if !cases[k] {
			t.Errorf("kind %q has no golden case", k)
		}
	}
	for _, k := range declared(t, "input.go", "InputKind") {
		if kind := vocab.EventKind(vocab.InputEventPrefix + k); !cases[kind] {
			t.Errorf("input kind %q has no golden case %q", k, kind)
		}
	}
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for k := range cases {
		want[goldenFile(k)] = true
	}
	for _, f := range files {
		if !want[f] {
			t.Errorf("golden file %s belongs to no case", f)
		}
	}
}

// TestKnownKindsMatchDeclarations checks KnownKinds against the EventKind
// constants declared in event.go, in order, and that no input kind
// collides with one of them.
func TestKnownKindsMatchDeclarations(t *testing.T) {
	var decl []vocab.EventKind
	for _, v := range declared(t, "event.go", "EventKind") {
		decl = append(decl, vocab.EventKind(v))
	}
	if diff := cmp.Diff(decl, vocab.KnownKinds()); diff != "" {
		t.Errorf("KnownKinds vs the EventKind constants of event.go (-declared +KnownKinds):\n%s", diff)
	}
	for _, k := range declared(t, "input.go", "InputKind") {
		if kind := vocab.EventKind(vocab.InputEventPrefix + k); slices.Contains(decl, kind) {
			t.Errorf("input kind %q collides with event kind %q", k, kind)
		}
	}
	// KnownKinds returns a copy.
	kinds := vocab.KnownKinds()
	kinds[0] = "changed"
	if vocab.KnownKinds()[0] == "changed" {
		t.Errorf("KnownKinds aliases its table")
	}
}

// declared returns the values of the string constants of type typ declared
// in file, in order.
func declared(t *testing.T, file, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: a %s constant is not a string literal", file, typ)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				vals = append(vals, s)
			}
		}
	}
	if len(vals) == 0 {
		t.Fatalf("%s declares no %s constant", file, typ)
	}
	return vals
}

func TestDecodeUnknownKind(t *testing.T) {
	const data = `{"v":1,"id":"S-7","session":"S","seq":7,"at":"2025-03-01T12:00:00Z","kind":"future/thing","turn":2,"payload":{"b":[1,2],"a":"x"}}`
	var ev vocab.Event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("decoding an unknown kind failed: %v", err)
	}
	want := vocab.Event{Session: "S", Seq: 7, At: goldenT0, Kind: "future/thing", Turn: 2,
		Payload: vocab.RawPayload(`{"b":[1,2],"a":"x"}`)}
	if diff := cmp.Diff(want, ev); diff != "" {
		t.Errorf("decode (-want +got):\n%s", diff)
	}
	if vocab.KnownKind(ev.Kind) {
		t.Errorf("KnownKind(%q) = true", ev.Kind)
	}
	back, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != data {
		t.Errorf("re-encoded:\n%s\nwant:\n%s", back, data)
	}

	raw := json.RawMessage(`{"a":1}`)
	p, err := vocab.DecodePayload("future/thing", raw)
	if !errors.Is(err, vocab.ErrUnknownKind) {
		t.Errorf("DecodePayload error %v does not match ErrUnknownKind", err)
	}
	var uk *vocab.UnknownKindError
	if !errors.As(err, &uk) || uk.Kind != "future/thing" {
		t.Errorf("DecodePayload error %#v, want *UnknownKindError{future/thing}", err)
	}
	if want := `vocab: unknown event kind "future/thing"`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if diff := cmp.Diff(vocab.RawPayload(`{"a":1}`), p); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	raw[2] = 'z' // DecodePayload keeps a copy
	if string(p.(vocab.RawPayload)) != `{"a":1}` {
		t.Errorf("RawPayload aliases its input: %s", p)
	}

	// Absent payload: no payload, still an unknown kind.
	if p, err := vocab.DecodePayload("future/thing", nil); p != nil || !errors.Is(err, vocab.ErrUnknownKind) {
		t.Errorf("DecodePayload(unknown, nil) = %v, %v", p, err)
	}
	const bare = `{"v":1,"id":"S-8","session":"S","seq":8,"at":"2025-03-01T12:00:00Z","kind":"future/bare"}`
	var ev2 vocab.Event
	if err := json.Unmarshal([]byte(bare), &ev2); err != nil || ev2.Payload != nil {
		t.Fatalf("decode bare unknown = %+v, %v", ev2, err)
	}
	if back, _ := json.Marshal(ev2); string(back) != bare {
		t.Errorf("re-encoded:\n%s\nwant:\n%s", back, bare)
	}

	// "input/" alone names no input.
	if vocab.KnownKind("input/") {
		t.Errorf(`KnownKind("input/") = true`)
	}
	if _, err := vocab.DecodePayload("input/", json.RawMessage(`{}`)); !errors.Is(err, vocab.ErrUnknownKind) {
		t.Errorf(`DecodePayload("input/") error = %v`, err)
	}
	// An input kind from a newer writer is still an Input.
	p, err = vocab.DecodePayload("input/future", json.RawMessage(`{"kind":"future","at":"2025-03-01T12:00:00Z","work":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vocab.Input{Kind: "future", At: goldenT0, Work: 3}, p); diff != "" {
		t.Errorf("input/future (-want +got):\n%s", diff)
	}
}

func TestDecodeMalformed(t *testing.T) {
	tests := []struct{ name, data string }{
		{"payload of the wrong JSON type", `{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"machine/transition","payload":"oops"}`},
		{"payload field of the wrong type", `{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"turn/end","payload":{"reason":{"kind":"completed"},"steps":"two"}}`},
		{"input of another kind", `{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"input/submit","payload":{"kind":"steer","at":"2025-03-01T12:00:00Z"}}`},
		{"bad input time", `{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"input/pause","payload":{"kind":"pause","at":"yesterday"}}`},
		{"bad envelope", `{"id":"S-1","session":"S","seq":"one","at":"2025-03-01T12:00:00Z","kind":"agent/start"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := vocab.Event{Session: "keep", Seq: 99}
			ev := before
			err := json.Unmarshal([]byte(tt.data), &ev)
			var ve *vocab.Error
			if !errors.As(err, &ve) || ve.Code != vocab.CodeBadInput {
				t.Fatalf("error %v (%T), want a vocab *Error with code %s", err, err, vocab.CodeBadInput)
			}
			if !errors.Is(err, vocab.CodeBadInput.Err()) {
				t.Errorf("errors.Is(%v, CodeBadInput) = false", err)
			}
			if errors.Is(err, vocab.ErrUnknownKind) {
				t.Errorf("a malformed known kind matches ErrUnknownKind")
			}
			if diff := cmp.Diff(before, ev); diff != "" {
				t.Errorf("a failed decode changed the event (-before +after):\n%s", diff)
			}
		})
	}

	_, err := vocab.DecodePayload(vocab.EventUsage, json.RawMessage(`{"usage":[]}`))
	if vocab.CodeOf(err) != vocab.CodeBadInput {
		t.Errorf("DecodePayload(usage, bad) error = %v", err)
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		t.Errorf("DecodePayload error %v does not wrap the JSON error", err)
	}
}

func TestDecodeAbsentPayload(t *testing.T) {
	for _, kind := range append(vocab.KnownKinds(), vocab.EventKind("input/submit")) {
		for _, raw := range []string{"", "null", " null "} {
			p, err := vocab.DecodePayload(kind, json.RawMessage(raw))
			if p != nil || err != nil {
				t.Errorf("DecodePayload(%s, %q) = %v, %v; want nil, nil", kind, raw, p, err)
			}
		}
	}
	// A payload on a kind that carries none (from a newer writer) is kept.
	var ev vocab.Event
	if err := json.Unmarshal([]byte(`{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"agent/start","payload":{"v":2}}`), &ev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(any(vocab.RawPayload(`{"v":2}`)), ev.Payload); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	// Decoding replaces the whole event.
	ev = vocab.Event{Turn: 5, Step: 6, Payload: vocab.StatusPayload{Status: "x"}}
	if err := json.Unmarshal([]byte(`{"id":"S-2","session":"S","seq":2,"at":"2025-03-01T12:00:00Z","kind":"step/start"}`), &ev); err != nil {
		t.Fatal(err)
	}
	want := vocab.Event{Session: "S", Seq: 2, At: goldenT0, Kind: vocab.EventStepStart}
	if diff := cmp.Diff(want, ev); diff != "" {
		t.Errorf("decode into a used event (-want +got):\n%s", diff)
	}
}

func TestRawPayloadJSON(t *testing.T) {
	for _, tt := range []struct {
		p    vocab.RawPayload
		want string
	}{{nil, "null"}, {vocab.RawPayload(`[1, 2]`), "[1,2]"}, {vocab.RawPayload(`"s"`), `"s"`}} {
		got, err := json.Marshal(tt.p)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%q) = %s, %v; want %s", tt.p, got, err, tt.want)
		}
	}
	var p vocab.RawPayload
	src := []byte(`{"a":1}`)
	if err := json.Unmarshal(src, &p); err != nil {
		t.Fatal(err)
	}
	src[2] = 'z'
	if string(p) != `{"a":1}` {
		t.Errorf("RawPayload.UnmarshalJSON aliases its input: %s", p)
	}
}

func TestEventID(t *testing.T) {
	for _, tt := range []struct {
		session vocab.ID
		seq     uint64
		want    vocab.ID
	}{
		{session, 1, session + "-1"},
		{session, 42, session + "-42"},
		{session, 0, session + "-0"},
		{session, 1<<64 - 1, session + "-18446744073709551615"},
		{"", 7, "-7"},
	} {
		if got := vocab.EventID(tt.session, tt.seq); got != tt.want {
			t.Errorf("EventID(%q, %d) = %q, want %q", tt.session, tt.seq, got, tt.want)
		}
	}
	// Deterministic and distinct.
	seen := map[vocab.ID]uint64{}
	for seq := uint64(1); seq <= 1000; seq++ {
		id := vocab.EventID(session, seq)
		if again := vocab.EventID(session, seq); again != id {
			t.Fatalf("EventID(%d) = %q then %q", seq, id, again)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("EventID(%d) = EventID(%d) = %q", seq, prev, id)
		}
		seen[id] = seq
	}
	if other := vocab.EventID("01J9Z3NDEKTSV4RRFFQ69G5FAW", 1); other == vocab.EventID(session, 1) {
		t.Errorf("two sessions share event id %q", other)
	}
	var sink vocab.ID
	if n := testing.AllocsPerRun(100, func() { sink = vocab.EventID(session, 123456789) }); n != 1 {
		t.Errorf("EventID allocates %v times, want 1", n)
	}
	_ = sink
}

func TestFinishInterrupted(t *testing.T) {
	if !vocab.FinishInterrupted.Valid() {
		t.Errorf("%q is not valid", vocab.FinishInterrupted)
	}
	if vocab.FinishInterrupted != "interrupted" {
		t.Errorf("FinishInterrupted = %q", vocab.FinishInterrupted)
	}
}

// TestIsEventID: IsEventID accepts exactly the ids EventID makes (no
// leading zero, no other prefix or separator, every digit).
func TestIsEventID(t *testing.T) {
	for _, tc := range []struct {
		id, session vocab.ID
		seq         uint64
		want        bool
	}{
		{"s-1", "s", 1, true}, {"s-10", "s", 10, true}, {"s-0", "s", 0, true},
		{"s-18446744073709551615", "s", 1<<64 - 1, true}, {"-1", "", 1, true},
		{"s-01", "s", 1, false}, {"s-1", "s", 11, false}, {"s-11", "s", 1, false}, {"s-", "s", 1, false},
		{"t-1", "s", 1, false}, {"s_1", "s", 1, false}, {"", "s", 1, false}, {"s-1", "", 1, false},
		{"ss-1", "s", 1, false}, {"s-1x", "s", 1, false},
	} {
		if got := vocab.IsEventID(tc.id, tc.session, tc.seq); got != tc.want {
			t.Errorf("IsEventID(%q, %q, %d) = %v, want %v", tc.id, tc.session, tc.seq, got, tc.want)
		}
		if tc.want {
			if id := vocab.EventID(tc.session, tc.seq); id != tc.id {
				t.Errorf("EventID(%q, %d) = %q, want %q", tc.session, tc.seq, id, tc.id)
			}
		}
	}
}

// TestEventIDEncoding: an event's id is derived, never stored; it is
// encoded as "id" right after the version, and a decoded "id" other than
// the derived one is refused (a log whose envelope was altered), while an
// event without one decodes.
func TestEventIDEncoding(t *testing.T) {
	ev := vocab.Event{Session: "S", Seq: 12, At: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), Kind: vocab.EventAgentStart}
	if ev.ID() != "S-12" {
		t.Fatalf("ID() = %q, want S-12", ev.ID())
	}
	b, err := json.Marshal(ev)
	if err != nil || !strings.HasPrefix(string(b), `{"v":1,"id":"S-12","session":"S","seq":12,`) {
		t.Fatalf("encoding %s (%v): want the version, then the id", b, err)
	}
	var back vocab.Event
	if err := json.Unmarshal(b, &back); err != nil || back.ID() != "S-12" || back.Seq != 12 {
		t.Fatalf("decoding %s: %+v, %v", b, back, err)
	}
	for _, bad := range []string{
		`{"id":"S-13","session":"S","seq":12,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`,
		`{"id":"01J9Z3NDEKTSV4RRFFQ69G5FAV","session":"S","seq":12,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`,
		`{"id":"T-12","session":"S","seq":12,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`,
	} {
		keep := back
		err := json.Unmarshal([]byte(bad), &keep)
		if vocab.CodeOf(err) != vocab.CodeBadInput || keep != back {
			t.Errorf("decoding %s: %v (event %+v), want %s and the event unchanged", bad, err, keep, vocab.CodeBadInput)
		}
	}
	if err := json.Unmarshal([]byte(`{"session":"S","seq":3,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`), &back); err != nil || back.ID() != "S-3" {
		t.Errorf("an event without an id: %v, id %q", err, back.ID())
	}
}

func BenchmarkEventID(b *testing.B) {
	b.ReportAllocs()
	for i := range b.N {
		_ = vocab.EventID(session, uint64(i))
	}
}

// An event of a newer envelope version is refused with log.schema, not
// misread; the encoding carries the version first.
func TestEventVersion(t *testing.T) {
	var ev vocab.Event
	err := json.Unmarshal([]byte(`{"v":2,"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`), &ev)
	if vocab.CodeOf(err) != vocab.CodeSchema {
		t.Errorf("a version-2 event: %v, want %s", err, vocab.CodeSchema)
	}
	if err := json.Unmarshal([]byte(`{"id":"S-1","session":"S","seq":1,"at":"2025-03-01T12:00:00Z","kind":"agent/start"}`), &ev); err != nil {
		t.Errorf("an event without a version (version 1): %v", err)
	}
	b, err := json.Marshal(ev)
	if err != nil || !strings.HasPrefix(string(b), `{"v":1,`) {
		t.Errorf("encoding %s (%v): want the version first", b, err)
	}
}
