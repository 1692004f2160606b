package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"

	"github.com/sluicehq/sluice/core/mutation"
)

// nestedCheckFailure is the text of the nested check's failure.
const nestedCheckFailure = "nested names held at once"

// TestNestedParentTicketsMutantIsCaught: a nested request that takes no
// ticket on its parents (MutantNoParentTickets) holds its name beside a
// writer of a name above it, or a writer of its name beside a holder
// below. The nested check must catch it, and it alone: every other check
// looks at one name at a time, and the request still takes its own name's
// ticket, so at the seed that catches it the same run without the nested
// check (a table in which nothing conflicts) passes.
func TestNestedParentTicketsMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	const caught = 1 // the seed that caught it when last searched from 1 (firstSeed)
	for seed := firstSeed(caught); seed <= mutationBound; seed++ {
		o := withSeed(nestedWorld(seed), seed)
		o.Mutant = core.MutantNoParentTickets
		_, err := Run(o)
		var f *Failure
		if !errors.As(err, &f) {
			if err != nil {
				t.Fatalf("seed %d: unexpected error %v", seed, err)
			}
			continue
		}
		if !strings.Contains(f.What, nestedCheckFailure) {
			t.Logf("seed %d: another check first: %s", seed, f.What)
			continue
		}
		o.conflicts = func(a, b wire.Mode) bool { return false }
		if _, err := Run(o); err != nil {
			t.Fatalf("seed %d: without the nested check, another check fails too, or first: %v", seed, err)
		}
		t.Logf("caught at seed %d, by the nested check alone: %s", seed, f.What)
		return
	}
	t.Fatalf("the nested check did not catch requests without parent tickets in %d seeds", mutationBound)
}

// TestNestedOrderMutantIsCaught: parents taken innermost first
// (MutantParentsInnermostFirst) close a cycle of waits across names: a
// reader of /shop holds its intent on the root and waits for /shop behind
// an intent of a writer of /shop/cart, which holds /shop and waits for
// the root behind a drain of the root, which waits for the reader's
// intent. Nothing breaks it but a timeout, so with patient clients and no
// faults the site stays free far past the bound TestSimNestedNoFaults
// holds the real core to; at that seed the real core keeps the bound.
func TestNestedOrderMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	const caught = 1 // the seed that caught it when last searched from 1 (firstSeed)
	for seed := firstSeed(caught); seed <= mutationBound; seed++ {
		o := nestedLiveness(seed)
		o.Mutant = core.MutantParentsInnermostFirst
		_, err := Run(o)
		var f *Failure
		if errors.As(err, &f) && strings.Contains(f.What, "stayed free") {
			o.Mutant = 0
			if _, err := Run(o); err != nil {
				t.Fatalf("seed %d: the real core fails too: %v", seed, err)
			}
			t.Logf("caught at seed %d: %s", seed, f.What)
			return
		} else if err != nil {
			t.Fatalf("seed %d: not the stall: %v", seed, err)
		}
	}
	t.Fatalf("the simulator did not catch the stall in %d seeds", mutationBound)
}
