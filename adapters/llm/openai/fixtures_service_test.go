package openai_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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
	// server is the behaviour table row the provider uses; "openai"
	// when empty.
	server string
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
	// usage is what the fixture reports (zero: nothing).
	usage vocab.Usage
	// results are the codes of the results of the fixture's tool calls,
	// in the model's order; "" is a call that ran and succeeded.
	results []vocab.Code
}

// plainFixture is the plain answer served after a fixture whose turn
// goes on (tool calls, a retry); plainUsage is the usage it reports.
const plainFixture = "plain.sse"

var plainUsage = vocab.Usage{InputTokens: 12, OutputTokens: 2}

// firstBackoff is the retry policy's wait after a first failed attempt
// without a Retry-After (the session draws no jitter).
const firstBackoff = turn.DefaultBaseDelay

func usageOf(in, out, cacheRead int) vocab.Usage {
	return vocab.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: cacheRead}
}

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

func (o serviceOutcome) on(server string) serviceOutcome { o.server = server; return o }

const ran vocab.Code = "" // a tool call that ran and succeeded

// serviceOutcomes maps every fixture of the directory to its outcome.
var serviceOutcomes = map[string]serviceOutcome{
	// Plain answers.
	"plain.sse":                    answers(usageOf(12, 2, 0)),
	"reasoning_deepseek.sse":       answers(usageOf(20, 64, 0)).on("deepseek"),
	"usage_deepseek_cache_hit.sse": answers(usageOf(1500, 3, 1408)).on("deepseek"),
	"usage_moonshot_in_choice.sse": answers(usageOf(19, 2, 16)).on("moonshot"),
	"usage_openai_cached.sse":      answers(usageOf(2006, 300, 1920)),

	// Tool calls: run, then the plain answer.
	"agent_echo_call.sse": callsTools(usageOf(60, 10, 0), ran),
	"tool_call.sse":       callsTools(usageOf(80, 17, 0), ran),
	"parallel_calls.sse":  callsTools(usageOf(90, 40, 0), ran, ran),
	"parallel_index0.sse": callsTools(usageOf(50, 30, 0), ran, ran, ran),
	"text_then_call.sse":  callsTools(usageOf(30, 12, 0), ran),
	"server_deepseek.sse": callsTools(usageOf(320, 41, 256), ran).on("deepseek"),
	"server_llamacpp.sse": callsTools(usageOf(512, 22, 500), ran).on("llamacpp"),
	"server_mistral.sse":  callsTools(usageOf(95, 35, 0), ran, ran).on("mistral"),
	"server_moonshot.sse": callsTools(usageOf(210, 58, 192), ran, ran).on("moonshot"),
	// Ollama finishes "stop" after a tool call: still a tool round.
	"server_ollama.sse": callsTools(usageOf(180, 25, 0), ran).on("ollama"),
	"server_vllm.sse":   callsTools(usageOf(400, 60, 384), ran).on("vllm"),
	// Arguments that are not JSON: an argument error result, and the
	// turn goes on.
	"malformed_args.sse": callsTools(vocab.Usage{}, vocab.CodeToolBadArguments),

	// The output limit: sticky max-tokens; a cut-off call is not run.
	"max_tokens.sse":      truncated(usageOf(10, 4, 0)),
	"max_tokens_call.sse": truncated(usageOf(40, 16, 0), vocab.CodeToolMaxTokens),

	// Retryable failures: one retry, then the plain answer.
	"rate_limit_429.sse":    retried(vocab.CodeRateLimited, 2*time.Second, vocab.Usage{}),
	"rate_limit_429_ms.sse": retried(vocab.CodeRateLimited, 1500*time.Millisecond, vocab.Usage{}),
	"overloaded_529.sse":    retried(vocab.CodeRateLimited, 500*time.Millisecond, vocab.Usage{}), // Retry-After: 0.5
	// 503 with code server_is_overloaded: overload is a rate limit.
	"overloaded_503.sse": retried(vocab.CodeRateLimited, firstBackoff, vocab.Usage{}),
	"server_500.sse":     retried(vocab.CodeServer, firstBackoff, vocab.Usage{}),
	"error_event.sse":    retried(vocab.CodeServer, firstBackoff, vocab.Usage{}),
	"no_finish.sse":      retried(vocab.CodeTransport, firstBackoff, vocab.Usage{}),
	// An empty completion: the turn machine retries empty_response.
	"empty.sse": retried(vocab.CodeEmptyResponse, firstBackoff, usageOf(9, 0, 0)),

	// Failures no retry mends.
	"auth_401.sse":          fails(vocab.CodeAuth, vocab.Usage{}),
	"not_found_404.sse":     fails(vocab.CodeModelNotFound, vocab.Usage{}),
	"quota_429.sse":         fails(vocab.CodeQuotaExhausted, vocab.Usage{}),
	"overflow_400.sse":      fails(vocab.CodeContextOverflow, vocab.Usage{}),
	"overflow_llamacpp.sse": fails(vocab.CodeContextOverflow, vocab.Usage{}).on("llamacpp"),
	"overflow_moonshot.sse": fails(vocab.CodeContextOverflow, vocab.Usage{}).on("moonshot"),
	"overflow_vllm.sse":     fails(vocab.CodeContextOverflow, vocab.Usage{}).on("vllm"),
	"bad_chunk.sse":         fails(vocab.CodeSyntax, vocab.Usage{}),
	// Finish reasons that fail the turn after committing the reply.
	"refusal.sse":               fails(vocab.CodeRefusal, usageOf(15, 9, 0)),
	"finish_context_window.sse": fails(vocab.CodeContextOverflow, usageOf(32000, 768, 0)).on("mistral"),
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
	for _, name := range []string{"echo", "get_weather", "read_file", "list_files", "get_date", "write_file"} {
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
	server := want.server
	if server == "" {
		server = "openai"
	}
	s := newSessionOn(t, server, fixtureTools(), seq...)

	res := s.prompt(t, "hello")

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
		Waited: s.clk.Now().Sub(sessionStart), Key: testKey},
		wiretest.Outcome{Kind: want.kind, Steps: want.steps, Truncated: want.truncated, Fail: want.fail,
			Retry: want.retry, Delay: want.delay, Usages: usages, Results: want.results})
}
