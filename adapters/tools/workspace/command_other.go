//go:build !unix

package workspace

import (
	"os"
	"os/exec"
)

// groupStopper is a no-op where process groups do not exist: cancellation
// kills the command's own process only.
type groupStopper struct{}

func ownGroup(*exec.Cmd) *groupStopper { return &groupStopper{} }

func (*groupStopper) finish() {}

func exitSignal(st *os.ProcessState) string { return st.String() }
