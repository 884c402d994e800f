// Package openai is a vocab.Provider for OpenAI's chat completions API and
// the servers that speak it: DeepSeek, Moonshot (Kimi), vLLM, Ollama,
// llama.cpp's server and Mistral. Replies are streamed.
//
// It is built on the official SDK (github.com/openai/openai-go/v3) without
// its environment defaults: [New] reads nothing from the environment but
// the API key of a hosted API ([EnvAPIKey] for OpenAI's, the row's
// ServerRow.KeyEnv for the others), and only when the base URL is that
// API, so a key never goes to another server; the SDK never retries (the turn machine owns retries,
// with the Retry-After this package reads). The SDK builds and sends the
// request and reports HTTP errors; its SSE decoder reads the stream, whose
// chunks this package decodes itself: the SDK's chunk type lacks the
// fields other servers add (reasoning, usage inside a choice), and a
// field of an unexpected type is skipped rather than fatal.
//
// # What a reply yields
//
// Text deltas arrive as vocab.StreamText parts and reasoning deltas
// (reasoning_content, or reasoning for Ollama and newer vLLM) as
// vocab.StreamThinking parts, as the server sends them. A reasoning block
// is closed by a thinking part whose Provider is [Provider.Name] (no
// signature: these servers sign nothing) before text or a tool call
// follows, or at the end; a reply cut off leaves it open, and request
// builders drop it. A refusal is streamed as text.
//
// Each tool call is one vocab.StreamToolCall part, emitted when it is
// complete: when the next call starts or the stream ends. A new call
// starts when the id changes or the index does, so servers that send
// parallel calls all at index 0 do not glue them together; calls keep the
// model's order. Arguments are kept as the model wrote them, JSON or not
// (the tool layer reports bad arguments to the model); ids are made safe
// and unique (wire.IDs), and a call without one gets one.
//
// Then come one vocab.StreamUsage part (when the server reported usage:
// InputTokens is the prompt's tokens, cached ones included;
// CacheReadTokens the cache hits) and one vocab.StreamFinish part. Finish
// reasons: stop → stop (tool-calls when the reply called tools),
// tool_calls and function_call → tool-calls, length → max-tokens,
// content_filter → filtered, a streamed refusal → refusal, a
// context-window finish (model_length, model_context_window_exceeded) →
// context-overflow. An empty reply finishes normally: the turn machine
// judges it. A stream that ends without a finish reason was cut off: a
// retryable llm.transport error.
//
// # Errors
//
// Every error is a *vocab.Error. Provider errors are classified by
// wire.Classify, by the provider's error type and code first and the HTTP
// status second, with the Retry-After the server asked for
// (retry-after-ms, seconds or an HTTP date, capped at wire.MaxRetryAfter);
// an error event inside a stream has no status. A message that names a
// row's context overflow is llm.context_overflow whatever its status.
// Failures below HTTP are retryable llm.transport errors; a cancelled
// context gives agent.cancelled whose cause is the context's cause. The
// SDK's error is never kept: it carries the request with its
// Authorization header. Messages are redacted of the API key and of URL
// queries.
//
// # Servers
//
// Options.Server names a row of the behaviour table ([Servers]); when it
// is empty the base URL's host picks one, else "openai":
//
//	row       max tokens field       include_usage  reasoning echoed back      ids      usage and cache hits
//	openai    max_completion_tokens  yes            never (hidden reasoning)   as is    usage chunk (choices: []); prompt_tokens_details.cached_tokens
//	deepseek  max_tokens             yes            tool turns; never for      as is    usage chunk; prompt_cache_hit_tokens (and cached_tokens)
//	                                                deepseek-reasoner (400)
//	moonshot  max_tokens             yes            tool turns (Kimi thinking  as is    usage inside the last chunk's choice; usage.cached_tokens
//	                                                400s without it)
//	vllm      max_tokens             yes            never                      as is    usage chunk; prompt_tokens_details.cached_tokens when enabled
//	ollama    max_tokens             yes            never                      as is    usage chunk; no cache report
//	llamacpp  max_tokens             yes            never                      as is    usage in the last chunk; prompt_tokens_details.cached_tokens
//	mistral   max_tokens             no (refused)   never                      9 alnum  usage in the last chunk
//
// "Tool turns": the reasoning this provider wrote is sent back as
// reasoning_content on the assistant messages between two user messages
// when one of them called a tool (DeepSeek's thinking mode and Kimi
// answer 400 without it, in every later request); an assistant message
// with tool calls whose reasoning is missing (written by another
// provider, or cut off) gets an empty reasoning_content. Elsewhere
// reasoning is not sent. The reader accepts every usage form of every
// row. Context-overflow messages per row:
//
//	openai    "maximum context length", "input tokens exceed the configured limit" (code context_length_exceeded)
//	deepseek  "maximum context length", "reduce the length of the messages"
//	moonshot  "exceeded model token limit", "model max length exceeded"
//	vllm      "maximum context length", "longer than the maximum model length", "reduce the length of the input messages"
//	ollama    "exceeds maximum context length", "exceeds the context length"
//	llamacpp  "exceeds the available context size" (type exceed_context_size_error)
//	mistral   "maximum context length"
//
// # The request
//
// vocab.Request.System becomes a system message; user messages become
// user text; assistant messages their text and tool calls (arguments as
// the model wrote them, "{}" when empty); tool messages a tool message
// with the result's ModelText. Tools are function tools with their JSON
// Schema (an object without properties when they have none). The request
// streams (stream=true) and asks for usage (stream_options.include_usage)
// where the row allows it. Fields the SDK lacks (reasoning_content) are
// sent with its extra-fields mechanism.
package openai
