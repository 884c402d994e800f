package loopguard

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// FNV-1a, 64 bits (written out: machines may not import hash/...).
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// fnvString folds s into the FNV-1a state h.
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// fnvBytes folds b into the FNV-1a state h.
func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// Hash is a 64-bit FNV-1a digest. It encodes as 16 hex digits in JSON (a
// JSON number cannot carry 64 bits to every reader).
type Hash uint64

const hexDigits = "0123456789abcdef"

// appendHex appends h as 16 lower-case hex digits.
func appendHex(dst []byte, h uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>uint(shift))&0xf])
	}
	return dst
}

// String returns h as 16 hex digits.
func (h Hash) String() string { return string(appendHex(make([]byte, 0, 16), uint64(h))) }

// MarshalText encodes h as 16 hex digits.
func (h Hash) MarshalText() ([]byte, error) { return appendHex(make([]byte, 0, 16), uint64(h)), nil }

// UnmarshalText decodes 1 to 16 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) == 0 || len(b) > 16 {
		return errBadHash
	}
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return errBadHash
		}
		v = v<<4 | uint64(d)
	}
	*h = Hash(v)
	return nil
}

// HashArgs hashes a tool call: the tool name, then the canonical form of its
// JSON arguments (object keys sorted at every depth, insignificant
// whitespace dropped, strings re-escaped canonically, numbers as written; a
// key that occurs twice keeps its last value, as JSON.parse does). Arguments
// that are not valid JSON hash as their bytes; empty arguments hash as {}.
// The tool name is mixed in, so equal hashes mean the same tool with the same
// arguments (the seed's "tool:sha256(stableStringify(params))").
func HashArgs(tool string, args json.RawMessage) uint64 {
	if t := trimJSONSpace(args); len(t) > 0 && asIs(t) {
		return fnvBytes(toolPrefix(tool), t)
	}
	return hashGeneral(tool, args)
}

// toolPrefix is the FNV-1a state after the tool name and ':'.
func toolPrefix(tool string) uint64 {
	h := fnvString(fnvOffset, tool)
	h ^= ':'
	return h * fnvPrime
}

// hashGeneral is HashArgs without asIs's shortcut: every valid input is
// made canonical first.
func hashGeneral(tool string, args json.RawMessage) uint64 {
	h := toolPrefix(tool)
	trimmed := trimJSONSpace(args)
	switch {
	case len(trimmed) == 0:
		return fnvString(h, "{}")
	case !json.Valid(trimmed):
		return fnvBytes(h, args)
	}
	var c canon
	buf := c.value(make([]byte, 0, len(trimmed)), trimmed)
	return fnvBytes(h, buf)
}

// HashArgsScratch is HashArgs building the canonical form in scratch's
// storage (grown as needed) instead of a buffer of its own; it returns the
// hash and the storage, to be passed again. A caller hashing every call
// of a session keeps one scratch.
func HashArgsScratch(tool string, args json.RawMessage, scratch []byte) (uint64, []byte) {
	trimmed := trimJSONSpace(args)
	if len(trimmed) > 0 && asIs(trimmed) {
		return fnvBytes(toolPrefix(tool), trimmed), scratch
	}
	if len(trimmed) == 0 || !json.Valid(trimmed) {
		return hashGeneral(tool, args), scratch
	}
	h := toolPrefix(tool)
	var c canon
	buf := c.value(scratch[:0], trimmed)
	return fnvBytes(h, buf), buf[:0]
}

// Canonical returns the canonical form of valid JSON (see [HashArgs]), with
// the object members named in drop removed at every depth. It returns the
// input unchanged, and false, when it is not valid JSON.
func Canonical(raw []byte, drop []string) ([]byte, bool) {
	trimmed := trimJSONSpace(raw)
	if !json.Valid(trimmed) {
		return raw, false
	}
	c := canon{drop: drop}
	return c.value(make([]byte, 0, len(trimmed)), trimmed), true
}

// asIs reports whether src is valid JSON that is its own canonical form:
// no whitespace, object keys in strictly ascending order (so none twice),
// strings without escapes or control characters and in valid UTF-8, at
// most maxAsIsDepth levels deep. What a model writes for a call's
// arguments nearly always is ({"path":"a.go"}), and then HashArgs hashes
// the bytes as they are, in one pass, without json.Valid and canon. Every
// input it accepts, json.Valid accepts too, and canon returns unchanged
// (FuzzCanonical checks both).
func asIs(src []byte) bool {
	end, ok := asIsEnd(src, 0, 0)
	return ok && end == len(src)
}

// maxAsIsDepth bounds asIs's recursion; deeper values take the general
// path.
const maxAsIsDepth = 32

