package eventlog

import "testing"

// locate agrees with walking the chunks' capacities, for every index of
// the first chunks and well past them.
func TestLocate(t *testing.T) {
	k, off := 0, 0
	for idx := 0; idx < 5000; idx++ {
		if gk, goff := locate(idx); gk != k || goff != off {
			t.Fatalf("locate(%d) = %d, %d; want %d, %d", idx, gk, goff, k, off)
		}
		if off++; off == chunkCap(k) {
			k, off = k+1, 0
		}
	}
}
