package agentsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// replies is a provider that answers from the request: fn returns the
// reply's text and tool calls.
type replies func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error)

func (f replies) Stream(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
	return func(yield func(vocab.StreamPart, error) bool) {
		text, calls, err := f(ctx, req)
		if err != nil {
			yield(vocab.StreamPart{}, err)
			return
		}
		if text != "" && !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: text}, nil) {
			return
		}
		for i := range calls {
			if !yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &calls[i]}, nil) {
				return
			}
		}
		finish := vocab.FinishStop
		if len(calls) > 0 {
			finish = vocab.FinishToolCalls
		}
		yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: finish}, nil)
	}
}

func call(id, name string, args any) vocab.ToolCall {
	b, _ := json.Marshal(args)
	return vocab.ToolCall{ID: id, Name: name, Args: b}
}

func last(req vocab.Request) vocab.Message { return req.Messages[len(req.Messages)-1] }

// parentProvider spawns one sub-agent per word of the prompt after
// "spawn", then waits for them (when the prompt says "wait") or yields
// (when it ends with "yield"), then answers with what it heard.
func parentProvider(asked chan<- struct{}) replies {
	return func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		m := last(req)
		if m.Role == vocab.RoleUser && strings.HasPrefix(m.Text(), "spawn") {
			var calls []vocab.ToolCall
			for i, w := range strings.Fields(m.Text())[1:] {
				if w == "wait" || w == "yield" {
					continue
				}
				calls = append(calls, call(fmt.Sprintf("spawn_%d", i), agentsvc.ToolSpawn, map[string]string{"task": w}))
			}
			if len(calls) == 0 {
				return "nothing to spawn", nil, nil
			}
			return "", calls, nil
		}
		if m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolSpawn && strings.HasSuffix(firstUser(req).Text(), " yield") {
			return "", []vocab.ToolCall{call("yield_1", agentsvc.ToolYield, nil)}, nil
		}
		if m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolSpawn && strings.Contains(firstUser(req).Text(), "wait") {
			if asked != nil {
				close(asked)
			}
			return "", []vocab.ToolCall{call("wait_1", agentsvc.ToolWait, map[string]string{"timeout": "1m"})}, nil
		}
		var heard []string
		for _, x := range req.Messages {
			if x.Role == vocab.RoleTool && x.Result.Name == agentsvc.ToolWait || x.Role == vocab.RoleUser && strings.HasPrefix(x.Text(), "[subagent") {
				heard = append(heard, x.Text())
			}
		}
		return "composed: " + strings.Join(heard, " | "), nil, nil
	}
}

func firstUser(req vocab.Request) vocab.Message {
	for _, m := range req.Messages {
		if m.Role == vocab.RoleUser {
			return m
		}
	}
	return vocab.Message{}
}

// childProvider answers its task once gate is closed; a task "block"
// waits for cancellation.
func childProvider(started chan<- vocab.ID, id vocab.ID, gate <-chan struct{}) replies {
	return func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		task := firstUser(req).Text()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return "", nil, context.Cause(ctx)
			}
		}
		if task == "block" {
			if started != nil {
				started <- id
			}
			<-ctx.Done()
			return "", nil, context.Cause(ctx)
		}
		return "answer(" + task + ")", nil, nil
	}
}

func newHost(t *testing.T, o agentsvc.HostOptions, started chan<- vocab.ID) *agentsvc.Host {
	return newGatedHost(t, o, started, nil, nil)
}

// newGatedHost's children answer once gate is closed; the parent closes
// asked when it calls agents_wait.
func newGatedHost(t *testing.T, o agentsvc.HostOptions, started chan<- vocab.ID, gate <-chan struct{}, asked chan<- struct{}) *agentsvc.Host {
	t.Helper()
	if o.Store == nil {
		o.Store = memory.New()
	}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(asked), NoRunTimeout: true}, nil
		}
		return agentsvc.Options{Provider: childProvider(started, info.ID, gate), NoRunTimeout: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return h
}

