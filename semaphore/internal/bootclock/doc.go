// Package bootclock is the clock leases are counted on: time since New on
// a clock that keeps running while the machine is suspended
// (CLOCK_BOOTTIME on Linux). Go's monotonic clock, which its timers
// follow, stands still meanwhile on Linux, yet the leaders count a lease
// in time whatever this machine did: a lease counted on Go's clock would
// outlive the leaders' copy by the whole sleep.
//
// Contract: a Clock is safe for concurrent use. Its reading never goes
// back and never runs behind Go's monotonic clock; it moves exactly as Go's
// clock does until a suspend, and ahead of it by the time suspended after
// one (less a microsecond at most: it never runs ahead of the boot clock).
// Now returns the Go time its reading was taken from, so that two readings
// differ from their Go times' difference by exactly the time suspended in
// between. A read costs what time.Now does, except the first after a
// resume or a step of the wall clock (two system calls). Where no boot
// clock is read (not Linux, or Linux before 2.6.39) it is Go's monotonic
// clock, and a suspend may go uncounted.
package bootclock
