package engine

import (
	"context"
	"errors"
	"iter"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/loopchart/loopchart/adapters/eventlog"
	"github.com/loopchart/loopchart/vocab"
)

// asyncSink makes an asynchronous append durable only when it is waited
// for, so a test sees exactly what the lane waited for before acting.
type asyncSink struct {
	mu      sync.Mutex
	durable []vocab.Event
	pending [][]vocab.Event
	async   int // appends started asynchronously
	failAt  int // the failAt-th asynchronous append fails (0: none)
	// started is closed by the first asynchronous append, which then
	// waits for hold to be closed (when set) before it returns.
	started, hold chan struct{}
}

func newAsyncSink() *asyncSink { return &asyncSink{started: make(chan struct{})} }

func (s *asyncSink) Append(_ context.Context, batch []vocab.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) > 0 {
		panic("a synchronous append overtook appends in flight")
	}
	s.durable = append(s.durable, batch...)
	return nil
}

func (s *asyncSink) AppendAsync(_ context.Context, batch []vocab.Event) func(context.Context) error {
	s.mu.Lock()
	s.async++
	s.pending = append(s.pending, slices.Clone(batch))
	fail := s.async == s.failAt
	first := s.async == 1
	s.mu.Unlock()
	if first {
		close(s.started)
		if s.hold != nil {
			<-s.hold
		}
	}
	return func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		b := s.pending[0]
		s.pending = s.pending[1:]
		if fail {
			return errors.New("disk full")
		}
		s.durable = append(s.durable, b...)
		return nil
	}
}

// has reports whether an event of kind naming call is durable.
func (s *asyncSink) has(kind vocab.EventKind, call string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.durable {
		if p, ok := ev.Payload.(vocab.ToolPayload); ok && ev.Kind == kind && p.Call.ID == call {
			return true
		}
	}
	return false
}

// streamer streams a reply in many parts: a tool call on the first
// request, text on the others. After its first part it waits until the
// sink started an asynchronous append (so that part's batch went alone,
// whatever the scheduling), or until ctx ends.
func streamer(sink *asyncSink) vocab.Provider {
	return providerFunc(func(ctx context.Context, req vocab.Request) iter.Seq2[vocab.StreamPart, error] {
		return func(yield func(vocab.StreamPart, error) bool) {
			for i := range 20 {
				if !yield(vocab.StreamPart{Kind: vocab.StreamText, Text: "word "}, nil) {
					return
				}
				if i == 0 {
					select {
					case <-sink.started:
					case <-ctx.Done():
						return
					}
				}
			}
			if len(req.Messages) == 1 {
				yield(vocab.StreamPart{Kind: vocab.StreamToolCall, Call: &vocab.ToolCall{ID: "c1", Name: "probe"}}, nil)
				yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishToolCalls}, nil)
				return
			}
			yield(vocab.StreamPart{Kind: vocab.StreamFinish, Finish: vocab.FinishStop}, nil)
		}
	})
}

// probeTool records whether its tool/call event was durable when it ran.
type probeTool struct {
	sink *asyncSink
	ran  chan bool
}

func (p probeTool) Spec() vocab.ToolSpec { return vocab.ToolSpec{Name: "probe"} }
func (p probeTool) Run(_ context.Context, call vocab.ToolCall, _ func(string)) (vocab.ToolResult, error) {
	p.ran <- p.sink.has(vocab.EventToolCall, call.ID)
	return vocab.ToolResult{Content: "ok"}, nil
}

// asyncEngine starts an engine on sink with the streamer and the probe
// tool.
func asyncEngine(t *testing.T, sink *asyncSink) (*Engine, probeTool) {
	t.Helper()
	tool := probeTool{sink: sink, ran: make(chan bool, 1)}
	e, err := New(Options{Provider: streamer(sink), Tools: mustRegistry(t, tool), Sink: sink, IDs: &vocab.SeqSource{}})
	if err != nil {
		t.Fatal(err)
	}
	return e, tool
}

// Stream batches commit asynchronously; nothing acts on events before
// they are durable: the tool runs after its call is, the prompt's result
// comes after every event, and the durable log is gapless and whole.
func TestAsyncAppendsKeepTheBarrier(t *testing.T) {
	sink := newAsyncSink()
	e, tool := asyncEngine(t, sink)
	ctx := testCtx(t)
	p, err := e.Submit(vocab.UserText("go"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt: %v %v", res, err)
	}
	if durable := <-tool.ran; !durable {
		t.Error("the tool ran before its tool/call event was durable")
	}
	seq, err := e.Seq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	n, async, pending := len(sink.durable), sink.async, len(sink.pending)
	for i, ev := range sink.durable {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("durable event %d has seq %d", i, ev.Seq)
		}
	}
	sink.mu.Unlock()
	if uint64(n) != seq || pending != 0 {
		t.Errorf("at rest: %d durable events, %d appends pending; the core is at %d", n, pending, seq)
	}
	if async == 0 {
		t.Error("no append went asynchronously: stream batches should not wait")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A caller's input that arrives while a stream batch commits is
// acknowledged only after that batch, then its own, are durable, in order.
func TestAsyncAppendsSettleBeforeAnAcknowledgement(t *testing.T) {
	sink := newAsyncSink()
	sink.hold = make(chan struct{})
	e, _ := asyncEngine(t, sink)
	ctx := testCtx(t)
	// The goroutine that submits may be the one that drives the lane into
	// the held append: submit from another.
	submitted := make(chan *Pending, 1)
	go func() {
		p, err := e.Submit(vocab.UserText("go"))
		if err != nil {
			t.Error(err)
		}
		submitted <- p
	}()
	select { // the lane is inside the first asynchronous append
	case <-sink.started:
	case <-ctx.Done():
		t.Fatal("no asynchronous append started")
	}
	steered := make(chan error, 1)
	go func() {
		_, err := e.Steer(vocab.UserText("also this"))
		steered <- err
	}()
	for e.Stats().Queued == 0 { // the steer waits in the mailbox
		if ctx.Err() != nil {
			t.Fatal("the steer never reached the mailbox")
		}
		runtime.Gosched()
	}
	close(sink.hold)
	if err := <-steered; err != nil {
		t.Fatalf("Steer: %v", err)
	}
	p := <-submitted
	if p == nil {
		t.FailNow()
	}
	if res, err := p.Wait(ctx); err != nil || res.Kind != vocab.PromptCompleted {
		t.Fatalf("prompt: %v %v", res, err)
	}
	sink.mu.Lock()
	for i, ev := range sink.durable {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("durable event %d has seq %d: appends overtook each other", i, ev.Seq)
		}
	}
	sink.mu.Unlock()
	_ = e.Close(ctx)
}

// A failed asynchronous append stops the session like a failed
// synchronous one: no work starts after it, the waiter gets the error.
func TestAsyncAppendFailureStopsTheSession(t *testing.T) {
	sink := newAsyncSink()
	sink.failAt = 1
	e, tool := asyncEngine(t, sink)
	ctx := testCtx(t)
	p, err := e.Submit(vocab.UserText("go"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if !errors.Is(err, ErrAppendFailed) || res.Kind != vocab.PromptFailed {
		t.Fatalf("prompt after a failed append: %v %v, want %s", res, err, vocab.CodeAppendFailed)
	}
	select {
	case <-tool.ran:
		t.Error("a tool ran after the append of the events before it failed")
	default:
	}
	if _, err := e.Steer(vocab.UserText("more")); !errors.Is(err, ErrAppendFailed) {
		t.Errorf("input after the failure: %v", err)
	}
	_ = e.Close(ctx)
	var _ eventlog.AsyncSink = sink
}
