package inspect

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// guard bounds every wait of these tests: a failure guard, never a way
// to let something happen.
const guard = 20 * time.Second

// sseItem is one thing read from a stream: a message (ID, Data), a
// comment, or the stream's end (Err).
type sseItem struct {
	ID, Data, Comment string
	Err               error
}

// readSSE parses the stream body into items until it ends; the last
// item carries the error that ended it (io.EOF for a clean end).
func readSSE(body io.Reader, out chan<- sseItem) {
	sc := bufio.NewScanner(body)
	var cur sseItem
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.ID != "" || cur.Data != "" {
				out <- cur
			}
			cur = sseItem{}
		case strings.HasPrefix(line, ":"):
			out <- sseItem{Comment: strings.TrimSpace(line[1:])}
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "data: "):
			cur.Data = line[6:]
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	out <- sseItem{Err: err}
}

// openStream connects to url (with lastID as Last-Event-ID when not
// empty) and returns the items read from it.
func openStream(t *testing.T, ctx context.Context, url, lastID string) <-chan sseItem {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
	items := make(chan sseItem, 1024)
	go func() {
		defer res.Body.Close()
		readSSE(res.Body, items)
	}()
	return items
}

// next returns the next item that is a message (or the end), skipping
// comments; hb reports whether a heartbeat was skipped.
func next(t *testing.T, items <-chan sseItem, hb *bool) sseItem {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case it := <-items:
			if it.Comment == "heartbeat" && hb != nil {
				*hb = true
			}
			if it.Comment != "" || it.ID == "" && it.Data == "" && it.Err == nil {
				continue
			}
			return it
		case <-timeout:
			t.Fatal("no message from the stream")
			return sseItem{}
		}
	}
}

// wantMessage reads the next message and checks that its id is seq and
// that its data is the row of event seq.
func wantMessage(t *testing.T, items <-chan sseItem, seq uint64) Row {
	t.Helper()
	it := next(t, items, nil)
	if it.Err != nil {
		t.Fatalf("the stream ended before event %d: %v", seq, it.Err)
	}
	var r Row
	if err := json.Unmarshal([]byte(it.Data), &r); err != nil {
		t.Fatalf("message %s: %v", it.ID, err)
	}
	if it.ID != strconv.FormatUint(seq, 10) || r.Seq != seq {
		t.Fatalf("message id %s, row %d; want %d", it.ID, r.Seq, seq)
	}
	return r
}

// liveSession makes a database with session id holding n events written
// by a Store that stays open (the live writer), and returns the writer,
// its claim and the head.
func liveSession(t *testing.T, id vocab.ID, n int) (string, *sqlite.Store, store.Claim, uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "live.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, _, err := st.Claim(context.Background(), id, "01JINSPECTRUN0000000000001", true)
	if err != nil {
		t.Fatal(err)
	}
	var head uint64
	for range n {
		head = appendEvents(t, st, id, c, head, time.Now(), vocab.StatusPayload{Status: "running"})
	}
	return path, st, c, head
}

// The stream's ids are the events' seqs; a reconnection with
// Last-Event-ID resumes at the next event; events another connection
// commits arrive (noticed by polling); heartbeats arrive while nothing
// happens; the stream ends when the handler closes.
func TestStream(t *testing.T) {
	const id = vocab.ID("live-session")
	path, st, c, head := liveSession(t, id, 5)
	h, err := New(Options{DB: path, PollInterval: 2 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	url := srv.URL + "/api/sessions/" + string(id) + "/stream"

	items := openStream(t, ctx, url+"?from=1", "")
	for seq := uint64(1); seq <= head; seq++ {
		wantMessage(t, items, seq)
	}
	// Another connection commits: the poll notices.
	head = appendEvents(t, st, id, c, head, time.Now(),
		vocab.TransitionPayload{Machine: "agent", From: "ready", To: "active", Trigger: "submit", Guard: "startTurn"},
		vocab.ToolPayload{Call: vocab.ToolCall{ID: "c1", Name: "shout"}, Result: &vocab.ToolResult{CallID: "c1", Content: markup}})
	if r := wantMessage(t, items, head-1); r.Machine != "agent" {
		t.Errorf("row %+v", r)
	}
	if r := wantMessage(t, items, head); !strings.Contains(r.Summary, markup) || r.Call != "c1" {
		t.Errorf("row %+v", r)
	}
	// Nothing happens: heartbeats.
	hb := false
	timeout := time.After(guard)
	for !hb {
		select {
		case it := <-items:
			if it.Err != nil || it.ID != "" {
				t.Fatalf("waiting for a heartbeat: %+v", it)
			}
			hb = it.Comment == "heartbeat"
		case <-timeout:
			t.Fatal("no heartbeat")
		}
	}

	// Resume after event 3, then live again.
	resumed := openStream(t, ctx, url, "3")
	for seq := uint64(4); seq <= head; seq++ {
		wantMessage(t, resumed, seq)
	}
	// Notify wakes the streams without waiting for a poll.
	head = appendEvents(t, st, id, c, head, time.Now(), vocab.StatusPayload{Status: "idle"})
	h.Notify()
	wantMessage(t, items, head)
	wantMessage(t, resumed, head)

	// Shutdown ends both streams.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []<-chan sseItem{items, resumed} {
		if it := next(t, s, nil); it.Err == nil {
			t.Fatalf("after Close: %+v", it)
		}
	}
	// After Close, the handler answers 503.
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a stream after Close: %s", res.Status)
	}
}

// A stream asks from the head by default, and filters like the events.
func TestStreamFromHeadFiltered(t *testing.T) {
	const id = vocab.ID("live-session")
	path, st, c, head := liveSession(t, id, 3)
	h, err := New(Options{DB: path, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	url := srv.URL + "/api/sessions/" + string(id) + "/stream"

	items := openStream(t, ctx, url+"?kind=machine/", "")
	head = appendEvents(t, st, id, c, head, time.Now(), vocab.StatusPayload{Status: "idle"},
		vocab.TransitionPayload{Machine: "agent", From: "ready", To: "active", Trigger: "submit", Guard: "startTurn"})
	h.Notify()
	if r := wantMessage(t, items, head); r.Kind != string(vocab.EventTransition) {
		t.Errorf("row %+v", r)
	}
	for _, bad := range []string{"?from=x", "/../../nowhere"} {
		res, err := http.Get(url + bad)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("%s: %s", bad, res.Status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Last-Event-ID", "seven")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad Last-Event-ID: %s", res.Status)
	}
}
