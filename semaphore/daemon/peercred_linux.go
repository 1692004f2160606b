//go:build linux

package daemon

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the kernel's word on who is at the other end of a Unix
// socket connection: one getsockopt(SO_PEERCRED), when it is accepted.
func peerCred(c net.Conn) (uid, gid uint32, pid int32, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, 0, fmt.Errorf("not a Unix socket connection (%T)", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, 0, err
	}
	if credErr != nil {
		return 0, 0, 0, credErr
	}
	return cred.Uid, cred.Gid, cred.Pid, nil
}
