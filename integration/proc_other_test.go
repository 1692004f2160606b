//go:build !linux

package integration

import "os/exec"

// dieWithTest: only Linux kills a child with its parent; elsewhere an
// interrupted run may leave processes behind.
func dieWithTest(*exec.Cmd) {}
