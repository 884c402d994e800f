package session

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestInvalidAgreesWithValidString: invalid, which reads a text a word at
// a time with overlapping loads at its end, answers as
// !utf8.ValidString for every length up to 40 with a byte above ASCII at
// each place (a valid two-byte rune, a lone continuation byte, a byte
// never in UTF-8, a rune cut short at the end), and for random texts.
func TestInvalidAgreesWithValidString(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := invalid(s), !utf8.ValidString(s); got != want {
			t.Fatalf("invalid(%q) = %v, want %v", s, got, want)
		}
	}
	for n := range 41 {
		ascii := strings.Repeat("a", n)
		check(ascii)
		for i := range n {
			for _, b := range []string{"\xc3\xa9", "\x80", "\xff", "\xe2\x82"} {
				check(ascii[:i] + b + ascii[i:])
				check(ascii[:i] + b)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(24))
		for i := range b {
			b[i] = byte(r.IntN(128))
			if r.IntN(10) == 0 {
				b[i] = byte(r.IntN(256))
			}
		}
		check(string(b))
	}
}
