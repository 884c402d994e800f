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
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// sniffBytes is how much of a file is checked for a NUL byte to tell
// binary files from text.
const sniffBytes = 8000

func (w *Workspace) readFileTool() vocab.Tool {
	return newTool(
		vocab.ToolSpec{
			Name: "read_file",
			Description: "Read a text file of the workspace. Lines come numbered (number, tab, text). " +
				"Use offset_line and limit_lines to read part of a large file; output over " + strconv.FormatInt(w.opt.MaxReadBytes, 10) +
				" bytes is cut with a note saying where to continue. Binary files, directories, symbolic links and special files are refused.",
			Schema: json.RawMessage(readFileSchema),
			Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessRead}},
		},
		w.readFile)
}

type readFileArgs struct {
	Path       string `json:"path"`
	OffsetLine *int   `json:"offset_line,omitempty"`
	LimitLines *int   `json:"limit_lines,omitempty"`
}

func (w *Workspace) readFile(ctx context.Context, a readFileArgs) (vocab.ToolResult, error) {
	p, offsetArg, limitArg := a.Path, a.OffsetLine, a.LimitLines
	offset, limit := 1, 0
	if offsetArg != nil {
		if *offsetArg < 1 {
			return failf(vocab.CodeToolBadArguments, "bad arguments for read_file: offset_line is 1-based and must be at least 1, not %d", *offsetArg), nil
		}
		offset = *offsetArg
	}
	if limitArg != nil {
		if *limitArg < 1 {
			return failf(vocab.CodeToolBadArguments, "bad arguments for read_file: limit_lines must be at least 1, not %d (leave it out to read to the end)", *limitArg), nil
		}
		limit = *limitArg
	}
	last := math.MaxInt
	if limit > 0 {
		if offset > math.MaxInt-limit {
			return failf(vocab.CodeToolBadArguments, "bad arguments for read_file: offset_line + limit_lines is too large"), nil
		}
		last = offset + limit - 1
	}
	rel, verr := w.resolve(p)
	if verr != nil {
		return fail(verr), nil
	}
	f, _, verr := w.openRegular(p, rel)
	if verr != nil {
		return fail(verr), nil
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 64<<10)
	head, err := br.Peek(sniffBytes)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return fail(fsError(p, err)), nil
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return failf(vocab.CodeToolRefused, "refused %q: it looks like a binary file (it holds NUL bytes); read_file reads text", p), nil
	}
	if len(head) == 0 {
		return vocab.ToolResult{Content: fmt.Sprintf("(%s is empty)", p)}, nil
	}

	var (
		out     strings.Builder
		cur     []byte // the current line, while it is in range
		line    = 1    // number of the line being read
		lines   = 0    // complete or partial lines seen
		more    bool   // a line after the range exists
		note    string
		cut     bool
		budget  = w.opt.MaxReadBytes
		atStart = true
	)
	// emit writes the current line; it reports false when the output is full.
	emit := func() bool {
		prefix := fmt.Sprintf("%6d\t", line)
		text := bytes.TrimSuffix(cur, []byte("\r"))
		if int64(out.Len()+len(prefix)+len(text)+1) <= budget {
			out.WriteString(prefix)
			out.Write(text)
			out.WriteByte('\n')
			return true
		}
		cut = true
		if out.Len() == 0 {
			room := budget - int64(len(prefix)) - 1
			if room < 0 {
				room = 0
			}
			out.WriteString(prefix)
			out.Write(text[:room])
			out.WriteByte('\n')
			note = fmt.Sprintf("[line %d is longer than the %d-byte read limit: only its start is shown; the next line is %d]", line, budget, line+1)
		} else {
			note = fmt.Sprintf("[output cut at the %d-byte read limit: continue with offset_line=%d]", budget, line)
		}
		return false
	}
	for {
		if err := ctx.Err(); err != nil {
			return vocab.ToolResult{}, err
		}
		frag, err := br.ReadSlice('\n')
		if len(frag) > 0 {
			if atStart {
				lines++
			}
			if line > last {
				more = true
				break
			}
			ends := frag[len(frag)-1] == '\n'
			if line >= offset {
				body := frag
				if ends {
					body = frag[:len(frag)-1]
				}
				if int64(len(cur)+len(body)) > budget {
					// Longer than the whole budget: keep what can be shown.
					cur = append(cur, body[:budget-int64(len(cur))]...)
					emit()
					break
				}
				cur = append(cur, body...)
			}
			atStart = ends
			if ends {
				if line >= offset && !emit() {
					break
				}
				cur = cur[:0]
				line++
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if !atStart && line >= offset && line <= last && !cut {
				emit() // the last line has no newline
			}
			break
		}
		if err != nil {
			return fail(fsError(p, err)), nil
		}
	}
	if !cut && offset > lines {
		return failf(vocab.CodeToolBadArguments, "offset_line %d is past the end of %q, which has %d lines", offset, p, lines), nil
	}
	if !cut && more {
		note = fmt.Sprintf("[more lines follow: continue with offset_line=%d]", last+1)
	}
	text := strings.ToValidUTF8(out.String(), "\uFFFD")
	if note != "" {
		text += note + "\n"
	}
	return vocab.ToolResult{Content: text, Truncated: cut}, nil
}

