package wiretest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// Outcome is what a session that sent a prompt over a sequence of
// fixtures must end with.
type Outcome struct {
	// Kind, Steps and Truncated are the prompt's result; Fail its error
	// code when it failed.
	Kind      vocab.PromptKind
	Steps     int
	Truncated bool
	Fail      vocab.Code
	// Retry is the code of the one retry the session made ("" for none)
	// and Delay its wait, which the clock moved by.
	Retry vocab.Code
	Delay time.Duration
	// Usages are the non-zero usage events, in order.
	Usages []vocab.Usage
	// Results are the tool results' codes in order, "" for a call that
	// ran and succeeded.
	Results []vocab.Code
}

// Run is what a session did: its prompt's result, its events, how many
// requests the server got for a sequence of Sent fixtures, how far the
// clock moved, and the API key that must appear in no error.
type Run struct {
	Result   vocab.PromptResult
	Events   []vocab.Event
	Requests int
	Sent     []string
	Waited   time.Duration
	Key      string
}

// Check reports on t every way got differs from want.
func Check(t testing.TB, got Run, want Outcome) {
	t.Helper()
	res := got.Result
	if res.Kind != want.Kind || res.Steps != want.Steps || res.Truncated != want.Truncated || res.StopReason != "" {
		t.Errorf("result %s, want %s{steps=%d truncated=%t}", res, want.Kind, want.Steps, want.Truncated)
	}
	switch {
	case want.Fail != "":
		if res.Err == nil || res.Err.Code != want.Fail || !errors.Is(res.Err, want.Fail.Err()) {
			t.Errorf("result %s, want failed with %s", res, want.Fail)
		}
		if res.Err != nil && got.Key != "" && strings.Contains(res.Err.Error(), got.Key) {
			t.Errorf("the error shows the API key: %v", res.Err)
		}
	case res.Err != nil:
		t.Errorf("result %s has an error", res)
	}

	// Nothing re-sent silently, nothing left unsent.
	if got.Requests != len(got.Sent) {
		t.Errorf("%d requests, want %d (%s)", got.Requests, len(got.Sent), strings.Join(got.Sent, ", "))
	}

	var retries []vocab.RetryPayload
	var usages []vocab.Usage
	var results []vocab.Code
	for _, ev := range got.Events {
		switch p := ev.Payload.(type) {
		case vocab.RetryPayload:
			retries = append(retries, p)
		case vocab.UsagePayload:
			if ev.Kind == vocab.EventUsage && p.Usage != (vocab.Usage{}) {
				usages = append(usages, p.Usage)
			}
		case vocab.ToolPayload:
			if ev.Kind == vocab.EventToolResult && p.Result != nil {
				code := p.Result.Code
				if !p.Result.IsError {
					code = ""
				}
				results = append(results, code)
			}
		}
	}

	// The retry, and its wait on the clock.
	if want.Retry == "" {
		if len(retries) != 0 {
			t.Errorf("retries %+v, want none", retries)
		}
	} else if len(retries) != 1 || retries[0].Code != want.Retry || retries[0].Delay != want.Delay ||
		retries[0].FailedAttempt != 1 || retries[0].NextAttempt != 2 {
		t.Errorf("retries %+v, want one of %s after %s", retries, want.Retry, want.Delay)
	}
	if got.Waited != want.Delay {
		t.Errorf("the clock moved %s, want %s", got.Waited, want.Delay)
	}
	// Usage: one event per request that reported some, none counted twice.
	if !slices.Equal(usages, want.Usages) {
		t.Errorf("usage events %+v, want %+v", usages, want.Usages)
	}
	// The fixture's tool calls: run, or answered with the error the
	// machine gives.
	if !slices.Equal(results, want.Results) {
		t.Errorf("tool result codes %q, want %q", results, want.Results)
	}
}
