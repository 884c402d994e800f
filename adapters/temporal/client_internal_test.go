package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/loopchart/loopchart/vocab"
)

// flakyQueries is a Temporal client whose queries fail with errs, one per
// query, and then answer with answer. Only QueryWorkflow is implemented.
type flakyQueries struct {
	client.Client
	errs   []error
	answer any
	asked  int
}

func (f *flakyQueries) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	f.asked++
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return jsonValue{f.answer}, nil
}

// jsonValue is an answered query, decoded through JSON.
type jsonValue struct{ v any }

func (j jsonValue) HasValue() bool { return j.v != nil }

func (j jsonValue) Get(out any) error {
	b, err := json.Marshal(j.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// A query that fails because the worker it waited on was lost (cancelled
// or timed out though the caller's context is alive) or because the server
// is unreachable is asked again: Wait returns the prompt's result. An
// answer that is an error (the session refused the query) is returned at
// once, and so is the caller's own context ending.
func TestWaitAsksAgainThroughPassingFailures(t *testing.T) {
	done := PromptState{Ended: true, Result: &vocab.PromptResult{Kind: vocab.PromptCompleted, Steps: 2}}
	passingErrs := []error{
		context.Canceled,
		serviceerror.NewCanceled("context canceled"),
		serviceerror.NewDeadlineExceeded("context deadline exceeded"),
		serviceerror.NewUnavailable("connection refused"),
	}
	fc := &flakyQueries{errs: passingErrs, answer: done}
	c := &Client{c: fc, pollMin: time.Microsecond, pollMax: time.Microsecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Wait(ctx, "s", "p")
	if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != 2 {
		t.Fatalf("Wait through %d passing failures: %s %v, want completed{steps=2}", len(passingErrs), res, err)
	}
	if fc.asked != len(passingErrs)+1 {
		t.Errorf("asked %d times, want %d", fc.asked, len(passingErrs)+1)
	}

	refused := serviceerror.NewQueryFailed("session.unknown_prompt: no prompt p")
	fc = &flakyQueries{errs: []error{refused}, answer: done}
	c.c = fc
	if _, err := c.Wait(ctx, "s", "p"); vocab.CodeOf(err) != "session.unknown_prompt" || fc.asked != 1 {
		t.Errorf("a refused query: %v after %d asks, want code session.unknown_prompt after 1", err, fc.asked)
	}

	gone, stop := context.WithCancel(context.Background())
	stop()
	fc = &flakyQueries{errs: []error{context.Canceled}, answer: done}
	c.c = fc
	if _, err := c.Wait(gone, "s", "p"); !errors.Is(err, context.Canceled) || fc.asked != 1 {
		t.Errorf("the caller's context ended: %v after %d asks, want context.Canceled after 1", err, fc.asked)
	}
}
