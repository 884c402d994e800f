package peers

import (
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkLockPair is what one uncontended sync.Mutex lock and unlock
// pair costs on this machine (two locked instructions): the price of the
// locked instructions ../locked.sh counts.
func BenchmarkLockPair(b *testing.B) {
	var mu sync.Mutex
	n := 0
	for b.Loop() {
		mu.Lock()
		n++
		mu.Unlock()
	}
	_ = n
}

// BenchmarkAtomicAdd is one uncontended atomic add (one locked
// instruction).
func BenchmarkAtomicAdd(b *testing.B) {
	var n atomic.Int64
	for b.Loop() {
		n.Add(1)
	}
}
