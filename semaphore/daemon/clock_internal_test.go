package daemon

import (
	"testing"
	"time"
)

// The default clock never runs behind Go's monotonic clock (it adds the
// time suspended, which a test cannot cause) and never goes back.
func TestBootClock(t *testing.T) {
	c := bootClock()
	after := time.Now() // after the clock's start
	last := time.Duration(0)
	for range 1000 {
		goClock := time.Since(after)
		v := c()
		if v < goClock {
			t.Fatalf("the boot clock reads %v, behind Go's clock at %v", v, goClock)
		}
		if v < last {
			t.Fatalf("the boot clock went back from %v to %v", last, v)
		}
		last = v
	}
}

// BenchmarkBootClock is the cost of the clock read at every turn of a
// node's loop.
func BenchmarkBootClock(b *testing.B) {
	c := bootClock()
	for b.Loop() {
		c()
	}
}
