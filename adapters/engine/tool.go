package engine

import (
	"github.com/loopchart/loopchart/vocab"
)

// runTool executes one tool call. The registry turns unknown tools, bad
// arguments, errors and panics into error results; a call cut off by its
// cancelled context reports tool.aborted. Progress reports reach the core
// as tool.update inputs.
func (e *Engine) runTool(wk *worker) {
	id := wk.w.ID
	progress := func(text string) {
		_ = e.post(item{in: vocab.Input{Kind: vocab.InToolUpdate, At: e.opt.Clock.Now(), Work: id, Text: text}}, nil)
	}
	res := e.opt.Tools.Execute(wk.ctx, *wk.w.Call, progress)
	e.report(wk, vocab.Input{Kind: vocab.InToolDone, Result: &res})
}
