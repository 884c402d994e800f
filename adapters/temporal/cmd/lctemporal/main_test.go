package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/vocab"
)

// Every case ends before the command dials a server.
func TestLctemporalFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	badScript := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badScript, []byte(`{"steps": [{"finish": "halt", "parts": [{"text": "x"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	w := []string{"worker", "-hostport", "127.0.0.1:7233", "-namespace", "default"}
	r := []string{"run", "-hostport", "127.0.0.1:7233", "-namespace", "default", "-queue", "q"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no subcommand", nil, 2, "usage:"},
		{"unknown subcommand", []string{"serve"}, 2, `unknown subcommand "serve"`},
		{"help", []string{"help"}, 0, ""},
		{"worker help", []string{"worker", "-h"}, 0, "usage: lctemporal worker"},
		{"run help", []string{"run", "-h"}, 0, "usage: lctemporal run"},
		{"worker no queue", w, 2, "-queue is required"},
		{"worker unknown flag", with(w, "-queue", "q", "-model", "x"), 2, "flag provided but not defined: -model"},
		{"worker argument", with(w, "-queue", "q", "extra"), 2, `unexpected argument "extra"`},
		{"worker empty hostport", []string{"worker", "-queue", "q", "-hostport", ""}, 2, "-hostport is required"},
		{"worker hostport without port", []string{"worker", "-queue", "q", "-hostport", "localhost"}, 2, "is not host:port"},
		{"worker hostport without host", []string{"worker", "-queue", "q", "-hostport", ":7233"}, 2, "has no host"},
		{"worker hostport bad port", []string{"worker", "-queue", "q", "-hostport", "localhost:http"}, 2, "is not a number from 1 to 65535"},
		{"worker hostport port 0", []string{"worker", "-queue", "q", "-hostport", "localhost:0"}, 2, "is not a number from 1 to 65535"},
		{"worker empty namespace", []string{"worker", "-queue", "q", "-namespace", ""}, 2, "-namespace is required"},
		{"worker namespace with space", []string{"worker", "-queue", "q", "-namespace", "my ns"}, 2, "must not contain spaces"},
		{"worker queue with newline", with(w, "-queue", "a\nb"), 2, "must not contain spaces or control characters"},
		{"worker empty content", with(w, "-queue", "q", "-content", ""), 2, "-content must not be empty"},
		{"worker missing workspace", with(w, "-queue", "q", "-workspace", filepath.Join(dir, "none")), 2, "is not a directory"},
		{"worker workspace is a file", with(w, "-queue", "q", "-workspace", file), 2, "is not a directory"},
		{"worker missing script", with(w, "-queue", "q", "-workspace", dir, "-script", filepath.Join(dir, "none.json")), 2, "-script:"},
		{"worker bad script", with(w, "-queue", "q", "-workspace", dir, "-script", badScript), 2, `unknown finish "halt"`},
		{"run no session", with(r, "-prompt", "hi"), 2, "-session is required"},
		{"run session with space", with(r, "-session", "s 1", "-prompt", "hi"), 2, "-session \"s 1\" must not contain spaces"},
		{"run no prompt", with(r, "-session", "s1"), 2, "-prompt is required"},
		{"run blank prompt", with(r, "-session", "s1", "-prompt", "  \n"), 2, "-prompt is required"},
		{"run zero timeout", with(r, "-session", "s1", "-prompt", "hi", "-timeout", "0s"), 2, "-timeout 0s must be positive"},
		{"run bad timeout", with(r, "-session", "s1", "-prompt", "hi", "-timeout", "soon"), 2, "invalid value \"soon\" for flag -timeout"},
		{"run no queue", []string{"run", "-session", "s1", "-prompt", "hi"}, 2, "-queue is required"},
		{"run bad hostport", []string{"run", "-queue", "q", "-session", "s1", "-prompt", "hi", "-hostport", "a:b:c"}, 2, "is not host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not contain %q:\n%s", tc.want, stderr.String())
			}
			if tc.code == 2 && stdout.Len() > 0 {
				t.Errorf("stdout of a usage error: %q", stdout.String())
			}
		})
	}
}

// The specs run offers are the specs of the tools the worker registers.
func TestLctemporalToolSpecs(t *testing.T) {
	specs, err := demoSpecs()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := demoRegistry(os.DirFS(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(specs, reg.Specs()) {
		t.Errorf("run's specs %+v\nworker's specs %+v", specs, reg.Specs())
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "list_files,read_file,word_count" {
		t.Errorf("tools %s", got)
	}
}

// The embedded script parses, calls a tool the worker has (and that runs
// on a workspace holding go.mod), then answers; it uses all its steps.
func TestLctemporalDemoScript(t *testing.T) {
	script, err := loadScript("")
	if err != nil {
		t.Fatal(err)
	}
	if script.Len() != 2 {
		t.Fatalf("%d steps, want 2", script.Len())
	}
	specs, err := demoSpecs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/demo\n\ngo 1.26\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := demoRegistry(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	p := scripted.New(script, nil)
	ctx := context.Background()
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("Count the words of go.mod.")}, Tools: specs}

	// Step 1: text and one tool call.
	var calls []vocab.ToolCall
	var text string
	for part, err := range p.Stream(ctx, req) {
		if err != nil {
			t.Fatalf("step 1: %v", err)
		}
		switch part.Kind {
		case vocab.StreamToolCall:
			calls = append(calls, *part.Call)
		case vocab.StreamText:
			text += part.Text
		}
	}
	if len(calls) != 1 || text == "" {
		t.Fatalf("step 1: calls %+v, text %q", calls, text)
	}
	res := reg.Execute(ctx, calls[0], nil)
	if res.IsError || res.Content != "4 words" {
		t.Fatalf("tool result %+v", res)
	}

	// Step 2: the answer.
	reply := vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: text}, {Kind: vocab.PartToolCall, Call: &calls[0]}}}
	req.Messages = append(req.Messages, reply, vocab.Message{Role: vocab.RoleTool, Result: &res})
	var answer string
	var finish vocab.FinishReason
	for part, err := range p.Stream(ctx, req) {
		if err != nil {
			t.Fatalf("step 2: %v", err)
		}
		switch part.Kind {
		case vocab.StreamText:
			answer += part.Text
		case vocab.StreamToolCall:
			t.Errorf("step 2 calls %s", part.Call.Name)
		case vocab.StreamFinish:
			finish = part.Finish
		}
	}
	if !strings.Contains(answer, "word_count") || finish != vocab.FinishStop {
		t.Errorf("step 2: answer %q, finish %q", answer, finish)
	}
	if p.Remaining() != 0 {
		t.Errorf("%d steps left", p.Remaining())
	}
}

// The script checks that word_count is offered: a session whose specs
// lack it fails the first request instead of calling an unknown tool.
func TestLctemporalDemoScriptExpectsTool(t *testing.T) {
	script, err := loadScript("")
	if err != nil {
		t.Fatal(err)
	}
	p := scripted.New(script, nil)
	req := vocab.Request{Messages: []vocab.Message{vocab.UserText("hi")}}
	for _, err := range p.Stream(context.Background(), req) {
		if err == nil || !strings.Contains(err.Error(), `tool "word_count" not offered`) {
			t.Errorf("error %v", err)
		}
	}
}

// -script loads a script file in place of the embedded one.
func TestLctemporalScriptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hello.json")
	b, _ := json.Marshal(map[string]any{"name": "hello", "steps": []any{map[string]any{"parts": []any{map[string]string{"text": "hello"}}}}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := loadScript(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "hello" || s.Len() != 1 {
		t.Errorf("script %s with %d steps", s.Name(), s.Len())
	}
}

func TestLctemporalTranscript(t *testing.T) {
	call := vocab.ToolCall{ID: "c1", Name: "word_count", Args: json.RawMessage(`{"path":"go.mod"}`)}
	msgs := []vocab.Message{
		vocab.UserText("Count."),
		{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "Counting."}, {Kind: vocab.PartToolCall, Call: &call}}},
		{Role: vocab.RoleTool, Result: &vocab.ToolResult{CallID: "c1", Name: "word_count", Content: "4 words"}},
		{Role: vocab.RoleTool, Result: &vocab.ToolResult{CallID: "c2", Name: "read_file", IsError: true, Code: vocab.CodeToolFailed, Content: "no\nsuch file"}},
		{Role: vocab.RoleAssistant, Parts: []vocab.Part{{Kind: vocab.PartText, Text: "Done."}}},
	}
	var b bytes.Buffer
	printTranscript(&b, msgs)
	want := `user: Count.
assistant: Counting.
assistant: calls word_count {"path":"go.mod"}
tool word_count: 4 words
tool read_file (error ` + string(vocab.CodeToolFailed) + `): no
    such file
assistant: Done.
`
	if b.String() != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", b.String(), want)
	}
}
