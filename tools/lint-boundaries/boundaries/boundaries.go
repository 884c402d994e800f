// Package boundaries defines an Analyzer that enforces the import-layer
// rules of the loopchart module.
//
// # Analyzer boundaries
//
// boundaries: enforce the module's import-layer boundaries
//
// The module is layered. vocab is the shared vocabulary at the bottom,
// machines/... are pure, deterministic state machines built on vocab and
// github.com/qmuntal/stateless, adapters/... connect machines to the
// outside world, and hooks/... are small standard-library-only programs.
// The analyzer checks every analyzed package against a table of rules
// (see [Analyzer] for the list) and reports each violation at the
// offending import spec, go statement, reference or range statement.
//
// The module path is taken from the -module flag so that the rules can be
// exercised on GOPATH-style test data as well as on the real module.
package boundaries

import (
	"fmt"
	"go/ast"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/edge"
	"golang.org/x/tools/go/ast/inspector"
)

// DefaultModule is the default value of the -module flag: the module path
// that the "<module>" placeholder in the rule table stands for.
const DefaultModule = "github.com/loopchart/loopchart"

const doc = `enforce the module's import-layer boundaries

The boundaries analyzer checks each package against a fixed table of
layering rules. Paths below are relative to the module path given by the
-module flag (default ` + DefaultModule + `); "x/..." means x and every
package beneath it.

vocab-leaf
	vocab/... may import nothing from the module outside vocab/... itself.
	Test files are checked too.

machines-pure
	Non-test files in machines/... may import only vocab/..., machines/...,
	github.com/qmuntal/stateless and an allowlist of pure standard packages
	(errors, fmt, strings, strconv, sort, slices, maps, cmp, iter, time,
	bytes, unicode, unicode/utf8, unicode/utf16, math, math/bits, context,
	reflect, encoding/json). In particular os, io, io/fs, net, net/http,
	os/exec, sync, sync/atomic, math/rand, crypto/rand, syscall and unsafe
	are rejected. Test files (_test.go) are exempt so that tests may use
	testing, datadriven, os for test data, and so on.

machines-no-goroutines
	Non-test files in machines/... may not contain go statements: machines
	are synchronous and concurrency belongs in adapters.

machines-no-clock
	Non-test files in machines/... may not refer to time.Now, time.Sleep,
	time.After, time.AfterFunc, time.NewTimer, time.NewTicker, time.Tick,
	time.Since or time.Until. References are resolved with go/types, so
	renamed and dot imports of "time" are caught as well. Other parts of
	package time (Duration, Time, Unix, ...) remain available.

machines-no-map-range
	Non-test files in machines/... may not range over a map: Go randomizes
	map iteration order, and the machines (and the session core, which
	also runs inside Temporal workflows) must produce the same output for
	the same input. The range expression's type is checked with go/types,
	so named map types, maps reached through fields or calls, and type
	parameters whose type set holds a map are caught too. Ranging directly
	over maps.All, maps.Keys or maps.Values is reported as well, since
	those iterators yield in map order. Range over a slice instead, for
	example slices.Sorted(maps.Keys(m)).

machines-importers
	Only adapters/... and machines/... may import machines/.... This applies
	to every package of the module, test files included.

hooks-std-only
	Non-test files in hooks/... may import only vocab/..., their own
	hooks/... tree and the standard library (an import path whose first
	element contains no dot). Test files are exempt: what hooks ship is
	standard-library only, but their tests may use go-cmp and the like.

External test packages (pkg_test) are governed by the rules of the package
they test. Generated test main packages (pkg.test) are not checked.`

