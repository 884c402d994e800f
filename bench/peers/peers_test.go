package peers

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"

	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// ks are the tool rounds per run: a run of k rounds is k+1 model calls.
var ks = []int{1, 10, 50}

// maxK bounds the precomputed replies.
const maxK = 50

// refresh is how many runs a loopchart service, or an eino agent, serves
// before it is replaced (outside the timer). A service keeps its history
// and event log across runs, so a small value measures a near-empty
// session and a large one a long session; eino keeps nothing between
// runs. It must stay under idRuns, so that both fakes answer from their
// shared tables.
var refresh = flag.Int("refresh", 50, "loopchart and eino: replace the service (agent) every N runs (outside the timer); at most 64")

// checkRefresh fails b when -refresh is not 1..idRuns.
func checkRefresh(b *testing.B) {
	if *refresh < 1 || *refresh > idRuns {
		b.Fatalf("-refresh %d: want 1 to %d (runs past %d would make the fakes' replies inside the timer)", *refresh, idRuns, idRuns)
	}
}

// refreshAt calls fresh outside the timer before run i when a -refresh
// interval has passed.
func refreshAt(b *testing.B, i int, fresh func()) {
	if i > 0 && i%*refresh == 0 {
		b.StopTimer()
		fresh()
		b.StartTimer()
	}
}

// perStep reports ns/step = ns/op / (k+1), steps being model calls.
func perStep(b *testing.B, k int) {
	if b.N == 0 {
		return
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(k+1), "ns/step")
}

// ---- loopchart ----

// The fakes' call ids are "r<run>-c<n>", run counted per model (a
// session's, or an eino agent's), so they never repeat within a session,
// as a real provider's never do. A fake whose ids repeat from run to run
// makes loopchart repair every call's id (a session's tool call ids must
// be unique: results are matched to calls by id), a path a real provider
// never takes. The replies of the first idRuns runs are made once and
// shared (the single-session benchmarks replace their session every 50
// runs); a later run's are made as it asks for them, as a provider makes
// each reply anew.
const idRuns = 64

// callID is the id of the fakes' call n in run r.
func callID(r, n int) string { return fmt.Sprintf("r%d-c%d", r, n) }

// lcCall is the loopchart fake's reply for call n of run r.
func lcCall(r, n int) []vocab.StreamPart {
	// Each step's call has arguments of its own: the same call with the
	// same result 20 times over is a loop, which loopchart stops.
	call := &vocab.ToolCall{ID: callID(r, n), Name: "noop", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))}
	return []vocab.StreamPart{{Kind: vocab.StreamToolCall, Call: call}, lcUsage, {Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}}
}

// lcCalls are the loopchart fake's tool-call replies of the first idRuns
// runs, [run][n], made once and shared read-only by every lcProvider.
var lcCalls = sync.OnceValue(func() *[idRuns][maxK][]vocab.StreamPart {
	var t [idRuns][maxK][]vocab.StreamPart
	for r := range t {
		for n := range t[r] {
			t[r][n] = lcCall(r, n)
		}
	}
	return &t
})

var (
	lcUsage = vocab.StreamPart{Kind: vocab.StreamUsage, Usage: &vocab.Usage{InputTokens: 10, OutputTokens: 2}}
	lcFinal = []vocab.StreamPart{{Kind: vocab.StreamText, Text: "done"}, lcUsage, {Kind: vocab.StreamFinish, Finish: vocab.FinishStop}}
)

// lcProvider is a fake vocab.Provider: within a run (the messages after
// the last user message) it answers with one noop({"i": n}) call while fewer
// than k tool results are in the request, then with the text "done", and
// the next run begins. Its replies are precomputed and shared read-only
// (lcCalls), so the fake itself allocates only the iterator.
type lcProvider struct {
	k     int
	calls *[idRuns][maxK][]vocab.StreamPart
	run   atomic.Int64 // runs answered "done"
}

func newLCProvider(k int) *lcProvider { return &lcProvider{k: k, calls: lcCalls()} }

