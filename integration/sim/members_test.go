package sim

import (
	"flag"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/election"

	"github.com/sluicehq/sluice/core/mutation"
)

var (
	membersSeeds        = flag.Int("members-seeds", 100, "how many seeds TestSimMembers runs")
	membersLeaderFaults = flag.Bool("members-leader-faults", false, "TestSimMembers also wipes or rolls back the disks of leaders, often")
)

// TestSimMembers runs the lock simulator with elected leaders, machines
// and operators: disks wiped or rolled back, stale nodes stopped for
// good, dead machines, replacements by the runbook (remove the old
// member, add the new), and nodes added past the bootstrap members. The
// lock invariants hold across all of it, and after the faults stop every
// name is granted again. -members-leader-faults adds frequent disk faults
// of leaders.
func TestSimMembers(t *testing.T) {
	total, summary := runSeeds(t, *membersSeeds, "members-seeds", func(int64) Options {
		// Copies of the newest life restored are in this world: the age of
		// the whole store, told by hellos, refuses them (4,000 seeds, 225
		// such rollbacks, passed). The election simulator leaves them out
		// (its store is the election's record alone).
		return Options{Elect: true, Operators: true, LeaderDiskFaults: *membersLeaderFaults,
			LeaveOut: leftOut(t) &^ GapNewestLifeRollbacks}
	})
	t.Logf("%s: %d grants, %d crashes, %d views, %d handoffs, %d operations checked; "+
		"%d wipes, %d rollbacks (%d to a copy of the same life), %d stale nodes stopped, %d dead machines, "+
		"%d disk faults unnoticed, %d replacements, %d extra nodes, %d changes committed, %d refused or lost",
		summary, total.Grants, total.Crashes, total.Views, total.Handoffs, total.Operations,
		total.Wipes, total.Rollbacks, total.SameLife, total.Stale, total.DeadMachines,
		total.Unnoticed, total.Replacements, total.ExtraNodes, total.ChangesCommitted, total.ChangesFailed)
	if total.Grants == 0 || total.Stale == 0 || total.Replacements == 0 || total.ChangesCommitted == 0 {
		t.Fatal("no grant, stale node, replacement or committed change: the workload exercised nothing")
	}
}

// TestCheckInMutantIsCaught: nodes that vote and serve at once after a
// start, whatever their disk lost, must break a lock invariant (with the
// frequent disk faults of leaders, where the harm is quickest to show).
func TestCheckInMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	requireCaught(t, "nodes serving without a check-in", Options{Elect: true, Operators: true, LeaderDiskFaults: true,
		ElectionMutant: election.MutantNoCheckIn}, 84)
}

// TestStoreAgeMutantIsCaught: members that ignore the age of a store told
// by hellos let a leader restored from a copy of its running life serve
// a table that lost tickets.
func TestStoreAgeMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	// Swarms (faults drawn per seed) reach the rolled-back leader with the
	// lost tickets still wanted: the plain members world no longer does
	// within the bound since masters release their strays at once.
	requireCaught(t, "ages of stores ignored", Options{Elect: true, Operators: true, LeaderDiskFaults: true, Swarm: true,
		ElectionMutant: election.MutantNoWriteMarks, LeaveOut: KnownGaps &^ GapNewestLifeRollbacks,
		// Tickets at a bare quorum of leaders (see TestMutantsAreCaught):
		// a third copy hides most rolled-back stores' losses.
		Mutant: core.MutantNumberlessChoosing}, 305)
}