// Analyzer reports imports, go statements and references that cross the
// module's layer boundaries.
//
// The rules form a small data table: each entry names the packages it
// governs, whether _test.go files are checked, which import paths are
// denied (and which of those are nevertheless allowed), whether go
// statements are forbidden, whether ranging over maps is forbidden, and
// which package-level objects may not be referenced. Every diagnostic names the rule that produced it.
//
// The flag -module sets the module path the rules are relative to; it
// defaults to [DefaultModule]. It is accepted both by the standalone
// checker and by go vet -vettool. Packages outside that module are never
// governed by any rule, so a wrong -module silently checks nothing.
var Analyzer = &analysis.Analyzer{
	Name:     "boundaries",
	Doc:      doc,
	Run:      run,
	Requires: []*analysis.Analyzer{inspect.Analyzer},
}

// modulePath is the value of the -module flag.
var modulePath = DefaultModule

func init() {
	Analyzer.Flags.StringVar(&modulePath, "module", DefaultModule,
		"module path that the boundary rules are relative to")
}

// A rule is one row of the boundary table.
//
// Package and import patterns use a tiny language:
//
//	...           any path
//	<std>         any standard-library path (first element has no dot)
//	<purestd>     a path in the pureStd allowlist
//	<module>/p    the package p of the module (the -module flag)
//	path/...      path itself and every package beneath it
//	path          exactly path
type rule struct {
	name string

	// pkgs selects the packages the rule governs; except removes
	// packages from that selection again.
	pkgs, except []string

	// testFiles reports whether _test.go files are checked as well.
	testFiles bool

	// An import is a violation when it matches deny and does not
	// match allow.
	deny, allow []string

	// noGo forbids go statements.
	noGo bool

	// noMapRange forbids range statements over maps (and over the map
	// iterators of package maps).
	noMapRange bool

	// noRefs lists package-level objects, as "pkgpath.Name", that may
	// not be referenced (called or used as values).
	noRefs []string

	// why explains the rule; it ends every diagnostic.
	why string
}

// rules is the boundary table.
var rules = []rule{
	{
		name:      "vocab-leaf",
		pkgs:      []string{"<module>/vocab/..."},
		testFiles: true,
		deny:      []string{"<module>/..."},
		allow:     []string{"<module>/vocab/..."},
		why:       "vocab is the leaf layer and may import nothing else from the module",
	},
	{
		name:  "machines-pure",
		pkgs:  []string{"<module>/machines/..."},
		deny:  []string{"..."},
		allow: []string{"<module>/vocab/...", "<module>/machines/...", "github.com/qmuntal/stateless/...", "<purestd>"},
		why:   "machines may import only vocab, machines/..., stateless and pure standard packages",
	},
	{
		name: "machines-no-goroutines",
		pkgs: []string{"<module>/machines/..."},
		noGo: true,
		why:  "machines are synchronous; concurrency belongs in adapters",
	},
	{
		name: "machines-no-clock",
		pkgs: []string{"<module>/machines/..."},
		noRefs: []string{
			"time.Now", "time.Sleep", "time.After", "time.AfterFunc",
			"time.NewTimer", "time.NewTicker", "time.Tick", "time.Since", "time.Until",
		},
		why: "machines must be deterministic; take time from inputs and leave clocks and timers to adapters",
	},
	{
		name:       "machines-no-map-range",
		pkgs:       []string{"<module>/machines/..."},
		noMapRange: true,
		why:        "map iteration order is random and machines must be deterministic; range over a slice, e.g. slices.Sorted(maps.Keys(m))",
	},
	{
		name:      "machines-importers",
		pkgs:      []string{"<module>/..."},
		except:    []string{"<module>/adapters/...", "<module>/machines/..."},
		testFiles: true,
		deny:      []string{"<module>/machines/..."},
		why:       "only adapters/... and machines/... may import machines",
	},
	{
		name:  "hooks-std-only",
		pkgs:  []string{"<module>/hooks/..."},
		deny:  []string{"..."},
		allow: []string{"<module>/vocab/...", "<module>/hooks/...", "<std>"},
		why:   "hooks may import only vocab and the standard library",
	},
}

