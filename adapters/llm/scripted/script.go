package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Script is a parsed, validated script. It is immutable, so one Script may
// drive any number of Providers, each with its own position.
type Script struct {
	name  string
	steps []step
}

// Name returns the script's name: its "name" field, or the source name given
// to [Parse] (the path given to [Load]) when the field is absent. Run-time
// errors name the script by it.
func (s *Script) Name() string { return s.name }

// Len returns the number of steps.
func (s *Script) Len() int { return len(s.steps) }

// step is one validated step.
type step struct {
	delay    time.Duration
	parts    []part
	calls    []call
	usage    *vocab.Usage
	finish   vocab.FinishReason
	err      *errSpec // an error step
	errAfter *errSpec // fails after parts and calls
	expect   *expect
}

type part struct {
	kind  vocab.StreamPartKind
	text  string
	delay time.Duration
}

type call struct {
	call  vocab.ToolCall
	delay time.Duration
}

// errSpec is a scripted provider error.
type errSpec struct {
	status     int
	code       vocab.Code
	message    string
	retryable  bool
	retryAfter time.Duration
}

// build makes a fresh *vocab.Error; each failed request gets its own.
func (e *errSpec) build() *vocab.Error {
	if e.status != 0 {
		return vocab.StatusError(e.status, e.retryAfter, e.message)
	}
	return &vocab.Error{Code: e.code, Message: e.message, Retryable: e.retryable, RetryAfter: e.retryAfter}
}

type expect struct {
	lastUserContains *string
	tools            []string
}

// The file format. Every level is decoded on its own, from raw JSON, so that
// errors can name the step, part or field they are about.

type jsonScript struct {
	Name    string            `json:"name"`
	Comment string            `json:"comment"`
	Steps   []json.RawMessage `json:"steps"`
}

type jsonStep struct {
	Comment    string            `json:"comment"`
	Delay      *string           `json:"delay"`
	Parts      []json.RawMessage `json:"parts"`
	ToolCalls  []json.RawMessage `json:"tool_calls"`
	Usage      json.RawMessage   `json:"usage"`
	Finish     *string           `json:"finish"`
	Error      json.RawMessage   `json:"error"`
	ErrorAfter json.RawMessage   `json:"error_after"`
	Empty      bool              `json:"empty"`
	Expect     json.RawMessage   `json:"expect"`
}

type jsonPart struct {
	Text     *string `json:"text"`
	Thinking *string `json:"thinking"`
	Delay    *string `json:"delay"`
}

type jsonCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Args  json.RawMessage `json:"args"`
	Delay *string         `json:"delay"`
}

type jsonUsage struct {
	Input      int `json:"input"`
	Output     int `json:"output"`
	CacheRead  int `json:"cache_read"`
	CacheWrite int `json:"cache_write"`
}

type jsonError struct {
	Status     int     `json:"status"`
	Code       string  `json:"code"`
	Message    string  `json:"message"`
	Retryable  *bool   `json:"retryable"`
	RetryAfter *string `json:"retry_after"`
}

type jsonExpect struct {
	LastUserContains *string  `json:"last_user_contains"`
	Tools            []string `json:"tools"`
}

// Load reads and parses the script file at path. Errors name the file as
// path and carry code vocab.CodeBadInput.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "script %s: %w", path, err)
	}
	return Parse(data, path)
}

// LoadFS reads and parses the script file name from fsys, for scripts
// embedded with go:embed.
func LoadFS(fsys fs.FS, name string) (*Script, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "script %s: %w", name, err)
	}
	return Parse(data, name)
}

// Parse parses and validates a script. source names the script in errors,
// which look like
//
//	script demo.json: step 3: part 1: bad delay "fast"
//
// and carry code vocab.CodeBadInput. Steps, parts and tool calls are
// numbered from 1.
func Parse(data []byte, source string) (*Script, error) {
	s, err := parse(data, source)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "script %s: %w", source, err)
	}
	return s, nil
}

func parse(data []byte, source string) (*Script, error) {
	var js jsonScript
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&js); err != nil {
		return nil, topLevelError(data, err)
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		line, col := position(data, len(data)-len(rest))
		return nil, fmt.Errorf("malformed JSON at line %d, column %d: data after the script object", line, col)
	}
	if len(js.Steps) == 0 {
		return nil, errors.New("no steps")
	}
	s := &Script{name: js.Name, steps: make([]step, len(js.Steps))}
	if s.name == "" {
		s.name = source
	}
	for i, raw := range js.Steps {
		st, err := parseStep(raw)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		s.steps[i] = st
	}
	return s, nil
}

