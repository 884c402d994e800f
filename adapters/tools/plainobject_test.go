package tools

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// plainObject proves JSON valid only when it is: on inputs built from
// JSON's tokens and a few stray bytes, anything it accepts json.Valid
// accepts; and it accepts the flat objects of plain values tool calls
// mostly have.
func TestPlainObjectImpliesValid(t *testing.T) {
	for _, s := range []string{`{}`, ` { } `, `{"i":7}`, "{\"a\" : \"b\" ,\n\"c\":-0.5e+3,\"d\":true,\"e\":false,\"f\":null}", `{"é":"😀"}`, `{"n":0}`, `{"n":10E2}`} {
		if !plainObject([]byte(s)) || !json.Valid([]byte(s)) {
			t.Errorf("%q: plainObject %v, json.Valid %v, want both true", s, plainObject([]byte(s)), json.Valid([]byte(s)))
		}
	}
	for _, s := range []string{``, `[]`, `{"a":{}}`, `{"a":[1]}`, `{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`,
		`{"a":tru}`, `{"a":"\n"}`, `{"a\"":1}`, "{\"a\":\"\xff\"}", `{"a" 1}`, `{"a":1} x`, `{"a":1`, `{a:1}`, `{"a":+1}`} {
		if plainObject([]byte(s)) {
			t.Errorf("%q: plainObject true, want false", s)
		}
	}
	tokens := []string{"{", "}", "[", "]", ":", ",", " ", "\n", `"a"`, `"b"`, `"\u00e9"`, `"x\"y"`, "\"\xff\"", `"`, `\`,
		"0", "1", "-", "+", ".", "e", "E", "12", "00", "true", "false", "null", "tru", "nul", "x", "\t", "\x00"}
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for range 200000 {
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteString("{")
		}
		for range rng.IntN(12) {
			b.WriteString(tokens[rng.IntN(len(tokens))])
		}
		data := []byte(b.String())
		if plainObject(data) {
			accepted++
			if !json.Valid(data) {
				t.Fatalf("%q: plainObject true, json.Valid false", data)
			}
		}
	}
	if accepted == 0 {
		t.Error("no random input was a plain object: the test proves nothing")
	}
}

// FuzzPlainObject: whatever plainObject accepts, json.Valid accepts.
func FuzzPlainObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"i":7}`, `{"a":"b","c":-1.5e3,"d":null}`, `{"a":01}`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if plainObject(data) && !json.Valid(data) {
			t.Fatalf("%q: plainObject true, json.Valid false", data)
		}
	})
}
