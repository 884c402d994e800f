package inspect

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// Options configures a Handler. Exactly one of DB and Store is set.
type Options struct {
	// DB is the path of the SQLite log to inspect: the handler opens it
	// read-only (sqlite.OpenReadOnly) and closes it on Close. A missing
	// file is an error; nothing is ever created or written.
	DB string
	// Store is an open read-only log, used when DB is empty; the caller
	// closes it after the handler.
	Store *sqlite.ReadOnly
	// PollInterval is how often the handler asks the database whether
	// another process wrote to it (PRAGMA data_version, one short query)
	// while a stream is open; 200 ms when zero.
	PollInterval time.Duration
	// Heartbeat is the interval of the comment lines a stream sends while
	// nothing happens; 15 s when zero.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a stream's client; a client that
	// takes longer is dropped. 10 s when zero.
	WriteTimeout time.Duration
	// Definitions are machine definitions besides this build's (see
	// BuiltinDefinitions), e.g. those of an older version: a session's
	// machine is drawn with the first definition, this build's first,
	// that explains every transition its log recorded.
	Definitions []Definition
	// Logger receives the handler's diagnostics; nothing is logged when
	// nil.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	defaultPoll         = 200 * time.Millisecond
	defaultHeartbeat    = 15 * time.Second
	defaultWriteTimeout = 10 * time.Second
	// maxIndexes is how many sessions' indexes a handler keeps.
	maxIndexes = 16
)

// Handler serves the inspector: the session list, session pages and
// their JSON and event-stream APIs (see the package documentation). Make
// one with New, mount it on a mux (it uses relative URLs only, so any
// path prefix works with http.StripPrefix) and Close it when the server
// shuts down: Close ends the open streams.
type Handler struct {
	opts  Options
	db    *sqlite.ReadOnly
	ownDB bool
	log   *slog.Logger
	defs  []*compiled
	draw  *renderer
	mux   *http.ServeMux
	watch *watcher

	// ctx ends when the handler closes: the streams end with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	indexes map[vocab.ID]*indexEntry
	tick    uint64
}

// indexEntry is a cached session index and when it was last used.
type indexEntry struct {
	x    *sessionIndex
	used uint64
}

// New makes a Handler. With Options.DB it opens the database read-only:
// a missing file, or one that is not a loopchart log, is an error.
func New(opts Options) (*Handler, error) {
	switch {
	case opts.PollInterval < 0 || opts.Heartbeat < 0 || opts.WriteTimeout < 0:
		return nil, vocab.Errorf(vocab.CodeBadInput, "inspect: negative interval in %+v", opts)
	case opts.DB == "" && opts.Store == nil:
		return nil, vocab.Errorf(vocab.CodeBadInput, "inspect: no database (Options.DB or Options.Store)")
	case opts.DB != "" && opts.Store != nil:
		return nil, vocab.Errorf(vocab.CodeBadInput, "inspect: both Options.DB and Options.Store")
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = defaultPoll
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = defaultHeartbeat
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = defaultWriteTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var defs []*compiled
	for _, d := range append(BuiltinDefinitions(), opts.Definitions...) {
		c, err := compile(d)
		if err != nil {
			return nil, vocab.Errorf(vocab.CodeBadInput, "%w", err)
		}
		defs = append(defs, c)
	}
	h := &Handler{opts: opts, db: opts.Store, log: log, defs: defs, draw: newRenderer(defs), indexes: map[vocab.ID]*indexEntry{}}
	if opts.DB != "" {
		db, err := sqlite.OpenReadOnly(context.Background(), opts.DB, sqlite.ReadOnlyOptions{})
		if err != nil {
			return nil, err
		}
		h.db, h.ownDB = db, true
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.watch = newWatcher(h.ctx, h.db, opts.PollInterval, log)
	h.routes()
	return h, nil
}

// Close ends every open stream, stops polling the database, releases the
// diagram renderer and, when the handler opened the database, closes it.
// Requests after Close fail with 503. Close returns once the handler's
// own goroutine has stopped; streams still writing end at their next
// write.
func (h *Handler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.watch.wait()
	errs := []error{h.draw.close()}
	if h.ownDB {
		errs = append(errs, h.db.Close())
	}
	return errors.Join(errs...)
}

// Notify tells the open streams that the database may have changed, so
// that they look without waiting for the next poll: for an application
// that writes the log in the same process.
func (h *Handler) Notify() { h.watch.broadcast() }

//go:embed assets
var assets embed.FS

// pages are the HTML templates.
var pages = template.Must(template.New("").Funcs(template.FuncMap{"pathEscape": url.PathEscape}).ParseFS(assets, "assets/*.html"))

// routes sets up the handler's mux.
func (h *Handler) routes() {
	static, _ := fs.Sub(assets, "assets")
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.listPage)
	m.HandleFunc("GET /s/{id}", h.sessionPage)
	// No icon: say so without an error (browsers ask for one at the root).
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticOnly{static})))
	m.HandleFunc("GET /diagrams/{file}", h.diagram)
	m.HandleFunc("GET /api/sessions", h.apiSessions)
	m.HandleFunc("GET /api/sessions/{id}", h.apiSession)
	m.HandleFunc("GET /api/sessions/{id}/events", h.apiEvents)
	m.HandleFunc("GET /api/sessions/{id}/events/{seq}", h.apiEvent)
	m.HandleFunc("GET /api/sessions/{id}/states", h.apiStates)
	m.HandleFunc("GET /api/sessions/{id}/stream", h.stream)
	h.mux = m
}

