package tools

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The quickest path of decodeFlat: arguments that are a flat JSON object
// of plain values (strings without escapes, integers, numbers, true,
// false, null) for a struct whose fields are all scalars are decoded by
// a scanner of their own, without encoding/json's allocations. It takes
// only what it can prove encoding/json decodes to the same value (every
// key exactly a field's JSON name and not repeated, each value of its
// field's kind and in its range, the whole input one object); anything
// else goes on to the next path, which decides and says what is wrong.

// scalarPlan is how a struct type of scalar fields is decoded.
type scalarPlan struct {
	byName map[string]int // JSON name → field index
	kinds  []reflect.Kind // by field index
}

// scalarPlans caches scalarPlanOf by type (a nil plan: not such a type).
var scalarPlans sync.Map // reflect.Type → *scalarPlan

// scalarPlanOf returns the plan of t, nil when t is not a struct whose
// every field encoding/json sees is a plain scalar (no embedded field,
// no pointer, no ",string" option, no type that decodes itself, no name
// shared by two fields).
func scalarPlanOf(t reflect.Type) *scalarPlan {
	if c, ok := scalarPlans.Load(t); ok {
		return c.(*scalarPlan)
	}
	p := makeScalarPlan(t)
	scalarPlans.Store(t, p)
	return p
}

func makeScalarPlan(t reflect.Type) *scalarPlan {
	if t.Kind() != reflect.Struct || decodesItself(t) || t.NumField() > 64 {
		return nil
	}
	p := &scalarPlan{byName: map[string]int{}, kinds: make([]reflect.Kind, t.NumField())}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		for opts != "" {
			var o string
			o, opts, _ = strings.Cut(opts, ",")
			if o == "string" {
				return nil
			}
		}
		if !validTagName(name) {
			name = sf.Name
		}
		if _, dup := p.byName[name]; dup {
			return nil
		}
		switch k := sf.Type.Kind(); {
		case decodesItself(sf.Type):
			return nil
		case k == reflect.String, k == reflect.Bool, k == reflect.Float32, k == reflect.Float64,
			k >= reflect.Int && k <= reflect.Int64, k >= reflect.Uint && k <= reflect.Uintptr:
			p.byName[name] = i
			p.kinds[i] = k
		default:
			return nil
		}
	}
	// The names must be the ones the other paths check keys against.
	names := jsonFields(t)
	if len(names) != len(p.byName) {
		return nil
	}
	for name := range p.byName {
		if _, ok := names[name]; !ok {
			return nil
		}
	}
	return p
}

// decodeScalars decodes data into v (a struct of p's type) and reports
// whether it could. When it could not, v may be partly filled: a caller
// that goes on to another path decodes into a fresh value.
func decodeScalars(data []byte, p *scalarPlan, v reflect.Value) bool {
	var seen uint64
	return plainMembers(data, func(key []byte, i int) (int, bool) {
		// A key, exactly a field's name, once.
		f, ok := p.byName[string(key)]
		if !ok || seen&(1<<f) != 0 {
			return 0, false
		}
		seen |= 1 << f
		return scalarValue(data, i, p.kinds[f], v.Field(f))
	})
}

