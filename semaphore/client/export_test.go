package client

import (
	"context"

	"github.com/sluicehq/sluice/semaphore"
)

// UsesCompact reports whether c sends acquire, release and renew over the
// compact protocol (it falls back to HTTP for an agent without it).
func UsesCompact(c *Client) bool { return c.compactPool != nil && !c.compactPool.http.Load() }

// AcquireOnClock is Acquire with the lease counted on clk instead of the
// boot clock: its Now reads Go's clock and, from it, a boot clock, which a
// test moves on as a suspend does.
func AcquireOnClock(ctx context.Context, c *Client, clk clock, name string, mode semaphore.Mode, o Options) (*Lease, error) {
	return c.acquire(ctx, name, mode, o, clk)
}

// ReleasesNoReply reports whether c knows its agent takes releases
// without an answer (the compact protocol's version 2).
func ReleasesNoReply(c *Client) bool { return c.compactPool.speaksNoReply() }

// Yielding is closed once the agent said that l should go when idle
// (yield, or draining): a writer of any kind waits, or it stops.
func Yielding(l *Lease) <-chan struct{} { return l.running().yielding }

// Told is closed at the first event of l's watch; TellsYield then says
// whether the agent sends yield for l.
func Told(l *Lease) <-chan struct{} { return l.running().told }
func TellsYield(l *Lease) bool      { return l.running().tellsYield }
