package cli

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// defaultMemoryTarget is the agent's --memory-target: a node that is not
// a leader lives in about 50 MiB, a leader's table of 100,000 names in
// about 70 MiB of live heap.
const defaultMemoryTarget = "128MiB"

// memoryLimit is Go's soft memory limit for a memory target and a live
// heap: the target, or twice the live heap when that is more. Twice the
// live heap is where Go's collector (GOGC=100) would let the heap grow
// anyway, so a large table is collected about as often as by default
// (a little sooner: the limit also counts stacks and the runtime's own
// memory): the limit caps the rest (memory freed and not yet given back,
// the overshoot of a burst) instead of turning a large table into a
// collector that never stops.
func memoryLimit(target, live uint64) int64 {
	l := max(target, 2*live)
	if l > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(l)
}

// memoryGovernor keeps the agent's soft memory limit at memoryLimit of
// its target and the live heap as the heap changes.
type memoryGovernor struct {
	// target is --memory-target, in bytes.
	target uint64
	// live reads the live heap after the last collection (the runtime's
	// /gc/heap/live:bytes when nil).
	live func() uint64
	// setLimit sets the soft limit and returns the one before
	// (debug.SetMemoryLimit when nil).
	setLimit func(int64) int64
	log      *slog.Logger
}

// run sets the limit now and at every tick until ctx ends, then gives
// back the limit there was before.
func (g memoryGovernor) run(ctx context.Context, ticks <-chan time.Time) {
	live := g.live
	if live == nil {
		live = liveHeap
	}
	set := g.setLimit
	if set == nil {
		set = debug.SetMemoryLimit
	}
	last := memoryLimit(g.target, live())
	before := set(last)
	if g.log != nil {
		g.log.Info("memory target", "target_mib", g.target>>20, "limit_mib", last>>20)
	}
	defer set(before)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			if l := memoryLimit(g.target, live()); l != last {
				set(l)
				last = l
			}
		}
	}
}

// liveHeap is the heap the last collection found reachable.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// parseBytes reads a size: a number of bytes, or one with a unit (KiB,
// MiB, GiB; KB, MB, GB are the same powers of two, as operators write
// them for memory).
func parseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", s)
	}
	return n * mult, nil
}
