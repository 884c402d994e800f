// Package store defines where sessions' events live durably, and how a
// session is rebuilt from them.
//
// A Store holds many sessions. Each session is a gapless sequence of
// events (vocab.Event, stored in its stable JSON form) with exactly one
// writer at a time: a writer first Claims the session, which bumps the
// session's epoch, and every Append quotes that claim. An append whose
// claim is no longer the session's fails with vocab.CodeClaimLost (epoch
// fencing), so a writer that was taken over can never add to the log.
//
// Errors are typed by code (vocab.CodeOf, errors.Is with the sentinels
// below): ErrNoSession ("no such session") is different from ErrLoad
// ("the session exists but could not be read"); a caller never replaces a
// session it could not load by a blank one.
//
// Implementations: the memory subpackage (tests, embedding without
// durability) and the sqlite subpackage (the embedded durable default).
// The storetest subpackage is the conformance suite both pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// SchemaVersion is the version of the event envelope this package writes
// (Record.V). A reader refuses records of a newer version with ErrSchema.
const SchemaVersion = vocab.EventVersion

// Sentinels, one per code; match with errors.Is.
var (
	ErrNoSession = vocab.CodeNoSession.Err()
	ErrLoad      = vocab.CodeLoadFailed.Err()
	ErrClaimLost = vocab.CodeClaimLost.Err()
	ErrClaimed   = vocab.CodeClaimed.Err()
	ErrSequence  = vocab.CodeSequence.Err()
	ErrSchema    = vocab.CodeSchema.Err()
)

// Claim names a session's writer: the run that claimed it and the epoch
// its claim created. Epochs of a session only grow.
type Claim struct {
	Run   vocab.ID `json:"run"`
	Epoch uint64   `json:"epoch"`
}

// Info describes a stored session.
type Info struct {
	Session vocab.ID
	// Head is the sequence number of the session's last event (0 when it
	// has none).
	Head uint64
	// Created is the time of the first event, Updated of the last one.
	Created, Updated time.Time
	// Claim is the session's current writer claim.
	Claim Claim
	// Status is the last public status the session logged ("idle",
	// "running", "yielded"), empty when it logged none.
	Status string
}

// Record is one stored event: the envelope's columns, with the payload
// kept in its JSON form so that a reader decodes only what it needs.
type Record struct {
	Session vocab.ID
	Seq     uint64
	// At is the event's time, in UTC.
	At   time.Time
	Kind vocab.EventKind
	Turn int
	Step int
	// V is the envelope's schema version (SchemaVersion when written by
	// this version).
	V int
	// Payload is the event's payload in its JSON form; nil when the event
	// has none. A Record yielded by Read must not be retained past the
	// iteration step unless copied: stores may reuse the bytes.
	Payload json.RawMessage
}

// Event decodes r into a vocab.Event with its typed payload. A kind this
// version does not know keeps its payload as a vocab.RawPayload and is
// reported with vocab.ErrUnknownKind beside the event, never dropped.
func (r Record) Event() (vocab.Event, error) {
	e := vocab.Event{
		Session: r.Session, Seq: r.Seq, At: r.At,
		Kind: r.Kind, Turn: r.Turn, Step: r.Step,
	}
	if r.V > SchemaVersion {
		return e, vocab.Errorf(vocab.CodeSchema, "store: event %d of %s has schema version %d, newer than %d", r.Seq, r.Session, r.V, SchemaVersion)
	}
	p, err := vocab.DecodePayload(r.Kind, r.Payload)
	e.Payload = p
	if err != nil {
		return e, err
	}
	return e, nil
}

// RecordOf encodes e into its stored form.
func RecordOf(e vocab.Event) (Record, error) {
	r := Record{Session: e.Session, Seq: e.Seq, At: e.At.UTC(), Kind: e.Kind, Turn: e.Turn, Step: e.Step, V: SchemaVersion}
	if e.Payload != nil {
		b, err := json.Marshal(e.Payload)
		if err != nil {
			return r, vocab.Errorf(vocab.CodeInternal, "store: encode %s payload of event %d: %v", e.Kind, e.Seq, err)
		}
		r.Payload = b
	}
	return r, nil
}

// Store keeps sessions' events. All methods are safe for concurrent use.
type Store interface {
	// Claim makes run the only writer of session and returns the new claim
	// (its epoch one above the previous) and the session's head sequence.
	// With create, a session that does not exist is created empty (head
	// 0); without it, a missing session is ErrNoSession. A session held by
	// a live writer through another Store value (another process, or
	// another Open of the same file) is ErrClaimed; one whose holder died
	// is taken over. A claim taken over from a writer of this Store makes
	// that writer's later appends fail with ErrClaimLost.
	Claim(ctx context.Context, session, run vocab.ID, create bool) (Claim, uint64, error)
	// Append adds batch (the events of one Ready, gapless, starting at the
	// session's head + 1) to session under claim, and returns once the
	// batch is durable (the store's durability setting decides what that
	// means). A wrong first sequence or a gap inside the batch is
	// ErrSequence, a stale or released claim ErrClaimLost, an event of
	// another session an error; each leaves the log unchanged. A failure
	// of the storage itself (I/O, a failed commit) is vocab.CodeAppendFailed
	// and is not retried. When ctx ends before the append is done, Append
	// returns ctx's cause and the batch may still be committed: read the
	// head to know. An empty batch appends nothing. Append does not retain
	// batch.
	Append(ctx context.Context, session vocab.ID, claim Claim, batch []vocab.Event) error
	// Read yields session's records with sequence number >= from (0 means
	// 1), in order, up to the head when the read starts. A failure ends the
	// stream with a (zero Record, error) pair; a missing session yields
	// ErrNoSession.
	Read(ctx context.Context, session vocab.ID, from uint64) iter.Seq2[Record, error]
	// Latest returns the sequence number of session's last event of kind
	// (0 when there is none); a missing session is ErrNoSession.
	Latest(ctx context.Context, session vocab.ID, kind vocab.EventKind) (uint64, error)
	// Sessions yields every session, most recently updated first.
	Sessions(ctx context.Context) iter.Seq2[Info, error]
	// Release gives up claim (a no-op when it is no longer the session's):
	// another process may then claim the session without waiting. The
	// session keeps its epoch, so a later claim still fences the released
	// writer out.
	Release(ctx context.Context, session vocab.ID, claim Claim) error
	// Close releases every claim this Store holds and closes it.
	Close() error
}

// AsyncAppender is a Store whose appends can be started and waited on
// later (see eventlog.AsyncSink). AppendAsync checks and encodes batch
// before it returns; wait reports what Append would have returned. Appends
// of one session are committed in the order they were started.
type AsyncAppender interface {
	AppendAsync(ctx context.Context, session vocab.ID, claim Claim, batch []vocab.Event) (wait func(context.Context) error)
}

// Events decodes the records of Read into events. Unknown kinds are
// yielded with their RawPayload and a nil error (a reader that must know
// every kind checks vocab.KnownKind).
func Events(ctx context.Context, st Store, session vocab.ID, from uint64) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		for r, err := range st.Read(ctx, session, from) {
			if err != nil {
				yield(vocab.Event{}, err)
				return
			}
			e, err := r.Event()
			if err != nil && !errors.Is(err, vocab.ErrUnknownKind) {
				yield(e, vocab.Errorf(vocab.CodeLoadFailed, "store: session %s event %d: %w", session, r.Seq, err))
				return
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}
