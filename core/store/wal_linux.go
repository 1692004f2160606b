package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// walSyncSupported: on Linux the store syncs Badger's log itself
// (walSync); elsewhere Badger syncs its writes.
const walSyncSupported = true

// walSync makes a commit durable with one fdatasync of Badger's memtable
// log, the one file a commit of small values writes. Badger's own synced
// writes also sync the value log's file at every commit, though none of
// the store's values go there (they are far below ValueThreshold): on
// ext4 that sync of a clean file is one more flush of the disk's cache,
// 25 µs on an idle disk and 50-90 µs with the other leaders committing,
// on every ticket. An fdatasync of the log is what Badger's msync of its
// map does (both are the kernel's data sync of the file).
//
// Badger names the logs %05d.mem in its directory and writes one at a
// time: the active one is the highest, and a commit that finds it full
// opens the next before it writes. After each commit the syncer moves to
// the newest log and syncs it; the one before was synced after the last
// commit that wrote to it (the store's writer commits one transaction at
// a time), and Badger syncs the table a log becomes before deleting it.
type walSync struct {
	dir string
	fid int
	f   *os.File
}

// openWALSync finds the active log of the Badger directory dir.
func openWALSync(dir string) (*walSync, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	fid := -1
	for _, e := range ents {
		if id, ok := logID(e.Name()); ok && id > fid {
			fid = id
		}
	}
	if fid < 0 {
		return nil, fmt.Errorf("store: no Badger memtable log (NNNNN.mem) in %s", dir)
	}
	f, err := os.OpenFile(walName(dir, fid), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &walSync{dir: dir, fid: fid, f: f}, nil
}

// sync makes every committed write durable.
func (w *walSync) sync() error {
	for {
		f, err := os.OpenFile(walName(w.dir, w.fid+1), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		_ = w.f.Close()
		w.f, w.fid = f, w.fid+1
	}
	// A log that is gone was replaced by one the syncer did not find:
	// Badger names its logs otherwise. Refuse to go on as if the writes
	// were durable.
	var st unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &st); err != nil {
		return fmt.Errorf("store: %s: %w", w.f.Name(), err)
	}
	if st.Nlink == 0 {
		return fmt.Errorf("store: Badger's log %s was removed while the store took it for the active one: its logs are not named as the store expects", w.f.Name())
	}
	if err := unix.Fdatasync(int(w.f.Fd())); err != nil {
		return fmt.Errorf("store: sync %s: %w", w.f.Name(), err)
	}
	return nil
}

func (w *walSync) close() error { return w.f.Close() }