func (p *lcProvider) Stream(_ context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	n := 0 // tool results since the last user message: the calls already made in this run
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != vocab.RoleUser; i-- {
		if req.Messages[i].Role == vocab.RoleTool {
			n++
		}
	}
	parts := lcFinal
	switch r := int(p.run.Load()); {
	case n >= p.k:
		p.run.Add(1)
	case r < idRuns:
		parts = p.calls[r][n]
	default:
		parts = lcCall(r, n)
	}
	return func(yield func(vocab.StreamPart, error) bool) {
		for _, part := range parts {
			if !yield(part, nil) {
				return
			}
		}
	}
}

// prompt runs one prompt on a loopchart session to its end: the
// synchronous call (runSync) or Submit then Wait (runSubmit).
type prompt func(ctx context.Context, svc *agentsvc.Service) (vocab.PromptResult, error)

// runSync runs the prompt with agentsvc.Service.RunText: the caller runs
// the prompt's model requests and tool calls itself, like eino's
// synchronous Generate.
func runSync(ctx context.Context, svc *agentsvc.Service) (vocab.PromptResult, error) {
	return svc.RunText(ctx, "go")
}

// runSubmit submits the prompt (SubmitText) and waits for it (Wait): the
// session starts its first request on a goroutine of its own, and the
// caller is woken when the prompt ends.
func runSubmit(ctx context.Context, svc *agentsvc.Service) (vocab.PromptResult, error) {
	p, err := svc.SubmitText("go")
	if err != nil {
		return vocab.PromptResult{}, err
	}
	return p.Wait(ctx)
}

// BenchmarkLoopchart measures one full agent run per op through the public
// API with the synchronous call (agentsvc: RunText), the like-for-like
// peer of eino's Generate: k tool rounds then a final answer, every event
// written to the session's in-memory log.
func BenchmarkLoopchart(b *testing.B) { benchLoopchart(b, runSync) }

// BenchmarkLoopchartSubmit is BenchmarkLoopchart through SubmitText then
// Wait.
func BenchmarkLoopchartSubmit(b *testing.B) { benchLoopchart(b, runSubmit) }

// BenchmarkLoopchartRawTool is BenchmarkLoopchart with a tool that, like
// eino's noop (an InvokableRun that returns "ok"), never reads its
// arguments: a vocab.Tool of its own instead of tools.Func, which decodes
// them into noopArgs. The difference between the two is the typed tool's
// work, not the loop's.
func BenchmarkLoopchartRawTool(b *testing.B) { benchLoopchartWith(b, runSync, rawNoop{}, nil) }

// BenchmarkLoopchartOutsideStore is BenchmarkLoopchart with the session's
// events handed to a store outside the process instead of the in-memory
// log: a Sink that accepts every batch and keeps nothing (outsideStore),
// with the 64-event window a session on a store that reads its events
// back gets. It measures what a step costs in the process when the log
// lives elsewhere, the commit left out (adapters/store measures commits).
// It is not the measure, which keeps the in-memory log: the
// difference between the two is what keeping every event in the
// process costs, mostly in the collector.
func BenchmarkLoopchartOutsideStore(b *testing.B) {
	benchLoopchartWith(b, runSync, typedNoop(), storeOutside)
}

// storeOutside hands a session's events to outsideStore, with the 64-event
// window of a session whose store reads its events back.
func storeOutside(o *agentsvc.Options) { o.Sink, o.Window = outsideStore{}, 64 }

// outsideStore stands in for a durable store outside the process whose
// commit costs nothing: it accepts every batch and keeps nothing.
type outsideStore struct{}

// Append implements agentsvc.Sink.
func (outsideStore) Append(context.Context, []vocab.Event) error { return nil }

func benchLoopchart(b *testing.B, run prompt) { benchLoopchartWith(b, run, typedNoop(), nil) }

// typedNoop is the benchmarks' no-op tool: a tools.Func that decodes its
// arguments into noopArgs and returns "ok".
func typedNoop() vocab.Tool {
	return tools.Func("noop", "does nothing", `{}`, func(context.Context, noopArgs) (string, error) { return "ok", nil })
}

// rawNoop is the no-op tool as a plain vocab.Tool: it returns "ok" and
// never reads its arguments (see BenchmarkLoopchartRawTool).
type rawNoop struct{}

// Spec implements vocab.Tool.
func (rawNoop) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "noop", Description: "does nothing", Schema: json.RawMessage(`{}`)}
}

