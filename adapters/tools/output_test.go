package tools

import (
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

func TestOutput(t *testing.T) {
	euro := "€"  // e2 82 ac
	smile := "😀" // f0 9f 98 80
	cases := []struct {
		name      string
		cap       int
		writes    []string
		want      string
		chars     int64
		truncated bool
	}{
		{"nothing", 3, nil, "", 0, false},
		{"under the cap", 3, []string{"ab"}, "ab", 2, false},
		{"exactly the cap", 3, []string{"ab", "c"}, "abc", 3, false},
		{"over the cap", 3, []string{"ab", "cd", "ef"}, "abc", 6, true},
		{"empty writes", 3, []string{"", "a", ""}, "a", 1, false},
		{"multibyte counts as one", 2, []string{"héllo"}, "hé", 5, true},
		{"rune split across writes", 1, []string{"\xc3", "\xa9"}, "é", 1, false},
		{"4-byte rune split in 4", 5, []string{smile[:1], smile[1:2], smile[2:3], smile[3:]}, smile, 1, false},
		{"split rune at the cap", 2, []string{"a" + smile[:2], smile[2:] + "b"}, "a" + smile, 3, true},
		{"split rune past the cap", 1, []string{"a" + smile[:2], smile[2:]}, "a", 2, true},
		{"incomplete at the end", 10, []string{"a", euro[:2]}, "a" + euro[:2], 3, false},
		{"incomplete at the end, over the cap", 2, []string{"a", euro[:2]}, "a" + euro[:1], 3, true},
		{"invalid byte is one character", 10, []string{"a\xffb"}, "a\xffb", 3, false},
		{"invalid continuation after a lead", 10, []string{"\xe2", "x"}, "\xe2x", 2, false},
		{"lead interrupted by another rune", 10, []string{smile[:2], euro}, smile[:2] + euro, 3, false},
		{"cap cuts in a multibyte run", 3, []string{strings.Repeat(euro, 5)}, strings.Repeat(euro, 3), 5, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, viaString := range []bool{false, true} {
				o := NewOutput(c.cap)
				var n int64
				for _, w := range c.writes {
					var k int
					var err error
					if viaString {
						k, err = o.WriteString(w)
					} else {
						k, err = o.Write([]byte(w))
					}
					if k != len(w) || err != nil {
						t.Fatalf("write %q = %d, %v", w, k, err)
					}
					n += int64(len(w))
				}
				if got := o.String(); got != c.want {
					t.Errorf("String() = %q, want %q", got, c.want)
				}
				if got := o.Chars(); got != c.chars {
					t.Errorf("Chars() = %d, want %d", got, c.chars)
				}
				if got := o.Bytes(); got != n {
					t.Errorf("Bytes() = %d, want %d", got, n)
				}
				if got := o.Truncated(); got != c.truncated {
					t.Errorf("Truncated() = %v, want %v", got, c.truncated)
				}
				res := o.Result()
				if res.Content != c.want || res.Truncated != c.truncated || (res.Note != "") != c.truncated {
					t.Errorf("Result() = %+v", res)
				}
			}
		})
	}
}

// TestOutputSplits checks Output against the whole stream decoded at once,
// over random byte strings (valid and invalid UTF-8) cut at random places.
func TestOutputSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "é", "€", "😀", "\xff", "\xe2", "\xf0\x9f", "\x80", "z"}
	for i := range 2000 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		data := b.String()
		limit := 1 + rng.IntN(20)
		o := NewOutput(limit)
		for rest := data; len(rest) > 0; {
			k := 1 + rng.IntN(len(rest))
			if rng.IntN(2) == 0 {
				_, _ = o.WriteString(rest[:k])
			} else {
				_, _ = o.Write([]byte(rest[:k]))
			}
			rest = rest[k:]
		}
		// Reference: the first limit runes of the whole.
		total := utf8.RuneCountInString(data)
		cut, _ := runeOffset(data, limit)
		want := data[:cut]
		if got := o.String(); got != want {
			t.Fatalf("case %d (cap %d, %q): String() = %q, want %q", i, limit, data, got, want)
		}
		if got := o.Chars(); got != int64(total) {
			t.Fatalf("case %d (%q): Chars() = %d, want %d", i, data, got, total)
		}
		if got := o.Truncated(); got != (total > limit) {
			t.Fatalf("case %d (%q, cap %d): Truncated() = %v", i, data, limit, got)
		}
	}
}

func TestOutputDefaultCap(t *testing.T) {
	for _, o := range []*Output{{}, NewOutput(0), NewOutput(-1)} {
		big := strings.Repeat("a", MaxRetainedChars)
		_, _ = o.WriteString(big)
		if o.Truncated() {
			t.Fatal("truncated at exactly MaxRetainedChars")
		}
		_, _ = io.WriteString(o, "b")
		if !o.Truncated() || len(o.String()) != MaxRetainedChars || o.Chars() != MaxRetainedChars+1 {
			t.Fatalf("after one more: truncated %v, kept %d, chars %d", o.Truncated(), len(o.String()), o.Chars())
		}
		want := vocab.ToolResult{Content: big, Truncated: true,
			Note: "[Output truncated: the tool kept the first 10000000 of the 10000001 characters (10000001 bytes) it wrote; the rest was dropped.]"}
		if diff := cmp.Diff(want, o.Result()); diff != "" {
			t.Errorf("Result (-want +got):\n%.500s", diff)
		}
	}
}

func TestOutputConcurrent(t *testing.T) {
	o := NewOutput(1000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				_, _ = o.WriteString("é")
				_, _ = o.Write([]byte("x"))
				_ = o.Truncated()
			}
		})
	}
	wg.Wait()
	if o.Chars() != 8000 || o.Bytes() != 12000 || utf8.RuneCountInString(o.String()) != 1000 || !utf8.ValidString(o.String()) {
		t.Errorf("chars %d, bytes %d, kept %d", o.Chars(), o.Bytes(), utf8.RuneCountInString(o.String()))
	}
}
