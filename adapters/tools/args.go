package tools

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// maxProblem caps the length of a problem description (values quoted in
// it can be long), in characters.
const maxProblem = 1000

// decodeArgs checks raw and decodes it into an A: valid JSON without
// duplicate keys, valid against rs (when not nil), and strictly decodable.
// It returns what is wrong, "" when nothing is.
func decodeArgs[A any](raw json.RawMessage, rs *jsonschema.Resolved) (A, string) {
	data := bytes.TrimSpace(raw)
	if len(data) == 0 {
		data = []byte("{}")
	}
	if rs == nil {
		if a, ok := decodeFlat[A](data); ok {
			return a, "" // the quick path proved the arguments good
		}
	}
	return decodeFull[A](data, rs)
}

// decodeFull is decodeArgs' full path: every check, with the message of
// the first that fails.
func decodeFull[A any](data []byte, rs *jsonschema.Resolved) (A, string) {
	var zero A
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return zero, capProblem(describeJSONError(err))
	}
	if !mayHaveDuplicateKey(data) {
		// The quick scan proved it: no object repeats a key.
	} else if p := duplicateKey(data); p != "" {
		return zero, capProblem(p)
	}
	// Keys A has no field for, checked first for the clearer message (the
	// schema would refuse them too, or decoding would).
	if p := checkNames(v, reflect.TypeFor[A](), nil); p != "" {
		return zero, capProblem(p)
	}
	if rs != nil {
		if err := rs.Validate(v); err != nil {
			return zero, capProblem(describeSchemaError(err))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var a A
	if err := dec.Decode(&a); err != nil {
		return zero, capProblem(describeDecodeError(err))
	}
	return a, ""
}

// capProblem cuts p to maxProblem characters.
func capProblem(p string) string {
	if utf8.RuneCountInString(p) <= maxProblem {
		return p
	}
	return string([]rune(p)[:maxProblem]) + "…"
}

// describeJSONError says why arguments are not acceptable JSON.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("the arguments are not valid JSON: %s (at byte %d)", strings.TrimPrefix(syn.Error(), "json: "), syn.Offset)
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return fmt.Sprintf("%s is out of range", ute.Value)
	}
	return "the arguments are not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

// segment is one step of a path into a JSON value: an object key, or an
// array index when key is not set.
type segment struct {
	key   string
	isKey bool
	index int
}

