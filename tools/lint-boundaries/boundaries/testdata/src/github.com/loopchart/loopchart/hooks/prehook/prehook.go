// Package prehook is a hooks subpackage; it may use the rest of hooks.
package prehook

import (
	"fmt"

	"github.com/loopchart/loopchart/hooks"
)

// Print prints the hook name.
func Print() { fmt.Println(hooks.Name()) }