func parseStep(raw json.RawMessage) (step, error) {
	var js jsonStep
	if err := strict(raw, &js); err != nil {
		return step{}, err
	}
	var st step
	var err error
	if st.delay, err = duration("delay", js.Delay); err != nil {
		return step{}, err
	}

	// Which kind of step is this?
	has := map[string]bool{
		"parts":       len(js.Parts) > 0,
		"tool_calls":  len(js.ToolCalls) > 0,
		"usage":       present(js.Usage),
		"finish":      js.Finish != nil,
		"error":       present(js.Error),
		"error_after": present(js.ErrorAfter),
		"empty":       js.Empty,
	}
	exclusive := func(field string, others ...string) error {
		for _, o := range others {
			if has[field] && has[o] {
				return fmt.Errorf("%q cannot be combined with %q", field, o)
			}
		}
		return nil
	}
	switch {
	case has["error"]:
		err = exclusive("error", "parts", "tool_calls", "empty", "usage", "finish", "error_after")
	case has["empty"]:
		err = exclusive("empty", "parts", "tool_calls", "error_after")
	case has["parts"] || has["tool_calls"]:
		err = exclusive("error_after", "usage", "finish")
	case has["error_after"]:
		err = errors.New(`"error_after" needs "parts" or "tool_calls"`)
	default:
		err = errors.New(`nothing to do: give "parts", "tool_calls", "error" or "empty": true`)
	}
	if err != nil {
		return step{}, err
	}

	for i, raw := range js.Parts {
		p, err := parsePart(raw)
		if err != nil {
			return step{}, fmt.Errorf("part %d: %w", i+1, err)
		}
		st.parts = append(st.parts, p)
	}
	ids := map[string]bool{}
	for i, raw := range js.ToolCalls {
		c, err := parseCall(raw)
		if err == nil && ids[c.call.ID] {
			err = fmt.Errorf("duplicate id %q", c.call.ID)
		}
		if err != nil {
			return step{}, fmt.Errorf("tool call %d: %w", i+1, err)
		}
		ids[c.call.ID] = true
		st.calls = append(st.calls, c)
	}
	if has["usage"] {
		var ju jsonUsage
		if err := strict(js.Usage, &ju); err != nil {
			return step{}, fmt.Errorf("usage: %w", err)
		}
		if ju.Input < 0 || ju.Output < 0 || ju.CacheRead < 0 || ju.CacheWrite < 0 {
			return step{}, errors.New("usage: negative token count")
		}
		st.usage = &vocab.Usage{InputTokens: ju.Input, OutputTokens: ju.Output, CacheReadTokens: ju.CacheRead, CacheWriteTokens: ju.CacheWrite}
	}
	if has["error"] {
		if st.err, err = parseError(js.Error); err != nil {
			return step{}, fmt.Errorf("error: %w", err)
		}
	}
	if has["error_after"] {
		if st.errAfter, err = parseError(js.ErrorAfter); err != nil {
			return step{}, fmt.Errorf("error_after: %w", err)
		}
	}
	if !has["error"] && !has["error_after"] {
		switch {
		case js.Finish != nil:
			st.finish = vocab.FinishReason(*js.Finish)
			if !st.finish.Valid() {
				return step{}, fmt.Errorf("unknown finish %q (want %s)", *js.Finish, finishNames)
			}
		case len(st.calls) > 0:
			st.finish = vocab.FinishToolCalls
		default:
			st.finish = vocab.FinishStop
		}
	}
	if present(js.Expect) {
		if st.expect, err = parseExpect(js.Expect); err != nil {
			return step{}, fmt.Errorf("expect: %w", err)
		}
	}
	return st, nil
}

var finishNames = `"stop", "tool-calls", "max-tokens", "error", "aborted" or "filtered"`

func parsePart(raw json.RawMessage) (part, error) {
	var jp jsonPart
	if err := strict(raw, &jp); err != nil {
		return part{}, err
	}
	var p part
	switch {
	case jp.Text != nil && jp.Thinking == nil:
		p.kind, p.text = vocab.StreamText, *jp.Text
	case jp.Thinking != nil && jp.Text == nil:
		p.kind, p.text = vocab.StreamThinking, *jp.Thinking
	default:
		return part{}, errors.New(`want exactly one of "text" or "thinking"`)
	}
	var err error
	p.delay, err = duration("delay", jp.Delay)
	return p, err
}

func parseCall(raw json.RawMessage) (call, error) {
	var jc jsonCall
	if err := strict(raw, &jc); err != nil {
		return call{}, err
	}
	switch {
	case jc.ID == "":
		return call{}, errors.New(`missing "id"`)
	case jc.Name == "":
		return call{}, errors.New(`missing "name"`)
	}
	c := call{call: vocab.ToolCall{ID: jc.ID, Name: jc.Name}}
	if present(jc.Args) {
		if bytes.TrimSpace(jc.Args)[0] != '{' {
			return call{}, fmt.Errorf(`"args" must be a JSON object, not %s`, jc.Args)
		}
		// Compact so that streamed calls do not depend on the file's layout.
		var b bytes.Buffer
		if err := json.Compact(&b, jc.Args); err != nil {
			return call{}, fmt.Errorf(`"args": %w`, err)
		}
		c.call.Args = b.Bytes()
	}
	var err error
	c.delay, err = duration("delay", jc.Delay)
	return c, err
}

