package daemon

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
)

// The default quiet period is filled in by the runtime, for
// READ_WRITE_GENTLE only: the admission policy takes a request's quiet
// period as it is (0: none), so without the fill-in a gentle writer would
// not wait for visitors at all.
func TestCoreAcquireQuietPeriod(t *testing.T) {
	n := &Node{cfg: NodeConfig{Tick: 10 * time.Millisecond}}
	cases := []struct {
		mode  semaphore.Mode
		quiet time.Duration
		want  int64
	}{
		{semaphore.ReadWriteGentle, 0, int64(semaphore.DefaultQuiet / (10 * time.Millisecond))},
		{semaphore.ReadWriteGentle, time.Second, 100},
		{semaphore.ReadWrite, 0, 0},
		{semaphore.ReadOnly, 0, 0},
	}
	for _, c := range cases {
		a := n.coreAcquire(Request{Name: "/a", Mode: c.mode, Duration: time.Minute, Quiet: c.quiet})
		if a.Quiet != c.want {
			t.Errorf("%s with quiet %v: %d ticks, want %d", c.mode, c.quiet, a.Quiet, c.want)
		}
	}
}
