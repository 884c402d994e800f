package temporal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// chunkSize bounds one piece of content a workflow moves through the
// content store (a Temporal payload may not exceed 2 MB).
// (256 KiB leaves room for the encoding under the SDK's 512 KiB warning.)
const chunkSize = 256 << 10

// pageRefs is how many message references one transcript page holds.
const pageRefs = 256

// SessionWorkflow runs one session: it drives the session core exactly as
// the in-process lane does (Step, Ready, Advance), with Temporal's history
// as the durable log. Inputs arrive as updates (validated by the core
// before they are accepted) and one control signal; Ready's work becomes
// activities and workflow timers; results and the events are read by
// queries. It ends when the session is closed, and continues as new at a
// boundary with no work in flight once its history grows long.
func SessionWorkflow(ctx workflow.Context, p Params) (Summary, error) {
	if err := p.Options.Validate(); err != nil {
		return Summary{}, temporal.NewNonRetryableApplicationError(err.Error(), string(vocab.CodeOf(err)), nil)
	}
	if v := workflow.GetVersion(ctx, VersionChange, CoreVersion, CoreVersion); v != CoreVersion {
		return Summary{}, temporal.NewNonRetryableApplicationError("unknown core version", string(CodeUnsupported), nil)
	}
	w := &runner{ctx: ctx, opt: p.Options.withDefaults(), running: map[uint64]*running{}, prompts: map[vocab.ID]*PromptState{},
		stored: map[Ref]bool{}}
	w.sig = workflow.GetSignalChannel(ctx, SignalControl)
	// Handlers first: an update that reaches a continued run while it
	// loads its snapshot waits for the core instead of being refused as
	// unknown.
	if err := w.handlers(); err != nil {
		return Summary{}, err
	}
	if err := w.start(p); err != nil {
		return Summary{}, err
	}
	return w.loop()
}

// runner is one run of a session workflow.
type runner struct {
	ctx  workflow.Context
	opt  Options
	core *session.Core
	sig  workflow.ReceiveChannel
	runs int
	// start is the history length when the run began.
	startLen int

	// queue holds inputs received and not yet stepped, in arrival order.
	queue []*queued
	// running is the outstanding work by id.
	running map[uint64]*running
	// prompts are the submitted prompts and their outcomes.
	prompts map[vocab.ID]*PromptState
	order   []vocab.ID
	// window is the latest events.
	window []vocab.Event
	// stored is the content this run put in the store.
	stored map[Ref]bool
	// export is the events waiting to be exported, and exporting whether
	// an export runs.
	export    []vocab.Event
	exporting bool
	slots     []vocab.HookName
	controls  int
	// fatal is set when the run cannot go on.
	fatal error
}

// queued is an input waiting for its step; an update handler waits for
// done and answers with err.
type queued struct {
	in   vocab.Input
	done bool
	err  error
	seq  uint64
}

// running is one piece of outstanding work.
type running struct {
	work   session.Work
	cancel workflow.CancelFunc
	// dropped is set once the core gave the work up (a cancelled model
	// request, hook or timer): its outcome is not reported.
	dropped bool
}

// start builds the core: a new session from its config, or the previous
// run's snapshot.
func (w *runner) start(p Params) error {
	w.startLen = workflow.GetInfo(w.ctx).GetCurrentHistoryLength()
	m := session.NewMachines()
	if p.Carry == nil {
		cfg, err := session.ConfigOf(vocab.Input{Kind: vocab.InOpen, Config: p.Config})
		if err != nil {
			return badInput(err)
		}
		core, err := session.New(cfg, m)
		if err != nil {
			return badInput(err)
		}
		w.core, w.runs, w.slots = core, 1, slices.Clone(p.Slots)
		if err := core.Step(vocab.Input{Kind: vocab.InOpen, At: workflow.Now(w.ctx), Config: p.Config}); err != nil {
			return badInput(err)
		}
		if len(p.Slots) > 0 {
			if err := core.Step(vocab.Input{Kind: vocab.InHooks, At: workflow.Now(w.ctx), Slots: p.Slots}); err != nil {
				return badInput(err)
			}
		}
		return nil
	}
	c := p.Carry
	for i := range c.Prompts {
		ps := c.Prompts[i]
		w.prompts[ps.ID] = &ps
		w.order = append(w.order, ps.ID)
	}
	data, err := w.load(c.Snapshot)
	if err != nil {
		return err
	}
	core, err := session.Restore(data, m)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("restore: "+err.Error(), string(vocab.CodeOf(err)), nil)
	}
	w.core, w.runs, w.slots = core, c.Runs+1, c.Slots
	if len(c.Window) > 0 {
		data, err := w.load(c.Window)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &w.window); err != nil {
			return temporal.NewNonRetryableApplicationError("event window: "+err.Error(), string(vocab.CodeBadSnapshot), nil)
		}
	}
	for _, in := range c.Inbox {
		w.queue = append(w.queue, &queued{in: in})
	}
	return nil
}

