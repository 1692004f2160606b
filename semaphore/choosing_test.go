package semaphore_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// skippedDoorwayChanges looks for a request that matters says a waiter
// may skip while it chooses, and whose ticket, once known, changes the
// waiter's decision: on every table of up to two other tickets, and for
// the skipped request in any mode, active or not, before, tied with or
// after the waiter's number. It returns a description of the first such
// case, or "".
func skippedDoorwayChanges(matters core.ChoosingMatters) (string, int) {
	modes := []wire.Mode{semaphore.ReadOnly, semaphore.ReadWritePriority, semaphore.Exclusive, semaphore.ReadWrite, semaphore.ReadWriteGentle,
		semaphore.IntentShared, semaphore.IntentExclusive}
	var entries []wire.Entry
	for k, mm := range modes {
		for _, active := range []bool{false, true} {
			for _, tk := range []uint64{1, 3, 5} {
				for _, node := range []wire.NodeID{1, 12} {
					entries = append(entries, wire.Entry{Req: wire.RequestID{Node: node, Seq: uint64(10*k) + tk}, Ticket: tk, Mode: mm,
						State: wire.StateTicket, Active: active})
				}
			}
		}
	}
	tables := [][]wire.Entry{nil}
	for _, a := range entries {
		tables = append(tables, []wire.Entry{a})
		for _, b := range entries {
			if b.Req != a.Req {
				tables = append(tables, []wire.Entry{a, b})
			}
		}
	}
	checked := 0
	for _, mm := range modes {
		for _, try := range []bool{false, true} {
			for _, limit := range []int{0, 1, 2} {
				for _, activated := range []bool{false, true} {
					me := core.Candidate{Req: wire.RequestID{Node: 9, Seq: 3}, Ticket: 3, Mode: mm, Try: try, Quiet: 20,
						SinceReaders: 50, Limit: limit, Activated: activated}
					var skipped []wire.Entry
					for _, e := range entries {
						if !matters(me, e) {
							skipped = append(skipped, e)
						}
					}
					if len(skipped) == 0 {
						continue
					}
					for _, others := range tables {
						d := semaphore.Admit(me, others)
						for _, e := range skipped {
							if slices.ContainsFunc(others, func(o wire.Entry) bool { return o.Req == e.Req }) {
								continue
							}
							checked++
							if got := semaphore.Admit(me, append(slices.Clone(others), e)); got != d {
								return describe(me, others, e, d, got), checked
							}
						}
					}
				}
			}
		}
	}
	return "", checked
}

func describe(me core.Candidate, others []wire.Entry, e wire.Entry, before, after core.Decision) string {
	return fmt.Sprintf("waiter %+v: skipping %+v changes its decision among %+v: %+v without it, %+v with it", me, e, others, before, after)
}

// TestChoosingMattersOnlyWhatAdmitReads: a doorway the semaphore lets a
// waiter skip never changes the waiter's decision once its ticket is
// known, wherever that ticket lands; so skipping it loses nothing the
// bakery's wait would have caught.
func TestChoosingMattersOnlyWhatAdmitReads(t *testing.T) {
	why, checked := skippedDoorwayChanges(semaphore.ChoosingMatters)
	if why != "" {
		t.Fatal(why)
	}
	if checked < 100000 {
		t.Fatalf("only %d cases checked", checked)
	}
	t.Logf("%d skipped doorways checked", checked)
}

// TestChoosingMattersCheckCatchesLimits: the same check finds the hole in
// a word on doorways that forgets the reader limit, which counts the
// reader tickets ahead of it.
func TestChoosingMattersCheckCatchesLimits(t *testing.T) {
	conflictsOnly := func(me core.Candidate, e wire.Entry) bool { return wire.Conflicts(me.Mode, e.Mode) }
	why, _ := skippedDoorwayChanges(conflictsOnly)
	if why == "" {
		t.Fatal("a limited reader that skips readers' doorways passed the check")
	}
	t.Log(why)
}