func (w *Workspace) writeFileTool() vocab.Tool {
	return newTool(
		vocab.ToolSpec{
			Name: "write_file",
			Description: "Write a file of the workspace with the given content, replacing it if it exists and creating missing parent directories. " +
				"The write is atomic (a temporary file renamed into place). At most " + strconv.FormatInt(w.opt.MaxFileBytes, 10) + " bytes.",
			Schema: json.RawMessage(writeFileSchema),
			Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessWrite, Parents: true}},
		},
		w.writeFile)
}

type writeFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (w *Workspace) writeFile(ctx context.Context, a writeFileArgs) (vocab.ToolResult, error) {
	p, content := a.Path, a.Content
	if int64(len(content)) > w.opt.MaxFileBytes {
		return failf(vocab.CodeToolRefused, "refused to write %q: the content is %d bytes, over the %d-byte limit", p, len(content), w.opt.MaxFileBytes), nil
	}
	rel, verr := w.resolve(p)
	if verr != nil {
		return fail(verr), nil
	}
	if rel == "." {
		return failf(vocab.CodeToolRefused, "refused %q: it is the workspace directory itself, not a file", p), nil
	}
	perm, existed := fs.FileMode(0), false
	if fi, err := w.root.Lstat(rel); err == nil {
		if !fi.Mode().IsRegular() {
			return fail(notRegular(p, fi.Mode())), nil
		}
		perm, existed = fi.Mode().Perm(), true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(fsError(p, err)), nil
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return fail(fsError(p, err)), nil
		}
		// The directories just made are plain ones; check nothing raced a
		// link into their place.
		if verr := w.checkLinks(p, rel); verr != nil {
			return fail(verr), nil
		}
	}
	if err := w.writeAtomic(ctx, rel, []byte(content), perm, existed); err != nil {
		if ctx.Err() != nil {
			return vocab.ToolResult{}, ctx.Err()
		}
		return fail(fsError(p, err)), nil
	}
	verb := "created"
	if existed {
		verb = "replaced"
	}
	return vocab.ToolResult{Content: fmt.Sprintf("%s %s (%d bytes)", verb, display(rel), len(content))}, nil
}

