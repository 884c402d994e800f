package agentsvc_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// scenario drives one AgentLoopService from testdata/scenarios/*.txt.
//
// Commands:
//
//	script               input: a scripted-provider JSON script
//	start [max-steps=N] [max-attempts=N] [reject-step=N] [fail-step=N]
//	      [block-prompt=TEXT] [rewrite-prompt=TEXT] [steer-on-stop=TEXT]
//	      [stop-after-step=N] [retry-on=CODE] [claim-rewrite=TEXT] [claim-drop]
//	do                   input: one action per line, each followed by settle:
//	                     submit TEXT | steer TEXT | inject TEXT | notify TEXT [bypass]
//	                     drop-notification (the last one) | remind KEY TEXT | cancel [cause=K] [keep-inbox] | pause | continue
//	                     advance DURATION | maintenance | maintenance-end | close
//	trace                the events since the last trace, compactly
//	results              every prompt's result, in submission order
type scenario struct {
	t       *testing.T
	script  *scripted.Script
	clk     *clock.Fake
	svc     *agentsvc.Service
	log     *eventlog.Memory
	seen    int
	prompts []*agentsvc.Prompt
	texts   []string
	notes   []*agentsvc.Notification
	maint   chan struct{}
	maintRC chan error
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// demo tools: echo returns its args; slow waits 10 s on the clock (and
// honours cancellation); stubborn waits 5 s ignoring cancellation; stopper asks the turn to stop; batchstop stops the
// batch after itself; broken fails.
func testTools(clk clock.Clock) []vocab.Tool {
	type args struct {
		Text string `json:"text"`
	}
	return []vocab.Tool{
		tools.Func("echo", "echo text", `{}`, func(_ context.Context, a args) (string, error) { return "echo: " + a.Text, nil }),
		tools.Func("slow", "wait 10s", `{}`, func(ctx context.Context, a args) (string, error) {
			if err := clk.Sleep(ctx, 10*time.Second); err != nil {
				return "", err
			}
			return "slow done", nil
		}),
		tools.Func("stubborn", "ignores cancellation for 5s", `{}`, func(ctx context.Context, a args) (string, error) {
			_ = clk.Sleep(context.Background(), 5*time.Second)
			return "stubborn done", nil
		}),
		&resultTool{name: "stopper", res: vocab.ToolResult{Content: "stopping", StopTurn: true, StopReason: "tool asked to stop"}},
		&resultTool{name: "batchstop", res: vocab.ToolResult{Content: "enough"}, stop: true},
		tools.Func("broken", "always fails", `{}`, func(context.Context, args) (string, error) { return "", errors.New("broken on purpose") }),
	}
}

type resultTool struct {
	name string
	res  vocab.ToolResult
	stop bool // declares that it stops its batch
}

func (r *resultTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: r.name, StopBatch: r.stop} }
func (r *resultTool) Run(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
	return r.res, nil
}

