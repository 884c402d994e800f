package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// A fan-out script drives a session that spawns sub-agents (an
// agentsvc.Host): the parent's script, and one script per task a sub-agent
// may be given, keyed by the task's text:
//
//	{"name": "...", "comment": "...", "prompt": "...",
//	 "parent": {"steps": [...]},
//	 "children": {"summarise notes.txt": {"steps": [...]}, ...}}
//
// The embedded scripts are scripted scripts. "prompt", when given, is the
// prompt the parent is asked (an explicit --prompt wins).
type fanoutScript struct {
	source   string
	prompt   string
	parent   *scripted.Script
	children map[string]*scripted.Script
}

type jsonFanout struct {
	Name     string                     `json:"name"`
	Comment  string                     `json:"comment"`
	Prompt   string                     `json:"prompt"`
	Parent   json.RawMessage            `json:"parent"`
	Children map[string]json.RawMessage `json:"children"`
}

// loadDemoScript reads the script at path: a fan-out script when its
// top-level object has a "parent" key, else a scripted script (errors
// worded as scripted.Load words them).
func loadDemoScript(path string) (*scripted.Script, *fanoutScript, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, vocab.Errorf(vocab.CodeBadInput, "script %s: %w", path, err)
	}
	if isFanout(data) {
		f, err := parseFanout(data, path)
		return nil, f, err
	}
	s, err := scripted.Parse(data, path)
	return s, nil, err
}

// isFanout reports whether data is a JSON object with a "parent" key.
// Anything else, malformed JSON included, is left to scripted.Parse.
func isFanout(data []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return false
	}
	_, ok := top["parent"]
	return ok
}

