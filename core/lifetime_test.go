package core

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHandedOverLifetime checks the rule of keepHandedOver on clocks that
// run at any rate within ±10.5 % of the master's (the simulator draws
// ±5 %, so pairs differ by at most 10.6 %): a ticket handed from
// leader to leader, up to five times, at any moment, is kept by the last
// one at least until its holder's lease ends (safety) and never longer than
// the first replica's keep allows on the slowest clock, plus a tick a hop
// (liveness: each handoff adding a margin again kept released tickets alive
// for (9/8)^hops of their lease). Time is real-valued; the master's clock
// runs at rate 1; a node sees its clock's whole ticks, as the core does.
func TestHandedOverLifetime(t *testing.T) {
	n := &Node{}
	rng := rand.New(rand.NewPCG(1, 2))
	const minRate, maxRate = 0.9, 1.105
	rate := func() float64 {
		switch rng.IntN(3) {
		case 0:
			return minRate
		case 1:
			return maxRate
		}
		return minRate + (maxRate-minRate)*rng.Float64()
	}
	for i := range 200_000 {
		lease := uint64(8 + rng.IntN(2000))
		sent := rng.Float64() * 100        // the holder's lease runs from here...
		holderEnd := sent + float64(lease) // ...to here
		at := sent + rng.Float64()*float64(lease)/2
		received := at
		r, phase := rate(), rng.Float64()
		clock := func(t float64) float64 { return r*t + phase }
		deadline := math.Floor(clock(at)) + float64(n.keep(lease))
		end := (deadline - phase) / r
		hops := rng.IntN(6)
		for range hops {
			at += rng.Float64() * (end - at) // a handoff while the record lives
			remaining := uint64(deadline - math.Floor(clock(at)))
			r, phase = rate(), rng.Float64()
			deadline = math.Floor(clock(at)) + float64(n.keepHandedOver(remaining))
			end = (deadline - phase) / r
		}
		// A tick a copy: its node's clock may be a fraction from its next tick.
		if end < holderEnd-float64(hops+1)/minRate {
			t.Fatalf("case %d: lease %d sent at %.2f ends at %.2f, its last copy after %d handoffs at %.2f",
				i, lease, sent, holderEnd, hops, end)
		}
		// Ticks left never grow by more than one a hop, and go down by at
		// least minRate a unit of time.
		if limit := received + float64(n.keep(lease)+int64(2*(hops+1)))/minRate; end > limit {
			t.Fatalf("case %d: lease %d sent at %.2f ends at %.2f, its last copy after %d handoffs at %.2f, past %.2f",
				i, lease, sent, holderEnd, hops, end, limit)
		}
	}
}
