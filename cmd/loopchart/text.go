package main

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

const zwj = '\u200d' // zero width joiner: kept so emoji sequences survive

// displayText makes untrusted text (a model's reply, a tool call's
// arguments, a tool's result, an error message) safe and readable on one
// timeline line.
//
// Control characters cannot reach the terminal: C0 controls and DEL
// become \n, \t, \r or \x1b-style escapes, C1 controls become \u009b-style
// escapes, and bytes that are not valid UTF-8 become \xNN. Format
// characters (Unicode category Cf: bidi overrides and isolates, zero-width
// spaces, tag characters, ...) and the line and paragraph separators
// U+2028 and U+2029 are escaped the same way (\u202e, \U000e0041), except
// U+200D ZERO WIDTH JOINER, which emoji sequences need. Backslashes are
// not escaped, so a literal "\x1b" in the text reads like an escaped ESC:
// the output is for people, not for parsing.
//
// If max > 0 the result holds at most max runes of escaped text, cut on a
// rune boundary that is never inside one of the escapes, followed by "…"
// when something was cut. The cut also avoids splitting a character from
// its combining marks, a zero-width-joiner sequence or a flag, unless a
// single such cluster is longer than max. max <= 0 means no limit.
func displayText(s string, max int) string {
	if (max <= 0 || len(s) <= max) && printableASCII(s) {
		return s // the common case
	}
	var b strings.Builder
	b.Grow(len(s))
	// With a limit, units records each unit written (one input rune or
	// invalid byte), so that a cut can back off to a cluster boundary.
	var units []unit
	var buf [10]byte // the longest escape is \U0010ffff
	n := 0           // runes written
	for i := 0; i < len(s); {
		if max <= 0 {
			// Without a limit, copy runs of printable ASCII at once.
			j := i
			for j < len(s) && s[j] >= 0x20 && s[j] < 0x7f {
				j++
			}
			if j > i {
				b.WriteString(s[i:j])
				i = j
				continue
			}
		}
		r, size := rune(s[i]), 1
		var esc []byte // the escape, or nil if the rune prints as itself
		switch {
		case r >= 0x20 && r < 0x7f:
		case r < utf8.RuneSelf:
			esc = escapeRune(buf[:0], r)
		default:
			r, size = utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				esc = appendHex(append(buf[:0], `\x`...), uint32(s[i]), 2)
				r = -1
			} else {
				esc = escapeRune(buf[:0], r)
			}
		}
		w := 1
		if esc != nil {
			w = len(esc) // escapes are ASCII
		}
		if max > 0 && n+w > max {
			units = append(units, unit{r: r}) // the first unit left out
			kept := clusterCut(units)
			end := 0
			if kept > 0 {
				end = units[kept-1].end
			}
			return b.String()[:end] + "…"
		}
		if esc != nil {
			b.Write(esc)
		} else {
			b.WriteString(s[i : i+size])
		}
		n += w
		i += size
		if max > 0 {
			units = append(units, unit{end: b.Len(), r: r})
		}
	}
	return b.String()
}

// printableASCII reports whether s holds only printable ASCII characters.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// unit is one input rune (or invalid byte, r == -1) as written to the
// output: end is the output's length in bytes just after it.
type unit struct {
	end int
	r   rune
}

// escapeRune appends the visible escape for r to dst, or returns nil if r
// prints as itself.
func escapeRune(dst []byte, r rune) []byte {
	switch {
	case r == '\n':
		return append(dst, `\n`...)
	case r == '\t':
		return append(dst, `\t`...)
	case r == '\r':
		return append(dst, `\r`...)
	case r < 0x20 || r == 0x7f:
		return appendHex(append(dst, `\x`...), uint32(r), 2)
	case r < 0x80 || r == zwj:
		return nil
	case r <= 0x9f, r == '\u2028', r == '\u2029', unicode.Is(unicode.Cf, r):
		if r > 0xffff {
			return appendHex(append(dst, `\U`...), uint32(r), 8)
		}
		return appendHex(append(dst, `\u`...), uint32(r), 4)
	}
	return nil
}

// appendHex appends the last digits hex digits of v to dst.
func appendHex(dst []byte, v uint32, digits int) []byte {
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		dst = append(dst, "0123456789abcdef"[v>>shift&0xf])
	}
	return dst
}

// clusterCut returns how many units to keep when units[len(units)-1], the
// first unit left out, does not fit: as many as possible without cutting
// inside a cluster of runes that display as one character, or, if the kept
// units are a single such cluster, all of them.
func clusterCut(units []unit) int {
	last := len(units) - 1
	for k := last; k > 0; k-- {
		if !joined(units[:k], units[k].r) {
			return k
		}
	}
	return last
}

// joined reports whether next displays as part of the same character as
// the end of prev (a simplified form of the grapheme cluster rules of
// Unicode Standard Annex #29).
func joined(prev []unit, next rune) bool {
	p := prev[len(prev)-1].r
	switch {
	case p == zwj || next == zwj:
		return true
	case unicode.In(next, unicode.Mn, unicode.Me, unicode.Mc):
		return true // combining marks, variation selectors
	case next >= 0x1f3fb && next <= 0x1f3ff:
		return true // emoji skin tone modifiers
	case isRegionalIndicator(p) && isRegionalIndicator(next):
		// Flags are pairs of regional indicators: next completes a
		// pair if an odd number of them precede it.
		odd := false
		for i := len(prev) - 1; i >= 0 && isRegionalIndicator(prev[i].r); i-- {
			odd = !odd
		}
		return odd
	}
	return false
}

func isRegionalIndicator(r rune) bool { return r >= 0x1f1e6 && r <= 0x1f1ff }