// Run implements vocab.Tool.
func (rawNoop) Run(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
	return vocab.ToolResult{Content: "ok"}, nil
}

// BenchmarkLoopchartNewSession is BenchmarkLoopchart where every prompt is
// the first of a session that has just been opened (with the prompt's
// model and tool, in batches of newSessions made and then closed outside
// the timer): what a session's first prompt costs beyond a later one's,
// as an eino run always starts from nothing. Compare with BenchmarkEino.
func BenchmarkLoopchartNewSession(b *testing.B) {
	for _, k := range ks {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			ctx := context.Background()
			var svcs []*agentsvc.Service
			open := func() {
				closeAll(svcs)
				svcs = openAll(b, newSessions, func(int) (*agentsvc.Service, error) { return agentsvc.New(lcOptions(k)) })
			}
			open()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i > 0 && i%newSessions == 0 {
					b.StopTimer()
					open()
					b.StartTimer()
				}
				res, err := runSync(ctx, svcs[i%newSessions])
				if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
					b.Fatalf("run %d: %v %v, want completed{steps=%d}", i, res, err, k+1)
				}
			}
			b.StopTimer()
			perStep(b, k)
			closeAll(svcs)
		})
	}
}

// newSessions is how many sessions BenchmarkLoopchartNewSession opens at
// a time.
const newSessions = 256

func benchLoopchartWith(b *testing.B, run prompt, noop vocab.Tool, tweak func(*agentsvc.Options)) {
	for _, k := range ks {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			checkRefresh(b)
			ctx := context.Background()
			var svc *agentsvc.Service
			fresh := func() {
				if svc != nil {
					if err := svc.Close(ctx); err != nil {
						b.Fatal(err)
					}
				}
				var err error
				opt := lcOptions(k)
				opt.Tools = []vocab.Tool{noop}
				if tweak != nil {
					tweak(&opt)
				}
				svc, err = agentsvc.New(opt)
				if err != nil {
					b.Fatal(err)
				}
			}
			fresh()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				refreshAt(b, i, fresh)
				res, err := run(ctx, svc)
				if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
					b.Fatalf("run %d: %v %v, want completed{steps=%d}", i, res, err, k+1)
				}
			}
			b.StopTimer()
			perStep(b, k)
			if err := svc.Close(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// noopArgs are the noop tool's arguments: the step's number.
type noopArgs struct {
	I int `json:"i"`
}

// ---- eino ----

// einoModel is a fake model.ToolCallingChatModel: within a run (the
// messages after the last user message) it answers with one noop({"i": n}) call
// while fewer than k tool results are in the input, then with "done", and
// the next run begins. Generate and Stream give the same reply; Stream
// wraps it with schema.StreamReaderFromArray. Replies are precomputed and
// shared (einoCalls), with the same call ids as the loopchart fake's.
type einoModel struct {
	k     int
	calls *[idRuns][maxK]*schema.Message
	run   atomic.Int64 // runs answered "done"
}

// einoCall is the eino fake's reply for call n of run r.
func einoCall(r, n int) *schema.Message {
	return schema.AssistantMessage("", []schema.ToolCall{{
		ID: callID(r, n), Type: "function",
		Function: schema.FunctionCall{Name: "noop", Arguments: fmt.Sprintf(`{"i":%d}`, n)},
	}})
}

// einoCalls are the eino fake's tool-call replies of the first idRuns
// runs, [run][n], made once and shared read-only by every einoModel.
var einoCalls = sync.OnceValue(func() *[idRuns][maxK]*schema.Message {
	var t [idRuns][maxK]*schema.Message
	for r := range t {
		for n := range t[r] {
			t[r][n] = einoCall(r, n)
		}
	}
	return &t
})

var einoFinal = schema.AssistantMessage("done", nil)

func newEinoModel(k int) *einoModel { return &einoModel{k: k, calls: einoCalls()} }

func (m *einoModel) reply(input []*schema.Message) *schema.Message {
	n := 0
	for i := len(input) - 1; i >= 0 && input[i].Role != schema.User; i-- {
		if input[i].Role == schema.Tool {
			n++
		}
	}
	switch r := int(m.run.Load()); {
	case n >= m.k:
		m.run.Add(1)
		return einoFinal
	case r < idRuns:
		return m.calls[r][n]
	default:
		return einoCall(r, n)
	}
}

func (m *einoModel) Generate(_ context.Context, input []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return m.reply(input), nil
}

func (m *einoModel) Stream(_ context.Context, input []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{m.reply(input)}), nil
}

