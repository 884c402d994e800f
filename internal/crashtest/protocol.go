package crashtest

import (
	"encoding/json"
	"io"
	"sync"
)

// The kinds of Line (Line.T).
const (
	// LineOpen: agentsvc.Open of session S returned; Seq is its head then
	// (recovery events included), Queued the ids of the prompts queued
	// for a turn of their own and Prompts those not yet ended (the
	// recovered core's inbox and prompt list, as its snapshot shows them).
	LineOpen = "open"
	// LinePend: the child is about to call Store.Append of Events to S
	// (the batch may be committed from now on, and is not acknowledged).
	LinePend = "pend"
	// LineOK: the Append of the batch of S starting at Seq (N events)
	// returned nil: the batch is durable.
	LineOK = "ok"
	// LineFail: that Append returned an error (Msg).
	LineFail = "fail"
	// LineEvent: the Events stream of S delivered the event Seq (the
	// session publishes an event only once its batch was appended).
	LineEvent = "ev"
	// LineSubmit: Submit of prompt ID to S returned (the prompt is
	// recorded); Seq is the session's sequence number after it.
	LineSubmit = "sub"
	// LineDone: prompt ID of S ended as R; Seq as for LineSubmit.
	LineDone = "done"
	// LineFailpoint: the failpoint Name was hit for the N-th time and the
	// child kills itself.
	LineFailpoint = "fp"
	// LineExit: the child finished its work and exits 0.
	LineExit = "exit"
	// LineError: the child failed (Msg) and exits 1.
	LineError = "err"
)

// Line is one report of the child to the test, a JSON object per line.
type Line struct {
	T      string     `json:"t"`
	S      string     `json:"s,omitempty"`
	Seq    uint64     `json:"q,omitempty"`
	N      int        `json:"n,omitempty"`
	Kind   string     `json:"k,omitempty"`
	At     int64      `json:"a,omitempty"`
	ID     string     `json:"id,omitempty"`
	R      string     `json:"r,omitempty"`
	Name   string     `json:"name,omitempty"`
	Msg    string     `json:"msg,omitempty"`
	Events []EventKey `json:"evs,omitempty"`
	// Queued and Prompts: see LineOpen.
	Queued  []string `json:"queued,omitempty"`
	Prompts []string `json:"prompts,omitempty"`
}

// EventKey identifies a stored event well enough to tell it from another
// event written at the same sequence number: its kind and time (unix
// nanoseconds).
type EventKey struct {
	Seq  uint64 `json:"q"`
	Kind string `json:"k"`
	At   int64  `json:"a"`
}

// Reporter writes Lines, each with one write call (so a line the child
// was killed in the middle of is incomplete, without its newline, and is
// ignored by the reader). Safe for concurrent use.
type Reporter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewReporter reports to w.
func NewReporter(w io.Writer) *Reporter { return &Reporter{w: w} }

// Report writes l; it returns the write's error.
func (r *Reporter) Report(l Line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err = r.w.Write(b)
	return err
}
