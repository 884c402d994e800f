package otelchart

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopchart/loopchart/vocab"
)

// state is what the observer knows of its session between two events:
// the spans open and what they still need.
type state struct {
	prompts map[vocab.ID]*invocation // submitted prompts not yet ended
	pending *pendingTurn             // a turn/start whose turn span waits for the next event
	turn    *turnState
	step    *stepState
	chat    *chatState
	calls   map[string]*callState // the step's tool calls, by call id
	// openChanged says that the set of open invocations changed: the
	// cursor's Replay is computed again.
	openChanged bool
}

func newState() state {
	return state{prompts: map[vocab.ID]*invocation{}, calls: map[string]*callState{}}
}

// invocation is an invoke_agent span: a prompt's, from its submit to its
// end, or a turn's that heads no prompt (a steer, a notification, a
// Continue), from its turn/start to its turn/end.
type invocation struct {
	span    *span
	prompt  vocab.ID
	turnEnd *vocab.TurnEnd // how its turn ended
	usage   vocab.Usage
	model   string
	// model0 and provider0 were in force before the event that opened
	// it (the cursor's Model and Provider when it is the oldest open).
	model0, provider0 string
}

// pendingTurn is a turn/start not yet bound: the next event says whether
// the turn runs a prompt (prompt/state running) or heads none.
type pendingTurn struct {
	seq               uint64
	at                time.Time
	no                int
	model0, provider0 string
}

type turnState struct {
	span  *span
	inv   *invocation
	no    int
	cause *vocab.CancelCause // the cancel the turn got
}

type stepState struct {
	span     *span
	no       int
	start    time.Time
	attempts int
}

// chatState is a model request attempt: a chat span.
type chatState struct {
	span       *span
	start      time.Time
	model      string // the request model
	firstChunk bool
	// closing: the reply (model.done) arrived; the span ends at endAt
	// once the events that describe the reply (usage, the assistant
	// message) were seen.
	closing  bool
	endAt    time.Time
	errType  string
	usage    vocab.Usage
	response string // the response model
}

// callState is a tool call the model asked for, until its result.
type callState struct {
	seq      uint64
	at       time.Time
	id, name string
	span     *span // from its execution start to its end
	ended    bool
	started  time.Time
	approval string
}

// replay returns the cursor's Replay, Model and Provider: the oldest open
// invocation (or pending turn) and what was in force before it opened;
// when nothing is open, 0 and what is in force now.
func (o *Observer) replay() (uint64, string, string) {
	var seq uint64
	model, provider := o.model, o.provider
	consider := func(s uint64, m, p string) {
		if seq == 0 || s < seq {
			seq, model, provider = s, m, p
		}
	}
	for _, inv := range o.st.prompts {
		consider(inv.span.seq, inv.model0, inv.provider0)
	}
	if t := o.st.turn; t != nil && t.inv.prompt == "" {
		consider(t.inv.span.seq, t.inv.model0, t.inv.provider0)
	}
	if p := o.st.pending; p != nil {
		consider(p.seq, p.model0, p.provider0)
	}
	return seq, model, provider
}

// materializeOpen makes live every span open when folding ends.
func (o *Observer) materializeOpen() {
	var open []*span
	for _, inv := range o.st.prompts {
		open = append(open, inv.span)
	}
	if t := o.st.turn; t != nil {
		open = append(open, t.inv.span, t.span)
	}
	if s := o.st.step; s != nil {
		open = append(open, s.span)
	}
	if c := o.st.chat; c != nil {
		open = append(open, c.span)
	}
	for _, c := range o.st.calls {
		if c.span != nil {
			open = append(open, c.span)
		}
	}
	slices.SortFunc(open, func(a, b *span) int { return cmp.Compare(a.seq, b.seq) })
	for _, s := range open {
		if !s.ended {
			o.makeLive(s)
		}
	}
}

