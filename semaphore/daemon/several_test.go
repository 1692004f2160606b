package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// several is a request of the names in mode, the options of each.
func several(mode semaphore.Mode, try bool, names ...string) []daemon.Request {
	rs := make([]daemon.Request, len(names))
	for i, n := range names {
		rs[i] = daemon.Request{Name: n, Mode: mode, Try: try, Timeout: settle, Duration: time.Minute}
	}
	return rs
}

// An acquire of several names takes them all, in byte order, one token
// each; when one is held by another, a try fails naming it, and the names
// taken before it are let go.
func TestAcquireAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		ls, err := c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, false, "/c", "/a", "/b"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range ls {
			names = append(names, l.Name)
			if l.Token == 0 || l.ID == "" {
				t.Fatalf("lease %+v", l)
			}
		}
		if !slices.Equal(names, []string{"/a", "/b", "/c"}) {
			t.Fatalf("taken in the order %v", names)
		}
		for _, l := range ls {
			if err := c.node(0).Release(ctx, l.ID, l.Name); err != nil {
				t.Fatal(err)
			}
		}

		held := mustAcquire(t, c.node(1), "/b", "exclusive", time.Minute)
		_, err = c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, true, "/a", "/b", "/c"))
		if !errors.Is(err, semaphore.ErrTimedOut) || !strings.HasPrefix(err.Error(), "/b: ") || !strings.Contains(err.Error(), "the 1 names taken before it were let go") {
			t.Fatalf("a try of /a /b /c with /b held: %v", err)
		}
		// Nothing is held half: /a and /c are free within moments, not
		// at the end of the failed call's minute-long lease.
		for _, name := range []string{"/a", "/c"} {
			l, err := c.node(2).Acquire(ctx, daemon.Request{Name: name, Mode: semaphore.Exclusive, Timeout: 5 * time.Second, Duration: time.Minute})
			if err != nil {
				c.dump(name)
				t.Fatalf("%s after the failed acquire: %v", name, err)
			}
			if err := c.node(2).Release(ctx, l.ID, name); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.node(1).Release(ctx, held.ID, "/b"); err != nil {
			t.Fatal(err)
		}
	})
}

// Two acquires of the same names listed in opposite orders, both waiting:
// the agent takes each list in one order, so neither waits for the other
// in a cycle, and both are granted in turn.
func TestAcquireAllNoCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, names := range [][]string{{"/x", "/y"}, {"/y", "/x"}} {
			wg.Go(func() {
				ls, err := c.node(i).AcquireAll(ctx, several(semaphore.Exclusive, false, names...))
				if err == nil {
					time.Sleep(time.Second) // hold a while (synctest's fake clock)
					for _, l := range ls {
						err = errors.Join(err, c.node(i).Release(ctx, l.ID, l.Name))
					}
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("acquire %d: %v", i+1, err)
			}
		}
	})
}

// Bad lists are refused before anything is taken.
func TestAcquireAllRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		c.waitReady()
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		many := make([]string, api.MaxNames+1)
		for i := range many {
			many[i] = fmt.Sprintf("/n%d", i)
		}
		for _, c2 := range []struct {
			names []string
			why   string
		}{
			{nil, "no name"},
			{[]string{"/a", "/b", "/a"}, `"/a" twice`},
			{[]string{"/a", ""}, "empty name"},
			{many, "65 names, at most 64"},
		} {
			_, err := c.node(0).AcquireAll(ctx, several(semaphore.Exclusive, true, c2.names...))
			if !errors.Is(err, semaphore.ErrInvalid) || !strings.Contains(err.Error(), c2.why) {
				t.Errorf("%q: %v, want ErrInvalid saying %q", c2.names, err, c2.why)
			}
		}
		tab, err := c.node(0).Locks(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Requests) != 0 {
			t.Fatalf("refused acquires left %+v", tab.Requests)
		}
	})
}
