package daemon_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// Every page view hears that its site drains, however it was had: one on
// the agent's shared read ticket, and one on a plain ticket of its own (a
// reader with a limit goes through the bakery by itself, as does one
// whose share could not be had at once, the case a loaded fleet meets).
// Both watches say "draining" while the priority writer waits, and the
// writer is granted once both end.
func TestEveryReaderHearsTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Nodes 4 and 5 are last in priority: web frontends' agents, not
		// leaders. Each has one page view, so that neither hears of the
		// drain through the other's share.
		c := startMemCluster(t, memClusterOpts{size: 5, priority: []uint8{1, 2, 3, 9, 9}, shareLease: time.Minute})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		type view struct {
			what string
			node *daemon.Node
			req  daemon.Request
		}
		// The plain ticket first: a limited reader waits for the shares
		// ahead of it.
		views := []view{
			{"on a plain ticket", c.node(4), daemon.Request{Name: "/site", Mode: semaphore.ReadOnly, Timeout: settle, Duration: time.Hour, Limit: 10}},
			{"on the share", c.node(3), daemon.Request{Name: "/site", Mode: semaphore.ReadOnly, Timeout: settle, Duration: time.Hour}},
		}
		told := make([]chan string, len(views))
		held := make([]daemon.Lease, len(views))
		for i, v := range views {
			l, err := v.node.Acquire(ctx, v.req)
			if err != nil {
				t.Fatalf("page view %s: %v", v.what, err)
			}
			held[i] = l
			events, err := v.node.Watch(ctx, l.ID)
			if err != nil {
				t.Fatal(err)
			}
			ch := make(chan string, 1)
			told[i] = ch
			go func() {
				last := "nothing"
				for e := range events {
					last = e.Kind
					if e.Kind == "draining" {
						break
					}
				}
				ch <- last
			}()
		}
		granted := make(chan error, 1)
		go func() {
			_, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site", Mode: semaphore.ReadWritePriority,
				Timeout: settle, Duration: time.Minute})
			granted <- err
		}()
		for i, ch := range told {
			if last := <-ch; last != "draining" {
				c.dump("/site")
				t.Fatalf("the page view %s was not told the site drains (its watch ended after %q)", views[i].what, last)
			}
		}
		select {
		case err := <-granted:
			t.Fatalf("the writer was granted beside two page views: %v", err)
		default:
		}
		for i, l := range held {
			if err := views[i].node.Release(ctx, l.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-granted; err != nil {
			t.Fatalf("the writer, after the page views ended: %v", err)
		}
	})
}