func badInput(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), string(vocab.CodeOf(err)), nil)
}

// handlers registers the updates and queries.
func (w *runner) handlers() error {
	msgUpdate := func(name string, kind vocab.InputKind) error {
		return workflow.SetUpdateHandlerWithOptions(w.ctx, name,
			func(ctx workflow.Context, msg vocab.Message) (Ack, error) {
				msg.ID = w.updateID(ctx, msg.ID)
				return w.await(ctx, vocab.Input{Kind: kind, At: workflow.Now(ctx), ID: msg.ID, Message: &msg})
			},
			workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, msg vocab.Message) error {
				msg.ID = w.updateID(ctx, msg.ID)
				return w.validate(vocab.Input{Kind: kind, At: workflow.Now(ctx), ID: msg.ID, Message: &msg})
			}})
	}
	for _, u := range []struct {
		name string
		kind vocab.InputKind
	}{{UpdateSubmit, vocab.InSubmit}, {UpdateSteer, vocab.InSteer}, {UpdateInject, vocab.InInject}, {UpdateNotify, vocab.InNotify}} {
		if err := msgUpdate(u.name, u.kind); err != nil {
			return err
		}
	}
	withdraw := func(ctx workflow.Context, wd Withdrawal) vocab.Input {
		return vocab.Input{Kind: vocab.InWithdraw, At: workflow.Now(ctx), ID: w.updateID(ctx, wd.ID), Target: wd.Target}
	}
	if err := workflow.SetUpdateHandlerWithOptions(w.ctx, UpdateWithdraw,
		func(ctx workflow.Context, wd Withdrawal) (Ack, error) { return w.await(ctx, withdraw(ctx, wd)) },
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, wd Withdrawal) error { return w.validate(withdraw(ctx, wd)) }}); err != nil {
		return err
	}
	approve := func(ctx workflow.Context, a Approval) vocab.Input {
		return vocab.Input{Kind: vocab.InApprove, At: workflow.Now(ctx), ID: w.updateID(ctx, a.ID), Approval: &a.Approval}
	}
	if err := workflow.SetUpdateHandlerWithOptions(w.ctx, UpdateApprove,
		func(ctx workflow.Context, a Approval) (Ack, error) { return w.await(ctx, approve(ctx, a)) },
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, a Approval) error { return w.validate(approve(ctx, a)) }}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(w.ctx, QueryStatus, w.status); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(w.ctx, QueryEvents, w.events); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(w.ctx, QueryPrompt, w.prompt); err != nil {
		return err
	}
	return workflow.SetQueryHandler(w.ctx, QueryHistory, w.history)
}

// updateID is an input's id: the one it carries, or else the update's.
func (w *runner) updateID(ctx workflow.Context, id vocab.ID) vocab.ID {
	if id != "" {
		return id
	}
	if info := workflow.GetCurrentUpdateInfo(ctx); info != nil {
		return vocab.ID(info.ID)
	}
	return ""
}

// validate is an update's validator: the core's own check, plus the
// inputs received and not yet stepped (an id may be used once). A
// rejection touches no history.
func (w *runner) validate(in vocab.Input) error {
	if err := w.check(in); err != nil {
		ve := vocab.AsError(err)
		return temporal.NewApplicationError(ve.Error(), string(ve.Code), ve)
	}
	return nil
}

