package vocab

import "context"

// Tool is a function the model can call. Run must honour ctx (return soon
// after it is cancelled) and report progress through progress, which may be
// nil. An error return becomes an error result for the model; it never
// crashes the loop. The registry that runs tools (adapters/tools) also
// offers progress and detaching through ctx (tools.Progress,
// tools.Detach).
type Tool interface {
	Spec() ToolSpec
	Run(ctx context.Context, call ToolCall, progress func(string)) (ToolResult, error)
}
