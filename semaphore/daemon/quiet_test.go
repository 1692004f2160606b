package daemon_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/semaphore/daemon"
)

// A node with no request of its own wakes for its timers ten ticks apart
// (an idle frontend's agent); one whose client holds a lease wakes every
// tick, so the lease ends on time; back to quiet once it is released.
func TestQuietNodeWakesLessOften(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		c.waitReady()
		period := func(n *daemon.Node) (now, tick time.Duration) {
			t.Helper()
			now, tick, err := daemon.TickPeriods(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			return now, tick
		}
		for i := range 3 {
			if now, tick := period(c.node(i)); now != 10*tick {
				t.Fatalf("idle node %d wakes every %v, want 10 ticks of %v", i+1, now, tick)
			}
		}
		l := mustAcquire(t, c.node(0), "/site", "exclusive", time.Minute)
		if now, tick := period(c.node(0)); now != tick {
			t.Fatalf("the node of a held lease wakes every %v, want every tick (%v)", now, tick)
		}
		if now, tick := period(c.node(1)); now != 10*tick {
			t.Fatalf("a leader with no request of its own wakes every %v, want 10 ticks of %v", now, tick)
		}
		if err := c.node(0).Release(context.Background(), l.ID, "/site"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, tick := period(c.node(0)); now != 10*tick {
			t.Fatalf("after the release the node wakes every %v, want 10 ticks of %v", now, tick)
		}
	})
}