// trailing reports whether ev may follow a reply (model.done) and still
// describe it: the chat span stays open for it.
func trailing(k vocab.EventKind) bool {
	switch k {
	case vocab.EventUsage, vocab.EventMessageStart, vocab.EventMessageUpdate, vocab.EventMessageEnd,
		vocab.EventAssistant, vocab.EventTransition, vocab.EventRetry, vocab.EventRecovering,
		vocab.EventStatus, vocab.EventAgentStart:
		return true
	}
	return false
}

// handle folds one event into the state, emitting what it ends unless
// the observer folds.
func (o *Observer) handle(ev vocab.Event) {
	st := &o.st
	if st.pending != nil && ev.Kind != vocab.EventTurnStart {
		if o.bindTurn(ev) {
			return
		}
	}
	if c := st.chat; c != nil && c.closing && !trailing(ev.Kind) {
		o.endChat()
	}
	switch p := ev.Payload.(type) {
	case vocab.Input:
		o.input(ev, p)
	case vocab.TransitionPayload:
		o.transition(ev, p)
	case vocab.HeaderPayload:
		o.model = p.Model
		if c := st.chat; c != nil && c.model == "" && p.Model != "" {
			c.model = p.Model
			c.span.rename(o.spanName("chat ", p.Model))
			c.span.set(semconv.GenAIRequestModel(p.Model))
		}
		if t := st.turn; t != nil && t.inv.model == "" && p.Model != "" {
			t.inv.model = p.Model
			t.inv.span.set(semconv.GenAIRequestModel(p.Model))
		}
	case vocab.PromptPayload:
		o.promptState(ev, p)
	case vocab.TurnEndPayload:
		o.turnEnd(ev, p)
	case vocab.StepEndPayload:
		o.stepEnd(ev, p)
	case vocab.UsagePayload:
		if c := st.chat; c != nil {
			c.usage = p.Usage
		}
		if t := st.turn; t != nil {
			t.inv.usage = t.inv.usage.Add(p.Usage)
		}
	case vocab.MessagePayload:
		if ev.Kind == vocab.EventAssistant && st.chat != nil && st.chat.closing {
			o.response(p.Message.Response)
			o.endChat()
		}
	case vocab.RetryPayload:
		if c := st.chat; c != nil && c.closing && c.errType == "" {
			c.errType = string(p.Code)
			c.span.fail(string(p.Code), p.Message)
		}
		if s := st.step; s != nil {
			s.span.event(o.maxEvs, "retry", ev.At, keyAttempt.Int(p.FailedAttempt), keyNextAttempt.Int(p.NextAttempt),
				keyMaxAttempts.Int(p.MaxAttempts), keyDelay.Float64(seconds(p.Delay)),
				semconv.ErrorTypeKey.String(string(p.Code)), keyMessage.String(p.Message))
		}
		if !o.folding {
			o.inst.retries.Add(bg, 1, o.options(metricAttrs{provider: o.provider, model: o.model, errType: string(p.Code)}))
		}
	case vocab.ErrorPayload:
		switch ev.Kind {
		case vocab.EventRecovering:
			if c := st.chat; c != nil && c.closing && c.errType == "" {
				c.errType = string(p.Code)
				c.span.fail(string(p.Code), p.Message)
			}
			o.innermost().event(o.maxEvs, "recovering", ev.At, semconv.ErrorTypeKey.String(string(p.Code)), keyMessage.String(p.Message))
		default:
			o.innermost().event(o.maxEvs, "error", ev.At, semconv.ErrorTypeKey.String(string(p.Code)), keyMessage.String(p.Message))
		}
	case vocab.ToolPayload:
		o.tool(ev, p)
	case vocab.ApprovalPayload:
		if c := st.calls[p.Call.ID]; c != nil && p.State != vocab.ApprovalRequested {
			c.approval = string(p.Decision)
			if p.State == vocab.ApprovalAborted {
				c.approval = string(p.State)
			}
		}
	case vocab.LoopPayload:
		name := "loop.warning"
		if ev.Kind == vocab.EventLoopIntervention {
			name = "loop.intervention"
		}
		attrs := []attribute.KeyValue{keyDetector.String(p.Detector), keyLevel.String(p.Level), keyCount.Int(p.Count),
			semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.CallID), keyTerminate.Bool(p.Terminate)}
		if p.Code != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(string(p.Code)))
		}
		o.stepOrTurn().event(o.maxEvs, name, ev.At, attrs...)
	case vocab.HookPayload:
		o.innermost().event(o.maxEvs, "hook.failed", ev.At, keyHook.String(string(p.Hook)),
			semconv.ErrorTypeKey.String(string(p.Code)), keyMessage.String(p.Message))
	case vocab.HistoryPayload:
		o.stepOrTurn().event(o.maxEvs, "history.replaced", ev.At, keyBy.String(p.By))
	case nil:
		switch ev.Kind {
		case vocab.EventTurnStart:
			st.pending = &pendingTurn{seq: ev.Seq, at: ev.At, no: ev.Turn, model0: o.model, provider0: o.provider}
			st.openChanged = true
		case vocab.EventStepStart:
			o.stepStart(ev)
		}
	}
}

