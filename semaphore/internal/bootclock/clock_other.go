//go:build !linux

package bootclock

import "time"

// Clock is Go's monotonic clock since New, where no boot clock is read: it
// may stand still while the machine is suspended (the agent is meant for
// Linux, where a suspend is counted).
type Clock struct{ start time.Time }

// New starts a clock at zero.
func New() *Clock { return &Clock{start: time.Now()} }

// Now reads Go's clock, and from it the time since New.
func (c *Clock) Now() (time.Time, time.Duration) {
	now := time.Now()
	return now, now.Sub(c.start)
}
