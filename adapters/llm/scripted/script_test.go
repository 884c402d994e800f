package scripted_test

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/vocab"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const scriptsDir = "../../../testdata/scripts/"

// checkBadInput fails unless err is a non-retryable CodeBadInput *vocab.Error
// reading want.
func checkBadInput(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %q", want)
	}
	if got := err.Error(); got != want {
		t.Errorf("err =\n\t%s\nwant\n\t%s", got, want)
	}
	if !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("errors.Is(err, CodeBadInput) = false; code %s", vocab.CodeOf(err))
	}
	var e *vocab.Error
	if errors.As(err, &e) && e.Retryable {
		t.Error("error is retryable")
	}
}

func TestLoadBadFixtures(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"unknown_field.json", `step 2: unknown field "halt"`},
		{"bad_finish.json", `step 2: unknown finish "halt" (want "stop", "tool-calls", "max-tokens", "error", "aborted" or "filtered")`},
		{"tool_call_no_id.json", `step 1: tool call 2: missing "id"`},
		{"bad_duration.json", `step 1: part 2: bad delay "fast" (want a duration such as "250ms" or "2s")`},
		{"malformed.json", `malformed JSON at line 4, column 32: invalid character '}' looking for beginning of object key string`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := scriptsDir + "bad/" + tt.file
			s, err := scripted.Load(path)
			if s != nil {
				t.Errorf("Load returned a script with the error")
			}
			checkBadInput(t, err, "input.bad: script "+path+": "+tt.want)
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty file", ``, `malformed JSON: empty file`},
		{"truncated", `{"steps": [`, `malformed JSON: unexpected end of file`},
		{"trailing data", "{\"steps\": [{\"empty\": true}]}\n{}", `malformed JSON at line 2, column 1: data after the script object`},
		{"not an object", `[1]`, `want an object, got array`},
		{"unknown top field", `{"name": "x", "stepz": []}`, `unknown field "stepz"`},
		{"no steps", `{"steps": []}`, `no steps`},
		{"missing steps", `{"name": "x"}`, `no steps`},
		{"step not an object", `{"steps": ["hi"]}`, `step 1: want an object, got string`},
		{"wrong field type", `{"steps": [{"empty": true, "finish": 1}]}`, `step 1: field "finish": want a string, got number`},
		{"nothing to do", `{"steps": [{"empty": true}, {"comment": "c"}]}`, `step 2: nothing to do: give "parts", "tool_calls", "error" or "empty": true`},
		{"empty parts", `{"steps": [{"parts": []}]}`, `step 1: nothing to do: give "parts", "tool_calls", "error" or "empty": true`},
		{"error with parts", `{"steps": [{"error": {"status": 500}, "parts": [{"text": "x"}]}]}`, `step 1: "error" cannot be combined with "parts"`},
		{"error with finish", `{"steps": [{"error": {"status": 500}, "finish": "stop"}]}`, `step 1: "error" cannot be combined with "finish"`},
		{"error with usage", `{"steps": [{"error": {"status": 500}, "usage": {"input": 1}}]}`, `step 1: "error" cannot be combined with "usage"`},
		{"error with empty", `{"steps": [{"error": {"status": 500}, "empty": true}]}`, `step 1: "error" cannot be combined with "empty"`},
		{"empty with tool calls", `{"steps": [{"empty": true, "tool_calls": [{"id": "a", "name": "b"}]}]}`, `step 1: "empty" cannot be combined with "tool_calls"`},
		{"error_after alone", `{"steps": [{"error_after": {"status": 500}}]}`, `step 1: "error_after" needs "parts" or "tool_calls"`},
		{"error_after with finish", `{"steps": [{"parts": [{"text": "x"}], "error_after": {"status": 500}, "finish": "stop"}]}`, `step 1: "error_after" cannot be combined with "finish"`},
		{"error_after with usage", `{"steps": [{"parts": [{"text": "x"}], "error_after": {"status": 500}, "usage": {}}]}`, `step 1: "error_after" cannot be combined with "usage"`},
		{"part with both", `{"steps": [{"parts": [{"text": "a", "thinking": "b"}]}]}`, `step 1: part 1: want exactly one of "text" or "thinking"`},
		{"part with neither", `{"steps": [{"parts": [{"text": "a"}, {"delay": "1s"}]}]}`, `step 1: part 2: want exactly one of "text" or "thinking"`},
		{"part unknown field", `{"steps": [{"parts": [{"txt": "a"}]}]}`, `step 1: part 1: unknown field "txt"`},
		{"negative delay", `{"steps": [{"parts": [{"text": "a", "delay": "-1s"}]}]}`, `step 1: part 1: negative delay "-1s"`},
		{"bad step delay", `{"steps": [{"delay": "1 sec", "empty": true}]}`, `step 1: bad delay "1 sec" (want a duration such as "250ms" or "2s")`},
		{"tool call without name", `{"steps": [{"tool_calls": [{"id": "c1"}]}]}`, `step 1: tool call 1: missing "name"`},
		{"duplicate tool call id", `{"steps": [{"tool_calls": [{"id": "c1", "name": "a"}, {"id": "c1", "name": "b"}]}]}`, `step 1: tool call 2: duplicate id "c1"`},
		{"args not an object", `{"steps": [{"tool_calls": [{"id": "c1", "name": "a", "args": [1, 2]}]}]}`, `step 1: tool call 1: "args" must be a JSON object, not [1, 2]`},
		{"bad tool call delay", `{"steps": [{"tool_calls": [{"id": "c1", "name": "a", "delay": "x"}]}]}`, `step 1: tool call 1: bad delay "x" (want a duration such as "250ms" or "2s")`},
		{"usage unknown field", `{"steps": [{"empty": true, "usage": {"in": 1}}]}`, `step 1: usage: unknown field "in"`},
		{"usage negative", `{"steps": [{"empty": true, "usage": {"output": -1}}]}`, `step 1: usage: negative token count`},
		{"error status and code", `{"steps": [{"error": {"status": 500, "code": "llm.syntax"}}]}`, `step 1: error: want exactly one of "status" or "code"`},
		{"error neither", `{"steps": [{"error": {"message": "boom"}}]}`, `step 1: error: want exactly one of "status" or "code"`},
		{"error bad status", `{"steps": [{"error": {"status": 99}}]}`, `step 1: error: bad status 99`},
		{"error status and retryable", `{"steps": [{"error": {"status": 500, "retryable": false}}]}`, `step 1: error: "retryable" is decided by "status"; use "code" to set it`},
		{"error unknown code", `{"steps": [{"error": {"code": "llm.sintax"}}]}`, `step 1: error: unknown code "llm.sintax"`},
		{"error bad retry_after", `{"steps": [{"error": {"status": 429, "retry_after": "soon"}}]}`, `step 1: error: bad retry_after "soon" (want a duration such as "250ms" or "2s")`},
		{"error unknown field", `{"steps": [{"error": {"statuz": 500}}]}`, `step 1: error: unknown field "statuz"`},
		{"error_after bad", `{"steps": [{"parts": [{"text": "x"}], "error_after": {}}]}`, `step 1: error_after: want exactly one of "status" or "code"`},
		{"unknown finish", `{"steps": [{"empty": true, "finish": "done"}]}`, `step 1: unknown finish "done" (want "stop", "tool-calls", "max-tokens", "error", "aborted" or "filtered")`},
		{"expect nothing", `{"steps": [{"empty": true, "expect": {}}]}`, `step 1: expect: nothing to check: give "last_user_contains" or "tools"`},
		{"expect empty tool", `{"steps": [{"empty": true, "expect": {"tools": ["a", ""]}}]}`, `step 1: expect: tools: entry 2 is empty`},
		{"expect unknown field", `{"steps": [{"empty": true, "expect": {"last_user": "x"}}]}`, `step 1: expect: unknown field "last_user"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scripted.Parse([]byte(tt.in), "t.json")
			checkBadInput(t, err, "input.bad: script t.json: "+tt.want)
		})
	}
}

func TestParseValid(t *testing.T) {
	s, err := scripted.Parse([]byte(`{
		"comment": "every kind of step",
		"steps": [
			{"comment": "c", "delay": "1s", "parts": [{"thinking": ""}, {"text": " "}], "tool_calls": [{"id": "a", "name": "b", "args": null}], "usage": {"input": 1, "output": 2, "cache_read": 3, "cache_write": 4}, "finish": "max-tokens", "expect": {"tools": ["b"]}},
			{"error": {"code": "llm.transport", "retryable": true, "retry_after": "0s"}, "delay": "2s", "expect": {"last_user_contains": ""}},
			{"tool_calls": [{"id": "a", "name": "b"}], "error_after": {"status": 502}},
			{"empty": true, "usage": {}, "finish": "filtered"},
			{"parts": null, "empty": true, "error": null}
		]}`), "every.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Name(); got != "every.json" {
		t.Errorf("Name = %q, want the source name", got)
	}
	if got := s.Len(); got != 5 {
		t.Errorf("Len = %d, want 5", got)
	}
}

func TestLoad(t *testing.T) {
	s, err := scripted.Load(scriptsDir + "demo.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "demo" || s.Len() != 4 {
		t.Errorf("demo: Name %q, Len %d; want demo, 4", s.Name(), s.Len())
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := scripted.Load(scriptsDir + "missing.json")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) = false for %v", err)
	}
	checkBadInput(t, err, "input.bad: script "+scriptsDir+"missing.json: open "+scriptsDir+"missing.json: no such file or directory")
}

func TestLoadFS(t *testing.T) {
	fsys := fstest.MapFS{
		"ok.json":  {Data: []byte(`{"name": "embedded", "steps": [{"empty": true}]}`)},
		"bad.json": {Data: []byte(`{"steps": [{"empty": true, "finish": "halt"}]}`)},
	}
	s, err := scripted.LoadFS(fsys, "ok.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "embedded" {
		t.Errorf("Name = %q", s.Name())
	}
	_, err = scripted.LoadFS(fsys, "bad.json")
	checkBadInput(t, err, `input.bad: script bad.json: step 1: unknown finish "halt" (want "stop", "tool-calls", "max-tokens", "error", "aborted" or "filtered")`)
	_, err = scripted.LoadFS(fsys, "none.json")
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("LoadFS(missing) = %v", err)
	}
}
