package workspace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

// errStop ends a walk early without an error.
var errStop = errors.New("stop walking")

// entry is one directory entry met by a walk.
type entry struct {
	rel  string       // workspace-relative, OS form
	typ  fs.FileMode  // type bits, from lstat: a symlink is a symlink
	err  *vocab.Error // set for a directory the walk could not read
	skip bool         // a directory the walk does not enter (Options.SkipDirs)
}

// walk visits what lies in dir (workspace-relative), sorted by name, depth
// first when recursive. It never follows symbolic links, does not enter
// SkipDirs, reports unreadable subdirectories to fn (entry.err) and checks
// ctx between directory reads and entries. fn returning errStop ends the
// walk with a nil error.
func (w *Workspace) walk(ctx context.Context, dir string, recursive bool, fn func(entry) error) error {
	ents, err := w.readDir(ctx, dir)
	if err != nil {
		return err
	}
	err = w.walkDir(ctx, dir, ents, recursive, fn)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// walkDir visits ents, the entries of dir. A subdirectory is read before
// fn sees it, so an unreadable one comes to fn once, with its error.
func (w *Workspace) walkDir(ctx context.Context, dir string, ents []fs.DirEntry, recursive bool, fn func(entry) error) error {
	for _, d := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := filepath.Join(dir, d.Name())
		e := entry{rel: rel, typ: d.Type(), skip: d.IsDir() && w.skip[d.Name()]}
		enter := recursive && d.IsDir() && !e.skip
		var sub []fs.DirEntry
		if enter {
			var err error
			if sub, err = w.readDir(ctx, rel); err != nil {
				var verr *vocab.Error
				if ctx.Err() != nil || !errors.As(err, &verr) || verr.Code != vocab.CodeToolFailed {
					return err
				}
				e.err, enter = verr, false
			}
		}
		if err := fn(e); err != nil {
			return err
		}
		if enter {
			if err := w.walkDir(ctx, rel, sub, true, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// readDir reads the directory rel (without blocking; it must be a
// directory) in batches, checking ctx between them, sorted by name.
func (w *Workspace) readDir(ctx context.Context, rel string) ([]fs.DirEntry, error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, fsError(display(rel), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fsError(display(rel), err)
	}
	if !fi.IsDir() {
		return nil, vocab.Errorf(vocab.CodeToolFailed, "%q is not a directory", display(rel))
	}
	var all []fs.DirEntry
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.ReadDir(256)
		all = append(all, batch...)
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, fsError(display(rel), err)
		}
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return all, nil
}

// plural is "n what", with what made plural ("file with…" → "files with…")
// when n is not 1.
func plural(n int, what string) string {
	if n != 1 {
		head, rest, _ := strings.Cut(what, " (")
		words := strings.Fields(head)
		for i, word := range words {
			if word == "file" || word == "directory" {
				words[i] = map[string]string{"file": "files", "directory": "directories"}[word]
				break
			}
		}
		what = strings.Join(words, " ")
		if rest != "" {
			what += " (" + rest
		}
	}
	return fmt.Sprintf("%d %s", n, what)
}

// typeMark is the ls -F style suffix of a directory entry.
func typeMark(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "/"
	case m&fs.ModeSymlink != 0:
		return "@"
	case m&fs.ModeNamedPipe != 0:
		return "|"
	case m&fs.ModeSocket != 0:
		return "="
	}
	return ""
}

func (w *Workspace) listDirTool() vocab.Tool {
	return newTool(
		vocab.ToolSpec{
			Name: "list_dir",
			Description: "List a directory of the workspace, sorted, one workspace-relative path a line. " +
				"Directories end in /, symbolic links (never followed) in @, named pipes in |, sockets in =. " +
				"recursive lists everything below (not entering " + strings.Join(w.opt.SkipDirs, ", ") + "). At most " +
				strconv.Itoa(w.opt.MaxListEntries) + " entries.",
			Schema: json.RawMessage(listDirSchema),
			Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessRead, Recursive: true, Default: "."}},
		},
		w.listDir)
}