// renderPath renders a path as in.tags[0] (keys that are not identifiers
// are quoted: ["a b"]).
func renderPath(path []segment) string {
	var b strings.Builder
	for _, s := range path {
		switch {
		case !s.isKey:
			fmt.Fprintf(&b, "[%d]", s.index)
		case isIdent(s.key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		default:
			fmt.Fprintf(&b, "[%s]", strconv.Quote(s.key))
		}
	}
	return b.String()
}

// where renders the location of an object for a message.
func where(path []segment) string {
	if len(path) == 0 {
		return "the top-level object"
	}
	return fmt.Sprintf("the object at %q", renderPath(path))
}

// isIdent reports whether s can be shown bare in a path.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && r != '-' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// duplicateKey returns a message naming the first key repeated within one
// object of data (valid JSON), "" when there is none.
func duplicateKey(data []byte) string {
	type frame struct {
		object  bool
		wantKey bool
		keys    map[string]struct{}
		index   int
		at      segment // where the value sits in its parent
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*frame
	path := func() []segment {
		p := make([]segment, 0, len(stack))
		for _, f := range stack[1:] {
			p = append(p, f.at)
		}
		return p
	}
	var lastKey string
	afterValue := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return ""
		}
		if err != nil {
			return "" // not reached: data was checked before
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			top := stack[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				afterValue()
				continue
			}
			key, _ := tok.(string)
			if _, dup := top.keys[key]; dup {
				return fmt.Sprintf("duplicate key %q in %s", key, where(path()))
			}
			top.keys[key] = struct{}{}
			top.wantKey = false
			lastKey = key
			continue
		}
		var at segment // where this value sits in its parent
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				at = segment{key: lastKey, isKey: true}
			} else {
				at = segment{index: stack[n-1].index}
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, keys: map[string]struct{}{}, at: at})
		case json.Delim('['):
			stack = append(stack, &frame{at: at})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			afterValue()
		default:
			afterValue()
		}
	}
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether values of t decode through their own
// method.
func decodesItself(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// checkNames walks v (decoded JSON) along t, the type it is decoded into,
// and returns a message for the first object key that is not exactly the
// JSON name of a field of the struct it fills (encoding/json would match
// it case-insensitively, or drop it), "" when every key matches.
func checkNames(v any, t reflect.Type, path []segment) string {
	for t != nil && !decodesItself(t) && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || decodesItself(t) {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := fields[k]
			if !ok {
				return unknownField(k, path, fields)
			}
			if p := checkNames(m[k], ft, append(path, segment{key: k, isKey: true})); p != "" {
				return p
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		for _, k := range sortedKeys(m) {
			if p := checkNames(m[k], t.Elem(), append(path, segment{key: k, isKey: true})); p != "" {
				return p
			}
		}
	case reflect.Slice, reflect.Array:
		a, ok := v.([]any)
		if !ok {
			return ""
		}
		for i, e := range a {
			if p := checkNames(e, t.Elem(), append(path, segment{index: i})); p != "" {
				return p
			}
		}
	}
	return ""
}

// unknownField describes key, which no field of an object takes.
func unknownField(key string, path []segment, fields map[string]reflect.Type) string {
	names := sortedKeys(fields)
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return fmt.Sprintf("unknown field %q in %s (field names are case-sensitive: did you mean %q?)", key, where(path), n)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown field %q in %s (it takes no fields)", key, where(path))
	}
	const shown = 20
	list := make([]string, 0, shown)
	for _, n := range names[:min(len(names), shown)] {
		list = append(list, strconv.Quote(n))
	}
	more := ""
	if len(names) > shown {
		more = ", …"
	}
	return fmt.Sprintf("unknown field %q in %s (its fields are %s%s)", key, where(path), strings.Join(list, ", "), more)
}

// decodeFlat decodes data into A on a quick path, when A is a struct of
// plain fields (no nested struct, map or slice to check names in), data
// holds no duplicate key and every top-level key is exactly the JSON name
// of a field. It reports false when it cannot prove the arguments good:
// the full path then decides, and says what is wrong.
func decodeFlat[A any](data []byte) (A, bool) {
	if p := scalarPlanOf(reflect.TypeFor[A]()); p != nil {
		var a A
		if decodeScalars(data, p, reflect.ValueOf(&a).Elem()) {
			return a, true
		}
	}
	var a A
	names, ok := flatFields(reflect.TypeFor[A]())
	if !ok || mayHaveDuplicateKey(data) || !topKeysIn(data, names) {
		return a, false
	}
	return a, json.Unmarshal(data, &a) == nil
}

// flatCache holds flatFields' answers by type.
var flatCache sync.Map

type flatInfo struct {
	names map[string]reflect.Type
	ok    bool
}

// flatFields returns the JSON field names of t when t is a struct whose
// fields are all plain (scalars, pointers to scalars, or types that decode
// themselves).
func flatFields(t reflect.Type) (map[string]reflect.Type, bool) {
	if c, ok := flatCache.Load(t); ok {
		fi := c.(flatInfo)
		return fi.names, fi.ok
	}
	fi := flatInfo{}
	if t.Kind() == reflect.Struct && !decodesItself(t) {
		fi.names, fi.ok = jsonFields(t), true
		for _, ft := range fi.names {
			for ft.Kind() == reflect.Pointer && !decodesItself(ft) {
				ft = ft.Elem()
			}
			switch {
			case decodesItself(ft):
			case ft.Kind() == reflect.Struct, ft.Kind() == reflect.Map, ft.Kind() == reflect.Slice,
				ft.Kind() == reflect.Array, ft.Kind() == reflect.Interface:
				fi.ok = false
			}
		}
	}
	flatCache.Store(t, fi)
	return fi.names, fi.ok
}

// topKeysIn reports whether data is a JSON object whose keys (without
// escapes) are all in names. It allocates nothing.
func topKeysIn(data []byte, names map[string]reflect.Type) bool {
	depth, want := 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			if depth == 0 && c != '{' {
				return false
			}
			depth++
			want = depth == 1
		case '}', ']':
			if depth == 0 {
				return false
			}
			depth--
		case ',':
			want = depth == 1
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					if want {
						return false
					}
					j++
				}
				j++
			}
			if want {
				if _, ok := names[string(data[i+1:j])]; !ok {
					return false
				}
				want = false
			}
			i = j
		default:
			if depth == 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return false // not an object
			}
		}
	}
	return depth == 0
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fieldCache holds jsonFields results by type.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields returns the fields encoding/json decodes into a struct of
// type t, by JSON name, following its rules: exported fields, json tag
// names, "-" skipped, embedded structs promoted, the shallowest field (or
// the only tagged one among the shallowest) winning a name and ties
// dropping it.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if c, ok := fieldCache.Load(t); ok {
		return c.(map[string]reflect.Type)
	}
	type field struct {
		typ    reflect.Type
		depth  int
		tagged bool
	}
	byName := map[string][]field{}
	visited := map[reflect.Type]bool{}
	level := []reflect.Type{t}
	for depth := 0; len(level) > 0; depth++ {
		var next []reflect.Type
		for _, st := range level {
			if visited[st] {
				continue
			}
			visited[st] = true
			for i := range st.NumField() {
				sf := st.Field(i)
				if sf.Anonymous {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					tagged := name != ""
					if name == "" {
						name = sf.Name
					}
					byName[name] = append(byName[name], field{typ: sf.Type, depth: depth, tagged: tagged})
					continue
				}
				next = append(next, ft)
			}
		}
		level = next
	}
	out := make(map[string]reflect.Type, len(byName))
	for name, fs := range byName {
		shallowest := fs[0].depth
		for _, f := range fs {
			shallowest = min(shallowest, f.depth)
		}
		var top, tagged []field
		for _, f := range fs {
			if f.depth == shallowest {
				top = append(top, f)
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
		}
		switch {
		case len(top) == 1:
			out[name] = top[0].typ
		case len(tagged) == 1:
			out[name] = tagged[0].typ
		}
	}
	fieldCache.Store(t, out)
	return out
}

