//go:build linux

package bootclock

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// skewSlack is how far the wall clock may move against the monotonic
// clock before the boot clock is read again: NTP slews the wall clock
// by half a millisecond a second at most, a resume moves it by the
// whole sleep.
const skewSlack = time.Millisecond

// Clock is time since New on CLOCK_BOOTTIME.
//
// It is read as Go's monotonic clock (CLOCK_MONOTONIC, which the runtime's
// timers follow, and which a test bubble's fake clock replaces) plus the
// time spent suspended since New. The kernel keeps CLOCK_BOOTTIME as
// CLOCK_MONOTONIC plus a gap that only a resume widens, and widens the
// wall clock's lead on CLOCK_MONOTONIC by as much at once. A read of the
// gap is two system calls (microseconds in some VMs), so it is read only
// when that lead moved: reading the time then costs what time.Now does.
//
// Two reads bound the gap; the bounds are taken so that the sum never runs
// ahead of the boot clock: it is Go's clock exactly until a suspend, and
// falls short of the boot clock by less than a microsecond after one.
type Clock struct {
	start time.Time
	// base is above the gap at the start; negative: no CLOCK_BOOTTIME
	// (Linux before 2.6.39), and a suspend goes uncounted.
	base time.Duration
	// gap is the highest bound below the gap read so far (the gap never
	// shrinks); skew the wall clock's lead on Go's clock at that read.
	// Atomic, so that the clock is safe on any goroutine.
	gap, skew atomic.Int64
}

// New starts a clock at zero.
func New() *Clock {
	c := &Clock{start: time.Now(), base: -1}
	// The tightest of a few reads.
	for range 4 {
		var mono, boot unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
			c.base = -1
			return c
		}
		if g := time.Duration(boot.Nano() - mono.Nano()); c.base < 0 || g < c.base {
			c.base = g
		}
	}
	c.gap.Store(int64(c.base))
	return c
}

// Now reads Go's clock, and from it the time since New on the boot clock.
func (c *Clock) Now() (time.Time, time.Duration) {
	// Go's clock first: a suspend during the reads below then counts in
	// full, or from the next read on; it never counts twice.
	now := time.Now()
	elapsed := now.Sub(c.start)
	if c.base < 0 {
		return now, elapsed
	}
	lead := now.Round(0).Sub(c.start.Round(0)) - elapsed // wall minus monotonic
	if d := lead - time.Duration(c.skew.Load()); d > skewSlack || d < -skewSlack {
		c.skew.Store(int64(lead))
		var mono, boot unix.Timespec
		// Boot, then monotonic: boot - mono is below the gap.
		if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) == nil && unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) == nil {
			g := boot.Nano() - mono.Nano()
			for old := c.gap.Load(); g > old && !c.gap.CompareAndSwap(old, g); old = c.gap.Load() {
			}
		}
	}
	return now, elapsed + max(time.Duration(c.gap.Load())-c.base, 0)
}