type listDirArgs struct {
	Path      string `json:"path,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

func (w *Workspace) listDir(ctx context.Context, a listDirArgs) (vocab.ToolResult, error) {
	p, recursive := a.Path, a.Recursive
	if p == "" {
		p = "."
	}
	rel, verr := w.resolve(p)
	if verr != nil {
		return fail(verr), nil
	}
	var out strings.Builder
	n, cut := 0, false
	err := w.walk(ctx, rel, recursive, func(e entry) error {
		if n == w.opt.MaxListEntries {
			cut = true
			return errStop
		}
		n++
		out.WriteString(display(e.rel))
		out.WriteString(typeMark(e.typ))
		switch {
		case e.err != nil:
			out.WriteString("  (not listed: ")
			out.WriteString(e.err.Message)
			out.WriteString(")")
		case e.skip && recursive:
			out.WriteString("  (not entered)")
		}
		out.WriteByte('\n')
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return vocab.ToolResult{}, ctx.Err()
		}
		var verr *vocab.Error
		if errors.As(err, &verr) {
			if verr.Code == vocab.CodeToolFailed && strings.HasSuffix(verr.Message, "is not a directory") {
				return failf(vocab.CodeToolFailed, "%q is not a directory (use read_file for files)", p), nil
			}
			return fail(verr), nil
		}
		return fail(fsError(p, err)), nil
	}
	text := strings.ToValidUTF8(out.String(), "\uFFFD")
	switch {
	case cut:
		text += fmt.Sprintf("[listing cut at %d entries: list a subdirectory, or without recursive]\n", w.opt.MaxListEntries)
	case n == 0:
		text = fmt.Sprintf("(%s is empty)\n", p)
	}
	return vocab.ToolResult{Content: text, Truncated: cut}, nil
}

// grep limits that are not options.
const (
	grepMaxLine       = 1 << 20 // longest line searched; a file with a longer one is skipped from there
	grepShowLine      = 300     // bytes of a matching line shown
	grepProgressEvery = 100     // files between progress reports
)

func (w *Workspace) grepTool() vocab.Tool {
	return newTool(
		vocab.ToolSpec{
			Name: "grep",
			Description: "Search the text files of the workspace for lines matching a Go regular expression (RE2 syntax; (?i) for case-insensitive). " +
				"Prints path:line: text, files in sorted order, at most " + strconv.Itoa(w.opt.MaxGrepMatches) + " matches. " +
				"Skips binary files, symbolic links, special files, files over " + strconv.FormatInt(w.opt.MaxFileBytes, 10) +
				" bytes and the directories " + strings.Join(w.opt.SkipDirs, ", ") + ".",
			Schema: json.RawMessage(grepSchema),
			Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessSearch, Recursive: true, Default: "."}},
		},
		w.grep)
}

type grepArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
}

// grepState is one grep call's running totals.
type grepState struct {
	re       *regexp.Regexp
	out      strings.Builder
	matches  int
	files    int
	binary   int
	large    int
	longLine int
	failed   int
	badDirs  int
	cut      bool
}

func (w *Workspace) grep(ctx context.Context, a grepArgs) (vocab.ToolResult, error) {
	pattern, glob, p := a.Pattern, a.Glob, a.Path
	if p == "" {
		p = "."
	}
	if pattern == "" {
		return failf(vocab.CodeToolBadArguments, "bad arguments for grep: pattern is empty"), nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return failf(vocab.CodeToolBadArguments, "bad arguments for grep: pattern is not a valid Go regular expression: %v", err), nil
	}
	if _, err := path.Match(glob, ""); err != nil {
		return failf(vocab.CodeToolBadArguments, "bad arguments for grep: glob %q is not a valid pattern: %v", glob, err), nil
	}
	if p == "" {
		p = "."
	}
	rel, verr := w.resolve(p)
	if verr != nil {
		return fail(verr), nil
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return fail(fsError(p, err)), nil
	}
	st := &grepState{re: re}
	switch {
	case fi.Mode().IsRegular():
		if err := w.grepFile(ctx, st, rel, p); err != nil {
			return vocab.ToolResult{}, err
		}
	case fi.IsDir():
		err := w.walk(ctx, rel, true, func(e entry) error {
			if e.err != nil {
				st.badDirs++
				return nil
			}
			if !e.typ.IsRegular() || !globMatch(glob, e.rel) {
				return nil
			}
			if err := w.grepFile(ctx, st, e.rel, display(e.rel)); err != nil {
				return err
			}
			if st.files%grepProgressEvery == 0 {
				tools.Progress(ctx, fmt.Sprintf("grep: searched %d files, %d matches", st.files, st.matches))
			}
			if st.cut {
				return errStop
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return vocab.ToolResult{}, ctx.Err()
			}
			var verr *vocab.Error
			if errors.As(err, &verr) {
				return fail(verr), nil
			}
			return fail(fsError(p, err)), nil
		}
	default:
		return fail(notRegular(p, fi.Mode())), nil
	}

	text := strings.ToValidUTF8(st.out.String(), "\uFFFD")
	if st.matches == 0 {
		text = fmt.Sprintf("no matches for %q in %s (%d files searched)\n", pattern, p, st.files)
	}
	if st.cut {
		text += fmt.Sprintf("[stopped after %d matches: narrow the pattern, path or glob]\n", w.opt.MaxGrepMatches)
	}
	var skipped []string
	for _, s := range []struct {
		n    int
		what string
	}{
		{st.binary, "binary file"},
		{st.large, fmt.Sprintf("file over %d bytes", w.opt.MaxFileBytes)},
		{st.longLine, fmt.Sprintf("file with a line over %d bytes (searched up to it)", grepMaxLine)},
		{st.failed, "unreadable file"},
		{st.badDirs, "unreadable directory"},
	} {
		if s.n > 0 {
			skipped = append(skipped, plural(s.n, s.what))
		}
	}
	if len(skipped) > 0 {
		text += "[skipped: " + strings.Join(skipped, ", ") + "]\n"
	}
	return vocab.ToolResult{Content: text, Truncated: st.cut}, nil
}

// globMatch reports whether the file rel passes glob: matched against the
// base name, or against the whole workspace-relative path when glob holds
// a slash. An empty glob passes everything.
func globMatch(glob, rel string) bool {
	if glob == "" {
		return true
	}
	name := filepath.ToSlash(rel)
	if !strings.Contains(glob, "/") {
		name = path.Base(name)
	}
	ok, _ := path.Match(glob, name)
	return ok
}

// grepFile searches one file, opened without blocking (a FIFO is skipped),
// checking ctx every few thousand lines. Only a cancelled ctx is returned
// as an error; problems with the file are counted.
func (w *Workspace) grepFile(ctx context.Context, st *grepState, rel, shown string) error {
	f, fi, verr := w.openRegular(shown, rel)
	if verr != nil {
		if verr.Code == vocab.CodeToolFailed {
			st.failed++
		}
		return nil // a special file is no text to search
	}
	defer f.Close()
	if fi.Size() > w.opt.MaxFileBytes {
		st.large++
		return nil
	}
	st.files++
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		st.binary++
		return nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), grepMaxLine)
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line := sc.Bytes()
		if !st.re.Match(line) {
			continue
		}
		if st.matches == w.opt.MaxGrepMatches {
			st.cut = true
			return nil
		}
		st.matches++
		line = bytes.TrimSuffix(line, []byte("\r"))
		fmt.Fprintf(&st.out, "%s:%d: %s\n", shown, n, abbrev(string(line), grepShowLine))
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		st.longLine++
	case err != nil:
		st.failed++
	}
	return ctx.Err()
}