// input handles an input/ event.
func (o *Observer) input(ev vocab.Event, in vocab.Input) {
	st := &o.st
	switch in.Kind {
	case vocab.InSubmit:
		id := in.ID
		if id == "" && in.Message != nil {
			id = in.Message.ID
		}
		inv := &invocation{prompt: id, model: o.model, model0: o.model, provider0: o.provider}
		inv.span = o.open(o.invokeName(), trace.SpanKindInternal, nil,
			wanted{trace: traceIDOf(o.session, ev.Seq), span: spanIDOf(o.session, ev.Seq, roleInvoke)},
			ev.Seq, ev.At, o.invokeAttrs(id)...)
		st.prompts[id] = inv
		st.openChanged = true
	case vocab.InCancel:
		if t := st.turn; t != nil && in.Cause != nil {
			t.cause = in.Cause
			t.span.event(o.maxEvs, "cancel", ev.At, keyCause.String(in.Cause.String()))
		}
	case vocab.InModelParts:
		if c := st.chat; c != nil && !c.firstChunk {
			c.firstChunk = true
			c.span.set(semconv.GenAIResponseTimeToFirstChunk(seconds(ev.At.Sub(c.start))))
		}
	case vocab.InModelDone:
		c := st.chat
		if c == nil {
			return
		}
		if !c.firstChunk { // the reply came whole: it is its first chunk
			c.firstChunk = true
			c.span.set(semconv.GenAIResponseTimeToFirstChunk(seconds(ev.At.Sub(c.start))))
		}
		c.closing, c.endAt = true, ev.At
		if in.Reply != nil {
			o.response(in.Reply.Response)
		}
		if in.Finish != "" {
			c.span.set(semconv.GenAIResponseFinishReasons(string(in.Finish)))
		}
		if in.Usage != nil {
			c.usage = *in.Usage
		}
	case vocab.InModelFailed:
		c := st.chat
		if c == nil {
			return
		}
		c.closing, c.endAt = true, ev.At
		if in.Err != nil {
			c.errType = string(in.Err.Code)
			c.span.fail(string(in.Err.Code), in.Err.Message)
		}
		o.endChat()
	}
}

// response records who wrote the open request's reply (nil: the
// provider said nothing).
func (o *Observer) response(r *vocab.Response) {
	c := o.st.chat
	if r == nil || c == nil {
		return
	}
	if r.Provider != "" {
		o.provider = providerName(r.Provider)
	}
	c.response = r.Model
	c.span.set(semconv.GenAIProviderNameKey.String(o.provider))
	if r.Model != "" {
		c.span.set(semconv.GenAIResponseModel(r.Model))
	}
	if r.ID != "" {
		c.span.set(semconv.GenAIResponseID(r.ID))
	}
}

