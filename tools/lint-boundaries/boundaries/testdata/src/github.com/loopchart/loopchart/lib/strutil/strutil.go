// Package strutil is an ordinary module package outside every layer.
package strutil

import "strings"

// Up upper-cases s.
func Up(s string) string { return strings.ToUpper(s) }
