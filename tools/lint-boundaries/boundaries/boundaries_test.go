package boundaries_test

import (
	"strings"
	"testing"
	"unicode"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/loopchart/loopchart/tools/lint-boundaries/boundaries"
)

// setModule sets the analyzer's -module flag for the duration of the test.
func setModule(t *testing.T, module string) {
	t.Helper()
	if err := boundaries.Analyzer.Flags.Set("module", module); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := boundaries.Analyzer.Flags.Set("module", boundaries.DefaultModule); err != nil {
			t.Error(err)
		}
	})
}

// TestRules runs every rule over the GOPATH-style packages in
// testdata/src/github.com/loopchart/loopchart, which hold both violating
// imports (marked with // want) and allowed ones.
func TestRules(t *testing.T) {
	setModule(t, "github.com/loopchart/loopchart")
	analysistest.Run(t, analysistest.TestData(), boundaries.Analyzer,
		"github.com/loopchart/loopchart/...",
		// Outside the module: no rule applies.
		"github.com/acme/consumer",
	)
}

// TestModuleFlag checks that the rules follow the -module flag.
func TestModuleFlag(t *testing.T) {
	setModule(t, "example.com/other")
	analysistest.Run(t, analysistest.TestData(), boundaries.Analyzer, "example.com/other/...")
}

// TestAnalyzer checks the analyzer's static description.
func TestAnalyzer(t *testing.T) {
	if err := analysis.Validate([]*analysis.Analyzer{boundaries.Analyzer}); err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(boundaries.Analyzer.Doc, "\n")
	if title == "" || strings.HasSuffix(title, ".") || strings.IndexFunc(title, unicode.IsUpper) >= 0 {
		t.Errorf("Doc title %q: want a lower-case title without a trailing period", title)
	}
	if f := boundaries.Analyzer.Flags.Lookup("module"); f == nil || f.DefValue != boundaries.DefaultModule {
		t.Errorf("-module flag = %v, want default %q", f, boundaries.DefaultModule)
	}
}
