package vocab

import (
	"iter"
	"slices"
)

// History is a read-only view of a conversation, shared with the session
// that owns it: taking a view costs nothing, whatever the length of the
// history, and a holder cannot change the session's messages. Each message
// read from it is a copy (its parts are cloned), so editing a message that
// was read changes only the copy.
//
// A session's history is append-only; a view keeps showing the messages it
// was taken with.
type History struct{ msgs []Message }

// HistoryOf returns a view of msgs. The caller must not change msgs
// afterwards (a session only appends, which a view never sees).
func HistoryOf(msgs []Message) History { return History{msgs: slices.Clip(msgs)} }

// Len returns the number of messages.
func (h History) Len() int { return len(h.msgs) }

// At returns a copy of message i.
func (h History) At(i int) Message { return cloneMessage(h.msgs[i]) }

// All yields a copy of each message with its index.
func (h History) All() iter.Seq2[int, Message] {
	return func(yield func(int, Message) bool) {
		for i := range h.msgs {
			if !yield(i, cloneMessage(h.msgs[i])) {
				return
			}
		}
	}
}

// Messages returns a copy of every message (O(history): for callers that
// want to rebuild the history).
func (h History) Messages() []Message {
	out := make([]Message, len(h.msgs))
	for i := range h.msgs {
		out[i] = cloneMessage(h.msgs[i])
	}
	return out
}

// CloneMessage returns a copy of m that shares no mutable memory with it.
func CloneMessage(m Message) Message { return cloneMessage(m) }

func cloneMessage(m Message) Message {
	if m.Response != nil {
		r := *m.Response
		m.Response = &r
	}
	if m.Parts != nil {
		parts := make([]Part, len(m.Parts))
		copy(parts, m.Parts)
		for i := range parts {
			if c := parts[i].Call; c != nil {
				cc := *c
				cc.Args = slices.Clone(c.Args)
				parts[i].Call = &cc
			}
		}
		m.Parts = parts
	}
	if m.Result != nil {
		r := CloneResult(*m.Result)
		m.Result = &r
	}
	return m
}

// CloneResult returns a copy of r that shares no mutable memory with it.
func CloneResult(r ToolResult) ToolResult {
	if r.Parts != nil {
		r.Parts = cloneMessage(Message{Parts: r.Parts}).Parts
	}
	if r.Spill != nil {
		s := *r.Spill
		r.Spill = &s
	}
	if r.Delivery != nil {
		d := *r.Delivery
		d.Message = cloneMessage(d.Message)
		r.Delivery = &d
	}
	return r
}
