package cli

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestMemoryLimitIsTargetOrTwiceTheLiveHeap(t *testing.T) {
	for _, c := range []struct {
		target, live uint64
		want         int64
	}{
		{128 << 20, 0, 128 << 20},
		{128 << 20, 50 << 20, 128 << 20},
		{128 << 20, 64 << 20, 128 << 20},
		{128 << 20, 70 << 20, 140 << 20}, // a large table: Go's own goal, never below it
		{128 << 20, 1 << 40, 2 << 40},
		{1, math.MaxUint64 / 2, math.MaxInt64},
		{math.MaxUint64, 0, math.MaxInt64},
	} {
		if got := memoryLimit(c.target, c.live); got != c.want {
			t.Errorf("memoryLimit(%d, %d) = %d, want %d", c.target, c.live, got, c.want)
		}
	}
}

func TestMemoryGovernorFollowsTheLiveHeapAndGivesTheLimitBack(t *testing.T) {
	const before = int64(math.MaxInt64)
	limit := before
	var sets []int64
	// Every read of the live heap takes the next value the test gives:
	// the governor reads once when it starts and once a tick.
	lives := make(chan uint64)
	g := memoryGovernor{target: 128 << 20, live: func() uint64 { return <-lives },
		setLimit: func(l int64) int64 { old := limit; limit = l; sets = append(sets, l); return old }}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx, ticks)
	}()
	lives <- 10 << 20
	for _, l := range []uint64{100 << 20, 100 << 20 /* unchanged: not set again */, 20 << 20, 20 << 20} {
		ticks <- time.Time{}
		lives <- l
	}
	cancel()
	<-done // sets and limit are the governor's until it is done
	want := []int64{128 << 20, 200 << 20, 128 << 20, before}
	if len(sets) != len(want) {
		t.Fatalf("limits set %v, want %v", sets, want)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("limits set %v, want %v", sets, want)
		}
	}
	if limit != before {
		t.Fatalf("limit after the governor stopped %d, want the one before (%d)", limit, before)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "128MiB": 128 << 20, "128 MiB": 128 << 20, "1GiB": 1 << 30,
		"512M": 512 << 20, "64MB": 64 << 20, "4096": 4096, "10KiB": 10 << 10, "7B": 7} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5GiB", "lots", "99999999999999999999GiB", "1TiB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}
