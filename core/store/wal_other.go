//go:build !linux

package store

// walSyncSupported: on Linux the store syncs Badger's log itself
// (walSync); elsewhere Badger syncs its writes.
const walSyncSupported = false

// walSync is not used here: Badger syncs its own writes.
type walSync struct{ fid int }

func openWALSync(string) (*walSync, error) { return nil, nil }
func (*walSync) sync() error               { return nil }
func (*walSync) close() error              { return nil }
