package temporal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/loopchart/loopchart/vocab"
)

// Ref names a piece of content by its SHA-256 hash, in hex.
type Ref string

// RefOf returns the reference of data.
func RefOf(data []byte) Ref {
	sum := sha256.Sum256(data)
	return Ref(hex.EncodeToString(sum[:]))
}

// ContentStore keeps content by hash, so that workflow history, activity
// arguments and continue-as-new inputs carry references, never the
// transcript (a Temporal payload is limited to 2 MB). Put is idempotent:
// putting the same content twice stores it once. Implementations must be
// safe for concurrent use by a worker's activities.
type ContentStore interface {
	// Put stores each blob under RefOf(blob).
	Put(ctx context.Context, blobs [][]byte) error
	// Get returns the content of ref; a missing ref is an error with code
	// CodeContentMissing.
	Get(ctx context.Context, ref Ref) ([]byte, error)
}

// MemoryContent is a ContentStore in memory, for tests and single-process
// development: content is lost with the process, so workers on other
// machines cannot share it.
type MemoryContent struct {
	mu    sync.RWMutex
	blobs map[Ref][]byte
}

// NewMemoryContent returns an empty in-memory content store.
func NewMemoryContent() *MemoryContent { return &MemoryContent{blobs: map[Ref][]byte{}} }

// Put implements ContentStore.
func (m *MemoryContent) Put(_ context.Context, blobs [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range blobs {
		r := RefOf(b)
		if _, ok := m.blobs[r]; !ok {
			m.blobs[r] = append([]byte(nil), b...)
		}
	}
	return nil
}

// Get implements ContentStore.
func (m *MemoryContent) Get(_ context.Context, ref Ref) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.blobs[ref]
	if !ok {
		return nil, vocab.Errorf(CodeContentMissing, "content %s not found", ref)
	}
	return append([]byte(nil), b...), nil
}

// Len reports how many pieces of content the store holds.
func (m *MemoryContent) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.blobs)
}
