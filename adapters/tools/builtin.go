package tools

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/loopchart/loopchart/vocab"
)

// PathArgs are the arguments of the built-in file tools.
type PathArgs struct {
	Path string `json:"path"`
}

const pathSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`

// FileTools returns the demo's read-only tools over fsys: list_files,
// read_file and word_count.
func FileTools(fsys fs.FS) []vocab.Tool {
	return []vocab.Tool{ListFiles(fsys), ReadFile(fsys), WordCount(fsys)}
}

// ListFiles lists the files under a directory of fsys ("." for the root).
func ListFiles(fsys fs.FS) vocab.Tool {
	return Func("list_files", "List the files under a directory.", pathSchema, func(_ context.Context, a PathArgs) (string, error) {
		dir := a.Path
		if dir == "" {
			dir = "."
		}
		var names []string
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				names = append(names, p)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		slices.Sort(names)
		return strings.Join(names, "\n"), nil
	})
}

// ReadFile returns a file of fsys.
func ReadFile(fsys fs.FS) vocab.Tool {
	return Func("read_file", "Read a text file.", pathSchema, func(_ context.Context, a PathArgs) (string, error) {
		b, err := fs.ReadFile(fsys, a.Path)
		if err != nil {
			return "", err
		}
		return string(b), nil
	})
}

// WordCount counts the words of a file of fsys.
func WordCount(fsys fs.FS) vocab.Tool {
	return Func("word_count", "Count the words of a text file.", pathSchema, func(_ context.Context, a PathArgs) (string, error) {
		b, err := fs.ReadFile(fsys, a.Path)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d words", len(strings.Fields(string(b)))), nil
	})
}
