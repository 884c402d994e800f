package loopguard_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/machines/loopguard"
	"github.com/loopchart/loopchart/vocab"
)

func TestHashArgsCanonical(t *testing.T) {
	h := func(args string) uint64 { return loopguard.HashArgs("read", json.RawMessage(args)) }
	same := [][2]string{
		{`{"b":1,"a":[1,{"d":2,"c":3}]}`, " { \"a\" : [1, {\"c\":3,\"d\":2}],\n\t\"b\":1 } "},
		{`{"a":"\u0061"}`, `{"a":"a"}`},
		{`{"\u0062":1}`, `{"b":1}`},
		{`{"a":"\/"}`, `{"a":"/"}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{``, `{}`},
		{"  \n", `{}`},
		{`[ 1 , true , null ]`, `[1,true,null]`},
	}
	for _, p := range same {
		if h(p[0]) != h(p[1]) {
			t.Errorf("HashArgs(%q) != HashArgs(%q)", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":1.0}`}, // numbers as written
		{`{"a":1}`, `{"a":"1"}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{a:1}`, `{a:2}`}, // not JSON: the bytes
		{`{a:1}`, `{"a":1}`},
		{`{}`, `null`},
		{`{"a":{}}`, `{"a":[]}`},
	}
	for _, p := range differ {
		if h(p[0]) == h(p[1]) {
			t.Errorf("HashArgs(%q) == HashArgs(%q)", p[0], p[1])
		}
	}
	if loopguard.HashArgs("read", json.RawMessage(`{"p":1}`)) == loopguard.HashArgs("write", json.RawMessage(`{"p":1}`)) {
		t.Error("the tool name is not mixed in")
	}
	if loopguard.HashArgs("read", nil) != h(`{}`) {
		t.Error("nil arguments differ from {}")
	}
}

