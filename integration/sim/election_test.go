package sim

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/election"

	"github.com/sluicehq/sluice/core/mutation"
)

var (
	electionSeeds = flag.Int("election-seeds", 300, "how many seeds TestElection runs")
	electionTrace = flag.Bool("election-trace", false, "log every trace line of the election simulator (with -seed)")
	electionGaps  = flag.String("election-gaps", "", "the known gaps of the election to model (they fail): "+
		"all, or rollbacks (see Gap)")
)

// leftOut are the known gaps that the election tests leave out of the
// world: all but those -election-gaps names. Once the election closes a
// gap, drop it from KnownGaps.
func leftOut(t *testing.T) Gap {
	out := KnownGaps
	for _, name := range strings.FieldsFunc(*electionGaps, func(r rune) bool { return r == ',' }) {
		i := slices.IndexFunc(gapNames, func(g gapName) bool { return g.name == name })
		switch {
		case name == "all":
			out = 0
		case i < 0:
			t.Fatalf("-election-gaps: unknown gap %q", name)
		default:
			out &^= gapNames[i].g
		}
	}
	return out
}

// TestElection runs the election simulator over many seeds
// (-election-seeds sets how many, -seed replays one).
func TestElection(t *testing.T) {
	first, count := seedRange(*electionSeeds, "election-seeds")
	start := time.Now()
	gaps := leftOut(t)
	var total ElectionResult
	results, err := parallelSeeds(first, count, func(seed int64) (ElectionResult, error) {
		o := ElectionOptions{Seed: seed, LeaveOut: gaps}
		if *electionTrace {
			o.Tracef = func(line string) { t.Log(line) }
		}
		return RunElection(o)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		total.Add(res)
	}
	t.Logf("%d seeds in %v: %d valid views, %d crashes, %d continuation rounds; "+
		"%d joiners, %d membership changes committed (%d added, %d removed; %d refused, %d lost); "+
		"%d wipes, %d rollbacks (%d to a copy of the newest life that checked in), %d stale lives, %d replaced by a new identity; "+
		"%d foreign messages refused, %d runs with a stray one-node cluster (%d joiners captured); "+
		"%d slow-link episodes, %d runs settling on slow links; %d lives checked in on the operator's word; "+
		"liveness of the main cluster not checked in %d runs (too few healthy members); "+
		"%d rises of the cluster's codec, %d votes or views below it refused, %d starts of the release before after it rose",
		count, time.Since(start).Round(time.Millisecond), total.ValidViews, total.Crashes, total.Continuations,
		total.Joiners, total.Changes, total.Added, total.Removed, total.ChangesRefused, total.ChangesLost,
		total.Wipes, total.Rollbacks, total.NewestLife, total.Stale, total.Replaced,
		total.Foreign, total.Stray, total.Captured, total.SlowLinks, total.SlowSettle, total.Vouched, total.NoQuorum,
		total.LevelRises, total.BelowLevel, total.OldAfterLevel)
	if total.ValidViews < count {
		t.Fatal("fewer valid views than runs: elections did not happen")
	}
	if count >= 100 && (total.Changes == 0 || total.Stale == 0 || total.Replaced == 0 || total.Foreign == 0 || total.LevelRises == 0 || total.OldAfterLevel == 0) {
		t.Fatal("the world did not happen: no membership change, stale life, replacement, foreign message, rise of the codec or release before after it")
	}
}

// TestElectionMutantsAreCaught: broken elections must be caught.
func TestElectionMutantsAreCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	const bound = 500
	for _, m := range []struct {
		name   string
		mutant election.Mutant
	}{
		{"two views per epoch", election.MutantTwoViewsPerEpoch},
		{"previous view from the coordinator's own view", election.MutantPrevFromOwnView},
		{"votes of non-members counted", election.MutantNonMemberVotes},
		{"no check-in after a start", election.MutantNoCheckIn},
		{"membership change without the old quorum", election.MutantNoOldQuorum},
		// The ages hellos tell catch most of these stores too: both checks
		// off (TestMembershipRules pins the lives check alone).
		{"a store that forgot a life passes once its incarnation climbed, ages ignored",
			election.MutantClimbingLives | election.MutantNoWriteMarks},
		{"the cluster's codec falls", election.MutantLevelBackwards},
	} {
		t.Run(m.name, func(t *testing.T) {
			for seed := int64(1); seed <= bound; seed++ {
				_, err := RunElection(ElectionOptions{Seed: seed, Mutant: m.mutant, LeaveOut: KnownGaps})
				var f *Failure
				if errors.As(err, &f) {
					t.Logf("caught at seed %d: %s", seed, f.What)
					return
				}
			}
			t.Fatalf("not caught in %d seeds", bound)
		})
	}
}

// TestElectionKnownGaps: each known gap of the election, modelled alone,
// must make the simulator fail; once the election closes one, this test
// says so, and the gap leaves KnownGaps (and TestElection models it).
func TestElectionKnownGaps(t *testing.T) {
	for _, g := range gapNames {
		t.Run(g.name, func(t *testing.T) {
			first, bound := int64(1), int64(500)
			for seed := first; seed <= bound; seed++ {
				_, err := RunElection(ElectionOptions{Seed: seed, LeaveOut: KnownGaps &^ g.g})
				var f *Failure
				if errors.As(err, &f) {
					t.Logf("found at seed %d: %s", seed, f.What)
					return
				}
			}
			t.Fatalf("gap %s not found in seeds %d to %d: if the election closed it, drop it from KnownGaps", g.name, first, bound)
		})
	}
}

// TestWriteMarksMutantIsCaught: with stores rolled back to copies of their
// newest life in the world (a known gap, narrowed by the ages hellos
// tell), a member that ignores those ages lets through a restored store
// that the election refuses: at the seed where the mutant is caught, the
// real election passes.
func TestWriteMarksMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	world := KnownGaps &^ GapNewestLifeRollbacks
	for seed := int64(1); seed <= 500; seed++ {
		_, err := RunElection(ElectionOptions{Seed: seed, Mutant: election.MutantNoWriteMarks, LeaveOut: world})
		var f *Failure
		if !errors.As(err, &f) {
			continue
		}
		if _, err := RunElection(ElectionOptions{Seed: seed, LeaveOut: world}); err != nil {
			continue // the gap the ages leave: no evidence either way
		}
		t.Logf("caught at seed %d, where the election passes: %s", seed, f.What)
		return
	}
	t.Fatal("ignoring the ages of stores was not caught in 500 seeds")
}
