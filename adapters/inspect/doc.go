// Package inspect is loopchart's session inspector: an http.Handler that
// shows the sessions of a SQLite log (adapters/store/sqlite), each with
// its agent, turn and tool machines drawn from their definitions and lit
// as of any event, its timeline, and new events live while another
// process writes the log. `loopchart inspect --db FILE` serves it on a
// local address; an application mounts it on its own mux, behind its own
// authentication:
//
//	h, err := inspect.New(inspect.Options{DB: "agent.db"})
//	if err != nil { ... }
//	defer h.Close() // after the server's Shutdown began: ends the streams
//	mux.Handle("/inspect/", http.StripPrefix("/inspect", h))
//
// Every URL the pages use is relative, so any prefix works (link to the
// prefix with its trailing slash).
//
// # URLs
//
//	./                                   the session list (?q= searches ids)
//	s/{id}                               a session's page (?at=SEQ or #seq=SEQ selects an event)
//	static/app.js, static/app.css        the page's script and style sheet (embedded)
//	diagrams/{agent,turn,tool}.svg       this build's diagrams
//	api/sessions?q=&limit=&offset=       sessions, newest first, whose id contains q (literally)
//	api/sessions/{id}                    a session and the definition drawing each machine
//	api/sessions/{id}/events?from=&before=&limit=&turn=&kind=
//	                                     a page of the timeline (from: forward from a seq;
//	                                     before: the page ending before a seq; turn: turn
//	                                     numbers; kind: kind prefixes such as tool/)
//	api/sessions/{id}/events/{seq}       one event with its payload as logged
//	api/sessions/{id}/states?at=&call=   each machine's state as of event at (default:
//	                                     the head); call picks the tool call shown
//	api/sessions/{id}/stream?from=       server-sent events: every event from seq from
//	                                     (default: after the head), then live; the message
//	                                     id is the seq, so Last-Event-ID resumes
//
// # The page
//
// The diagrams are SVG drawn in process by Graphviz (github.com/goccy/go-graphviz,
// WebAssembly: nothing to install), once per definition, from DOT that
// gives every state the id "<machine>-state-<name>" and the class
// "state" ("state composite" for a superstate, drawn as a cluster), and
// every transition the id "<machine>-tr-<index>" (its index in the
// definition's Transitions) and the class "transition"; the inspector
// adds data-state and data-transition attributes. The script lights the
// states of each machine as of the selected event with the class
// "current" (the leaf also "leaf"; its superstates are lit too) and the
// last transition taken with "taken" ("just" when it is the selected
// event). The tool machine shows one call: the one picked in the list of
// the turn's calls (#calls), else the call that moved last.
//
// Elements for browser tests: #session-rows (the list; a row per session
// with data-session), #search; on a session page #diagram-agent,
// #diagram-turn, #diagram-tool, #state-<machine> (the state's name),
// #transition-<machine>, #problem-<machine> (when a machine cannot be
// drawn), #calls (li with data-call), #timeline (rows tr with data-seq,
// data-kind, data-turn, and the class "selected" on the selected one),
// #filter-turn, #filter-kind, #follow, #position, #live and #detail.
// The keys j and ↓ select the next event, k and ↑ the previous one; the
// URL's #seq=N (or ?at=N) selects event N.
//
// # Time travel
//
// Each session has an index of its state changes, read once from its
// machine/transition (and turn/start, tool/call) events and extended with
// the events logged since: the states as of an event are a binary search
// in it, not a replay. The log does not record which definition version
// wrote a transition (vocab.TransitionPayload has no version, nor does
// the session's configuration); core/snapshot events record each
// machine's version, and the inspector checks those and matches every
// logged transition against the definitions it knows (this build's, and
// Options.Definitions): a machine is drawn with the first definition that
// explains its whole log, and a page says so when none does.
//
// # Safety
//
// Every response carries Content-Security-Policy: default-src 'self': the
// page loads only its embedded script and style sheet, works offline,
// and runs no inline script. Model and tool text reaches the page only
// as JSON (with <, > and & escaped) and is set with textContent. The
// inspector only reads: it opens the log with sqlite.OpenReadOnly, serves
// only GET and HEAD, and never holds a read transaction while it writes
// to a client. LocalOnly refuses requests whose Host is not the local
// machine (DNS rebinding), as `loopchart inspect` does.
package inspect
