//go:build unix

package browser

import (
	"os/exec"
	"syscall"
)

// setGroup makes the command the leader of a new process group and makes
// context cancellation kill the whole group, not just the leader.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// killGroup kills what is left of the command's process group after the
// leader exited (helpers it forked). The group id is the leader's pid,
// which the kernel does not hand out again while the group has members.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
