package agentsvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/memory"
	"github.com/loopchart/loopchart/agentsvc"
	"github.com/loopchart/loopchart/vocab"
)

// holdTool reports each call's session on started and returns once
// release[session] is closed.
type holdTool struct {
	started chan<- string
	release map[string]chan struct{}
}

func (holdTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "hold", NoAccess: true} }

func (t holdTool) Run(ctx context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	var a struct {
		Who string `json:"who"`
	}
	_ = json.Unmarshal(call.Args, &a)
	t.started <- a.Who
	select {
	case <-t.release[a.Who]:
		return vocab.ToolResult{Content: "held"}, nil
	case <-ctx.Done():
		return vocab.ToolResult{}, context.Cause(ctx)
	}
}

// holdProvider calls hold once with the prompt as "who", then answers;
// asked counts requests per prompt.
func holdProvider(asked *sync.Map) replies {
	return func(_ context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
		who := firstUser(req).Text()
		n, _ := asked.LoadOrStore(who, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if last(req).Role == vocab.RoleTool {
			return "done " + who, nil, nil
		}
		return "", []vocab.ToolCall{call("hold-"+who, "hold", map[string]string{"who": who})}, nil
	}
}

func askedOf(asked *sync.Map, who string) int32 {
	if n, ok := asked.Load(who); ok {
		return n.(*atomic.Int32).Load()
	}
	return 0
}

// With MaxRunning 2, two top-level sessions run and the third waits (its
// model is not asked) until one of the two ends; a waiting session that is
// cancelled or closed leaves the line. Every log verifies.
func TestHostGlobalLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := memory.New()
	started := make(chan string, 5)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{}), "d": make(chan struct{}), "e": make(chan struct{})}
	var asked sync.Map
	o := agentsvc.HostOptions{Store: st, MaxRunning: 2}
	o.Session = func(agentsvc.SessionInfo) (agentsvc.Options, error) {
		return agentsvc.Options{Provider: holdProvider(&asked), Tools: []vocab.Tool{holdTool{started, release}}, NoRunTimeout: true}, nil
	}
	h, err := agentsvc.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	svcs := map[string]*agentsvc.Service{}
	prompts := map[string]*agentsvc.Prompt{}
	for _, who := range []string{"a", "b", "c", "d", "e"} {
		if svcs[who], err = h.Open(ctx, vocab.ID(who)); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"a", "b"} {
		if prompts[who], err = svcs[who].SubmitText(who); err != nil {
			t.Fatal(err)
		}
		if got := <-started; got != who {
			t.Fatalf("%s started, want %s", got, who)
		}
	}
	if st := h.GlobalLane(); st != (agentsvc.GlobalLaneStats{Max: 2, Held: 2}) {
		t.Fatalf("two running: %+v", st)
	}
	for _, who := range []string{"c", "d", "e"} {
		if prompts[who], err = svcs[who].SubmitText(who); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.GlobalLane(); st != (agentsvc.GlobalLaneStats{Max: 2, Held: 2, Waiting: 3}) {
		t.Fatalf("the third to fifth: %+v, want them waiting", st)
	}
	if askedOf(&asked, "c")+askedOf(&asked, "d")+askedOf(&asked, "e") != 0 {
		t.Fatal("a waiting session asked its model")
	}
	// e is cancelled while it waits: its prompt ends, it leaves the line.
	if err := svcs["e"].Cancel(vocab.CancelCause{Kind: vocab.CancelUser}, agentsvc.CancelOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := wait(ctx, t, prompts["e"]); res.Kind != vocab.PromptCancelled {
		t.Fatalf("e: %s", res)
	}
	if st := h.GlobalLane(); st.Waiting != 2 {
		t.Fatalf("after e was cancelled: %+v", st)
	}
	// d is closed while it waits: it leaves the line, its prompt ends.
	if err := svcs["d"].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := prompts["d"].Wait(ctx); err != nil || res.Kind != vocab.PromptCancelled {
		t.Fatalf("d: %v %v", res, err)
	}
	if st := h.GlobalLane(); st.Waiting != 1 {
		t.Fatalf("after d closed: %+v", st)
	}
	close(release["a"])
	if res := wait(ctx, t, prompts["a"]); res.Kind != vocab.PromptCompleted {
		t.Fatalf("a: %s", res)
	}
	if got := <-started; got != "c" {
		t.Fatalf("%s started after a ended, want c", got)
	}
	close(release["b"])
	close(release["c"])
	for _, who := range []string{"b", "c"} {
		if res := wait(ctx, t, prompts[who]); res.Kind != vocab.PromptCompleted {
			t.Fatalf("%s: %s", who, res)
		}
	}
	for _, who := range []string{"a", "b", "c", "e"} {
		if err := svcs[who].WhenIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"a", "b", "c", "d", "e"} {
		var ops []string
		end := uint64(1 << 62) // d is closed: its stream ends by itself
		if who != "d" {
			snap, err := svcs[who].Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			end = snap.Seq
		}
		for ev, err := range svcs[who].Events(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := ev.Payload.(vocab.LanePayload); ok {
				ops = append(ops, p.Op)
			}
			if in, ok := ev.Payload.(vocab.Input); ok && in.Kind == vocab.InSlotGranted {
				ops = append(ops, "granted")
			}
			if ev.Seq >= end {
				break
			}
		}
		want := "[wait granted release]"
		if who == "d" || who == "e" {
			want = "[wait release]"
		}
		if fmt.Sprint(ops) != want {
			t.Errorf("%s: lane events %v, want %s", who, ops, want)
		}
		if _, err := store.Verify(ctx, st, vocab.ID(who)); err != nil {
			t.Errorf("%s: log verify: %v", who, err)
		}
	}
}

// Three parents on a global lane of two each spawn two children and wait
// for them (agents_wait), and the children answer only once all six have
// started. Were the parents' waits holding slots, or the children in the
// global lane, the third parent could never spawn and nobody would end.
func TestHostGlobalLaneParentsWaitingNeverStarveChildren(t *testing.T) {
	for _, mode := range []string{"wait", "yield"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st := memory.New()
			const parents, each = 3, 2
			all := make(chan struct{})
			var count atomic.Int32
			var once sync.Once
			child := replies(func(ctx context.Context, req vocab.Request) (string, []vocab.ToolCall, error) {
				if count.Add(1) == parents*each {
					once.Do(func() { close(all) })
				}
				select {
				case <-all:
				case <-ctx.Done():
					return "", nil, context.Cause(ctx)
				}
				return "answer(" + firstUser(req).Text() + ")", nil, nil
			})
			o := agentsvc.HostOptions{Store: st, MaxRunning: 2}
			o.Session = func(info agentsvc.SessionInfo) (agentsvc.Options, error) {
				if info.Parent == "" {
					return agentsvc.Options{Provider: parentProvider(nil), NoRunTimeout: true}, nil
				}
				return agentsvc.Options{Provider: child, NoRunTimeout: true}, nil
			}
			h, err := agentsvc.NewHost(o)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			var ps []*agentsvc.Prompt
			var svcs []*agentsvc.Service
			for i := range parents {
				svc, err := h.Open(ctx, vocab.ID(fmt.Sprintf("parent%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				p, err := svc.SubmitText(fmt.Sprintf("spawn x%d y%d %s", i, i, mode))
				if err != nil {
					t.Fatal(err)
				}
				svcs, ps = append(svcs, svc), append(ps, p)
			}
			for i, p := range ps {
				res, err := p.Wait(ctx)
				if err != nil {
					t.Fatalf("parent%d never ended (lane %+v): %v", i, h.GlobalLane(), err)
				}
				if res.Kind != vocab.PromptCompleted {
					t.Fatalf("parent%d: %s", i, res)
				}
				// A wait composes both answers; a yield is resumed by the
				// first delivery, either child's. A child that ended while
				// the parent's wait was being called is not waited for: its
				// answer comes as a notification, maybe after the prompt
				// ended, in a turn of its own. So the parent's replies are
				// followed until one composes what it must.
				x, y := fmt.Sprintf("answer(x%d)", i), fmt.Sprintf("answer(y%d)", i)
				composed := func(text string) bool {
					if mode == "wait" {
						return strings.Contains(text, x) && strings.Contains(text, y)
					}
					return strings.Contains(text, x) || strings.Contains(text, y)
				}
				if got := awaitReply(ctx, svcs[i], composed); !composed(got) {
					t.Fatalf("parent%d never answered with %s (mode %s); its last reply: %q", i, x+" "+y, mode, got)
				}
			}
			for i, svc := range svcs {
				if err := svc.WhenIdle(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := store.Verify(ctx, st, vocab.ID(fmt.Sprintf("parent%d", i))); err != nil {
					t.Errorf("parent%d: log verify: %v", i, err)
				}
			}
		})
	}
}

// awaitReply follows svc's events until an assistant reply satisfies ok,
// or ctx ends; it returns that reply's text, or the last one seen.
func awaitReply(ctx context.Context, svc *agentsvc.Service, ok func(string) bool) string {
	last := ""
	for ev, err := range svc.Events(ctx, 0) {
		if err != nil {
			return last
		}
		if p, isMsg := ev.Payload.(vocab.MessagePayload); isMsg && ev.Kind == vocab.EventAssistant {
			last = p.Message.Text()
			if ok(last) {
				return last
			}
		}
	}
	return last
}
