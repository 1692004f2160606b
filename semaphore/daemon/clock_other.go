//go:build !linux

package daemon

import "time"

// bootClock is NodeConfig.Clock's default where no boot clock is read:
// Go's monotonic clock, which may stand still while the machine is
// suspended (the agent is meant for Linux, where a suspend is counted).
func bootClock() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}