// parseFanout parses and validates a fan-out script: the embedded scripts
// are parsed by scripted.Parse, their errors naming the file and the
// parent or the child's task. A script without children is a usage error.
func parseFanout(data []byte, source string) (*fanoutScript, error) {
	var jf jsonFanout
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&jf); err != nil {
		return nil, vocab.Errorf(vocab.CodeBadInput, "script %s: fan-out script: %s", source, strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(jf.Children) == 0 {
		return nil, fmt.Errorf(`%w: script %s: a fan-out script needs "children": one script per sub-agent task`, errUsage, source)
	}
	parent, err := scripted.Parse(jf.Parent, source+" (parent)")
	if err != nil {
		return nil, err
	}
	f := &fanoutScript{source: source, prompt: jf.Prompt, parent: parent, children: map[string]*scripted.Script{}}
	for _, task := range sortedKeys(jf.Children) {
		if strings.TrimSpace(task) == "" {
			return nil, vocab.Errorf(vocab.CodeBadInput, "script %s: children: a task is empty", source)
		}
		s, err := scripted.Parse(jf.Children[task], fmt.Sprintf("%s (child %q)", source, task))
		if err != nil {
			return nil, err
		}
		f.children[task] = s
	}
	return f, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// taskProvider plays, for one sub-agent, the script of its task: the text
// of the first user message of its first request. A task the script has
// no child for fails the request with a non-retryable input.bad error
// naming the task and the known ones; unknown hears of it.
type taskProvider struct {
	fan     *fanoutScript
	unknown func(error)

	mu  sync.Mutex
	cur *scripted.Provider
}

func (p *taskProvider) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	p.mu.Lock()
	if p.cur == nil {
		task := ""
		for _, m := range req.Messages {
			if m.Role == vocab.RoleUser {
				task = m.Text()
				break
			}
		}
		s, ok := p.fan.children[task]
		if !ok {
			p.mu.Unlock()
			err := &vocab.Error{Code: vocab.CodeBadInput, Message: fmt.Sprintf("script %s: no child script for the task %q (its children: %s)", p.fan.source, task, quoteAll(sortedKeys(p.fan.children)))}
			p.unknown(err)
			return func(yield func(vocab.StreamPart, error) bool) { yield(vocab.StreamPart{}, err) }
		}
		p.cur = scripted.New(s, nil)
	}
	cur := p.cur
	p.mu.Unlock()
	return cur.Stream(ctx, req)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// fanoutConfig is what the fan-out demo takes from the command line.
//
// A fan-out demo runs on the real clock, --instant or not: a child's
// scripted delay is what lets the parent reach agents_wait before the
// child ends, and on the virtual clock delays pass at once, whichever
// session is still busy, so the sessions' order would be left to chance.
type fanoutConfig struct {
	db     string
	prompt string
	json   bool
	color  bool
}

// fanoutDemo runs a fan-out script: a parent session opened by an
// agentsvc.Host on the --db store, whose sub-agents each play the script
// of their task. It prints the parent's timeline, then each sub-agent's
// task, answer and prompt result (with --events json: the parent's
// events, then each sub-agent's). It always starts new sessions, and
// closes them all when it ends, interrupted or not.
//
// No session asks for approval (--approve does not apply): the host
// starts a sub-agent's task as soon as it opens it, before a hook could be
// registered on it, and a before-tool hook on the parent would let its
// calls start out of order.
func fanoutDemo(ctx context.Context, fan *fanoutScript, cfg fanoutConfig, stdout, stderr io.Writer) error {
	st, err := openDB(ctx, cfg.db, false)
	if err != nil {
		return err
	}
	var stClosed bool
	closeStore := func() error {
		if stClosed {
			return nil
		}
		stClosed = true
		return st.Close()
	}
	defer closeStore()
	ws, removeWS, err := newDemoWorkspace()
	if err != nil {
		return err
	}
	defer removeWS()

	var (
		mu      sync.Mutex
		unknown []error // tasks without a child script
	)
	host, err := agentsvc.NewHost(agentsvc.HostOptions{
		Store: st,
		Session: func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
			opt := agentsvc.Options{Tools: demoTools(ws), Model: "scripted"}
			if info.Parent == "" {
				opt.Provider = scripted.New(fan.parent, nil)
				// One call at a time, in the model's order (no
				// before-tool hook makes them ready out of order): of
				// six spawns in one reply, the limit refuses the sixth;
				// run together, any of them could be the one.
				opt.MaxParallelTools = 1
			} else {
				opt.Provider = &taskProvider{fan: fan, unknown: func(err error) {
					mu.Lock()
					unknown = append(unknown, err)
					mu.Unlock()
				}}
			}
			return opt, nil
		},
	})
	if err != nil {
		return err
	}
	id := vocab.NewULIDSource(nil).NewID(time.Now())
	parent, err := host.Open(ctx, id)
	if err != nil {
		host.Close(context.Background())
		return err
	}
	fmt.Fprintf(stderr, "log: %s (session %s)\n", cfg.db, id)

	tl := &timeline{w: stdout, color: cfg.color, whole: true}
	enc := json.NewEncoder(stdout)
	pr := startPrinter(parent.Events, func(ev vocab.Event) {
		if cfg.json {
			_ = enc.Encode(ev)
		} else {
			tl.print(ev)
		}
	})

	res, kids, head, err := runFanout(ctx, host, parent, cfg.prompt)
	if err != nil {
		pr.abort()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		host.Close(cctx)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("%w: session %s and its sub-agents were closed (a fan-out demo is not resumed)", errInterrupted, id)
		}
		return err
	}
	streamErr := pr.until(head)
	var emit func(vocab.Event)
	if cfg.json {
		emit = func(ev vocab.Event) { _ = enc.Encode(ev) }
	}
	runs, err := childRuns(ctx, host, parent, kids, emit)
	if cerr := host.Close(context.Background()); err == nil {
		err = cerr
	}
	if serr := closeStore(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	if streamErr != nil {
		return fmt.Errorf("event stream: %w", streamErr)
	}
	if !cfg.json {
		printChildRuns(stdout, tl, runs)
		fmt.Fprintf(stdout, "\nresult: %s\n", displayText(res.String(), 0))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unknown) > 0 {
		return unknown[0]
	}
	if res.Kind != vocab.PromptCompleted {
		return errors.New("the demo prompt did not complete: " + displayText(res.String(), 0))
	}
	return nil
}

// runFanout asks the parent the prompt and waits until it and its
// sub-agents rest: it returns the prompt's result, the sub-agents and the
// parent's head then.
func runFanout(ctx context.Context, host *agentsvc.Host, parent *agentsvc.Service, prompt string) (vocab.PromptResult, []vocab.ID, uint64, error) {
	p, err := parent.SubmitText(prompt)
	if err != nil {
		return vocab.PromptResult{}, nil, 0, err
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return vocab.PromptResult{}, nil, 0, err
	}
	kids, err := settle(ctx, host, parent)
	if err != nil {
		return vocab.PromptResult{}, nil, 0, err
	}
	snap, err := parent.Snapshot(ctx)
	if err != nil {
		return vocab.PromptResult{}, nil, 0, err
	}
	return res, kids, snap.Seq, nil
}

// settle waits until every sub-agent of parent has ended, its end has
// reached the parent (as a notification, or as an agents_wait result that
// took it) and the parent is idle again; it returns the sub-agents. A
// parent whose prompt ended before its sub-agents hears of their ends in
// turns of its own: settle waits for those too.
func settle(ctx context.Context, host *agentsvc.Host, parent *agentsvc.Service) ([]vocab.ID, error) {
	ended := map[vocab.ID]bool{}
	for {
		if err := parent.WhenIdle(ctx); err != nil {
			return nil, err
		}
		kids, err := childrenOf(ctx, host, parent.Session())
		if err != nil {
			return nil, err
		}
		missing := func() bool {
			for _, k := range kids {
				if !ended[k] {
					return true
				}
			}
			return false
		}
		if !missing() {
			return kids, nil
		}
		// Follow the parent's log until each of them reached it; then
		// wait for the parent again: a delivery may start a turn.
		sctx, cancel := context.WithCancel(ctx)
		for ev, err := range parent.Events(sctx, 0) {
			if err != nil {
				cancel()
				return nil, err
			}
			for _, id := range endsIn(ev) {
				ended[id] = true
			}
			if !missing() {
				break
			}
		}
		cancel()
		if missing() { // the stream ended: the parent stopped
			return nil, fmt.Errorf("session %s stopped before every sub-agent's end reached it", parent.Session())
		}
	}
}

// notifyEvent records a notification queued for a session.
var notifyEvent = vocab.Input{Kind: vocab.InNotify}.EventKind()

// endsIn returns the sub-agents whose end ev reports to their parent: a
// notification "[subagent completed] ID" (failed, cancelled), or an
// agents_wait result holding such lines.
func endsIn(ev vocab.Event) []vocab.ID {
	var text string
	switch p := ev.Payload.(type) {
	case vocab.Input:
		if ev.Kind != notifyEvent || p.Message == nil {
			return nil
		}
		text = p.Message.Text()
	case vocab.ToolPayload:
		if ev.Kind != vocab.EventToolResult || p.Call.Name != agentsvc.ToolWait || p.Result == nil {
			return nil
		}
		text = p.Result.Content
	default:
		return nil
	}
	var ids []vocab.ID
	for _, line := range strings.Split(text, "\n") {
		for _, kind := range []string{"completed", "failed", "cancelled"} {
			if rest, ok := strings.CutPrefix(line, "[subagent "+kind+"] "); ok {
				if i := strings.IndexAny(rest, ": "); i >= 0 {
					rest = rest[:i]
				}
				ids = append(ids, vocab.ID(rest))
			}
		}
	}
	return ids
}

// childrenOf returns the sub-agents of parent in the host's store: the
// sessions PARENT/sub-HASH.
func childrenOf(ctx context.Context, host *agentsvc.Host, parent vocab.ID) ([]vocab.ID, error) {
	all, err := host.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	var kids []vocab.ID
	for _, id := range all {
		if rest, ok := strings.CutPrefix(string(id), string(parent)+"/sub-"); ok && !strings.Contains(rest, "/") {
			kids = append(kids, id)
		}
	}
	slices.Sort(kids)
	return kids, nil
}

// childRun is what one sub-agent did.
type childRun struct {
	id     vocab.ID
	task   string
	answer string // its last assistant text
	result string // its prompt's result
	ok     bool   // the prompt completed
}

// childRuns reads what each sub-agent did, in the order the parent
// spawned them; emit, when not nil, gets each one's events.
func childRuns(ctx context.Context, host *agentsvc.Host, parent *agentsvc.Service, kids []vocab.ID, emit func(vocab.Event)) ([]childRun, error) {
	runs := make([]childRun, 0, len(kids))
	for _, id := range kids {
		svc, err := host.Open(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := svc.WhenIdle(ctx); err != nil {
			return nil, err
		}
		hist, err := svc.History(ctx)
		if err != nil {
			return nil, err
		}
		r := childRun{id: id, result: "(no result)"}
		for i := range hist.Len() {
			if m := hist.At(i); m.Role == vocab.RoleUser {
				r.task = m.Text()
				break
			}
		}
		for i := hist.Len() - 1; i >= 0; i-- {
			if m := hist.At(i); m.Role == vocab.RoleAssistant && strings.TrimSpace(m.Text()) != "" {
				r.answer = m.Text()
				break
			}
		}
		snap, err := svc.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		if snap.Seq > 0 {
			for ev, err := range svc.Events(ctx, 0) {
				if err != nil {
					return nil, err
				}
				if emit != nil {
					emit(ev)
				}
				if p, ok := ev.Payload.(vocab.PromptPayload); ok && p.State != "running" {
					r.result, r.ok = p.Detail, p.State == string(vocab.PromptCompleted)
					if r.result == "" {
						r.result = p.State
					}
				}
				if ev.Seq >= snap.Seq {
					break
				}
			}
		}
		runs = append(runs, r)
	}
	// Spawn order: the order of the parent's sessions_spawn calls.
	hist, err := parent.History(ctx)
	if err != nil {
		return nil, err
	}
	calls := map[string][]int{} // task → positions of the calls
	n := 0
	for i := range hist.Len() {
		m := hist.At(i)
		if m.Role != vocab.RoleAssistant {
			continue
		}
		for _, c := range m.ToolCalls() {
			var a struct {
				Task string `json:"task"`
			}
			if c.Name == agentsvc.ToolSpawn && json.Unmarshal(c.Args, &a) == nil {
				calls[a.Task] = append(calls[a.Task], n)
				n++
			}
		}
	}
	rank := make(map[vocab.ID]int, len(runs))
	for _, r := range runs {
		rank[r.id] = n // not found: last
		if pos := calls[r.task]; len(pos) > 0 {
			rank[r.id], calls[r.task] = pos[0], pos[1:]
		}
	}
	slices.SortStableFunc(runs, func(a, b childRun) int { return rank[a.id] - rank[b.id] })
	return runs, nil
}

// printChildRuns prints a section per sub-agent: its id and result, its
// task and its answer.
func printChildRuns(w io.Writer, tl *timeline, runs []childRun) {
	for _, r := range runs {
		c := green
		if !r.ok {
			c = red
		}
		fmt.Fprintf(w, "\n%s %s\n", tl.paint(bold, "sub-agent "+displayText(string(r.id), 0)+":"), tl.paint(c, displayText(r.result, 0)))
		fmt.Fprintf(w, "  task:   %s\n", displayText(r.task, 0))
		answer := r.answer
		if strings.TrimSpace(answer) == "" {
			answer = "(none)"
		}
		lines := strings.Split(strings.TrimRight(answer, "\n"), "\n")
		fmt.Fprintf(w, "  answer: %s\n", displayText(lines[0], 0))
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "          %s\n", displayText(l, 0))
		}
	}
}
