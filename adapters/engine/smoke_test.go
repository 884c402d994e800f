package engine

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/loopchart/loopchart/adapters/clock"
	"github.com/loopchart/loopchart/adapters/llm/scripted"
	"github.com/loopchart/loopchart/adapters/tools"
	"github.com/loopchart/loopchart/vocab"
)

func TestSmokeDemo(t *testing.T) {
	s, err := scripted.Load("../../testdata/scripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg, _ := tools.NewRegistry(tools.FileTools(fstest.MapFS{"notes.txt": {Data: []byte("a b c")}})...)
	log := NewMemoryLog()
	e, err := New(Options{Provider: scripted.New(s, clk), Tools: reg, Clock: clk, IDs: &vocab.SeqSource{}, Sink: log, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if clk.WaitForPending(ctx, 1) != nil {
				return
			}
			clk.AdvanceToNext()
		}
	}()
	p, err := e.Submit(vocab.UserText("how long is notes.txt?"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result: %s", res)
	for _, ev := range log.Events() {
		if p, ok := ev.Payload.(vocab.TransitionPayload); ok {
			t.Logf("%d %s %s: %s --%s[%s]--> %s", ev.Seq, ev.Kind, p.Machine, p.From, p.Trigger, p.Guard, p.To)
		} else {
			t.Logf("%d %s t%d s%d", ev.Seq, ev.Kind, ev.Turn, ev.Step)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
