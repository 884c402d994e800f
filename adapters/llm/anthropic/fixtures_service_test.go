package anthropic_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/llm/internal/wire"
	"github.com/loopchart/loopchart/adapters/llm/internal/wiretest"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/machines/turn"
	"github.com/loopchart/loopchart/vocab"
)

// serviceOutcome is what one fixture must come to when an agentsvc
// session meets it: the fixtures served after it, the prompt's result,
// the retry it causes, the usage it reports and the results of the tool
// calls it makes. The outcomes were read off the fixtures and the turn
// machine's rules (machines/turn guards, vocab reasons and errors), not
// off a run.
type serviceOutcome struct {
	// after are the fixtures served after this one, in order: the
	// requests the session must send, no more and no fewer, are
	// 1+len(after).
	after []string

	kind      vocab.PromptKind
	steps     int
	truncated bool
	// fail is a failed prompt's error code.
	fail vocab.Code
	// retry is the code of the one llm/retry event the fixture causes
	// ("" for none); delay is that retry's wait: the fixture's
	// Retry-After when it has one, else the policy's first backoff.
	retry vocab.Code
	delay time.Duration
	// usage is what the fixture reports, as running totals end it
	// (zero: nothing); input counts cached tokens too.
	usage vocab.Usage
	// results are the codes of the results of the fixture's tool calls,
	// in the model's order; "" is a call that ran and succeeded.
	results []vocab.Code
}

// plainFixture is the plain answer served after a fixture whose turn
// goes on (tool calls, a retry, a pause); plainUsage is the usage it
// reports.
const plainFixture = "text.sse"

var plainUsage = vocab.Usage{InputTokens: 25, OutputTokens: 12}

// firstBackoff is the retry policy's wait after a first failed attempt
// without a Retry-After (the session draws no jitter).
const firstBackoff = turn.DefaultBaseDelay

func usageOf(in, out int) vocab.Usage { return vocab.Usage{InputTokens: in, OutputTokens: out} }

// answers: a reply that ends the turn completed in one step.
func answers(u vocab.Usage) serviceOutcome {
	return serviceOutcome{kind: vocab.PromptCompleted, steps: 1, usage: u}
}

// callsTools: a reply with tool calls; the session runs them and the
// plain answer ends the turn in a second step.
func callsTools(u vocab.Usage, results ...vocab.Code) serviceOutcome {
	return serviceOutcome{after: []string{plainFixture}, kind: vocab.PromptCompleted, steps: 2, usage: u, results: results}
}

// retried: a retryable failure; the retry gets the plain answer.
func retried(code vocab.Code, delay time.Duration, u vocab.Usage) serviceOutcome {
	return serviceOutcome{after: []string{plainFixture}, kind: vocab.PromptCompleted, steps: 1, retry: code, delay: delay, usage: u}
}

// fails: a failure that ends the prompt failed, nothing re-sent.
func fails(code vocab.Code, u vocab.Usage) serviceOutcome {
	return serviceOutcome{kind: vocab.PromptFailed, steps: 1, fail: code, usage: u}
}

// truncated: a reply cut off by the output limit; its tool calls (if
// any) are not run, and the turn ends completed, truncated.
func truncated(u vocab.Usage, results ...vocab.Code) serviceOutcome {
	return serviceOutcome{kind: vocab.PromptCompleted, steps: 1, truncated: true, usage: u, results: results}
}

const ran vocab.Code = "" // a tool call that ran and succeeded

