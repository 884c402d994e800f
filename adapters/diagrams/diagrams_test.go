package diagrams

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGoldenInSync fails when testdata/diagrams differs from what the
// definitions generate. Fix with: go generate ./...
func TestGoldenInSync(t *testing.T) {
	for _, m := range Machines() {
		for _, f := range []Format{DOT, Mermaid} {
			want, err := Render(m, f)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "..", "testdata", "diagrams", m+"."+f.Ext())
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go generate ./...)", err)
			}
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("%s is stale; run go generate ./... (-generated +file):\n%s", path, diff)
			}
		}
	}
}

// TestDeterministic renders twice and expects identical output, with no
// closure names leaking in.
func TestDeterministic(t *testing.T) {
	for _, m := range Machines() {
		for _, f := range []Format{DOT, Mermaid} {
			a, _ := Render(m, f)
			b, _ := Render(m, f)
			if a != b {
				t.Errorf("%s %s: output differs between renders", m, f)
			}
			if strings.Contains(a, "func1") {
				t.Errorf("%s %s: closure name in output", m, f)
			}
		}
	}
}

func TestRenderErrors(t *testing.T) {
	if _, err := Render("nope", DOT); err == nil || !strings.Contains(err.Error(), "unknown machine") {
		t.Errorf("unknown machine: got %v", err)
	}
	if _, err := Render("turn", "svg"); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("unknown format: got %v", err)
	}
}
