package store

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// logID is the number of a Badger memtable log's file name (NNNNN.mem).
func logID(name string) (int, bool) {
	n, ok := strings.CutSuffix(name, ".mem")
	if !ok {
		return 0, false
	}
	id, err := strconv.Atoi(n)
	return id, err == nil && id >= 0
}

// walName is the file of Badger's memtable log fid in dir.
func walName(dir string, fid int) string { return filepath.Join(dir, fmt.Sprintf("%05d.mem", fid)) }
