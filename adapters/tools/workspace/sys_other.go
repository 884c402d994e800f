//go:build !unix

package workspace

// nonblock is a no-op where O_NONBLOCK does not exist.
const nonblock = 0
