package core_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// churnNames locks and releases names distinct names once each, a batch of
// 1,000 at a time through masters on all three nodes, and ticks between
// batches so that time passes as in a real churn: the short leases'
// tombstones expire a batch or two later. After every batch it calls
// after with the names done so far.
func churnNames(tb testing.TB, c *benchCluster, names int, after func(done int)) {
	tb.Helper()
	a := core.Acquire{Mode: wire.ModeExclusive, Timeout: 1, Duration: 1}
	const batch, ticksPerBatch = 1000, 4
	for start := 0; start < names; start += batch {
		end := min(start+batch, names)
		c.lockBatch(tb, a, start, end)
		for range ticksPerBatch {
			c.tick(tb)
		}
		after(end)
	}
	for range housekeepTicks {
		c.tick(tb)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestForgottenNamesCostNothing: names locked and released once each, with
// time passing, leave the leaders with no name in memory, nothing on disk
// but the floor, and no request at the masters, and the heap does not grow
// with their number: what a million names cost is what a thousand cost.
func TestForgottenNamesCostNothing(t *testing.T) {
	const names, early = 24_000, 4_000
	c := newBenchCluster(t, true, nil)
	var heapEarly uint64
	churnNames(t, c, names, func(done int) {
		if done == early {
			heapEarly = liveHeap()
		}
	})
	floors := 0
	for i, n := range c.nodes {
		if got := len(n.Names()); got != 0 {
			t.Errorf("leader %d still has %d names", i+1, got)
		}
		if got := len(n.Requests()); got != 0 {
			t.Errorf("node %d still has %d requests", i+1, got)
		}
		d := c.disks[i]
		if len(d.Tickets) != 0 || len(d.HighWater) != 0 {
			t.Errorf("disk %d keeps %d names' tickets and %d marks", i+1, len(d.Tickets), len(d.HighWater))
		}
		if d.Floor > 0 {
			floors++
		}
	}
	// Fencing across forgotten names: the marks went into the floor of
	// the quorum that took the tickets.
	if floors < 2 {
		t.Errorf("%d of 3 disks have a floor after %d names", floors, names)
	}
	// A leak of a few hundred bytes a name would be several MiB here.
	const slack = 1 << 20
	heapLate := liveHeap()
	t.Logf("heap %d -> %d KiB", heapEarly>>10, heapLate>>10)
	if heapLate > heapEarly+slack {
		t.Errorf("live heap grew from %d KiB after %d names to %d KiB after %d", heapEarly>>10, early, heapLate>>10, names)
	}
	runtime.KeepAlive(c) // measured above: it must be live there
}

// BenchmarkNamesMemory reports the live heap of a three-leader cluster in
// memory after 10,000, 100,000 and 1,000,000 distinct names were locked and
// released once each, with time passing (churnNames): flat when idle names
// are forgotten. One iteration is the whole churn; run it with
// -benchtime 1x (a million cycles take about a minute).
func BenchmarkNamesMemory(b *testing.B) {
	for _, names := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("N=%d", names), func(b *testing.B) {
			for b.Loop() {
				c := newBenchCluster(b, true, nil)
				churnNames(b, c, names, func(int) {})
				b.StopTimer()
				b.ReportMetric(float64(liveHeap())/(1<<20), "heap-MiB")
				runtime.KeepAlive(c)
				if got := len(c.nodes[0].Names()); got != 0 {
					b.Fatalf("the leader holds %d names after the churn", got)
				}
				b.StartTimer()
			}
		})
	}
}