// transition handles a machine transition: a turn entering thinking
// starts a model request attempt.
func (o *Observer) transition(ev vocab.Event, p vocab.TransitionPayload) {
	st := &o.st
	if p.Machine == "turn" && p.To == "thinking" && st.step != nil {
		if st.chat != nil {
			o.endChat()
		}
		st.step.attempts++
		st.chat = &chatState{start: ev.At, model: o.model}
		ids := wanted{trace: st.step.span.ids.trace, span: spanIDOf(o.session, ev.Seq, roleChat)}
		attempt := keyAttempt.Int(st.step.attempts)
		if o.model == "" {
			st.chat.span = o.open("chat", trace.SpanKindClient, st.step.span, ids, ev.Seq, ev.At,
				opChat, semconv.GenAIProviderNameKey.String(o.provider), attempt)
		} else {
			st.chat.span = o.open(o.spanName("chat ", o.model), trace.SpanKindClient, st.step.span, ids, ev.Seq, ev.At,
				opChat, semconv.GenAIProviderNameKey.String(o.provider), attempt, semconv.GenAIRequestModel(o.model))
		}
	}
	if !o.opt.TransitionEvents {
		return
	}
	var target *span
	switch p.Machine {
	case "tool":
		if c := st.calls[p.Instance]; c != nil && c.span != nil {
			target = c.span
		} else {
			target = o.stepOrTurn()
		}
	case "turn":
		target = o.stepOrTurn()
	default:
		if st.turn != nil {
			target = st.turn.span
		}
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, keyMachine.String(p.Machine), keyFrom.String(p.From), keyTo.String(p.To), keyTrigger.String(p.Trigger))
	if p.Instance != "" {
		attrs = append(attrs, keyInstance.String(p.Instance))
	}
	if p.Guard != "" {
		attrs = append(attrs, keyGuard.String(p.Guard))
	}
	target.event(o.maxEvs, "transition", ev.At, attrs...)
}

// bindTurn opens the pending turn's span on the event after its
// turn/start: under the prompt it runs, or under an invocation of its
// own. It reports whether ev was the prompt/state that bound it.
func (o *Observer) bindTurn(ev vocab.Event) bool {
	st := &o.st
	pt := st.pending
	st.pending = nil
	st.openChanged = true
	var inv *invocation
	consumed := false
	if p, ok := ev.Payload.(vocab.PromptPayload); ok && p.State == "running" {
		consumed = true
		if inv = st.prompts[p.Prompt]; inv == nil { // submitted before the stream began
			inv = &invocation{prompt: p.Prompt, model: pt.model0, model0: pt.model0, provider0: pt.provider0}
			inv.span = o.open(o.invokeName(), trace.SpanKindInternal, nil,
				wanted{trace: traceIDOf(o.session, pt.seq), span: spanIDOf(o.session, pt.seq, roleInvoke)},
				pt.seq, pt.at, o.invokeAttrs(p.Prompt)...)
			st.prompts[p.Prompt] = inv
		}
	} else {
		inv = &invocation{model: pt.model0, model0: pt.model0, provider0: pt.provider0}
		inv.span = o.open(o.invokeName(), trace.SpanKindInternal, nil,
			wanted{trace: traceIDOf(o.session, pt.seq), span: spanIDOf(o.session, pt.seq, roleInvoke)},
			pt.seq, pt.at, o.invokeAttrs("")...)
	}
	st.turn = &turnState{inv: inv, no: pt.no}
	st.turn.span = o.open("turn", trace.SpanKindInternal, inv.span,
		wanted{trace: inv.span.ids.trace, span: spanIDOf(o.session, pt.seq, roleTurn)}, pt.seq, pt.at, keyTurn.Int(pt.no))
	return consumed
}

// spanName returns prefix+name, made once per name (a session has a
// handful of models and tools).
func (o *Observer) spanName(prefix, name string) string {
	key := [2]string{prefix, name}
	if n, ok := o.names[key]; ok {
		return n
	}
	n := prefix + name
	if len(o.names) < 1024 {
		o.names[key] = n
	}
	return n
}

func (o *Observer) invokeName() string {
	if o.opt.AgentName != "" {
		return "invoke_agent " + o.opt.AgentName
	}
	return "invoke_agent"
}