func (w *runner) check(in vocab.Input) error {
	if w.fatal != nil {
		return w.fatal
	}
	if in.ID == "" {
		return vocab.Errorf(vocab.CodeBadInput, "%s: no id", in.Kind)
	}
	for _, q := range w.queue {
		if q.in.ID == in.ID {
			return vocab.Errorf(vocab.CodeDuplicateID, "%s: id %s is already queued", in.Kind, in.ID)
		}
	}
	if w.core == nil {
		// The run is still loading its snapshot: the core judges the
		// input when it steps it (a refusal then fails the update).
		return nil
	}
	return w.core.Validate(in)
}

// loading is the error of a query asked while the run loads its snapshot.
func loading() error {
	return vocab.Errorf(CodeLoading, "the session's run is loading its snapshot; ask again")
}

// await queues in behind the signals received so far, and waits until the
// core stepped it: the update completes once its input is recorded (or
// refused), not when a prompt ends.
func (w *runner) await(ctx workflow.Context, in vocab.Input) (Ack, error) {
	if err := workflow.Await(ctx, func() bool { return w.core != nil || w.fatal != nil }); err != nil {
		return Ack{}, err
	}
	w.drainSignals()
	q := &queued{in: in}
	w.queue = append(w.queue, q)
	if err := workflow.Await(ctx, func() bool { return q.done }); err != nil {
		return Ack{}, err
	}
	if q.err != nil {
		return Ack{}, temporal.NewApplicationError(q.err.Error(), string(vocab.CodeOf(q.err)), vocab.AsError(q.err))
	}
	return Ack{ID: in.ID, Seq: q.seq}, nil
}

// drainSignals moves the control signals received so far into the queue.
func (w *runner) drainSignals() {
	for {
		var c Control
		if !w.sig.ReceiveAsync(&c) {
			return
		}
		in := vocab.Input{Kind: c.Kind, At: workflow.Now(w.ctx), ID: c.ID, Cause: c.Cause, KeepInbox: c.KeepInbox}
		switch c.Kind {
		case vocab.InCancel, vocab.InPause, vocab.InContinue, vocab.InClose:
		default:
			workflow.GetLogger(w.ctx).Warn("loopchart: control signal of an unknown kind dropped", "kind", c.Kind)
			continue
		}
		if in.ID == "" {
			w.controls++
			in.ID = vocab.ID(fmt.Sprintf("%s/control/%d", workflow.GetInfo(w.ctx).WorkflowExecution.RunID, w.controls))
		}
		if in.Kind == vocab.InCancel && in.Cause == nil {
			in.Cause = &vocab.CancelCause{Kind: vocab.CancelUser}
		}
		w.queue = append(w.queue, &queued{in: in})
	}
}

// loop steps what arrives and carries out the core's Ready until the
// session is closed or the run continues as new.
func (w *runner) loop() (Summary, error) {
	for {
		w.drainSignals()
		batch := w.queue
		w.queue = nil
		for _, q := range batch {
			q.err = w.core.Step(q.in)
			q.done = true
			if q.err != nil && q.in.Work == 0 && q.in.ID == "" {
				workflow.GetLogger(w.ctx).Warn("loopchart: input refused", "input", q.in.String(), "err", q.err)
			}
			if q.err == nil {
				q.seq = w.core.Seq()
				if q.in.Kind == vocab.InSubmit {
					w.track(q.in.ID)
				}
			}
		}
		if rd, ok := w.core.Ready(); ok {
			if err := w.carryOut(rd); err != nil {
				return Summary{}, err
			}
			closed := w.core.Closed()
			w.core.Advance(rd)
			if closed {
				return w.finish()
			}
		}
		if w.fatal != nil {
			return Summary{}, w.fatal
		}
		if len(w.queue) > 0 || w.sig.Len() > 0 {
			continue
		}
		if w.shouldContinue() {
			return Summary{}, w.continueAsNew()
		}
		if err := workflow.Await(w.ctx, func() bool {
			return len(w.queue) > 0 || w.sig.Len() > 0 || w.fatal != nil || w.exportDue()
		}); err != nil {
			return Summary{}, err
		}
		w.exportNext()
	}
}

