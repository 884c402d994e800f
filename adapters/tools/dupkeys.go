package tools

import "bytes"

// mayHaveDuplicateKey reports whether some object of the JSON text data
// might repeat a key. It is a quick scan that allocates nothing: false is
// certain (no object repeats a key, compared byte for byte), true only
// means the precise and costly duplicateKey must look (a repeated key, a
// key with an escape in it, nesting past what the scan keeps, or text that
// is not JSON).
func mayHaveDuplicateKey(data []byte) bool {
	type span struct{ from, to int }
	var (
		keys   [64]span // the keys of the objects open, innermost last
		nkeys  int
		starts [32]int  // per open container: where its keys start in keys (-1: an array)
		want   [32]bool // per open object: the next string is a key
		depth  int
	)
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			if depth == len(starts) {
				return true
			}
			starts[depth], want[depth] = -1, false
			if c == '{' {
				starts[depth], want[depth] = nkeys, true
			}
			depth++
		case '}', ']':
			if depth == 0 {
				return true // not JSON: the precise check decides
			}
			depth--
			if starts[depth] >= 0 {
				nkeys = starts[depth]
			}
		case ',':
			if depth > 0 && starts[depth-1] >= 0 {
				want[depth-1] = true
			}
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					if depth > 0 && want[depth-1] {
						return true // an escaped key: let the precise check compare it
					}
					j++
				}
				j++
			}
			if depth > 0 && want[depth-1] {
				key := data[i+1 : j]
				for _, k := range keys[starts[depth-1]:nkeys] {
					if bytes.Equal(data[k.from:k.to], key) {
						return true
					}
				}
				if nkeys == len(keys) {
					return true
				}
				keys[nkeys] = span{i + 1, j}
				nkeys++
				want[depth-1] = false
			}
			i = j
		}
	}
	return false
}
