package temporal_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/engine"
	lt "github.com/loopchart/loopchart/adapters/temporal"
	"github.com/loopchart/loopchart/vocab"
)

// Hooks are code on the worker: a before-tool chain asks a person, the
// approval arrives as an update, an after-tool chain rewrites the result.
func TestHooksAndApproval(t *testing.T) {
	acts := activities(t)
	acts.Hooks = map[vocab.HookName]engine.HookFunc{
		vocab.HookBeforeTool: func(_ context.Context, c engine.HookCall) vocab.HookVerdict {
			return vocab.HookVerdict{Ask: "run " + c.Call.Name + "?"}
		},
		vocab.HookAfterTool: func(_ context.Context, c engine.HookCall) vocab.HookVerdict {
			r := *c.Result
			r.Content = "rewritten " + r.Content
			return vocab.HookVerdict{Result: &r}
		},
	}
	env := newEnv(t, acts)
	p := params(t, "hooks")
	p.Slots = []vocab.HookName{vocab.HookBeforeTool, vocab.HookAfterTool}
	var before lt.Status
	var approve *outcome
	var ps lt.PromptState
	var h lt.HistoryPage
	env.RegisterDelayedCallback(func() { update(env, lt.UpdateSubmit, "p1", userMsg("p1", "use a tool please")) }, time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(lt.QueryStatus)
		if err != nil {
			t.Error(err)
			return
		}
		_ = v.Get(&before)
		if len(before.Approvals) == 1 {
			approve = update(env, lt.UpdateApprove, "a1", lt.Approval{ID: "a1", Approval: vocab.Approval{CallID: before.Approvals[0].Call.ID, Decision: vocab.Approve}})
		}
	}, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		ps = queryPrompt(t, env, "p1")
		v, err := env.QueryWorkflow(lt.QueryHistory, 0)
		if err == nil {
			_ = v.Get(&h)
		}
	}, 3*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose}) }, 4*time.Second)
	env.ExecuteWorkflow(lt.WorkflowName, p)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(before.Approvals) != 1 || before.Approvals[0].Question != "run echo?" {
		t.Fatalf("approvals before: %+v", before.Approvals)
	}
	if approve == nil || approve.err != nil || approve.rejected != nil {
		t.Fatalf("approve: %+v", approve)
	}
	if ps.Result == nil || ps.Result.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %+v", ps)
	}
	if len(h.Messages) != 4 || h.Messages[2].Text() != "rewritten echo(use a tool please)" {
		t.Fatalf("history %+v", h.Messages)
	}
}

// With Options.Export, every event reaches the worker's sink, in order;
// the sink may see an event twice (at least once), never miss one.
func TestExportDeliversEveryEvent(t *testing.T) {
	acts := activities(t)
	seen := map[uint64]vocab.Event{}
	acts.Export = func(_ context.Context, s vocab.ID, evs []vocab.Event) error {
		for _, ev := range evs {
			if ev.Session != s {
				t.Errorf("event of %s exported for %s", ev.Session, s)
			}
			seen[ev.Seq] = ev
		}
		return nil
	}
	env := newEnv(t, acts)
	p := params(t, "export")
	p.Options.Export = true
	var last uint64
	env.RegisterDelayedCallback(func() { update(env, lt.UpdateSubmit, "p1", userMsg("p1", "tool and tool")) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(lt.SignalControl, lt.Control{Kind: vocab.InClose}) }, 2*time.Second)
	env.ExecuteWorkflow(lt.WorkflowName, p)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var sum lt.Summary
	if err := env.GetWorkflowResult(&sum); err != nil {
		t.Fatal(err)
	}
	last = sum.Seq
	seqs := make([]int, 0, len(seen))
	for s := range seen {
		seqs = append(seqs, int(s))
	}
	sort.Ints(seqs)
	if uint64(len(seqs)) != last || seqs[0] != 1 || uint64(seqs[len(seqs)-1]) != last {
		t.Fatalf("exported %d events (%v...), the session has %d", len(seqs), seqs[:min(5, len(seqs))], last)
	}
}