func runPrompt(t *testing.T, svc *agentsvc.Service, text string) vocab.PromptResult {
	t.Helper()
	p, err := svc.SubmitText(text)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func transcriptOf(t *testing.T, svc *agentsvc.Service) []vocab.Message {
	t.Helper()
	h, err := svc.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h.Messages()
}

func TestHostFanOutWaitCompose(t *testing.T) {
	gate, asked := make(chan struct{}), make(chan struct{})
	h := newGatedHost(t, agentsvc.HostOptions{}, nil, gate, asked)
	parent, err := h.Open(context.Background(), "parent")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-asked // the children answer once the parent waits for them
		close(gate)
	}()
	if res := runPrompt(t, parent, "spawn alpha beta gamma wait"); res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt %v", res)
	}
	msgs := transcriptOf(t, parent)
	final := msgs[len(msgs)-1].Text()
	for _, w := range []string{"alpha", "beta", "gamma"} {
		if strings.Count(final, "answer("+w+")") != 1 {
			t.Errorf("final answer %q lacks (or repeats) the answer of %s", final, w)
		}
	}
	// Each end reached the conversation once: in the agents_wait result
	// that consumed it, or (when the parent's turn claimed the delivery
	// first) as its notification, the wait then saying so.
	for _, w := range []string{"alpha", "beta", "gamma"} {
		n := 0
		for _, m := range msgs[:len(msgs)-1] {
			n += strings.Count(m.Text(), "answer("+w+")")
		}
		if n != 1 {
			t.Errorf("the answer of %s reached the parent %d times:\n%v", w, n, msgs)
		}
	}
	ids, err := h.Sessions(context.Background())
	if err != nil || len(ids) != 4 {
		t.Fatalf("sessions %v %v", ids, err)
	}
	for _, id := range ids {
		if id != "parent" && !strings.HasPrefix(string(id), "parent/sub-") {
			t.Errorf("session %s is not the parent's child", id)
		}
	}
}

// Without agents_wait, each end reaches the parent once, as a
// notification that starts a turn.
func TestHostDeliversEachEndOnce(t *testing.T) {
	h := newHost(t, agentsvc.HostOptions{}, nil)
	parent, err := h.Open(context.Background(), "p2")
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, parent, "spawn one two")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Both deliveries: wait until the parent's history holds them.
	var got []string
	for ev, err := range parent.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != vocab.EventKind("input/notify") {
			continue
		}
		in := ev.Payload.(vocab.Input)
		got = append(got, in.Message.Text())
		if len(got) == 2 {
			break
		}
	}
	if err := parent.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range transcriptOf(t, parent) {
		if strings.HasPrefix(m.Text(), "[subagent completed]") {
			n++
		}
	}
	if n != 2 || !strings.Contains(strings.Join(got, "\n"), "answer(one)") || !strings.Contains(strings.Join(got, "\n"), "answer(two)") {
		t.Fatalf("%d deliveries in the history; notified %q", n, got)
	}
}

