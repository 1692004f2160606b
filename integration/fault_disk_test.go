package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallDisksSkip says why this machine cannot mount a tmpfs per node
// ("": it can).
func smallDisksSkip() string {
	if os.Geteuid() != 0 {
		return "mounting a small tmpfs needs root"
	}
	if _, err := exec.LookPath("mount"); err != nil {
		return "no mount tool"
	}
	return ""
}

// smallDisks puts every node's data directory on a tmpfs of its own, size
// bytes, before the nodes start, so that a test can fill one node's disk.
// The identity files made by `sluice id` move onto it. The mounts go at
// the test's end, after the agents (cleanups run last registered first).
func (c *faultCluster) smallDisks(size int64) {
	c.t.Helper()
	for _, n := range c.nodes {
		files, err := os.ReadDir(n.data)
		if err != nil {
			c.t.Fatal(err)
		}
		saved := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(n.data, f.Name()))
			if err != nil {
				c.t.Fatal(err)
			}
			saved[f.Name()] = b
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", n.data).CombinedOutput(); err != nil {
			c.t.Fatalf("mount a tmpfs on %s: %v: %s", n.data, err, out)
		}
		cleanup(c.t, func() { _ = exec.Command("umount", "-l", n.data).Run() })
		for name, b := range saved {
			if err := os.WriteFile(filepath.Join(n.data, name), b, 0o600); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// fillDisk writes a file on node i's data file system until only left
// bytes are free, and returns its path.
func (c *faultCluster) fillDisk(i int, left int64) string {
	c.t.Helper()
	n := c.nodes[i]
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.data, &st); err != nil {
		c.t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= left {
		c.t.Fatalf("node %d's disk has %d bytes free already", i+1, free)
	}
	path := filepath.Join(n.data, "filler")
	f, err := os.Create(path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for todo := free - left; todo > 0; todo -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), todo)]); err != nil {
			c.t.Fatalf("filling node %d's disk: %v", i+1, err)
		}
	}
	return path
}

// TestFaultFullDisk: a leader's disk fills up (every data directory is a
// small tmpfs; one leader's is filled with a file). The store refuses
// its next write before Badger could die of SIGBUS, the leader stops
// serving and says why, and the others carry on. The operator frees the
// space and restarts the agent from its directory; it serves again.
func TestFaultFullDisk(t *testing.T) {
	if why := smallDisksSkip(); why != "" {
		t.Skipf("full-disk test skipped: %s", why)
	}
	// Badger maps its files (a 32 MiB memtable log, a 32 MiB value log)
	// sparsely; the store keeps 64 MiB free.
	const disk = 160 << 20
	c := newFaultCluster(t, 5, false)
	c.smallDisks(disk)
	r := startFaultRun(t, c)
	held := r.keptDrain(9 * time.Second)
	r.run(2 * time.Second)
	full := r.c.leaders(0)[0]
	filler := r.c.fillDisk(full, 40<<20)

	// The next write fails, the node stops serving and its status says
	// why.
	deadline := time.Now().Add(bound)
	for {
		st, err := status(r.c.nodes[full].c)
		if err == nil && st["state"] != "LOCK_READY" && strings.Contains(fmt.Sprint(st["reason"]), "disk nearly full") {
			t.Logf("the full leader's status: %v: %v", st["state"], st["reason"])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader with a full disk still serves after %v: %v %v", bound, st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
	code, out := post(t, r.c.nodes[full].c, "/v1/acquire", `{"name":"/d","try":true}`)
	if code != 503 || out["error"] != "not_ready" || !strings.Contains(fmt.Sprint(out["message"]), "disk nearly full") {
		t.Fatalf("acquire through the full leader: %d %v", code, out)
	}
	r.run(4 * time.Second)

	// The operator frees the space and restarts the agent.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	stopAgent(t, r.c.nodes[full].p)
	r.c.start(full)
	r.wasKept(held)
	r.run(2 * time.Second)
	r.finish()
}
