package inspect

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// WAL test sizes: batches of events with big tool results. The run
// writes walWritten bytes of results, which take about 29 MB of WAL
// frames (what the control reaches, with no checkpoint completing): far
// more than walBound, a few checkpoint intervals' worth.
const (
	walBatches   = 100
	walBatch     = 50
	walPayload   = 1024
	walBound     = 8 << 20
	walWritten   = walBatches * walBatch * walPayload // about 5 MB
	walJournalSz = 1 << 20
)

// writeMany appends walBatches batches to session id and returns the
// largest size the -wal file reached, measured after each batch.
func writeMany(t *testing.T, path string, st *sqlite.Store, id vocab.ID, c store.Claim, head uint64) (uint64, int64) {
	t.Helper()
	text := strings.Repeat("x", walPayload)
	var most int64
	for range walBatches {
		var ps []any
		for range walBatch {
			ps = append(ps, vocab.ToolPayload{Call: vocab.ToolCall{ID: "c", Name: "big"}, Result: &vocab.ToolResult{CallID: "c", Content: text}})
		}
		head = appendEvents(t, st, id, c, head, time.Now(), ps...)
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, fi.Size())
	}
	return head, most
}

// The write-ahead log stays bounded while a page's stream is open on a
// session being written, its client too slow to read: the stream reads a
// page into memory and ends its read transaction before it writes, so
// the writer's checkpoints complete. (The control: a reader that holds a
// read transaction open lets the log grow past the bound.)
func TestWALBoundedWithSlowStream(t *testing.T) {
	const id = vocab.ID("busy-session")
	path := filepath.Join(t.TempDir(), "busy.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "OFF", CheckpointEvery: 4, JournalSizeLimit: walJournalSz})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _, err := st.Claim(context.Background(), id, "01JINSPECTRUN0000000000001", true)
	if err != nil {
		t.Fatal(err)
	}
	head := appendEvents(t, st, id, c, 0, time.Now(), vocab.StatusPayload{Status: "running"})

	h, err := New(Options{DB: path, PollInterval: 5 * time.Millisecond, WriteTimeout: guard})
	if err != nil {
		t.Fatal(err)
	}
	// The server's socket buffers are small, so that a client that does
	// not read soon blocks the stream's writes.
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	defer func() {
		h.Close() // ends the stream, blocked writing to a client that no longer reads
		srv.Close()
	}()

	// The slow client: it reads the first event, then nothing.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(guard))
	fmt.Fprintf(conn, "GET /api/sessions/%s/stream?from=1 HTTP/1.1\r\nHost: localhost\r\n\r\n", id)
	br := bufio.NewReaderSize(conn, 512)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("stream: %q, %v", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "id: 1") {
			break
		}
	}

	head, most := writeMany(t, path, st, id, c, head)
	t.Logf("%d bytes of tool results written; the -wal file reached %d bytes", walWritten, most)
	if most > walBound {
		t.Errorf("the -wal file reached %d bytes with a slow stream open (bound %d)", most, walBound)
	}

	// The stream kept its place: reading on, the client gets every event.
	conn.SetDeadline(time.Now().Add(guard))
	want := fmt.Sprintf("id: %d\n", head)
	last := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the backlog: %v (last %q, want %q)", err, last, want)
		}
		if strings.HasPrefix(line, "id:") {
			last = line
		}
		if line == want {
			break
		}
	}

	// The control: a read transaction held open keeps the checkpoints
	// from resetting the log, which then grows past the bound.
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tx, err := ro.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	_, held := writeMany(t, path, st, id, c, head)
	tx.Rollback()
	t.Logf("with a read transaction held open, the -wal file reached %d bytes", held)
	if held <= walBound {
		t.Errorf("the control did not grow the -wal file past %d bytes (%d): the bound proves nothing", walBound, held)
	}
}

// smallBuffers is a listener whose connections have small send buffers.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8192)
	}
	return c, err
}