func (o *Observer) invokeAttrs(prompt vocab.ID) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, opInvoke, semconv.GenAIProviderNameKey.String(o.provider), semconv.GenAIConversationID(string(o.session)))
	if o.model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(o.model))
	}
	if o.opt.AgentName != "" {
		attrs = append(attrs, semconv.GenAIAgentName(o.opt.AgentName))
	}
	if prompt != "" {
		attrs = append(attrs, keyPrompt.String(string(prompt)))
	}
	return attrs
}

func (o *Observer) stepStart(ev vocab.Event) {
	st := &o.st
	if st.turn == nil {
		return
	}
	o.endStep(ev.At, "")
	st.step = &stepState{no: ev.Step, start: ev.At}
	st.step.span = o.open("step", trace.SpanKindInternal, st.turn.span,
		wanted{trace: st.turn.span.ids.trace, span: spanIDOf(o.session, ev.Seq, roleStep)}, ev.Seq, ev.At,
		keyTurn.Int(st.turn.no), keyStep.Int(ev.Step))
}

func (o *Observer) stepEnd(ev vocab.Event, p vocab.StepEndPayload) {
	o.endStep(ev.At, p.Finish)
}

// endStep ends the open step (its chat and calls first) at at, with
// finish as its outcome.
func (o *Observer) endStep(at time.Time, finish vocab.FinishReason) {
	st := &o.st
	s := st.step
	if s == nil {
		return
	}
	if c := st.chat; c != nil {
		if !c.closing {
			o.abandonChat(at)
		}
		o.endChat()
	}
	o.endCalls(at)
	st.step = nil
	if finish == "" {
		finish = vocab.FinishInterrupted
	}
	s.span.set(keyOutcome.String(string(finish)), keyAttempts.Int(s.attempts))
	s.span.end(at)
	o.release(s.span)
	if !o.folding {
		opt := o.options(metricAttrs{provider: o.provider, model: o.model, outcome: string(finish)})
		o.inst.steps.Add(bg, 1, opt)
		o.inst.stepDur.Record(bg, seconds(at.Sub(s.start)), opt)
	}
}

// abandonChat closes a request attempt that got no reply: the step ended
// under it (a cancel, a crash).
func (o *Observer) abandonChat(at time.Time) {
	c := o.st.chat
	c.closing, c.endAt = true, at
	if c.errType == "" {
		desc := "the request ended without a reply"
		if t := o.st.turn; t != nil && t.cause != nil {
			c.span.set(keyCause.String(t.cause.String()))
			desc = t.cause.Error()
		}
		c.errType = string(vocab.CodeCancelled)
		c.span.fail(c.errType, desc)
	}
}

// endChat ends the open request attempt at its end time.
func (o *Observer) endChat() {
	st := &o.st
	c := st.chat
	if c == nil {
		return
	}
	st.chat = nil
	u := c.usage
	if u.InputTokens != 0 || u.OutputTokens != 0 {
		c.span.set(semconv.GenAIUsageInputTokens(u.InputTokens), semconv.GenAIUsageOutputTokens(u.OutputTokens))
	}
	if u.CacheReadTokens != 0 {
		c.span.set(semconv.GenAIUsageCacheReadInputTokens(u.CacheReadTokens))
	}
	if u.CacheWriteTokens != 0 {
		c.span.set(semconv.GenAIUsageCacheCreationInputTokens(u.CacheWriteTokens))
	}
	c.span.end(c.endAt)
	o.release(c.span)
	if o.folding {
		return
	}
	a := metricAttrs{provider: o.provider, model: c.model, response: c.response, errType: c.errType}
	o.inst.opDuration.Inst().Record(bg, seconds(c.endAt.Sub(c.start)), o.genAIOptions(opChatName, "", a))
	if u.InputTokens != 0 || u.OutputTokens != 0 {
		a.errType = ""
		o.inst.tokens.Inst().Record(bg, int64(u.InputTokens), o.genAIOptions(opChatName, "input", a))
		o.inst.tokens.Inst().Record(bg, int64(u.OutputTokens), o.genAIOptions(opChatName, "output", a))
	}
}

