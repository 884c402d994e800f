package inspect

import (
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// TestMain fails the package if a test leaves a goroutine behind, and
// removes the benchmarks' database.
func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanRun{m}) }

// cleanRun runs the tests, then removes what the benchmarks made.
type cleanRun struct{ m *testing.M }

func (c cleanRun) Run() int {
	code := c.m.Run()
	if big.dir != "" {
		os.RemoveAll(big.dir)
	}
	return code
}

//go:embed testdata/session.json
var sessionScript []byte

// markup is what the shout tool returns: a tool result holding a script.
const markup = `<script>alert("owned")</script>`

// testTool is a tool that returns a fixed text.
type testTool struct{ name, result string }

func (t testTool) Spec() vocab.ToolSpec {
	return vocab.ToolSpec{Name: t.name, Description: "returns " + t.result, NoAccess: true,
		Schema: json.RawMessage(`{"type":"object"}`)}
}

func (t testTool) Run(ctx context.Context, call vocab.ToolCall, progress func(string)) (vocab.ToolResult, error) {
	return vocab.ToolResult{CallID: call.ID, Name: t.name, Content: t.result}, nil
}

// writeAgentSession runs testdata/session.json through agentsvc over the
// SQLite store at path, as session id: two prompts (two turns), tool
// calls and a retry. The store is closed when it returns.
func writeAgentSession(t testing.TB, path string, id vocab.ID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script, err := scripted.Parse(sessionScript, "testdata/session.json")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := agentsvc.Open(ctx, st, id, agentsvc.Options{
		Provider: scripted.New(script, nil),
		Tools:    []vocab.Tool{testTool{"note", "hello"}, testTool{"shout", markup}},
		Model:    "scripted",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []string{"Read the note.", "Again."} {
		p, err := svc.SubmitText(prompt)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(ctx)
		if err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %q: %v, %v", prompt, res, err)
		}
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// agentDB is a database holding one agentsvc session, the id returned.
func agentDB(t testing.TB) (string, vocab.ID) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loop.db")
	id := vocab.ID("01JINSPECTAGENTSESSION0001")
	writeAgentSession(t, path, id)
	return path, id
}

// newHandler makes a Handler on the database at path, closed at the end
// of the test.
func newHandler(t testing.TB, path string, o Options) *Handler {
	t.Helper()
	o.DB = path
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// get serves a GET of target by h and returns the response and its body.
func get(t testing.TB, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// getJSON serves a GET of target, checks the status and decodes the body
// into v.
func getJSON(t testing.TB, h http.Handler, target string, v any) string {
	t.Helper()
	res, body := get(t, h, target)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", target, res.Status, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET %s: Content-Type %q", target, ct)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", target, err, body)
	}
	return body
}

// readLog reads every event of session id straight from the database at
// path.
func readLog(t testing.TB, path string, id vocab.ID) []vocab.Event {
	t.Helper()
	r, err := sqlite.OpenReadOnly(context.Background(), path, sqlite.ReadOnlyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	page, err := r.Events(context.Background(), id, sqlite.EventQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var out []vocab.Event
	for _, rec := range page.Records {
		e, err := rec.Event()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// appendEvents appends events of the given kinds and payloads to session
// id of st under claim c, after head; it returns the new head.
func appendEvents(t testing.TB, st store.Store, id vocab.ID, c store.Claim, head uint64, at time.Time, payloads ...any) uint64 {
	t.Helper()
	var batch []vocab.Event
	for _, p := range payloads {
		head++
		e := vocab.Event{Session: id, Seq: head, At: at}
		switch p := p.(type) {
		case vocab.TransitionPayload:
			e.Kind, e.Payload = vocab.EventTransition, p
		case vocab.ToolPayload:
			e.Kind, e.Payload = vocab.EventToolResult, p
		case vocab.StatusPayload:
			e.Kind, e.Payload = vocab.EventStatus, p
		case vocab.EventKind:
			e.Kind = p
		default:
			t.Fatalf("appendEvents: %T", p)
		}
		batch = append(batch, e)
	}
	if err := st.Append(context.Background(), id, c, batch); err != nil {
		t.Fatal(err)
	}
	return head
}
