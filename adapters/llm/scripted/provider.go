package scripted

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/vocab"
)

// Provider is a vocab.Provider that plays a [Script]. It is safe for
// concurrent use.
type Provider struct {
	script *Script
	clock  clock.Clock

	mu    sync.Mutex
	calls []vocab.Request
}

var _ vocab.Provider = (*Provider)(nil)

// New returns a Provider that plays s from its first step. Delays wait on c;
// a nil c means [clock.Real]. s must not be nil.
func New(s *Script, c clock.Clock) *Provider {
	if s == nil {
		panic("scripted: New with nil script")
	}
	if c == nil {
		c = clock.Real()
	}
	return &Provider{script: s, clock: c}
}

// Remaining returns the number of steps not yet consumed.
func (p *Provider) Remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(len(p.script.steps)-len(p.calls), 0)
}

// Calls returns copies of the requests passed to Stream, in call order,
// including those that ran past the end of the script.
func (p *Provider) Calls() []vocab.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]vocab.Request, len(p.calls))
	for i, r := range p.calls {
		out[i] = cloneRequest(r)
	}
	return out
}

// Stream implements vocab.Provider. The call itself consumes the next step
// and records req, whether or not the returned sequence is ever ranged
// over; ranging over it plays that step. See the package documentation for
// what a step yields and for the errors.
func (p *Provider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	p.mu.Lock()
	n := len(p.calls) // 0-based index of the step this call consumes
	p.calls = append(p.calls, cloneRequest(req))
	p.mu.Unlock()

	pl := &player{p: p, ctx: ctx, num: n + 1}
	if n >= len(p.script.steps) {
		err := vocab.Errorf(vocab.CodeBadInput, "script %s: no step %d left", p.script.name, n+1)
		return func(yield func(vocab.StreamPart, error) bool) { pl.fail(yield, err) }
	}
	st := &p.script.steps[n]
	if st.expect != nil {
		if msg := st.expect.check(req); msg != "" {
			err := vocab.Errorf(vocab.CodeBadInput, "script %s: step %d: expect: %s", p.script.name, n+1, msg)
			return func(yield func(vocab.StreamPart, error) bool) { pl.fail(yield, err) }
		}
	}
	return func(yield func(vocab.StreamPart, error) bool) { pl.play(st, yield) }
}

// player plays one step for one Stream call.
type player struct {
	p   *Provider
	ctx context.Context
	num int // 1-based step number
}

// wait sleeps d on the provider's clock and then checks ctx. It returns a
// cancellation error if ctx is done.
func (pl *player) wait(d time.Duration) error {
	if d > 0 {
		if err := pl.p.clock.Sleep(pl.ctx, d); err != nil {
			return pl.cancelled()
		}
	}
	if pl.ctx.Err() != nil {
		return pl.cancelled()
	}
	return nil
}

func (pl *player) cancelled() error {
	return vocab.Errorf(vocab.CodeCancelled, "script %s: step %d: %w", pl.p.script.name, pl.num, context.Cause(pl.ctx))
}

// fail yields err, or a cancellation error if ctx is done.
func (pl *player) fail(yield func(vocab.StreamPart, error) bool, err error) {
	if cerr := pl.wait(0); cerr != nil {
		err = cerr
	}
	yield(vocab.StreamPart{}, err)
}

func (pl *player) play(st *step, yield func(vocab.StreamPart, error) bool) {
	// emit yields sp after delay d; it reports whether to go on.
	emit := func(d time.Duration, sp vocab.StreamPart) bool {
		if err := pl.wait(d); err != nil {
			yield(vocab.StreamPart{}, err)
			return false
		}
		return yield(sp, nil)
	}
	if err := pl.wait(st.delay); err != nil {
		yield(vocab.StreamPart{}, err)
		return
	}
	if st.err != nil {
		pl.fail(yield, st.err.build())
		return
	}
	for _, pt := range st.parts {
		if !emit(pt.delay, vocab.StreamPart{Kind: pt.kind, Text: pt.text}) {
			return
		}
	}
	for _, c := range st.calls {
		tc := c.call
		tc.Args = bytes.Clone(tc.Args)
		if !emit(c.delay, vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &tc}) {
			return
		}
	}
	if st.errAfter != nil {
		pl.fail(yield, st.errAfter.build())
		return
	}
	if st.usage != nil {
		u := *st.usage
		if !emit(0, vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &u}) {
			return
		}
	}
	emit(0, vocab.StreamPart{Kind: vocab.StreamFinish, Finish: st.finish})
}

// check returns why req does not meet e, or "" if it does.
func (e *expect) check(req vocab.Request) string {
	if e.lastUserContains != nil {
		want := *e.lastUserContains
		i := len(req.Messages) - 1
		for i >= 0 && req.Messages[i].Role != vocab.RoleUser {
			i--
		}
		if i < 0 {
			return fmt.Sprintf("no user message (want one containing %q)", want)
		}
		if got := req.Messages[i].Text(); !strings.Contains(got, want) {
			return fmt.Sprintf("last user message %q does not contain %q", abbrev(got), want)
		}
	}
	var offered []string
	for _, t := range req.Tools {
		offered = append(offered, t.Name)
	}
	for _, name := range e.tools {
		if !slices.Contains(offered, name) {
			return fmt.Sprintf("tool %q not offered (offered: %q)", name, offered)
		}
	}
	return ""
}

// abbrev shortens s for an error message.
func abbrev(s string) string {
	const n = 80
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// cloneRequest copies req's slices (messages, their parts, tools) so that
// later changes by the caller do not show in Calls.
func cloneRequest(req vocab.Request) vocab.Request {
	req.Messages = slices.Clone(req.Messages)
	for i := range req.Messages {
		req.Messages[i].Parts = slices.Clone(req.Messages[i].Parts)
	}
	req.Tools = slices.Clone(req.Tools)
	return req
}
