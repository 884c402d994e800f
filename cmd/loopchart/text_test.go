package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

var displayTextCases = []struct {
	name string
	in   string
	max  int
	want string
}{
	{"empty", "", 0, ""},
	{"plain", "hello, world", 0, "hello, world"},
	{"SGR colour", "\x1b[31mred\x1b[0m", 0, `\x1b[31mred\x1b[0m`},
	{"clear screen", "\x1b[2J\x1b[Hgotcha", 0, `\x1b[2J\x1b[Hgotcha`},
	{"OSC 8 hyperlink, ST", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", 0, `\x1b]8;;https://evil.example\x1b\click\x1b]8;;\x1b\`},
	{"OSC 8 hyperlink, BEL", "\x1b]8;;https://evil.example\aclick\x1b]8;;\a", 0, `\x1b]8;;https://evil.example\x07click\x1b]8;;\x07`},
	{"window title", "\x1b]0;pwned\a", 0, `\x1b]0;pwned\x07`},
	{"BEL", "ding\a", 0, `ding\x07`},
	{"CR overwrites the line", "rm -rf /\rls", 0, `rm -rf /\rls`},
	{"tab and newline", "a\tb\nc", 0, `a\tb\nc`},
	{"CRLF", "line\r\n", 0, `line\r\n`},
	{"NUL, backspace, DEL", "\x00\b\x7f", 0, `\x00\x08\x7f`},
	{"C1 CSI", "\u009b31mred", 0, `\u009b31mred`},
	{"C1 NEL, first and last", "\u0085\u0080\u009f", 0, `\u0085\u0080\u009f`},
	{"lone C1 byte", "\x9b31m", 0, `\x9b31m`},
	{"invalid UTF-8", "a\xffb\xc3", 0, `a\xffb\xc3`},
	{"truncated sequence", "\xe6\x97", 0, `\xe6\x97`},
	{"encoded surrogate", "\xed\xa0\x80", 0, `\xed\xa0\x80`},
	{"U+FFFD itself", "\ufffd", 0, "\ufffd"},
	{"bidi override", "file\u202egnp.exe", 0, `file\u202egnp.exe`},
	{"bidi embeddings and overrides", "\u202a\u202b\u202c\u202d\u202e", 0, `\u202a\u202b\u202c\u202d\u202e`},
	{"bidi isolates", "\u2066x\u2067y\u2068z\u2069", 0, `\u2066x\u2067y\u2068z\u2069`},
	{"LRM, RLM", "\u200e\u200f", 0, `\u200e\u200f`},
	{"zero width space, BOM, soft hyphen", "a\u200bb\ufeffc\u00add", 0, `a\u200bb\ufeffc\u00add`},
	{"tag characters", "hi\U000E0041\U000E007F", 0, `hi\U000e0041\U000e007f`},
	{"line and paragraph separators", "a\u2028b\u2029c", 0, `a\u2028b\u2029c`},
	{"combining marks", "cafe\u0301 n\u0303", 0, "cafe\u0301 n\u0303"},
	{"emoji ZWJ sequence", "👩\u200d💻 and 👨\u200d👩\u200d👧", 0, "👩\u200d💻 and 👨\u200d👩\u200d👧"},
	{"emoji with variation selector and skin tone", "❤\ufe0f 👍🏽", 0, "❤\ufe0f 👍🏽"},
	{"flags", "🇩🇪🇫🇷", 0, "🇩🇪🇫🇷"},
	{"no limit", strings.Repeat("x", 500), 0, strings.Repeat("x", 500)},
	{"negative max is no limit", strings.Repeat("x", 500), -1, strings.Repeat("x", 500)},

	// Cutting.
	{"ASCII fits exactly", "abcde", 5, "abcde"},
	{"ASCII cut", "abcdef", 5, "abcde…"},
	{"CJK cut at 1", "日本語のテキスト", 1, "日…"},
	{"CJK cut at 3", "日本語のテキスト", 3, "日本語…"},
	{"CJK cut at 7", "日本語のテキスト", 7, "日本語のテキス…"},
	{"CJK fits at 8", "日本語のテキスト", 8, "日本語のテキスト"},
	{"CJK fits at 100", "日本語のテキスト", 100, "日本語のテキスト"},
	{"two-byte runes at the demo's limit", strings.Repeat("é", 150), 100, strings.Repeat("é", 100) + "…"},
	{"escape does not fit at all", "\x1b", 3, "…"},
	{"escape fits exactly", "\x1b", 4, `\x1b`},
	{"not inside an escape", "ab\x1b[2J", 5, "ab…"},
	{"after an escape", "ab\x1b[2J", 6, `ab\x1b…`},
	{"escape of a C1 control", "ab\u009b", 7, "ab…"},
	{"escape of invalid UTF-8", "ab\xff\xfe", 7, `ab\xff…`},
	{"before a combining mark", "cafe\u0301 au lait", 4, "caf…"},
	{"after a combining mark", "cafe\u0301 au lait", 5, "cafe\u0301…"},
	{"cluster longer than max", "e\u0301\u0302\u0303", 2, "e\u0301…"},
	{"before a ZWJ", "ok 👩\u200d💻 done", 4, "ok …"},
	{"after a ZWJ", "ok 👩\u200d💻 done", 5, "ok …"},
	{"after a ZWJ sequence", "ok 👩\u200d💻 done", 6, "ok 👩\u200d💻…"},
	{"before a skin tone", "👍🏽x", 2, "👍🏽…"},
	{"inside a flag", "🇩🇪🇫🇷", 3, "🇩🇪…"},
	{"between flags", "🇩🇪🇫🇷", 2, "🇩🇪…"},
}

func TestDisplayText(t *testing.T) {
	for _, tc := range displayTextCases {
		t.Run(tc.name, func(t *testing.T) {
			got := displayText(tc.in, tc.max)
			if got != tc.want {
				t.Errorf("displayText(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
			checkDisplayText(t, tc.in, tc.max, got)
		})
	}
}

// TestTimelineEscapesUntrustedText feeds the demo's timeline hostile text
// in every place where a model, a tool or an error can put some.
func TestTimelineEscapesUntrustedText(t *testing.T) {
	const evil = "\x1b]8;;https://evil.example\aclick\x1b]8;;\a\x1b[2J\r\u202e\u009b"
	const shown = `\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[2J\r\u202e\u009b`
	call := vocab.ToolCall{ID: "id" + evil, Name: "name" + evil, Args: json.RawMessage(`"` + evil + `"`)}
	events := []vocab.Event{
		{Kind: vocab.EventTransition, Payload: vocab.TransitionPayload{Machine: "tool", Instance: call.ID, From: "before", To: "running", Trigger: "before.proceed"}},
		{Kind: vocab.EventUserMessage, Payload: vocab.MessagePayload{Message: vocab.UserText("user" + evil)}},
		{Kind: vocab.EventAssistant, Payload: vocab.MessagePayload{Message: vocab.Message{Role: vocab.RoleAssistant, Parts: []vocab.Part{
			{Kind: vocab.PartText, Text: "assistant" + evil},
			{Kind: vocab.PartToolCall, Call: &call},
		}}}},
		{Kind: vocab.EventToolResult, Payload: vocab.ToolPayload{Call: call, Result: &vocab.ToolResult{CallID: call.ID, Content: "result" + evil}}},
		{Kind: vocab.EventToolResult, Payload: vocab.ToolPayload{Call: call, Result: &vocab.ToolResult{CallID: call.ID, Content: strings.Repeat("日本語", 50), IsError: true}}},
		{Kind: vocab.EventRetry, Payload: vocab.RetryPayload{FailedAttempt: 1, NextAttempt: 2, MaxAttempts: 3, Code: vocab.Code("code" + evil), Message: "message" + evil}},
		{Kind: vocab.EventTurnEnd, Payload: vocab.TurnEndPayload{Reason: vocab.TurnEnd{Kind: vocab.EndError, Code: "code", Message: "end" + evil}}},
	}
	for _, color := range []bool{false, true} {
		var out bytes.Buffer
		tl := &timeline{w: &out, color: color, start: time.Unix(0, 0)}
		for _, ev := range events {
			ev.At = tl.start
			tl.print(ev)
		}
		got := out.String()
		if color {
			// Strip the timeline's own colours; nothing else may remain.
			for _, c := range []string{dim, bold, cyan, yellow, green, red, reset} {
				got = strings.ReplaceAll(got, c, "")
			}
		}
		for _, want := range []string{
			"tool id" + shown + " before → running",
			"user: user" + shown,
			"assistant: assistant" + shown,
			"call id" + shown + " name" + shown + `("` + shown + `")`,
			"result id" + shown + ": result" + shown,
			"result id" + shown + ": " + strings.Repeat("日本語", 33) + "日…",
			"retry: attempt 1 failed (code" + shown + ": message" + shown + ")",
			"turn end: error{code: end" + shown + "}",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("color %v: the timeline lacks %q:\n%s", color, want, got)
			}
		}
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		if len(lines) != 8 {
			t.Errorf("color %v: %d lines, want 8:\n%s", color, len(lines), got)
		}
		for _, l := range lines {
			checkDisplayText(t, l, 0, l)
		}
	}
}

func FuzzDisplayText(f *testing.F) {
	for _, tc := range displayTextCases {
		f.Add(tc.in, tc.max)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		checkDisplayText(t, s, max, displayText(s, max))
		// Small limits make the fuzzer cut often.
		small := int(uint(max) % 24)
		checkDisplayText(t, s, small, displayText(s, small))
	})
}

// checkDisplayText checks the properties every output of displayText(s,
// max) must have.
func checkDisplayText(t *testing.T, s string, max int, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("displayText(%q, %d) = %q: not valid UTF-8", s, max, out)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; c < 0x20 || c == 0x7f {
			t.Fatalf("displayText(%q, %d) = %q: control byte %#x", s, max, out, c)
		}
	}
	for _, r := range out {
		switch {
		case r < 0x80:
			// checked above
		case r >= 0x80 && r <= 0x9f:
			t.Fatalf("displayText(%q, %d) = %q: C1 control %U", s, max, out, r)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			t.Fatalf("displayText(%q, %d) = %q: bidi control %U", s, max, out, r)
		case unicode.Is(unicode.Cf, r) && r != zwj, r == 0x2028, r == 0x2029:
			t.Fatalf("displayText(%q, %d) = %q: format character %U", s, max, out, r)
		}
	}
	if max > 0 && utf8.RuneCountInString(out) > max+1 {
		t.Fatalf("displayText(%q, %d) = %q: %d runes", s, max, out, utf8.RuneCountInString(out))
	}

	full := displayText(s, 0)
	if !strings.ContainsRune(s, '\\') {
		// The escapes lose nothing.
		if back, ok := unescape(full); !ok || back != s {
			t.Fatalf("displayText(%q, 0) = %q, which reads back as %q (ok %v)", s, full, back, ok)
		}
	}
	if max <= 0 || utf8.RuneCountInString(full) <= max {
		if out != full {
			t.Fatalf("displayText(%q, %d) = %q, want it uncut: %q", s, max, out, full)
		}
		return
	}
	kept, ok := strings.CutSuffix(out, "…")
	if !ok || !strings.HasPrefix(full, kept) {
		t.Fatalf("displayText(%q, %d) = %q, want a prefix of %q and …", s, max, out, full)
	}
	// The cut lies between the escaped forms of two input runes (or
	// invalid bytes), never inside one.
	for i, n := 0, 0; n != len(kept); {
		if n > len(kept) || i == len(s) {
			t.Fatalf("displayText(%q, %d) = %q: cut inside the escaped form of a rune", s, max, out)
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		n += len(displayText(s[i:i+size], 0))
		i += size
	}
}

// unescape reverses displayText(s, 0) for an s without backslashes.
func unescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return b.String(), false
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'x', 'u', 'U':
			digits := 2
			switch s[i] {
			case 'u':
				digits = 4
			case 'U':
				digits = 8
			}
			if i+digits >= len(s) {
				return b.String(), false
			}
			v, err := strconv.ParseUint(s[i+1:i+1+digits], 16, 32)
			if err != nil {
				return b.String(), false
			}
			if s[i] == 'x' {
				b.WriteByte(byte(v))
			} else {
				b.WriteRune(rune(v))
			}
			i += digits
		default:
			return b.String(), false
		}
	}
	return b.String(), true
}
