package servertest

// Capacity measurements: one scripted turn ("tool please": one echo call,
// then the answer — two steps) on the real in-process Temporal server and
// on the in-process lane (agentsvc), one session per benchmark, one turn
// per iteration.
//
//	go test -run '^$' -bench BenchmarkTurn -benchtime 100x -count 3 .
//
// The temporal sub-benchmarks also report what a turn costs in Temporal
// history. The server suggests continue-as-new once a run's history
// reaches 4,096 events (limit.historyCount.suggestContinueAsNew) and
// terminates a run at 51,200 (limit.historyCount.error, the hard limit);
// turns-before-continue-as-new is 4,096 / history-events/turn. It also
// suggests continue-as-new at 4 MiB of history
// (limit.historySize.suggestContinueAsNew; hard limit 50 MiB), and
// history-bytes/turn (the events' encoded size) is not constant: every
// model request's arguments carry one reference (67 bytes) per message
// of the conversation, so a turn's bytes grow with the conversation and,
// past ~100 turns of this workload, the size suggestion comes first. The
// session's own ContinueAfter is set out of reach so that only the
// server's suggestions end a run; a benchmark that reaches one does
// continue as new, and all its runs are counted (metric runs).
//
// A session's history grows with every turn and each model request
// carries all of it, so ns/op rises slowly with -benchtime on both
// engines; compare rows of one -benchtime. On the in-process server the
// temporal turn is dominated by the dispatch of the workflow task that
// follows each activity's completion (WorkflowTaskScheduled to
// WorkflowTaskStarted): about 2 ms for a session's first ~250 history
// events, about 40 ms after that (three such tasks a turn: a turn of
// ~40 ms becomes ~145 ms), whichever way the benchmark waits and however
// many pollers the worker has. The update's task and the activities
// (dispatched eagerly) start within ~2 ms throughout.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"
	"google.golang.org/protobuf/proto"

	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/machines/session"
	"github.com/loopchart/loopchart/vocab"
)

// benchPrompt asks for one echo call, then the answer: two steps.
const benchPrompt = "tool please"

// benchSuggestCAN is the history length at which the server suggests
// continue-as-new (its hard limit is 51,200 events).
const benchSuggestCAN = 4096

func BenchmarkTurn(b *testing.B) {
	b.Run("temporal", func(b *testing.B) { benchTemporal(b, false) })
	b.Run("temporal-events", func(b *testing.B) { benchTemporal(b, true) })
	b.Run("lane", benchLane)
}

// benchSessions numbers the sessions of this binary's benchmarks.
var benchSessions atomic.Int64

// benchRig is newRig for a testing.TB: a client and a worker on a queue of
// their own, on the shared server.
type benchRig struct {
	c     client.Client
	lc    *lt.Client
	queue string
}

func newBenchRig(tb testing.TB, p *Provider) *benchRig {
	tb.Helper()
	srvOnce.Do(func() { srv = temporaltest.NewServer() })
	queue := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	c := srv.NewClientWithOptions(client.Options{Logger: quiet{}})
	tb.Cleanup(c.Close)
	lc, err := lt.NewClient(c, queue)
	if err != nil {
		tb.Fatal(err)
	}
	acts, err := Activities(p, lt.NewMemoryContent(), Block{})
	if err != nil {
		tb.Fatal(err)
	}
	w := worker.New(c, queue, worker.Options{})
	if err := lt.Register(w, acts); err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	return &benchRig{c: c, lc: lc, queue: queue}
}

