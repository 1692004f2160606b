package bootclock

import "time"

// Since is the time since New: Now's reading alone.
func (c *Clock) Since() time.Duration {
	_, d := c.Now()
	return d
}
