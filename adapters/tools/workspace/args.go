package workspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// arg is one argument a tool takes: its exact JSON name, where its value
// goes (a *string, *bool, *int, or **int to tell absent from zero) and whether it must be present.
type arg struct {
	name     string
	dst      any
	required bool
}

// decodeArgs decodes raw, which must be one JSON object, into args. It is
// strict: names match exactly (encoding/json would also accept "PATH" for
// "path"), unknown and repeated names are refused, values must have the
// argument's type, nothing may follow the object, and required arguments
// must be present. A null value counts as absent. The error, a
// CodeToolBadArguments one, says what was wrong for the model.
func decodeArgs(tool string, raw []byte, args ...arg) *vocab.Error {
	bad := func(format string, a ...any) *vocab.Error {
		return vocab.Errorf(vocab.CodeToolBadArguments, "bad arguments for "+tool+": "+format, a...)
	}
	names := make([]string, len(args))
	for i, a := range args {
		names[i] = a.name
	}
	allowed := strings.Join(names, ", ")
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("the arguments must be a JSON object with the fields %s", allowed)
	}
	seen := map[string]bool{}    // names met
	present := map[string]bool{} // names with a non-null value
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("malformed JSON: %v", err)
		}
		name, _ := tok.(string)
		var target *arg
		for i := range args {
			if args[i].name == name {
				target = &args[i]
			}
		}
		if target == nil {
			return bad("unknown field %q (allowed: %s)", name, allowed)
		}
		if seen[name] {
			return bad("field %q appears twice", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return bad("malformed JSON in field %q: %v", name, err)
		}
		if string(v) == "null" {
			continue
		}
		present[name] = true
		if err := json.Unmarshal(v, target.dst); err != nil {
			return bad("field %q must be %s, not %s", name, kind(target.dst), abbrev(string(v), 40))
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bad("malformed JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("unexpected data after the JSON object")
	}
	for _, a := range args {
		if a.required && !present[a.name] {
			return bad("missing required field %q", a.name)
		}
	}
	return nil
}

func kind(dst any) string {
	switch dst.(type) {
	case *string:
		return "a string"
	case *int, **int:
		return "an integer"
	case *bool:
		return "a boolean"
	}
	return "a valid value"
}

// abbrev shortens s to at most n bytes (plus an ellipsis).
func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// JSON Schemas of the tools' arguments (draft 2020-12 vocabulary, closed
// objects). TestSchemasMatchDecoders keeps them in step with the decoders.
const (
	readFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to read, relative to the workspace (an absolute path inside the workspace also works)."},
    "offset_line": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based. Default 1."},
    "limit_lines": {"type": "integer", "minimum": 1, "description": "Most lines to return. Default: to the end of the file (within the size limit)."}
  },
  "required": ["path"],
  "additionalProperties": false
}`
	writeFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to write, relative to the workspace. Missing parent directories are created."},
    "content": {"type": "string", "description": "The whole new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`
	editFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to edit, relative to the workspace."},
    "old": {"type": "string", "minLength": 1, "description": "Exact text to replace; it must occur exactly once in the file (include surrounding lines to make it unique)."},
    "new": {"type": "string", "description": "Text to put in its place."}
  },
  "required": ["path", "old", "new"],
  "additionalProperties": false
}`
	listDirSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Directory to list, relative to the workspace. Default \".\" (the workspace)."},
    "recursive": {"type": "boolean", "description": "List everything below the directory too. Default false."}
  },
  "additionalProperties": false
}`
	grepSchema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "Go regular expression (RE2 syntax) matched against each line."},
    "path": {"type": "string", "description": "File or directory to search, relative to the workspace. Default \".\" (the workspace)."},
    "glob": {"type": "string", "description": "Only search files whose name matches this glob (e.g. \"*.go\"); a glob with a slash is matched against the workspace-relative path."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`
	runCommandSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "Shell command line, run in the workspace directory."}
  },
  "required": ["command"],
  "additionalProperties": false
}`
)
