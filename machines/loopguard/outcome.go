package loopguard

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// CodeBlocked is the code of the error result a call gets when loop
// detection blocked its batch. Such a result is the detector's own veto:
// [OutcomeOf] gives it no result hash, so a block never resets a streak.
const CodeBlocked vocab.Code = "loop.blocked"

// Outcome is what detection keeps of a tool result.
type Outcome struct {
	// ResultHash is the digest of the result's facts; meaningful only when
	// HasResult.
	ResultHash uint64
	HasResult  bool
	// NoProgress marks a result that is progress-free by nature (an error).
	// Argument churn counts only such results.
	NoProgress bool
	// Veto marks a call that did not run (blocked, denied, skipped): it has
	// no result hash and extends, never resets, a no-progress streak.
	Veto bool
	// UnknownTool is the tool name when the model called a tool that is not
	// registered.
	UnknownTool string
}

// OutcomeOf reduces a tool result to what detection compares (the seed's
// hashToolOutcome, generalised: a tool declares the fields of its JSON
// result that are volatile, or reduces the result itself through Facts).
// First match wins:
//
//   - a loop block (code [CodeBlocked]), a denial (vocab.CodeToolDenied), a
//     skipped call (vocab.CodeToolSkipped) or a call not executed because
//     the reply hit the output limit (vocab.CodeToolMaxTokens): Veto, no
//     result hash;
//   - res.Facts != "": the hash of Facts, taken as they are (the tool's own
//     reduction);
//   - an error result: the hash of "error:" + its content with volatile
//     spans replaced, NoProgress; UnknownTool is the tool name when the code
//     is vocab.CodeToolUnknown;
//   - otherwise the hash of the content with volatile spans replaced; when
//     the content is a JSON object or array it is canonicalised first (see
//     [HashArgs]) with the members named in volatile dropped at any depth.
//
// Volatile spans are those the seed strips from a failure's identity: ISO
// timestamps, clock times, "attempt N"/"retry N", durations (12ms, 3.2s,
// 5 minutes) and "pid N"/"ppid N"; each becomes "#".
func OutcomeOf(res vocab.ToolResult, volatile []string) Outcome {
	switch res.Code {
	case CodeBlocked, vocab.CodeToolDenied, vocab.CodeToolSkipped, vocab.CodeToolMaxTokens:
		return Outcome{Veto: true}
	}
	if res.Facts != "" {
		return Outcome{HasResult: true, ResultHash: fnvString(fnvString(fnvOffset, "facts:"), res.Facts)}
	}
	if res.IsError {
		o := Outcome{HasResult: true, NoProgress: true,
			ResultHash: fnvString(fnvString(fnvOffset, "error:"), Normalize(res.Content))}
		if res.Code == vocab.CodeToolUnknown {
			o.UnknownTool = res.Name
			if o.UnknownTool == "" {
				o.UnknownTool = "unknown"
			}
		}
		return o
	}
	content := res.Content
	if t := strings.TrimSpace(content); t != "" && (t[0] == '{' || t[0] == '[') {
		if canon, ok := Canonical([]byte(t), volatile); ok {
			content = string(canon)
		}
	}
	return Outcome{HasResult: true, ResultHash: fnvString(fnvString(fnvOffset, "result:"), Normalize(content))}
}

// Normalize replaces the volatile spans of s by "#", pattern by pattern in
// the seed's order (each pass sees the previous passes' output):
//
//	\d{4}-\d{2}-\d{2}[tT ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([zZ]|[+-]\d{2}:\d{2})?
//	\d{1,2}:\d{2}:\d{2}(\.\d{1,6})?
//	\b(attempt|retry)\b[\s#:=]*\d+                              (any case)
//	\b\d+(\.\d+)?\s?(ns|us|ms|seconds?|minutes?|hours?|s)\b     (any case)
//	\b(pid|ppid)\b[\s#:=]*\d+                                   (any case)
func Normalize(s string) string {
	if !hasDigit(s) {
		return s // every pattern needs a digit
	}
	for _, m := range spanMatchers {
		s = replaceSpans(s, m)
	}
	return s
}