func (s *scenario) start(d *datadriven.TestData) {
	if s.script == nil {
		d.Fatalf(s.t, "start before script")
	}
	s.clk = clock.NewFake(epoch)
	s.log = eventlog.NewMemory()
	// The scenarios step the clock by hand; the stream watchdog (tested in
	// adapters/engine) would add a timer to every model request.
	opt := agentsvc.Options{Provider: scripted.New(s.script, s.clk), Tools: testTools(s.clk), Clock: s.clk,
		IDs: &vocab.SeqSource{}, Sink: s.log, Jitter: func() float64 { return 0 }, NoStreamWatchdog: true}
	var hooksToAdd []func(*agentsvc.Service)
	for _, a := range d.CmdArgs {
		v := strings.Join(a.Vals, ",")
		n := 0
		fmt.Sscan(v, &n)
		switch a.Key {
		case "max-steps":
			opt.MaxSteps = n
		case "max-attempts":
			opt.MaxAttempts = n
		case "reject-step":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnWillBeginStep.Register("reject", func(ctx context.Context, c *agentsvc.StepContext, next hookNext[*agentsvc.StepContext]) (*agentsvc.StepContext, error) {
					if c.Step == n {
						c.Reject, c.Reason = true, "step budget"
						return c, nil
					}
					return next(ctx, c)
				})
			})
		case "fail-step":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnWillBeginStep.Register("fail", func(ctx context.Context, c *agentsvc.StepContext, next hookNext[*agentsvc.StepContext]) (*agentsvc.StepContext, error) {
					if c.Step == n {
						return c, errors.New("context window compaction failed")
					}
					return next(ctx, c)
				})
			})
		case "claim-rewrite":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnWillBeginStep.Register("rewrite", func(ctx context.Context, c *agentsvc.StepContext, next hookNext[*agentsvc.StepContext]) (*agentsvc.StepContext, error) {
					for i := range c.Claimed {
						c.Claimed[i].Parts = []vocab.Part{{Kind: vocab.PartText, Text: v + c.Claimed[i].Text()}}
					}
					return next(ctx, c)
				})
			})
		case "claim-drop":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnWillBeginStep.Register("drop", func(ctx context.Context, c *agentsvc.StepContext, next hookNext[*agentsvc.StepContext]) (*agentsvc.StepContext, error) {
					c.Claimed = nil
					return next(ctx, c)
				})
			})
		case "block-prompt":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnBeforeSubmitPrompt.Register("block", func(ctx context.Context, c *agentsvc.PromptContext, next hookNext[*agentsvc.PromptContext]) (*agentsvc.PromptContext, error) {
					if strings.Contains(c.Prompt.Text(), v) {
						c.Block, c.Reason = true, "policy: "+v
						return c, nil
					}
					return next(ctx, c)
				})
			})
		case "steer-on-stop":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				done := false
				svc.OnTurnStopping.Register("nudge", func(ctx context.Context, info agentsvc.StepInfo) (struct{}, error) {
					if !done {
						done = true
						_, err := svc.Steer(vocab.UserText(v))
						return struct{}{}, err
					}
					return struct{}{}, nil
				})
			})
		case "stop-after-step":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				svc.OnDidFinishStep.Register("stop", func(ctx context.Context, c *agentsvc.StepEndContext, next hookNext[*agentsvc.StepEndContext]) (*agentsvc.StepEndContext, error) {
					if c.Step == n {
						c.StopTurn, c.Reason = true, "hook budget"
					}
					return next(ctx, c)
				})
			})
		case "retry-on":
			hooksToAdd = append(hooksToAdd, func(svc *agentsvc.Service) {
				used := false
				svc.RegisterLoopErrorHandler(agentsvc.ErrorHandler{ID: "rebuild",
					Match: func(err *vocab.Error) bool { return string(err.Code) == v && !used },
					Handle: func(ctx context.Context, c *agentsvc.ErrorContext) error {
						used = true
						h := append(c.History.Messages(), vocab.UserText("(history rebuilt after "+string(c.Err.Code)+")"))
						c.Retry(h)
						return nil
					}})
			})
		default:
			d.Fatalf(s.t, "unknown start arg %q", a.Key)
		}
	}
	svc, err := agentsvc.New(opt)
	if err != nil {
		d.Fatalf(s.t, "%v", err)
	}
	for _, h := range hooksToAdd {
		h(svc)
	}
	s.svc = svc
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Work that ignores cancellation (the stubborn tool) ends when
		// virtual time passes: keep the clock moving while closing.
		moved := make(chan struct{})
		go func() {
			defer close(moved)
			for s.clk.WaitForPending(ctx, 1) == nil {
				s.clk.Advance(time.Second)
			}
		}()
		if err := svc.Close(ctx); err != nil {
			s.t.Errorf("close: %v", err)
		}
		cancel()
		<-moved
	})
}