// tool handles the tool call events.
func (o *Observer) tool(ev vocab.Event, p vocab.ToolPayload) {
	st := &o.st
	switch ev.Kind {
	case vocab.EventToolCall:
		st.calls[p.Call.ID] = &callState{seq: ev.Seq, at: ev.At, id: p.Call.ID, name: p.Call.Name}
	case vocab.EventToolExecutionStart:
		c := st.calls[p.Call.ID]
		if c == nil || c.span != nil || c.ended {
			return
		}
		c.started = ev.At
		c.span = o.openTool(c, ev.At)
	case vocab.EventToolExecutionEnd:
		if p.Background {
			return // the span ended when the call went to the background
		}
		if c := st.calls[p.Call.ID]; c != nil {
			o.endTool(c, p.Result, ev.At)
		}
	case vocab.EventToolResult:
		if c := st.calls[p.Call.ID]; c != nil {
			o.endTool(c, p.Result, ev.At)
			delete(st.calls, p.Call.ID)
		}
	}
}

func (o *Observer) openTool(c *callState, at time.Time) *span {
	parent := o.stepOrTurn()
	if parent == nil {
		return nil
	}
	return o.open(o.spanName("execute_tool ", c.name), trace.SpanKindInternal, parent,
		wanted{trace: parent.ids.trace, span: spanIDOf(o.session, c.seq, roleTool)}, c.seq, at,
		opTool, semconv.GenAIToolName(c.name), semconv.GenAIToolCallID(c.id), toolTypeFn)
}

// endTool ends a call's span with its result: a call that never ran gets
// a span from its tool/call to its result.
func (o *Observer) endTool(c *callState, res *vocab.ToolResult, at time.Time) {
	if c.ended {
		return
	}
	if c.span == nil {
		if c.span = o.openTool(c, c.at); c.span == nil {
			return
		}
	}
	errType, outcome := "", "ok"
	if res != nil && res.IsError {
		errType, outcome = string(res.Code), "error"
		if errType == "" {
			errType = string(vocab.CodeToolFailed)
		}
		c.span.fail(errType, errType)
	}
	if c.approval != "" {
		c.span.set(keyApproval.String(c.approval))
	}
	c.span.end(at)
	o.release(c.span)
	c.span, c.ended = nil, true
	if !o.folding {
		var d time.Duration
		if !c.started.IsZero() {
			d = at.Sub(c.started)
		}
		opt := o.options(metricAttrs{tool: c.name, errType: errType, outcome: outcome})
		o.inst.toolCalls.Add(bg, 1, opt)
		o.inst.toolDur.Record(bg, seconds(d), opt)
	}
}

// endCalls ends the spans of the calls still open (a step that ended
// under them).
func (o *Observer) endCalls(at time.Time) {
	st := &o.st
	if len(st.calls) == 0 {
		return
	}
	calls := make([]*callState, 0, len(st.calls))
	for _, c := range st.calls {
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b *callState) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range calls {
		if c.span != nil {
			res := &vocab.ToolResult{IsError: true, Code: vocab.CodeToolAborted}
			o.endTool(c, res, at)
		}
	}
	clear(st.calls)
}

func (o *Observer) turnEnd(ev vocab.Event, p vocab.TurnEndPayload) {
	st := &o.st
	t := st.turn
	if t == nil {
		return
	}
	o.endStep(ev.At, "")
	st.turn = nil
	st.openChanged = true
	end := p.Reason
	t.span.set(keyOutcome.String(string(end.Kind)), keySteps.Int(p.Steps))
	if cause := causeOf(end, t.cause); cause != nil {
		t.span.set(keyCause.String(cause.String()))
	}
	if errType, desc := turnError(end); errType != "" {
		t.span.fail(errType, desc)
	}
	t.span.end(ev.At)
	o.release(t.span)
	inv := t.inv
	inv.turnEnd = &end
	if inv.prompt == "" {
		o.endInvocation(inv, ev.At, string(end.Kind))
	}
}