// staticOnly serves the script and the style sheet, not the templates.
type staticOnly struct{ fsys fs.FS }

// Open implements fs.FS.
func (s staticOnly) Open(name string) (fs.File, error) {
	if name != "app.js" && name != "app.css" {
		return nil, fs.ErrNotExist
	}
	return s.fsys.Open(name)
}

// ServeHTTP implements http.Handler. Every response carries a
// Content-Security-Policy of default-src 'self' (the page runs only its
// own script and style sheet, and loads nothing from elsewhere); only GET
// and HEAD are served.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "SAMEORIGIN")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "the inspector only reads", http.StatusMethodNotAllowed)
		return
	}
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		http.Error(w, "the inspector is shutting down", http.StatusServiceUnavailable)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// LocalOnly serves next only to requests whose Host header names the
// local machine (localhost, 127.0.0.1 or [::1], with or without a port),
// and answers 421 Misdirected Request to any other: a page of another
// site that a DNS rebinding points at a local server still sends its own
// host name, and is refused. Wrap a handler served on a loopback address
// with it.
func LocalOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !localHost(r.Host) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'")
			http.Error(w, "this server answers only to localhost, 127.0.0.1 and [::1]", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether a Host header names the loopback interface.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	switch strings.ToLower(host) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// index returns session id's index, caught up with its log when it does
// not reach event need yet (0: always).
func (h *Handler) index(ctx context.Context, id vocab.ID, need uint64) (*sessionIndex, error) {
	h.mu.Lock()
	h.tick++
	e := h.indexes[id]
	if e == nil {
		if len(h.indexes) >= maxIndexes {
			var oldest vocab.ID
			var used uint64
			for k, v := range h.indexes {
				if oldest == "" || v.used < used {
					oldest, used = k, v.used
				}
			}
			delete(h.indexes, oldest)
		}
		e = &indexEntry{x: newSessionIndex(id)}
		h.indexes[id] = e
	}
	e.used = h.tick
	h.mu.Unlock()
	if need > 0 && need <= e.x.indexed() {
		return e.x, nil
	}
	if err := e.x.catchUp(ctx, h.db, h.defs); err != nil {
		return nil, err
	}
	return e.x, nil
}

// fail answers err as JSON with the status its code calls for.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch vocab.CodeOf(err) {
	case vocab.CodeNoSession:
		status = http.StatusNotFound
	case vocab.CodeBadInput:
		status = http.StatusBadRequest
	case vocab.CodeClosed:
		status = http.StatusServiceUnavailable
	}
	if r.Context().Err() != nil {
		return // the client is gone
	}
	if status == http.StatusInternalServerError {
		h.log.Error("inspect: request failed", "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, map[string]string{"error": err.Error(), "code": string(vocab.CodeOf(err))})
}

// writeJSON writes v as JSON. The encoding escapes <, > and & (as
// \u003c...), so that text from models and tools never reads as markup
// even where JSON is mistaken for HTML.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	enc.Encode(v)
}

// badParam is the error of a malformed query parameter.
func badParam(name, value string) error {
	return vocab.Errorf(vocab.CodeBadInput, "inspect: bad %s %q", name, value)
}

// uintParam parses query parameter name (0 when absent).
func uintParam(r *http.Request, name string) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badParam(name, s)
	}
	return n, nil
}

// listPage serves the session list.
func (h *Handler) listPage(w http.ResponseWriter, r *http.Request) {
	h.html(w, "list.html", map[string]any{"DB": filepath.Base(h.db.Path())})
}