// track records a submitted prompt.
func (w *runner) track(id vocab.ID) {
	if _, ok := w.prompts[id]; ok {
		return
	}
	w.prompts[id] = &PromptState{ID: id}
	w.order = append(w.order, id)
}

// carryOut handles one Ready: events first, then work in order, then
// results.
func (w *runner) carryOut(rd session.Ready) error {
	if len(rd.Events) > 0 {
		evs := slices.Clone(rd.Events)
		w.window = append(w.window, evs...)
		if over := len(w.window) - w.opt.EventWindow; over > 0 {
			w.window = slices.Delete(w.window, 0, over)
		}
		if w.opt.Export {
			w.export = append(w.export, evs...)
			w.exportNext()
		}
	}
	for _, wk := range rd.Work {
		if wk.Op == session.Cancel {
			w.cancelWork(wk)
			continue
		}
		if err := w.startWork(wk); err != nil {
			return err
		}
	}
	for _, r := range rd.Results {
		if r.Kind == session.PromptEnded && r.Prompt != nil {
			ps := w.prompts[r.Input]
			if ps == nil {
				w.track(r.Input)
				ps = w.prompts[r.Input]
			}
			res := *r.Prompt
			ps.Ended, ps.Result = true, &res
		}
	}
	return nil
}

// activity options per kind of work.
func (w *runner) activityCtx(ctx workflow.Context, kind session.WorkKind, call *vocab.ToolCall) workflow.Context {
	o := workflow.ActivityOptions{
		HeartbeatTimeout: w.opt.HeartbeatTimeout,
		// The activities return the work's own failures as non-retryable
		// errors (the core judges them: the turn machine retries a model
		// request): what Temporal retries is a lost worker (a timeout) or
		// a panic.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: int32(w.opt.ActivityAttempts)},
	}
	switch kind {
	case session.WorkModel:
		o.StartToCloseTimeout = w.opt.ModelTimeout
	case session.WorkTool:
		o.StartToCloseTimeout = w.opt.ToolTimeout
		o.WaitForCancellation = true // a cancelled call's result still counts
		if call == nil || !w.idempotent(call.Name) {
			o.RetryPolicy.MaximumAttempts = 1 // at most once
		}
	case session.WorkHook:
		o.StartToCloseTimeout = w.opt.HookTimeout
		o.HeartbeatTimeout = 0
	}
	return workflow.WithActivityOptions(ctx, o)
}

func (w *runner) idempotent(name string) bool {
	for _, t := range w.core.Config().Tools {
		if t.Name == name {
			return t.Idempotent
		}
	}
	return false
}

// startWork starts one piece of work.
func (w *runner) startWork(wk session.Work) error {
	switch wk.Kind {
	case session.WorkTimer:
		w.startTimer(wk)
		return nil
	case session.WorkStop:
		w.startStop(wk)
		return nil
	case session.WorkMaintenance:
		// Refused by the validator; a snapshot from an in-process session
		// could still hold one: end it.
		w.report(&running{work: wk}, vocab.Input{Kind: vocab.InMaintenanceDone})
		return nil
	case session.WorkSlot:
		// A workflow has no global lane (session.Config.Lane is off); a
		// snapshot from a Host's session could still ask: grant it.
		w.report(&running{work: wk}, vocab.Input{Kind: vocab.InSlotGranted})
		return nil
	}
	ctx, cancel := workflow.WithCancel(w.ctx)
	r := &running{work: wk, cancel: cancel}
	w.running[wk.ID] = r
	switch wk.Kind {
	case session.WorkModel:
		req := *wk.Request
		refs, err := w.put(req.Messages)
		if err != nil {
			return err
		}
		req.Messages = nil
		f := workflow.ExecuteActivity(w.activityCtx(ctx, wk.Kind, nil), ActivityModel, ModelArgs{Session: w.core.Session(), Work: wk.ID, Request: req, Messages: refs})
		workflow.Go(w.ctx, func(gctx workflow.Context) {
			var res ModelResult
			err := f.Get(gctx, &res)
			w.report(r, w.modelInput(wk, res, err))
		})
	case session.WorkTool:
		call := *wk.Call
		f := workflow.ExecuteActivity(w.activityCtx(ctx, wk.Kind, &call), ActivityTool, ToolArgs{Session: w.core.Session(), Work: wk.ID, Call: call})
		workflow.Go(w.ctx, func(gctx workflow.Context) {
			var res vocab.ToolResult
			err := f.Get(gctx, &res)
			w.report(r, vocab.Input{Kind: vocab.InToolDone, Result: toolResult(call, res, err)})
		})
	case session.WorkHook:
		args := HookArgs{Session: w.core.Session(), Work: wk.ID, Hook: wk.Hook, Info: wk.Info, Messages: wk.Messages, Prompt: wk.Prompt,
			Err: wk.Err, Attempt: wk.Attempt, Call: wk.Call, Result: wk.Result, Loop: wk.Loop}
		if wk.History.Len() > 0 {
			refs, err := w.put(wk.History.Messages())
			if err != nil {
				return err
			}
			args.History = refs
		}
		f := workflow.ExecuteActivity(w.activityCtx(ctx, wk.Kind, nil), ActivityHook, args)
		workflow.Go(w.ctx, func(gctx workflow.Context) {
			var v vocab.HookVerdict
			if err := f.Get(gctx, &v); err != nil {
				v = vocab.HookVerdict{Err: activityError(err, vocab.CodeHook)}
			}
			w.report(r, vocab.Input{Kind: vocab.InHookDone, Hook: &v})
		})
	default:
		delete(w.running, wk.ID)
		cancel()
		workflow.GetLogger(w.ctx).Error("loopchart: work of an unknown kind", "kind", wk.Kind)
	}
	return nil
}

