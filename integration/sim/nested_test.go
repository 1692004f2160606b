package sim

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

var nestedSeeds = flag.Int("nested-seeds", 100, "how many seeds TestSimNested runs")

// nestedWorld is TestSimNested's world for a seed: nested names in each
// of the simulator's worlds in turn (TestSim's faults, elected leaders,
// the hostile world, swarms with ambushes, machines and operators,
// suspended machines), and each workload in turn (exclusive locks,
// semaphore modes with reader limits, a web site's load on shared read
// tickets); every odd seed in batches, every fifth with the worst clocks.
func nestedWorld(seed int64) Options {
	o := Options{Nested: true, Batch: seed%2 == 1, WorstDrift: seed%5 == 0}
	switch seed % 6 {
	case 2:
		o.Elect = true
	case 3:
		o.Hostile, o.Elect = true, seed%4 == 3
	case 4:
		o.Swarm, o.Ambush, o.LoseRevocations = true, true, seed%4 == 0
	case 5:
		o.Elect, o.Operators, o.LeaderDiskFaults = true, true, seed%4 == 1
	case 0:
		o.Suspends, o.Elect = true, seed%4 == 0
	}
	switch seed / 6 % 3 {
	case 1:
		o.Modes = true
	case 2:
		o.Modes, o.ReadHeavy = true, true
	}
	return o
}

// TestSimNested runs nested names (Options.Nested: each site a small tree
// of URLs, every acquire naming its parents) under every fault of the
// simulator (nestedWorld): holders of names that nest never conflict, on
// top of every check of the flat runs. -nested-seeds sets how many seeds,
// -seed replays one.
func TestSimNested(t *testing.T) {
	total, summary := runSeeds(t, *nestedSeeds, "nested-seeds", nestedWorld)
	t.Logf("%s: %d grants (%d beside a holder of a name above or below, %d writers beside a writer of another branch), "+
		"%d failed requests, %d crashes, %d force-unlocks (%d of holders), %d views, %d operations checked",
		summary, total.Grants, total.NestedGrants, total.SideBySide, total.Failures, total.Crashes, total.Forced,
		total.ForcedHolders, total.Views, total.Operations)
	_, n := seedRange(*nestedSeeds, "nested-seeds")
	if n >= 100 && (total.NestedGrants == 0 || total.SideBySide == 0 || total.Forced == 0 || total.LocalGrants == 0) {
		t.Fatal("no grant beside a holder above or below, no writers side by side, no force-unlock or no grant " +
			"on a shared read ticket: nesting exercised nothing")
	}
	// About one seed in twenty forces a holder out.
	if n >= 500 && total.ForcedHolders == 0 {
		t.Fatal("no force-unlock took a holder: the operators' faults exercised nothing")
	}
}

// nestedIdleBound is TestSimNestedNoFaults's bound on the ticks a site
// stays free while a client waits for one of its names. A nested request
// takes its names one after the other, a round of the bakery each (three
// parents for the deepest name), and a gentle writer adds its quiet
// period. Over 2,400 seeds the worst was 106 ticks; a cycle of waits
// holds a site free until a patient timeout, 300 ticks or more.
const nestedIdleBound = 160

// nestedLiveness is TestSimNestedNoFaults's world for a seed: no faults,
// patient clients on one site, exclusive locks on odd seeds and every
// mode on even ones. Patient clients still wait when the settle's probes
// begin, and the site's names are probed one after the other: the settle
// is longer.
func nestedLiveness(seed int64) Options {
	return Options{Seed: seed, Nested: true, NoFaults: true, Patient: true, Names: 1, ClientsPerNode: 2 + int(seed%2),
		Modes: seed%2 == 0, IdleBound: nestedIdleBound, SettleTicks: 1200}
}

var nestedLivenessSeeds = flag.Int("nested-liveness-seeds", 60, "how many seeds TestSimNestedNoFaults runs")

// TestSimNestedNoFaults: without faults, with patient clients, no site
// stays free for long while a client waits for one of its names: waits
// across names never close a cycle, since every request takes its names
// outermost first.
func TestSimNestedNoFaults(t *testing.T) {
	total, summary := runSeeds(t, *nestedLivenessSeeds, "nested-liveness-seeds", nestedLiveness)
	t.Logf("%s: %d grants (%d beside a holder of a name above or below), longest free wait %d ticks (bound %d)",
		summary, total.Grants, total.NestedGrants, total.MaxIdleWait, nestedIdleBound)
	if total.Grants == 0 {
		t.Fatal("nothing granted")
	}
}

// everythingConflicts is a wrong table for the nested check: readers
// conflict with readers too.
func everythingConflicts(a, b wire.Mode) bool { return true }

// TestNestedCheckSeesNestedHolders: the nested check, fed a table in which
// readers conflict too, fails on the real core within a few seeds of a
// web site's load, on two readers of different names, one above the
// other: it sees the holders of nested names.
func TestNestedCheckSeesNestedHolders(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		o := nestedWorld(seed)
		o.Modes, o.ReadHeavy, o.conflicts = true, true, everythingConflicts
		s, err := run(withSeed(o, seed))
		var f *Failure
		if !errors.As(err, &f) {
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			continue
		}
		if !strings.Contains(f.What, "nested names held at once") {
			t.Fatalf("seed %d: not the nested check: %v", seed, err)
		}
		if a, b := s.conflicting[0], s.conflicting[1]; a.name != b.name && s.nests(a.name, b.name) {
			t.Logf("caught at seed %d: %s", seed, f.What)
			return
		}
	}
	t.Fatal("the nested check, with readers conflicting, never failed on readers of two names that nest")
}

func withSeed(o Options, seed int64) Options {
	o.Seed = seed
	return o
}

// TestNestedReplayIsDeterministic: the same seed of nested names gives the
// same run.
func TestNestedReplayIsDeterministic(t *testing.T) {
	o := nestedWorld(7)
	o.Seed = 7
	a, errA := Run(o)
	b, errB := Run(o)
	if a != b || (errA == nil) != (errB == nil) || errA != nil {
		t.Fatalf("seed 7 ran twice differently, or failed: %+v %v / %+v %v", a, errA, b, errB)
	}
}
