package client_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// AcquireAll takes several names in one call, all or nothing, one token
// each; ReleaseAll lets them go together.
func TestAcquireAll(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	ls, err := c.AcquireAll(ctx, []string{"/b", "/a"}, semaphore.Exclusive, client.Options{Duration: 10 * time.Second, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name())
		if l.Token() == 0 || l.Mode() != semaphore.Exclusive {
			t.Fatalf("lease %s: token %d mode %s", l.Name(), l.Token(), l.Mode())
		}
	}
	if !slices.Equal(names, []string{"/a", "/b"}) {
		t.Fatalf("leases of %v", names)
	}
	if err := client.ReleaseAll(ctx, ls...); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if !isClosed(l.Done()) || l.Err() != nil {
			t.Fatalf("%s after ReleaseAll: err %v", l.Name(), l.Err())
		}
	}

	held, err := c.Acquire(ctx, "/b", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AcquireAll(ctx, []string{"/a", "/b"}, semaphore.Exclusive, client.Options{Try: true})
	if !errors.Is(err, semaphore.ErrTimedOut) || !strings.Contains(err.Error(), "/b: ") {
		t.Fatalf("with /b held: %v", err)
	}
	a, err := c.Acquire(ctx, "/a", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatalf("/a is held half after the failed acquire: %v", err)
	}
	if err := client.ReleaseAll(ctx, a, held); err != nil {
		t.Fatal(err)
	}

	for _, bad := range [][]string{nil, {"/a", "/a"}, {"/a", "bad\nname"}} {
		if _, err := c.AcquireAll(ctx, bad, semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrInvalid) {
			t.Errorf("%q: %v, want semaphore.ErrInvalid", bad, err)
		}
	}
}
