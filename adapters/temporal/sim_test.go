package temporal_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/vocab"
)

var simSeeds = flag.Int("sim.seeds", 150, "seeds of TestSimulatedWorkflow")

// TestSimulatedWorkflow drives the session workflow with seeded random
// inputs at random workflow times — prompts that call tools, fail, or
// fail once and wait for a retry; steers, notifications, withdrawals of
// real and made-up ids, reused ids, cancels, pauses, continues — then
// closes it, and checks what must hold whatever the timing: the workflow
// ends cleanly; every accepted prompt ended; every refused input was
// refused by the core with a code; the events are gapless; every tool call
// in the history has exactly one result right after its reply; no message
// id repeats.
//
// The test environment runs activities on goroutines of their own, so
// whether an input lands before or after an activity's result depends on
// real time here (a server records that order in the history); the
// workflow's own determinism is checked by replaying recorded histories
// (TestGoldenHistoriesReplay) and by the real-server test with the sticky
// cache off.
func TestSimulatedWorkflow(t *testing.T) {
	events := 0
	for seed := range uint64(*simSeeds) {
		events += simulate(t, seed)
	}
	t.Logf("simulated %d seeds, %d events", *simSeeds, events)
}

func simulate(t *testing.T, seed uint64) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	env := newEnv(t, activities(t))
	env.SetStartTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	texts := []string{"hello", "use a tool", "tool and tool", "please fail", "flaky", "flaky tool"}
	var submitted []string
	var outcomes []*outcome
	n := 5 + rng.IntN(20)
	at := time.Duration(0)
	for i := range n {
		at += time.Duration(1+rng.IntN(4000)) * time.Millisecond
		id := fmt.Sprintf("m%d", i)
		if len(submitted) > 0 && rng.IntN(10) == 0 {
			id = submitted[rng.IntN(len(submitted))] // a reused id
		}
		switch k := rng.IntN(10); {
		case k < 4:
			text := texts[rng.IntN(len(texts))]
			submitted = append(submitted, id)
			env.RegisterDelayedCallback(func() {
				outcomes = append(outcomes, update(env, lt.UpdateSubmit, id+"-u", userMsg(vocab.ID(id), text)))
			}, at)
		case k == 4:
			env.RegisterDelayedCallback(func() {
				outcomes = append(outcomes, update(env, lt.UpdateSteer, id+"-u", userMsg(vocab.ID(id), "steer")))
			}, at)
		case k == 5:
			env.RegisterDelayedCallback(func() {
				outcomes = append(outcomes, update(env, lt.UpdateNotify, id+"-u", userMsg(vocab.ID(id), "note")))
			}, at)
		case k == 6:
			target := "nothing"
			if len(submitted) > 0 {
				target = submitted[rng.IntN(len(submitted))]
			}
			env.RegisterDelayedCallback(func() {
				outcomes = append(outcomes, update(env, lt.UpdateWithdraw, id+"-u", lt.Withdrawal{ID: vocab.ID(id), Target: vocab.ID(target)}))
			}, at)
		default:
			kind := []vocab.InputKind{vocab.InCancel, vocab.InPause, vocab.InContinue}[rng.IntN(3)]
			keep := rng.IntN(2) == 0
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(lt.SignalControl, lt.Control{ID: vocab.ID(id + "-c"), Kind: kind, KeepInbox: keep})
			}, at)
		}
	}
	// A paused agent would keep its queue: continue before the close.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InContinue}) }, at+time.Minute)
	var prompts = map[string]lt.PromptState{}
	env.RegisterDelayedCallback(func() {
		for _, id := range submitted {
			if v, err := env.QueryWorkflow(lt.QueryPrompt, vocab.ID(id)); err == nil {
				var ps lt.PromptState
				if v.Get(&ps) == nil {
					prompts[id] = ps
				}
			}
		}
		env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose})
	}, at+10*time.Minute)
	env.ExecuteWorkflow(lt.WorkflowName, params(t, vocab.ID(fmt.Sprintf("sim-%d", seed))))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	var sum lt.Summary
	if err := env.GetWorkflowResult(&sum); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	for _, o := range outcomes {
		if !o.done {
			t.Fatalf("seed %d: an update was never answered", seed)
		}
		for _, err := range []error{o.err, o.rejected} {
			if err != nil && vocab.CodeOf(lt.Refusal(err)) == vocab.CodeInternal {
				t.Fatalf("seed %d: a refusal without a code: %v", seed, err)
			}
		}
	}
	for id, ps := range prompts {
		if !ps.Ended {
			t.Fatalf("seed %d: prompt %s did not end within ten minutes: %+v", seed, id, ps)
		}
	}
	// Events: gapless from 1 to the summary's.
	next := uint64(1)
	for next <= sum.Seq {
		v, err := env.QueryWorkflow(lt.QueryEvents, next)
		if err != nil {
			t.Fatalf("seed %d: events: %v", seed, err)
		}
		var page lt.EventsPage
		if err := v.Get(&page); err != nil || len(page.Events) == 0 {
			t.Fatalf("seed %d: events page at %d: %v", seed, next, err)
		}
		for _, ev := range page.Events {
			if ev.Seq != next {
				t.Fatalf("seed %d: event %d where %d was due", seed, ev.Seq, next)
			}
			next++
		}
	}
	// The history: tool calls answered once, right after their reply;
	// message ids unique.
	v, err := env.QueryWorkflow(lt.QueryHistory, 0)
	if err != nil {
		t.Fatal(err)
	}
	var h lt.HistoryPage
	if err := v.Get(&h); err != nil {
		t.Fatal(err)
	}
	ids := map[vocab.ID]bool{}
	for i, m := range h.Messages {
		if m.ID != "" {
			if ids[m.ID] {
				t.Fatalf("seed %d: message id %s repeats", seed, m.ID)
			}
			ids[m.ID] = true
		}
		calls := m.ToolCalls()
		for j, c := range calls {
			k := i + 1 + j
			if k >= len(h.Messages) || h.Messages[k].Role != vocab.RoleTool || h.Messages[k].Result == nil || h.Messages[k].Result.CallID != c.ID {
				t.Fatalf("seed %d: call %s of message %d has no result right after it:\n%s", seed, c.ID, i, dump(h.Messages))
			}
		}
	}
	return int(sum.Seq)
}

func dump(msgs []vocab.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s %s: %s\n", m.ID, m.Role, m.Text())
	}
	return b.String()
}
