package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// logCmd runs a log subcommand. Every one only reads the log.
func logCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: log needs a subcommand: sessions, show, verify, fold or export", errUsage)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("log "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := fs.String("db", defaultDB, "the SQLite log file")
	var (
		id         *string
		turn       *int
		kindPrefix *string
		tree       *bool
	)
	switch sub {
	case "sessions":
	case "show", "verify", "fold", "export":
		id = fs.String("session", "", "the session (default: "+map[string]string{
			"show": "the newest", "fold": "the newest", "verify": "every one", "export": "every one"}[sub]+")")
		if sub == "show" {
			turn = fs.Int("turn", 0, "show only this turn")
			kindPrefix = fs.String("kind", "", "show only the events whose kind starts with this")
			tree = fs.Bool("tree", false, "then show the session's sub-agents, each below its parent")
		}
	default:
		return fmt.Errorf("%w: unknown log subcommand %q (sessions, show, verify, fold, export)", errUsage, sub)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: log %s: %v", errUsage, sub, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: log %s takes no arguments, got %q", errUsage, sub, fs.Args())
	}
	if turn != nil && *turn < 0 {
		return fmt.Errorf("%w: log show: --turn %d is negative", errUsage, *turn)
	}
	st, err := openDB(ctx, *db, true)
	if err != nil {
		return err
	}
	defer st.Close()
	var sid vocab.ID
	if id != nil {
		sid = vocab.ID(*id)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	switch sub {
	case "sessions":
		return logSessions(ctx, st, w)
	case "show":
		if err := logShow(ctx, st, *db, sid, *turn, *kindPrefix, w); err != nil || !*tree {
			return err
		}
		return logTree(ctx, st, *db, sid, *turn, *kindPrefix, w)
	case "verify":
		return logVerify(ctx, st, *db, sid, w)
	case "fold":
		return logFold(ctx, st, *db, sid, w)
	default:
		return logExport(ctx, st, *db, sid, w)
	}
}

// stamp formats a time of the log; "-" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// state is "closed" for a session whose log records its close, "open"
// otherwise (a demo that was interrupted or killed: --resume reopens it).
func state(ctx context.Context, st store.Store, id vocab.ID) (string, error) {
	done, err := finished(ctx, st, id)
	if err != nil {
		return "", err
	}
	if done {
		return "closed", nil
	}
	return "open", nil
}

// logSessions lists the sessions, newest first.
func logSessions(ctx context.Context, st store.Store, w io.Writer) error {
	all, err := sessions(ctx, st)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tHEAD\tSTATUS\tSTATE\tCREATED\tUPDATED\tEPOCH\tWRITER")
	for _, in := range all {
		s, err := state(ctx, st, in.Session)
		if err != nil {
			return err
		}
		status := in.Status
		if status == "" {
			status = "-"
		}
		writer := "-" // released: any process may claim it
		if in.Claim.Run != "" {
			writer = "held"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", in.Session, in.Head, status, s, stamp(in.Created), stamp(in.Updated), in.Claim.Epoch, writer)
	}
	return tw.Flush()
}

// logShow prints a session's timeline.
func logShow(ctx context.Context, st store.Store, db string, id vocab.ID, turn int, kind string, w io.Writer) error {
	in, err := findSession(ctx, st, db, id)
	if err != nil {
		return err
	}
	s, err := state(ctx, st, in.Session)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "session %s in %s: %d events, %s, last status %s\n", in.Session, db, in.Head, s, orDash(in.Status))
	tl := &timeline{w: w, seq: true}
	shown := 0
	for ev, err := range store.Events(ctx, st, in.Session, 1) {
		if err != nil {
			return err
		}
		if tl.start.IsZero() {
			tl.start = ev.At // times count from the session's first event
		}
		if (turn > 0 && ev.Turn != turn) || !strings.HasPrefix(string(ev.Kind), kind) {
			continue
		}
		if tl.print(ev) {
			shown++
		} else if kind != "" {
			// Asked for by kind: show what the timeline leaves out too.
			tl.raw(ev)
			shown++
		}
	}
	if shown == 0 {
		fmt.Fprintln(w, "(no event matches)")
	}
	return nil
}