// TestHashArgsScratch: hashing in a kept scratch gives HashArgs' hash,
// whatever the scratch held before.
func TestHashArgsScratch(t *testing.T) {
	var scratch []byte
	for _, args := range []string{``, `{}`, ` {"b":1,"a":[1,{"d":2,"c":3}]} `, `{"a":"\u0061"}`, `not json`, `[1,2]`, `"s"`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":{"x":[true,null]}}`, `{}`} {
		var got uint64
		got, scratch = loopguard.HashArgsScratch("read", json.RawMessage(args), scratch)
		if want := loopguard.HashArgs("read", json.RawMessage(args)); got != want {
			t.Errorf("%q: HashArgsScratch %x, HashArgs %x", args, got, want)
		}
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		drop     []string
	}{
		{` {"b":[1, 2.50],"a":"x\n\u00e9\u0001"} `, `{"a":"x\n` + "é" + `\u0001","b":[1,2.50]}`, nil},
		{`{"id":1,"x":{"id":2,"y":[{"id":3,"z":4}]},"ts":"t"}`, `{"x":{"y":[{"z":4}]}}`, []string{"id", "ts"}},
		{`[{"b":1,"a":2}]`, `[{"a":2,"b":1}]`, nil},
		{`"plain"`, `"plain"`, nil},
		{`{"k":"q\"b\\"}`, `{"k":"q\"b\\"}`, nil},
	} {
		got, ok := loopguard.Canonical([]byte(tc.in), tc.drop)
		if !ok || string(got) != tc.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	if got, ok := loopguard.Canonical([]byte(`{oops`), nil); ok || string(got) != `{oops` {
		t.Errorf("Canonical(invalid) = %q, %v", got, ok)
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"at 2024-05-01T12:30:45.123Z failed", "at # failed"},
		{"2024-05-01 12:30:45+02:00 x", "# x"},
		{"2024-05-01t12:30:45.1234567", "#7"}, // \.\d{1,6}
		{"12:30:45", "#"},
		{"9:05:01.5 up", "# up"},
		{"123:45:67", "1#"},
		{"Attempt 3 of 5", "# of 5"},
		{"retry=2; RETRY #4", "#; #"},
		{"retrying 3", "retrying 3"},
		{"attempt", "attempt"},
		{"took 12ms", "took #"},
		{"3.2s", "#"},
		{"5 minutes, 1 hour, 2 seconds, 7second", "#, #, #, #"},
		{"10 MS", "#"},
		{"abc10ms", "abc10ms"},
		{"10msx", "10msx"},
		{"10  s", "10  s"},
		{"5sec", "5sec"},
		{"1.5x", "1.5x"},
		{"pid 4242, ppid=1", "#, #"},
		{"rapid 5", "rapid 5"},
		{"12:30:45 took 3s (attempt 2, pid 77)", "# took # (#, #)"},
		{"done in 4 ns / 3us", "done in # / #"},
		{"nothing volatile here: 42 files", "nothing volatile here: 42 files"},
		{"", ""},
	} {
		if got := loopguard.Normalize(tc.in); got != tc.want {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestNormalizeMatchesRegexps: Normalize gives what the regular
// expressions of its doc comment give, applied in order with
// ReplaceAllString, on seeded random text made of the pieces they look
// for (digits, separators, units, keywords).
func TestNormalizeMatchesRegexps(t *testing.T) {
	patterns := []*regexp.Regexp{
		regexp.MustCompile(`\d{4}-\d{2}-\d{2}[tT ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([zZ]|[+-]\d{2}:\d{2})?`),
		regexp.MustCompile(`\d{1,2}:\d{2}:\d{2}(\.\d{1,6})?`),
		regexp.MustCompile(`(?i)\b(attempt|retry)\b[\s#:=]*\d+`),
		regexp.MustCompile(`(?i)\b\d+(\.\d+)?\s?(ns|us|ms|seconds?|minutes?|hours?|s)\b`),
		regexp.MustCompile(`(?i)\b(pid|ppid)\b[\s#:=]*\d+`),
	}
	reference := func(s string) string {
		for _, re := range patterns {
			s = re.ReplaceAllString(s, "#")
		}
		return s
	}
	pieces := []string{"0", "1", "12", "2024", "05", "-", ":", ".", " ", "T", "t", "Z", "+", "#", "=", "_",
		"ms", "MS", "s", "ns", "us", "sec", "second", "seconds", "minute", "hours", "x", "a",
		"attempt", "Retry", "pid", "PPID", "rapid", "ok", "done"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		var b []byte
		for range rng.IntN(12) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		s := string(b)
		if got, want := loopguard.Normalize(s), reference(s); got != want {
			t.Fatalf("Normalize(%q) = %q, the regular expressions give %q", s, got, want)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	res := func(content string) vocab.ToolResult { return vocab.ToolResult{Name: "t", Content: content} }
	errRes := func(content string) vocab.ToolResult {
		return vocab.ToolResult{Name: "t", Content: content, IsError: true, Code: vocab.CodeToolFailed}
	}
	eq := func(a, b loopguard.Outcome) bool { return a == b }

	// Vetoes: no result.
	for _, code := range []vocab.Code{loopguard.CodeBlocked, vocab.CodeToolDenied, vocab.CodeToolSkipped, vocab.CodeToolMaxTokens} {
		o := loopguard.OutcomeOf(vocab.ToolResult{Name: "t", Content: "no", IsError: true, Code: code}, nil)
		if !o.Veto || o.HasResult || o.ResultHash != 0 {
			t.Errorf("%s: %+v, want a veto", code, o)
		}
	}
	// Errors: no progress, hashed apart from the same content as a result.
	e := loopguard.OutcomeOf(errRes("boom"), nil)
	if !e.HasResult || !e.NoProgress || e.Veto || e.UnknownTool != "" {
		t.Errorf("error: %+v", e)
	}
	if r := loopguard.OutcomeOf(res("boom"), nil); r.ResultHash == e.ResultHash || r.NoProgress {
		t.Errorf("result %+v vs error %+v", r, e)
	}
	if !eq(loopguard.OutcomeOf(errRes("timeout after 3.2s (attempt 2)"), nil), loopguard.OutcomeOf(errRes("timeout after 4.1s (attempt 3)"), nil)) {
		t.Error("volatile spans of an error are not ignored")
	}
	// Unknown tools.
	u := loopguard.OutcomeOf(vocab.ToolResult{Name: "browse", Content: `unknown tool "browse"`, IsError: true, Code: vocab.CodeToolUnknown}, nil)
	if u.UnknownTool != "browse" || !u.NoProgress {
		t.Errorf("unknown: %+v", u)
	}
	// Facts win over content.
	f1 := loopguard.OutcomeOf(vocab.ToolResult{Name: "t", Content: "at 1", Facts: "pending"}, nil)
	f2 := loopguard.OutcomeOf(vocab.ToolResult{Name: "t", Content: "at 2", Facts: "pending"}, nil)
	f3 := loopguard.OutcomeOf(vocab.ToolResult{Name: "t", Content: "at 1", Facts: "passed"}, nil)
	if !eq(f1, f2) || eq(f1, f3) || f1.NoProgress {
		t.Errorf("facts: %+v %+v %+v", f1, f2, f3)
	}
	// Plain content: volatile spans ignored, the rest compared.
	if !eq(loopguard.OutcomeOf(res("built in 12ms"), nil), loopguard.OutcomeOf(res("built in 15ms"), nil)) {
		t.Error("durations are not ignored")
	}
	if eq(loopguard.OutcomeOf(res("built"), nil), loopguard.OutcomeOf(res("failed"), nil)) {
		t.Error("different contents hash alike")
	}
	// JSON content: canonical, volatile keys dropped at any depth.
	vol := []string{"requestId", "at"}
	a := loopguard.OutcomeOf(res(`{"status":"ok","requestId":"r1","meta":{"requestId":"x","n":1},"list":[{"at":"t1","v":2}]}`), vol)
	b := loopguard.OutcomeOf(res(` { "meta" : {"n":1, "requestId":"y"}, "list":[{"v":2,"at":"t2"}], "requestId":"r2", "status":"ok" } `), vol)
	c := loopguard.OutcomeOf(res(`{"status":"failed","requestId":"r1","meta":{"requestId":"x","n":1},"list":[{"at":"t1","v":2}]}`), vol)
	if !eq(a, b) {
		t.Error("volatile keys or layout are not ignored")
	}
	if eq(a, c) {
		t.Error("a changed status hashes alike")
	}
	if eq(a, loopguard.OutcomeOf(res(`{"status":"ok","requestId":"r1","meta":{"requestId":"x","n":1},"list":[{"at":"t1","v":2}]}`), nil)) {
		t.Error("without volatile keys, the ids should count")
	}
	// Timestamps inside JSON strings are volatile spans too.
	if !eq(loopguard.OutcomeOf(res(`{"s":"queued since 2024-01-01T10:00:00Z"}`), nil), loopguard.OutcomeOf(res(`{"s":"queued since 2024-01-01T10:05:00Z"}`), nil)) {
		t.Error("a timestamp inside JSON is not ignored")
	}
}

// FuzzCanonical: the canonical form of valid JSON is valid JSON with the
// same meaning, and canonicalising it again changes nothing; Normalize
// never panics and is idempotent on its own output's "#" spans.
// TestAsIs: which arguments are hashed as they are. Each one accepted is
// its own canonical form and hashes as HashArgs did without the shortcut;
// each one refused takes the general path, with the same hash as its
// canonical form's.
func TestAsIs(t *testing.T) {
	as := []string{`{}`, `[]`, `{"a":1}`, `{"i":50}`, `{"a":1,"b":[true,false,null,"x",-0.5e+3]}`, `{"":1,"a":{"b":{}}}`,
		`"s"`, `0`, `-1.25E-7`, `{"path":"src/日本.go","q":"it's <ok> & fine"}`, `[[],[{}]]`}
	for _, in := range as {
		if !loopguard.AsIs([]byte(in)) {
			t.Errorf("AsIs(%q) = false, want true", in)
		}
		if out, ok := loopguard.Canonical([]byte(in), nil); !ok || string(out) != in {
			t.Errorf("%q accepted, but its canonical form is %q", in, out)
		}
	}
	not := []string{``, ` {}`, `{ }`, `{"a": 1}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":"\u0061"}`, `{"a":"x\ny"}`,
		"{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":1}x`, `{a:1}`, `nul`, `{"a":[1}`, strings.Repeat("[", 40) + strings.Repeat("]", 40)}
	for _, in := range not {
		if loopguard.AsIs([]byte(in)) {
			t.Errorf("AsIs(%q) = true, want false", in)
		}
		if got, want := loopguard.HashArgs("t", json.RawMessage(in)), loopguard.HashGeneral("t", json.RawMessage(in)); got != want {
			t.Errorf("HashArgs(%q) = %x, want %x", in, got, want)
		}
	}
	// Both paths agree on what is the same call: a refused input that is
	// valid hashes as its canonical form, which the shortcut takes.
	for _, in := range []string{`{"b":1,"a":2}`, `{ "a" : 1 }`, `{"a":"\u0061"}`, `{"a":1,"a":2}`} {
		out, ok := loopguard.Canonical([]byte(in), nil)
		if !ok || !loopguard.AsIs(out) {
			t.Fatalf("Canonical(%q) = %q, %v: not taken as is", in, out, ok)
		}
		if loopguard.HashArgs("t", json.RawMessage(in)) != loopguard.HashArgs("t", out) {
			t.Errorf("%q and its canonical form %q hash differently", in, out)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"i":7}`, `{"a":[1,{"b":"c"}],"d":null}`, `{"b":1,"a":[1,{"d":2,"c":3}]}`, `"x\u0000\n"`, `[]`, `{"a":{"a":{"a":null}}}`, `{"a":1,"a":2}`, `1e5`, "at 12:30:45 took 3.2s attempt 2 pid 4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_ = loopguard.Normalize(in)
		if got, want := loopguard.HashArgs("t", json.RawMessage(in)), loopguard.HashGeneral("t", json.RawMessage(in)); got != want {
			t.Fatalf("HashArgs(%q) = %x, without the shortcut %x", in, got, want)
		}
		if loopguard.AsIs([]byte(in)) {
			// The shortcut's promise: valid JSON, its own canonical form.
			if !json.Valid([]byte(in)) {
				t.Fatalf("AsIs(%q) but not JSON", in)
			}
			if out, _ := loopguard.Canonical([]byte(in), nil); string(out) != in {
				t.Fatalf("AsIs(%q) but its canonical form is %q", in, out)
			}
		}
		out, ok := loopguard.Canonical([]byte(in), nil)
		if !ok {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q: not JSON", in, out)
		}
		again, _ := loopguard.Canonical(out, nil)
		if string(again) != string(out) {
			t.Fatalf("not idempotent: %q → %q → %q", in, out, again)
		}
		a, errA := decodeNumbers([]byte(in))
		b, errB := decodeNumbers(out)
		if errA != nil || errB != nil {
			t.Fatalf("cannot decode %q or %q: %v, %v", in, out, errA, errB)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("meaning changed: %q → %q", in, out)
		}
	})
}

// decodeNumbers decodes JSON keeping numbers as written.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
