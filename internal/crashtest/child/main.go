//go:build unix

// Command child is the process the crash tests of internal/crashtest kill:
// it opens agent sessions on a SQLite store (agentsvc.Open: a session the
// last child left is recovered), runs prompts through a slow streaming
// scripted provider and slow tools, and reports on file descriptor 3 every
// batch it is about to append, every append that returned, every event
// its sessions publish, every prompt submitted and ended (see
// crashtest.Line). With FAILPOINT=name and FAILPOINT_AT=n it kills itself
// with SIGKILL the n-th time the store passes that failpoint.
//
// It is built and run by the tests only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/internal/crashtest"
	"github.com/loopchart/loopchart/vocab"
)

var (
	dbPath    = flag.String("db", "", "the SQLite store")
	sessions  = flag.String("sessions", "crash", "comma-separated session ids, run side by side")
	seed      = flag.Int64("seed", 1, "seed of the script and of the prompts")
	run       = flag.Int("run", 0, "the number of this run (makes tool call ids unique)")
	prompts   = flag.Int("prompts", 0, "complete this many prompts per session, then close and exit 0 (0: run until killed)")
	storeCkpt = flag.Int("store-checkpoint", 8, "sqlite Options.CheckpointEvery (commits)")
	coreCkpt  = flag.Int("core-checkpoint", 60, "agentsvc Options.CheckpointEvery (events)")
	scriptLen = flag.Int("steps", 400, "steps of the script of each session")
	reportFD  = flag.Int("fd", 3, "the file descriptor to report on")
)

var rep *crashtest.Reporter

func main() {
	flag.Parse()
	f := os.NewFile(uintptr(*reportFD), "report")
	if f == nil {
		fmt.Fprintln(os.Stderr, "child: no report descriptor")
		os.Exit(2)
	}
	rep = crashtest.NewReporter(f)
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		report(crashtest.Line{T: crashtest.LineError, Msg: err.Error()})
		os.Exit(1)
	}
	report(crashtest.Line{T: crashtest.LineExit})
}

// report writes l; a child whose reader is gone has no reason to go on.
func report(l crashtest.Line) {
	if err := rep.Report(l); err != nil {
		fmt.Fprintln(os.Stderr, "child: report:", err)
		os.Exit(3)
	}
}

func die() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way: go no further
}

