package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// A node that restarts under its client's lease takes the lease over when
// the client renews it by id and name: the renewal reaches the leaders'
// tickets, the name stays held, and the release through the restarted
// node frees it. An id the cluster does not keep is unknown_lease, and
// takes nothing; a malformed one is refused as invalid.
func TestRestartedNodeKeepsLease(t *testing.T) {
	c, held := restartUnderLease(t)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	n := c.node(3)

	got, err := n.RenewHeld(ctx, held.ID, daemon.Held{Name: "/job", Duration: time.Minute})
	if err != nil {
		c.dump("/job")
		t.Fatalf("renew of the earlier life's lease through the restarted node: %v", err)
	}
	if got.ID != held.ID || got.Name != "/job" || got.TTL <= 0 {
		t.Fatalf("renewed lease %+v, held %+v", got, held)
	}
	// Taken over: the next renewal is this life's own, by id alone or
	// with the right name.
	if _, err := n.Renew(ctx, held.ID); err != nil {
		t.Fatalf("second renewal: %v", err)
	}
	if _, err := n.RenewHeld(ctx, held.ID, daemon.Held{Name: "/other"}); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("renew of the lease on another name: %v, want unknown lease", err)
	}
	for i := range 4 {
		if l, err := acquire(t, c.node(i), "/job", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
			t.Fatalf("try on /job through node %d while the lease is held: %+v, %v; want timed out", i+1, l, err)
		}
	}

	// Bad input: an id of the earlier life that the cluster never had, an
	// id of another node, malformed ids.
	var node uint64
	var inc, counter uint32
	if _, err := fmt.Sscanf(held.ID, "%d.%d.%d", &node, &inc, &counter); err != nil {
		t.Fatal(err)
	}
	never := fmt.Sprintf("%d.%d.%d", node, inc, counter+1000)
	if _, err := n.RenewHeld(ctx, never, daemon.Held{Name: "/job"}); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("renew of an id the cluster never had: %v, want unknown lease", err)
	}
	if err := n.Release(ctx, never, "/job"); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("release of an id the cluster never had: %v, want unknown lease", err)
	}
	other := fmt.Sprintf("%d.%d.%d", uint64(c.ids[0]), 1, counter)
	if _, err := n.RenewHeld(ctx, other, daemon.Held{Name: "/job"}); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("renew of another node's id: %v, want unknown lease", err)
	}
	for _, bad := range []string{"", "x", "1.2", "0.1.1", "1.2.3.4", fmt.Sprintf("%d.%d.99999999999", node, inc)} {
		if _, err := n.RenewHeld(ctx, bad, daemon.Held{Name: "/job"}); !errors.Is(err, codes.ErrInvalid) {
			t.Fatalf("renew of %q: %v, want invalid", bad, err)
		}
	}
	if _, err := n.RenewHeld(ctx, never, daemon.Held{Name: "bad\x00name"}); !errors.Is(err, codes.ErrInvalid) {
		t.Fatalf("renew with a bad name: %v, want invalid", err)
	}
	// None of that granted anything: the name is still held.
	if l, err := acquire(t, c.node(0), "/job", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
		t.Fatalf("try on /job after the bad renewals: %+v, %v; want timed out", l, err)
	}

	if err := n.Release(ctx, held.ID, "/job"); err != nil {
		t.Fatalf("release through the restarted node: %v", err)
	}
	if _, err := n.RenewHeld(ctx, held.ID, daemon.Held{Name: "/job"}); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("renew after the release: %v, want unknown lease", err)
	}
	next := mustAcquire(t, c.node(1), "/job", "exclusive", time.Minute)
	if next.Token <= held.Token {
		t.Fatalf("token %d after the release, %d before", next.Token, held.Token)
	}
}

// A lease of an earlier life is released through the restarted node by id
// and name, without a renewal first; a second release of it, or a release
// on another name, is unknown_lease.
func TestRestartedNodeReleasesLease(t *testing.T) {
	c, held := restartUnderLease(t)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	n := c.node(3)
	if err := n.Release(ctx, held.ID, "/other"); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("release on another name: %v, want unknown lease", err)
	}
	if err := n.Release(ctx, held.ID, "/job"); err != nil {
		c.dump("/job")
		t.Fatalf("release through the restarted node: %v", err)
	}
	// Released already: said so, or released again (the first release
	// may still be on its way to the last leader); either way given back.
	if err := n.Release(ctx, held.ID, "/job"); err != nil && !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("second release: %v, want nil or unknown lease", err)
	}
	if _, err := acquire(t, c.node(0), "/job", "exclusive", settle, time.Minute); err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
}

// restartUnderLease starts a cluster of four, takes a minute's exclusive
// lease on /job through node 4, and restarts node 4 under it.
func restartUnderLease(t *testing.T) (*memCluster, daemon.Lease) {
	t.Helper()
	c := startMemCluster(t, memClusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}})
	c.waitReady()
	held := mustAcquire(t, c.node(3), "/job", "exclusive", time.Minute)
	c.stop(3)
	c.start(3)
	c.waitReady()
	return c, held
}
