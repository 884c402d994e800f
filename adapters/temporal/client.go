package temporal

import (
	"context"
	"errors"
	"iter"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// Client drives sessions that run as workflows, with the calls of an
// in-process agentsvc session: Submit, Steer, Cancel, Events, History,
// Wait, each on a session id. Tools, hooks and the provider are code on
// the workers (Register), not on the client.
type Client struct {
	c     client.Client
	queue string
	ids   vocab.IDSource
	// poll is the first and longest interval between two prompt queries
	// of Wait.
	pollMin, pollMax time.Duration
}

// NewClient returns a client that starts sessions on taskQueue.
func NewClient(c client.Client, taskQueue string) (*Client, error) {
	if c == nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "temporal: no client")
	}
	if taskQueue == "" {
		return nil, vocab.Errorf(vocab.CodeBadInput, "temporal: no task queue")
	}
	return &Client{c: c, queue: taskQueue, ids: vocab.NewULIDSource(nil), pollMin: 20 * time.Millisecond, pollMax: time.Second}, nil
}

// StartOptions start a session.
type StartOptions struct {
	// Slots are the hook slots the workers have chains for.
	Slots   []vocab.HookName
	Options Options
}

// Start starts the session cfg.Session; starting a session that already
// runs is an error with code input.duplicate_id.
func (c *Client) Start(ctx context.Context, cfg session.Config, o StartOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := o.Options.Validate(); err != nil {
		return err
	}
	raw, err := session.ConfigJSON(cfg)
	if err != nil {
		return err
	}
	_, err = c.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: string(cfg.Session), TaskQueue: c.queue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Without it the SDK hands back the existing run instead of an
		// error.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, WorkflowName, Params{Config: raw, Slots: o.Slots, Options: o.Options})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return vocab.Errorf(vocab.CodeDuplicateID, "session %s already exists: %v", cfg.Session, err)
	}
	return err
}

// Submit queues a prompt; its id is msg.ID (a new ULID when empty), which
// is also the update's id, so a retried Submit is answered once.
func (c *Client) Submit(ctx context.Context, s vocab.ID, msg vocab.Message) (Ack, error) {
	return c.message(ctx, s, UpdateSubmit, msg)
}

// Steer sends a message into the running turn (or the next).
func (c *Client) Steer(ctx context.Context, s vocab.ID, msg vocab.Message) (Ack, error) {
	return c.message(ctx, s, UpdateSteer, msg)
}

// Inject adds a message to the history without starting a turn.
func (c *Client) Inject(ctx context.Context, s vocab.ID, msg vocab.Message) (Ack, error) {
	return c.message(ctx, s, UpdateInject, msg)
}

// Notify queues a notification.
func (c *Client) Notify(ctx context.Context, s vocab.ID, msg vocab.Message) (Ack, error) {
	return c.message(ctx, s, UpdateNotify, msg)
}

// Withdraw takes back a queued input.
func (c *Client) Withdraw(ctx context.Context, s, target vocab.ID) (Ack, error) {
	id := c.ids.NewID(time.Now())
	return c.update(ctx, s, UpdateWithdraw, id, Withdrawal{ID: id, Target: target})
}

// Approve answers a tool call awaiting a person.
func (c *Client) Approve(ctx context.Context, s vocab.ID, a vocab.Approval) (Ack, error) {
	id := c.ids.NewID(time.Now())
	return c.update(ctx, s, UpdateApprove, id, Approval{ID: id, Approval: a})
}

func (c *Client) message(ctx context.Context, s vocab.ID, name string, msg vocab.Message) (Ack, error) {
	if msg.ID == "" {
		msg.ID = c.ids.NewID(time.Now())
	}
	return c.update(ctx, s, name, msg.ID, msg)
}

// update sends one update and waits until the core recorded (or refused)
// its input. A refusal is a *vocab.Error with the core's code.
func (c *Client) update(ctx context.Context, s vocab.ID, name string, id vocab.ID, arg any) (Ack, error) {
	h, err := c.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: string(s), UpdateID: string(id), UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return Ack{}, refusal(err)
	}
	var ack Ack
	if err := h.Get(ctx, &ack); err != nil {
		return Ack{}, refusal(err)
	}
	return ack, nil
}

// Refusal turns the error of a rejected or failed update into the core's
// typed error (a *vocab.Error with its code); other errors come back as
// they are.
func Refusal(err error) error { return refusal(err) }

// refusal turns a rejected update into the core's typed error.
func refusal(err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		var ve *vocab.Error
		if app.HasDetails() && app.Details(&ve) == nil && ve != nil && ve.Code != "" {
			return ve
		}
		if app.Type() != "" {
			return vocab.Errorf(vocab.Code(app.Type()), "%s", app.Message())
		}
	}
	// A query handler's error reaches the client as its text, "code:
	// message".
	var qf *serviceerror.QueryFailed
	if errors.As(err, &qf) {
		if code, msg, ok := strings.Cut(qf.Message, ": "); ok && strings.Contains(code, ".") && !strings.ContainsAny(code, " \t") {
			return &vocab.Error{Code: vocab.Code(code), Message: msg, Cause: err}
		}
	}
	return err
}