// html renders template name.
func (h *Handler) html(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		h.log.Error("inspect: render page", "page", name, "err", err)
	}
}

// machineView is one machine's panel of the session page.
type machineView struct {
	Machine string
	Version int
	// SVG is the drawing, Problem why there is none.
	SVG     template.HTML
	Problem string
}

// sessionPage serves a session's page: the diagrams (inlined SVG), the
// timeline and the script that fills it from the JSON APIs.
func (h *Handler) sessionPage(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	info, err := h.db.Session(r.Context(), id)
	if err != nil {
		if vocab.CodeOf(err) == vocab.CodeNoSession {
			w.WriteHeader(http.StatusNotFound)
			h.html(w, "missing.html", map[string]any{"ID": string(id)})
			return
		}
		h.fail(w, r, err)
		return
	}
	x, err := h.index(r.Context(), id, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var views []machineView
	for _, m := range machineNames {
		v := machineView{Machine: m}
		di, problem := x.chosen(m, h.defs)
		if di < 0 {
			v.Problem = problem
		} else {
			v.Version = h.defs[di].Version
			if v.SVG, err = h.draw.svg(di); err != nil {
				v.Problem = err.Error()
			}
		}
		views = append(views, v)
	}
	// The sub-agent tree: its parent, and the sessions it spawned.
	var children []string
	page, err := h.db.Sessions(r.Context(), sqlite.SessionQuery{Contains: string(id) + vocab.SubAgentMark, Limit: 1000})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, s := range page.Sessions {
		if vocab.ParentOf(s.Session) == id {
			children = append(children, string(s.Session))
		}
	}
	slices.Sort(children)
	h.html(w, "session.html", map[string]any{
		"ID":       string(id),
		"Head":     info.Head,
		"Machines": views,
		"Kinds":    kindFilters,
		"Parent":   string(vocab.ParentOf(id)),
		"Children": children,
	})
}

// kindFilters are the kind prefixes the page offers as filters.
var kindFilters = []string{"machine/transition", "tool/", "llm/", "usage", "turn/", "step/", "assistant/", "user/", "input/", "prompt/", "agent/", "loop/", "message/"}

// diagram serves the SVG of a machine of this build (e.g.
// diagrams/turn.svg).
func (h *Handler) diagram(w http.ResponseWriter, r *http.Request) {
	m, ok := strings.CutSuffix(r.PathValue("file"), ".svg")
	for i, d := range h.defs {
		if !ok || d.Machine != m || i >= len(machineNames) {
			continue
		}
		svg, err := h.draw.svg(i)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		fmt.Fprintf(w, "%s\n", svg)
		return
	}
	http.NotFound(w, r)
}

// SessionRow is one session of api/sessions.
type SessionRow struct {
	// ID is the session id.
	ID string `json:"id"`
	// Status is the last public status the session logged (idle,
	// running...); Closed that it was closed; Claimed that a writer holds
	// (or held, if it died) its claim.
	Status  string `json:"status"`
	Closed  bool   `json:"closed"`
	Claimed bool   `json:"claimed"`
	// Turns is the number of the last turn started, Events the number of
	// events (the head).
	Turns  int    `json:"turns"`
	Events uint64 `json:"events"`
	// Created and Updated are the times of the first and last events.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Result is how the last prompt ended, or the last turn.
	Result string `json:"result,omitempty"`
}

// closeKind is the event of a closed session.
var closeKind = vocab.Input{Kind: vocab.InClose}.EventKind()

// apiSessions answers api/sessions?q=&limit=&offset=: the sessions whose
// id contains q, newest first.
func (h *Handler) apiSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := uintParam(r, "limit")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	offset, err := uintParam(r, "offset")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page, err := h.db.Sessions(r.Context(), sqlite.SessionQuery{
		Contains: q.Get("q"), Limit: int(min(limit, 1000)), Offset: int(min(offset, 1<<30)),
		Latest: []vocab.EventKind{vocab.EventTurnStart, vocab.EventPrompt, vocab.EventTurnEnd, closeKind},
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]SessionRow, 0, len(page.Sessions))
	for _, s := range page.Sessions {
		row := SessionRow{ID: string(s.Session), Status: s.Status, Claimed: s.Claim.Run != "", Events: s.Head,
			Created: s.Created, Updated: s.Updated, Turns: s.Latest[vocab.EventTurnStart].Turn}
		_, row.Closed = s.Latest[closeKind]
		row.Result = result(s.Latest[vocab.EventPrompt], s.Latest[vocab.EventTurnEnd])
		rows = append(rows, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": rows, "more": page.More})
}

// result describes how a session's last prompt (or turn) ended.
func result(prompt, turnEnd store.Record) string {
	if e, err := prompt.Event(); err == nil {
		if p, ok := e.Payload.(vocab.PromptPayload); ok && p.State != "" {
			if p.Detail != "" {
				return clip(p.Detail, 200)
			}
			return p.State
		}
	}
	if e, err := turnEnd.Event(); err == nil {
		if p, ok := e.Payload.(vocab.TurnEndPayload); ok {
			return clip(fmt.Sprintf("turn %d %s", e.Turn, p.Reason), 200)
		}
	}
	return ""
}

// apiSession answers api/sessions/{id}: the session's summary and which
// definition draws each machine.
func (h *Handler) apiSession(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	info, err := h.db.Session(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	x, err := h.index(r.Context(), id, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	type machine struct {
		Machine  string `json:"machine"`
		Version  int    `json:"version"`
		Drawable bool   `json:"drawable"`
		Problem  string `json:"problem,omitempty"`
	}
	var ms []machine
	for _, m := range machineNames {
		di, problem := x.chosen(m, h.defs)
		v := machine{Machine: m, Problem: problem, Drawable: di >= 0}
		if di >= 0 {
			v.Version = h.defs[di].Version
		}
		ms = append(ms, v)
	}
	closes, err := h.db.Events(r.Context(), id, sqlite.EventQuery{KindPrefixes: []string{string(closeKind)}, Limit: 1})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": string(info.Session), "head": info.Head, "status": info.Status, "claimed": info.Claim.Run != "",
		"closed": len(closes.Records) > 0, "created": info.Created, "updated": info.Updated, "machines": ms,
	})
}

// Event page sizes.
const (
	defaultRows = 100
	maxRows     = 1000
)

// apiEvents answers api/sessions/{id}/events: one page of the timeline.
// Parameters: from (the first seq, forward), before (the page that ends
// just before this seq, backward; neither: the first page), limit (100,
// at most 1000), turn (a turn number, or several separated by commas) and
// kind (kind prefixes, e.g. "tool/", separated by commas or repeated).
func (h *Handler) apiEvents(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	q, err := eventQuery(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page, err := h.db.Events(r.Context(), id, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]Row, 0, len(page.Records))
	for _, rec := range page.Records {
		rows = append(rows, rowOf(rec))
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": rows, "head": page.Head, "more": page.More})
}

// eventQuery reads the parameters of api/sessions/{id}/events.
func eventQuery(r *http.Request) (sqlite.EventQuery, error) {
	var q sqlite.EventQuery
	from, err := uintParam(r, "from")
	if err != nil {
		return q, err
	}
	before, err := uintParam(r, "before")
	if err != nil {
		return q, err
	}
	limit, err := uintParam(r, "limit")
	if err != nil {
		return q, err
	}
	q.From, q.Limit = from, int(min(limit, maxRows))
	if q.Limit == 0 {
		q.Limit = defaultRows
	}
	if before > 0 {
		q.To, q.Last = before-1, true
		if before == 1 {
			q.From, q.To = 2, 1 // nothing lies before event 1
		}
	}
	for _, v := range r.URL.Query()["turn"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return q, badParam("turn", s)
			}
			q.Turns = append(q.Turns, n)
		}
	}
	for _, v := range r.URL.Query()["kind"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				q.KindPrefixes = append(q.KindPrefixes, s)
			}
		}
	}
	return q, nil
}

// apiEvent answers api/sessions/{id}/events/{seq}: one event whole, its
// payload as logged.
func (h *Handler) apiEvent(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		h.fail(w, r, badParam("seq", r.PathValue("seq")))
		return
	}
	page, err := h.db.Events(r.Context(), id, sqlite.EventQuery{From: seq, To: seq, Limit: 1})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(page.Records) == 0 {
		h.fail(w, r, vocab.Errorf(vocab.CodeNoSession, "inspect: session %s has no event %d", id, seq))
		return
	}
	rec := page.Records[0]
	payload := json.RawMessage(rec.Payload)
	if !json.Valid(payload) {
		payload = nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"event": rowOf(rec), "payload": payload})
}

// apiStates answers api/sessions/{id}/states?at=SEQ&call=ID: where each
// machine stood once event at applied (the head when at is absent),
// from the session's index of state changes.
func (h *Handler) apiStates(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	at, err := uintParam(r, "at")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	x, err := h.index(r.Context(), id, at)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, x.statesAt(at, r.URL.Query().Get("call"), h.defs))
}
