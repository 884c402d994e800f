// Package scripted provides a vocab.Provider that plays a JSON script, so
// that every path of the loop machines (answers, tool calls, retries, empty
// replies, failures mid-stream, cancellation) can be driven
// deterministically, in tests and in the CLI's demo mode.
//
// # Playing a script
//
// Each call to [Provider.Stream] consumes the next step of the script, so a
// retried request consumes a step of its own. A step yields, in this order:
//
//  1. its text and thinking parts, one vocab.StreamPart delta each;
//  2. its tool calls, each whole, as vocab.StreamToolCall parts;
//  3. its usage, if any, as a vocab.StreamUsage part;
//  4. its finish reason, as a vocab.StreamFinish part.
//
// An "error" step yields only its error; a step with "error_after" yields
// its parts and tool calls and then the error instead of usage and finish.
// An "empty" step yields its usage, if any, and its finish reason: a reply
// with no content and no tool call. After an error the stream ends.
//
// Errors are *vocab.Error values. A "status" error is made by
// vocab.StatusError, so 408, 409, 429, 500, 502, 503, 504 and 529 are
// retryable and "retry_after" becomes RetryAfter; a "code" error carries that
// code, is retryable only when "retryable" is true, and also takes
// "retry_after". The message is the scripted one ("status N" by default for
// status errors), so a 503 "overloaded" reads "llm.server: overloaded".
//
// Delays ("delay" on a step, a part or a tool call) are waited on the
// clock.Clock given to [New]. With a clock.Fake, a test advances virtual time
// instead of sleeping; the provider's Sleep is a pending waiter that
// [clock.Fake.WaitForPending] sees.
//
// Cancellation: before it yields anything, and whenever a delay is cut
// short, the stream checks ctx. If ctx is done it yields a non-retryable
// *vocab.Error with code vocab.CodeCancelled whose Cause is
// context.Cause(ctx), and ends; so errors.Is(err, context.Canceled), or
// errors.As into a vocab.CancelCause, still see the original cause. The step
// stays consumed.
//
// Running past the last step yields a non-retryable *vocab.Error with code
// vocab.CodeBadInput and the message "script NAME: no step N left", where N
// counts calls from 1. A step whose "expect" does not match the request
// yields a non-retryable vocab.CodeBadInput error naming the step, such as
// `script demo: step 2: expect: tool "read_file" not offered (offered: [])`.
//
// [Provider.Calls] returns the requests received, and [Provider.Remaining]
// the number of steps left.
//
// # Script format
//
// A script is one JSON object. Unknown fields are errors at every level;
// "comment" fields are allowed on the script and on steps, and ignored.
//
//	{
//	  "name": "demo",
//	  "comment": "what this script is for",
//	  "steps": [
//	    {"parts": [{"thinking": "The user wants a greeting."},
//	               {"text": "Hello"},
//	               {"text": " world", "delay": "200ms"}],
//	     "usage": {"input": 12, "output": 5},
//	     "finish": "stop"},
//	    {"tool_calls": [{"id": "c1", "name": "read_file", "args": {"path": "a.txt"}}],
//	     "expect": {"last_user_contains": "a.txt", "tools": ["read_file"]}},
//	    {"error": {"status": 503, "message": "overloaded", "retry_after": "2s"}},
//	    {"error": {"code": "llm.syntax", "message": "bad json"}},
//	    {"empty": true},
//	    {"parts": [{"text": "partial"}], "error_after": {"status": 500}}
//	  ]
//	}
//
// The script's fields:
//
//	name       name used in run-time errors; defaults to the source name
//	comment    ignored
//	steps      one or more steps
//
// A step's fields; a step has content (parts and/or tool_calls), or an
// error, or "empty": true:
//
//	parts        text or thinking deltas: {"text": "..."} or {"thinking": "..."},
//	             each with an optional "delay" before it
//	tool_calls   whole tool calls: {"id": "c1", "name": "read_file",
//	             "args": {...}, "delay": "..."}; id and name are required and
//	             ids unique within the step; args, if given, is a JSON object
//	usage        {"input": N, "output": N, "cache_read": N, "cache_write": N}
//	finish       "stop", "tool-calls", "max-tokens", "error", "aborted" or
//	             "filtered"; defaults to "tool-calls" when the step has tool
//	             calls and to "stop" otherwise
//	error        the request fails at once: {"status": 503, "message": "...",
//	             "retry_after": "2s"} or {"code": "llm.syntax", "message":
//	             "...", "retryable": false, "retry_after": "..."}; exactly one
//	             of status or code; code must be a vocab code. Only delay,
//	             expect and comment may go with it
//	error_after  fails after the parts and tool calls, in place of usage and
//	             finish (so neither may be given); same shape as error
//	empty        true: no content; may have usage and finish
//	delay        wait before the step yields anything (time to first byte)
//	expect       checks on the request: {"last_user_contains": "...",
//	             "tools": ["read_file"]}: the last user message's text
//	             contains the string, and each named tool is offered
//	comment      ignored
//
// Durations are Go duration strings such as "250ms" or "2s" and may not be
// negative.
//
// # Errors in scripts
//
// [Load], [LoadFS] and [Parse] check the whole script before it plays. Their
// errors carry code vocab.CodeBadInput and name the file, the step and the
// part, tool call or field, numbered from 1:
//
//	script demo.json: step 3: unknown finish "halt" (want "stop", ...)
//	script demo.json: step 2: tool call 1: missing "id"
//	script demo.json: step 1: part 2: bad delay "fast" (want a duration ...)
//	script demo.json: step 4: unknown field "halt"
//	script demo.json: malformed JSON at line 7, column 3: invalid character ...
package scripted
