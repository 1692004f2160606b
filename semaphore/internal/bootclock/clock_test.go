package bootclock_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/internal/bootclock"
)

// The clock never runs behind Go's monotonic clock (it adds the time
// suspended, which a test cannot cause) and never goes back; Now's time is
// Go's clock at the reading.
func TestClock(t *testing.T) {
	c := bootclock.New()
	after := time.Now() // after the clock's start
	last := time.Duration(0)
	for i := range 1000 {
		goClock := time.Since(after)
		var v time.Duration
		if i%2 == 0 {
			v = c.Since()
		} else {
			var now time.Time
			now, v = c.Now()
			if now.Before(after.Add(goClock)) {
				t.Fatalf("Now's time %v is before Go's clock read before it (%v)", now, after.Add(goClock))
			}
		}
		if v < goClock {
			t.Fatalf("the boot clock reads %v, behind Go's clock at %v", v, goClock)
		}
		if v < last {
			t.Fatalf("the boot clock went back from %v to %v", last, v)
		}
		last = v
	}
}

// BenchmarkClock is the cost of the clock read at every turn of a node's
// loop and at every lease's send.
func BenchmarkClock(b *testing.B) {
	c := bootclock.New()
	for b.Loop() {
		c.Now()
	}
}
