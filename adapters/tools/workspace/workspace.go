// Package workspace gives a model file and shell tools confined to one
// directory, the workspace.
//
// Every file operation goes through one [os.Root], which refuses paths that
// escape the directory (through ".." or a symlink). On top of that the
// tools refuse, before touching anything, absolute paths outside the
// workspace, paths whose ".." climbs above it, and every path with a
// symbolic link in any of its components: the scheduler places calls by
// their paths lexically (see [vocab.NormalizePath]), and a symlink would let
// two calls that look disjoint touch the same file. Files are opened without
// blocking and must be regular files, so a FIFO or a device cannot hang a
// tool.
//
// [Workspace.Tools] returns read_file, write_file, edit_file, list_dir and
// grep; run_command ([Workspace.RunCommand]) runs shell commands in the
// workspace directory and is opt-in: a command can do anything the process
// can, so its spec asks for approval and declares no accesses (it runs
// alone).
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// Default limits; see [Options].
const (
	DefaultMaxReadBytes   = 1 << 20
	DefaultMaxFileBytes   = 10 << 20
	DefaultMaxGrepMatches = 200
	DefaultMaxListEntries = 1000
)

// Options bound what the file tools read, write and return. A zero field
// takes its default; a negative one is an error.
type Options struct {
	// MaxReadBytes caps the text read_file returns (line numbers
	// included); the output is cut at a line boundary with a note saying
	// where to continue. Default 1 MiB.
	MaxReadBytes int64
	// MaxFileBytes is the largest file write_file writes, edit_file edits
	// and grep searches (larger ones are skipped). Default 10 MiB.
	MaxFileBytes int64
	// MaxGrepMatches caps the matching lines grep returns. Default 200.
	MaxGrepMatches int
	// MaxListEntries caps the entries list_dir returns. Default 1000.
	MaxListEntries int
	// SkipDirs names directories list_dir (recursive) and grep do not
	// descend into; list_dir still shows them. nil means {".git"}; an
	// empty, non-nil slice skips nothing. A skipped directory can still be
	// named as the path of a call.
	SkipDirs []string
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.MaxReadBytes < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: MaxReadBytes is negative (%d)", o.MaxReadBytes)
	case o.MaxFileBytes < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: MaxFileBytes is negative (%d)", o.MaxFileBytes)
	case o.MaxGrepMatches < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: MaxGrepMatches is negative (%d)", o.MaxGrepMatches)
	case o.MaxListEntries < 0:
		return o, vocab.Errorf(vocab.CodeBadInput, "workspace: MaxListEntries is negative (%d)", o.MaxListEntries)
	}
	for _, d := range o.SkipDirs {
		if d == "" || strings.ContainsAny(d, `/\`) || d == "." || d == ".." {
			return o, vocab.Errorf(vocab.CodeBadInput, "workspace: SkipDirs entry %q is not a directory name", d)
		}
	}
	if o.MaxReadBytes == 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxGrepMatches == 0 {
		o.MaxGrepMatches = DefaultMaxGrepMatches
	}
	if o.MaxListEntries == 0 {
		o.MaxListEntries = DefaultMaxListEntries
	}
	if o.SkipDirs == nil {
		o.SkipDirs = []string{".git"}
	}
	return o, nil
}

// Workspace is a directory the tools are confined to. It is safe for
// concurrent use; its tools may run in parallel (the scheduler keeps
// conflicting calls apart by their declared accesses).
type Workspace struct {
	root *os.Root
	abs  string // the directory as given, made absolute
	real string // abs with its symlinks resolved
	opt  Options
	skip map[string]bool

	// noLinkCheck turns off the lexical and symlink checks so tests can
	// show that os.Root alone still confines the tools.
	noLinkCheck bool
}

// Open opens dir as a workspace. It fails with a CodeBadInput error when
// the options are invalid or dir is not a directory that can be opened.
func Open(dir string, opt Options) (*Workspace, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "workspace: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "workspace: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "workspace: %w", err)
	}
	w := &Workspace{root: root, abs: abs, real: real, opt: opt, skip: map[string]bool{}}
	for _, d := range opt.SkipDirs {
		w.skip[d] = true
	}
	return w, nil
}

// Close releases the workspace's directory handle; its tools fail after.
func (w *Workspace) Close() error { return w.root.Close() }

// Root returns the workspace directory as an absolute path.
func (w *Workspace) Root() string { return w.abs }

// Tools returns the file tools: read_file, write_file, edit_file, list_dir
// and grep.
func (w *Workspace) Tools() []vocab.Tool {
	return []vocab.Tool{w.readFileTool(), w.writeFileTool(), w.editFileTool(), w.listDirTool(), w.grepTool()}
}

// resolve turns the path a model gave into a clean path relative to the
// workspace (in OS form, "." for the workspace itself). It refuses, with a
// CodeToolRefused error naming the path and the reason, absolute paths
// outside the workspace, paths that climb out of it and paths with a
// symlink in any component.
func (w *Workspace) resolve(p string) (string, *vocab.Error) {
	if p == "" {
		return "", vocab.Errorf(vocab.CodeToolBadArguments, "path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", vocab.Errorf(vocab.CodeToolBadArguments, "path %q contains a NUL byte", p)
	}
	if w.noLinkCheck {
		return filepath.Clean(p), nil
	}
	var rel string
	if filepath.IsAbs(p) {
		clean := filepath.Clean(p)
		for _, base := range []string{w.abs, w.real} {
			if r, err := filepath.Rel(base, clean); err == nil && filepath.IsLocal(r) {
				rel = r
				break
			}
		}
		if rel == "" {
			return "", vocab.Errorf(vocab.CodeToolRefused, "refused %q: absolute path outside the workspace %s; use a path relative to it", p, w.abs)
		}
	} else {
		rel = filepath.Clean(p)
		if !filepath.IsLocal(rel) {
			return "", vocab.Errorf(vocab.CodeToolRefused, "refused %q: the path leaves the workspace (through \"..\"); use a path inside it", p)
		}
	}
	if err := w.checkLinks(p, rel); err != nil {
		return "", err
	}
	return rel, nil
}

// checkLinks refuses rel when any of its existing components is a
// symbolic link. Components are checked from the top, so each Lstat goes
// through directories already known not to be links.
func (w *Workspace) checkLinks(p, rel string) *vocab.Error {
	if rel == "." {
		return nil
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for i := range parts {
		prefix := filepath.Join(parts[:i+1]...)
		fi, err := w.root.Lstat(prefix)
		if err != nil {
			return nil // missing (or not a directory): the operation reports it
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if i == len(parts)-1 {
				return vocab.Errorf(vocab.CodeToolRefused, "refused %q: it is a symbolic link, and workspace tools do not follow symbolic links", p)
			}
			return vocab.Errorf(vocab.CodeToolRefused, "refused %q: its component %q is a symbolic link, and workspace tools do not follow symbolic links", p, filepath.ToSlash(prefix))
		}
	}
	return nil
}

// openRegular opens rel for reading without blocking and refuses anything
// but a regular file.
func (w *Workspace) openRegular(p, rel string) (*os.File, fs.FileInfo, *vocab.Error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, nil, fsError(p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fsError(p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(p, fi.Mode())
	}
	return f, fi, nil
}

// notRegular refuses a path that is not a regular file.
func notRegular(p string, m fs.FileMode) *vocab.Error {
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a directory (use list_dir)"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO), not a regular file"
	case m&fs.ModeSocket != 0:
		what = "a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		what = "a device, not a regular file"
	case m&fs.ModeSymlink != 0:
		what = "a symbolic link, and workspace tools do not follow symbolic links"
	}
	return vocab.Errorf(vocab.CodeToolRefused, "refused %q: it is %s", p, what)
}

// fsError describes a failed file operation on p for the model.
func fsError(p string, err error) *vocab.Error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return vocab.Errorf(vocab.CodeToolFailed, "%q does not exist", p)
	case errors.Is(err, fs.ErrPermission):
		return vocab.Errorf(vocab.CodeToolFailed, "%q: permission denied", p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg := pe.Err.Error()
		if strings.Contains(msg, "escapes") {
			return vocab.Errorf(vocab.CodeToolRefused, "refused %q: %s", p, msg)
		}
		return vocab.Errorf(vocab.CodeToolFailed, "%q: %s failed: %s", p, pe.Op, msg)
	}
	return vocab.Errorf(vocab.CodeToolFailed, "%q: %v", p, err)
}

// newTool makes a workspace tool from a function of its arguments:
// tools.Typed validates them against the spec's schema and decodes them
// strictly into A (unknown fields, duplicate keys and wrong types are
// error results for the model) before run sees them.
func newTool[A any](spec vocab.ToolSpec, run func(ctx context.Context, a A) (vocab.ToolResult, error)) vocab.Tool {
	return tools.MustTyped(spec, func(ctx context.Context, a A) (vocab.ToolResult, error) {
		if err := ctx.Err(); err != nil {
			return vocab.ToolResult{}, err
		}
		return run(ctx, a)
	})
}

// fail is an error result made from a typed error: the model sees its
// message and code.
func fail(err *vocab.Error) vocab.ToolResult {
	return vocab.ToolResult{Content: err.Message, IsError: true, Code: err.Code}
}

// failf is an error result with code c.
func failf(c vocab.Code, format string, args ...any) vocab.ToolResult {
	return vocab.ToolResult{Content: fmt.Sprintf(format, args...), IsError: true, Code: c}
}

// display is rel as the model should see it.
func display(rel string) string { return filepath.ToSlash(rel) }
