package session

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// A durable log keeps an input as JSON, which has no form for text that
// is not UTF-8: encoding/json writes each invalid byte as U+FFFD. A core
// that kept the bytes a model, a tool or a caller sent would then hold
// other text than a core folded from its log, a restored snapshot or a
// replay (another request to the model after a reopen, other hashes for
// loop detection). So the core takes such an input in its JSON form from
// the start: what it holds, logs and hands out is what its log will say.
// Tool call arguments are the exception (vocab.ToolCall keeps any bytes).

// inJSONForm returns in as its JSON form reads back, when one of its texts
// is not UTF-8; otherwise in itself. The check reads every text of the
// input (most are short and ASCII); only a hostile input pays for the
// round trip.
func inJSONForm(in *vocab.Input) error {
	if inputUTF8(in) {
		return nil
	}
	v := *in // a copy: handing in itself to Marshal would move every Step's input to the heap
	b, err := json.Marshal(&v)
	if err != nil {
		return vocab.Errorf(vocab.CodeBadInput, "%s: no JSON form: %v", in.Kind, err)
	}
	var back vocab.Input
	if err := json.Unmarshal(b, &back); err != nil {
		return vocab.Errorf(vocab.CodeBadInput, "%s: its JSON form does not read back: %v", in.Kind, err)
	}
	back.At = in.At // the same instant, and the caller's location
	*in = back
	return nil
}

func inputUTF8(in *vocab.Input) bool {
	// Most texts are empty, and the rest short and ASCII: bad inlines to a
	// length test, and utf8.ValidString reads eight ASCII bytes at a time.
	if bad(string(in.ID)) || bad(in.Key) || bad(string(in.Target)) || bad(in.Text) || bad(string(in.Finish)) ||
		in.Message != nil && !messageUTF8(in.Message) || in.Reply != nil && !messageUTF8(in.Reply) ||
		in.Result != nil && !resultUTF8(in.Result) || in.Err != nil && !errorUTF8(in.Err) ||
		in.Cause != nil && (bad(string(in.Cause.Kind)) || bad(in.Cause.Reason)) {
		return false
	}
	for i := range in.Parts {
		p := &in.Parts[i]
		if bad(string(p.Kind)) || bad(p.Text) || bad(string(p.Finish)) || bad(p.Provider) || bad(p.Signature) || bad(p.Redacted) ||
			bad(p.Model) || bad(p.ResponseID) || p.Call != nil && (bad(p.Call.ID) || bad(p.Call.Name)) {
			return false
		}
	}
	if h := in.Hook; h != nil {
		if bad(h.Reason) || bad(h.Ask) || h.Err != nil && !errorUTF8(h.Err) || h.Rewritten != nil && !messageUTF8(h.Rewritten) ||
			h.Result != nil && !resultUTF8(h.Result) || !messagesUTF8(h.Messages) || !messagesUTF8(h.History) {
			return false
		}
	}
	if a := in.Approval; a != nil && (bad(a.CallID) || bad(string(a.Decision)) || bad(a.Reason)) {
		return false
	}
	for _, s := range in.Slots {
		if bad(string(s)) {
			return false
		}
	}
	for _, s := range in.Stuck {
		if bad(s.What) {
			return false
		}
	}
	return true
}

// bad reports whether s is not UTF-8. It inlines to a length test: most
// texts of an input are empty.
func bad(s string) bool { return len(s) != 0 && invalid(s) }

// invalid reports whether s is not UTF-8. ASCII, which the texts of a
// step's inputs nearly always are (ids, names, roles, short results), is
// checked a word at a time: a text's bytes are read as little-endian
// words (the compiler makes each a single load), the last one
// overlapping the one before, and a text of under eight bytes as two
// overlapping halves, so no byte is read one by one; utf8.ValidString's
// loop over a short text costs about ten instructions a byte.
func invalid(s string) bool {
	var acc uint64
	switch n := len(s); {
	case n >= 8:
		for i := 0; i+8 <= n; i += 8 {
			acc |= word(s[i:])
		}
		acc |= word(s[n-8:])
	case n >= 4:
		acc = uint64(half(s)) | uint64(half(s[n-4:]))
	case n >= 2:
		acc = uint64(s[0]) | uint64(s[1]) | uint64(s[n-1])
	case n == 1:
		acc = uint64(s[0])
	}
	return acc&0x8080808080808080 != 0 && !utf8.ValidString(s)
}

// word returns the first eight bytes of s as a little-endian word.
func word(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// half returns the first four bytes of s as a little-endian word.
func half(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func errorUTF8(e *vocab.Error) bool { return !bad(string(e.Code)) && !bad(e.Message) }

func messagesUTF8(ms []vocab.Message) bool {
	for i := range ms {
		if !messageUTF8(&ms[i]) {
			return false
		}
	}
	return true
}

func messageUTF8(m *vocab.Message) bool {
	return !bad(string(m.ID)) && !bad(string(m.Role)) && !bad(string(m.Source)) && !bad(m.Key) && partsUTF8(m.Parts) &&
		(m.Result == nil || resultUTF8(m.Result)) &&
		(m.Response == nil || !bad(m.Response.Provider) && !bad(m.Response.Model) && !bad(m.Response.ID))
}

func partsUTF8(ps []vocab.Part) bool {
	for i := range ps {
		p := &ps[i]
		if bad(string(p.Kind)) || bad(p.Text) || bad(p.Provider) || bad(p.Signature) || bad(p.Redacted) ||
			p.Call != nil && (bad(p.Call.ID) || bad(p.Call.Name)) {
			return false
		}
	}
	return true
}

func resultUTF8(r *vocab.ToolResult) bool {
	return !bad(r.CallID) && !bad(r.Name) && !bad(r.Content) && !bad(string(r.Code)) && !bad(r.StopReason) && !bad(r.Note) &&
		!bad(r.Facts) && partsUTF8(r.Parts) &&
		(r.Delivery == nil || !bad(string(r.Delivery.Kind)) && messageUTF8(&r.Delivery.Message)) &&
		(r.Spill == nil || !bad(r.Spill.Ref))
}
