package client_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// sleepClock is a machine's boot clock: Go's clock plus the time spent
// suspended, which suspend adds at once while Go's clock, which the
// lease's timers follow, does not move, as after a resume on Linux.
type sleepClock struct {
	start time.Time
	slept atomic.Int64
}

func newSleepClock() *sleepClock { return &sleepClock{start: time.Now()} }

func (c *sleepClock) Now() (time.Time, time.Duration) {
	now := time.Now()
	return now, now.Sub(c.start) + time.Duration(c.slept.Load())
}

func (c *sleepClock) suspend(d time.Duration) { c.slept.Add(int64(d)) }

// A suspend counts against a lease: a short one brings its expiry nearer,
// one past the expiry ends it at the timer's next look, long before Go's
// clock would.
func TestLeaseSuspended(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	clk := newSleepClock()
	l, err := client.AcquireOnClock(ctx, c, clk, "/s", semaphore.Exclusive, client.Options{Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(ctx) })
	before := l.Expires()
	clk.suspend(20 * time.Second)
	if got := before.Sub(l.Expires()); got < 20*time.Second {
		t.Fatalf("a 20s suspend moved the expiry by %v", got)
	}
	if l.Err() != nil || isClosed(l.Done()) {
		t.Fatalf("lease ended with 40s left: %v", l.Err())
	}
	clk.suspend(time.Minute)
	if !closed(l.Done(), settle) {
		t.Fatalf("lease still held after a suspend past its expiry (Go's clock says %v left)", time.Until(before))
	}
	if err := l.Err(); !errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Err: %v, want ErrLost by the expiry", err)
	}
	if left := time.Until(l.Expires()); left > 0 {
		t.Fatalf("Expires is %v ahead after the lease expired", left)
	}
}

// A renewal after a suspend past the expiry is not sent: the lease is lost
// already, whatever its renewer's or timer's Go clock says.
func TestRenewSuspended(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	clk := newSleepClock()
	l, err := client.AcquireOnClock(ctx, c, clk, "/s", semaphore.Exclusive, client.Options{Duration: time.Minute, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(ctx) })
	clk.suspend(2 * time.Minute)
	if err := l.Renew(ctx); !errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("renew after the suspend: %v, want ErrLost by the expiry", err)
	}
	if !isClosed(l.Done()) || !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("lease not ended by the renewal: %v", l.Err())
	}
}
