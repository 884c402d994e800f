package temporal

import "github.com/loopchart/loopchart/vocab"

// Error codes of this adapter (stable; match them with errors.Is against
// Code.Err() or read them with vocab.CodeOf).
const (
	// CodeContentMissing: a content reference names nothing in the store.
	CodeContentMissing vocab.Code = "temporal.content_missing"
	// CodeEventsCompacted: the events asked for are older than the window
	// the workflow keeps; read them from the export.
	CodeEventsCompacted vocab.Code = "temporal.events_compacted"
	// CodeUnsupported: the input cannot run on Temporal (a maintenance job
	// is code of the caller's process).
	CodeUnsupported vocab.Code = "temporal.unsupported"
	// CodeToolInterrupted: a tool call's worker was lost (or the call
	// overran its timeout) before its result was recorded; the call is not
	// run again unless its tool is idempotent.
	CodeToolInterrupted vocab.Code = "tool.interrupted"
	// CodeLoading: a query reached a continued run while it loads its
	// snapshot; the Client asks again.
	CodeLoading vocab.Code = "temporal.loading"
	// CodeNoPrompt: no prompt with that id was submitted to the session.
	CodeNoPrompt vocab.Code = "temporal.no_prompt"
)
