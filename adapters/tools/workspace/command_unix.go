//go:build unix

package workspace

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// groupStopper stops a command's process group.
type groupStopper struct{ cmd *exec.Cmd }

// ownGroup puts cmd in a process group of its own and makes cancellation
// stop the whole group: SIGTERM at once; cmd.WaitDelay (the grace period)
// later exec kills the leader and closes the pipes, Wait returns, and
// finish sends the group SIGKILL.
func ownGroup(cmd *exec.Cmd) *groupStopper {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return &groupStopper{cmd: cmd}
}

// finish kills whatever is left in the group once Wait has returned: a
// background process the command started, or one that outlived SIGTERM
// for the whole grace period.
func (g *groupStopper) finish() {
	if g.cmd.Process != nil {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// exitSignal names the signal that ended the process.
func exitSignal(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return st.String()
}
