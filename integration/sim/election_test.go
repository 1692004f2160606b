package sim

import (
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/sluicehq/sluice/election"
)

var electionSeeds = flag.Int("election-seeds", 300, "how many seeds TestElection runs")

// TestElection runs the election simulator over many seeds
// (-election-seeds sets how many, -seed replays one).
func TestElection(t *testing.T) {
	first, count := seedRange(*electionSeeds, "election-seeds")
	start := time.Now()
	var total ElectionResult
	for seed := first; seed < first+int64(count); seed++ {
		res, err := RunElection(ElectionOptions{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		total.ValidViews += res.ValidViews
		total.Crashes += res.Crashes
		total.Continuations += res.Continuations
	}
	t.Logf("%d seeds in %v: %d valid views, %d crashes, %d continuation rounds (counted on live nodes)",
		count, time.Since(start).Round(time.Millisecond), total.ValidViews, total.Crashes, total.Continuations)
	if total.ValidViews < count {
		t.Fatal("fewer valid views than runs: elections did not happen")
	}
}

// TestElectionMutantsAreCaught: broken elections must be caught.
func TestElectionMutantsAreCaught(t *testing.T) {
	for _, m := range []struct {
		name   string
		mutant election.Mutant
	}{
		{"two views per epoch", election.MutantTwoViewsPerEpoch},
		{"previous view from the coordinator's own view", election.MutantPrevFromOwnView},
	} {
		t.Run(m.name, func(t *testing.T) {
			for seed := int64(1); seed <= 500; seed++ {
				_, err := RunElection(ElectionOptions{Seed: seed, Mutant: m.mutant})
				var f *Failure
				if errors.As(err, &f) {
					t.Logf("caught at seed %d: %s", seed, f.What)
					return
				}
			}
			t.Fatal("not caught in 500 seeds")
		})
	}
}
