package tools

import (
	"reflect"
	"testing"
)

type flatArgs struct {
	Path  string  `json:"path"`
	N     int     `json:"n,omitempty"`
	Ratio float64 `json:"ratio,omitempty"`
	On    *bool   `json:"on,omitempty"`
}

// The quick path accepts only what the full path accepts, with the same
// value.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{`{"path":"a"}`, `{"path":"a","n":2}`, `{"PATH":"a"}`, `{"path":"a","path":"b"}`,
		`{"path":1}`, `{"n":1.5}`, `{"on":true,"ratio":0.5}`, `{"x":1}`, `[1]`, `{"path":"a"} x`, `{"p\u0061th":"a"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := decodeFlat[flatArgs](data); ok {
			agreesWithFull(t, "quick", data, fast)
		}
	})
}

// agreesWithFull fails t unless the full decoding path takes data too and
// gives what the quick path named path gave (fast).
func agreesWithFull[T any](t *testing.T, path string, data []byte, fast T) {
	t.Helper()
	full, problem := decodeFull[T](data, nil)
	if problem != "" {
		t.Fatalf("the %s path took %s, which the full path refuses: %s", path, data, problem)
	}
	if !reflect.DeepEqual(fast, full) {
		t.Fatalf("%s: %s %+v, full %+v", data, path, fast, full)
	}
}

func TestDecodeFlat(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"path":"a","n":2}`, true},
		{`{}`, true},
		{` {"path":"a"} `, true},
		{`{"PATH":"a"}`, false},
		{`{"path":"a","path":"b"}`, false},
		{`{"path":1}`, false},
		{`{"x":1}`, false},
		{`[1]`, false},
		{`null`, false},
	} {
		if _, ok := decodeFlat[flatArgs]([]byte(tc.in)); ok != tc.ok {
			t.Errorf("decodeFlat(%s) ok = %v, want %v", tc.in, ok, tc.ok)
		}
	}
	if _, ok := decodeFlat[struct {
		Inner struct{ A int } `json:"inner"`
	}]([]byte(`{"inner":{"A":1}}`)); ok {
		t.Error("a nested struct took the quick path")
	}
}
