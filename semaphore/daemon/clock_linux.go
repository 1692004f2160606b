//go:build linux

package daemon

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

// bootClock is NodeConfig.Clock's default on Linux: time since the call on
// CLOCK_BOOTTIME, which keeps running while the machine is suspended.
//
// It is read as Go's monotonic clock (CLOCK_MONOTONIC, which the runtime's
// timers follow, and which a test bubble's fake clock replaces) plus the
// time spent suspended since the call. The kernel keeps CLOCK_BOOTTIME as
// CLOCK_MONOTONIC plus a gap that only a resume widens, and widens the
// wall clock's lead on CLOCK_MONOTONIC by as much at once. A read of the
// gap is two system calls (microseconds in some VMs), so it is read only
// when that lead moved: reading the time then costs what time.Now does.
//
// Two reads bound the gap; the bounds are taken so that the sum never runs
// ahead of the boot clock: it is Go's clock exactly until a suspend, and
// falls short of the boot clock by less than a microsecond after one.
func bootClock() func() time.Duration {
	start := time.Now()
	// Above the gap at the start: the tightest of a few reads.
	base := time.Duration(-1)
	for range 4 {
		var mono, boot unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
			// No CLOCK_BOOTTIME (Linux before 2.6.39): a suspend goes uncounted.
			return func() time.Duration { return time.Since(start) }
		}
		if g := time.Duration(boot.Nano() - mono.Nano()); base < 0 || g < base {
			base = g
		}
	}
	// gap is the highest bound below the gap read so far (the gap never
	// shrinks); skew the wall clock's lead on Go's clock at that read.
	// Atomic, so that the clock is safe on any goroutine.
	var gap, skew atomic.Int64
	gap.Store(int64(base))
	return func() time.Duration {
		// Go's clock first: a suspend during the reads below then counts
		// in full, or from the next read on; it never counts twice.
		now := time.Now()
		elapsed := now.Sub(start)
		lead := now.Round(0).Sub(start.Round(0)) - elapsed // wall minus monotonic
		if d := lead - time.Duration(skew.Load()); d > skewSlack || d < -skewSlack {
			skew.Store(int64(lead))
			var mono, boot unix.Timespec
			// Boot, then monotonic: boot - mono is below the gap.
			if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) == nil && unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) == nil {
				g := boot.Nano() - mono.Nano()
				for old := gap.Load(); g > old && !gap.CompareAndSwap(old, g); old = gap.Load() {
				}
			}
		}
		return elapsed + max(time.Duration(gap.Load())-base, 0)
	}
}
