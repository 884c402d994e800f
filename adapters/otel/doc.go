// Package otelchart turns a loopchart session's events into OpenTelemetry
// spans and metrics, following the GenAI semantic conventions of
// go.opentelemetry.io/otel/semconv/v1.41.0 (the newest semconv package
// with gen_ai attributes).
//
// The package is named otelchart, not otel, so that it never shadows
// go.opentelemetry.io/otel (nor the usual oteltrace, otelmetric and
// sdktrace aliases) in the code that sets both up.
//
// # Use
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter),
//		sdktrace.WithIDGenerator(otelchart.IDGenerator(nil))) // reproducible ids
//	obs, err := otelchart.New(otelchart.Options{TracerProvider: tp, MeterProvider: mp})
//	go obs.ObserveService(ctx, svc) // = obs.Observe(ctx, svc.Events)
//
// Observe follows a Source, a function of the shape of
// (*agentsvc.Service).Events; a store read bound to a session is one too
// (store.Events(ctx, st, session, from)), so a session can be observed
// from another process, or after the fact. Nil providers fall back to
// the global ones (otel.GetTracerProvider, otel.GetMeterProvider).
//
// # From durable events only
//
// Every span and measurement comes from the session's events as its log
// holds them: the service publishes an event to Events only once its sink
// made it durable, and a store holds nothing else. Nothing is emitted from
// the session's own code paths, so nothing is emitted twice when that code
// runs again: not when a Temporal workflow replays its history (a workflow
// that runs a session must not call the observer from workflow code; an
// observer outside it follows the log), not when a session is folded back
// from its log after a crash. Span times are the events' logged times
// (trace.WithTimestamp), not the time the observer saw them.
//
// # The span tree
//
//	invoke_agent [INTERNAL]        a prompt: from its input/submit to its prompt/state end;
//	│                              a turn that runs no prompt (a steer, a notification,
//	│                              Continue) gets one of its own, from turn/start to turn/end
//	└─ turn [INTERNAL]             turn/start .. turn/end
//	   └─ step [INTERNAL]          step/start .. step/end
//	      ├─ chat {model} [CLIENT] one model request attempt: the turn machine entering
//	      │                        thinking .. the reply (input/model.done) or the failure
//	      │                        (input/model.failed); a retry is a second chat span
//	      └─ execute_tool {tool}   one tool call: tool/execution-start .. tool/execution-end
//	         [INTERNAL]            (a call that never ran: tool/call .. its tool/result)
//
// For example, the CLI demo (testdata/scripts/demo.json; see
// testdata/demo.tree for every attribute):
//
//	invoke_agent demo            0s..3.59s  completed
//	  turn                       0s..3.59s
//	    step                     0s..950ms
//	      chat claude-test       0s..950ms   finish tool-calls, 412/58 tokens
//	      execute_tool edit_file 950ms       (approved)
//	      execute_tool list_dir  950ms
//	      execute_tool read_file 950ms
//	    step                     950ms..2.9s event retry @1.35s (llm.server, delay 1s)
//	      chat claude-test       950ms..1.35s error.type=llm.server
//	      chat claude-test       2.35s..2.9s
//	      execute_tool grep      2.9s
//	    step                     2.9s..3.59s
//	      chat claude-test       2.9s..3.59s  finish stop, 702/44 tokens, 512 cached
//
// # Attributes
//
// invoke_agent: gen_ai.operation.name=invoke_agent, gen_ai.provider.name,
// gen_ai.conversation.id (the session id), gen_ai.request.model,
// gen_ai.agent.name (Options.AgentName), gen_ai.usage.input_tokens and
// output_tokens (summed over its chats), loopchart.prompt.id,
// loopchart.outcome (completed, failed, cancelled, blocked; for a turn
// without a prompt, how the turn ended), loopchart.cancel.cause, and
// error.type on failure.
//
// turn: loopchart.turn, loopchart.turn.steps, loopchart.outcome (the
// turn's end: completed, aborted, error, max-tokens, blocked,
// interrupted), loopchart.cancel.cause, error.type on failure. It
// carries no gen_ai.operation.name: GenAI backends count operations by it.
//
// step: loopchart.turn, loopchart.step, loopchart.step.attempts (model
// requests it made), loopchart.outcome (its finish reason).
//
// chat: gen_ai.operation.name=chat, gen_ai.provider.name,
// gen_ai.request.model (the last request/header's model),
// gen_ai.response.model and gen_ai.response.id (the reply's
// vocab.Response), gen_ai.response.finish_reasons (loopchart's finish
// reason, e.g. "tool-calls"), gen_ai.usage.input_tokens, output_tokens,
// cache_read.input_tokens and cache_creation.input_tokens (from the usage
// event; absent when the provider reported none),
// gen_ai.response.time_to_first_chunk (seconds from the request's start to
// its first input/model.parts, or to the reply when it came whole),
// loopchart.attempt, and error.type on failure, with
// loopchart.cancel.cause when a cancel cut it off.
//
// execute_tool: gen_ai.operation.name=execute_tool, gen_ai.tool.name,
// gen_ai.tool.call.id, gen_ai.tool.type=function, loopchart.tool.approval
// (the person's decision, when the call waited for one), error.type on an
// error result. Arguments and results are not recorded (they may hold
// anything a tool reads).
//
// gen_ai.provider.name is the provider the last reply named, mapped to the
// conventions' values ("anthropic"; "openai/deepseek" gives "deepseek",
// "openai/mistral" "mistral_ai", any other "openai/SERVER" SERVER), else
// Options.ProviderName, else "_OTHER". A request made before any reply
// named a provider starts with that fallback and gets the provider its own
// reply names.
//
// error.type is always a vocab error code: the request's code for a
// failed chat (llm.rate_limited, llm.server, ...), the retry's code for a
// reply that was retried (llm.empty_response), agent.cancelled for a
// request, turn or prompt cut off by a cancel or a crash (with
// loopchart.cancel.cause: user, hook(reason), interrupted, ...),
// run.timeout for a run that went past its timeout, the turn's code for a
// failed turn (loop.critical_repeat, loop.max_steps_exceeded, hook.failed,
// ...), the result's code for a failed call (tool.failed, tool.unknown,
// tool.denied, tool.aborted, ...). Status is Error with a description
// then (the provider's message, the cancel's cause; for a tool, its code).
//
// # Span events
//
// On the step: retry (llm/retry: the failed attempt, next and max
// attempts, the delay in seconds, error.type and the message), recovering
// (llm/recovering), loop.warning and loop.intervention (detector, level,
// count, tool, call id, whether it ended the run), history.replaced,
// hook.failed; error (agent/error) on the step or turn. On the turn:
// cancel (input/cancel, with its cause). With Options.TransitionEvents,
// every machine transition as a transition event (machine, instance, from,
// to, trigger, guard) on the call's span, the step or the turn. A span
// keeps at most Options.MaxSpanEvents events (128 by default); it counts
// the others in loopchart.span.events_dropped.
//
// # Metrics
//
// Attributes are bounded: operation, provider, model, tool name,
// error.type and outcome, never a session, prompt or call id.
//
//	gen_ai.client.operation.duration (s)  per chat attempt and per invoke_agent
//	gen_ai.client.token.usage ({token})   per chat, gen_ai.token.type input and output
//	loopchart.steps ({step})              outcome = finish reason
//	loopchart.step.duration (s)
//	loopchart.tool.calls ({call})         gen_ai.tool.name, outcome ok|error, error.type
//	loopchart.tool.duration (s)           execution time
//	loopchart.retries ({retry})           error.type
//
// # Ids
//
// A prompt's trace id is a hash of (session, the seq of its input/submit);
// a span's id a hash of (session, the seq of the event that opened it, its
// kind). The OpenTelemetry API cannot start a span with given ids, so the
// observer asks for them through the context it passes to Tracer.Start,
// and IDGenerator, installed in the TracerProvider, hands them to the SDK.
// The same log then gives the same ids, whoever observes it and however
// often: re-emitted spans are duplicates a backend can recognise. Without
// IDGenerator the ids are random.
//
// # Restarts and dropped streams
//
// An observer keeps a Cursor: the last event it handled, and where a new
// observer must start reading again to re-create the spans open there.
// Persist it and pass it as Options.From: the new observer reads from
// Cursor.Replay, folds the events up to Cursor.Seq without emitting
// anything (no span, no measurement), re-creates the spans still open
// there with their logged start times, attributes and events (the same
// ids, with IDGenerator), and goes on. Every span is emitted once: when it
// ends (spans still open when Observe returns are not ended; a later
// Observe, or an observer started from the Cursor, ends them).
//
// When the live stream ends with agentsvc.ErrDropped (the observer fell
// behind the service's window and the sink cannot read back), Observe
// reads the missing events from Options.Read (the store) and subscribes
// again from its cursor.
//
// One thing is left out: a tool call that went to the background ends its
// span when it detaches; its later completion emits nothing.
package otelchart
