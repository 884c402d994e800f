package vocab

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// ErrUnknownKind matches, with errors.Is, the *UnknownKindError DecodePayload
// returns for a kind this version of vocab does not know.
var ErrUnknownKind = errors.New("vocab: unknown event kind")

// UnknownKindError reports an event kind this version of vocab does not
// know, typically written by a newer writer. It matches ErrUnknownKind.
type UnknownKindError struct {
	Kind EventKind
}

// Error implements error.
func (e *UnknownKindError) Error() string {
	return "vocab: unknown event kind " + `"` + string(e.Kind) + `"`
}

// Is reports whether target is ErrUnknownKind.
func (e *UnknownKindError) Is(target error) bool { return target == ErrUnknownKind }

// RawPayload is the undecoded JSON payload of an event whose kind this
// version does not know. It marshals back to the same JSON (compacted, as
// encoding/json compacts every marshaller's output), so a reader that
// re-encodes an event it cannot interpret loses nothing.
type RawPayload json.RawMessage

// MarshalJSON returns p itself, or null when p is empty.
func (p RawPayload) MarshalJSON() ([]byte, error) {
	if len(p) == 0 {
		return []byte("null"), nil
	}
	return p, nil
}

// UnmarshalJSON sets *p to a copy of data.
func (p *RawPayload) UnmarshalJSON(data []byte) error {
	*p = append((*p)[:0], data...)
	return nil
}

// payloadDecoder decodes the payload of one kind.
type payloadDecoder func(kind EventKind, raw []byte) (any, error)

// eventKinds lists every EventKind constant, in declaration order, with the
// decoder of its payload (nil for kinds that carry none). The input/ family
// other than EventInputStale is known by its prefix (see decodeInput).
var eventKinds = []struct {
	kind   EventKind
	decode payloadDecoder
}{
	{EventAgentStart, nil},
	{EventAgentEnd, nil},
	{EventTurnStart, nil},
	{EventTurnEnd, decodeAs[TurnEndPayload]},
	{EventMessageStart, decodeAs[MessagePayload]},
	{EventMessageUpdate, decodeAs[DeltaPayload]},
	{EventMessageEnd, decodeAs[MessagePayload]},
	{EventToolExecutionStart, decodeAs[ToolPayload]},
	{EventToolExecutionUpdate, decodeAs[ToolPayload]},
	{EventToolExecutionEnd, decodeAs[ToolPayload]},

	{EventTransition, decodeAs[TransitionPayload]},
	{EventStepStart, nil},
	{EventStepEnd, decodeAs[StepEndPayload]},
	{EventUserMessage, decodeAs[MessagePayload]},
	{EventAssistant, decodeAs[MessagePayload]},
	{EventToolCall, decodeAs[ToolPayload]},
	{EventToolResult, decodeAs[ToolPayload]},
	{EventInboxSpliced, decodeAs[InboxPayload]},
	{EventRetry, decodeAs[RetryPayload]},
	{EventUsage, decodeAs[UsagePayload]},
	{EventWarning, decodeAs[LoopPayload]},
	{EventLoopIntervention, decodeAs[LoopPayload]},
	{EventPrompt, decodeAs[PromptPayload]},
	{EventStatus, decodeAs[StatusPayload]},
	{EventError, decodeAs[ErrorPayload]},

	{EventInputStale, decodeAs[StalePayload]},
	{EventHistoryReplaced, decodeAs[HistoryPayload]},
	{EventHookFailed, decodeAs[HookPayload]},
	{EventWorkStuck, decodeAs[StuckPayload]},
	{EventRequestHeader, decodeAs[HeaderPayload]},
	{EventRecovering, decodeAs[ErrorPayload]},
	{EventSnapshot, decodeAs[SnapshotPayload]},
	{EventToolApproval, decodeAs[ApprovalPayload]},
	{EventYield, decodeAs[PromptPayload]},
	{EventLane, decodeAs[LanePayload]},
}

// decoders maps each kind of eventKinds to its payload decoder.
var decoders = func() map[EventKind]payloadDecoder {
	m := make(map[EventKind]payloadDecoder, len(eventKinds))
	for _, k := range eventKinds {
		m[k.kind] = k.decode
	}
	return m
}()

// KnownKinds returns every EventKind constant of this package, in
// declaration order. Besides these, every kind InputEventPrefix + an
// InputKind is known (see KnownKind).
func KnownKinds() []EventKind {
	kinds := make([]EventKind, len(eventKinds))
	for i, k := range eventKinds {
		kinds[i] = k.kind
	}
	return kinds
}

// KnownKind reports whether this version of vocab knows kind: one of
// KnownKinds, or InputEventPrefix followed by a (non-empty) InputKind. A
// decoded event of an unknown kind holds its payload as a RawPayload.
func KnownKind(kind EventKind) bool {
	if _, ok := decoders[kind]; ok {
		return true
	}
	return isInputKind(kind)
}

