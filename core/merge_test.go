package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

// TestMergedMatchesMap checks the k-way merge of reports against the plain
// way of merging them (a map per request, then sorted), and diffEntries
// against a map comparison, on random tables of up to four replicas.
func TestMergedMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomTable := func() []wire.Entry {
		var out []wire.Entry
		for node := wire.NodeID(1); node <= 3; node++ {
			for seq := uint64(1); seq <= 6; seq++ {
				if rng.IntN(2) == 0 {
					continue
				}
				// A request's mode is the same at every replica; the rest
				// differs with how far each got.
				out = append(out, wire.Entry{Req: wire.RequestID{Node: node, Seq: seq}, Ticket: uint64(rng.IntN(4)),
					Mode: wire.Mode(1 + seq%2), State: wire.StateChoosing + wire.EntryState(rng.IntN(2)), Active: rng.IntN(2) == 0})
			}
		}
		return out // in request order: nodes, then sequences, ascending
	}
	for round := range 2000 {
		from := make([]*report, 1+rng.IntN(4))
		for i := range from {
			from[i] = &report{entries: randomTable()}
		}
		byReq := map[wire.RequestID]wire.Entry{}
		for _, rep := range from {
			for _, e := range rep.entries {
				if old, ok := byReq[e.Req]; ok {
					e.State, e.Ticket, e.Active = max(e.State, old.State), max(e.Ticket, old.Ticket), e.Active || old.Active
				}
				byReq[e.Req] = e
			}
		}
		var choosing, ticketed []wire.Entry
		for _, id := range sortedReqs(byReq) {
			e := byReq[id]
			if e.State == wire.StateChoosing {
				choosing = append(choosing, e)
				if e.Ticket == 0 {
					continue
				}
			}
			ticketed = append(ticketed, e)
		}
		got := (&masterName{}).merged(from)
		if !slices.Equal(got.choosing, choosing) || !slices.Equal(got.ticketed, ticketed) {
			t.Fatalf("round %d: merged %v / %v, want %v / %v", round, got.choosing, got.ticketed, choosing, ticketed)
		}

		a, b := from[0].entries, randomTable()
		want := map[wire.RequestID]bool{}
		inA := map[wire.RequestID]wire.Entry{}
		for _, e := range a {
			inA[e.Req] = e
		}
		for _, e := range b {
			if old, ok := inA[e.Req]; !ok || old != e {
				want[e.Req] = true
			}
			delete(inA, e.Req)
		}
		for req := range inA {
			want[req] = true
		}
		seen := map[wire.RequestID]bool{}
		diffEntries(a, b, func(req wire.RequestID) {
			if seen[req] {
				t.Fatalf("round %d: %s reported twice", round, req)
			}
			seen[req] = true
		})
		if len(seen) != len(want) {
			t.Fatalf("round %d: diff %v, want %v", round, seen, want)
		}
		for req := range want {
			if !seen[req] {
				t.Fatalf("round %d: diff misses %s (%v, want %v)", round, req, seen, want)
			}
		}
	}
}