func TestHostLimits(t *testing.T) {
	t.Run("five live children", func(t *testing.T) {
		// The children answer only once gate closes: all five are live
		// when the sixth spawn comes.
		gate := make(chan struct{})
		h := newGatedHost(t, agentsvc.HostOptions{}, nil, gate, nil)
		parent, _ := h.Open(context.Background(), "p")
		runPrompt(t, parent, "spawn a b c d e f")
		var results []vocab.ToolResult
		for _, m := range transcriptOf(t, parent) {
			if m.Role == vocab.RoleTool {
				results = append(results, *m.Result)
			}
		}
		if len(results) != 6 {
			t.Fatalf("%d results", len(results))
		}
		for i, r := range results {
			if i < 5 && r.IsError {
				t.Fatalf("spawn %d refused: %+v", i+1, r)
			}
		}
		if r := results[5]; !r.IsError || r.Code != vocab.CodeToolRefused || !strings.Contains(r.Content, "limit of 5 live sub-agents") || !strings.Contains(r.Content, "agents_wait") {
			t.Fatalf("the 6th spawn: %+v", r)
		}
		// Ended children are not live: once the five answered (their
		// ends delivered), a spawn is taken again.
		close(gate)
		waitDeliveries(t, parent, 5)
		runPrompt(t, parent, "spawn g")
		h2 := transcriptOf(t, parent)
		for i := len(h2) - 1; i >= 0; i-- {
			if m := h2[i]; m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolSpawn {
				if m.Result.IsError {
					t.Fatalf("a spawn after the five ended was refused: %s", m.Text())
				}
				break
			}
		}
	})
	t.Run("eight running across the host", func(t *testing.T) {
		// Two parents: five children and four, all blocking; eight run,
		// the ninth queues.
		started := make(chan vocab.ID, 16)
		h := newHost(t, agentsvc.HostOptions{}, started)
		p1, _ := h.Open(context.Background(), "p1")
		p2, _ := h.Open(context.Background(), "p2")
		runPrompt(t, p1, "spawn block block block block block")
		for range 5 {
			<-started
		}
		runPrompt(t, p2, "spawn block block block block")
		for range 3 {
			<-started
		}
		var spawned []string
		for _, m := range transcriptOf(t, p2) {
			if m.Role == vocab.RoleTool {
				spawned = append(spawned, m.Text())
			}
		}
		if len(spawned) != 4 || strings.Contains(strings.Join(spawned[:3], "\n"), "(queued)") || !strings.Contains(spawned[3], "(queued)") {
			t.Fatalf("p2's spawns (the 6th to 9th of the host): %q", spawned)
		}
		select {
		case id := <-started:
			t.Fatalf("a ninth sub-agent (%s) runs with a cap of 8", id)
		default:
		}
		// Cancelling p1 ends its five: the queued ninth starts.
		if err := p1.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{}); err != nil {
			t.Fatal(err)
		}
		if id := <-started; agentsvc.ParentOf(id) != "p2" {
			t.Fatalf("%s started after p1's cancel, want p2's queued child", id)
		}
		if err := p2.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("depth", func(t *testing.T) {
		h := newHost(t, agentsvc.HostOptions{}, nil)
		child, err := h.Open(context.Background(), "p/sub-0123456789")
		if err != nil {
			t.Fatal(err)
		}
		// A leaf gets no spawn tool: the model cannot even ask.
		snap, err := child.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(snap.Core), agentsvc.ToolSpawn) {
			t.Fatal("a depth-1 session was offered sessions_spawn")
		}
		h2 := newHost(t, agentsvc.HostOptions{MaxSpawnDepth: 2}, nil)
		child2, err := h2.Open(context.Background(), "p/sub-0123456789")
		if err != nil {
			t.Fatal(err)
		}
		snap, _ = child2.Snapshot(context.Background())
		if !strings.Contains(string(snap.Core), agentsvc.ToolSpawn) {
			t.Fatal("MaxSpawnDepth 2: a child was not offered sessions_spawn")
		}
		// Its own children (depth 2) are leaves again.
		grandchild, err := h2.Open(context.Background(), "p/sub-0123456789/sub-abcdef0123")
		if err != nil {
			t.Fatal(err)
		}
		snap, _ = grandchild.Snapshot(context.Background())
		if strings.Contains(string(snap.Core), agentsvc.ToolSpawn) {
			t.Fatal("MaxSpawnDepth 2: a depth-2 session was offered sessions_spawn")
		}
	})
	t.Run("running cap queues", func(t *testing.T) {
		started := make(chan vocab.ID, 8)
		h := newHost(t, agentsvc.HostOptions{MaxRunningSubAgents: 2}, started)
		parent, _ := h.Open(context.Background(), "p")
		runPrompt(t, parent, "spawn block block block")
		var spawned []string
		for _, m := range transcriptOf(t, parent) {
			if m.Role == vocab.RoleTool {
				spawned = append(spawned, m.Text())
			}
		}
		queued := 0
		for _, s := range spawned {
			if strings.Contains(s, "(queued)") {
				queued++
			}
		}
		if queued != 1 {
			t.Fatalf("spawns: %q", spawned)
		}
		<-started
		<-started
		select {
		case id := <-started:
			t.Fatalf("a third sub-agent (%s) runs with a cap of 2", id)
		default:
		}
		// Cancelling one running child frees its slot for the queued one.
		if err := parent.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// Cancelling the parent's turn cancels its running children, cause
// parent, while one of them streams.
func TestHostCancelPropagates(t *testing.T) {
	started := make(chan vocab.ID, 4)
	h := newHost(t, agentsvc.HostOptions{}, started)
	parent, _ := h.Open(context.Background(), "p")
	p, err := parent.SubmitText("spawn block block wait")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := <-started, <-started
	if err := parent.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("parent %v %v", res, err)
	}
	for _, id := range []vocab.ID{c1, c2} {
		child := restingChild(ctx, t, h, id)
		found := false
		for ev, err := range child.Events(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == vocab.EventKind("input/cancel") {
				in := ev.Payload.(vocab.Input)
				found = in.Cause != nil && in.Cause.Kind == vocab.CancelParent
			}
			snap, _ := child.Snapshot(ctx)
			if ev.Seq == snap.Seq {
				break
			}
		}
		if !found {
			t.Errorf("child %s was not cancelled with cause parent", id)
		}
	}
}

// Closing the host with children running ends them all: Close returns
// and no child is left running.
func TestHostCloseWithRunningChildren(t *testing.T) {
	started := make(chan vocab.ID, 4)
	o := agentsvc.HostOptions{Store: memory.New()}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true, HardStop: 100 * time.Millisecond}, nil
		}
		return agentsvc.Options{Provider: childProvider(started, info.ID, nil), NoRunTimeout: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := h.Open(context.Background(), "p")
	if _, err := parent.SubmitText("spawn block block wait"); err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Open(ctx, "p"); vocab.CodeOf(err) != vocab.CodeClosed {
		t.Fatalf("open after close: %v", err)
	}
}

// Many callers opening one session at once share one load.
func TestHostOpenIsSingleFlight(t *testing.T) {
	h := newHost(t, agentsvc.HostOptions{}, nil)
	var wg sync.WaitGroup
	svcs := make([]*agentsvc.Service, 32)
	for i := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := h.Open(context.Background(), vocab.ID(fmt.Sprintf("s%d", i%4)))
			if err != nil {
				t.Error(err)
			}
			svcs[i] = s
		}()
	}
	wg.Wait()
	for i := range svcs {
		if svcs[i] != svcs[i%4] {
			t.Fatalf("Open %d returned another service than Open %d for the same session", i, i%4)
		}
	}
}

