package engine

// smallMap is a map that holds its first few entries inline, in the
// value that holds it, and the rest in a map made on demand. The lane's
// maps of running work, waiting callers and prompts hold one or two
// entries at a time, and a resting session drops their buffers (see
// trimMaps): as Go maps, each prompt made them again, two allocations
// each; inline, a prompt costs none, and a resting session holds no
// buffer (the inline entries, 128 bytes for the three maps, are part of
// the Engine). An inline slot whose key is the zero key is free: the
// zero key itself, never used by the lane, goes to the map. Iteration
// order is unspecified, as a map's.
type smallMap[K comparable, V any] struct {
	kv [smallMapInline]smallEntry[K, V]
	m  map[K]V // entries beyond the inline ones
}

// smallMapInline is how many entries a smallMap holds inline.
const smallMapInline = 2

type smallEntry[K comparable, V any] struct {
	k K
	v V
}

// Len returns the number of entries.
func (s *smallMap[K, V]) Len() int {
	var zero K
	n := len(s.m)
	for i := range s.kv {
		if s.kv[i].k != zero {
			n++
		}
	}
	return n
}

// Get returns the value of k, and whether k has one.
func (s *smallMap[K, V]) Get(k K) (V, bool) {
	var zero K
	if k != zero {
		for i := range s.kv {
			if s.kv[i].k == k {
				return s.kv[i].v, true
			}
		}
	}
	v, ok := s.m[k]
	return v, ok
}

// Set sets the value of k.
func (s *smallMap[K, V]) Set(k K, v V) {
	var zero K
	free := -1
	if k != zero {
		for i := range s.kv {
			switch s.kv[i].k {
			case k:
				s.kv[i].v = v
				return
			case zero:
				if free < 0 {
					free = i
				}
			}
		}
	}
	if _, ok := s.m[k]; ok || free < 0 {
		if s.m == nil {
			s.m = map[K]V{}
		}
		s.m[k] = v
		return
	}
	s.kv[free] = smallEntry[K, V]{k, v}
}

// Take removes k and returns its value, and whether it had one.
func (s *smallMap[K, V]) Take(k K) (V, bool) {
	var zero K
	if k != zero {
		for i := range s.kv {
			if s.kv[i].k == k {
				v := s.kv[i].v
				s.kv[i] = smallEntry[K, V]{}
				return v, true
			}
		}
	}
	v, ok := s.m[k]
	if ok {
		delete(s.m, k)
	}
	return v, ok
}

// Each calls f for every entry; f must not change s.
func (s *smallMap[K, V]) Each(f func(K, V)) {
	var zero K
	for i := range s.kv {
		if s.kv[i].k != zero {
			f(s.kv[i].k, s.kv[i].v)
		}
	}
	for k, v := range s.m {
		f(k, v)
	}
}

// Drain removes every entry, calling f for each once it is removed.
func (s *smallMap[K, V]) Drain(f func(K, V)) {
	old := *s
	*s = smallMap[K, V]{}
	old.Each(f)
}

// Trim drops the map of entries beyond the inline ones when it is empty
// (a map keeps its buckets after its entries are deleted).
func (s *smallMap[K, V]) Trim() {
	if len(s.m) == 0 {
		s.m = nil
	}
}
