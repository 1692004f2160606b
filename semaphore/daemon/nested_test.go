package daemon_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// On an agent of nested names, a lease on a name meets the leases on its
// parents and descendants: a drain of /site waits for the page views
// below it and turns the next ones away; a writer below /site/shop does
// not touch a reader of /site/blog; names are taken in canonical form.
func TestNestedNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3, nested: true})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		page := daemon.Request{Name: "/site/shop//cart", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute}
		if _, err := c.node(0).Acquire(ctx, page); !errors.Is(err, semaphore.ErrInvalid) {
			t.Fatalf("an empty segment: %v, want ErrInvalid", err)
		}
		page.Name = "/site/shop/cart/"
		view, err := c.node(0).Acquire(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		if view.Name != "/site/shop/cart" {
			t.Fatalf("the lease's name is %q, want the canonical /site/shop/cart", view.Name)
		}
		blog, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site/blog/post", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// A job on the shop: its intent on /site is no reader's business.
		job, err := c.node(2).Acquire(ctx, daemon.Request{Name: "/site/shop/cart/item", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.node(2).Release(ctx, job.ID, job.Name); err != nil {
			t.Fatal(err)
		}
		writer, err := c.node(2).Acquire(ctx, daemon.Request{Name: "/site/blog/draft", Mode: semaphore.Exclusive, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatalf("a writer of /site/blog/draft beside readers of /site/shop/cart and /site/blog/post: %v", err)
		}
		// The writer below /site keeps a reader of the whole site out.
		if _, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute}); !errors.Is(err, semaphore.ErrDraining) {
			t.Fatalf("a reader of /site beside a writer of /site/blog/draft: %v, want ErrDraining", err)
		}
		if err := c.node(2).Release(ctx, writer.ID, writer.Name); err != nil {
			t.Fatal(err)
		}
		// A drain of /site waits for both page views.
		drained := make(chan error, 1)
		go func() {
			l, err := c.node(2).Acquire(ctx, daemon.Request{Name: "/site", Mode: semaphore.ReadWritePriority, Timeout: time.Minute, Duration: time.Minute})
			if err == nil {
				err = c.node(2).Release(ctx, l.ID, l.Name)
			}
			drained <- err
		}()
		waitForEntry(t, c.node(2), "/site", semaphore.ReadWritePriority)
		select {
		case err := <-drained:
			t.Fatalf("the drain of /site went in beside page views below it: %v", err)
		default:
		}
		// Page views below /site are turned away once the yield reached
		// node 1's share of /site, within a message's time.
		for i := 0; ; i++ {
			l, err := c.node(0).Acquire(ctx, daemon.Request{Name: "/site/shop/other", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
			if errors.Is(err, semaphore.ErrDraining) {
				break
			}
			if err != nil || i == 100 {
				t.Fatalf("a page view below a waiting drain of /site: %v, want ErrDraining", err)
			}
			if err := c.node(0).Release(ctx, l.ID, l.Name); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, l := range []struct {
			n  int
			id string
		}{{0, view.ID}, {1, blog.ID}} {
			if err := c.node(l.n).Release(ctx, l.id, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-drained; err != nil {
			t.Fatalf("the drain once the page views left: %v", err)
		}
	})
}

// An acquire of several nested names is one request: the names and the
// levels above them each taken once, the leases sharing one id with a
// token each; releasing one lets all go.
func TestNestedAcquireAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3, nested: true})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		if _, err := c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, true, "/site/a", "/site/a/")); !errors.Is(err, semaphore.ErrInvalid) ||
			!strings.Contains(err.Error(), "twice") {
			t.Fatalf("one name twice, spelt two ways: %v", err)
		}
		ls, err := c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, true, "/site/shop/checkout", "/site/shop/cart", "/site/shop"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range ls {
			names = append(names, l.Name)
			if l.ID != ls[0].ID || l.Token == 0 {
				t.Fatalf("leases %+v: one id, a token each", ls)
			}
		}
		if !slices.Equal(names, []string{"/site/shop", "/site/shop/cart", "/site/shop/checkout"}) {
			t.Fatalf("names %v", names)
		}
		// Held: a reader of /site/blog goes in, one of the shop does not.
		if _, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site/shop/cart/x", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute}); !errors.Is(err, semaphore.ErrDraining) {
			t.Fatalf("a reader below the held names: %v", err)
		}
		blog, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site/blog", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.node(1).Release(ctx, blog.ID, blog.Name); err != nil {
			t.Fatal(err)
		}
		// Renewed by any of its names, as a client renews each lease.
		for _, l := range ls {
			if _, err := c.node(0).RenewHeld(ctx, l.ID, daemon.Held{Name: l.Name, Mode: semaphore.Exclusive}); err != nil {
				t.Fatalf("renewal of %s by its name %s: %v", l.ID, l.Name, err)
			}
		}
		if err := c.node(0).Release(ctx, ls[1].ID, ls[1].Name); err != nil {
			t.Fatalf("release by the second name of the set: %v", err)
		}
		l, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site/shop/checkout", Mode: semaphore.Exclusive, Timeout: 5 * time.Second, Duration: time.Minute})
		if err != nil {
			t.Fatalf("the set's last name after the release of one: %v", err)
		}
		if err := c.node(1).Release(ctx, l.ID, l.Name); err != nil {
			t.Fatal(err)
		}
	})
}

