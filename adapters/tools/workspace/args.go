package workspace

import "strings"

// abbrev shortens s to at most n bytes (plus an ellipsis).
func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// JSON Schemas of the tools' arguments (draft 2020-12 vocabulary, closed
// objects): tools.Typed validates a call against them, then decodes it
// strictly into the tool's argument struct. Optional arguments may be
// null (providers' strict modes send null for an argument left out).
// TestSchemasMatchArguments keeps them in step with the structs.
const (
	readFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to read, relative to the workspace (an absolute path inside the workspace also works)."},
    "offset_line": {"type": ["integer", "null"], "minimum": 1, "description": "First line to return, 1-based. Default 1."},
    "limit_lines": {"type": ["integer", "null"], "minimum": 1, "description": "Most lines to return. Default: to the end of the file (within the size limit)."}
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
    "path": {"type": ["string", "null"], "description": "Directory to list, relative to the workspace. Default \".\" (the workspace)."},
    "recursive": {"type": ["boolean", "null"], "description": "List everything below the directory too. Default false."}
  },
  "additionalProperties": false
}`
	grepSchema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "Go regular expression (RE2 syntax) matched against each line."},
    "path": {"type": ["string", "null"], "description": "File or directory to search, relative to the workspace. Default \".\" (the workspace)."},
    "glob": {"type": ["string", "null"], "description": "Only search files whose name matches this glob (e.g. \"*.go\"); a glob with a slash is matched against the workspace-relative path."}
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
