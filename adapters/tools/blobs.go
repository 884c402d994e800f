package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/loopchart/loopchart/vocab"
)

// Blobs is a content-addressed store for outputs too large for the
// history (see Registry.SetSpill). A blob's ref is "sha256:" followed by
// the 64 lowercase hex digits of the SHA-256 of its content, so storing
// the same content twice stores it once. Implementations must be safe for
// concurrent use.
type Blobs interface {
	// Put stores data and returns its ref and size.
	Put(ctx context.Context, data []byte) (vocab.Spill, error)
	// Get returns the content stored under ref. A ref that is not
	// "sha256:<64 lowercase hex>" gives an error matching ErrBadRef; a
	// ref with nothing stored gives one matching ErrBlobNotFound.
	Get(ctx context.Context, ref string) ([]byte, error)
}

// Errors of Blobs, matched with errors.Is.
var (
	// ErrBadRef: a ref is not "sha256:" and 64 lowercase hex digits.
	ErrBadRef = errors.New("bad blob ref")
	// ErrBlobNotFound: nothing is stored under the ref.
	ErrBlobNotFound = errors.New("blob not found")
	// ErrBlobCorrupt: the stored content does not hash to its ref.
	ErrBlobCorrupt = errors.New("blob corrupt")
)

// BlobError is the error Blobs return: the operation, the ref it concerns
// (as given, quoted when shown) and the reason, one of ErrBadRef,
// ErrBlobNotFound, ErrBlobCorrupt or an I/O error.
type BlobError struct {
	Op  string // "put" or "get"
	Ref string
	Err error
}

// Error implements error.
func (e *BlobError) Error() string {
	if e.Ref == "" {
		return fmt.Sprintf("blobs: %s: %v", e.Op, e.Err)
	}
	ref := e.Ref
	if len(ref) > 80 {
		ref = ref[:80] + "…"
	}
	return fmt.Sprintf("blobs: %s %q: %v", e.Op, ref, e.Err)
}

// Unwrap returns the reason.
func (e *BlobError) Unwrap() error { return e.Err }

// refPrefix starts every blob ref.
const refPrefix = "sha256:"

// refOf returns the ref of data and its hex digest.
func refOf(data []byte) (ref, digest string) {
	sum := sha256.Sum256(data)
	digest = hex.EncodeToString(sum[:])
	return refPrefix + digest, digest
}

// parseRef returns the hex digest of ref, or an error matching ErrBadRef.
// It accepts nothing but "sha256:" and 64 lowercase hex digits, so a
// digest is always safe as a file name.
func parseRef(op, ref string) (string, error) {
	digest, ok := strings.CutPrefix(ref, refPrefix)
	if !ok || len(digest) != sha256.Size*2 {
		return "", &BlobError{Op: op, Ref: ref, Err: ErrBadRef}
	}
	for i := 0; i < len(digest); i++ {
		c := digest[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", &BlobError{Op: op, Ref: ref, Err: ErrBadRef}
		}
	}
	return digest, nil
}

// spillOf describes data stored under ref.
func spillOf(ref string, data []byte) vocab.Spill {
	return vocab.Spill{Ref: ref, Chars: utf8.RuneCount(data), Bytes: len(data)}
}

// DirBlobs returns a store keeping each blob as a file of dir named by the
// hex SHA-256 of its content; no model or tool text ever becomes part of
// a file name. dir is created (0700) on the first Put. A blob is written
// to a temporary file of dir, synced, then renamed into place, so a crash
// never leaves part of a blob under its final name. Get checks that the
// content still hashes to its ref.
func DirBlobs(dir string) Blobs {
	return &dirBlobs{dir: dir}
}

type dirBlobs struct {
	dir string
}

func (d *dirBlobs) Put(ctx context.Context, data []byte) (vocab.Spill, error) {
	if err := ctx.Err(); err != nil {
		return vocab.Spill{}, &BlobError{Op: "put", Err: err}
	}
	ref, digest := refOf(data)
	final := filepath.Join(d.dir, digest)
	if d.holds(final, data) {
		return spillOf(ref, data), nil // already stored: a no-op
	}
	if err := d.write(final, data); err != nil {
		return vocab.Spill{}, &BlobError{Op: "put", Ref: ref, Err: err}
	}
	return spillOf(ref, data), nil
}

// holds reports whether final is a regular file holding exactly data (a
// damaged copy is replaced by the next Put).
func (d *dirBlobs) holds(final string, data []byte) bool {
	fi, err := os.Lstat(final)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false
	}
	old, err := os.ReadFile(final)
	return err == nil && bytes.Equal(old, data)
}

// write stores data under final atomically and durably.
func (d *dirBlobs) write(final string, data []byte) (err error) {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.dir, ".put-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, final); err != nil {
		return err
	}
	syncDir(d.dir)
	return nil
}

// syncDir makes a rename in dir durable where the platform allows it.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync() // not supported everywhere (Windows); the rename stands either way
		_ = f.Close()
	}
}

func (d *dirBlobs) Get(ctx context.Context, ref string) ([]byte, error) {
	digest, err := parseRef("get", ref)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &BlobError{Op: "get", Ref: ref, Err: err}
	}
	data, err := os.ReadFile(filepath.Join(d.dir, digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &BlobError{Op: "get", Ref: ref, Err: ErrBlobNotFound}
	}
	if err != nil {
		return nil, &BlobError{Op: "get", Ref: ref, Err: err}
	}
	if got, _ := refOf(data); got != ref {
		return nil, &BlobError{Op: "get", Ref: ref, Err: ErrBlobCorrupt}
	}
	return data, nil
}

// MemoryBlobs returns a store that keeps blobs in memory, for tests and
// short-lived sessions.
func MemoryBlobs() Blobs {
	return &memBlobs{m: map[string][]byte{}}
}

type memBlobs struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func (m *memBlobs) Put(ctx context.Context, data []byte) (vocab.Spill, error) {
	if err := ctx.Err(); err != nil {
		return vocab.Spill{}, &BlobError{Op: "put", Err: err}
	}
	ref, _ := refOf(data)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[ref]; !ok {
		m.m[ref] = append([]byte(nil), data...)
	}
	return spillOf(ref, data), nil
}

func (m *memBlobs) Get(ctx context.Context, ref string) ([]byte, error) {
	if _, err := parseRef("get", ref); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &BlobError{Op: "get", Ref: ref, Err: err}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	data, ok := m.m[ref]
	if !ok {
		return nil, &BlobError{Op: "get", Ref: ref, Err: ErrBlobNotFound}
	}
	return append([]byte(nil), data...), nil
}
