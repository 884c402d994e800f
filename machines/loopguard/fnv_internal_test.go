package loopguard

import "testing"

// TestFNV checks the inline FNV-1a 64 against the published test vectors.
func TestFNV(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xcbf29ce484222325},
		{"a", 0xaf63dc4c8601ec8c},
		{"foobar", 0x85944171f73967e8},
	} {
		if got := fnvString(fnvOffset, tc.in); got != tc.want {
			t.Errorf("fnv(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
		if got := fnvBytes(fnvOffset, []byte(tc.in)); got != tc.want {
			t.Errorf("fnvBytes(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

// TestKeyCache checks that a cached key is served without rebuilding and
// that distinct parts never share a key.
func TestKeyCache(t *testing.T) {
	var c keyCache
	p := keyParts{form: formToolHashResult, prefix: "generic:", tool: "read", a: 1, b: 2, hasB: true}
	k1 := c.get(p)
	if k1 != "generic:read:0000000000000001:0000000000000002" {
		t.Fatalf("key = %q", k1)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.get(p) }); n != 0 {
		t.Errorf("cached key: %v allocs", n)
	}
	q := p
	q.hasB = false
	if k := c.get(q); k != "generic:read:0000000000000001:none" {
		t.Errorf("key without result = %q", k)
	}
	for i := range 40 { // push p out of the cache
		c.get(keyParts{form: formTool, prefix: "argument-churn:", tool: string(rune('a' + i%26)), a: uint64(i)})
	}
	if k := c.get(p); k != k1 {
		t.Errorf("rebuilt key = %q, want %q", k, k1)
	}
	for _, tc := range []struct {
		p    keyParts
		want string
	}{
		{keyParts{form: formToolName, prefix: "unknown-tool:", tool: "x", name: "x"}, "unknown-tool:x:x"},
		{keyParts{form: formToolHash, prefix: "generic:", tool: "x", a: 0xabc}, "generic:x:0000000000000abc"},
		{keyParts{form: formPair, prefix: "pingpong:", a: 1, b: 0xffffffffffffffff}, "pingpong:0000000000000001|ffffffffffffffff"},
		{keyParts{form: formTool, prefix: "argument-churn:", tool: "edit"}, "argument-churn:edit"},
	} {
		if got := tc.p.build(); got != tc.want {
			t.Errorf("build(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