// modelInput turns a model activity's outcome into the core's input.
func (w *runner) modelInput(wk session.Work, res ModelResult, err error) vocab.Input {
	if err == nil {
		return vocab.Input{Kind: vocab.InModelDone, Reply: res.Reply, Finish: res.Finish, Usage: res.Usage}
	}
	in := vocab.Input{Kind: vocab.InModelFailed, Jitter: jitter(w.core.Session(), wk.ID)}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.HasDetails() {
		var mf ModelFailure
		if app.Details(&mf) == nil && mf.Err != nil {
			in.Err, in.Usage = mf.Err, mf.Usage
			return in
		}
	}
	in.Err = activityError(err, vocab.CodeProviderError)
	return in
}

// activityError describes an activity that failed without a result of its
// own: a timeout (its worker was lost or it overran) may be retried by the
// core; anything else may not.
func activityError(err error, code vocab.Code) *vocab.Error {
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		e := vocab.Errorf(vocab.CodeTimeout, "activity timed out (%s): %v", to.TimeoutType(), err)
		e.Retryable = true
		return e
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() != "" {
		return vocab.Errorf(vocab.Code(app.Type()), "%s", app.Message())
	}
	return vocab.Errorf(code, "%v", err)
}

// toolResult is a tool call's result: the activity's, the one a cancelled
// call carried in its cancel error, or, for a call whose worker was lost
// before its result was recorded, the interrupted result.
func toolResult(call vocab.ToolCall, res vocab.ToolResult, err error) *vocab.ToolResult {
	if err == nil {
		return &res
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		if ce.HasDetails() {
			var r vocab.ToolResult
			if ce.Details(&r) == nil && r.CallID != "" {
				return &r
			}
		}
		r := vocab.AbortedResult(call, true, vocab.CancelCause{Kind: vocab.CancelUser})
		return &r
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		// The call's worker was lost (or the call overran its timeout):
		// whether it ran is unknown, and it is not run again.
		return &vocab.ToolResult{CallID: call.ID, Name: call.Name, Content: vocab.InterruptedToolText, IsError: true,
			Code: CodeToolInterrupted, Started: true}
	}
	r := vocab.ToolResult{CallID: call.ID, Name: call.Name, IsError: true, Code: vocab.CodeToolFailed, Started: true,
		Content: "Tool " + call.Name + " failed on its worker: " + err.Error()}
	return &r
}

// report queues the outcome of r's work, unless the core gave it up.
func (w *runner) report(r *running, in vocab.Input) {
	delete(w.running, r.work.ID)
	if r.dropped {
		return
	}
	in.At, in.Work = workflow.Now(w.ctx), r.work.ID
	w.queue = append(w.queue, &queued{in: in})
}