// settle waits until the session cannot move without the clock: nothing
// queued for the lane, and every worker asleep on the fake clock.
func (s *scenario) settle() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := agentsvc.LaneStats(s.svc)
		// Armed timers (the run's timeout among them) are on the clock too.
		if !st.Driving && st.Queued == 0 && st.Workers+st.Timers == s.clk.Pending() {
			// Check twice: a worker may have been between two counters.
			runtime.Gosched()
			st2 := agentsvc.LaneStats(s.svc)
			if st2 == st && st.Workers+st.Timers == s.clk.Pending() {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("session did not settle: %+v, clock pending %d", st, s.clk.Pending())
		}
		runtime.Gosched()
	}
}

func (s *scenario) do(d *datadriven.TestData) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		cmd, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		text, flags := parseText(rest)
		var err error
		extra := ""
		switch cmd {
		case "submit":
			var p *agentsvc.Prompt
			p, err = s.svc.SubmitText(text)
			if err == nil {
				s.prompts = append(s.prompts, p)
				s.texts = append(s.texts, text)
			}
		case "steer":
			_, err = s.svc.Steer(vocab.UserText(text))
		case "inject":
			_, err = s.svc.Inject(vocab.UserText(text))
		case "notify":
			var n *agentsvc.Notification
			n, err = s.svc.Notify(vocab.Message{Role: vocab.RoleUser, Parts: []vocab.Part{{Kind: vocab.PartText, Text: text}}},
				agentsvc.NotifyOptions{BypassMaxSteps: flags["bypass"] != ""})
			if err == nil {
				s.notes = append(s.notes, n)
			}
		case "drop-notification":
			n := s.notes[len(s.notes)-1]
			var ok bool
			ok, err = n.Drop()
			extra = fmt.Sprintf("dropped=%t\n", ok)
		case "remind":
			key, msg, _ := strings.Cut(text, " ")
			if u, uerr := strconv.Unquote(msg); uerr == nil {
				msg = u
			}
			_, err = s.svc.Remind(key, vocab.UserText(msg))
		case "cancel":
			cause := vocab.CancelCause{Kind: vocab.CancelKind(flags["cause"])}
			err = s.svc.Cancel(cause, agentsvc.CancelOptions{KeepInbox: flags["keep-inbox"] != ""})
		case "pause":
			err = s.svc.Pause()
		case "continue":
			err = s.svc.Continue()
		case "advance":
			dur, perr := time.ParseDuration(text)
			if perr != nil {
				d.Fatalf(s.t, "%v", perr)
			}
			s.clk.Advance(dur)
		case "maintenance":
			s.maint, s.maintRC = make(chan struct{}), make(chan error, 1)
			started := make(chan struct{})
			go func(release chan struct{}) {
				s.maintRC <- s.svc.RunMaintenance(context.Background(), func(ctx context.Context) error {
					close(started)
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				})
			}(s.maint)
			select {
			case <-started:
			case err = <-s.maintRC:
			}
		case "maintenance-end":
			close(s.maint)
			err = <-s.maintRC
		case "close":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = s.svc.Close(ctx)
			cancel()
			fmt.Fprintf(&b, "> %s\n", line)
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			}
			continue
		default:
			d.Fatalf(s.t, "unknown action %q", cmd)
		}
		fmt.Fprintf(&b, "> %s\n%s", line, extra)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		s.settle()
	}
	return b.String()
}

// parseText splits `"quoted text" flag key=value` or `plain words`.
func parseText(rest string) (string, map[string]string) {
	flags := map[string]string{}
	rest = strings.TrimSpace(rest)
	text := rest
	if strings.HasPrefix(rest, `"`) {
		if end := strings.Index(rest[1:], `"`); end >= 0 {
			text = rest[1 : end+1]
			rest = rest[end+2:]
		}
	} else {
		rest = ""
		// bare flags (no quoted text)
		for _, w := range strings.Fields(text) {
			if k, v, ok := strings.Cut(w, "="); ok {
				flags[k] = v
			} else {
				flags[w] = w
			}
		}
	}
	for _, w := range strings.Fields(rest) {
		if k, v, ok := strings.Cut(w, "="); ok {
			flags[k] = v
		} else {
			flags[w] = w
		}
	}
	return text, flags
}