func mainErr() error {
	ctx := context.Background()
	if *dbPath == "" {
		return errors.New("no -db")
	}
	opts := sqlite.Options{CheckpointEvery: *storeCkpt}
	if name := os.Getenv("FAILPOINT"); name != "" {
		at, err := strconv.ParseInt(os.Getenv("FAILPOINT_AT"), 10, 64)
		if err != nil || at < 1 {
			return fmt.Errorf("FAILPOINT_AT %q: want a positive count", os.Getenv("FAILPOINT_AT"))
		}
		var hits atomic.Int64
		opts.Failpoint = func(fp string) {
			if fp != name {
				return
			}
			if n := hits.Add(1); n == at {
				report(crashtest.Line{T: crashtest.LineFailpoint, Name: fp, N: int(n)})
				die()
			}
		}
	}
	st, err := sqlite.Open(ctx, *dbPath, opts)
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	ws := &reportingStore{Store: st}
	ids := strings.Split(*sessions, ",")
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = runSession(ctx, st, ws, vocab.ID(id), uint64(i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return st.Close()
}

// runSession opens session id and runs prompts in it: forever (steering
// and cancelling now and then), or until -prompts of them completed.
func runSession(ctx context.Context, st *sqlite.Store, ws store.Store, id vocab.ID, index uint64) error {
	rng := rand.New(rand.NewPCG(uint64(*seed), index))
	script, err := scripted.Parse(makeScript(rng, id), string(id))
	if err != nil {
		return err
	}
	head, err := headOf(ctx, st, id)
	if err != nil {
		return err
	}
	svc, err := agentsvc.Open(ctx, ws, id, agentsvc.Options{
		Provider:        scripted.New(script, nil),
		Tools:           []vocab.Tool{sleepTool{}},
		CheckpointEvery: *coreCkpt,
		Model:           "m",
	})
	if err != nil {
		return fmt.Errorf("open session %s: %w", id, err)
	}
	seqOf := func() (uint64, error) {
		snap, err := svc.Snapshot(ctx)
		return snap.Seq, err
	}
	snap, err := svc.Snapshot(ctx)
	if err != nil {
		return err
	}
	var core struct {
		Prompts []string `json:"prompts"`
		Agent   struct {
			Ctx struct {
				NextTurn []vocab.Message `json:"nextTurn"`
			} `json:"ctx"`
		} `json:"agent"`
	}
	if err := json.Unmarshal(snap.Core, &core); err != nil {
		return fmt.Errorf("the core snapshot of %s: %w", id, err)
	}
	queued := []string{}
	for _, m := range core.Agent.Ctx.NextTurn {
		queued = append(queued, string(m.ID))
	}
	report(crashtest.Line{T: crashtest.LineOpen, S: string(id), Seq: snap.Seq, Queued: queued, Prompts: core.Prompts})
	seq := snap.Seq
	evDone := make(chan error, 1)
	go func() {
		for ev, err := range svc.Events(ctx, head+1) {
			if err != nil {
				evDone <- fmt.Errorf("events of %s: %w", id, err)
				return
			}
			report(crashtest.Line{T: crashtest.LineEvent, S: string(id), Seq: ev.Seq, Kind: string(ev.Kind), At: ev.At.UnixNano()})
		}
		evDone <- nil
	}()
	if err := svc.Continue(); err != nil {
		return fmt.Errorf("continue %s: %w", id, err)
	}
	completed := 0
	for n := 0; *prompts == 0 || completed < *prompts; {
		var ps []*agentsvc.Prompt
		for range 1 + rng.IntN(3) {
			n++
			p, err := svc.SubmitText(fmt.Sprintf("prompt %d of run %d", n, *run))
			if err != nil {
				return fmt.Errorf("submit to %s: %w", id, err)
			}
			if seq, err = seqOf(); err != nil {
				return err
			}
			report(crashtest.Line{T: crashtest.LineSubmit, S: string(id), ID: string(p.ID), Seq: seq})
			ps = append(ps, p)
		}
		if *prompts == 0 {
			// Until killed, now and then: steer the running turn (or start
			// one), or cancel it, keeping the queued prompts or not, so
			// that kills find steers queued, turns aborting and their
			// timers armed.
			switch rng.IntN(8) {
			case 0, 1:
				if _, err := svc.Steer(vocab.Message{Role: vocab.RoleUser, Source: vocab.SourceSteer,
					Parts: []vocab.Part{{Kind: vocab.PartText, Text: fmt.Sprintf("steer %d of run %d", n, *run)}}}); err != nil {
					return fmt.Errorf("steer %s: %w", id, err)
				}
			case 2:
				if err := svc.Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{KeepInbox: rng.IntN(2) == 0}); err != nil {
					return fmt.Errorf("cancel %s: %w", id, err)
				}
				// After an abort the agent rests, whatever is queued, until
				// the next wake; a Continue while the turn is still
				// aborting is absorbed, so wait for the rest first.
				if err := svc.WhenIdle(ctx); err != nil {
					return fmt.Errorf("wait for %s to rest: %w", id, err)
				}
				if err := svc.Continue(); err != nil {
					return fmt.Errorf("continue %s: %w", id, err)
				}
			}
		}
		for _, p := range ps {
			r, err := p.Wait(ctx)
			if err != nil {
				return fmt.Errorf("prompt %s of %s: %w", p.ID, id, err)
			}
			if seq, err = seqOf(); err != nil {
				return err
			}
			report(crashtest.Line{T: crashtest.LineDone, S: string(id), ID: string(p.ID), R: string(r.Kind), Seq: seq})
			if r.Kind == vocab.PromptCompleted {
				completed++
			}
		}
	}
	if err := svc.WhenIdle(ctx); err != nil {
		return err
	}
	if err := svc.Close(ctx); err != nil {
		return fmt.Errorf("close %s: %w", id, err)
	}
	return <-evDone
}

// headOf returns the head of session id in st, 0 when it has none.
func headOf(ctx context.Context, st store.Store, id vocab.ID) (uint64, error) {
	for info, err := range st.Sessions(ctx) {
		if err != nil {
			return 0, err
		}
		if info.Session == id {
			return info.Head, nil
		}
	}
	return 0, nil
}

// makeScript writes a script of -steps steps: streamed text (and some
// thinking) in small delayed parts, and in about half the steps tool calls
// of the sleep tool, with ids unique to this run.
func makeScript(rng *rand.Rand, id vocab.ID) []byte {
	type part struct {
		Text     *string `json:"text,omitempty"`
		Thinking *string `json:"thinking,omitempty"`
		Delay    string  `json:"delay,omitempty"`
	}
	type call struct {
		ID    string         `json:"id"`
		Name  string         `json:"name"`
		Args  map[string]int `json:"args"`
		Delay string         `json:"delay,omitempty"`
	}
	type step struct {
		Parts     []part `json:"parts,omitempty"`
		ToolCalls []call `json:"tool_calls,omitempty"`
	}
	delay := func() string { return fmt.Sprintf("%dus", rng.IntN(1500)) }
	steps := make([]step, *scriptLen)
	for i := range steps {
		s := &steps[i]
		if rng.IntN(4) == 0 {
			t := fmt.Sprintf("thinking about step %d", i+1)
			s.Parts = append(s.Parts, part{Thinking: &t, Delay: delay()})
		}
		for j := range 1 + rng.IntN(4) {
			t := fmt.Sprintf("word%d.%d ", i+1, j+1)
			s.Parts = append(s.Parts, part{Text: &t, Delay: delay()})
		}
		if rng.IntN(2) == 0 {
			for j := range 1 + rng.IntN(3) {
				args := map[string]int{"us": 500 + rng.IntN(4000)}
				if rng.IntN(3) == 0 {
					args["stubborn"] = 1
				}
				s.ToolCalls = append(s.ToolCalls, call{ID: fmt.Sprintf("%s-r%d-s%d-c%d", id, *run, i+1, j+1), Name: "sleep",
					Args: args, Delay: delay()})
			}
		}
	}
	b, err := json.Marshal(map[string]any{"name": string(id), "steps": steps})
	if err != nil {
		panic(err)
	}
	return b
}

// sleepTool waits the microseconds its "us" argument asks for on a timer,
// and writes nothing anywhere. It honours ctx, unless "stubborn" is 1: then
// a cancel finds it still running until its timer fires (a tool slow to
// stop keeps its turn aborting for a while).
type sleepTool struct{}

func (sleepTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: "sleep", Description: "waits a little",
		Schema: json.RawMessage(`{"type":"object","properties":{"us":{"type":"integer"},"stubborn":{"type":"integer"}}}`)}
}

