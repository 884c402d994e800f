package servertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"

	"github.com/loopchart/loopchart/vocab"
)

// -golden rewrites the golden histories the adapter module replays
// (adapters/temporal/testdata/histories) from the sessions of the tests
// that record them. Keep the old files of a released core version: a
// build must still replay them.
var golden = flag.Bool("golden", false, "rewrite the golden Temporal histories")

// record writes every run of session s, the first run first, as
// v<CoreVersion>-NAME-runN.json.
func (r *rig) record(ctx context.Context, name string, s vocab.ID) {
	r.t.Helper()
	if !*golden {
		return
	}
	var runs []*historypb.History
	runID := ""
	for {
		h := &historypb.History{}
		it := r.c.GetWorkflowHistory(ctx, string(s), runID, false, 0)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				r.t.Fatal(err)
			}
			h.Events = append(h.Events, ev)
		}
		runs = append(runs, h)
		prev := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			break
		}
		runID = prev
	}
	slices.Reverse(runs)
	dir := filepath.Join("..", "testdata", "histories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	for i, h := range runs {
		b, err := temporalproto.CustomJSONMarshalOptions{Indent: " "}.Marshal(h)
		if err != nil {
			r.t.Fatal(err)
		}
		path := filepath.Join(dir, fmt.Sprintf("v%d-%s-run%d.json", 1, name, i+1))
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			r.t.Fatal(err)
		}
		r.t.Logf("wrote %s (%d events)", path, len(h.Events))
	}
}

func TestGoldenFlagIsOffByDefault(t *testing.T) {
	if *golden {
		t.Log("rewriting golden histories")
	}
}
