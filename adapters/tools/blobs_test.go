package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopchart/loopchart/vocab"
)

// stores returns one store of each kind, fresh.
func stores(t *testing.T) map[string]Blobs {
	return map[string]Blobs{"dir": DirBlobs(filepath.Join(t.TempDir(), "blobs")), "memory": MemoryBlobs()}
}

const helloRef = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")

func TestBlobsPutGet(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		data string
		want vocab.Spill
	}{
		{"ascii", "hello", vocab.Spill{Ref: helloRef, Chars: 5, Bytes: 5}},
		{"multibyte", "héllo €", vocab.Spill{Ref: "sha256:9cb52b6d1cfc1eae34c63c2b0ff0d49ed8ef2c82482b3c455747594c83754098", Chars: 7, Bytes: 10}},
		{"empty", "", vocab.Spill{Ref: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Chars: 0, Bytes: 0}},
	}
	for kind, b := range stores(t) {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				sp, err := b.Put(ctx, []byte(c.data))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(c.want, sp); diff != "" {
					t.Errorf("Put (-want +got):\n%s", diff)
				}
				if want, _ := refOf([]byte(c.data)); sp.Ref != want || sp.Chars != c.want.Chars || sp.Bytes != c.want.Bytes {
					t.Errorf("Put = %+v", sp)
				}
				again, err := b.Put(ctx, []byte(c.data)) // a no-op
				if err != nil || again != sp {
					t.Errorf("second Put = %+v, %v", again, err)
				}
				got, err := b.Get(ctx, sp.Ref)
				if err != nil || string(got) != c.data {
					t.Errorf("Get = %q, %v", got, err)
				}
			})
		}
	}
}

func TestBlobsGetErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, ref string
		want      error
	}{
		{"missing", "sha256:" + strings.Repeat("0", 64), ErrBlobNotFound},
		{"empty", "", ErrBadRef},
		{"no prefix", strings.Repeat("0", 64), ErrBadRef},
		{"other algorithm", "md5:" + strings.Repeat("0", 64), ErrBadRef},
		{"uppercase hex", "sha256:" + strings.ToUpper(helloRef[7:]), ErrBadRef},
		{"short", helloRef[:70], ErrBadRef},
		{"long", helloRef + "0", ErrBadRef},
		{"not hex", "sha256:" + strings.Repeat("g", 64), ErrBadRef},
		{"path traversal", "sha256:../../../../etc/passwd" + strings.Repeat("0", 35), ErrBadRef},
		{"separator", "sha256:" + strings.Repeat("0", 31) + "/" + strings.Repeat("0", 32), ErrBadRef},
		{"whitespace", " " + helloRef, ErrBadRef},
	}
	for kind, b := range stores(t) {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				data, err := b.Get(ctx, c.ref)
				if !errors.Is(err, c.want) || data != nil {
					t.Fatalf("Get(%q) = %q, %v; want %v", c.ref, data, err, c.want)
				}
				var be *BlobError
				if !errors.As(err, &be) || be.Op != "get" || be.Ref != c.ref {
					t.Errorf("error %#v is not a *BlobError for get %q", err, c.ref)
				}
			})
		}
	}
}

func TestDirBlobsFiles(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "spill")
	b := DirBlobs(dir)
	if _, err := b.Put(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// One file named by the hash: no temp file left behind, nothing of
	// the content in the name.
	if diff := cmp.Diff([]string{helloRef[7:]}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(dir, helloRef[7:])); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("blob file: %v, mode %v", err, fi.Mode())
	}

	// A damaged blob is detected by Get, and repaired by the next Put.
	if err := os.WriteFile(filepath.Join(dir, helloRef[7:]), []byte("jello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, helloRef); !errors.Is(err, ErrBlobCorrupt) {
		t.Errorf("Get of a damaged blob: %v, want ErrBlobCorrupt", err)
	}
	if _, err := b.Put(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, helloRef); err != nil || string(got) != "hello" {
		t.Errorf("after repair: %q, %v", got, err)
	}

	// A leftover temp file (a crash mid-Put) is never a blob.
	if err := os.WriteFile(filepath.Join(dir, ".put-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "sha256:"+strings.Repeat("a", 64)); !errors.Is(err, ErrBlobNotFound) {
		t.Errorf("Get: %v", err)
	}
}

func TestDirBlobsPutFails(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		b    Blobs
		ctx  context.Context
	}{
		{"dir is a file", DirBlobs(file), ctx},
		{"cancelled", DirBlobs(t.TempDir()), cancelledCtx()},
		{"memory cancelled", MemoryBlobs(), cancelledCtx()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.b.Put(c.ctx, []byte("x"))
			var be *BlobError
			if !errors.As(err, &be) || be.Op != "put" {
				t.Errorf("Put: %v, want a *BlobError", err)
			}
		})
	}
}

func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestBlobsConcurrentPut(t *testing.T) {
	ctx := context.Background()
	for kind, b := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			data := []byte(strings.Repeat("spill ", 10000))
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					if _, err := b.Put(ctx, data); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			ref, _ := refOf(data)
			got, err := b.Get(ctx, ref)
			if err != nil || string(got) != string(data) {
				t.Errorf("Get: %d bytes, %v", len(got), err)
			}
		})
	}
}