// plainMembers scans data as a JSON object (with whitespace around it or
// not) whose keys are plain strings (see plainString), handing each key
// and the index of its value to member, which returns the index after the
// value. It reports false at the first thing it does not take (member's
// false included).
func plainMembers(data []byte, member func(key []byte, i int) (int, bool)) bool {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		key, j, ok := plainString(data, i)
		if !ok {
			return false
		}
		i = skipSpace(data, j)
		if i == len(data) || data[i] != ':' {
			return false
		}
		if i, ok = member(key, skipSpace(data, i+1)); !ok {
			return false
		}
		i = skipSpace(data, i)
		if i == len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte from i on that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString returns the contents of the JSON string at data[i] and the
// index after it, when it has no escape, no control character and is
// valid UTF-8 (encoding/json takes such a string's bytes as they are).
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i == len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[i+1 : j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\', c < ' ':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scalarValue decodes the JSON value at data[i] into f, of kind k, and
// returns the index after it.
func scalarValue(data []byte, i int, k reflect.Kind, f reflect.Value) (int, bool) {
	if i == len(data) {
		return 0, false
	}
	switch c := data[i]; {
	case c == '"':
		s, j, ok := plainString(data, i)
		if !ok || k != reflect.String {
			return 0, false
		}
		f.SetString(string(s))
		return j, true
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit {
				switch {
				case lit == "null": // encoding/json leaves a scalar as it is
				case k != reflect.Bool:
					return 0, false
				default:
					f.SetBool(lit == "true")
				}
				return i + len(lit), true
			}
		}
		return 0, false
	case c == '-' || c >= '0' && c <= '9':
		return number(data, i, k, f)
	}
	return 0, false
}

// number decodes the JSON number at data[i] into f, of kind k: an
// integer kind takes an integer in its range, a float kind any number in
// its range (as encoding/json parses it).
func number(data []byte, i int, k reflect.Kind, f reflect.Value) (int, bool) {
	start := i
	i, ok := numberEnd(data, i)
	if !ok {
		return 0, false
	}
	neg := data[start] == '-'
	digits := data[start:i]
	if neg {
		digits = digits[1:]
	}
	// The integer part, and whether it is all of the number.
	intEnd := skipDigits(digits, 0)
	whole := intEnd == len(digits)
	digits = digits[:intEnd]
	switch {
	case k == reflect.Float32 || k == reflect.Float64:
		bits := 64
		if k == reflect.Float32 {
			bits = 32
		}
		x, err := strconv.ParseFloat(string(data[start:i]), bits)
		if err != nil || f.OverflowFloat(x) {
			return 0, false
		}
		f.SetFloat(x)
		return i, true
	case !whole:
		return 0, false
	}
	var u uint64
	for _, d := range digits {
		if u > (math.MaxUint64-uint64(d-'0'))/10 {
			return 0, false
		}
		u = u*10 + uint64(d-'0')
	}
	switch {
	case k >= reflect.Int && k <= reflect.Int64:
		var n int64
		switch {
		case neg && u <= 1<<63:
			n = int64(-u) // -(1<<63) wraps to itself
		case !neg && u <= math.MaxInt64:
			n = int64(u)
		default:
			return 0, false
		}
		if f.OverflowInt(n) {
			return 0, false
		}
		f.SetInt(n)
	case k >= reflect.Uint && k <= reflect.Uintptr:
		if neg || f.OverflowUint(u) { // encoding/json refuses even -0
			return 0, false
		}
		f.SetUint(u)
	default:
		return 0, false
	}
	return i, true
}

// skipDigits returns the index of the first byte of data from i on that
// is not an ASCII digit.
func skipDigits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// plainObject reports whether data is a JSON object (with whitespace
// around it or not) whose keys are plain strings (see plainString) and
// whose values are plain strings, numbers, true, false or null: JSON
// that json.Valid accepts, proven without encoding/json's scanner (the
// arguments of most tool calls). False proves nothing: data may still be
// valid JSON.
func plainObject(data []byte) bool {
	return plainMembers(data, func(_ []byte, i int) (int, bool) { return plainValue(data, i) })
}

// plainValue returns the index after the plain JSON value at data[i] (a
// plain string, a number, true, false or null).
func plainValue(data []byte, i int) (int, bool) {
	if i == len(data) {
		return 0, false
	}
	switch c := data[i]; {
	case c == '"':
		_, j, ok := plainString(data, i)
		return j, ok
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit {
				return i + len(lit), true
			}
		}
		return 0, false
	case c == '-' || c >= '0' && c <= '9':
		return numberEnd(data, i)
	}
	return 0, false
}

// numberEnd returns the index after the JSON number at data[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
	}
	start := i
	i = skipDigits(data, i)
	if i == start || i-start > 1 && data[start] == '0' {
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		n := i + 1
		if i = skipDigits(data, n); i == n {
			return 0, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		n := i
		if i = skipDigits(data, n); i == n {
			return 0, false
		}
	}
	return i, true
}