// startTimer arms a workflow timer for timer work.
func (w *runner) startTimer(wk session.Work) {
	ctx, cancel := workflow.WithCancel(w.ctx)
	r := &running{work: wk, cancel: cancel}
	w.running[wk.ID] = r
	d := wk.Deadline.Sub(workflow.Now(w.ctx))
	if d <= 0 {
		w.report(r, vocab.Input{Kind: vocab.InTimerFired})
		return
	}
	f := workflow.NewTimer(ctx, d)
	workflow.Go(w.ctx, func(gctx workflow.Context) {
		if err := f.Get(gctx, nil); err != nil {
			delete(w.running, wk.ID)
			return // cancelled
		}
		w.report(r, vocab.Input{Kind: vocab.InTimerFired})
	})
}

// startStop waits for the session's cancelled work to end, or CloseWait,
// then tells the core its work has stopped, naming what is stuck.
func (w *runner) startStop(wk session.Work) {
	workflow.Go(w.ctx, func(gctx workflow.Context) {
		_, _ = workflow.AwaitWithTimeout(gctx, w.opt.CloseWait, func() bool { return w.busy() == 0 })
		var stuck []vocab.StuckWork
		for _, id := range w.ids() {
			r := w.running[id]
			if r.work.Kind == session.WorkTimer {
				continue
			}
			stuck = append(stuck, vocab.StuckWork{Work: id, What: what(r.work)})
		}
		w.queue = append(w.queue, &queued{in: vocab.Input{Kind: vocab.InStopped, At: workflow.Now(gctx), Stuck: stuck}})
	})
}

// what names work for a person.
func what(wk session.Work) string {
	switch wk.Kind {
	case session.WorkModel:
		return "model request"
	case session.WorkTool:
		return "tool " + wk.Call.Name + " (call " + wk.Call.ID + ")"
	case session.WorkHook:
		return "hook " + string(wk.Hook)
	}
	return string(wk.Kind)
}

// ids returns the outstanding work's ids in order.
func (w *runner) ids() []uint64 {
	ids := make([]uint64, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// busy counts outstanding work other than timers.
func (w *runner) busy() int {
	n := 0
	for _, id := range w.ids() {
		if w.running[id].work.Kind != session.WorkTimer {
			n++
		}
	}
	return n
}

// cancelWork cancels work the core gave up on or asked to stop.
func (w *runner) cancelWork(wk session.Work) {
	r := w.running[wk.ID]
	if r == nil {
		return
	}
	switch r.work.Kind {
	case session.WorkModel, session.WorkHook, session.WorkTimer:
		r.dropped = true
		delete(w.running, wk.ID)
	}
	if r.cancel != nil {
		r.cancel()
	}
}

// jitter is the retry jitter of a failed request: derived from the session
// and the work, so a replay draws the same.
func jitter(s vocab.ID, work uint64) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], work)
	_, _ = h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}

// put stores messages in the content store (those this run has not stored
// yet) and returns the references of their transcript pages: each page
// lists up to pageRefs message references, so a full page is the same
// content for every later request and is stored once, and a request's
// arguments carry len(msgs)/pageRefs references, not one per message.
// The local activity's arguments are not recorded in history; only the
// references are.
func (w *runner) put(msgs []vocab.Message) ([]Ref, error) {
	refs := make([]Ref, len(msgs))
	var blobs [][]byte
	add := func(b []byte) Ref {
		r := RefOf(b)
		if !w.stored[r] {
			w.stored[r] = true
			blobs = append(blobs, b)
		}
		return r
	}
	for i, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, temporal.NewNonRetryableApplicationError("message: "+err.Error(), string(vocab.CodeInternal), nil)
		}
		refs[i] = add(b)
	}
	var pages []Ref
	for len(refs) > 0 {
		n := min(len(refs), pageRefs)
		b, _ := json.Marshal(refs[:n])
		pages = append(pages, add(b))
		refs = refs[n:]
	}
	if err := w.putBlobs(blobs); err != nil {
		for _, b := range blobs {
			delete(w.stored, RefOf(b))
		}
		return nil, err
	}
	return pages, nil
}