func TestHostOptionsValidate(t *testing.T) {
	s := func(agentsvc.SessionInfo) (agentsvc.Options, error) { return agentsvc.Options{}, nil }
	for _, o := range []agentsvc.HostOptions{
		{}, {Store: memory.New()},
		{Store: memory.New(), Session: s, MaxChildren: -1},
		{Store: memory.New(), Session: s, MaxSpawnDepth: -1},
		{Store: memory.New(), Session: s, MaxRunningSubAgents: -1},
		{Store: memory.New(), Session: s, ArchiveAfter: -time.Second},
		{Store: memory.New(), Session: s, MaxRunning: -1},
	} {
		if _, err := agentsvc.NewHost(o); vocab.CodeOf(err) != vocab.CodeBadInput {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// A host that stops without closing (a crash) leaves children mid-task:
// the next host that opens the parent finds them from the parent's
// spawning calls, and the parent hears of each once (cancelled by the
// restart), however many restarts follow.
func TestHostRecoversChildrenAfterACrash(t *testing.T) {
	st := memory.New()
	started := make(chan vocab.ID, 4)
	// crashed makes a host that is never closed properly: a later host
	// takes its sessions over (its writers lose their claims), as a new
	// process would.
	crashed := func(started chan<- vocab.ID) *agentsvc.Host {
		o := agentsvc.HostOptions{Store: st}
		o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
			if info.Parent == "" {
				return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
			}
			return agentsvc.Options{Provider: childProvider(started, info.ID, nil), NoRunTimeout: true}, nil
		}
		h, err := agentsvc.NewHost(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h1 := crashed(started)
	p1, err := h1.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, p1, "spawn block block")
	<-started
	<-started
	deliveries := func(p *agentsvc.Service, want int) []string {
		var got []string
		for ev, err := range p.Events(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == vocab.EventKind("input/notify") {
				got = append(got, ev.Payload.(vocab.Input).Message.Text())
				if len(got) == want {
					break
				}
			}
		}
		return got
	}
	h2 := crashed(nil)
	p2, err := h2.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range deliveries(p2, 2) {
		if !strings.HasPrefix(g, "[subagent cancelled] p/sub-") {
			t.Errorf("delivery %q", g)
		}
	}
	// A third host finds the deliveries made: none is repeated.
	h3 := crashed(nil)
	p3, err := h3.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Continue(); err != nil {
		t.Fatal(err)
	}
	if err := p3.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := p3.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev, err := range p3.Events(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == vocab.EventKind("input/notify") {
			n++
		}
		if ev.Seq == snap.Seq {
			break
		}
	}
	if n != 2 {
		t.Fatalf("%d deliveries in the parent's log after two restarts, want 2", n)
	}
}

type namedTool string

func (n namedTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: string(n), NoAccess: true} }
func (n namedTool) Run(context.Context, vocab.ToolCall, func(string)) (vocab.ToolResult, error) {
	return vocab.ToolResult{Content: string(n)}, nil
}

// A spawn may give its child a system prompt and a subset of the tools;
// the child keeps them when it is reopened by another host. A tool the
// child cannot have is refused at the spawn.
func TestSpawnSystemAndToolSubset(t *testing.T) {
	st := memory.New()
	var mu sync.Mutex
	seen := map[vocab.ID][]string{} // child → "system|tools" of each request
	newH := func(spawnArgs map[string]any) *agentsvc.Host {
		o := agentsvc.HostOptions{Store: st}
		o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
			tools := []vocab.Tool{namedTool("alpha"), namedTool("beta")}
			if info.Parent == "" {
				return agentsvc.Options{NoRunTimeout: true, Tools: tools, Provider: replies(func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
					if m := last(req); m.Role == vocab.RoleUser && m.Text() == "go" {
						return "", []vocab.ToolCall{call("spawn_x", agentsvc.ToolSpawn, spawnArgs)}, nil
					}
					return "spawned", nil, nil
				})}, nil
			}
			return agentsvc.Options{NoRunTimeout: true, Tools: tools, System: "default", Provider: replies(func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
				var names []string
				for _, s := range req.Tools {
					names = append(names, s.Name)
				}
				mu.Lock()
				seen[info.ID] = append(seen[info.ID], req.System+"|"+strings.Join(names, ","))
				mu.Unlock()
				return "done", nil, nil
			})}, nil
		}
		h, err := agentsvc.NewHost(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h1 := newH(map[string]any{"task": "x", "system": "be brief", "tools": []string{"beta"}})
	p, err := h1.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, p, "go")
	kids := spawnedChildren(t, p)
	if len(kids) != 1 {
		t.Fatalf("spawned %v:\n%s", kids, dumpHistory(t, p))
	}
	c1, err := h1.Open(ctx, kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	// Another host reopens the child: it keeps its system prompt and tools.
	h2 := newH(nil)
	c2, err := h2.Open(ctx, kids[0])
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, c2, "again")
	mu.Lock()
	got := seen[kids[0]]
	mu.Unlock()
	if len(got) != 2 || got[0] != "be brief|beta" || got[1] != "be brief|beta" {
		t.Fatalf("the child's requests: %q", got)
	}
	// A tool the child cannot have: the spawn is refused.
	h3 := newH(map[string]any{"task": "y", "tools": []string{"gamma"}})
	p3, err := h3.Open(ctx, "p3")
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, p3, "go")
	var res *vocab.ToolResult
	for _, m := range transcriptOf(t, p3) {
		if m.Role == vocab.RoleTool {
			res = m.Result
		}
	}
	if res == nil || !res.IsError || !strings.Contains(res.Content, `no tool "gamma"`) {
		t.Fatalf("spawn with an unknown tool: %+v", res)
	}
}