func (s *scenario) trace() string {
	events := s.log.Events()
	var b strings.Builder
	for _, ev := range events[s.seen:] {
		if line := compact(ev); line != "" {
			fmt.Fprintln(&b, line)
		}
	}
	s.seen = len(events)
	return b.String()
}

// compact renders one event on one line, or "" for stream noise
// (message start/update/end and machine transitions that are internal).
func compact(ev vocab.Event) string {
	where := ""
	if ev.Turn > 0 {
		where = fmt.Sprintf("t%d.%d ", ev.Turn, ev.Step)
	}
	at := fmt.Sprintf("%5.1fs ", ev.At.Sub(epoch).Seconds())
	switch p := ev.Payload.(type) {
	case vocab.TransitionPayload:
		who := p.Machine
		if p.Instance != "" {
			who += "/" + p.Instance
		}
		g := ""
		if p.Guard != "" {
			g = "[" + p.Guard + "]"
		}
		to := p.To
		if p.Internal {
			to = "(internal)"
		}
		return fmt.Sprintf("%s%s%s: %s -> %s (%s%s)", at, where, who, p.From, to, p.Trigger, g)
	case vocab.MessagePayload:
		switch ev.Kind {
		case vocab.EventUserMessage:
			return fmt.Sprintf("%s%suser %q", at, where, p.Message.Text())
		case vocab.EventAssistant:
			var calls []string
			for _, c := range p.Message.ToolCalls() {
				calls = append(calls, c.ID+":"+c.Name)
			}
			s := fmt.Sprintf("%s%sassistant %q", at, where, p.Message.Text())
			if len(calls) > 0 {
				s += " calls=" + strings.Join(calls, ",")
			}
			if p.Message.Source == vocab.SourceSalvaged {
				s += " (salvaged)"
			}
			return s
		}
		return ""
	case vocab.ToolPayload:
		if ev.Kind == vocab.EventToolResult && p.Result != nil {
			s := fmt.Sprintf("%s%sresult %s %q", at, where, p.Result.CallID, p.Result.Content)
			if p.Result.IsError {
				s += " !" + string(p.Result.Code)
			}
			return s
		}
		return ""
	case vocab.RetryPayload:
		return fmt.Sprintf("%s%sretry %d->%d/%d in %s (%s)", at, where, p.FailedAttempt, p.NextAttempt, p.MaxAttempts, p.Delay, p.Code)
	case vocab.TurnEndPayload:
		return fmt.Sprintf("%s%sturn end %s steps=%d", at, where, p.Reason, p.Steps)
	case vocab.InboxPayload:
		var ts []string
		for _, m := range p.Messages {
			ts = append(ts, fmt.Sprintf("%q", m.Text()))
		}
		return fmt.Sprintf("%s%sinbox %s %s [%s]", at, where, p.Target, p.Op, strings.Join(ts, " "))
	case vocab.PromptPayload:
		if p.State == "running" {
			return ""
		}
		return fmt.Sprintf("%s%sprompt %s", at, where, p.Detail)
	case vocab.StatusPayload:
		return fmt.Sprintf("%s%sstatus %s", at, where, p.Status)
	case vocab.ErrorPayload:
		what := "error"
		if ev.Kind == vocab.EventRecovering {
			what = "recovering from"
		}
		return fmt.Sprintf("%s%s%s %s: %s", at, where, what, p.Code, p.Message)
	}
	return ""
}

func (s *scenario) results() string {
	var b strings.Builder
	for i, p := range s.prompts {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := p.Wait(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "%q: error %v\n", s.texts[i], err)
			continue
		}
		fmt.Fprintf(&b, "%q: %s\n", s.texts[i], r)
	}
	return b.String()
}

func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "../testdata/scenarios", func(t *testing.T, path string) {
		s := &scenario{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "script":
				sc, err := scripted.Parse([]byte(d.Input), path)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				s.script = sc
				return ""
			case "start":
				s.start(d)
				return ""
			case "do":
				return s.do(d)
			case "trace":
				return s.trace()
			case "results":
				return s.results()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}