// pureStd is the allowlist of standard packages that have no side effects
// on the outside world (no I/O, no shared-memory concurrency, no
// randomness, no unsafe). Clock access in time is handled separately by
// the machines-no-clock rule.
var pureStd = map[string]bool{
	"bytes":         true,
	"cmp":           true,
	"context":       true,
	"encoding/json": true,
	"errors":        true,
	"fmt":           true,
	"iter":          true,
	"maps":          true,
	"math":          true,
	"math/bits":     true,
	"reflect":       true,
	"slices":        true,
	"sort":          true,
	"strconv":       true,
	"strings":       true,
	"time":          true,
	"unicode":       true,
	"unicode/utf16": true,
	"unicode/utf8":  true,
}

// isStd reports whether path names a standard-library package, that is,
// whether its first element contains no dot.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// match reports whether path matches pattern (see [rule]).
func match(pattern, path string) bool {
	switch pattern {
	case "...":
		return true
	case "<std>":
		return isStd(path)
	case "<purestd>":
		return pureStd[path]
	}
	if rest, ok := strings.CutPrefix(pattern, "<module>"); ok {
		pattern = modulePath + rest
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// matchAny reports whether path matches any of patterns.
func matchAny(patterns []string, path string) bool {
	for _, p := range patterns {
		if match(p, path) {
			return true
		}
	}
	return false
}

// governs reports whether r applies to the package with the given path.
func (r *rule) governs(pkgPath string) bool {
	return matchAny(r.pkgs, pkgPath) && !matchAny(r.except, pkgPath)
}

// forbids reports whether r rejects an import of path.
func (r *rule) forbids(path string) bool {
	return matchAny(r.deny, path) && !matchAny(r.allow, path)
}

// reportf reports a diagnostic for rule r in the package being analyzed.
func reportf(pass *analysis.Pass, r *rule, node ast.Node, format string, args ...any) {
	pass.Report(analysis.Diagnostic{
		Pos:      node.Pos(),
		End:      node.End(),
		Category: r.name,
		Message: fmt.Sprintf("boundaries: rule %q: package %s %s (%s)",
			r.name, pass.Pkg.Path(), fmt.Sprintf(format, args...), r.why),
	})
}

func run(pass *analysis.Pass) (any, error) {
	if modulePath == "" {
		return nil, fmt.Errorf("boundaries: -module must not be empty")
	}
	pkgPath := pass.Pkg.Path()
	if strings.HasSuffix(pkgPath, ".test") {
		return nil, nil // generated test main package
	}
	// An external test package obeys the rules of the package it tests.
	pkgPath = strings.TrimSuffix(pkgPath, "_test")

	var active []*rule
	for i := range rules {
		if rules[i].governs(pkgPath) {
			active = append(active, &rules[i])
		}
	}
	if len(active) == 0 {
		return nil, nil
	}

	in := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	for fileCur := range in.Root().Children() {
		file := fileCur.Node().(*ast.File)
		name := pass.Fset.File(file.Pos()).Name()
		if !strings.HasSuffix(name, ".go") {
			continue // e.g. a generated file without a .go name
		}
		isTest := strings.HasSuffix(name, "_test.go")
		for _, r := range active {
			if isTest && !r.testFiles {
				continue
			}
			checkImports(pass, r, file)
			if r.noGo {
				checkGo(pass, r, fileCur)
			}
			if len(r.noRefs) > 0 {
				checkRefs(pass, r, fileCur)
			}
			if r.noMapRange {
				checkMapRange(pass, r, fileCur)
			}
		}
	}
	return nil, nil
}

// checkImports reports each import of file that r forbids.
func checkImports(pass *analysis.Pass, r *rule, file *ast.File) {
	if len(r.deny) == 0 {
		return
	}
	for _, spec := range file.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			continue // syntax error already reported by the parser
		}
		if r.forbids(path) {
			reportf(pass, r, spec, "must not import %q", path)
		}
	}
}

