//go:build !linux

package daemon

import (
	"errors"
	"net"
)

// peerCred: only Linux's SO_PEERCRED is read; elsewhere a caller with
// roles to check is refused.
func peerCred(net.Conn) (uid, gid uint32, pid int32, err error) {
	return 0, 0, 0, errors.New("reading a Unix socket peer's credentials is not supported on this system")
}
