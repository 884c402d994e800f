package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Folded is a session rebuilt from its log.
type Folded struct {
	// Core is the session core as its last event left it, with no Ready
	// outstanding and no machines lent (see session.Core.Use). Work that
	// was outstanding at the end of the log is in it but not re-emitted:
	// stepping an open input recovers it (vocab.InOpen).
	Core *session.Core
	// Head is the sequence number of the last event.
	Head uint64
	// Snapshot is the sequence number of the core/snapshot event the fold
	// started from (0: it replayed the whole log).
	Snapshot uint64
	// Inputs and Events count the input events stepped and the events
	// read.
	Inputs, Events int
}

// CoreSnapshot returns the folded core's versioned snapshot (JSON), lending it
// machines for the call.
func (f *Folded) CoreSnapshot() ([]byte, error) {
	f.Core.Use(session.NewMachines())
	defer f.Core.Use(nil)
	return f.Core.Snapshot()
}

// Fold rebuilds session from its log in st: it restores the last
// core/snapshot event when there is one, then steps every recorded input
// after it into the core. Only input events (and the snapshot) are
// decoded; every other event is checked for its place only: the core must
// derive exactly as many events as the log holds between two inputs.
//
// A missing session is ErrNoSession. A log that cannot be read, does not
// decode, does not start with an open input, or that the core does not
// re-derive to the same length is ErrLoad, naming the session and the
// sequence number; it is never replaced by a blank session.
func Fold(ctx context.Context, st Store, id vocab.ID) (*Folded, error) {
	f, err := fold(ctx, st, id, false, false)
	var bad *badSnapshot
	if errors.As(err, &bad) {
		// A snapshot that does not restore costs time, not the session:
		// fold the whole log instead.
		return fold(ctx, st, id, false, true)
	}
	return f, err
}

// badSnapshot marks a core/snapshot event that could not be restored.
type badSnapshot struct{ err error }

func (b *badSnapshot) Error() string { return "the snapshot does not restore: " + b.err.Error() }
func (b *badSnapshot) Unwrap() error { return b.err }

// Divergence is the first difference between a log and what replaying its
// inputs derives.
type Divergence struct {
	Seq      uint64
	Expected vocab.Event // as logged (zero when the log ends first)
	Got      vocab.Event // as derived (zero when the replay derived nothing)
	// Diff compares the two as JSON: the logged payload as stored, the
	// derived one as this version encodes it (-logged +derived).
	Diff string
}

// Error implements error.
func (d *Divergence) Error() string {
	return fmt.Sprintf("event %d: the log has %s, the replay derives %s:\n%s", d.Seq, kindOr(d.Expected), kindOr(d.Got), d.Diff)
}

func kindOr(e vocab.Event) string {
	if e.Kind == "" {
		return "nothing"
	}
	return string(e.Kind)
}

// Verify replays session's log from its first event on a fresh core and
// compares every derived event with the recorded one (kind, turn, step,
// time and payload). The first difference is returned as an error with
// code vocab.CodeDiverged carrying a *Divergence (errors.As). Snapshot
// events are re-derived and compared too. This is how a user checks that
// an upgrade of loopchart still explains their old logs.
func Verify(ctx context.Context, st Store, id vocab.ID) (*Folded, error) {
	return fold(ctx, st, id, true, true)
}