func parseError(raw json.RawMessage) (*errSpec, error) {
	var je jsonError
	if err := strict(raw, &je); err != nil {
		return nil, err
	}
	e := &errSpec{status: je.Status, code: vocab.Code(je.Code), message: je.Message}
	switch {
	case je.Status != 0 && je.Code != "", je.Status == 0 && je.Code == "":
		return nil, errors.New(`want exactly one of "status" or "code"`)
	case je.Status != 0:
		if je.Status < 100 || je.Status > 599 {
			return nil, fmt.Errorf("bad status %d", je.Status)
		}
		if je.Retryable != nil {
			return nil, errors.New(`"retryable" is decided by "status"; use "code" to set it`)
		}
		if e.message == "" {
			e.message = fmt.Sprintf("status %d", je.Status)
		}
	default:
		if !knownCodes[e.code] {
			return nil, fmt.Errorf("unknown code %q", je.Code)
		}
		e.retryable = je.Retryable != nil && *je.Retryable
	}
	var err error
	e.retryAfter, err = duration("retry_after", je.RetryAfter)
	return e, err
}

func parseExpect(raw json.RawMessage) (*expect, error) {
	var je jsonExpect
	if err := strict(raw, &je); err != nil {
		return nil, err
	}
	if je.LastUserContains == nil && len(je.Tools) == 0 {
		return nil, errors.New(`nothing to check: give "last_user_contains" or "tools"`)
	}
	for i, name := range je.Tools {
		if name == "" {
			return nil, fmt.Errorf("tools: entry %d is empty", i+1)
		}
	}
	return &expect{lastUserContains: je.LastUserContains, tools: je.Tools}, nil
}

// knownCodes are the codes a scripted error may carry.
var knownCodes = map[vocab.Code]bool{}

func init() {
	for _, c := range []vocab.Code{
		vocab.CodeMaxStepsExceeded, vocab.CodeAgentBusy, vocab.CodeEmptyResponse,
		vocab.CodeRateLimited, vocab.CodeServer, vocab.CodeTransport, vocab.CodeTimeout,
		vocab.CodeSyntax, vocab.CodeContextOverflow, vocab.CodeQuotaExhausted,
		vocab.CodeRequestRejected, vocab.CodeFiltered, vocab.CodeToolUnknown,
		vocab.CodeToolBadArguments, vocab.CodeToolFailed, vocab.CodeToolAborted,
		vocab.CodeToolDenied, vocab.CodeToolMaxTokens, vocab.CodeUnhandledTrigger,
		vocab.CodeGuardRejected, vocab.CodeBadSnapshot, vocab.CodeBadInput, vocab.CodeClosed,
		vocab.CodeNotIdle, vocab.CodeCancelled, vocab.CodeBlocked, vocab.CodeHook, vocab.CodeInternal,
	} {
		knownCodes[c] = true
	}
}

// duration parses an optional, non-negative Go duration string.
func duration(field string, s *string) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q (want a duration such as \"250ms\" or \"2s\")", field, *s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative %s %q", field, *s)
	}
	return d, nil
}

// present reports whether an optional raw field was given and is not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// strict decodes one JSON value into v, rejecting unknown fields, and words
// decoding errors for people rather than in terms of Go types.
func strict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return cleanJSONError(err)
	}
	return nil
}

// decodeError wraps a decoding error with a clearer message.
type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

func cleanJSONError(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		msg := fmt.Sprintf("want %s, got %s", jsonKind(te.Type), te.Value)
		if te.Field != "" {
			msg = fmt.Sprintf("field %q: %s", te.Field, msg)
		}
		return &decodeError{msg, err}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &decodeError{strings.TrimPrefix(err.Error(), "json: "), err}
	}
	return err
}

// jsonKind names the JSON kind that decodes into t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// topLevelError words an error from decoding the whole file.
func topLevelError(data []byte, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("malformed JSON: empty file")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &decodeError{"malformed JSON: unexpected end of file", err}
	case errors.As(err, &se):
		line, col := position(data, int(se.Offset)-1)
		return fmt.Errorf("malformed JSON at line %d, column %d: %w", line, col, err)
	}
	return cleanJSONError(err)
}

// position returns the 1-based line and column of byte offset off.
func position(data []byte, off int) (line, col int) {
	off = max(0, min(off, len(data)))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = 1 + off - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}
