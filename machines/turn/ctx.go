package turn

import (
	"fmt"
	"slices"
	"time"

	"github.com/loopchart/loopchart/machines/chart"
	"github.com/loopchart/loopchart/vocab"
)

// Config is fixed for the life of a turn.
type Config struct {
	Turn int `json:"turn"`
	// MaxSteps ends the turn with loop.max_steps_exceeded when that many
	// steps ran without new input; 0 (the default) means unlimited.
	MaxSteps int `json:"maxSteps,omitempty"`
	// Retry is the retry policy; the zero value means DefaultRetryPolicy.
	Retry RetryPolicy `json:"retry"`
	// AbortGrace is how long running tools get to settle after an abort; 0
	// means DefaultAbortGrace.
	AbortGrace time.Duration `json:"abortGrace,omitempty"`
}

func (c Config) withDefaults() Config {
	if c.Retry.MaxAttempts == 0 {
		c.Retry = DefaultRetryPolicy()
	}
	if c.AbortGrace == 0 {
		c.AbortGrace = DefaultAbortGrace
	}
	return c
}

// Ctx is the turn machine's context: everything a turn remembers, and so
// everything its snapshot holds.
type Ctx struct {
	Config Config `json:"config"`
	// Step is the number of the current (or last) step; steps start at 1.
	Step int `json:"step"`
	// Idle counts steps since the last new input, for MaxSteps.
	Idle int `json:"idle"`
	// Attempt is the 1-based attempt of the current model request.
	Attempt int `json:"attempt"`
	// Concluded is set when the last reply had no tool call: the model is
	// done unless new input keeps the turn alive.
	Concluded bool `json:"concluded,omitempty"`
	// MaxTokens is sticky: once a reply hits the output limit the turn
	// ends max-tokens, whatever later steps do.
	MaxTokens bool `json:"maxTokens,omitempty"`
	Paused    bool `json:"paused,omitempty"`
	// Stopped and StopReason are set when a tool or hook asked the turn to
	// stop, or when a reply cut off by the output limit had tool calls
	// (StopMaxTokens); the first reason wins and the turn ends at the next
	// drain.
	Stopped    bool   `json:"stopped,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	// Yielded is set when a tool result asked to yield: the turn ends
	// yielded at the next drain, before any stop.
	Yielded bool `json:"yielded,omitempty"`
	// Calls are the current batch's tool calls in the model's order; Results
	// holds their outcomes at the same index (nil while pending).
	Calls   []vocab.ToolCall    `json:"calls,omitempty"`
	Results []*vocab.ToolResult `json:"results,omitempty"`
	Started []bool              `json:"started,omitempty"`
	// Abort is the cause of an abort in progress.
	Abort *vocab.CancelCause `json:"abort,omitempty"`
	// Timer is the armed timer (retry wait or abort grace), TimerSeq its
	// counter.
	Timer    chart.Timer `json:"timer"`
	TimerSeq uint64      `json:"timerSeq"`
	// LastErr is the last model failure.
	LastErr *vocab.Error `json:"lastErr,omitempty"`
	// End is set when the turn reaches a final state.
	End *vocab.TurnEnd `json:"end,omitempty"`
	// LoopEnd is set when loop detection terminates the run: the turn
	// fails with it at the next drain (after the blocked batch's results
	// are written).
	LoopEnd *vocab.TurnEnd `json:"loopEnd,omitempty"`
	// LoopBlocks counts the batches loop detection blocked in this turn.
	LoopBlocks int `json:"loopBlocks,omitempty"`
}

// NewCtx returns the context of a new turn.
func NewCtx(cfg Config) Ctx { return Ctx{Config: cfg.withDefaults()} }

// Clone implements chart.Cloner.
func (c *Ctx) Clone() Ctx {
	d := *c
	d.Calls = slices.Clone(c.Calls)
	d.Started = slices.Clone(c.Started)
	d.Results = make([]*vocab.ToolResult, len(c.Results))
	for i, r := range c.Results {
		if r != nil {
			v := *r
			d.Results[i] = &v
		}
	}
	if c.Results == nil {
		d.Results = nil
	}
	return d
}

// Validate implements chart.Validator.
func (c *Ctx) Validate() error {
	if len(c.Results) != len(c.Calls) || len(c.Started) != len(c.Calls) {
		return fmt.Errorf("turn %d: %d calls, %d results, %d started flags", c.Config.Turn, len(c.Calls), len(c.Results), len(c.Started))
	}
	return nil
}

// index returns the position of call id in the batch, or -1.
func (c *Ctx) index(id string) int {
	for i, call := range c.Calls {
		if call.ID == id {
			return i
		}
	}
	return -1
}

// pending returns the number of calls without an outcome.
func (c *Ctx) pending() int {
	n := 0
	for _, r := range c.Results {
		if r == nil {
			n++
		}
	}
	return n
}

// Steps returns how many steps the turn ran.
func (c *Ctx) Steps() int { return c.Step }
