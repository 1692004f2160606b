package sim

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/core"
)

// mutationBound is how many seeds a broken core may survive before the
// mutation test declares the simulator blind to it.
const mutationBound = 300

// TestMutantsAreCaught proves the simulator is worth its seeds: each
// deliberately broken core must fail an invariant within mutationBound seeds.
func TestMutantsAreCaught(t *testing.T) {
	for _, m := range []struct {
		name   string
		mutant core.Mutant
	}{
		{"quorum of one", core.MutantQuorumOfOne},
		{"ignores choosing flags", core.MutantIgnoreChoosing},
		{"acks tickets it never persists", core.MutantNotDurable},
		{"GET_MAX before the ENTERING quorum", core.MutantMergedDoorway},
		{"shared ticket numbers", core.MutantSharedTickets},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for seed := int64(1); seed <= mutationBound; seed++ {
				_, err := Run(Options{Seed: seed, Mutant: m.mutant})
				var f *Failure
				if errors.As(err, &f) {
					t.Logf("caught at seed %d: %s", seed, f.What)
					return
				}
				if err != nil {
					t.Fatalf("seed %d: unexpected error %v", seed, err)
				}
			}
			t.Fatalf("the simulator did not catch the mutant in %d seeds", mutationBound)
		})
	}
}