// writeAtomic writes data to a temporary file beside rel and renames it
// over rel. An existing file keeps its permissions; a new one gets 0666
// less the umask.
func (w *Workspace) writeAtomic(ctx context.Context, rel string, data []byte, perm fs.FileMode, existed bool) error {
	tmp := filepath.Join(filepath.Dir(rel), fmt.Sprintf(".%s.tmp-%016x", filepath.Base(rel), rand.Uint64()))
	createPerm := fs.FileMode(0o666)
	if existed {
		createPerm = 0o600
	}
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, createPerm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			w.root.Remove(tmp)
		}
	}()
	const chunk = 1 << 20
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(chunk, len(data))
		if _, err := f.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	if existed {
		if err := f.Chmod(perm); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		w.root.Remove(tmp)
		ok = true
		return err
	}
	if err := ctx.Err(); err != nil {
		w.root.Remove(tmp)
		ok = true
		return err
	}
	if err := w.root.Rename(tmp, rel); err != nil {
		w.root.Remove(tmp)
		ok = true
		return err
	}
	ok = true
	return nil
}

func (w *Workspace) editFileTool() vocab.Tool {
	return newTool(
		vocab.ToolSpec{
			Name: "edit_file",
			Description: "Replace one exact occurrence of old with new in a file of the workspace. " +
				"The edit fails when old does not occur or occurs more than once (include more surrounding text to make it unique). " +
				"The file is rewritten atomically.",
			Schema: json.RawMessage(editFileSchema),
			Access: []vocab.AccessDecl{{Field: "path", Mode: vocab.AccessReadWrite}},
		},
		w.editFile)
}

type editFileArgs struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

func (w *Workspace) editFile(ctx context.Context, a editFileArgs) (vocab.ToolResult, error) {
	p, old, repl := a.Path, a.Old, a.New
	if old == "" {
		return failf(vocab.CodeToolBadArguments, "bad arguments for edit_file: old is empty; give the exact text to replace"), nil
	}
	if old == repl {
		return failf(vocab.CodeToolBadArguments, "bad arguments for edit_file: old and new are the same, so the edit would change nothing"), nil
	}
	rel, verr := w.resolve(p)
	if verr != nil {
		return fail(verr), nil
	}
	f, fi, verr := w.openRegular(p, rel)
	if verr != nil {
		return fail(verr), nil
	}
	if fi.Size() > w.opt.MaxFileBytes {
		f.Close()
		return failf(vocab.CodeToolRefused, "refused to edit %q: it is %d bytes, over the %d-byte limit", p, fi.Size(), w.opt.MaxFileBytes), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, w.opt.MaxFileBytes+1))
	f.Close()
	if err != nil {
		return fail(fsError(p, err)), nil
	}
	if int64(len(data)) > w.opt.MaxFileBytes {
		return failf(vocab.CodeToolRefused, "refused to edit %q: it is over the %d-byte limit", p, w.opt.MaxFileBytes), nil
	}
	if err := ctx.Err(); err != nil {
		return vocab.ToolResult{}, err
	}
	text := string(data)
	switch n := strings.Count(text, old); n {
	case 0:
		return failf(vocab.CodeToolFailed, "edit_file: old text not found in %q; nothing changed (it must match exactly, whitespace included: read the file first)", p), nil
	case 1:
	default:
		return failf(vocab.CodeToolFailed, "edit_file: old text occurs %d times in %q; nothing changed (include more surrounding text so it occurs exactly once)", n, p), nil
	}
	at := strings.Index(text, old)
	lineNo := strings.Count(text[:at], "\n") + 1
	out := text[:at] + repl + text[at+len(old):]
	if int64(len(out)) > w.opt.MaxFileBytes {
		return failf(vocab.CodeToolRefused, "refused to edit %q: the result would be %d bytes, over the %d-byte limit", p, len(out), w.opt.MaxFileBytes), nil
	}
	if err := w.writeAtomic(ctx, rel, []byte(out), fi.Mode().Perm(), true); err != nil {
		if ctx.Err() != nil {
			return vocab.ToolResult{}, ctx.Err()
		}
		return fail(fsError(p, err)), nil
	}
	return vocab.ToolResult{Content: fmt.Sprintf("edited %s: replaced 1 occurrence at line %d", display(rel), lineNo)}, nil
}