// asIsEnd returns the index just past the canonical value at src[i] (see
// asIs), and false when there is none.
func asIsEnd(src []byte, i, depth int) (int, bool) {
	if i >= len(src) || depth > maxAsIsDepth {
		return 0, false
	}
	switch c := src[i]; {
	case c == '{':
		i++
		if i < len(src) && src[i] == '}' {
			return i + 1, true
		}
		var prev []byte
		for first := true; ; first = false {
			j, ok := asIsString(src, i)
			if !ok {
				return 0, false
			}
			key := src[i+1 : j-1]
			if !first && bytes.Compare(prev, key) >= 0 {
				return 0, false // out of order, or twice: canon reorders or drops
			}
			prev = key
			if j >= len(src) || src[j] != ':' {
				return 0, false
			}
			if i, ok = asIsEnd(src, j+1, depth+1); !ok || i >= len(src) {
				return 0, false
			}
			switch src[i] {
			case ',':
				i++
			case '}':
				return i + 1, true
			default:
				return 0, false
			}
		}
	case c == '[':
		i++
		if i < len(src) && src[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = asIsEnd(src, i, depth+1); !ok || i >= len(src) {
				return 0, false
			}
			switch src[i] {
			case ',':
				i++
			case ']':
				return i + 1, true
			default:
				return 0, false
			}
		}
	case c == '"':
		return asIsString(src, i)
	case c == 't':
		return literalEnd(src, i, "true")
	case c == 'f':
		return literalEnd(src, i, "false")
	case c == 'n':
		return literalEnd(src, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return numberEnd(src, i)
	}
	return 0, false
}

// asIsString returns the index just past the string token at src[i] when
// canon would write it back unchanged: no escape, no control character,
// valid UTF-8.
func asIsString(src []byte, i int) (int, bool) {
	if i >= len(src) || src[i] != '"' {
		return 0, false
	}
	ascii := true
	for j := i + 1; j < len(src); j++ {
		switch c := src[j]; {
		case c == '"':
			return j + 1, ascii || utf8.Valid(src[i+1:j])
		case c == '\\' || c < 0x20:
			return 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false
}

// literalEnd returns the index just past lit when src holds it at i.
func literalEnd(src []byte, i int, lit string) (int, bool) {
	if len(src)-i >= len(lit) && string(src[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return 0, false
}

// numberEnd returns the index just past the JSON number at src[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(src []byte, i int) (int, bool) {
	if src[i] == '-' {
		i++
	}
	start := i
	i = digitsEnd(src, i)
	if i == start || i-start > 1 && src[start] == '0' {
		return 0, false
	}
	if i < len(src) && src[i] == '.' {
		n := i + 1
		if i = digitsEnd(src, n); i == n {
			return 0, false
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		n := i
		if i = digitsEnd(src, n); i == n {
			return 0, false
		}
	}
	return i, true
}

// digitsEnd returns the index of the first byte from i on that is not a
// decimal digit.
func digitsEnd(src []byte, i int) int {
	for i < len(src) && src[i] >= '0' && src[i] <= '9' {
		i++
	}
	return i
}

// canon writes canonical JSON. Its input has been validated by json.Valid,
// so the scanner below trusts the grammar and only finds token boundaries.
type canon struct {
	drop []string
}

// member is one object member during canonicalisation.
type member struct {
	key        string
	start, end int // the value's span in the object's source
	order      int
}

// value appends the canonical form of the single JSON value src (no
// surrounding whitespace) to dst.
func (c *canon) value(dst, src []byte) []byte {
	switch src[0] {
	case '{':
		return c.object(dst, src)
	case '[':
		dst = append(dst, '[')
		i := skipWS(src, 1)
		first := true
		for src[i] != ']' {
			end := skipValue(src, i)
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = c.value(dst, src[i:end])
			i = skipWS(src, end)
			if src[i] == ',' {
				i = skipWS(src, i+1)
			}
		}
		return append(dst, ']')
	case '"':
		return appendCanonString(dst, decodeString(src))
	default: // number, true, false, null: as written
		return append(dst, src...)
	}
}

// object appends the canonical form of the object src.
func (c *canon) object(dst, src []byte) []byte {
	var few [8]member // most objects have few members: no allocation for them
	members := few[:0]
	i := skipWS(src, 1)
	for src[i] != '}' {
		kend := skipString(src, i)
		key := decodeString(src[i:kend])
		i = skipWS(src, kend)
		i = skipWS(src, i+1) // ':'
		vend := skipValue(src, i)
		if !slices.Contains(c.drop, key) {
			members = append(members, member{key: key, start: i, end: vend, order: len(members)})
		}
		i = skipWS(src, vend)
		if src[i] == ',' {
			i = skipWS(src, i+1)
		}
	}
	slices.SortFunc(members, func(a, b member) int {
		if r := strings.Compare(a.key, b.key); r != 0 {
			return r
		}
		return a.order - b.order
	})
	dst = append(dst, '{')
	first := true
	for k, m := range members {
		if k+1 < len(members) && members[k+1].key == m.key {
			continue // a later duplicate wins
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendCanonString(dst, m.key)
		dst = append(dst, ':')
		dst = c.value(dst, src[m.start:m.end])
	}
	return append(dst, '}')
}

// trimJSONSpace drops JSON whitespace (space, tab, newline, carriage
// return; not the other Unicode spaces bytes.TrimSpace knows) at both ends.
func trimJSONSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && isJSONSpace(b[i]) {
		i++
	}
	for j > i && isJSONSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipWS returns the index of the first non-space byte at or after i.
func skipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string token starting at i.
func skipString(src []byte, i int) int {
	i++
	for i < len(src) {
		switch src[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return i
}

// skipValue returns the index just past the value starting at i.
func skipValue(src []byte, i int) int {
	switch src[i] {
	case '"':
		return skipString(src, i)
	case '{', '[':
		depth := 0
		for i < len(src) {
			switch src[i] {
			case '"':
				i = skipString(src, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(src) {
			switch src[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// decodeString decodes the string token tok (quotes included).
func decodeString(tok []byte) string {
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return string(inner) // unreachable for validated input
	}
	return s
}

// appendCanonString appends s as a JSON string: quote, backslash and control
// characters escaped, everything else as UTF-8.
func appendCanonString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
