package engine

import (
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// assembler builds the assistant message of one model request from its
// streamed parts. Text and thinking deltas go into a builder and become one
// part when the kind changes, so a long stream costs linear time, not the
// quadratic cost of re-concatenating a string per delta.
type assembler struct {
	msg    vocab.Message
	kind   vocab.PartKind // kind of the deltas in buf
	buf    strings.Builder
	usage  vocab.Usage
	finish vocab.FinishReason
	// open is set once message/start has been emitted for this request.
	open bool
}

// reset starts a new reply.
func (a *assembler) reset() {
	a.msg = vocab.Message{Role: vocab.RoleAssistant, Source: vocab.SourceModel}
	a.kind, a.usage, a.finish, a.open = "", vocab.Usage{}, "", false
	a.buf.Reset()
}

// add takes one streamed part.
func (a *assembler) add(p vocab.StreamPart) {
	switch p.Kind {
	case vocab.StreamText, vocab.StreamThinking:
		kind := vocab.PartText
		if p.Kind == vocab.StreamThinking {
			kind = vocab.PartThinking
		}
		if kind != a.kind {
			a.flush()
			a.kind = kind
		}
		a.buf.WriteString(p.Text)
	case vocab.StreamToolCall:
		if p.Call != nil {
			a.flush()
			c := *p.Call
			a.msg.Parts = append(a.msg.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &c})
		}
	case vocab.StreamUsage:
		if p.Usage != nil {
			a.usage = *p.Usage
		}
	case vocab.StreamFinish:
		a.finish = p.Finish
	}
}

func (a *assembler) flush() {
	if a.buf.Len() > 0 {
		a.msg.Parts = append(a.msg.Parts, vocab.Part{Kind: a.kind, Text: a.buf.String()})
		a.buf.Reset()
	}
	a.kind = ""
}

// message returns the reply so far.
func (a *assembler) message() vocab.Message {
	a.flush()
	return a.msg
}