// checkGo reports each go statement beneath file.
func checkGo(pass *analysis.Pass, r *rule, file inspector.Cursor) {
	for cur := range file.Preorder((*ast.GoStmt)(nil)) {
		reportf(pass, r, cur.Node(), "must not start goroutines (go statement)")
	}
}

// checkRefs reports each identifier beneath file that resolves to one of
// the package-level objects listed in r.noRefs. Resolution goes through
// go/types, so the way the package was imported (renamed, dot import)
// does not matter.
func checkRefs(pass *analysis.Pass, r *rule, file inspector.Cursor) {
	for cur := range file.Preorder((*ast.Ident)(nil)) {
		id := cur.Node().(*ast.Ident)
		obj := pass.TypesInfo.Uses[id]
		if obj == nil || obj.Pkg() == nil || obj.Pkg().Scope().Lookup(obj.Name()) != obj {
			continue // not a package-level object (local, field, method, package name)
		}
		qualified := obj.Pkg().Path() + "." + obj.Name()
		if !slices.Contains(r.noRefs, qualified) {
			continue
		}
		var at ast.Node = id
		if cur.ParentEdgeKind() == edge.SelectorExpr_Sel {
			at = cur.Parent().Node() // report at the start of pkg.Name
		}
		reportf(pass, r, at, "must not use %s", qualified)
	}
}

// mapIterators are the functions of package maps whose iterators yield in
// map order.
var mapIterators = []string{"maps.All", "maps.Keys", "maps.Values"}

// checkMapRange reports each range statement beneath file whose range
// expression is a map, or a direct call of one of mapIterators.
func checkMapRange(pass *analysis.Pass, r *rule, file inspector.Cursor) {
	for cur := range file.Preorder((*ast.RangeStmt)(nil)) {
		rs := cur.Node().(*ast.RangeStmt)
		if t := pass.TypesInfo.TypeOf(rs.X); t != nil && isMap(t) {
			reportf(pass, r, rs, "must not range over a map (%s)", types.TypeString(t, types.RelativeTo(pass.Pkg)))
			continue
		}
		if fn := calledFunc(pass.TypesInfo, rs.X); fn != nil && fn.Pkg() != nil {
			if name := fn.Pkg().Path() + "." + fn.Name(); slices.Contains(mapIterators, name) {
				reportf(pass, r, rs, "must not range over %s (it yields in map order)", name)
			}
		}
	}
}

// isMap reports whether t is a map: its underlying type is a map, or it is
// a type parameter whose type set contains a map.
func isMap(t types.Type) bool {
	if tp, ok := t.(*types.TypeParam); ok {
		return constraintHasMap(tp.Constraint(), 0)
	}
	_, ok := t.Underlying().(*types.Map)
	return ok
}

// constraintHasMap reports whether some type in the type set described by
// the constraint t has a map as its underlying type. depth bounds the walk
// through embedded interfaces.
func constraintHasMap(t types.Type, depth int) bool {
	if depth > 16 {
		return false
	}
	switch u := t.Underlying().(type) {
	case *types.Map:
		return true
	case *types.Union:
		for i := range u.Len() {
			if constraintHasMap(u.Term(i).Type(), depth+1) {
				return true
			}
		}
	case *types.Interface:
		for i := range u.NumEmbeddeds() {
			if constraintHasMap(u.EmbeddedType(i), depth+1) {
				return true
			}
		}
	}
	return false
}

// calledFunc returns the package-level function that the call expression
// e calls (through any instantiation), or nil.
func calledFunc(info *types.Info, e ast.Expr) *types.Func {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return nil
	}
	fun := ast.Unparen(call.Fun)
	switch x := fun.(type) {
	case *ast.IndexExpr:
		fun = x.X
	case *ast.IndexListExpr:
		fun = x.X
	}
	var id *ast.Ident
	switch x := fun.(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	default:
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	return fn
}