// A parent closed on its own (not through the host) closes its children:
// no child outlives its closed parent.
func TestHostClosedParentClosesChildren(t *testing.T) {
	started := make(chan vocab.ID, 2)
	h := newHost(t, agentsvc.HostOptions{}, started)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent, err := h.Open(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	runPrompt(t, parent, "spawn block")
	id := <-started
	if err := parent.Close(ctx); err != nil {
		t.Fatal(err)
	}
	child, err := h.Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The child's event stream ends when the child is closed.
	for _, err := range child.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("the child was not closed: %v", err)
		}
	}
	if _, err := child.SubmitText("more"); vocab.CodeOf(err) != vocab.CodeClosed {
		t.Fatalf("the child after its parent closed: %v", err)
	}
}

// waitDeliveries follows svc's events until n sub-agent deliveries were
// recorded.
func waitDeliveries(t *testing.T, svc *agentsvc.Service, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := 0
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("%v after %d deliveries", err, got)
		}
		if in, ok := ev.Payload.(vocab.Input); ok && in.Kind == vocab.InNotify && in.Message != nil && strings.HasPrefix(in.Message.Text(), "[subagent ") {
			if got++; got == n {
				break
			}
		}
	}
	if err := svc.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// blockingTool runs until its context ends and reports the cause it saw.
