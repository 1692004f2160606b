package daemon_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// A node stopped gracefully lets its shared read tickets go first: a
// priority writer on a name it kept an idle share of is granted as soon as
// the node is gone, not when the share's lease runs out. The lease is an
// hour: without the release, the writer would wait far beyond its timeout.
func TestStopLetsSharesGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Node 4 is last in priority: not a leader, as a web frontend's
		// agent is.
		c := startMemCluster(t, memClusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}, shareLease: time.Hour})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		r := mustAcquire(t, c.node(3), "/site", "read-only", time.Minute)
		if err := c.node(3).Release(ctx, r.ID, ""); err != nil {
			t.Fatal(err)
		}
		// The reader is gone; its share lingers (an eighth of the lease).
		synctest.Wait()
		tab, err := c.node(3).Locks(ctx, "/site")
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Requests) != 0 || len(tab.SharedReaders) != 0 {
			t.Fatalf("node 4 still has readers: %+v", tab)
		}
		if !sharedBy(t, c.node(0), nodeStr(c.ids[3])) {
			c.dump("/site")
			t.Fatal("the leaders hold no share of node 4: nothing to let go")
		}
		c.stop(3)
		if sharedBy(t, c.node(0), nodeStr(c.ids[3])) {
			t.Error("node 4 stopped, and leader 1 still holds its share")
		}
		l, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site", Mode: semaphore.ReadWritePriority,
			Timeout: settle, Duration: time.Minute})
		if err != nil {
			c.dump("/site")
			t.Fatalf("writer after node 4 stopped: %v; want granted before the share's lease (an hour) ran out", err)
		}
		if l.Token <= r.Token {
			t.Fatalf("writer's token %d, the share's %d", l.Token, r.Token)
		}
	})
}

// sharedBy reports whether n, a leader, holds a READ_ONLY ticket of node's
// on /site.
func sharedBy(t *testing.T, n *daemon.Node, node string) bool {
	t.Helper()
	tab, err := n.Locks(context.Background(), "/site")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range tab.Locks {
		for _, e := range l.Entries {
			if e.Node == node && e.Mode == "read-only" {
				return true
			}
		}
	}
	return false
}
