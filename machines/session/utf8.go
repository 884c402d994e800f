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
	b, err := json.Marshal(in)
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
	if !texts(string(in.Kind), string(in.ID), in.Key, string(in.Target), in.Text, string(in.Finish)) ||
		in.Message != nil && !messageUTF8(in.Message) || in.Reply != nil && !messageUTF8(in.Reply) ||
		in.Result != nil && !resultUTF8(in.Result) || in.Err != nil && !errorUTF8(in.Err) ||
		in.Cause != nil && !texts(string(in.Cause.Kind), in.Cause.Reason) {
		return false
	}
	for i := range in.Parts {
		p := &in.Parts[i]
		if !texts(string(p.Kind), p.Text, string(p.Finish), p.Provider, p.Signature, p.Redacted, p.Model, p.ResponseID) ||
			p.Call != nil && !texts(p.Call.ID, p.Call.Name) {
			return false
		}
	}
	if h := in.Hook; h != nil {
		if !texts(h.Reason, h.Ask) || h.Err != nil && !errorUTF8(h.Err) || h.Rewritten != nil && !messageUTF8(h.Rewritten) ||
			h.Result != nil && !resultUTF8(h.Result) || !messagesUTF8(h.Messages) || !messagesUTF8(h.History) {
			return false
		}
	}
	if a := in.Approval; a != nil && !texts(a.CallID, string(a.Decision), a.Reason) {
		return false
	}
	for _, s := range in.Slots {
		if !utf8.ValidString(string(s)) {
			return false
		}
	}
	for _, s := range in.Stuck {
		if !utf8.ValidString(s.What) {
			return false
		}
	}
	return true
}

// texts reports whether every one of ss is UTF-8.
func texts(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func errorUTF8(e *vocab.Error) bool { return texts(string(e.Code), e.Message) }

func messagesUTF8(ms []vocab.Message) bool {
	for i := range ms {
		if !messageUTF8(&ms[i]) {
			return false
		}
	}
	return true
}

func messageUTF8(m *vocab.Message) bool {
	if !texts(string(m.ID), string(m.Role), string(m.Source), m.Key) || !partsUTF8(m.Parts) ||
		m.Result != nil && !resultUTF8(m.Result) || m.Response != nil && !texts(m.Response.Provider, m.Response.Model, m.Response.ID) {
		return false
	}
	return true
}

func partsUTF8(ps []vocab.Part) bool {
	for i := range ps {
		p := &ps[i]
		if !texts(string(p.Kind), p.Text, p.Provider, p.Signature, p.Redacted) || p.Call != nil && !texts(p.Call.ID, p.Call.Name) {
			return false
		}
	}
	return true
}

func resultUTF8(r *vocab.ToolResult) bool {
	return texts(r.CallID, r.Name, r.Content, string(r.Code), r.StopReason, r.Note, r.Facts) && partsUTF8(r.Parts) &&
		(r.Delivery == nil || texts(string(r.Delivery.Kind)) && messageUTF8(&r.Delivery.Message)) &&
		(r.Spill == nil || utf8.ValidString(r.Spill.Ref))
}
