package temporal_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	lt "github.com/loopchart/loopchart/adapters/temporal"
)

func TestContentStores(t *testing.T) {
	ctx := context.Background()
	sq, err := lt.OpenSQLiteContent(ctx, filepath.Join(t.TempDir(), "content.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	for name, s := range map[string]lt.ContentStore{"memory": lt.NewMemoryContent(), "sqlite": sq} {
		t.Run(name, func(t *testing.T) {
			blobs := [][]byte{[]byte("a"), []byte("bb"), []byte("a"), {}}
			if err := s.Put(ctx, blobs); err != nil {
				t.Fatal(err)
			}
			for _, b := range blobs {
				got, err := s.Get(ctx, lt.RefOf(b))
				if err != nil || string(got) != string(b) {
					t.Errorf("Get(%q) = %q, %v", b, got, err)
				}
			}
			_, err := s.Get(ctx, lt.RefOf([]byte("missing")))
			if !errors.Is(err, lt.CodeContentMissing.Err()) {
				t.Errorf("missing: %v", err)
			}
		})
	}
}
