package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// newestLog is the highest numbered memtable log in Badger's directory.
func newestLog(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	newest := -1
	for _, e := range ents {
		if id, ok := logID(e.Name()); ok && id > newest {
			newest = id
		}
	}
	return newest
}

// The store syncs the log Badger writes: after every batch the file it
// synced is Badger's newest memtable log and holds the batch's last
// write, across memtables filled and replaced. A store that kept syncing
// the first log, or any other file, fails here.
func TestWALSyncFollowsBadgersLog(t *testing.T) {
	if !walSyncSupported {
		t.Skip("Badger syncs its own writes on this system")
	}
	defer func(n int64) { memTableSize = n }(memTableSize)
	memTableSize = 8 << 20 // Badger's least with its value threshold
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir})
	first := s.wal.fid
	pad := strings.Repeat("p", 400)
	for i := range 1000 {
		b := Batch{Writes: make([]core.Write, 50)}
		for j := range b.Writes {
			b.Writes[j] = core.Write{Kind: core.WriteHighWater, Name: fmt.Sprintf("%s-%d-%d", pad, i, j), Entry: wire.Entry{Ticket: 1}}
		}
		before := s.wal.fid
		must(t, wait(t, s.Submit(b))) // the writer's sync happened before the answer
		if newest := newestLog(t, s.path); s.wal.fid != newest {
			t.Fatalf("batch %d: synced log %d, Badger's newest is %d", i, s.wal.fid, newest)
		}
		if s.wal.fid == before && i%100 != 0 {
			continue
		}
		data, err := os.ReadFile(walName(s.path, s.wal.fid))
		if err != nil {
			t.Fatal(err)
		}
		if last := b.Writes[len(b.Writes)-1].Name; !bytes.Contains(data, []byte(last)) {
			t.Fatalf("batch %d: the synced log %d does not hold its last write", i, s.wal.fid)
		}
	}
	if s.wal.fid < first+2 {
		t.Fatalf("Badger replaced its log %d times, want 2 or more for this test to mean anything", s.wal.fid-first)
	}
	// Opened again, Badger replays the logs left and writes a new one:
	// the syncer takes that one.
	must(t, s.Close())
	s, _ = open(t, Config{Dir: dir})
	defer s.Close()
	name := pad + "-after-reopen"
	must(t, wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: name, Entry: wire.Entry{Ticket: 2}}}})))
	if newest := newestLog(t, s.path); s.wal.fid != newest {
		t.Fatalf("after a reopen: synced log %d, Badger's newest is %d", s.wal.fid, newest)
	}
	data, err := os.ReadFile(walName(s.path, s.wal.fid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(name)) {
		t.Fatalf("after a reopen: the synced log %d does not hold the write", s.wal.fid)
	}
}

// A log removed under the syncer (Badger flushed it and wrote to a file
// the syncer did not find) fails the sync: the writes are not known to
// be durable.
func TestWALSyncRefusesARemovedLog(t *testing.T) {
	if !walSyncSupported {
		t.Skip("Badger syncs its own writes on this system")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "00007.mem"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openWALSync(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.fid != 7 {
		t.Fatalf("active log %d, want 7", w.fid)
	}
	must(t, w.sync())
	if err := os.Remove(filepath.Join(dir, "00007.mem")); err != nil {
		t.Fatal(err)
	}
	if err := w.sync(); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("sync of a removed log: %v, want an error", err)
	}
	if _, err := openWALSync(t.TempDir()); err == nil {
		t.Fatal("a directory without a log: no error")
	}
}
