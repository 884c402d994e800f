package engine

// Names may range over a map: adapters are not governed by
// machines-no-map-range.
func Names(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