// Nested leases wait for the cluster to read the intent modes: while its
// members hold the codec at 3, an agent of nested names is not ready, and
// says why.
func TestNestedNamesNeedCodec4(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3, nested: true, codec: 3})
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		var st api.Status
		for range 100 { // the election's first view comes within seconds of the bubble's clock
			var err error
			if st, err = c.node(0).Status(ctx); err != nil {
				t.Fatal(err)
			}
			if st.View.Epoch > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if st.Ready || !strings.Contains(st.Reason, "cluster codec 4") {
			t.Fatalf("an agent of nested names at cluster codec 3: ready %v, %q", st.Ready, st.Reason)
		}
		_, err := c.node(0).Acquire(ctx, daemon.Request{Name: "/site/shop", Mode: semaphore.ReadOnly, Timeout: time.Second, Duration: time.Minute})
		if !errors.Is(err, semaphore.ErrNotReady) || !strings.Contains(err.Error(), "cluster codec 4") {
			t.Fatalf("a nested lease at cluster codec 3: %v", err)
		}
	})
}

// waitForEntry waits, on the bubble's clock, until n's own request of
// mode on name has its ticket and waits.
func waitForEntry(t *testing.T, n *daemon.Node, name string, mode semaphore.Mode) {
	t.Helper()
	for range 200 {
		tab, err := n.Locks(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(tab.Requests, func(r api.OwnRequest) bool {
			return r.Name == name && r.Mode == mode.String() && r.Phase == "waiting"
		}) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s request on %s", mode, name)
}

// A drain's grace over, its readers are revoked: with nested names, those
// of the names below it too (their agents' intent tickets on it go).
func TestNestedRevokeReadersBelow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3, nested: true})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		var views []daemon.Lease
		for i, name := range []string{"/site/shop/cart", "/site/blog/post"} {
			l, err := c.node(i).Acquire(ctx, daemon.Request{Name: name, Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			views = append(views, l)
		}
		other, err := c.node(2).Acquire(ctx, daemon.Request{Name: "/other/page", Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// The revocation reads node 1's own table: a leader that was not
		// in a doorway's quorum takes its number from EXITING, which may
		// still be on its way when the grant is answered. Let it arrive.
		synctest.Wait()
		reqs, readers, err := c.node(0).RevokeReaders(ctx, nil, "/site/")
		if err != nil || len(reqs) != 2 || readers != 2 {
			t.Fatalf("revoke the readers below /site: %v, %d readers, %v; want the two agents' intent tickets", reqs, readers, err)
		}
		// The revocation is done once a quorum of leaders dropped the
		// tickets; their word to the tickets' agents may still be on its
		// way: let it arrive.
		synctest.Wait()
		for i, l := range views {
			if _, err := c.node(i).Renew(ctx, l.ID); !errors.Is(err, semaphore.ErrLost) && !errors.Is(err, semaphore.ErrUnknownLease) {
				t.Errorf("a page view below /site after the revocation: renewal %v, want lost", err)
			}
		}
		if _, err := c.node(2).Renew(ctx, other.ID); err != nil {
			t.Errorf("a page view elsewhere after the revocation: %v", err)
		}
	})
}

// Bad names on an agent of nested names: clear errors, and nothing held.
func TestNestedBadNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3, nested: true})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		deep := "/s" + strings.Repeat("/x", 40)
		for _, name := range []string{"/site/../etc", "/site/%2e%2e/etc", "/site//shop", "/site/%zz", "https:///nohost", deep,
			strings.Repeat("/x", 10000)} {
			_, err := c.node(0).Acquire(ctx, daemon.Request{Name: name, Mode: semaphore.ReadOnly, Try: true, Duration: time.Minute})
			if !errors.Is(err, semaphore.ErrInvalid) {
				t.Errorf("%.40q: %v, want ErrInvalid", name, err)
			}
		}
		// One name in two encodings is one name twice; a list with a bad
		// name holds nothing of the good ones.
		for _, names := range [][]string{{"/site/%41", "/site/A"}, {"/site/a", "/site/b/../c"}} {
			if _, err := c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, true, names...)); !errors.Is(err, semaphore.ErrInvalid) {
				t.Errorf("%q: %v, want ErrInvalid", names, err)
			}
		}
		l, err := c.node(1).Acquire(ctx, daemon.Request{Name: "/site", Mode: semaphore.Exclusive, Try: true, Duration: time.Minute})
		if err != nil {
			t.Fatalf("/site after the refused acquires: %v (something was held)", err)
		}
		if err := c.node(1).Release(ctx, l.ID, l.Name); err != nil {
			t.Fatal(err)
		}
	})
}
