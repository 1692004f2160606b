package sim

import (
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Int64("seed", 0, "replay this one seed (with -seeds: the first of a range)")
	seedsFlag = flag.Int("seeds", 100, "how many seeds TestSim runs, from seed 1 or from -seed")
	traceFlag = flag.Int("trace-lines", 0, "how many of the last trace lines a failure shows (0: the simulator's default)")
)

// seedRange is the seeds a test runs: 1..count, or just -seed, or count
// seeds from -seed when the count flag is given too.
func seedRange(count int, countFlag string) (int64, int) {
	if *seedFlag == 0 {
		return 1, count
	}
	n := 1
	flag.Visit(func(f *flag.Flag) {
		if f.Name == countFlag {
			n = count
		}
	})
	return *seedFlag, n
}

// runSeeds runs the simulator over the seeds a test was asked for, with
// the options opts gives each seed (on every core: see parallelSeeds),
// and returns the sums and the timing.
func runSeeds(t *testing.T, count int, countFlag string, opts func(seed int64) Options) (total Result, summary string) {
	t.Helper()
	first, n := seedRange(count, countFlag)
	start := time.Now()
	results, err := parallelSeeds(first, n, func(seed int64) (Result, error) {
		o := opts(seed)
		o.Seed, o.TraceLines = seed, *traceFlag
		return Run(o)
	})
	if f := (*Failure)(nil); errors.As(err, &f) && f.Test == "" {
		f.Test = t.Name() // the replay line names the test that failed
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		total.add(res)
	}
	return total, fmt.Sprintf("%d seeds from %d in %v", n, first, time.Since(start).Round(time.Millisecond))
}