// benchTemporal runs turns of one session on the real server. Without
// events it waits as a user would, with Client.Wait, whose prompt queries
// back off from 20 ms (asks at about 0, 20, 60, 140 ms… after the
// submit): its ns/op is what a user of Wait sees, quantised by that
// polling (a turn of 50 ms is seen at 60 ms, one of 70 ms at 140 ms).
// With events it waits by following the workflow's history and asks for the
// prompt only once the session may have come to rest (historyFollower),
// so ns/op is the turn itself plus about one query.
func benchTemporal(b *testing.B, events bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p := &Provider{}
	r := newBenchRig(b, p)
	s := vocab.ID(fmt.Sprintf("bench-%s-%d", r.queue, benchSessions.Add(1)))
	cfg := session.Config{Session: s, Tools: Specs()}
	if err := r.lc.Start(ctx, cfg, lt.StartOptions{Options: lt.Options{ContinueAfter: 1 << 30}}); err != nil {
		b.Fatal(err)
	}
	desc, err := r.c.DescribeWorkflowExecution(ctx, string(s), "")
	if err != nil {
		b.Fatal(err)
	}
	firstRun := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	wait := func(id vocab.ID) (vocab.PromptResult, error) { return r.lc.Wait(ctx, s, id) }
	unfollow := func() {}
	if events {
		fctx, stop := context.WithCancel(ctx)
		f := followHistory(fctx, r.c, srv.GetDefaultNamespace(), string(s))
		unfollow = func() {
			stop()
			<-f.done
		}
		defer unfollow()
		wait = func(id vocab.ID) (vocab.PromptResult, error) { return f.wait(ctx, r.lc, s, id) }
	}
	turn := func() int {
		ack, err := r.lc.Submit(ctx, s, user(benchPrompt))
		if err != nil {
			b.Fatal(err)
		}
		res, err := wait(ack.ID)
		if err != nil {
			b.Fatal(err)
		}
		if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
			b.Fatalf("prompt %+v, want completed in 2 steps", res)
		}
		return res.Steps
	}

	// One turn first: the workflow runs and the worker has it cached.
	turn()
	hist0, bytes0, _ := benchHistory(b, ctx, r.c, string(s), firstRun)
	st0, err := r.lc.Status(ctx, s)
	if err != nil {
		b.Fatal(err)
	}

	steps := 0
	for b.Loop() {
		steps += turn()
	}
	unfollow()

	hist, bytes, runs := benchHistory(b, ctx, r.c, string(s), firstRun)
	st, err := r.lc.Status(ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	turns := float64(b.N)
	perTurn := float64(hist-hist0) / turns
	b.ReportMetric(perTurn, "history-events/turn")
	b.ReportMetric(float64(hist-hist0)/float64(steps), "history-events/step")
	b.ReportMetric(float64(bytes-bytes0)/turns, "history-bytes/turn")
	b.ReportMetric(float64(st.Seq-st0.Seq)/turns, "loopchart-events/turn")
	b.ReportMetric(benchSuggestCAN/perTurn, "turns-before-continue-as-new")
	b.ReportMetric(float64(runs), "runs")

	if err := r.lc.Close(ctx, s); err != nil {
		b.Fatal(err)
	}
	if _, err := r.lc.WaitClosed(ctx, s); err != nil {
		b.Fatal(err)
	}
}

// benchHistory counts the history events of every run of workflow wid,
// and their encoded size, from its first run along the continue-as-new
// chain.
func benchHistory(b *testing.B, ctx context.Context, c client.Client, wid, run string) (events, bytes, runs int) {
	b.Helper()
	for run != "" {
		runs++
		it := c.GetWorkflowHistory(ctx, wid, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		run = ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			events++
			bytes += proto.Size(ev)
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				run = a.GetNewExecutionRunId()
			}
		}
	}
	return events, bytes, runs
}

// historyFollower follows a workflow's history with long polls (the
// server answers one as soon as events are appended), across
// continue-as-new, and ticks when a workflow task completed without
// scheduling an activity: the session may have come to rest, and only
// then is the prompt worth asking for (each query is answered by the
// worker). A page that ends
// between a task's completion and the activity it scheduled only makes a
// tick too many, never one too few; the turns of this benchmark end in a
// task that schedules no activity.
type historyFollower struct {
	tick chan struct{}
	done chan struct{}
	err  error // set before done is closed
}

func followHistory(ctx context.Context, c client.Client, ns, wid string) *historyFollower {
	f := &historyFollower{tick: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		var token []byte
		rest := false
		for {
			// No run id: the current run. When it continues as new, its
			// history ends (no token) and the next request reads the new
			// run from its start.
			resp, err := c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
				Namespace: ns, Execution: &commonpb.WorkflowExecution{WorkflowId: wid}, WaitNewEvent: true,
				NextPageToken: token,
			})
			if err != nil {
				f.err = err
				return
			}
			for _, ev := range resp.GetHistory().GetEvents() {
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
					rest = true
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
					rest = false
				}
			}
			if rest {
				rest = false
				select {
				case f.tick <- struct{}{}:
				default: // a tick is pending already
				}
			}
			token = resp.GetNextPageToken()
		}
	}()
	return f
}

// wait asks for the prompt, and again after every tick since the last
// ask, until it ended.
func (f *historyFollower) wait(ctx context.Context, lc *lt.Client, s, id vocab.ID) (vocab.PromptResult, error) {
	for {
		ps, err := lc.Prompt(ctx, s, id)
		if err != nil {
			return vocab.PromptResult{}, err
		}
		if ps.Ended && ps.Result != nil {
			return *ps.Result, nil
		}
		select {
		case <-f.tick:
		case <-f.done:
			return vocab.PromptResult{}, errors.Join(errors.New("history follower stopped"), f.err)
		case <-ctx.Done():
			return vocab.PromptResult{}, context.Cause(ctx)
		}
	}
}

// benchLane runs the same turns in process: agentsvc with an in-memory
// log, the same provider and tools. Its turns log one event more than the
// workflow's: input/model.parts, the answer's streamed text (the model
// activity returns whole replies).
func benchLane(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	svc, err := agentsvc.New(agentsvc.Options{Provider: &Provider{}, Tools: []vocab.Tool{Echo{}, Block{}}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := svc.Close(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	turn := func() int {
		p, err := svc.SubmitText(benchPrompt)
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Kind != vocab.PromptCompleted || res.Steps != 2 {
			b.Fatalf("prompt %+v, want completed in 2 steps", res)
		}
		return res.Steps
	}
	turn()
	snap0, err := svc.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		turn()
	}
	snap, err := svc.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(snap.Seq-snap0.Seq)/float64(b.N), "loopchart-events/turn")
}
