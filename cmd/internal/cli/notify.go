package cli

import (
	"net"
	"os"
	"strings"
)

// notifySystemd sends state ("READY=1", "STOPPING=1", "STATUS=...") to
// systemd's notification socket ($NOTIFY_SOCKET, set for a unit of
// Type=notify), so that systemd counts the agent started once it serves
// its API. Without the variable it does nothing; a failure is returned
// for the caller to log: the agent runs all the same.
func notifySystemd(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