func (w *runner) putBlobs(blobs [][]byte) error {
	for len(blobs) > 0 {
		// One call carries at most about chunkSize bytes.
		n, size := 0, 0
		for n < len(blobs) && (n == 0 || size+len(blobs[n]) <= chunkSize) {
			size += len(blobs[n])
			n++
		}
		var refs []Ref
		ctx := workflow.WithLocalActivityOptions(w.ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
		if err := workflow.ExecuteLocalActivity(ctx, ActivityPut, blobs[:n]).Get(ctx, &refs); err != nil {
			return err
		}
		blobs = blobs[n:]
	}
	return nil
}

// chunks stores data in pieces and returns their references.
func (w *runner) chunks(data []byte) ([]Ref, error) {
	var blobs [][]byte
	var refs []Ref
	for len(data) > 0 {
		n := min(len(data), chunkSize)
		blobs = append(blobs, data[:n])
		refs = append(refs, RefOf(data[:n]))
		data = data[n:]
	}
	if err := w.putBlobs(blobs); err != nil {
		return nil, err
	}
	return refs, nil
}

// load reads the pieces of refs back, one local activity per piece.
func (w *runner) load(refs []Ref) ([]byte, error) {
	var out []byte
	ctx := workflow.WithLocalActivityOptions(w.ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5, NonRetryableErrorTypes: []string{string(CodeContentMissing)}}})
	for _, r := range refs {
		var b []byte
		if err := workflow.ExecuteLocalActivity(ctx, ActivityGet, r).Get(ctx, &b); err != nil {
			return nil, err
		}
		if RefOf(b) != r {
			return nil, temporal.NewNonRetryableApplicationError("content "+string(r)+" does not match its hash", string(CodeContentMissing), nil)
		}
		out = append(out, b...)
	}
	return out, nil
}

// exportDue reports whether events wait for an export and none runs.
func (w *runner) exportDue() bool { return len(w.export) > 0 && !w.exporting }

// exportNext starts the next export, one at a time so they stay in order.
func (w *runner) exportNext() {
	if !w.exportDue() {
		return
	}
	n := 0
	size := 0
	for n < len(w.export) && (n == 0 || size+eventSize(w.export[n]) <= chunkSize) {
		size += eventSize(w.export[n])
		n++
	}
	evs := slices.Clone(w.export[:n])
	w.export = w.export[n:]
	w.exporting = true
	ctx := workflow.WithActivityOptions(w.ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute}})
	f := workflow.ExecuteActivity(ctx, ActivityExport, ExportArgs{Session: w.core.Session(), Events: evs})
	workflow.Go(w.ctx, func(gctx workflow.Context) {
		if err := f.Get(gctx, nil); err != nil {
			workflow.GetLogger(gctx).Error("loopchart: export failed", "err", err)
		}
		w.exporting = false
	})
}

// shouldContinue reports whether the run continues as new now: its history
// is long, nothing but timers is outstanding, no handler runs, and the run
// has made progress of its own (a session whose snapshot alone is large
// must not continue forever).
func (w *runner) shouldContinue() bool {
	info := workflow.GetInfo(w.ctx)
	n := info.GetCurrentHistoryLength()
	if !info.GetContinueAsNewSuggested() && n < w.opt.ContinueAfter {
		return false
	}
	if n-w.startLen < 64 || w.busy() > 0 || len(w.export) > 0 || w.exporting || w.core.Closed() {
		return false
	}
	return workflow.AllHandlersFinished(w.ctx)
}

// continueAsNew hands the session to a new run.
func (w *runner) continueAsNew() error {
	snap, err := w.core.Snapshot()
	if err != nil {
		return temporal.NewNonRetryableApplicationError("snapshot: "+err.Error(), string(vocab.CodeOf(err)), nil)
	}
	c := &Carry{Runs: w.runs, Slots: w.slots}
	if c.Snapshot, err = w.chunks(snap); err != nil {
		return err
	}
	if len(w.window) > 0 {
		b, err := json.Marshal(w.window)
		if err != nil {
			return temporal.NewNonRetryableApplicationError("event window: "+err.Error(), string(vocab.CodeInternal), nil)
		}
		if c.Window, err = w.chunks(b); err != nil {
			return err
		}
	}
	// Signals received while the snapshot was stored go with the run.
	w.drainSignals()
	for _, q := range w.queue {
		c.Inbox = append(c.Inbox, q.in)
	}
	for _, id := range w.order {
		c.Prompts = append(c.Prompts, *w.prompts[id])
	}
	return workflow.NewContinueAsNewError(w.ctx, WorkflowName, Params{Options: w.opt, Carry: c})
}

