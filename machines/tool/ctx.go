package tool

import (
	"fmt"
	"slices"
	"time"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// DefaultAbortGrace is how long a started tool gets to settle after an abort
// before it is given up as aborted (seed-semantics §2.8, ABORT_GRACE_MS).
const DefaultAbortGrace = 2 * time.Second

// Config is fixed for the life of a tool call.
type Config struct {
	// AbortGrace is how long a running tool gets to settle after an abort;
	// 0 means DefaultAbortGrace.
	AbortGrace time.Duration `json:"abortGrace,omitempty"`
}

func (c Config) withDefaults() Config {
	if c.AbortGrace <= 0 {
		c.AbortGrace = DefaultAbortGrace
	}
	return c
}

// Approval is a question put to a person about a call. While the call waits
// for an answer it is kept in the context, and so in the snapshot: after a
// restore the adapter asks again and the answer still lands.
type Approval struct {
	Question string `json:"question"`
}

// Ctx is the tool machine's context: everything one call remembers, and so
// everything its snapshot holds.
type Ctx struct {
	Config Config `json:"config"`
	// Call is the call as it will run: the model's call, possibly rewritten
	// by the before-hook (its ID never changes).
	Call vocab.ToolCall `json:"call"`
	// Rewritten is set when the before-hook changed the call's name or
	// arguments.
	Rewritten bool `json:"rewritten,omitempty"`
	// Approval is the pending approval while the call awaits one.
	Approval *Approval `json:"approval,omitempty"`
	// Started is set once the tool began executing.
	Started bool `json:"started,omitempty"`
	// Detached is set when the tool acknowledged and went on in the
	// background; Ack is the result the turn was given for it then.
	Detached bool              `json:"detached,omitempty"`
	Ack      *vocab.ToolResult `json:"ack,omitempty"`
	// Result is the result so far: the denial, the tool's result, the
	// after-hook's result, and finally the one outcome.
	Result *vocab.ToolResult `json:"result,omitempty"`
	// Abort is the cause of an abort in progress or done.
	Abort *vocab.CancelCause `json:"abort,omitempty"`
	// Timer is the armed abort-grace timer, TimerSeq its counter.
	Timer    chart.Timer `json:"timer,omitzero"`
	TimerSeq uint64      `json:"timerSeq,omitempty"`
}

// NewCtx returns the context of a new call.
func NewCtx(call vocab.ToolCall, cfg Config) Ctx {
	return Ctx{Config: cfg.withDefaults(), Call: call}
}

// Clone implements chart.Cloner: the copy shares no memory with c.
func (c *Ctx) Clone() Ctx {
	d := *c
	d.Call.Args = slices.Clone(c.Call.Args)
	if c.Approval != nil {
		a := *c.Approval
		d.Approval = &a
	}
	if c.Abort != nil {
		a := *c.Abort
		d.Abort = &a
	}
	d.Ack = cloneResult(c.Ack)
	d.Result = cloneResult(c.Result)
	return d
}

func cloneResult(r *vocab.ToolResult) *vocab.ToolResult {
	if r == nil {
		return nil
	}
	v := *r
	if r.Delivery != nil {
		dl := *r.Delivery
		dl.Message.Parts = slices.Clone(dl.Message.Parts)
		v.Delivery = &dl
	}
	return &v
}

// Validate implements chart.Validator: it checks what a snapshot could get
// wrong without knowing the state.
func (c *Ctx) Validate() error {
	switch {
	case c.Config.AbortGrace < 0:
		return fmt.Errorf("call %q: negative abort grace %s", c.Call.ID, c.Config.AbortGrace)
	case c.Timer.Pending() && (c.Timer.Name != TimerAbortGrace || c.Timer.Seq > c.TimerSeq):
		return fmt.Errorf("call %q: timer %s#%d does not belong to this call (seq counter %d)", c.Call.ID, c.Timer.Name, c.Timer.Seq, c.TimerSeq)
	case c.Timer.Pending() && c.Abort == nil:
		return fmt.Errorf("call %q: abort-grace timer armed without an abort", c.Call.ID)
	case c.Result != nil && c.Result.CallID != c.Call.ID:
		return fmt.Errorf("call %q: result belongs to call %q", c.Call.ID, c.Result.CallID)
	}
	return nil
}