// logTree shows the sub-agents of a session (the newest when id is
// empty), each below its parent, their own children below them.
func logTree(ctx context.Context, st store.Store, db string, id vocab.ID, turn int, kind string, w io.Writer) error {
	in, err := findSession(ctx, st, db, id)
	if err != nil {
		return err
	}
	all, err := sessions(ctx, st)
	if err != nil {
		return err
	}
	// Oldest first: children in the order they were spawned.
	slices.SortStableFunc(all, func(a, b store.Info) int { return a.Created.Compare(b.Created) })
	var show func(parent vocab.ID, depth int) error
	show = func(parent vocab.ID, depth int) error {
		for _, c := range all {
			if agentsvc.ParentOf(c.Session) != parent {
				continue
			}
			pw := &prefixWriter{w: w, prefix: strings.Repeat("    ", depth+1), start: true}
			fmt.Fprintf(w, "\n%s└─ sub-agent of %s\n", strings.Repeat("    ", depth), parent)
			if err := logShow(ctx, st, db, c.Session, turn, kind, pw); err != nil {
				return err
			}
			if err := show(c.Session, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return show(in.Session, 0)
}

// prefixWriter writes prefix at the start of every line.
type prefixWriter struct {
	w      io.Writer
	prefix string
	start  bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if p.start {
			if _, err := io.WriteString(p.w, p.prefix); err != nil {
				return 0, err
			}
			p.start = false
		}
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			_, err := p.w.Write(b)
			return n, err
		}
		if _, err := p.w.Write(b[:i+1]); err != nil {
			return 0, err
		}
		b = b[i+1:]
		p.start = true
	}
	return n, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// logVerify checks the file's integrity, then replays the sessions' logs.
func logVerify(ctx context.Context, st *sqlite.Store, db string, id vocab.ID, w io.Writer) error {
	var ids []vocab.ID
	if id != "" {
		if _, err := findSession(ctx, st, db, id); err != nil {
			return err
		}
		ids = []vocab.ID{id}
	} else {
		all, err := sessions(ctx, st)
		if err != nil {
			return err
		}
		for _, in := range all {
			ids = append(ids, in.Session)
		}
	}
	failed, checks := 0, 1+len(ids)
	if err := st.Verify(ctx); err != nil {
		fmt.Fprintf(w, "FAIL %s: %v\n", db, err)
		failed++
	} else {
		fmt.Fprintf(w, "ok   %s: integrity check\n", db)
	}
	for _, sid := range ids {
		f, err := store.Verify(ctx, st, sid)
		var d *store.Divergence
		switch {
		case err == nil:
			fmt.Fprintf(w, "ok   session %s: %d events replay from %d inputs\n", sid, f.Events, f.Inputs)
			continue
		case errors.As(err, &d):
			fmt.Fprintf(w, "FAIL session %s: event %d diverges (%s)\n", sid, d.Seq, vocab.CodeDiverged)
			fmt.Fprintf(w, "  logged:   %s\n", eventLine(d.Expected))
			fmt.Fprintf(w, "  replayed: %s\n", eventLine(d.Got))
			fmt.Fprintf(w, "  diff (-logged +replayed):\n")
			for _, l := range strings.Split(strings.TrimRight(d.Diff, "\n"), "\n") {
				fmt.Fprintf(w, "    %s\n", l)
			}
		default:
			fmt.Fprintf(w, "FAIL session %s: %v\n", sid, err)
		}
		failed++
	}
	if failed > 0 {
		return fmt.Errorf("verify: %d of %d checks failed", failed, checks)
	}
	return nil
}

// eventLine shows an event of a divergence on one line.
func eventLine(ev vocab.Event) string {
	if ev.Kind == "" {
		return "(nothing)"
	}
	b, err := json.Marshal(ev.Payload)
	if err != nil {
		b = []byte(err.Error())
	}
	return displayText(fmt.Sprintf("%s turn %d step %d %s", ev.Kind, ev.Turn, ev.Step, b), 200)
}

// folded is what log fold prints.
type folded struct {
	Session vocab.ID `json:"session"`
	// Head, Snapshot, Inputs and Events are store.Folded's: the last
	// event, the snapshot the fold started from (0: none), the inputs
	// stepped and the events read.
	Head     uint64 `json:"head"`
	Snapshot uint64 `json:"snapshot"`
	Inputs   int    `json:"inputs"`
	Events   int    `json:"events"`
	Closed   bool   `json:"closed"`
	Status   string `json:"status"`
	Agent    string `json:"agent"`
	Turn     string `json:"turn,omitempty"`
	History  int    `json:"history"`
	// Core is the session core's versioned snapshot.
	Core json.RawMessage `json:"core"`
}

// logFold prints the state folded from a session's log: the core as the
// log left it, before a reopen recovers what was left open.
func logFold(ctx context.Context, st store.Store, db string, id vocab.ID, w io.Writer) error {
	in, err := findSession(ctx, st, db, id)
	if err != nil {
		return err
	}
	f, err := store.Fold(ctx, st, in.Session)
	if err != nil {
		return err
	}
	core, err := f.CoreSnapshot()
	if err != nil {
		return err
	}
	out := folded{Session: in.Session, Head: f.Head, Snapshot: f.Snapshot, Inputs: f.Inputs, Events: f.Events,
		Closed: f.Core.Closed(), Status: string(f.Core.Status()), History: f.Core.History().Len(), Core: core}
	out.Agent, out.Turn = f.Core.State()
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// logExport prints events as JSON lines, one vocab.Event each: one
// session's, or every session's, oldest session first, each in sequence
// order.
func logExport(ctx context.Context, st store.Store, db string, id vocab.ID, w io.Writer) error {
	var ids []vocab.ID
	if id != "" {
		if _, err := findSession(ctx, st, db, id); err != nil {
			return err
		}
		ids = []vocab.ID{id}
	} else {
		all, err := sessions(ctx, st)
		if err != nil {
			return err
		}
		for _, in := range slices.Backward(all) {
			ids = append(ids, in.Session)
		}
	}
	enc := json.NewEncoder(w)
	for _, sid := range ids {
		for ev, err := range store.Events(ctx, st, sid, 1) {
			if err != nil {
				return err
			}
			if err := enc.Encode(ev); err != nil {
				return err
			}
		}
	}
	return nil
}
