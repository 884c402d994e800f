package engine

import (
	"math/rand/v2"
	"testing"
)

// A smallMap behaves as a Go map under any sequence of sets, takes and
// drains, across its inline entries and its overflow map.
func TestSmallMapIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s smallMap[int, int]
	m := map[int]int{}
	for i := range 20000 {
		k := rng.IntN(12) // 0, the zero key, included
		switch op := rng.IntN(10); {
		case op < 5:
			s.Set(k, i)
			m[k] = i
		case op < 9:
			v, ok := s.Take(k)
			w, wok := m[k]
			delete(m, k)
			if v != w || ok != wok {
				t.Fatalf("op %d: Take(%d) = %d %v, want %d %v", i, k, v, ok, w, wok)
			}
		case rng.IntN(20) == 0:
			got := map[int]int{}
			s.Drain(func(k, v int) { got[k] = v })
			if len(got) != len(m) {
				t.Fatalf("op %d: drained %v, want %v", i, got, m)
			}
			for k, v := range m {
				if got[k] != v {
					t.Fatalf("op %d: drained %v, want %v", i, got, m)
				}
			}
			clear(m)
		default:
			s.Trim()
		}
		if s.Len() != len(m) {
			t.Fatalf("op %d: Len %d, want %d", i, s.Len(), len(m))
		}
		v, ok := s.Get(k)
		if w, wok := m[k]; v != w || ok != wok {
			t.Fatalf("op %d: Get(%d) = %d %v, want %d %v", i, k, v, ok, w, wok)
		}
		n := 0
		s.Each(func(k, v int) {
			n++
			if m[k] != v {
				t.Fatalf("op %d: Each saw %d=%d, want %d", i, k, v, m[k])
			}
		})
		if n != len(m) {
			t.Fatalf("op %d: Each saw %d entries, want %d", i, n, len(m))
		}
		for j, kv := range s.kv {
			if kv.k == 0 && kv.v != 0 {
				t.Fatalf("op %d: free inline entry %d holds a value", i, j)
			}
		}
	}
}
