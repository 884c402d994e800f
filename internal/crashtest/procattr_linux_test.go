package crashtest

import "syscall"

// childAttr makes the kernel kill the child when this process dies, so a
// test binary that is itself killed (a timeout) leaves no child running.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
