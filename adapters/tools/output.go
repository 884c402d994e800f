package tools

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// MaxRetainedChars is how many characters (runes) an Output retains by
// default: what a streaming tool keeps of its output.
const MaxRetainedChars = 10_000_000

// Output collects what a tool writes while it streams (a command's
// stdout and stderr, say). It retains the first characters written, at
// most its cap, and counts everything written, so a tool that produces
// more than it can keep still reports how much there was.
//
// Characters are runes: Output never cuts inside a UTF-8 sequence, even one
// split across writes. A byte that is not part of valid UTF-8 counts as one
// character, as in utf8.RuneCount. Bytes of a sequence still incomplete
// when Output is read count as one character each, as they would if
// nothing more were written.
//
// Output is safe for concurrent use; writes never fail. The zero value
// retains MaxRetainedChars characters.
type Output struct {
	mu        sync.Mutex
	max       int // characters retained at most; 0 means MaxRetainedChars
	buf       []byte
	kept      int   // characters in buf
	chars     int64 // complete characters written
	bytes     int64 // bytes written
	pend      [utf8.UTFMax]byte
	npend     int // bytes of an incomplete sequence at the end of the stream
	truncated bool
}

var (
	_ io.Writer       = (*Output)(nil)
	_ io.StringWriter = (*Output)(nil)
)

// NewOutput returns an Output that retains at most max characters;
// max <= 0 means MaxRetainedChars.
func NewOutput(max int) *Output {
	if max <= 0 {
		max = MaxRetainedChars
	}
	return &Output{max: max}
}

// Write implements io.Writer. It always writes all of p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	write(o, p)
	return len(p), nil
}

// WriteString implements io.StringWriter. It always writes all of s.
func (o *Output) WriteString(s string) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	write(o, s)
	return len(s), nil
}

// limit returns the cap in characters.
func (o *Output) limit() int {
	if o.max <= 0 {
		return MaxRetainedChars
	}
	return o.max
}

// write adds p to o; o.mu is held.
func write[S string | []byte](o *Output, p S) {
	o.bytes += int64(len(p))
	i := 0
	// Finish a sequence the previous write left incomplete.
	for o.npend > 0 && i < len(p) {
		o.pend[o.npend] = p[i]
		o.npend++
		i++
		if utf8.FullRune(o.pend[:o.npend]) {
			_, size := utf8.DecodeRune(o.pend[:o.npend])
			o.add(o.pend[:size])
			// Bytes after an invalid lead byte start over.
			rest := o.npend - size
			copy(o.pend[:], o.pend[size:o.npend])
			o.npend = 0
			if rest > 0 {
				o.reprocess(rest)
			}
		}
	}
	for i < len(p) {
		c := p[i]
		if c < utf8.RuneSelf {
			// A run of ASCII: add it in one go.
			j := i + 1
			for j < len(p) && p[j] < utf8.RuneSelf {
				j++
			}
			addASCIIRun(o, p[i:j])
			i = j
			continue
		}
		var b [utf8.UTFMax]byte
		n := copy(b[:], p[i:])
		if !utf8.FullRune(b[:n]) {
			// Only the end of p can hold an incomplete sequence.
			o.npend = copy(o.pend[:], b[:n])
			return
		}
		_, size := utf8.DecodeRune(b[:n])
		o.add(b[:size])
		i += size
	}
}

// reprocess decodes the n bytes left in o.pend after an invalid byte.
func (o *Output) reprocess(n int) {
	var b [utf8.UTFMax]byte
	copy(b[:], o.pend[:n])
	rest := b[:n]
	for len(rest) > 0 {
		if !utf8.FullRune(rest) {
			o.npend = copy(o.pend[:], rest)
			return
		}
		_, size := utf8.DecodeRune(rest)
		o.add(rest[:size])
		rest = rest[size:]
	}
}

// add counts one character and retains it while there is room.
func (o *Output) add(r []byte) {
	o.chars++
	if o.kept < o.limit() {
		o.buf = append(o.buf, r...)
		o.kept++
		return
	}
	o.truncated = true
}

// addASCIIRun counts and retains a run of one-byte characters.
func addASCIIRun[S string | []byte](o *Output, s S) {
	o.chars += int64(len(s))
	room := o.limit() - o.kept
	if room <= 0 {
		if len(s) > 0 {
			o.truncated = true
		}
		return
	}
	if len(s) > room {
		s = s[:room]
		o.truncated = true
	}
	o.buf = append(o.buf, s...)
	o.kept += len(s)
}

// pendTake returns how many bytes of an incomplete trailing sequence fit
// under the cap, were the stream to end now; o.mu is held.
func (o *Output) pendTake() int {
	return max(0, min(o.limit()-o.kept, o.npend))
}

// counts returns the characters written and whether any were dropped,
// treating an incomplete trailing sequence as ended; o.mu is held.
func (o *Output) counts() (chars int64, truncated bool) {
	return o.chars + int64(o.npend), o.truncated || o.pendTake() < o.npend
}

// text returns the retained text and its length in characters, treating
// an incomplete trailing sequence as ended; o.mu is held.
func (o *Output) text() (string, int) {
	take := o.pendTake()
	b := make([]byte, 0, len(o.buf)+take)
	b = append(b, o.buf...)
	b = append(b, o.pend[:take]...)
	return string(b), o.kept + take
}

// String returns the retained text.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, _ := o.text()
	return s
}

// Chars returns how many characters were written in all, retained or not.
func (o *Output) Chars() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, _ := o.counts()
	return c
}

// Bytes returns how many bytes were written in all, retained or not.
func (o *Output) Bytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes
}

// Truncated reports whether characters were written past the cap and
// dropped.
func (o *Output) Truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, t := o.counts()
	return t
}

// Result returns a result holding the retained text as its Content, with
// Truncated set when characters were dropped; then Note tells the model
// how much was written in all.
func (o *Output) Result() vocab.ToolResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	text, kept := o.text()
	chars, truncated := o.counts()
	res := vocab.ToolResult{Content: text, Truncated: truncated}
	if truncated {
		res.Note = fmt.Sprintf("[Output truncated: the tool kept the first %d of the %d characters (%d bytes) it wrote; the rest was dropped.]",
			kept, chars, o.bytes)
	}
	return res
}
