package hooks

import (
	"context"
	"sync"
	"testing"
)

// TestLenSeesEveryChange: Len, asked without a lock, reflects each
// Register and Remove as soon as it returned, while other goroutines ask.
func TestLenSeesEveryChange(t *testing.T) {
	s := NewSlot[string]("s")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := s.Len(); n < 0 || n > 1 {
					t.Errorf("Len = %d, want 0 or 1", n)
					return
				}
			}
		}()
	}
	for i := range 1000 {
		h, err := s.Register("a", pass)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n != 1 {
			t.Fatalf("round %d: Len after Register = %d, want 1", i, n)
		}
		if !h.Remove() {
			t.Fatalf("round %d: Remove reported nothing removed", i)
		}
		if n := s.Len(); n != 0 {
			t.Fatalf("round %d: Len after Remove = %d, want 0", i, n)
		}
	}
	close(stop)
	wg.Wait()
}

// BenchmarkSlotLen measures Len on a slot with one handler, from every
// processor at once (the lane asks it of eight slots before each batch).
func BenchmarkSlotLen(b *testing.B) {
	s := NewSlot[string]("s")
	if _, err := s.Register("a", pass); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.Len() != 1 {
				b.Fatal("Len != 1")
			}
		}
	})
}

// TestGeneration: every Register, replacement and Remove of any slot or
// serial slot changes Generation; asking a slot, running it, a Remove
// that removed nothing and a refused Register leave it as it was.
func TestGeneration(t *testing.T) {
	s := NewSlot[string]("s")
	ss := NewSerialSlot[string, struct{}]("ss")
	pass := func(ctx context.Context, c string, next Next[string]) (string, error) { return next(ctx, c) }
	var hc Handle
	changes := []struct {
		what string
		do   func()
	}{
		{"Register", func() { mustRegister(t, s, "a", pass) }},
		{"Register of an id already there (a replacement)", func() { mustRegister(t, s, "a", pass) }},
		{"Register of another id", func() { hc = mustRegister(t, s, "c", pass) }},
		{"SerialSlot.Register", func() {
			if _, err := ss.Register("b", func(context.Context, string) (struct{}, error) { return struct{}{}, nil }); err != nil {
				t.Fatal(err)
			}
		}},
		{"Remove", func() { s.Remove("a") }},
		{"Handle.Remove", func() { hc.Remove() }},
		{"SerialSlot.Remove", func() { ss.Remove("b") }},
	}
	for _, c := range changes {
		before := Generation()
		c.do()
		if Generation() == before {
			t.Errorf("%s: Generation stayed %d", c.what, before)
		}
	}
	before := Generation()
	_ = s.Len()
	_ = s.IDs()
	if _, err := s.RunWaterfall(context.Background(), "x", func(_ context.Context, c string) (string, error) { return c, nil }); err != nil {
		t.Fatal(err)
	}
	s.Remove("no such id")
	if _, err := s.Register("", pass); err == nil {
		t.Fatal("Register with an empty id succeeded")
	}
	if got := Generation(); got != before {
		t.Errorf("asking, running, a Remove of nothing and a refused Register moved Generation from %d to %d", before, got)
	}
}
