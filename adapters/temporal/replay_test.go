package temporal_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	lt "github.com/loopchart/loopchart/adapters/temporal"
)

// goldens are the recorded histories of released core versions (written
// by the real-server tests with -golden). Every one must replay on this
// build: a change to the core or the workflow that would break a running
// session fails here.
func goldens(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "v*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("%d golden histories, want at least 5 (tools, cancel, three runs of continue)", len(files))
	}
	return files
}

func TestGoldenHistoriesReplay(t *testing.T) {
	for _, f := range goldens(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(lt.SessionWorkflow, workflow.RegisterOptions{Name: lt.WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(quietLog, f); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}

// An incompatible change (here: one more command before the session
// starts) must fail the replay: the check above can fail.
func TestGoldenReplayCatchesAnIncompatibleChange(t *testing.T) {
	changed := func(ctx workflow.Context, p lt.Params) (lt.Summary, error) {
		if err := workflow.Sleep(ctx, 1); err != nil {
			return lt.Summary{}, err
		}
		return lt.SessionWorkflow(ctx, p)
	}
	for _, f := range goldens(t)[:2] {
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: lt.WorkflowName})
		err := r.ReplayWorkflowHistoryFromJSONFile(quietLog, f)
		if err == nil || !strings.Contains(err.Error(), "nondeterministic") {
			t.Errorf("%s: replay of a changed workflow: %v", f, err)
		}
	}
}

var quietLog = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