// Cancel cancels the running turn (cause user when none is given);
// keepInbox keeps what is queued.
func (c *Client) Cancel(ctx context.Context, s vocab.ID, cause vocab.CancelCause, keepInbox bool) error {
	if cause.Kind == "" {
		cause.Kind = vocab.CancelUser
	}
	return c.control(ctx, s, Control{Kind: vocab.InCancel, Cause: &cause, KeepInbox: keepInbox})
}

// Pause stops the agent from starting turns.
func (c *Client) Pause(ctx context.Context, s vocab.ID) error {
	return c.control(ctx, s, Control{Kind: vocab.InPause})
}

// Continue undoes Pause.
func (c *Client) Continue(ctx context.Context, s vocab.ID) error {
	return c.control(ctx, s, Control{Kind: vocab.InContinue})
}

// Close closes the session: the running turn is aborted, its work
// cancelled, and the workflow ends.
func (c *Client) Close(ctx context.Context, s vocab.ID) error {
	return c.control(ctx, s, Control{Kind: vocab.InClose})
}

func (c *Client) control(ctx context.Context, s vocab.ID, ctl Control) error {
	ctl.ID = c.ids.NewID(time.Now())
	return c.c.SignalWorkflow(ctx, string(s), "", SignalControl, ctl)
}

// Status reads the session's status.
func (c *Client) Status(ctx context.Context, s vocab.ID) (Status, error) {
	var st Status
	err := c.query(ctx, s, QueryStatus, &st)
	return st, err
}

// query asks the session's current run; a run that is loading its
// snapshot (just continued as new), and a query that failed for a lost
// worker or an unreachable server (see passing), is asked again, backing
// off, until ctx ends.
func (c *Client) query(ctx context.Context, s vocab.ID, name string, out any, args ...any) error {
	d := c.pollMin
	for {
		v, err := c.c.QueryWorkflow(ctx, string(s), "", name, args...)
		if err == nil {
			return v.Get(out)
		}
		if !passing(ctx, err) {
			err = refusal(err)
			if vocab.CodeOf(err) != CodeLoading {
				return err
			}
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		d = min(2*d, c.pollMax)
	}
}

// passing reports whether err, the failure of a query made under ctx, is
// the passing trouble of a server or a worker rather than an answer: a
// worker lost while a query waited on it fails the query as cancelled or
// timed out though ctx is alive, and an unreachable server is unavailable.
// The query is asked again, as it is while a continued run loads.
func passing(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var canceled *serviceerror.Canceled
	var deadline *serviceerror.DeadlineExceeded
	var unavailable *serviceerror.Unavailable
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &canceled) || errors.As(err, &deadline) || errors.As(err, &unavailable)
}

// Prompt reads how the prompt id stands.
func (c *Client) Prompt(ctx context.Context, s, id vocab.ID) (PromptState, error) {
	var ps PromptState
	err := c.query(ctx, s, QueryPrompt, &ps, id)
	return ps, err
}

// Wait waits until the prompt id ended and returns how. It asks the
// session (a query, following continue-as-new), backing off from 20 ms to
// 1 s between asks.
func (c *Client) Wait(ctx context.Context, s, id vocab.ID) (vocab.PromptResult, error) {
	d := c.pollMin
	for {
		ps, err := c.Prompt(ctx, s, id)
		if err != nil {
			return vocab.PromptResult{}, err
		}
		if ps.Ended && ps.Result != nil {
			return *ps.Result, nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return vocab.PromptResult{}, context.Cause(ctx)
		case <-t.C:
		}
		d = min(2*d, c.pollMax)
	}
}

// Events yields the session's events from seq from on, as far as the
// session has come when the iteration reaches it. Events older than the
// workflow's window fail with CodeEventsCompacted.
func (c *Client) Events(ctx context.Context, s vocab.ID, from uint64) iter.Seq2[vocab.Event, error] {
	return func(yield func(vocab.Event, error) bool) {
		for {
			var page EventsPage
			if err := c.query(ctx, s, QueryEvents, &page, from); err != nil {
				yield(vocab.Event{}, err)
				return
			}
			for _, ev := range page.Events {
				if !yield(ev, nil) {
					return
				}
			}
			if len(page.Events) == 0 || page.Next > page.Last {
				return
			}
			from = page.Next
		}
	}
}

// History returns the session's conversation.
func (c *Client) History(ctx context.Context, s vocab.ID) ([]vocab.Message, error) {
	var out []vocab.Message
	from := 0
	for {
		var page HistoryPage
		if err := c.query(ctx, s, QueryHistory, &page, from); err != nil {
			return nil, err
		}
		out = append(out, page.Messages...)
		if page.Next >= page.Total || len(page.Messages) == 0 {
			return out, nil
		}
		from = page.Next
	}
}

// WaitClosed waits until the session is closed and its workflow ended,
// following continue-as-new.
func (c *Client) WaitClosed(ctx context.Context, s vocab.ID) (Summary, error) {
	var sum Summary
	err := c.c.GetWorkflow(ctx, string(s), "").Get(ctx, &sum)
	return sum, err
}
