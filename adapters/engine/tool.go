package engine

import (
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// runTool executes one tool call. The registry turns unknown tools, bad
// arguments, errors and panics into error results; a call cut off by its
// cancelled context reports tool.aborted. Progress reports reach the core
// as tool.update inputs; a tool that detaches (tools.Detach) is reported
// as tool.detached at once and goes on, its result coming later.
func (e *Engine) runTool(wk *worker) {
	id := wk.w.ID
	progress := func(text string) {
		_ = e.post(&item{in: vocab.Input{Kind: vocab.InToolUpdate, At: e.opt.Clock.Now(), Work: id, Text: text}}, nil, nil)
	}
	detach := func(ack string) bool { // tools.Detach calls it at most once
		return e.post(&item{in: vocab.Input{Kind: vocab.InToolDetached, At: e.opt.Clock.Now(), Work: id, Text: ack}}, nil, nil) == nil
	}
	ctx := tools.WithRun(&wk.ctx, progress, detach)
	res := e.opt.Tools.Execute(ctx, *wk.w.Call, nil) // progress rides in ctx
	e.report(wk, vocab.Input{Kind: vocab.InToolDone, Result: &res})
}
