package session

import "testing"

// Test files of machines are exempt from machines-no-map-range, like the
// other machines rules: tests may range over maps of cases.
func TestStep(t *testing.T) {
	cases := map[string]int{"a": 1, "b": 2}
	for name, n := range cases {
		var c Core
		if got := c.Step(map[string]int{name: n}); len(got) == 0 {
			t.Errorf("%s: empty", name)
		}
	}
}
