// Package anthropic is a vocab.Provider for the Anthropic Messages API,
// streaming, built on the official Go SDK
// (github.com/anthropics/anthropic-sdk-go/v2).
//
// # Client
//
// [New] checks its [Options] and builds an SDK client that takes nothing
// from the environment but what New reads itself (the API key from
// [EnvAPIKey] when Options.APIKey is empty): no ANTHROPIC_BASE_URL, auth
// token, profile or custom headers. The SDK sends the key as a bearer
// token (Authorization). The client never retries (the turn
// machine owns retries and their backoff) and records no OpenTelemetry
// spans, so it sends no trace-context headers.
//
// # Requests
//
// A vocab.Request becomes one streaming Messages request:
//
//   - the system prompt goes into the system parameter (system-role
//     messages of the history too);
//   - consecutive messages of the same wire role merge into one; tool
//     results are user content and come first in their user message, so
//     a steer after them follows them in the same message;
//   - an assistant message keeps its blocks in order: thinking that this
//     adapter wrote and the API signed (or redacted), non-empty text, and
//     tool_use blocks, whose input is the call's arguments when they are a
//     JSON object and {} otherwise; thinking that is unsigned, cut off or
//     another provider's is dropped (the API would refuse it);
//   - a tool message becomes a tool_result block with the result's model
//     text and is_error when the call failed;
//   - tools carry their JSON Schema as input_schema (an object without
//     properties when they have none);
//   - max_tokens is Request.MaxTokens when positive, else Options.MaxTokens
//     or DefaultMaxTokens; temperature is sent when set; extended thinking
//     is on when Options.ThinkingBudget is.
//
// # Streams
//
// The SDK sends the request and reports a failed one; the adapter reads
// the response's events itself, through the SDK's event-stream decoder,
// and assembles the reply (not with the SDK's accumulator, which would
// replace malformed tool arguments and build text in quadratic time). It
// yields
// text and thinking deltas as they arrive; at a thinking block's end a
// thinking part with Provider "anthropic" and the block's signature; a
// redacted_thinking block as one thinking part with Provider "anthropic"
// and its data in Redacted; each tool call whole at its block's end, its
// arguments the concatenated partial JSON exactly as the model wrote it
// (raw when it is not JSON, {} when empty) and its id made safe and
// unique; usage at message_start and again at message_delta, each report
// replacing the one before, InputTokens counting cached tokens too; and
// a finish part at message_stop: end_turn and stop_sequence give
// FinishStop, tool_use FinishToolCalls, max_tokens FinishMaxTokens,
// pause_turn FinishPause, refusal FinishRefusal and
// model_context_window_exceeded FinishContextOverflow.
//
// # Errors
//
// Every error is a *vocab.Error, classified by the API's error type first
// and the HTTP status second: rate limits and overload (429, 529,
// overloaded_error, also as an error event inside a stream) are
// llm.rate_limited and retryable, with the server's Retry-After; server
// errors are retryable; billing and credit errors are
// llm.quota_exhausted; "prompt is too long" and 413 are
// llm.context_overflow; 401 and 403 llm.auth; 404 llm.model_not_found;
// other 400s llm.request_rejected. A broken connection, or a stream that
// ends before message_stop, is a retryable llm.transport error; an
// event that is not JSON is llm.syntax; a cancelled context gives
// agent.cancelled. Messages are redacted of the
// API key and of URLs' queries, and no error wraps the SDK's error (which
// holds the request).
package anthropic
