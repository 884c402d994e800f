package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a command's goroutine and the
// test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// `loopchart inspect` serves the demo's log on the address it was given
// (port 0: one the system chose), only to local Host names, and stops
// with exit status 0 when interrupted, ending an open event stream.
func TestInspect(t *testing.T) {
	db := tempDB(t)
	if code, _, errOut := runCmd(t, "demo", "--instant", "--db", db); code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}

	listening := make(chan string, 1)
	inspectListening = func(addr string) { listening <- addr }
	defer func() { inspectListening = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"inspect", "--db", db, "--addr", "127.0.0.1:0"}, &stdout, &stderr) }()
	var addr string
	select {
	case addr = <-listening:
	case code := <-done:
		t.Fatalf("inspect exited %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("inspect did not listen")
	}
	base := "http://" + addr + "/"
	if got := stdout.String(); got != base+"\n" {
		t.Errorf("stdout %q, want the URL %s", got, base)
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	res, err := client.Get(base + "api/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Sessions []struct {
			ID     string `json:"id"`
			Result string `json:"result"`
			Closed bool   `json:"closed"`
		} `json:"sessions"`
	}
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || len(list.Sessions) != 1 || !strings.HasPrefix(list.Sessions[0].Result, "completed") || !list.Sessions[0].Closed {
		t.Fatalf("the session list: %s %+v %v", res.Status, list, err)
	}
	id := list.Sessions[0].ID

	res, err = client.Get(base + "s/" + id)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Security-Policy") != "default-src 'self'" || !bytes.Contains(page, []byte(`id="diagram-turn"`)) {
		t.Errorf("the session page: %s", res.Status)
	}

	// DNS rebinding: another host name is refused.
	req, _ := http.NewRequest(http.MethodGet, base+"api/sessions", nil)
	req.Host = "evil.example"
	if res, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: %s", res.Status)
	}

	// An open stream ends when the command is interrupted.
	res, err = client.Get(base + "api/sessions/" + id + "/stream?from=1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream: %v", err)
		}
		if line == "id: 1\n" {
			break
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("inspect exited %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("inspect did not stop")
	}
	// The body ends (cleanly, or cut): reading it returns (the client's
	// timeout is the guard).
	io.Copy(io.Discard, br)
	if !strings.Contains(stderr.String(), "read-only") {
		t.Errorf("stderr: %q", stderr.String())
	}
}

func TestInspectMissingDB(t *testing.T) {
	db := filepath.Join(t.TempDir(), "none.db")
	code, out, errOut := runCmd(t, "inspect", "--db", db, "--addr", "127.0.0.1:0")
	if code != 1 || out != "" || !strings.Contains(errOut, "no log database "+db) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Error("inspect created the database")
	}
	if code, _, errOut := runCmd(t, "inspect", "--db", db, "extra"); code != 2 || !strings.HasPrefix(errOut, "loopchart: usage: ") {
		t.Errorf("an argument: exit %d, %q", code, errOut)
	}
}
