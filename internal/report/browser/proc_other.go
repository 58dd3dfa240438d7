//go:build !unix

package browser

import "os/exec"

// setGroup: without process groups only the leader is killed on cancel.
func setGroup(cmd *exec.Cmd) {}

func killGroup(cmd *exec.Cmd) {}
