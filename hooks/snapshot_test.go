package hooks

import (
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