// validTagName is encoding/json's test for a usable json tag name.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// Number renderings of the validator made plain: 300/1 → 300,
// 127.000000 → 127, 0.500000 → 0.5.
var (
	wholeRat   = regexp.MustCompile(`\b(\d+)/1\b`)
	fixedZeros = regexp.MustCompile(`\b\d+\.\d*0\b`)
)

// describeSchemaError turns a jsonschema validation error into a message
// naming the field and the rule: `field "in.n": type: "a" has type
// "string", want "integer"`.
func describeSchemaError(err error) string {
	msg := err.Error()
	ptr := ""
	for strings.HasPrefix(msg, "validating ") {
		rest := msg[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		ptr, msg = rest[:i], rest[i+2:]
	}
	msg = strings.ReplaceAll(msg, "<invalid reflect.Value>", "null")
	msg = wholeRat.ReplaceAllString(msg, "$1")
	msg = fixedZeros.ReplaceAllStringFunc(msg, func(s string) string {
		return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	})
	if loc := schemaLocation(ptr); loc != "" {
		return loc + ": " + msg
	}
	return msg
}

// schemaLocation turns the JSON pointer of a subschema into the field it
// checks (`field "in.tags[]"`), or names the subschema when the field
// cannot be told; "" for the root.
func schemaLocation(ptr string) string {
	if ptr == "" || ptr == "root" || ptr == "/" {
		return ""
	}
	if !strings.HasPrefix(ptr, "/") {
		return fmt.Sprintf("schema %s", ptr)
	}
	toks := strings.Split(ptr[1:], "/")
	for i, tok := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	var b strings.Builder
	dot := func() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
	}
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "properties":
			if i+1 >= len(toks) {
				return fmt.Sprintf("schema %s", ptr)
			}
			i++
			if isIdent(toks[i]) {
				dot()
				b.WriteString(toks[i])
			} else {
				fmt.Fprintf(&b, "[%s]", strconv.Quote(toks[i]))
			}
		case "items", "additionalItems", "contains", "unevaluatedItems":
			b.WriteString("[]")
		case "prefixItems":
			if i+1 >= len(toks) {
				return fmt.Sprintf("schema %s", ptr)
			}
			i++
			fmt.Fprintf(&b, "[%s]", toks[i])
		case "additionalProperties", "unevaluatedProperties":
			dot()
			b.WriteString("*")
		case "patternProperties":
			i++
			dot()
			b.WriteString("*")
		case "anyOf", "allOf", "oneOf":
			i++ // a branch checks the same value
		case "not", "if", "then", "else":
		default:
			return fmt.Sprintf("schema %s", ptr)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return fmt.Sprintf("field %q", b.String())
}

// describeDecodeError says why decoding into the arguments' type failed.
func describeDecodeError(err error) string {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		field := "the arguments"
		if ute.Field != "" {
			field = fmt.Sprintf("field %q", ute.Field)
		}
		if n, ok := strings.CutPrefix(ute.Value, "number "); ok {
			return fmt.Sprintf("%s: number %s does not fit %s", field, n, jsonKind(ute.Type))
		}
		return fmt.Sprintf("%s: got a JSON %s, want %s", field, ute.Value, jsonKind(ute.Type))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind describes the JSON values a Go type takes.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer (%s)", t.Kind())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a non-negative integer (%s)", t.Kind())
	case reflect.Float32, reflect.Float64:
		return fmt.Sprintf("a number (%s)", t.Kind())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}