// TestSim runs the simulator with faults on over many seeds, or one seed
// given with -seed.
func TestSim(t *testing.T) {
	// Every fourth seed runs the worst clocks the drift allows; every odd
	// one steps messages in batches, as the agent does under load; every
	// third one keeps writes on their way to disk while other names'
	// answers leave, and crashes in that window; two in five run some
	// or all nodes on the doorway of the release before (plainDoorways).
	total, summary := runSeeds(t, *seedsFlag, "seeds", func(seed int64) Options {
		return Options{WorstDrift: seed%4 == 0, Batch: seed%2 == 1, SlowDisk: seed%3 == 2, PlainDoorways: plainDoorways(seed)}
	})
	t.Logf("%s: %d grants, %d failed requests, %d crashes, %d messages, %d operations checked; "+
		"%d pauses, %d leases held on through their agent's crash or restart, %d force-unlocks (%d of holders); "+
		"%d Readies settled a batch of messages; %d crashes lost lazy writes (released tickets back); "+
		"%d lost writes that answers of other names had overtaken, %d that their master's messages of the name had",
		summary, total.Grants, total.Failures, total.Crashes, total.Messages, total.Operations,
		total.Pauses, total.Orphans, total.Forced, total.ForcedHolders, total.Batched, total.LazyLost, total.OvertakenLost,
		total.RequestsOvertakenLost)
	if total.Grants == 0 {
		t.Fatal("no lock was granted: the workload exercised nothing")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 100 &&
		(total.Pauses == 0 || total.Orphans == 0 || total.ForcedHolders == 0) {
		t.Fatal("no pause, orphaned lease or force-unlocked holder: the time and operator faults exercised nothing")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 2 && total.Batched == 0 {
		t.Fatal("no Ready settled more than one message: batches exercised nothing")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 100 && total.LazyLost == 0 {
		t.Fatal("no crash lost a lazy write: answering releases before their tombstone is durable went untested")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 100 && total.OvertakenLost == 0 {
		t.Fatal("no crash lost writes that other names' answers had overtaken: scoped answers went untested")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 100 && total.RequestsOvertakenLost == 0 {
		t.Fatal("no crash lost writes of a name that its master's messages had passed: requests that wait for no write of their name went untested")
	}
	if _, n := seedRange(*seedsFlag, "seeds"); n >= 5 && total.OneRoundDoorways == 0 {
		t.Fatal("no doorway took the number proposed with ENTERING: the one-round doorway went untested")
	}
}

// plainDoorways is how many nodes of seed's run have the doorway of the
// release before: two in five seeds mix the two doorways, one with two
// of the three leaders on the old one, one with every node on it.
func plainDoorways(seed int64) int {
	switch seed % 5 {
	case 1:
		return 2
	case 3:
		return 99
	}
	return 0
}

// TestSimNoFaults: without faults, and with clients patient enough that
// nobody leaves the line, a free name goes to a waiter within a few message
// delays; a longer gap means the core stalls (a lost push, a chooser waited
// on forever). Delays are 1..3 ticks: a hand-over is release → replicas →
// report → grant, and may also wait for the doorways of newcomers that were
// choosing when the waiter looked. Over 300 seeds the worst gap was 39
// ticks; the bound leaves room for that, not for a stall.
func TestSimNoFaults(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		res, err := Run(Options{Seed: seed, NoFaults: true, Patient: true, Names: 2, ClientsPerNode: 2, IdleBound: 48})
		if err != nil {
			t.Fatal(err)
		}
		if res.Grants == 0 {
			t.Fatalf("seed %d: nothing granted", seed)
		}
	}
}

// TestReplayIsDeterministic: the same seed gives the same run.
func TestReplayIsDeterministic(t *testing.T) {
	a, errA := Run(Options{Seed: 7})
	b, errB := Run(Options{Seed: 7})
	if a != b || (errA == nil) != (errB == nil) {
		t.Fatalf("seed 7 ran twice differently: %+v %v / %+v %v", a, errA, b, errB)
	}
	var f *Failure
	if errors.As(errA, &f) {
		t.Fatalf("seed 7 failed: %v", errA)
	}
}

var electedSeeds = flag.Int("elected-seeds", 100, "how many seeds TestSimElected runs")

// TestSimElected runs the lock simulator with elected leaders: crashes and
// partitions change the view, and the lock table is handed over.
func TestSimElected(t *testing.T) {
	// Every odd seed batches. Batches once found (seed 125) a released
	// ticket kept past the settle probe: every handoff added the drift
	// margin again (see TestHandedOverLifetime).
	total, summary := runSeeds(t, *electedSeeds, "elected-seeds", func(seed int64) Options {
		return Options{Elect: true, Batch: seed%2 == 1}
	})
	t.Logf("%s: %d grants, %d crashes (%d of two leaders at once, %d during a handoff), %d views, %d handoffs, %d operations checked",
		summary, total.Grants, total.Crashes, total.LeaderPairCrashes, total.HandoffCrashes, total.Views, total.Handoffs, total.Operations)
	if total.Grants == 0 || total.Handoffs == 0 {
		t.Fatal("no grant or no handoff: the workload exercised nothing")
	}
}

var modesSeeds = flag.Int("modes-seeds", 100, "how many seeds TestSimModes runs")

// TestSimModes runs the simulator with readers, priority writers and
// exclusive lockers on the same names, with faults on; every other seed
// with elected leaders, so modes also cross view changes, and every other
// pair of seeds with messages in batches.
func TestSimModes(t *testing.T) {
	total, summary := runSeeds(t, *modesSeeds, "modes-seeds", func(seed int64) Options {
		return Options{Modes: true, Elect: seed%2 == 0, Batch: seed%4 >= 2, PlainDoorways: plainDoorways(seed)}
	})
	t.Logf("%s: %d grants (%d while another reader held the name, %d on a node's shared read ticket), %d drain yields (%d to plain tickets), %d crashes, %d operations checked",
		summary, total.Grants, total.SharedGrants, total.LocalGrants, total.Drains, total.PlainDrains, total.Crashes, total.Operations)
	if total.SharedGrants == 0 || total.LocalGrants == 0 || total.Drains == 0 {
		t.Fatal("no reader ever shared a name, or no shared read ticket was used or drained: the workload exercised nothing")
	}
	if _, n := seedRange(*modesSeeds, "modes-seeds"); n >= 20 && total.PlainDrains == 0 {
		t.Fatal("no drain yield reached a plain reader's ticket: the check that its client is told exercised nothing")
	}
}

var shareSeeds = flag.Int("share-seeds", 100, "how many seeds TestSimShares runs")

// TestSimShares runs the simulator with a web site's load (Options.
// ReadHeavy): mostly readers, which nodes grant on their shared read
// tickets, and writers of every mode that drain them; faults on, every
// other seed with elected leaders, every third with batches, every fourth
// with machines suspended, every fifth with the worst clocks the drift
// allows, every seventh with machines and operators (wiped and
// rolled-back disks, replaced members).
func TestSimShares(t *testing.T) {
	total, summary := runSeeds(t, *shareSeeds, "share-seeds", func(seed int64) Options {
		// Every seventh: machines and operators too (disks wiped or
		// rolled back under nodes holding shares, replaced members).
		ops := seed%7 == 0
		return Options{Modes: true, ReadHeavy: true, Elect: seed%2 == 0 || ops, Operators: ops, LeaderDiskFaults: ops,
			Batch: seed%3 == 0, WorstDrift: seed%5 == 0, Suspends: seed%4 == 1, PlainDoorways: plainDoorways(seed)}
	})
	t.Logf("%s: %d grants (%d on a node's shared read ticket), %d drain yields, %d crashes, %d operations checked",
		summary, total.Grants, total.LocalGrants, total.Drains, total.Crashes, total.Operations)
	if total.LocalGrants == 0 || total.Drains == 0 {
		t.Fatal("no shared read ticket was used or drained: the workload exercised nothing")
	}
}

var (
	hostileSeeds = flag.Int("hostile-seeds", 100, "how many seeds TestSimHostile runs")
	swarmSeeds   = flag.Int("swarm-seeds", 100, "how many seeds TestSimSwarm runs")
)

// TestSimHostile runs the simulator in its worst world (Options.Hostile):
// a slow link at every moment, either way, phase messages late at one
// leader, reports lost and rewatched, machines suspended. Seeds take
// turns: exclusive locks, semaphore modes with reader limits, a web
// site's load on shared read tickets, and one name with four clients per
// node (masters that already watch the name when another of their
// requests takes its ticket); every third seed with elected leaders,
// every odd one in batches.
func TestSimHostile(t *testing.T) {
	total, summary := runSeeds(t, *hostileSeeds, "hostile-seeds", hostileWorld)
	t.Logf("%s: %d grants (%d limited readers beside another reader, %d on a shared read ticket), %d crashes; "+
		"%d suspends, %d messages on a slow link, %d phase messages late, %d reports lost, %d operations checked",
		summary, total.Grants, total.LimitedGrants, total.LocalGrants, total.Crashes,
		total.Suspends, total.SlowMessages, total.LateMessages, total.LostReports, total.Operations)
	if _, n := seedRange(*hostileSeeds, "hostile-seeds"); n >= 20 &&
		(total.Suspends == 0 || total.SlowMessages == 0 || total.LateMessages == 0 || total.LostReports == 0 || total.LimitedGrants == 0) {
		t.Fatal("no suspend, slow link, late phase message, lost report or limited reader beside another: the hostile world exercised nothing")
	}
}

// TestSimModesLiveness: soft and hard writers, readers with and without
// limits, all patient, no faults: a name never stays free for long while
// someone waits for it. A cycle of waits (a soft writer waiting for a
// later reader, which waits for a hard writer, which waits for the soft
// writer) would hold the name free until a timeout, 300 ticks or more.
// The bound leaves room for a gentle drain's quiet period (up to 40
// ticks) and a hand-over.
func TestSimModesLiveness(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		res, err := Run(Options{Seed: seed, Modes: true, NoFaults: true, Patient: true, IdleBound: modesIdleBound})
		if err != nil {
			t.Fatal(err)
		}
		if res.Grants == 0 {
			t.Fatalf("seed %d: nothing granted", seed)
		}
	}
}

// modesIdleBound is TestSimModesLiveness's bound on a free name's wait.
const modesIdleBound = 120

// TestSimSwarm runs the simulator in swarms (Options.Swarm): each seed
// draws which faults are on and how often, and ambushes (Options.Ambush)
// time faults to activation marks, renewals, confirmations and
// force-unlocks. Seeds take turns as in TestSimHostile: exclusive locks,
// semaphore modes, a web site's load on shared read tickets, and one
// name with four clients per node; every odd one in batches.
func TestSimSwarm(t *testing.T) {
	total, summary := runSeeds(t, *swarmSeeds, "swarm-seeds", func(seed int64) Options {
		o := Options{Swarm: true, Ambush: true, Batch: seed%2 == 1}
		return takeTurns(o, seed)
	})
	t.Logf("%s: %d grants, %d failed requests, %d crashes, %d ambushes, %d force-unlocks (%d of holders), %d operations checked",
		summary, total.Grants, total.Failures, total.Crashes, total.Ambushes, total.Forced, total.ForcedHolders, total.Operations)
	if _, n := seedRange(*swarmSeeds, "swarm-seeds"); n >= 100 && (total.Grants == 0 || total.Ambushes == 0 || total.ForcedHolders == 0) {
		t.Fatal("no grant, ambush or force-unlocked holder: the swarm exercised nothing")
	}
}

// hostileWorld is TestSimHostile's world for a seed: elected leaders on
// every third seed, batches on odd ones, and the workload's turn.
func hostileWorld(seed int64) Options {
	return takeTurns(Options{Hostile: true, Elect: seed%3 == 0, Batch: seed%2 == 1}, seed)
}

// takeTurns gives seeds their turn of workload: exclusive locks, semaphore
// modes, a web site's load on shared read tickets, and one name with four
// clients per node (masters that already watch the name).
func takeTurns(o Options, seed int64) Options {
	switch seed % 4 {
	case 1:
		o.Modes = true
	case 2:
		o.Modes, o.ReadHeavy = true, true
	case 3:
		o.Names, o.ClientsPerNode = 1, 4
	}
	return o
}
