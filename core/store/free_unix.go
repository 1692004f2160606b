//go:build linux || darwin || freebsd

package store

import "syscall"

// freeSpace is the space available to this process under path.
func freeSpace(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // field types differ by OS
}
