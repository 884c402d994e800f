package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Errors of FlattenSchema, matched with errors.Is; the error itself is a
// *SchemaError saying where.
var (
	// ErrRecursiveRef: a $ref leads back to itself, so it cannot be inlined.
	ErrRecursiveRef = errors.New("recursive $ref")
	// ErrUnsupportedRef: a $ref that is not local ("#" or "#/json/pointer"):
	// a remote document or an anchor.
	ErrUnsupportedRef = errors.New("unsupported $ref")
	// ErrUnresolvedRef: a local $ref points at nothing.
	ErrUnresolvedRef = errors.New("unresolved $ref")
	// ErrSchemaTooLarge: inlining would make the schema larger than
	// MaxFlattenedNodes subschemas.
	ErrSchemaTooLarge = errors.New("flattened schema too large")
	// ErrNotSchema: the input is not a JSON object or boolean.
	ErrNotSchema = errors.New("not a JSON Schema")
)

// MaxFlattenedNodes caps the number of subschemas FlattenSchema produces:
// inlining a definition used in many places copies it each time.
const MaxFlattenedNodes = 10_000

// SchemaError is the error FlattenSchema returns: Path is the JSON pointer
// of the offending place in the input ("" for the root), Ref the $ref
// concerned (if any), Err the reason (ErrRecursiveRef…).
type SchemaError struct {
	Path string
	Ref  string
	Err  error
}

// Error implements error.
func (e *SchemaError) Error() string {
	at := e.Path
	if at == "" {
		at = "/"
	}
	if e.Ref != "" {
		return fmt.Sprintf("flatten schema: at %s: $ref %q: %v", at, e.Ref, e.Err)
	}
	return fmt.Sprintf("flatten schema: at %s: %v", at, e.Err)
}

// Unwrap returns the reason.
func (e *SchemaError) Unwrap() error { return e.Err }

// FlattenSchema rewrites a JSON Schema for providers whose strict modes
// reject references and type arrays:
//
//   - every local $ref ("#/$defs/X", "#/definitions/X", any "#/pointer",
//     "#") is replaced by a copy of what it points to, and $defs and
//     definitions are dropped; keywords beside a $ref apply too (as in
//     draft 2020-12): they are merged into the copy, or the two are put
//     under allOf when they share a keyword other than an annotation;
//   - a $ref that leads back to itself is an error matching
//     ErrRecursiveRef, a remote or anchor $ref one matching
//     ErrUnsupportedRef, one pointing at nothing ErrUnresolvedRef;
//   - "type": [...] of several types becomes anyOf of one branch per type,
//     each with the keywords that concern its type (maxLength goes to the
//     string branch, properties to the object branch, minimum to number
//     and integer); the other keywords (description, enum…) stay beside
//     the anyOf, and keywords that concern none of the types are dropped.
//     A one-type array becomes a plain type.
//
// The output is compact JSON with object keys sorted, so the same input
// always gives the same bytes. An empty input gives an empty output.
// Anything else the input holds is kept as is; it is not validated.
func FlattenSchema(schema json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, &SchemaError{Err: fmt.Errorf("%w: %v", ErrNotSchema, err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &SchemaError{Err: fmt.Errorf("%w: data after the schema", ErrNotSchema)}
	}
	switch root.(type) {
	case map[string]any, bool:
	default:
		return nil, &SchemaError{Err: fmt.Errorf("%w: want an object or a boolean", ErrNotSchema)}
	}
	f := &flattener{root: root, done: map[string]flattened{}}
	out, err := f.schema(root, "", nil)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, &SchemaError{Err: err}
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// flattened is a definition already inlined once, and its size.
type flattened struct {
	v     any
	nodes int
}

// flattener holds the state of one FlattenSchema call.
type flattener struct {
	root  any
	done  map[string]flattened // by JSON pointer
	nodes int
}

// Keywords whose values are schemas.
var (
	// one schema
	schemaKeywords = map[string]bool{
		"additionalProperties": true, "additionalItems": true, "contains": true, "not": true,
		"if": true, "then": true, "else": true, "propertyNames": true, "unevaluatedItems": true,
		"unevaluatedProperties": true, "contentSchema": true, "items": true,
	}
	// an array of schemas
	schemaListKeywords = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true}
	// an object of schemas
	schemaMapKeywords = map[string]bool{"properties": true, "patternProperties": true, "dependentSchemas": true, "dependencies": true}
	// annotations: a $ref's sibling may override the target's
	annotationKeywords = map[string]bool{
		"description": true, "title": true, "default": true, "examples": true, "deprecated": true,
		"readOnly": true, "writeOnly": true, "$comment": true,
	}
	// keywords that concern values of one type
	typeKeywords = map[string]string{
		"minLength": "string", "maxLength": "string", "pattern": "string", "format": "string",
		"contentEncoding": "string", "contentMediaType": "string", "contentSchema": "string",
		"minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number", "multipleOf": "number",
		"properties": "object", "patternProperties": "object", "additionalProperties": "object", "required": "object",
		"minProperties": "object", "maxProperties": "object", "propertyNames": "object", "dependentRequired": "object",
		"dependentSchemas": "object", "dependencies": "object", "unevaluatedProperties": "object",
		"items": "array", "prefixItems": "array", "additionalItems": "array", "contains": "array", "minItems": "array",
		"maxItems": "array", "uniqueItems": "array", "minContains": "array", "maxContains": "array", "unevaluatedItems": "array",
	}
)

// count adds n subschemas to the output, failing past the cap.
func (f *flattener) count(n int, path string) error {
	f.nodes += n
	if f.nodes > MaxFlattenedNodes {
		return &SchemaError{Path: path, Err: ErrSchemaTooLarge}
	}
	return nil
}

// schema flattens the schema node found at path; stack holds the
// pointers of the $refs being inlined.
func (f *flattener) schema(node any, path string, stack []string) (any, error) {
	m, ok := node.(map[string]any)
	if !ok {
		return node, nil // a boolean schema, or something that is no schema: kept
	}
	if err := f.count(1, path); err != nil {
		return nil, err
	}
	out := make(map[string]any, len(m))
	for _, k := range sortedKeys(m) {
		v := m[k]
		at := path + "/" + escapePointer(k)
		switch {
		case k == "$ref" || k == "$defs" || k == "definitions":
			// $ref below; definitions are inlined where used
		case schemaListKeywords[k] && isArray(v):
			list := v.([]any)
			items := make([]any, len(list))
			for i, s := range list {
				fs, err := f.schema(s, at+"/"+strconv.Itoa(i), stack)
				if err != nil {
					return nil, err
				}
				items[i] = fs
			}
			out[k] = items
		case schemaKeywords[k]:
			fs, err := f.schema(v, at, stack)
			if err != nil {
				return nil, err
			}
			out[k] = fs
		case schemaMapKeywords[k] && isObject(v):
			props := v.(map[string]any)
			fm := make(map[string]any, len(props))
			for _, name := range sortedKeys(props) {
				fs, err := f.schema(props[name], at+"/"+escapePointer(name), stack)
				if err != nil {
					return nil, err
				}
				fm[name] = fs
			}
			out[k] = fm
		default:
			out[k] = v
		}
	}
	if ref, has := m["$ref"]; has {
		target, err := f.ref(ref, path, stack)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			f.nodes-- // the node itself is replaced by the target
			return target, nil
		}
		return splitTypes(merge(target, out)), nil
	}
	return splitTypes(out), nil
}