func (sleepTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var args struct {
		US       int `json:"us"`
		Stubborn int `json:"stubborn"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return vocab.ToolResult{}, err
	}
	t := time.NewTimer(time.Duration(args.US) * time.Microsecond)
	defer t.Stop()
	done := ctx.Done()
	if args.Stubborn == 1 {
		done = nil
	}
	select {
	case <-t.C:
		return vocab.ToolResult{Content: fmt.Sprintf("slept %dus", args.US)}, nil
	case <-done:
		return vocab.ToolResult{}, context.Cause(ctx)
	}
}

// reportingStore reports every Append: the batch before it is handed to
// the store (from then on it may be committed), and the outcome once the
// store returns.
type reportingStore struct {
	store.Store
}

func (s *reportingStore) Append(ctx context.Context, session vocab.ID, claim store.Claim, batch []vocab.Event) error {
	if len(batch) == 0 {
		return s.Store.Append(ctx, session, claim, batch)
	}
	keys := make([]crashtest.EventKey, len(batch))
	for i, e := range batch {
		keys[i] = crashtest.EventKey{Seq: e.Seq, Kind: string(e.Kind), At: e.At.UnixNano()}
	}
	report(crashtest.Line{T: crashtest.LinePend, S: string(session), Seq: batch[0].Seq, N: len(batch), Events: keys})
	err := s.Store.Append(ctx, session, claim, batch)
	if err != nil {
		report(crashtest.Line{T: crashtest.LineFail, S: string(session), Seq: batch[0].Seq, N: len(batch), Msg: err.Error()})
		return err
	}
	report(crashtest.Line{T: crashtest.LineOK, S: string(session), Seq: batch[0].Seq, N: len(batch)})
	return nil
}
