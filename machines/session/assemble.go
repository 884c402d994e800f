package session

import (
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// Assembler builds the assistant message of one model request from its
// streamed parts. Text and thinking deltas go into a builder and become one
// part when the kind changes, so a long stream costs linear time, not the
// quadratic cost of re-concatenating a string per delta. The zero value is
// ready to use.
type Assembler struct {
	msg    vocab.Message
	kind   vocab.PartKind // kind of the deltas in buf
	buf    strings.Builder
	usage  vocab.Usage
	finish vocab.FinishReason
	// open is set once message/start has been logged for this request.
	open bool
	// sources are the sequence numbers of the model.parts inputs of this
	// request.
	sources []uint64
}

// Reset starts a new reply.
func (a *Assembler) Reset() {
	a.msg = vocab.Message{Role: vocab.RoleAssistant, Source: vocab.SourceModel}
	a.kind, a.usage, a.finish, a.open = "", vocab.Usage{}, "", false
	a.sources = nil
	a.buf.Reset()
}

// Add takes one streamed part.
func (a *Assembler) Add(p vocab.StreamPart) {
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
		if kind == vocab.PartThinking && p.Provider != "" {
			// The block's closing part: it becomes one part with its
			// provider's signature (or redacted data), even when empty.
			a.msg.Parts = append(a.msg.Parts, vocab.Part{Kind: vocab.PartThinking, Text: a.buf.String(),
				Provider: p.Provider, Signature: p.Signature, Redacted: p.Redacted})
			a.buf.Reset()
			a.kind = ""
		}
	case vocab.StreamToolCall:
		if p.Call != nil {
			a.flush()
			if a.msg.Parts == nil {
				// A reply that opens with a tool call (most tool
				// rounds): its first part and the call's copy in one
				// allocation. A later part moves the parts out.
				b := new(struct {
					part [1]vocab.Part
					call vocab.ToolCall
				})
				b.call = *p.Call
				b.part[0] = vocab.Part{Kind: vocab.PartToolCall, Call: &b.call}
				a.msg.Parts = b.part[:]
				break
			}
			c := *p.Call
			a.msg.Parts = append(a.msg.Parts, vocab.Part{Kind: vocab.PartToolCall, Call: &c})
		}
	case vocab.StreamUsage:
		if p.Usage != nil {
			a.usage = *p.Usage
		}
	case vocab.StreamResponse:
		a.msg.Response = &vocab.Response{Provider: p.Provider, Model: p.Model, ID: p.ResponseID}
	case vocab.StreamFinish:
		a.finish = p.Finish
	}
}

func (a *Assembler) flush() {
	if a.buf.Len() > 0 {
		a.msg.Parts = append(a.msg.Parts, vocab.Part{Kind: a.kind, Text: a.buf.String()})
		a.buf.Reset()
	}
	a.kind = ""
}

// Message returns the reply so far.
func (a *Assembler) Message() vocab.Message {
	a.flush()
	m := a.msg
	if m.Role == "" {
		m.Role, m.Source = vocab.RoleAssistant, vocab.SourceModel
	}
	m.Parts = append([]vocab.Part(nil), m.Parts...)
	return m
}

// Take returns the reply and hands its parts over to the caller instead
// of copying them (Message): the assembler forgets them, so call Reset
// before adding to it again.
func (a *Assembler) Take() vocab.Message {
	a.flush()
	m := a.msg
	if m.Role == "" {
		m.Role, m.Source = vocab.RoleAssistant, vocab.SourceModel
	}
	a.msg.Parts = nil
	return m
}

// Usage returns the usage reported so far.
func (a *Assembler) Usage() vocab.Usage { return a.usage }

// Finish returns the finish reason reported, "" when none was.
func (a *Assembler) Finish() vocab.FinishReason { return a.finish }