type blockingTool struct {
	running chan<- vocab.ID
	causes  chan<- error
	id      vocab.ID
}

func (b blockingTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "slow", NoAccess: true} }
func (b blockingTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	b.running <- b.id
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	return vocab.ToolResult{}, context.Cause(ctx)
}

// Cancelling the parent while its children are inside a tool call
// cancels the calls' contexts (cause parent); each call gets its aborted
// result, so the children's transcripts stay valid, and the parent hears
// of each child once.
func TestHostCancelDuringChildToolCall(t *testing.T) {
	running := make(chan vocab.ID, 4)
	causes := make(chan error, 4)
	o := agentsvc.HostOptions{Store: memory.New()}
	o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
		if info.Parent == "" {
			return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
		}
		child := replies(func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
			if last(req).Role == vocab.RoleUser {
				return "", []vocab.ToolCall{call("slow_1", "slow", map[string]string{})}, nil
			}
			return "done", nil, nil
		})
		return agentsvc.Options{Provider: child, NoRunTimeout: true, Tools: []vocab.Tool{blockingTool{running, causes, info.ID}}}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent, _ := h.Open(ctx, "p")
	p, err := parent.SubmitText("spawn x y wait")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := <-running, <-running
	if err := parent.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{KeepInbox: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var cause vocab.CancelCause
		if err := <-causes; !errors.As(err, &cause) || cause.Kind != vocab.CancelParent {
			t.Errorf("a child's tool saw cause %v, want its parent's cancel", err)
		}
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("parent %v %v", res, err)
	}
	for _, id := range []vocab.ID{c1, c2} {
		child := restingChild(ctx, t, h, id)
		var calls, results int
		for _, m := range transcriptOf(t, child) {
			calls += len(m.ToolCalls())
			if m.Role == vocab.RoleTool {
				results++
				if !m.Result.IsError || m.Result.Code != vocab.CodeToolAborted {
					t.Errorf("child %s: the cut-off call's result %+v", id, *m.Result)
				}
			}
		}
		if calls != 1 || results != 1 {
			t.Errorf("child %s: %d calls, %d results", id, calls, results)
		}
	}
	// Each end reaches the parent once (KeepInbox: the deliveries stay
	// queued; Continue runs them).
	if err := parent.Continue(); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, parent, 2)
	heard := answeredChildren(t, parent)
	for _, id := range []vocab.ID{c1, c2} {
		if heard[id] != 1 {
			t.Errorf("the parent heard of %s %d times", id, heard[id])
		}
	}
}

