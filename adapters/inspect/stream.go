package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

// watcher notices other connections' commits to the database by polling
// PRAGMA data_version, while at least one stream is open, and wakes the
// streams up.
type watcher struct {
	ctx   context.Context
	db    *sqlite.ReadOnly
	every time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// gen is closed (and replaced) at every change noticed.
	gen  chan struct{}
	subs int
	// stop stops the running poller; nil when none runs.
	stop chan struct{}
	// done: the handler closed, no poller starts any more.
	done bool
	wg   sync.WaitGroup
}

func newWatcher(ctx context.Context, db *sqlite.ReadOnly, every time.Duration, log *slog.Logger) *watcher {
	return &watcher{ctx: ctx, db: db, every: every, log: log, gen: make(chan struct{})}
}

// subscribe counts a stream in, starting the poller for the first; the
// stream calls release when it ends, and the poller stops after the
// last.
func (w *watcher) subscribe() (release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs++
	if w.stop == nil && !w.done {
		w.stop = make(chan struct{})
		w.wg.Add(1)
		go w.poll(w.stop)
	}
	return sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.subs--
		if w.subs == 0 && w.stop != nil {
			close(w.stop)
			w.stop = nil
		}
	})
}

// changed returns a channel closed at the next change noticed. Take it
// before reading, so that a change during the read is not missed.
func (w *watcher) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// broadcast wakes every stream.
func (w *watcher) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.gen)
	w.gen = make(chan struct{})
}

// poll asks for the data version every interval until stop or the
// handler's end.
func (w *watcher) poll(stop chan struct{}) {
	defer w.wg.Done()
	last, err := w.db.DataVersion(w.ctx)
	if err != nil && w.ctx.Err() == nil {
		w.log.Warn("inspect: poll the database", "err", err)
	}
	// A commit between a stream's last read and this first version
	// would otherwise go unnoticed until the next one.
	w.broadcast()
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		v, err := w.db.DataVersion(w.ctx)
		switch {
		case w.ctx.Err() != nil:
			return
		case err != nil:
			w.log.Warn("inspect: poll the database", "err", err)
		case v != last:
			last = v
			w.broadcast()
		}
	}
}

// wait stops any poller from starting and waits for the running one,
// which the handler's context has stopped.
func (w *watcher) wait() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	w.wg.Wait()
}

// streamPage is how many events one read of a stream takes.
const streamPage = 256

// stream answers api/sessions/{id}/stream with server-sent events: every
// event of the session from ?from=SEQ (default: after the head), or
// after the Last-Event-ID the client sends when it reconnects, then each
// new event as other processes log it. Each message's id is the event's
// seq and its data the timeline row (JSON). The turn and kind parameters
// filter as for api/sessions/{id}/events. A comment line is sent as a
// heartbeat while nothing happens. The stream ends when the client goes,
// or when the handler closes.
//
// Events are read a page at a time into memory, in a short read
// transaction that ends before anything is written: a slow client never
// holds the log's write-ahead file open.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	id := vocab.ID(r.PathValue("id"))
	q, err := eventQuery(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	info, err := h.db.Session(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	next := info.Head + 1
	if q.From > 0 {
		next = q.From
	}
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			h.fail(w, r, badParam("Last-Event-ID", s))
			return
		}
		next = n + 1
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()
	release := h.watch.subscribe()
	defer release()

	sw := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout}
	defer sw.finish()
	defer context.AfterFunc(ctx, sw.end)()

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !sw.write([]byte(": loopchart inspector: events of one session\nretry: 2000\n\n")) {
		return
	}
	hb := time.NewTicker(h.opts.Heartbeat)
	defer hb.Stop()
	var buf bytes.Buffer
	for {
		changed := h.watch.changed()
		page, err := h.db.Events(ctx, id, sqlite.EventQuery{From: next, Limit: streamPage, Turns: q.Turns, KindPrefixes: q.KindPrefixes})
		if err != nil {
			// A read cut short by the handler's Close (it cancels h.ctx
			// before it closes the database; ctx follows h.ctx only
			// through an AfterFunc, which may not have run yet) ends the
			// stream without a failure message, as the client's leaving
			// does.
			if ctx.Err() == nil && h.ctx.Err() == nil {
				b, _ := json.Marshal(map[string]string{"error": err.Error(), "code": string(vocab.CodeOf(err))})
				sw.write(fmt.Appendf(nil, "event: failure\ndata: %s\n\n", b))
			}
			return
		}
		// The read transaction has ended: now write.
		buf.Reset()
		for _, rec := range page.Records {
			b, err := json.Marshal(rowOf(rec)) // escapes <, > and &
			if err != nil {
				return
			}
			fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", rec.Seq, b)
			next = rec.Seq + 1
		}
		if !page.More {
			next = max(next, page.Head+1) // past events the filters skip
		}
		if buf.Len() > 0 && !sw.write(buf.Bytes()) {
			return
		}
		if page.More {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-hb.C:
			if !sw.write([]byte(": heartbeat\n\n")) {
				return
			}
		}
	}
}

// streamWriter writes a stream's messages, each write under a deadline,
// and cuts a write short when the stream must end.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration

	mu      sync.Mutex
	ended   bool // end or finish was called
	writing bool
}

// write writes b and flushes it; false when the stream is over.
func (s *streamWriter) write(b []byte) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	s.writing = true
	s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	s.mu.Unlock()
	_, err := s.w.Write(b)
	if err == nil {
		err = s.rc.Flush()
	}
	s.mu.Lock()
	s.writing = false
	s.mu.Unlock()
	return err == nil
}

// end stops the stream: a write in progress (to a client that does not
// read) fails at once.
func (s *streamWriter) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	if s.writing {
		s.rc.SetWriteDeadline(time.Now())
	}
}

// finish is called as the handler returns: nothing touches the
// connection after it, and its write deadline is lifted for the next
// request on it.
func (s *streamWriter) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.rc.SetWriteDeadline(time.Time{})
}
