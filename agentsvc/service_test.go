package agentsvc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/hooks"
	"github.com/loopchart/loopchart/vocab"
)

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The first matching error handler decides, in slot order: a handler
// registered Before another runs first; a non-matching one passes on.
func TestErrorHandlerOrder(t *testing.T) {
	svc, _ := newExample(`{"steps": [
		{"error": {"code": "llm.context_overflow", "message": "too long"}},
		{"parts": [{"text": "rebuilt"}], "expect": {"last_user_contains": "by first"}}]}`)
	defer svc.Close(context.Background())
	var calls []string
	handler := func(id string, match bool, retry bool) agentsvc.ErrorHandler {
		return agentsvc.ErrorHandler{ID: id,
			Match: func(err *vocab.Error) bool {
				calls = append(calls, id+":match")
				return match && err.Code == vocab.CodeContextOverflow
			},
			Handle: func(ctx context.Context, c *agentsvc.ErrorContext) error {
				calls = append(calls, id+":handle")
				if retry {
					c.Retry(append(c.History.Messages(), vocab.UserText("(compacted by "+id+")")))
				}
				return nil
			}}
	}
	if _, err := svc.RegisterLoopErrorHandler(handler("last", true, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterLoopErrorHandler(handler("first", true, true), hooks.Before("last")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterLoopErrorHandler(handler("never", false, false), hooks.Before("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterLoopErrorHandler(handler("x", true, true), hooks.After("nope")); !errors.Is(err, hooks.ErrUnknownTarget) {
		t.Errorf("unknown target: got %v", err)
	}
	if _, err := svc.RegisterLoopErrorHandler(agentsvc.ErrorHandler{ID: "bad"}); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("handler without Match/Handle: got %v", err)
	}
	p, _ := svc.SubmitText("big")
	res, err := p.Wait(ctx5(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != vocab.PromptCompleted {
		t.Fatalf("result %s", res)
	}
	if got := strings.Join(calls, " "); got != "never:match first:match first:handle" {
		t.Errorf("handler calls = %q", got)
	}
}

// A handler that fails turns the failure into the handler's error.
func TestErrorHandlerFailure(t *testing.T) {
	svc, _ := newExample(`{"steps": [{"error": {"status": 500, "message": "boom"}}]}`)
	defer svc.Close(context.Background())
	svc.RegisterLoopErrorHandler(agentsvc.ErrorHandler{ID: "broken",
		Match:  func(*vocab.Error) bool { return true },
		Handle: func(context.Context, *agentsvc.ErrorContext) error { return errors.New("handler broke") }})
	p, _ := svc.SubmitText("x")
	res, err := p.Wait(ctx5(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != vocab.PromptFailed || !strings.Contains(res.Err.Message, "handler broke") {
		t.Errorf("result %s", res)
	}
}

// Inject, Remind, WhenIdle, History, Snapshot and Session through the
// public API.
func TestServiceSurface(t *testing.T) {
	sink := eventlog.NewMemory()
	svc := newExampleWith(`{"steps": [{"parts": [{"text": "ok"}], "expect": {"last_user_contains": "hello"}}]}`, sink)
	defer svc.Close(context.Background())
	ctx := ctx5(t)
	if _, err := svc.Inject(vocab.UserText("context first")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Remind("style", vocab.UserText("be brief")); err != nil {
		t.Fatal(err)
	}
	if err := svc.WhenIdle(ctx); err != nil { // injected input does not wake the agent
		t.Fatal(err)
	}
	if h, _ := svc.History(ctx); h.Len() != 0 {
		t.Fatalf("history before any prompt: %d messages", h.Len())
	}
	if _, err := svc.SubmitText("hello"); err != nil {
		t.Fatal(err)
	}
	if err := svc.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := svc.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range h.All() {
		texts = append(texts, string(m.Role)+":"+m.Text())
	}
	want := "user:context first|user:be brief|user:hello|assistant:ok"
	if got := strings.Join(texts, "|"); got != want {
		t.Errorf("history = %q, want %q", got, want)
	}
	snap, err := svc.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Session != svc.Session() || snap.Status != "idle" || snap.History.Len() != 4 || snap.Seq != uint64(sink.Len()) || len(snap.Core) == 0 {
		t.Errorf("snapshot: session %s status %s history %d seq %d (log %d)", snap.Session, snap.Status, snap.History.Len(), snap.Seq, sink.Len())
	}
	if err := svc.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Continue(); err != nil {
		t.Fatal(err)
	}
	if err := svc.RunMaintenance(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// Options mistakes come back as typed errors.
func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := agentsvc.New(agentsvc.Options{}); !errors.Is(err, vocab.CodeBadInput.Err()) {
		t.Errorf("no provider: got %v", err)
	}
}