// ref returns the flattened target of the $ref found at path.
func (f *flattener) ref(ref any, path string, stack []string) (any, error) {
	s, ok := ref.(string)
	if !ok {
		return nil, &SchemaError{Path: path, Err: fmt.Errorf("%w: not a string", ErrUnsupportedRef)}
	}
	frag, local := strings.CutPrefix(s, "#")
	if !local {
		return nil, &SchemaError{Path: path, Ref: s, Err: ErrUnsupportedRef}
	}
	ptr, err := url.PathUnescape(frag)
	if err != nil || (ptr != "" && !strings.HasPrefix(ptr, "/")) {
		return nil, &SchemaError{Path: path, Ref: s, Err: ErrUnsupportedRef}
	}
	if i := slices.Index(stack, ptr); i >= 0 {
		chain := append(slices.Clone(stack[i:]), ptr)
		for j := range chain {
			chain[j] = "#" + chain[j]
		}
		return nil, &SchemaError{Path: path, Ref: s, Err: fmt.Errorf("%w (%s)", ErrRecursiveRef, strings.Join(chain, " → "))}
	}
	if d, ok := f.done[ptr]; ok {
		if err := f.count(d.nodes, path); err != nil {
			return nil, err
		}
		return d.v, nil
	}
	target, ok := lookupPointer(f.root, ptr)
	if !ok {
		return nil, &SchemaError{Path: path, Ref: s, Err: ErrUnresolvedRef}
	}
	before := f.nodes
	v, err := f.schema(target, ptr, append(slices.Clone(stack), ptr))
	if err != nil {
		return nil, err
	}
	f.done[ptr] = flattened{v: v, nodes: f.nodes - before}
	return v, nil
}

// merge applies a $ref's sibling keywords to its flattened target: merged
// into a copy when they share no keyword but annotations (the siblings
// win those), else both under allOf.
func merge(target any, siblings map[string]any) any {
	switch t := target.(type) {
	case bool:
		if t {
			return siblings
		}
		return false
	case map[string]any:
		for k := range siblings {
			if _, clash := t[k]; clash && !annotationKeywords[k] {
				return map[string]any{"allOf": []any{t, siblings}}
			}
		}
		out := maps.Clone(t)
		maps.Copy(out, siblings)
		return out
	}
	return map[string]any{"allOf": []any{target, siblings}}
}

// splitTypes turns a type array into anyOf of single types (see
// FlattenSchema); m is not shared and is changed in place.
func splitTypes(node any) any {
	m, ok := node.(map[string]any)
	if !ok {
		return node
	}
	list, ok := m["type"].([]any)
	if !ok {
		return m
	}
	var types []string
	for _, t := range list {
		s, ok := t.(string)
		if !ok {
			return m // not a type array this knows: kept
		}
		if !slices.Contains(types, s) {
			types = append(types, s)
		}
	}
	switch len(types) {
	case 0:
		return m
	case 1:
		m["type"] = types[0]
		return m
	}
	out := map[string]any{}
	branches := make([]map[string]any, len(types))
	for i, t := range types {
		branches[i] = map[string]any{"type": t}
	}
	for k, v := range m {
		if k == "type" {
			continue
		}
		owner, typed := typeKeywords[k]
		if !typed {
			out[k] = v
			continue
		}
		for i, t := range types {
			if t == owner || (owner == "number" && t == "integer") {
				branches[i][k] = v
			}
		}
	}
	anyOf := make([]any, len(branches))
	for i, b := range branches {
		anyOf[i] = b
	}
	if old, has := out["anyOf"]; has {
		all, _ := out["allOf"].([]any)
		out["allOf"] = append(slices.Clone(all), map[string]any{"anyOf": old})
	}
	out["anyOf"] = anyOf
	return out
}

// lookupPointer returns the value at the JSON pointer ptr of doc.
func lookupPointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// escapePointer escapes a key as a JSON pointer token.
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func isArray(v any) bool  { _, ok := v.([]any); return ok }
func isObject(v any) bool { _, ok := v.(map[string]any); return ok }