// causeOf returns why a turn that ended aborted or interrupted was
// cancelled (got: the cancel it got, if its end does not say); nil for
// other ends.
func causeOf(end vocab.TurnEnd, got *vocab.CancelCause) *vocab.CancelCause {
	switch end.Kind {
	case vocab.EndAborted:
		if end.Cause != nil {
			return end.Cause
		}
		return got
	case vocab.EndInterrupted:
		return &vocab.CancelCause{Kind: vocab.CancelInterrupted}
	}
	return nil
}

// turnError returns the error.type and description of a turn's end; ""
// when it did not fail.
func turnError(end vocab.TurnEnd) (string, string) {
	switch end.Kind {
	case vocab.EndError:
		return string(end.Code), end.Message
	case vocab.EndAborted:
		if end.Cause != nil && end.Cause.Kind == vocab.CancelTimeout {
			return string(vocab.CodeRunTimeout), "the run went past its wall-clock timeout"
		}
		desc := "cancelled"
		if end.Cause != nil {
			desc = end.Cause.Error()
		}
		return string(vocab.CodeCancelled), desc
	case vocab.EndInterrupted:
		return string(vocab.CodeCancelled), vocab.CancelCause{Kind: vocab.CancelInterrupted}.Error()
	}
	return "", ""
}

func (o *Observer) promptState(ev vocab.Event, p vocab.PromptPayload) {
	st := &o.st
	if p.State == "running" {
		return // bound by bindTurn
	}
	inv := st.prompts[p.Prompt]
	if inv == nil {
		return
	}
	delete(st.prompts, p.Prompt)
	st.openChanged = true
	if t := st.turn; t != nil && t.inv == inv { // the prompt ended before its turn did
		o.endStep(ev.At, "")
		t.span.end(ev.At)
		o.release(t.span)
		st.turn = nil
	}
	o.endInvocation(inv, ev.At, p.State)
}

// endInvocation ends an invoke_agent span with outcome.
func (o *Observer) endInvocation(inv *invocation, at time.Time, outcome string) {
	s := inv.span
	s.set(keyOutcome.String(outcome), semconv.GenAIProviderNameKey.String(o.provider))
	if u := inv.usage; u.InputTokens != 0 || u.OutputTokens != 0 {
		s.set(semconv.GenAIUsageInputTokens(u.InputTokens), semconv.GenAIUsageOutputTokens(u.OutputTokens))
	}
	errType := ""
	switch {
	case inv.turnEnd != nil:
		var desc string
		if errType, desc = turnError(*inv.turnEnd); errType != "" {
			if c := causeOf(*inv.turnEnd, nil); c != nil {
				s.set(keyCause.String(c.String()))
			}
			s.fail(errType, desc)
		}
	case outcome == string(vocab.PromptCancelled) || outcome == string(vocab.PromptFailed):
		errType = string(vocab.CodeCancelled)
		s.fail(errType, "the prompt ended "+outcome+" before it ran")
	}
	s.end(at)
	if !o.folding {
		a := metricAttrs{provider: o.provider, model: inv.model, errType: errType}
		o.inst.opDuration.Inst().Record(bg, seconds(at.Sub(s.start)), o.genAIOptions(opInvokeName, "", a))
	}
	o.release(s)
	inv.span = nil
}

// innermost is the innermost open span: the step, the turn or nil.
func (o *Observer) innermost() *span { return o.stepOrTurn() }

// stepOrTurn is the open step's span, else the open turn's, else nil.
func (o *Observer) stepOrTurn() *span {
	if s := o.st.step; s != nil {
		return s.span
	}
	if t := o.st.turn; t != nil {
		return t.span
	}
	return nil
}

// providerName maps a vocab.Response provider ("anthropic",
// "openai/deepseek") to a gen_ai.provider.name value: the server of an
// OpenAI-compatible adapter when it names one the conventions know (or
// any other server), else the adapter.
func providerName(p string) string {
	adapter, server, ok := strings.Cut(p, "/")
	if !ok || server == "" {
		return adapter
	}
	switch server {
	case "mistral":
		return "mistral_ai"
	case "xai", "grok":
		return "x_ai"
	}
	return server
}
