package engine

import (
	"github.com/loopchart/loopchart/vocab"
)

// runTool executes one tool call. The registry turns unknown tools, bad
// arguments, errors and panics into error results; a call cut off by its
// cancelled context reports tool.aborted. Progress reports reach the core
// as tool.update inputs; a tool that detaches (tools.Detach) is reported
// as tool.detached at once and goes on, its result coming later.
//
// The call's work context, its tools.RunCtx and its result are one
// allocation (toolCtx), and its work context is the Detacher: a call
// costs one more allocation, for its progress func.
func (e *Engine) runTool(wk *worker) {
	id := wk.w.ID
	progress := func(text string) {
		_ = e.post(&item{in: vocab.Input{Kind: vocab.InToolUpdate, At: e.opt.Clock.Now(), Work: id, Text: text}}, nil, nil)
	}
	tc := wk.tool
	ctx := tc.run.Init(wk.ctx, progress, wk.ctx)
	tc.res = e.opt.Tools.Execute(ctx, *wk.w.Call, nil) // progress rides in ctx
	e.report(wk, vocab.Input{Kind: vocab.InToolDone, Result: &tc.res})
}

// Detach implements tools.Detacher for the tool call running under c
// (tools.Detach calls it at most once successfully).
func (c *workCtx) Detach(ack string) bool {
	e := c.e
	return e.post(&item{in: vocab.Input{Kind: vocab.InToolDetached, At: e.opt.Clock.Now(), Work: c.id, Text: ack}}, nil, nil) == nil
}