// agents_wait with a timeout returns when it runs out, naming the
// children still running; a child that ends later is delivered once. The
// test runs in a synctest bubble: the host's clock is the bubble's.
func TestHostWaitTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		o := agentsvc.HostOptions{Store: memory.New()}
		o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
			if info.Parent == "" {
				return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
			}
			return agentsvc.Options{Provider: childProvider(nil, info.ID, release), NoRunTimeout: true, NoStreamWatchdog: true}, nil
		}
		h, err := agentsvc.NewHost(o)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(context.Background())
		ctx := context.Background()
		parent, _ := h.Open(ctx, "p")
		p, err := parent.SubmitText("spawn x wait") // agents_wait {timeout: 1m}
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		for _, m := range transcriptOf(t, parent) {
			if m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolWait {
				t.Fatalf("agents_wait returned before its timeout: %s", m.Text())
			}
		}
		time.Sleep(2 * time.Second)
		res, err := p.Wait(ctx)
		if err != nil || res.Kind != vocab.PromptCompleted {
			t.Fatalf("prompt %v %v", res, err)
		}
		var waited string
		for _, m := range transcriptOf(t, parent) {
			if m.Role == vocab.RoleTool && m.Result.Name == agentsvc.ToolWait {
				waited = m.Text()
			}
		}
		child := spawnedChildren(t, parent)
		if len(child) != 1 || !strings.Contains(waited, "[subagent running] "+string(child[0])) {
			t.Fatalf("the wait's result %q, want the child %v still running", waited, child)
		}
		close(release)
		synctest.Wait()
		if err := parent.WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
		if heard := answeredChildren(t, parent); heard[child[0]] != 1 {
			t.Fatalf("the parent heard of %s %d times after the timeout:\n%s", child[0], heard[child[0]], dumpHistory(t, parent))
		}
	})
}

// restingChild opens sub-agent id and waits until it rests.
func restingChild(ctx context.Context, t *testing.T, h *agentsvc.Host, id vocab.ID) *agentsvc.Service {
	t.Helper()
	child, err := h.Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.WhenIdle(ctx); err != nil {
		t.Fatal(err)
	}
	return child
}

// The ends a parent's cancel causes reach it after the cancelled turn's
// own last result (the aborted agents_wait), in spawn order, whether the
// children were running or queued for a slot.
func TestHostCancelDeliversInSpawnOrder(t *testing.T) {
	started := make(chan vocab.ID, 8)
	asked := make(chan struct{})
	h := newGatedHost(t, agentsvc.HostOptions{MaxRunningSubAgents: 2}, started, nil, asked)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent, _ := h.Open(ctx, "p")
	p, err := parent.SubmitText("spawn block block block block wait") // two run, two queue
	if err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	<-asked // all four spawned; the parent asks for agents_wait
	if err := parent.Cancel(vocab.CancelCause{}, agentsvc.CancelOptions{KeepInbox: true}); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("parent %v %v", res, err)
	}
	// The deliveries stay queued (KeepInbox; nothing runs them): read
	// their input events, and the cancelled turn's end, from the log.
	var order []vocab.ID
	var turnEnd uint64
	for ev, err := range parent.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("%v after %d deliveries", err, len(order))
		}
		if ev.Kind == vocab.EventTurnEnd && turnEnd == 0 {
			turnEnd = ev.Seq
		}
		if in, ok := ev.Payload.(vocab.Input); ok && in.Kind == vocab.InNotify && in.Message != nil {
			if turnEnd == 0 {
				t.Fatalf("delivery %q logged before the cancelled turn ended", in.Message.Text())
			}
			order = append(order, deliveredIn(in.Message.Text())...)
			if len(order) == 4 {
				break
			}
		}
	}
	if spawned := spawnedChildren(t, parent); !slices.Equal(order, spawned) {
		t.Fatalf("deliveries in order %v, want spawn order %v", order, spawned)
	}
}
