//go:build unix && !linux

package crashtest

import "syscall"

// childAttr: only Linux can tie the child's life to this process's; the
// child also exits when its report pipe breaks.
func childAttr() *syscall.SysProcAttr { return nil }
