package tools

import (
	"encoding/json"
	"testing"
)

// The quick scan never misses a duplicate the precise check finds, and
// clears the common cases.
func TestMayHaveDuplicateKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{}`, false},
		{`{"a":1,"b":2}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":{"b":1},"b":2}`, false},
		{`{"a":{"b":1,"b":2}}`, true},
		{`{"a":[{"b":1},{"b":2}]}`, false},
		{`{"a":"b","b":"a"}`, false},
		{`{"a":"x,\"a\":1"}`, false},
		{`{"a\u0062":1,"ab":2}`, true}, // escaped: the precise check decides
		{`[{"x":1},{"x":1,"y":[1,{"x":2}]}]`, false},
		{` { "k" : 1 , "k" : 2 } `, true},
	} {
		if got := mayHaveDuplicateKey([]byte(tc.in)); got != tc.want {
			t.Errorf("mayHaveDuplicateKey(%s) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzMayHaveDuplicateKey: whenever the precise check finds a duplicate
// key, the quick scan says it might.
func FuzzMayHaveDuplicateKey(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[{"x":1},{"x":1}]`, `{"a\u0061":1,"aa":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		if duplicateKey(data) != "" && !mayHaveDuplicateKey(data) {
			t.Fatalf("the quick scan missed the duplicate key in %s", data)
		}
	})
}
