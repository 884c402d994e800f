package vocab

import (
	"bytes"
	"encoding/json"
	"path"
	"strings"
)

// AccessMode says what a tool call does with a path.
type AccessMode string

// Access modes. Read and search never write; write and readwrite do.
const (
	AccessRead      AccessMode = "read"
	AccessSearch    AccessMode = "search"
	AccessWrite     AccessMode = "write"
	AccessReadWrite AccessMode = "readwrite"
)

// Writes reports whether m changes what it touches.
func (m AccessMode) Writes() bool { return m == AccessWrite || m == AccessReadWrite }

// Valid reports whether m is one of the four modes.
func (m AccessMode) Valid() bool {
	switch m {
	case AccessRead, AccessSearch, AccessWrite, AccessReadWrite:
		return true
	}
	return false
}

// AccessDecl declares one path a tool touches: the top-level string
// argument Field names it. A tool that declares none touches everything
// (it is scheduled as "all"); one that touches nothing says so with
// ToolSpec.NoAccess.
type AccessDecl struct {
	// Field is the argument holding the path.
	Field string `json:"field"`
	// Mode is what the call does with the path.
	Mode AccessMode `json:"mode"`
	// Recursive: the call touches everything below the path too (a
	// directory listing, a recursive search).
	Recursive bool `json:"recursive,omitempty"`
	// Parents: the call may create the path's parent directories, which is
	// a write on each of them.
	Parents bool `json:"parents,omitempty"`
	// Default is the path when the argument is absent or empty ("" means
	// the call then touches everything).
	Default string `json:"default,omitempty"`
}

// Access is one path a call touches, normalised (see NormalizePath).
type Access struct {
	Path      string     `json:"path"`
	Mode      AccessMode `json:"mode"`
	Recursive bool       `json:"recursive,omitempty"`
}

// Accesses is what one call touches: everything (All), or the listed paths
// (none at all when Paths is empty).
type Accesses struct {
	All   bool     `json:"all,omitempty"`
	Paths []Access `json:"paths,omitempty"`
}

// AllAccess touches everything: it conflicts with every call.
var AllAccess = Accesses{All: true}

// None reports whether a touches nothing.
func (a Accesses) None() bool { return !a.All && len(a.Paths) == 0 }

// Conflicts reports whether a and b may not run at the same time: neither
// touches nothing, and either is All, or two of their paths overlap
// (equal, or one recursive and the other below it) and at least one of the
// two writes.
func (a Accesses) Conflicts(b Accesses) bool {
	if a.None() || b.None() {
		return false
	}
	if a.All || b.All {
		return true
	}
	for _, x := range a.Paths {
		for _, y := range b.Paths {
			if (x.Mode.Writes() || y.Mode.Writes()) && overlap(x, y) {
				return true
			}
		}
	}
	return false
}

func overlap(x, y Access) bool {
	switch {
	case x.Path == y.Path:
		return true
	case x.Recursive && below(y.Path, x.Path):
		return true
	case y.Recursive && below(x.Path, y.Path):
		return true
	}
	return false
}

// below reports whether p lies under dir (both normalised).
func below(p, dir string) bool {
	if dir == "." {
		return true // the root holds every relative path
	}
	return len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// NormalizePath normalises a path lexically so equal paths compare equal:
// backslashes become slashes, repeated slashes collapse, "." and ".."
// resolve (a/../b is b), a trailing slash goes, "./x" is "x" and the empty
// path is "."; with fold, letters are lower-cased (the default for
// scheduling: a case-insensitive file system must not let "A.txt" and
// "a.txt" run together). ok is false for a path it cannot place inside the
// workspace: an absolute path, or one whose ".." climbs above it. Lexical
// normalisation cannot see symlinks; tools that follow them must declare
// "all" or refuse them.
func NormalizePath(p string, fold bool) (norm string, ok bool) {
	p = strings.ReplaceAll(p, `\`, "/")
	if strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':' && isLetter(p[0])) {
		return "", false
	}
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	if fold {
		p = strings.ToLower(p)
	}
	return p, true
}

func isLetter(b byte) bool { return ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') }

// CallAccesses computes what a call with args touches by the spec's
// declarations: All when the spec declares nothing, when the arguments are
// not a JSON object, or when a declared path is missing (without a
// default), not a string, or cannot be placed inside the workspace.
func (s ToolSpec) CallAccesses(args json.RawMessage, fold bool) Accesses {
	if s.NoAccess {
		return Accesses{}
	}
	if len(s.Access) == 0 {
		return AllAccess
	}
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &obj); err != nil {
			return AllAccess
		}
	}
	var out Accesses
	for _, d := range s.Access {
		if !d.Mode.Valid() {
			return AllAccess
		}
		raw, has := obj[d.Field]
		p := d.Default
		if has && string(raw) != "null" {
			if err := json.Unmarshal(raw, &p); err != nil {
				return AllAccess
			}
			if p == "" {
				p = d.Default
			}
		}
		if p == "" {
			return AllAccess
		}
		norm, ok := NormalizePath(p, fold)
		if !ok {
			return AllAccess
		}
		out.Paths = append(out.Paths, Access{Path: norm, Mode: d.Mode, Recursive: d.Recursive})
		if d.Parents {
			for dir := path.Dir(norm); dir != "." && dir != "/"; dir = path.Dir(dir) {
				out.Paths = append(out.Paths, Access{Path: dir, Mode: AccessWrite})
			}
		}
	}
	return out
}