// spanMatchers are the volatile-span patterns in order. Each returns the
// length of the match starting at s[i:] (0 for none); \b is checked by the
// matcher, as are the leftmost-first choices of the regular expression.
var spanMatchers = [...]func(s string, i int) int{matchISO, matchClock, matchAttempt, matchDuration, matchPID}

// replaceSpans replaces every leftmost, non-overlapping match of m by "#".
func replaceSpans(s string, m func(string, int) int) string {
	var b []byte
	last := 0
	for i := 0; i < len(s); {
		n := m(s, i)
		if n == 0 {
			i++
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(s))
		}
		b = append(b, s[last:i]...)
		b = append(b, '#')
		i += n
		last = i
	}
	if b == nil {
		return s
	}
	return string(append(b, s[last:]...))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// hasDigit reports whether s holds a digit.
func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if isDigit(s[i]) {
			return true
		}
	}
	return false
}

// isWord reports whether c is a \w byte (ASCII letters, digits, _).
func isWord(c byte) bool {
	return c == '_' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// boundaryBefore reports \b before s[i] given that s[i] is a word byte.
func boundaryBefore(s string, i int) bool { return i == 0 || !isWord(s[i-1]) }

// boundaryAfter reports \b at s[i] given that s[i-1] is a word byte.
func boundaryAfter(s string, i int) bool { return i >= len(s) || !isWord(s[i]) }

// digits returns how many digits (at most max; max <= 0 means any) start
// at s[i:].
func digits(s string, i, max int) int {
	n := 0
	for i+n < len(s) && isDigit(s[i+n]) && (max <= 0 || n < max) {
		n++
	}
	return n
}

// exactDigits reports whether exactly n digits start at s[i:] (more may
// follow).
func exactDigits(s string, i, n int) bool { return digits(s, i, n) == n }

// fraction returns the length of an optional \.\d{1,6} at s[i:].
func fraction(s string, i int) int {
	if i < len(s) && s[i] == '.' {
		if n := digits(s, i+1, 6); n > 0 {
			return 1 + n
		}
	}
	return 0
}

// matchISO: \d{4}-\d{2}-\d{2}[tT ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([zZ]|[+-]\d{2}:\d{2})?
func matchISO(s string, i int) int {
	j := i
	if !exactDigits(s, j, 4) || j+4 >= len(s) || s[j+4] != '-' {
		return 0
	}
	j += 5
	if !exactDigits(s, j, 2) || j+2 >= len(s) || s[j+2] != '-' {
		return 0
	}
	j += 3
	if !exactDigits(s, j, 2) || j+2 >= len(s) {
		return 0
	}
	j += 2
	if c := s[j]; c != 't' && c != 'T' && c != ' ' {
		return 0
	}
	j++
	if !exactDigits(s, j, 2) || j+2 >= len(s) || s[j+2] != ':' {
		return 0
	}
	j += 3
	if !exactDigits(s, j, 2) || j+2 >= len(s) || s[j+2] != ':' {
		return 0
	}
	j += 3
	if !exactDigits(s, j, 2) {
		return 0
	}
	j += 2
	j += fraction(s, j)
	if j < len(s) {
		switch s[j] {
		case 'z', 'Z':
			j++
		case '+', '-':
			if exactDigits(s, j+1, 2) && j+3 < len(s) && s[j+3] == ':' && exactDigits(s, j+4, 2) {
				j += 6
			}
		}
	}
	return j - i
}

// matchClock: \d{1,2}:\d{2}:\d{2}(\.\d{1,6})?
func matchClock(s string, i int) int {
	n := digits(s, i, 2)
	for ; n >= 1; n-- { // \d{1,2} backtracks to one digit
		j := i + n
		if j < len(s) && s[j] == ':' && exactDigits(s, j+1, 2) && j+3 < len(s) && s[j+3] == ':' && exactDigits(s, j+4, 2) {
			j += 6
			return j + fraction(s, j) - i
		}
	}
	return 0
}

// hasWordAt reports whether word (lower case) starts at s[i:] in any case.
func hasWordAt(s string, i int, word string) bool {
	if len(s)-i < len(word) {
		return false
	}
	for k := 0; k < len(word); k++ {
		if s[i+k]|0x20 != word[k] {
			return false
		}
	}
	return true
}

// spaceLen returns the byte length of a \s rune at s[i:], or 0.
func spaceLen(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		switch c {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			return 1
		}
		return 0
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if unicode.IsSpace(r) || r == '\ufeff' {
		return n
	}
	return 0
}

// labelNumber matches \b(one of words)\b[\s#:=]*\d+ at s[i:].
func labelNumber(s string, i int, words ...string) int {
	if !isWord(s[i]) || !boundaryBefore(s, i) {
		return 0
	}
	for _, w := range words {
		if !hasWordAt(s, i, w) || !boundaryAfter(s, i+len(w)) {
			continue
		}
		j := i + len(w)
		for j < len(s) {
			if c := s[j]; c == '#' || c == ':' || c == '=' {
				j++
				continue
			}
			if n := spaceLen(s, j); n > 0 {
				j += n
				continue
			}
			break
		}
		if n := digits(s, j, 0); n > 0 {
			return j + n - i
		}
		return 0 // [\s#:=]* cannot give back a digit
	}
	return 0
}

// matchAttempt: \b(attempt|retry)\b[\s#:=]*\d+
func matchAttempt(s string, i int) int { return labelNumber(s, i, "attempt", "retry") }

// matchPID: \b(pid|ppid)\b[\s#:=]*\d+
func matchPID(s string, i int) int { return labelNumber(s, i, "pid", "ppid") }

// durationUnits in the alternation's order; a trailing "?" makes the last
// letter optional ("seconds?").
var durationUnits = [...]string{"ns", "us", "ms", "seconds?", "minutes?", "hours?", "s"}

// matchDuration: \b\d+(\.\d+)?\s?(ns|us|ms|seconds?|minutes?|hours?|s)\b
func matchDuration(s string, i int) int {
	if !isDigit(s[i]) || !boundaryBefore(s, i) {
		return 0
	}
	j := i + digits(s, i, 0)
	// (\.\d+)? greedy; giving back digits never helps (a digit is neither
	// space nor unit), so try with the whole fraction, then without.
	var heads [2]int
	nh := 0
	if j < len(s) && s[j] == '.' {
		if n := digits(s, j+1, 0); n > 0 {
			heads[nh] = j + 1 + n
			nh++
		}
	}
	heads[nh] = j
	nh++
	for _, h := range heads[:nh] {
		var starts [2]int
		ns := 0
		if n := spaceLen(s, h); n > 0 {
			starts[ns] = h + n
			ns++
		}
		starts[ns] = h
		ns++
		for _, u := range starts[:ns] {
			if n := unitAt(s, u); n > 0 {
				return u + n - i
			}
		}
	}
	return 0
}

// unitAt returns the length of the first unit alternative that matches at
// s[u:] followed by \b.
func unitAt(s string, u int) int {
	for _, alt := range durationUnits {
		if strings.HasSuffix(alt, "?") {
			full := alt[:len(alt)-1]
			if hasWordAt(s, u, full) && boundaryAfter(s, u+len(full)) {
				return len(full)
			}
			short := full[:len(full)-1]
			if hasWordAt(s, u, short) && boundaryAfter(s, u+len(short)) {
				return len(short)
			}
			continue
		}
		if hasWordAt(s, u, alt) && boundaryAfter(s, u+len(alt)) {
			return len(alt)
		}
	}
	return 0
}