func (m *einoModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// einoNoop is the no-op tool.InvokableTool.
type einoNoop struct{}

var noopInfo = &schema.ToolInfo{Name: "noop", Desc: "does nothing"}

func (einoNoop) Info(context.Context) (*schema.ToolInfo, error) { return noopInfo, nil }

func (einoNoop) InvokableRun(context.Context, string, ...tool.Option) (string, error) {
	return "ok", nil
}

// BenchmarkEino measures one full eino ReAct agent run per op
// (react.Agent.Generate): k tool rounds then a final answer. The agent
// keeps no state between runs; it is replaced with its fake model every
// -refresh runs (outside the timer), as the loopchart service is, so both
// fakes answer from their shared tables (idRuns) and neither loop pays
// for making its fake's replies.
func BenchmarkEino(b *testing.B) {
	for _, k := range ks {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			checkRefresh(b)
			ctx := context.Background()
			var ag *react.Agent
			fresh := func() {
				var err error
				if ag, err = newEinoAgent(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
			fresh()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				refreshAt(b, i, fresh)
				out, err := ag.Generate(ctx, []*schema.Message{schema.UserMessage("go")})
				if err != nil || out == nil || out.Content != "done" {
					b.Fatalf("run %d: %v %v, want \"done\"", i, out, err)
				}
			}
			b.StopTimer()
			perStep(b, k)
		})
	}
}

