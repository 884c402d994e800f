package vocab_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/loopchart/loopchart/vocab"
)

// FuzzDecodeEvent feeds arbitrary bytes to the event decoder a log reader
// uses. It never panics; every error is typed (input.bad); whatever it
// accepts re-encodes to a form it decodes again to the same encoding.
func FuzzDecodeEvent(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no golden events to seed from: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"input/submit","payload":{"kind":"steer"}}`))
	f.Add([]byte(`{"kind":"from/the-future","payload":[1,2,3]}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev vocab.Event
		if err := ev.UnmarshalJSON(data); err != nil {
			if c := vocab.CodeOf(err); c != vocab.CodeBadInput && c != vocab.CodeSchema {
				t.Fatalf("untyped error %v (code %s)", err, vocab.CodeOf(err))
			}
			return
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("an accepted event does not encode: %v", err)
		}
		var back vocab.Event
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		again, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, again) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b, again)
		}
	})
}

// FuzzToolCallArgs: whatever bytes a model writes as a call's arguments,
// the call encodes, and decodes back to the same bytes.
func FuzzToolCallArgs(f *testing.F) {
	for _, s := range []string{`{"path":"a"}`, `{"path":`, "", "null", "\xff{", `"just a string"`, "[1,2]", " {} "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		c := vocab.ToolCall{ID: "c1", Name: "read", Args: args}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%q does not encode: %v", args, err)
		}
		var back vocab.ToolCall
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s does not decode: %v", b, err)
		}
		if json.Valid(args) {
			// Valid JSON is kept as JSON: the same value (encoding/json
			// compacts it and escapes <, > and &).
			// Numbers compare as their text (json.Number): a valid
			// number need not fit a float64 (1E700).
			decode := func(b []byte) (any, error) {
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.UseNumber()
				var v any
				err := dec.Decode(&v)
				return v, err
			}
			want, err := decode(args)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decode(back.Args)
			if err != nil {
				t.Fatalf("args %q came back as %q, not JSON: %v", args, back.Args, err)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("args %q came back as %q (encoded %s)", args, back.Args, b)
			}
			return
		}
		if !bytes.Equal(back.Args, args) && !(len(args) == 0 && len(back.Args) == 0) {
			t.Fatalf("args %q came back as %q (encoded %s)", args, back.Args, b)
		}
	})
}