func isInputKind(kind EventKind) bool {
	return len(kind) > len(InputEventPrefix) && strings.HasPrefix(string(kind), InputEventPrefix)
}

// DecodePayload decodes the JSON payload of an event of the given kind into
// the value the engine emits for it, stored by value: a TransitionPayload
// for EventTransition, an Input for the input/ kinds, and so on (see
// Event.Payload). An absent or null payload decodes to nil. A kind that
// carries no payload but has one (a newer writer may have added it) keeps
// it as a RawPayload.
//
// For a kind this version does not know, DecodePayload returns the payload
// as a RawPayload (nil when absent) together with an *UnknownKindError,
// which matches ErrUnknownKind. A payload that does not decode as its
// kind's type yields an *Error with code CodeBadInput.
func DecodePayload(kind EventKind, raw json.RawMessage) (any, error) {
	return decodePayload(kind, raw, true)
}

// decodePayload is DecodePayload; clone says whether a RawPayload must copy
// raw (false when raw already belongs to the caller alone).
func decodePayload(kind EventKind, raw []byte, clone bool) (any, error) {
	absent := isNull(raw)
	asRaw := func() any {
		if absent {
			return nil
		}
		if clone {
			raw = bytes.Clone(raw)
		}
		return RawPayload(raw)
	}
	dec, known := decoders[kind]
	switch {
	case known && dec == nil:
		return asRaw(), nil
	case known && absent:
		return nil, nil
	case known:
		return dec(kind, raw)
	case isInputKind(kind):
		if absent {
			return nil, nil
		}
		return decodeInput(kind, raw)
	}
	return asRaw(), &UnknownKindError{Kind: kind}
}

// isNull reports whether raw is absent or the JSON null.
func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// decodeAs decodes raw as a T, returned by value.
func decodeAs[T any](kind EventKind, raw []byte) (any, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, Errorf(CodeBadInput, "vocab: bad %s payload: %w", kind, err)
	}
	return v, nil
}

// decodeInput decodes the Input recorded by an input/ event and checks
// that it is the input the kind names.
func decodeInput(kind EventKind, raw []byte) (any, error) {
	v, err := decodeAs[Input](kind, raw)
	if err != nil {
		return nil, err
	}
	if in := v.(Input); in.EventKind() != kind {
		return nil, Errorf(CodeBadInput, "vocab: bad %s payload: it holds a %q input", kind, in.Kind)
	}
	return v, nil
}

// EventVersion is the version of the event envelope and of the payload
// encodings: every encoded event carries it as "v" (an event without one
// is of version 1). A decoder refuses a newer version with CodeSchema
// rather than misread it.
const EventVersion = 1

// MarshalJSON encodes e with its envelope version first, then its id
// (see Event.ID).
func (e Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		V  int `json:"v"`
		ID ID  `json:"id"`
		eventFields
	}{EventVersion, e.ID(), eventFields(e)})
}

// eventFields is Event without its methods, so that UnmarshalJSON can
// decode the envelope with the default decoding.
type eventFields Event

// UnmarshalJSON decodes an event and its payload into the typed value the
// engine emitted (see DecodePayload); marshalling uses the default
// encoding, so decoding a marshalled event gives back an equal event.
//
// It does not fail on a kind this version does not know: the event is kept
// whole with its payload as a RawPayload, and the reader decides what to do
// with it (KnownKind tells). A malformed envelope, or a payload that does
// not decode as its kind's type, is an *Error with code CodeBadInput; so is
// an "id" other than the one the event derives (EventID of its session and
// sequence number; an event without one is taken as it is). *e is left
// unchanged then.
func (e *Event) UnmarshalJSON(data []byte) error {
	var aux struct {
		V  int `json:"v"`
		ID ID  `json:"id"`
		eventFields
		// Payload shadows eventFields.Payload: it is decoded by kind below.
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return Errorf(CodeBadInput, "vocab: bad event: %w", err)
	}
	if aux.V > EventVersion {
		return Errorf(CodeSchema, "vocab: event %d (%s) has envelope version %d; this version reads up to %d", aux.Seq, aux.Kind, aux.V, EventVersion)
	}
	ev := Event(aux.eventFields)
	if aux.ID != "" && !IsEventID(aux.ID, ev.Session, ev.Seq) {
		return Errorf(CodeBadInput, "vocab: event %d of session %q has id %q; its id is %q", ev.Seq, ev.Session, aux.ID, ev.ID())
	}
	payload, err := decodePayload(ev.Kind, aux.Payload, false)
	if err != nil && !errors.Is(err, ErrUnknownKind) {
		return err
	}
	ev.Payload = payload
	*e = ev
	return nil
}