// serviceOutcomes maps every fixture of the directory to its outcome.
var serviceOutcomes = map[string]serviceOutcome{
	// Plain answers.
	"text.sse":          answers(usageOf(25, 12)),
	"stop_sequence.sse": answers(usageOf(10, 4)),
	"thinking.sse":      answers(usageOf(85, 310)),
	"cache_usage.sse":   answers(vocab.Usage{InputTokens: 12 + 20000 + 1500, OutputTokens: 7, CacheReadTokens: 20000, CacheWriteTokens: 1500}),

	// Tool calls: run, then the plain answer.
	"tool_use.sse":       callsTools(usageOf(410, 41), ran),
	"parallel_tools.sse": callsTools(usageOf(502, 88), ran, ran),
	"text_then_tool.sse": callsTools(usageOf(300, 30), ran),
	// Arguments that are not JSON: an argument error result, and the
	// turn goes on.
	"malformed_tool_json.sse": callsTools(usageOf(70, 14), vocab.CodeToolBadArguments),

	// pause_turn: the turn takes another step without new input; two
	// requests.
	"pause_turn.sse": {after: []string{plainFixture}, kind: vocab.PromptCompleted, steps: 2, usage: usageOf(120, 20)},

	// The output limit: sticky max-tokens; a cut-off call is not run.
	"max_tokens.sse":      truncated(usageOf(40, 16)),
	"max_tokens_tool.sse": truncated(usageOf(40, 16), vocab.CodeToolMaxTokens),

	// Retryable failures: one retry, then the plain answer.
	"rate_limit_429.sse":          retried(vocab.CodeRateLimited, 7*time.Second, vocab.Usage{}),
	"rate_limit_429_ms.sse":       retried(vocab.CodeRateLimited, 1500*time.Millisecond, vocab.Usage{}),
	"rate_limit_429_fraction.sse": retried(vocab.CodeRateLimited, 250*time.Millisecond, vocab.Usage{}),
	// A Retry-After date in 2099: capped.
	"rate_limit_429_date.sse": retried(vocab.CodeRateLimited, wire.MaxRetryAfter, vocab.Usage{}),
	"overloaded_529.sse":      retried(vocab.CodeRateLimited, firstBackoff, vocab.Usage{}),
	"server_500.sse":          retried(vocab.CodeServer, firstBackoff, vocab.Usage{}),
	"bad_gateway_502.sse":     retried(vocab.CodeServer, firstBackoff, vocab.Usage{}),
	// Failures inside a 200 stream: the usage reported before the
	// failure is spent and logged.
	"error_midstream.sse": retried(vocab.CodeRateLimited, firstBackoff, usageOf(60, 1)),
	"cut_off.sse":         retried(vocab.CodeTransport, firstBackoff, usageOf(44, 1)),
	"cut_after_delta.sse": retried(vocab.CodeTransport, firstBackoff, usageOf(44, 5)),
	// Empty replies (no block; thinking only): the turn machine retries
	// empty_response.
	"empty.sse":         retried(vocab.CodeEmptyResponse, firstBackoff, usageOf(20, 1)),
	"thinking_only.sse": retried(vocab.CodeEmptyResponse, firstBackoff, usageOf(30, 9)),

	// Failures no retry mends.
	"auth_401.sse":              fails(vocab.CodeAuth, vocab.Usage{}),
	"permission_403.sse":        fails(vocab.CodeAuth, vocab.Usage{}),
	"not_found_404.sse":         fails(vocab.CodeModelNotFound, vocab.Usage{}),
	"billing_402.sse":           fails(vocab.CodeQuotaExhausted, vocab.Usage{}),
	"credit_balance_400.sse":    fails(vocab.CodeQuotaExhausted, vocab.Usage{}),
	"invalid_request_400.sse":   fails(vocab.CodeRequestRejected, vocab.Usage{}),
	"prompt_too_long_400.sse":   fails(vocab.CodeContextOverflow, vocab.Usage{}),
	"request_too_large_413.sse": fails(vocab.CodeContextOverflow, vocab.Usage{}),
	// Stop reasons that fail the turn after committing the reply.
	"refusal.sse":        fails(vocab.CodeRefusal, usageOf(33, 3)),
	"context_window.sse": fails(vocab.CodeContextOverflow, usageOf(199000, 1000)),
}

// anyArgsTool is a tool named name that takes any JSON object and
// answers "name: ok"; arguments that are not a JSON object get an
// argument error result.
func anyArgsTool(name string) vocab.Tool {
	return tools.MustTypedText(vocab.ToolSpec{Name: name, Description: "Takes anything.", Schema: json.RawMessage(`{"type":"object"}`), NoAccess: true},
		func(_ context.Context, _ map[string]any) (string, error) { return name + ": ok", nil })
}

// fixtureTools are the tools the fixtures call.
func fixtureTools() []vocab.Tool {
	var ts []vocab.Tool
	for _, name := range []string{"echo", "get_weather", "get_time", "now", "write_file"} {
		ts = append(ts, anyArgsTool(name))
	}
	return ts
}

// TestEveryFixtureThroughTheService passes every fixture of the directory
// through the adapter into an agentsvc session and checks the prompt's
// result, the requests sent, the retry and the usage logged. A fixture
// without an outcome in the table fails the test.
func TestEveryFixtureThroughTheService(t *testing.T) {
	entries, err := os.ReadDir(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sse") {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s", fixtureDir)
	}
	for name := range serviceOutcomes {
		if !slices.Contains(files, name) {
			t.Errorf("the table lists %s, which is not in %s", name, fixtureDir)
		}
	}
	for _, name := range files {
		want, ok := serviceOutcomes[name]
		if !ok {
			t.Errorf("fixture %s has no expected outcome: add it to serviceOutcomes", name)
			continue
		}
		t.Run(strings.TrimSuffix(name, ".sse"), func(t *testing.T) {
			t.Parallel()
			checkThroughService(t, name, want)
		})
	}
}

func checkThroughService(t *testing.T, name string, want serviceOutcome) {
	seq := append([]string{name}, want.after...)
	s := newSessionWith(t, fixtureTools(), seq...)

	res := s.prompt(t, "hi")

	// Usage: a usage event for each request that reported some (the
	// fixture's first), none counted twice.
	var usages []vocab.Usage
	if want.usage != (vocab.Usage{}) {
		usages = append(usages, want.usage)
	}
	for _, f := range want.after {
		if f == plainFixture {
			usages = append(usages, plainUsage)
		}
	}
	wiretest.Check(t, wiretest.Run{Result: res, Events: s.log.Events(), Requests: len(s.srv.Requests()), Sent: seq,
		Waited: s.clk.Now().Sub(epoch), Key: testKey},
		wiretest.Outcome{Kind: want.kind, Steps: want.steps, Truncated: want.truncated, Fail: want.fail,
			Retry: want.retry, Delay: want.delay, Usages: usages, Results: want.results})
}
