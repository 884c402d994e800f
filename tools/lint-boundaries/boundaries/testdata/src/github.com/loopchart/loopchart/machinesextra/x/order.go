package x

// Keys may range over a map: machinesextra is not machines.
func Keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