// fold folds session id; verify compares every derived event with the
// logged one, whole replays from the first event (ignoring snapshots).
func fold(ctx context.Context, st Store, id vocab.ID, verify, whole bool) (*Folded, error) {
	m := session.NewMachines()
	f := &Folded{}
	from := uint64(1)
	var core *session.Core
	if !whole {
		snap, err := st.Latest(ctx, id, vocab.EventSnapshot)
		if err != nil {
			return nil, err
		}
		if snap > 0 {
			for r, err := range st.Read(ctx, id, snap) {
				if err != nil {
					return nil, loadErr(id, snap, err)
				}
				var p vocab.SnapshotPayload
				if err := json.Unmarshal(r.Payload, &p); err != nil {
					return nil, loadErr(id, snap, &badSnapshot{err})
				}
				if core, err = session.Restore(p.Core, m); err != nil {
					return nil, loadErr(id, snap, &badSnapshot{err})
				}
				break
			}
			if core == nil {
				return nil, loadErr(id, snap, fmt.Errorf("the snapshot event is missing"))
			}
			rd, _ := core.Ready() // re-emitted work: nothing runs during a fold
			core.Advance(rd)
			f.Snapshot, from = snap, core.Seq()+1
		}
	}
	next := from
	var derived []vocab.Event // verify: derived events not yet compared
	for r, err := range st.Read(ctx, id, from) {
		if err != nil {
			if next == from && vocab.CodeOf(err) == vocab.CodeNoSession {
				return nil, err
			}
			return nil, loadErr(id, next, err)
		}
		if r.Seq != next {
			return nil, loadErr(id, next, fmt.Errorf("event %d follows %d", r.Seq, next-1))
		}
		next++
		f.Events++
		in, isInput, err := inputOf(r)
		if err != nil {
			return nil, loadErr(id, r.Seq, err)
		}
		if isInput {
			if core == nil {
				cfg, err := session.ConfigOf(in)
				if err != nil {
					return nil, loadErr(id, r.Seq, fmt.Errorf("the log does not start with an open input: %w", err))
				}
				if cfg.Session != id {
					return nil, loadErr(id, r.Seq, fmt.Errorf("the log opens session %s", cfg.Session))
				}
				if core, err = session.New(cfg, m); err != nil {
					return nil, loadErr(id, r.Seq, err)
				}
			}
			if verify && len(derived) > 0 {
				return nil, diverged(id, derived[0].Seq, nil, derived[0])
			}
			if core.Seq() != r.Seq-1 {
				return nil, loadErr(id, r.Seq, fmt.Errorf("replaying the inputs derives %d events before input %d, the log holds %d",
					core.Seq(), r.Seq, r.Seq-1))
			}
			if err := core.Step(in); err != nil {
				return nil, loadErr(id, r.Seq, fmt.Errorf("the core refuses logged input %s: %w", in.Kind, err))
			}
			f.Inputs++
			rd, _ := core.Ready()
			if verify {
				derived = append(derived, rd.Events...)
			}
			core.Advance(rd)
		} else if core == nil {
			return nil, loadErr(id, r.Seq, fmt.Errorf("the log does not start with an open input (it starts with %s)", r.Kind))
		}
		if verify {
			if len(derived) == 0 {
				return nil, diverged(id, r.Seq, &r, vocab.Event{})
			}
			if err := compare(r, derived[0]); err != nil {
				return nil, diverged(id, r.Seq, &r, derived[0])
			}
			derived = derived[1:]
		}
		if f.Events%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	if core == nil {
		if from > 1 {
			return nil, loadErr(id, from, fmt.Errorf("no events after the snapshot"))
		}
		return nil, loadErr(id, 1, fmt.Errorf("the session has no events"))
	}
	if verify && len(derived) > 0 {
		return nil, diverged(id, derived[0].Seq, nil, derived[0])
	}
	if core.Seq() != next-1 {
		return nil, loadErr(id, next, fmt.Errorf("replaying the inputs derives %d events, the log holds %d", core.Seq(), next-1))
	}
	f.Core, f.Head = core, next-1
	core.Use(nil)
	return f, nil
}

// inputOf decodes the input an input event records; an input/stale event
// names its input (kind and work), which is all the core needs to drop it
// again.
func inputOf(r Record) (vocab.Input, bool, error) {
	switch {
	case r.Kind == vocab.EventInputStale:
		var p vocab.StalePayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return vocab.Input{}, false, err
		}
		return vocab.Input{Kind: p.Input, Work: p.Work, At: r.At}, true, nil
	case strings.HasPrefix(string(r.Kind), vocab.InputEventPrefix):
		if r.V > SchemaVersion {
			return vocab.Input{}, false, fmt.Errorf("schema version %d is newer than %d", r.V, SchemaVersion)
		}
		p, err := vocab.DecodePayload(r.Kind, r.Payload)
		if err != nil {
			return vocab.Input{}, false, err
		}
		in, ok := p.(vocab.Input)
		if !ok {
			return vocab.Input{}, false, fmt.Errorf("%s carries no input", r.Kind)
		}
		return in, true, nil
	}
	return vocab.Input{}, false, nil
}

// compare reports whether the recorded r and the derived e differ.
func compare(r Record, e vocab.Event) error {
	if r.Seq != e.Seq || r.Kind != e.Kind || r.Turn != e.Turn || r.Step != e.Step || !r.At.Equal(e.At) {
		return fmt.Errorf("envelope differs")
	}
	var b []byte
	if e.Payload != nil {
		var err error
		if b, err = json.Marshal(e.Payload); err != nil {
			return err
		}
	}
	if !jsonEqual(r.Payload, b) {
		return fmt.Errorf("payload differs")
	}
	return nil
}

// jsonEqual compares two JSON texts by value.
func jsonEqual(a, b []byte) bool {
	if string(a) == string(b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return isNullJSON(a) && isNullJSON(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
}

func isNullJSON(b []byte) bool { return len(b) == 0 || string(b) == "null" }

// diverged reports the logged record r (nil when the log ended) against
// the derived event got.
func diverged(id vocab.ID, seq uint64, r *Record, got vocab.Event) error {
	d := &Divergence{Seq: seq, Got: got}
	var logged map[string]any
	if r != nil {
		d.Expected, _ = r.Event()
		var payload any
		_ = json.Unmarshal(r.Payload, &payload)
		logged = view(r.Seq, r.Kind, r.Turn, r.Step, r.At, payload)
	}
	var derived map[string]any
	if got.Kind != "" {
		p, _ := json.Marshal(got.Payload)
		var payload any
		_ = json.Unmarshal(p, &payload)
		derived = view(got.Seq, got.Kind, got.Turn, got.Step, got.At, payload)
	}
	d.Diff = cmp.Diff(logged, derived)
	return vocab.Errorf(vocab.CodeDiverged, "store: session %s: %w", id, d)
}

// view makes an event comparable field by field, its payload as JSON.
func view(seq uint64, kind vocab.EventKind, turn, step int, at time.Time, payload any) map[string]any {
	return map[string]any{"seq": seq, "kind": string(kind), "turn": turn, "step": step, "at": at.UTC().Format(time.RFC3339Nano), "payload": payload}
}

func loadErr(id vocab.ID, seq uint64, err error) error {
	if c := vocab.CodeOf(err); c == vocab.CodeLoadFailed || c == vocab.CodeSchema {
		return err
	}
	return vocab.Errorf(vocab.CodeLoadFailed, "store: session %s at event %d: %w", id, seq, err)
}