// TestScenario checks both fakes against their loops once per k, including
// that the model really was called k+1 times.
func TestScenario(t *testing.T) {
	ctx := context.Background()
	noop := tools.Func("noop", "does nothing", `{}`, func(context.Context, noopArgs) (string, error) { return "ok", nil })
	for _, k := range ks {
		svc, err := agentsvc.New(agentsvc.Options{Provider: newLCProvider(k), Tools: []vocab.Tool{noop}})
		if err != nil {
			t.Fatal(err)
		}
		// Both paths, in turn: later runs must restart the count.
		paths := []prompt{runSync, runSubmit, runSync, runSubmit}
		for run, path := range paths {
			res, err := path(ctx, svc)
			if err != nil || res.Kind != vocab.PromptCompleted || res.Steps != k+1 {
				t.Fatalf("loopchart k=%d run %d: %v %v", k, run, res, err)
			}
		}
		h, err := svc.History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := len(paths) * (1 + 2*k + 1); h.Len() != want {
			t.Errorf("loopchart k=%d: history has %d messages, want %d", k, h.Len(), want)
		}
		// The fake's ids are unique in the session, so the session keeps
		// them as they came (a repeated id would have been replaced).
		if ids, want := callIDs(h), wantIDs(len(paths), k); !slices.Equal(ids, want) {
			t.Errorf("loopchart k=%d: call ids %v, want %v", k, ids, want)
		}
		svc.Close(ctx)

		cm := &countingModel{einoModel: newEinoModel(k)}
		ag, err := react.NewAgent(ctx, &react.AgentConfig{
			ToolCallingModel: cm,
			ToolsConfig:      compose.ToolsNodeConfig{Tools: []tool.BaseTool{einoNoop{}}, ExecuteSequentially: true},
			MaxStep:          2*k + 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		for run := range 3 {
			cm.n = 0
			out, err := ag.Generate(ctx, []*schema.Message{schema.UserMessage("go")})
			if err != nil || out.Content != "done" {
				t.Fatalf("eino k=%d run %d: %v %v", k, run, out, err)
			}
			if cm.n != k+1 {
				t.Errorf("eino k=%d run %d: %d model calls, want %d", k, run, cm.n, k+1)
			}
		}
		if got, want := cm.ids, wantIDs(3, k); !slices.Equal(got, want) {
			t.Errorf("eino k=%d: call ids %v, want %v", k, got, want)
		}
	}
}

// TestIDsPastTheTable: runs past the fakes' shared tables (idRuns) still
// answer with ids of their own, so a long session never takes loopchart's
// repair of a repeated id.
func TestIDsPastTheTable(t *testing.T) {
	ctx := context.Background()
	const k, runs = 2, idRuns + 3
	svc, err := agentsvc.New(lcOptions(k))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	for run := range runs {
		if res, err := svc.RunText(ctx, "go"); err != nil || res.Steps != k+1 {
			t.Fatalf("run %d: %v %v", run, res, err)
		}
	}
	h, err := svc.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids, want := callIDs(h), wantIDs(runs, k); !slices.Equal(ids, want) {
		t.Errorf("call ids past run %d differ from the fake's: got %v, want %v", idRuns, ids[min(idRuns*k, len(ids)):], want[idRuns*k:])
	}
	// The eino fake, driven as its agent drives it: the input holds the
	// run's tool results so far.
	m := newEinoModel(k)
	for r := range runs {
		input := []*schema.Message{schema.UserMessage("go")}
		for n := range k {
			out := m.reply(input)
			if len(out.ToolCalls) != 1 || out.ToolCalls[0].ID != callID(r, n) {
				t.Fatalf("eino run %d call %d: %v, want one call %s", r, n, out.ToolCalls, callID(r, n))
			}
			input = append(input, out, schema.ToolMessage("ok", out.ToolCalls[0].ID))
		}
		if out := m.reply(input); out.Content != "done" {
			t.Fatalf("eino run %d: %q after %d calls, want done", r, out.Content, k)
		}
	}
}

// countingModel counts model calls (Generate or Stream) for TestScenario.
// It also records the ids of the tool calls it answered with.
type countingModel struct {
	*einoModel
	n   int
	ids []string
}

func (m *countingModel) Generate(ctx context.Context, in []*schema.Message, o ...model.Option) (*schema.Message, error) {
	m.n++
	out, err := m.einoModel.Generate(ctx, in, o...)
	m.record(out)
	return out, err
}

func (m *countingModel) Stream(ctx context.Context, in []*schema.Message, o ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m.n++
	out := m.reply(in)
	m.record(out)
	return schema.StreamReaderFromArray([]*schema.Message{out}), nil
}

func (m *countingModel) record(out *schema.Message) {
	for _, c := range out.ToolCalls {
		m.ids = append(m.ids, c.ID)
	}
}

// callIDs are the ids of the tool calls in h, in order.
func callIDs(h vocab.History) []string {
	var ids []string
	for _, m := range h.All() {
		for _, c := range m.ToolCalls() {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// wantIDs are the fakes' call ids over runs runs of k rounds.
func wantIDs(runs, k int) []string {
	var ids []string
	for r := range runs {
		for n := range k {
			ids = append(ids, callID(r, n))
		}
	}
	return ids
}

func (m *countingModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

// sessions is the number of concurrent sessions of the throughput
// benchmarks; sessions10k that of the 10,000-session ones.
//
// warmUp: each throughput benchmark runs one op before its timer starts
// (eino's runs and loopchart's sessions alike). A benchmark timed with
// b.Loop and -benchtime Nx is called once, so without it the first op of
// the process would pay for the heap growing from nothing, which a
// long-running server pays once; b.N-style benchmarks get this warm-up
// from their ramp-up calls. A long-lived loopchart session keeps its
// warm-up prompt, as it keeps every later one.
const (
	sessions    = 1000
	sessions10k = 10000
)

// BenchmarkConcurrentLoopchart measures throughput with many sessions at
// once: one op is 1,000 sessions each running one k=10 prompt with the
// synchronous call (RunText, each on a goroutine of the benchmark's), all
// at the same time (GOMAXPROCS threads share them). It reports steps/s;
// compare with BenchmarkConcurrentEino in the same run.
func BenchmarkConcurrentLoopchart(b *testing.B) { concurrentLoopchart(b, sessions, runSync) }

// BenchmarkConcurrentLoopchartSubmit is BenchmarkConcurrentLoopchart
// through SubmitText then Wait.
func BenchmarkConcurrentLoopchartSubmit(b *testing.B) { concurrentLoopchart(b, sessions, runSubmit) }

// BenchmarkConcurrentEino is BenchmarkConcurrentLoopchart for eino's ReAct
// agent: 1,000 concurrent runs of k=10 per op, one agent per run.
func BenchmarkConcurrentEino(b *testing.B) { concurrentEino(b, sessions, 10) }

// BenchmarkConcurrentEinoOneTurn is BenchmarkConcurrentEino with one run
// of three steps (k=2) per agent per op: the peer of
// BenchmarkConcurrentLoopchartOneTurn.
func BenchmarkConcurrentEinoOneTurn(b *testing.B) { concurrentEino(b, sessions, 2) }

// BenchmarkConcurrent10kLoopchart is BenchmarkConcurrentLoopchart with
// 10,000 sessions (agentsvc.New, in-memory sink, the same fake model and
// no-op tool) each running one k=10 prompt (RunText) per op, all at once. Compare
// with BenchmarkConcurrent10kEino in the same run (-bench Concurrent10k).
func BenchmarkConcurrent10kLoopchart(b *testing.B) { concurrentLoopchart(b, sessions10k, runSync) }

// BenchmarkConcurrent10kEino is BenchmarkConcurrentEino with 10,000
// concurrent runs per op.
func BenchmarkConcurrent10kEino(b *testing.B) { concurrentEino(b, sessions10k, 10) }

// BenchmarkConcurrent10kHost is BenchmarkConcurrent10kLoopchart with the
// 10,000 sessions opened by one agentsvc.Host on the in-memory store, its
// global lane capped at 10,000 (every session may run at once; each slot
// wait, grant and release is logged). Compare with
// BenchmarkConcurrent10kEino in the same run.
func BenchmarkConcurrent10kHost(b *testing.B) {
	const k = 10
	h, err := agentsvc.NewHost(agentsvc.HostOptions{Store: memory.New(), MaxRunning: sessions10k,
		Session: func(agentsvc.SessionInfo) (agentsvc.Options, error) { return lcOptions(k), nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	concurrent(b, sessions10k, k, runSync, func(i int) (*agentsvc.Service, error) {
		return h.Open(context.Background(), vocab.ID(fmt.Sprintf("s%d", i)))
	})
}

// lcOptions are the options of a loopchart session of the benchmarks: the
// fake model of k rounds, the no-op tool, sequential ids, no jitter.
func lcOptions(k int) agentsvc.Options {
	return agentsvc.Options{Provider: newLCProvider(k), Tools: []vocab.Tool{typedNoop()},
		IDs: &vocab.SeqSource{}, Jitter: func() float64 { return 0 }}
}

// concurrentLoopchart runs n loopchart sessions at once per op, each one
// k=10 prompt run by run, and reports steps/s. The sessions live across
// ops (each keeps its history and log, as a long-lived session does).
func concurrentLoopchart(b *testing.B, n int, run prompt) {
	const k = 10
	concurrent(b, n, k, run, func(int) (*agentsvc.Service, error) { return agentsvc.New(lcOptions(k)) })
}

// BenchmarkConcurrentLoopchartOutsideStore is BenchmarkConcurrentLoopchart
// with each session's events handed to a store outside the process (see
// BenchmarkLoopchartOutsideStore): the sessions live across ops and keep
// their histories, but not their logs, in the process.
func BenchmarkConcurrentLoopchartOutsideStore(b *testing.B) {
	const k = 10
	concurrent(b, sessions, k, runSync, func(int) (*agentsvc.Service, error) {
		opt := lcOptions(k)
		storeOutside(&opt)
		return agentsvc.New(opt)
	})
}

// BenchmarkConcurrentLoopchartFresh is BenchmarkConcurrentLoopchart with
// new sessions for every op, made and closed outside the timer: each
// prompt runs on an empty session, as each eino run starts from nothing,
// so the difference between the two loopchart benchmarks is what the
// sessions' growing logs and histories cost.
func BenchmarkConcurrentLoopchartFresh(b *testing.B) { concurrentFresh(b, 10) }

// BenchmarkConcurrentLoopchartOneTurn is the issue's own measure of many
// sessions, in the shape its baseline was taken: 1,000 sessions, each
// running one turn of three steps (k=2) on the in-memory sink, all at
// once; new sessions every op, made and closed outside the timer. Compare
// with BenchmarkConcurrentEinoOneTurn in the same run.
func BenchmarkConcurrentLoopchartOneTurn(b *testing.B) { concurrentFresh(b, 2) }

// concurrentFresh runs one k-round prompt on each of 1,000 new sessions at
// once per op (see BenchmarkConcurrentLoopchartFresh).
func concurrentFresh(b *testing.B, k int) {
	open := func() []*agentsvc.Service {
		return openAll(b, sessions, func(int) (*agentsvc.Service, error) { return agentsvc.New(lcOptions(k)) })
	}
	svcs := open()
	runAll(b, svcs, k, runSync) // the warm-up op (see warmUp), on sessions of its own
	closeAll(svcs)
	svcs = open()
	var cpu cpuTime
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i > 0 {
			b.StopTimer()
			closeAll(svcs)
			svcs = open()
			b.StartTimer()
		}
		cpu.run(func() { runAll(b, svcs, k, runSync) })
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*sessions*(k+1))/b.Elapsed().Seconds(), "steps/s")
	cpu.report(b, b.N*sessions*(k+1))
	closeAll(svcs)
}

// closeAll closes every session of svcs.
func closeAll(svcs []*agentsvc.Service) {
	for _, svc := range svcs {
		svc.Close(context.Background())
	}
}

// runAll runs one prompt of k rounds on every session at once, each on a
// goroutine of its own, and fails b when one does not complete.
func runAll(b *testing.B, svcs []*agentsvc.Service, k int, run prompt) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(svcs))
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := run(ctx, svc); err != nil || res.Steps != k+1 {
				errs <- fmt.Errorf("%v %v", res, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// openAll opens n sessions with open.
func openAll(b *testing.B, n int, open func(i int) (*agentsvc.Service, error)) []*agentsvc.Service {
	svcs := make([]*agentsvc.Service, n)
	for i := range svcs {
		var err error
		if svcs[i], err = open(i); err != nil {
			b.Fatal(err)
		}
	}
	return svcs
}

// concurrent runs n sessions (made by open) at once per op, each one
// prompt of k rounds run by run, and reports steps/s.
func concurrent(b *testing.B, n, k int, run prompt, open func(i int) (*agentsvc.Service, error)) {
	svcs := openAll(b, n, open)
	runAll(b, svcs, k, run) // the warm-up op (see warmUp)
	var cpu cpuTime
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cpu.run(func() { runAll(b, svcs, k, run) })
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n*(k+1))/b.Elapsed().Seconds(), "steps/s")
	cpu.report(b, b.N*n*(k+1))
	closeAll(svcs)
}

// newEinoAgent is the eino ReAct agent of the benchmarks: the fake model
// of k rounds, the no-op tool run sequentially, and a step cap that a
// k-round run never reaches (eino counts graph supersteps, not turns).
func newEinoAgent(ctx context.Context, k int) (*react.Agent, error) {
	return react.NewAgent(ctx, &react.AgentConfig{
		ToolCallingModel: newEinoModel(k),
		ToolsConfig:      compose.ToolsNodeConfig{Tools: []tool.BaseTool{einoNoop{}}, ExecuteSequentially: true},
		MaxStep:          2*k + 4,
	})
}

// concurrentEino runs n eino ReAct agents at once per op, each one
// k-round run, and reports steps/s.
func concurrentEino(b *testing.B, n, k int) {
	ctx := context.Background()
	ags := make([]*react.Agent, n)
	for i := range ags {
		var err error
		if ags[i], err = newEinoAgent(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	runAll := func() {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, ag := range ags {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := ag.Generate(ctx, []*schema.Message{schema.UserMessage("go")})
				if err != nil || out.Content != "done" {
					errs <- fmt.Errorf("%v %v", out, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	runAll() // the warm-up op (see warmUp)
	b.ReportAllocs()
	b.ResetTimer()
	var cpu cpuTime
	for b.Loop() {
		cpu.run(runAll)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n*(k+1))/b.Elapsed().Seconds(), "steps/s")
	cpu.report(b, b.N*n*(k+1))
}
