package integration

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill the process when the test binary dies:
// a `go test` killed by its -timeout or by a signal runs no Cleanup, and
// agents it started would run on, orphaned.
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
