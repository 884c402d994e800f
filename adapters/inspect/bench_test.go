package inspect

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// bigEvents is the size of the benchmarks' session.
const bigEvents = 10000

// big is the benchmarks' database: one session of at least bigEvents
// events, made once per test binary (TestMain removes it).
var big struct {
	once sync.Once
	dir  string
	path string
	head uint64
}

// bigID is the benchmarks' session.
const bigID = vocab.ID("01JINSPECTBIGSESSION000001")

// bigSession makes the benchmarks' database: the agentsvc session of
// testdata/session.json, its events copied again and again (turns
// renumbered, tool calls renamed) into one session of bigEvents events.
func bigSession(b *testing.B) (string, uint64) {
	big.once.Do(func() {
		dir, err := os.MkdirTemp("", "inspect-bench-")
		if err != nil {
			b.Fatal(err)
		}
		big.dir = dir
		src := filepath.Join(dir, "src.db")
		writeAgentSession(b, src, "src")
		events := readLog(b, src, "src")
		turns := 0
		for _, e := range events {
			turns = max(turns, e.Turn)
		}
		span := events[len(events)-1].At.Sub(events[0].At) + time.Millisecond

		big.path = filepath.Join(dir, "big.db")
		st, err := sqlite.Open(context.Background(), big.path, sqlite.Options{Synchronous: "OFF"})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		c, _, err := st.Claim(context.Background(), bigID, "01JINSPECTRUN0000000000001", true)
		if err != nil {
			b.Fatal(err)
		}
		var batch []vocab.Event
		for k := 0; big.head < bigEvents; k++ {
			suffix := fmt.Sprintf("-%d", k)
			for _, e := range events {
				big.head++
				e.Session, e.Seq = bigID, big.head
				e.At = e.At.Add(time.Duration(k) * span)
				if e.Turn > 0 {
					e.Turn += k * turns
				}
				switch p := e.Payload.(type) {
				case vocab.TransitionPayload:
					if p.Instance != "" {
						p.Instance += suffix
					}
					e.Payload = p
				case vocab.ToolPayload:
					p.Call.ID += suffix
					e.Payload = p
				}
				batch = append(batch, e)
				if len(batch) == 1000 {
					if err := st.Append(context.Background(), bigID, c, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
		}
		if err := st.Append(context.Background(), bigID, c, batch); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
	})
	if big.path == "" {
		b.Fatal("no benchmark database")
	}
	return big.path, big.head
}

// loadPage makes the requests of a session page's first load: the page,
// the last page of the timeline and the states at the head.
func loadPage(b *testing.B, h http.Handler, head uint64) {
	for _, u := range []string{
		"/s/" + string(bigID),
		fmt.Sprintf("/api/sessions/%s/events?before=%d&limit=100", bigID, head+1),
		"/api/sessions/" + string(bigID) + "/states",
	} {
		if res, body := get(b, h, u); res.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s: %.200s", u, res.Status, body)
		}
	}
}

// BenchmarkSessionPage loads the page of a 10,000-event session and its
// first data requests: cold (a new handler each time: the database
// opened, the three diagrams drawn, the session's index built) and warm
// (the same handler: the index only caught up).
func BenchmarkSessionPage(b *testing.B) {
	path, head := bigSession(b)
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			h, err := New(Options{DB: path})
			if err != nil {
				b.Fatal(err)
			}
			loadPage(b, h, head)
			h.Close()
		}
		reportMS(b)
	})
	b.Run("warm", func(b *testing.B) {
		h := newHandler(b, path, Options{})
		loadPage(b, h, head)
		wantDrawn(b, h)
		for b.Loop() {
			loadPage(b, h, head)
		}
		reportMS(b)
	})
}

// BenchmarkTimeTravel jumps to events spread over a 10,000-event
// session: the states alone (a search in the session's index), and the
// whole jump the page makes (the states, the timeline page around the
// event and the event's detail).
func BenchmarkTimeTravel(b *testing.B) {
	path, head := bigSession(b)
	h := newHandler(b, path, Options{})
	loadPage(b, h, head)
	at := func(i int) uint64 { return 1 + uint64(i*7919)%head }
	b.Run("states", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			get(b, h, fmt.Sprintf("/api/sessions/%s/states?at=%d", bigID, at(i)))
		}
		reportMS(b)
	})
	b.Run("jump", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			seq := at(i)
			for _, u := range []string{
				fmt.Sprintf("/api/sessions/%s/states?at=%d", bigID, seq),
				fmt.Sprintf("/api/sessions/%s/events?from=%d&limit=100", bigID, max(seq, 51)-50),
				fmt.Sprintf("/api/sessions/%s/events/%d", bigID, seq),
			} {
				if res, _ := get(b, h, u); res.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %s", u, res.Status)
				}
			}
		}
		reportMS(b)
	})
}

// reportMS reports the time per operation in milliseconds.
func reportMS(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// wantDrawn checks that the big session's machines are all drawn, and
// that it holds bigEvents events.
func wantDrawn(b *testing.B, h http.Handler) {
	var info struct {
		Head     uint64 `json:"head"`
		Machines []struct {
			Drawable bool `json:"drawable"`
		} `json:"machines"`
	}
	getJSON(b, h, "/api/sessions/"+string(bigID), &info)
	if info.Head < bigEvents || len(info.Machines) != 3 || !info.Machines[0].Drawable || !info.Machines[1].Drawable || !info.Machines[2].Drawable {
		b.Fatalf("the big session: %+v", info)
	}
}