// finish ends the run of a closed session once its exports are done.
func (w *runner) finish() (Summary, error) {
	for len(w.export) > 0 || w.exporting {
		if err := workflow.Await(w.ctx, func() bool { return w.exportDue() || len(w.export) == 0 && !w.exporting }); err != nil {
			return Summary{}, err
		}
		w.exportNext()
	}
	// Updates that arrived after the close are refused, not left hanging.
	if err := workflow.Await(w.ctx, func() bool {
		for _, q := range w.queue {
			if !q.done {
				q.err, q.done = session.ErrClosed, true
			}
		}
		return workflow.AllHandlersFinished(w.ctx)
	}); err != nil {
		return Summary{}, err
	}
	return Summary{Session: w.core.Session(), Seq: w.core.Seq(), Runs: w.runs}, nil
}

// status answers the status query.
func (w *runner) status() (Status, error) {
	if w.core == nil {
		return Status{}, loading()
	}
	a, t := w.core.State()
	return Status{Session: w.core.Session(), Agent: a, Turn: t, Status: string(w.core.Status()), Seq: w.core.Seq(),
		Idle: w.core.Idle(), Closed: w.core.Closed(), Run: w.runs, Approvals: w.core.Approvals()}, nil
}

// maxPage bounds one page of a query's answer (bytes of payload).
const maxPage = 1 << 20

// events answers the events query: events from seq on, within the window.
func (w *runner) events(from uint64) (EventsPage, error) {
	if w.core == nil {
		return EventsPage{}, loading()
	}
	last := w.core.Seq()
	page := EventsPage{Next: from, Last: last}
	if from == 0 {
		from = 1
		page.Next = 1
	}
	if len(w.window) == 0 || from > last {
		return page, nil
	}
	first := w.window[0].Seq
	if from < first {
		return page, vocab.Errorf(CodeEventsCompacted, "events before %d are no longer in the workflow's window (it keeps %d); read them from the export", first, w.opt.EventWindow)
	}
	size := 0
	for _, ev := range w.window[from-first:] {
		n := eventSize(ev)
		if size > 0 && size+n > maxPage {
			break
		}
		size += n
		page.Events = append(page.Events, ev)
		page.Next = ev.Seq + 1
	}
	return page, nil
}

// prompt answers the prompt query.
func (w *runner) prompt(id vocab.ID) (PromptState, error) {
	if ps := w.prompts[id]; ps != nil {
		return *ps, nil
	}
	for _, q := range w.queue {
		if q.in.ID == id && q.in.Kind == vocab.InSubmit {
			return PromptState{ID: id}, nil
		}
	}
	if w.core == nil {
		return PromptState{}, loading()
	}
	return PromptState{}, vocab.Errorf(CodeNoPrompt, "no prompt %s in session %s", id, w.core.Session())
}

// history answers the history query: messages from index from on.
func (w *runner) history(from int) (HistoryPage, error) {
	if w.core == nil {
		return HistoryPage{}, loading()
	}
	h := w.core.History()
	page := HistoryPage{Next: from, Total: h.Len()}
	if from < 0 {
		return page, vocab.Errorf(vocab.CodeBadInput, "history: negative index %d", from)
	}
	size := 0
	for i := from; i < h.Len(); i++ {
		m := h.At(i)
		b, _ := json.Marshal(m)
		if size > 0 && size+len(b) > maxPage {
			break
		}
		size += len(b)
		page.Messages = append(page.Messages, m)
		page.Next = i + 1
	}
	return page, nil
}

// eventSize is the size of ev's encoding.
func eventSize(ev vocab.Event) int {
	b, _ := json.Marshal(ev)
	return len(b)
}
