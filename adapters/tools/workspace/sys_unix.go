//go:build unix

package workspace

import "syscall"

// nonblock opens files without blocking: opening a FIFO with no writer
// returns at once, so the regular-file check can refuse it.
const nonblock = syscall.O_NONBLOCK
