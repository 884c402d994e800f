package eventlog

import (
	"context"
	"testing"
	"time"

	"github.com/loopchart/loopchart/vocab"
)

// BenchmarkMemoryAppend appends batches of a session's step-like events
// (the kinds and the share of transitions of a real step, times shared by
// a few events) to one Memory, replaced every 100,000 events.
func BenchmarkMemoryAppend(b *testing.B) {
	kinds := []vocab.EventKind{vocab.EventTransition, vocab.EventTransition, vocab.EventTransition, vocab.EventTransition,
		vocab.EventUsage, vocab.EventStepStart, vocab.EventStepEnd, vocab.EventPrompt, vocab.EventMessageStart,
		vocab.EventMessageEnd, vocab.EventAssistant, vocab.EventInboxSpliced, vocab.EventStatus, vocab.EventUserMessage,
		vocab.EventTurnStart, vocab.EventTurnEnd, vocab.EventToolResult, vocab.EventToolExecutionStart,
		vocab.EventToolExecutionEnd, vocab.EventToolCall, vocab.EventAgentStart, vocab.EventAgentEnd,
		vocab.EventKind("input/model.done"), vocab.EventKind("input/tool.done")}
	const batch = 8
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemory()
	evs := make([]vocab.Event, batch)
	var seq uint64
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if seq >= 100_000 {
			m, seq = NewMemory(), 0
		}
		for i := range evs {
			seq++
			evs[i] = vocab.Event{Session: "S", Seq: seq, At: at.Add(time.Duration(seq/4) * time.Millisecond),
				Kind: kinds[int(seq)%len(kinds)], Payload: nil}
		}
		if err := m.Append(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
}
