package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/flatten")

// TestFlattenGolden flattens testdata/flatten/NAME.in.json and compares
// the result with NAME.out.json (go test -run TestFlattenGolden -update
// rewrites them; review the diff).
func TestFlattenGolden(t *testing.T) {
	ins, err := filepath.Glob(filepath.Join("testdata", "flatten", "*.in.json"))
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FlattenSchema(src)
			if err != nil {
				t.Fatalf("FlattenSchema: %v", err)
			}
			outFile := strings.TrimSuffix(in, ".in.json") + ".out.json"
			if *update {
				if err := os.WriteFile(outFile, append(bytes.Clone(got), '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(outFile)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bytes.TrimSpace(want)) {
				t.Errorf("FlattenSchema(%s)\n got %s\nwant %s", in, got, bytes.TrimSpace(want))
			}
			checkFlat(t, got)
			// Deterministic, and a fixed point.
			for range 3 {
				again, err := FlattenSchema(src)
				if err != nil || !bytes.Equal(again, got) {
					t.Fatalf("second run differs: %s, %v", again, err)
				}
			}
			if twice, err := FlattenSchema(got); err != nil || !bytes.Equal(twice, got) {
				t.Errorf("flattening the output changes it:\n got %s\nwant %s (%v)", twice, got, err)
			}
		})
	}
}

// checkFlat fails t if the schema s still holds a $ref, $defs,
// definitions or a type array where a schema keyword is expected.
func checkFlat(t *testing.T, s []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(s, &v); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	var walk func(node any, at string)
	walk = func(node any, at string) {
		m, ok := node.(map[string]any)
		if !ok {
			return
		}
		for k, sub := range m {
			switch {
			case k == "$ref" || k == "$defs" || k == "definitions":
				t.Errorf("%s: %s left in the output", at, k)
			case k == "type":
				if _, isList := sub.([]any); isList {
					t.Errorf("%s: type array left in the output", at)
				}
			case schemaListKeywords[k]:
				if list, ok := sub.([]any); ok {
					for i, e := range list {
						walk(e, fmt.Sprintf("%s/%s/%d", at, k, i))
					}
				} else {
					walk(sub, at+"/"+k)
				}
			case schemaKeywords[k]:
				walk(sub, at+"/"+k)
			case schemaMapKeywords[k]:
				if mm, ok := sub.(map[string]any); ok {
					for name, e := range mm {
						walk(e, at+"/"+k+"/"+name)
					}
				}
			}
		}
	}
	walk(v, "")
}

func TestFlattenErrors(t *testing.T) {
	cases := []struct {
		name, schema string
		want         error
		wantMsg      string
	}{
		{"direct recursion", `{"$defs":{"Node":{"type":"object","properties":{"next":{"$ref":"#/$defs/Node"}}}},"properties":{"root":{"$ref":"#/$defs/Node"}}}`,
			ErrRecursiveRef, `flatten schema: at /$defs/Node/properties/next: $ref "#/$defs/Node": recursive $ref (#/$defs/Node → #/$defs/Node)`},
		{"indirect recursion", `{"properties":{"a":{"$ref":"#/definitions/A"}},"definitions":{"A":{"items":{"$ref":"#/definitions/B"}},"B":{"anyOf":[{"$ref":"#/definitions/A"}]}}}`,
			ErrRecursiveRef, `flatten schema: at /definitions/B/anyOf/0: $ref "#/definitions/A": recursive $ref (#/definitions/A → #/definitions/B → #/definitions/A)`},
		{"root recursion", `{"type":"object","properties":{"child":{"$ref":"#"}}}`,
			ErrRecursiveRef, `flatten schema: at /properties/child: $ref "#": recursive $ref (# → #)`},
		{"recursion through containment", `{"properties":{"a":{"properties":{"b":{"$ref":"#/properties/a"}}}}}`,
			ErrRecursiveRef, `flatten schema: at /properties/a/properties/b: $ref "#/properties/a": recursive $ref (#/properties/a → #/properties/a)`},
		{"remote ref", `{"properties":{"a":{"$ref":"https://example.com/s.json#/x"}}}`,
			ErrUnsupportedRef, `flatten schema: at /properties/a: $ref "https://example.com/s.json#/x": unsupported $ref`},
		{"anchor ref", `{"properties":{"a":{"$ref":"#thing"}}}`,
			ErrUnsupportedRef, `flatten schema: at /properties/a: $ref "#thing": unsupported $ref`},
		{"non-string ref", `{"properties":{"a":{"$ref":7}}}`,
			ErrUnsupportedRef, `flatten schema: at /properties/a: unsupported $ref: not a string`},
		{"unresolved ref", `{"properties":{"a":{"$ref":"#/$defs/Missing"}}}`,
			ErrUnresolvedRef, `flatten schema: at /properties/a: $ref "#/$defs/Missing": unresolved $ref`},
		{"bad index", `{"$defs":{"L":[{"type":"string"}]},"properties":{"a":{"$ref":"#/$defs/L/01"}}}`,
			ErrUnresolvedRef, `flatten schema: at /properties/a: $ref "#/$defs/L/01": unresolved $ref`},
		{"not JSON", `{"type":`, ErrNotSchema, `flatten schema: at /: not a JSON Schema: unexpected EOF`},
		{"trailing data", `{} {}`, ErrNotSchema, `flatten schema: at /: not a JSON Schema: data after the schema`},
		{"array", `[{"type":"string"}]`, ErrNotSchema, `flatten schema: at /: not a JSON Schema: want an object or a boolean`},
		{"too large", explosive(20), ErrSchemaTooLarge, ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := FlattenSchema(json.RawMessage(c.schema))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %s, %v; want %v", out, err, c.want)
			}
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Errorf("error %T is not a *SchemaError", err)
			}
			if c.wantMsg != "" && err.Error() != c.wantMsg {
				t.Errorf("message\n got %s\nwant %s", err, c.wantMsg)
			}
		})
	}
}

// explosive returns a schema of n definitions, each using the next twice:
// inlined, it would hold 2^n copies of the last.
func explosive(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{"properties":{"a":{"$ref":"#/$defs/d%d"},"b":{"$ref":"#/$defs/d%d"}}},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return b.String()
}

func TestFlattenEmpty(t *testing.T) {
	for _, in := range []string{"", " \n"} {
		out, err := FlattenSchema(json.RawMessage(in))
		if out != nil || err != nil {
			t.Errorf("FlattenSchema(%q) = %s, %v; want nothing", in, out, err)
		}
	}
	// Small sharing is fine: 2^8 copies stay under the cap.
	if _, err := FlattenSchema(json.RawMessage(explosive(8))); err != nil {
		t.Errorf("explosive(8): %v", err)
	}
}

// FuzzFlattenSchema checks that FlattenSchema never panics, returns a
// *SchemaError when it fails and valid JSON when it does not.
func FuzzFlattenSchema(f *testing.F) {
	ins, _ := filepath.Glob(filepath.Join("testdata", "flatten", "*.in.json"))
	for _, in := range ins {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(explosive(4)))
	f.Add([]byte(`{"$ref":"#","type":["a",1]}`))
	f.Fuzz(func(t *testing.T, schema []byte) {
		out, err := FlattenSchema(schema)
		if err != nil {
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("error %T: %v", err, err)
			}
			return
		}
		if len(bytes.TrimSpace(schema)) > 0 && !json.Valid(out) {
			t.Fatalf("invalid output %q", out)
		}
	})
}
