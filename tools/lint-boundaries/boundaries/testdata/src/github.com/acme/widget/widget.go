// Package widget is a third-party package outside the module.
package widget

import "os"

// Name returns a name.
func Name() string { return os.Args[0] }
