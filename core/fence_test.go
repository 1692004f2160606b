package core_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/mutation"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// TestScenariosCatchMutants replays scenarios on cores broken on purpose:
// each scenario's checked-in expectation holds for the real core and is
// broken by its mutant, which grants once more (two holders) unless said.
//   - handoff_fences_old_leaders.txt without fencing: the master still in
//     the old view is granted too.
//   - holder_restart_keeps_lease.txt dropping a restarted node's former
//     tickets: node 5's try is granted while node 4's client holds.
//   - force_release_waiter_lost_revoke.txt without the own-ticket check:
//     the force-released waiter is granted beside the next one.
//   - force_release_waiter_unmarked.txt without the own-ticket check, or
//     with it but without the confirmation round: the waiter no quorum
//     marked held is granted after an unlock that found it waiting.
//   - force_release_waiter_stale_reports.txt and
//     force_release_races_grant.txt with leaders that say a ticket is
//     held without marking it: the unlock answers that it found a waiter
//     (checked on its answer), and the waiter is granted all the same.
//   - renew_delayed.txt with the old renewal arithmetic: the TTL outlives
//     the master's end (checked on the printed ttl instead of grants).
//   - forgotten_names_keep_fencing.txt forgetting idle names' marks: the
//     name's next token is 1 again, not 3 (checked on the token).
//   - release_survives_handoff.txt with tombstones in memory only: the
//     released ticket comes back, and the next try is not granted (one
//     grant less: a name blocked with no holder).
//   - report_deltas.txt applying a report's changes to whatever report the
//     master has: it never watches again for the whole table, and its view
//     of the name lacks what the lost report said (the simulator finds no
//     grant this breaks: every decision rests on a whole report first,
//     and a request missing from it is later than the waiter).
//   - shared_reads.txt with a node that keeps granting local readers on
//     its shared read ticket after a drain yield: the page view during
//     the drain is granted, not refused as draining.
//   - drain_priority.txt with blocked waiters never asked again: the
//     writer and the readers after it wait for ever (grants missing, and
//     the harness prints the decisions the check of skipped waiters
//     found).
//   - lost_add_ticket_exit.txt with a replica that keeps a choosing flag
//     without a number after EXITING: its table shows the granted request
//     as choosing, as the operators' view did for seconds.
//   - try_writer_shared.txt with a writer's try that drains shared read
//     tickets: the page views while it looks are refused as draining.
//   - force_release_durable_tomb.txt with a force-unlock's tombstone
//     written lazily: a leader's crash brings the forced waiter's ticket
//     back, and the waiter is confirmed and granted beside the next one.
//   - drain_soft_hard_reader.txt with a soft writer that keeps its place
//     in line before a hard writer: the three drains wait on each other,
//     and only the first reader is granted (grants missing).
//   - limit_counts_shares.txt with a limited reader that does not ask the
//     shared read ticket ahead of it to go: it waits for the share's
//     linger after the page views end (its grant is missing).
//   - soft_writer_stale_reports.txt deciding on reports older than the
//     request's current watch: the activated soft writer is granted on
//     reports from before a reader that holds (checked on its status).
//   - restart_announcement_lost.txt with replicas that learn of a restart
//     only from its announcement: the waiter waits for the dead life's
//     doorway until its deadline (its grant is missing).
//   - renew_stale_ack.txt counting a late answer to an earlier renewal
//     for the current one: node 4's lease runs on past the leaders' copies
//     (its end is missing) while node 5 is granted.
//   - soft_writer_later_reader.txt with an activated soft writer that
//     skips doorways newer than its first look: it holds beside a reader
//     that decided before its mark arrived (checked on its status).
//   - stray_enter_released.txt with a master that leaves its forgotten
//     request's stray choosing flag alone: its next request waits for
//     the flag's deadline (its grant is missing).
//   - limit_waits_for_choosing_share.txt with a master that does not wait
//     for a choosing flag below its request: the limited reader holds
//     beside the share's page view (checked on its status).
//   - rewatch_report_without_ticket.txt with a master that decides on a
//     report echoing its ADD_TICKET's watch that lacks its ticket: X holds
//     with token 3, then Z with token 2 (checked on both statuses).
//   - drain_memo.txt with a drain memo that never ends: the page view
//     after the memo's ticks is refused (its shared grant is missing).
//   - force_release_late_doorway.txt with a doorway that goes on for as
//     long as its request may wait (and forced tombstones as long as the
//     operator's node asked): the forced waiter's late ENTERING is taken
//     after the tombstones went, and the id the operator was told was
//     dropped holds a ticket and is granted.
//   - drain_priority.txt with leaders that ask only shares to yield: the
//     page views on plain tickets are never told the site drains
//     (checked on their statuses).
func TestScenariosCatchMutants(t *testing.T) {
	for _, c := range []struct {
		file   string
		mutant core.Mutant
		grants int    // how often the real core prints count
		count  string // what the mutant prints once more, or once less

	}{
		{"handoff_fences_old_leaders.txt", core.MutantNoFence, 1, ": granted "},
		{"holder_restart_keeps_lease.txt", core.MutantDropFormerTickets, 0, "granted 5.1.1 a "},
		{"force_release_waiter_lost_revoke.txt", core.MutantNoOwnTicket, 2, ": granted "},
		{"renew_delayed.txt", core.MutantRenewFromDecision, 2, "ttl=10\n"},
		{"release_survives_handoff.txt", core.MutantMemoryTombs, 2, ": granted "},
		{"forgotten_names_keep_fencing.txt", core.MutantForgetMarks, 1, "token=3 "},
		{"force_release_waiter_unmarked.txt", core.MutantNoOwnTicket, 0, "granted 5.1.1 "},
		{"force_release_waiter_unmarked.txt", core.MutantUnconfirmedGrant, 0, "granted 5.1.1 "},
		{"force_release_waiter_stale_reports.txt", core.MutantClearNotHeld, 1, "forced=holder"},
		{"force_release_races_grant.txt", core.MutantClearNotHeld, 1, "forced=holder"},
		{"report_deltas.txt", core.MutantDeltaAnyBase, 1, "5->1 watch a"},
		{"drain_priority.txt", core.MutantSleepBlocked, 5, ": granted "},
		{"shared_reads.txt", core.MutantAdmitAfterYield, 2, "error=draining"},
		{"drain_memo.txt", core.MutantStuckDrainMemo, 1, " shared\n"},
		{"gentle_shared.txt", core.MutantShareIdleFromGrant, 2, "gentle waiting"},
		{"lost_add_ticket_exit.txt", core.MutantNumberlessChoosing, 1, "4.1.1 choosing ticket=0"},
		{"try_writer_shared.txt", core.MutantTryDrains, 0, "error=draining"},
		{"force_release_durable_tomb.txt", core.MutantLazyForcedTomb, 2, ": granted "},
		{"soft_writer_later_reader.txt", core.MutantSoftIgnoresLaterDoorways, 1, "read-write held"},
		{"drain_soft_hard_reader.txt", core.MutantSoftKeepsPlace, 4, ": granted "},
		{"limit_counts_restored_shares.txt", core.MutantRestoreSharesAsReaders, 3, ": granted "},
		{"limit_counts_handed_over_shares.txt", core.MutantRestoreSharesAsReaders, 3, ": granted "},
		{"limit_counts_shares.txt", core.MutantLimitIgnoresShares, 1, "granted 5.1.2 "},
		{"renew_stale_ack.txt", core.MutantRenewAnyAck, 1, "unlocked 4.1.1 "},
		{"restart_announcement_lost.txt", core.MutantNoRestartFromRequests, 2, ": granted "},
		{"soft_writer_stale_reports.txt", core.MutantStaleReports, 1, "read-write waiting"},
		{"stray_enter_released.txt", core.MutantKeepStrays, 2, ": granted "},
		{"limit_waits_for_choosing_share.txt", core.MutantIgnoreChoosing, 1, "read-only held ticket=2"},
		{"rewatch_report_without_ticket.txt", core.MutantUncheckedTicketReports, 1, "exclusive held"},
		{"enter_ticket_below_mark.txt", core.MutantEnterTicketUnchecked, 0, "granted 4.1.2 "},
		{"report_waits_for_turn.txt", core.MutantHoldBackAny, 1, "granted 5.1.1 "},
		{"reader_limit.txt", core.MutantHoldBackForReaders, 1, "granted 2.1.1 "},
		{"force_release_late_doorway.txt", core.MutantUnboundedDoorway, 0, "5.1.2 ticket ticket="},
		{"force_release_doorway_bound_keeps_tomb.txt", core.MutantTombForATry, 0, "granted 5.1.2 a token=2 "},
		{"drain_priority.txt", core.MutantPlainReaderUntold, 2, "asked=drain"},
		{"restored_doorway_ticket_kept.txt", core.MutantHoldsUnknownAsGone, 0, "granted 5.1.1 "},
		{"stray_release_lost.txt", core.MutantStrayReleaseOnce, 1, "granted 5.1.1 "},
		{"restored_drop_keeps_tomb.txt", core.MutantHoldsDropUntold, 1, "forced=holder"},
	} {
		for _, mutant := range []core.Mutant{0, c.mutant} {
			if mutant != 0 && !mutation.Need(t) {
				continue
			}
			out := replay(t, c.file, &harness{mutant: mutant})
			got := strings.Count(out, c.count)
			if (got == c.grants) != (mutant == 0) {
				t.Errorf("%s, mutant %d: %d of %q, the real core has %d:\n%s", c.file, mutant, got, c.count, c.grants, out)
			}
		}
	}
}

// shareCountsAsOne is the reader limit's old policy: a node's shared read
// ticket counts as one reader, whatever its page views.
func shareCountsAsOne(me core.Candidate, others []wire.Entry) core.Decision {
	if me.Mode == wire.ModeReadOnly && me.Limit > 0 {
		others = slices.Clone(others)
		for i := range others {
			if others[i].Mode == wire.ModeReadOnly {
				others[i].Active = false
			}
		}
	}
	return semaphore.Admit(me, others)
}

// choosingConflictsOnly is a broken word on doorways: a limited reader
// skips the readers still choosing below it, whose tickets its limit
// counts.
func choosingConflictsOnly(me core.Candidate, choosing wire.Entry) bool {
	return wire.Conflicts(me.Mode, choosing.Mode)
}

// TestScenariosCatchPolicyMutants replays scenarios on broken admission
// policies, as TestScenariosCatchMutants does on broken cores.
//   - limit_counts_shares.txt with a shared read ticket counted as one
//     reader: the limited reader's try is granted beside three page views.
//   - limit_waits_for_choosing_share.txt with a limited reader that skips
//     readers' doorways (ChoosingMatters): it is granted beside the share's
//     page view.
func TestScenariosCatchPolicyMutants(t *testing.T) {
	for _, c := range []struct {
		file     string
		policy   core.Admit
		choosing core.ChoosingMatters
		grants   int
		count    string
	}{
		{"limit_counts_shares.txt", shareCountsAsOne, nil, 0, "granted 5.1.1 "},
		{"limit_waits_for_choosing_share.txt", nil, choosingConflictsOnly, 1, "read-only held ticket=2"},
	} {
		for _, broken := range []bool{false, true} {
			h := &harness{}
			if broken {
				h.policy, h.choosing = c.policy, c.choosing
			}
			got := strings.Count(replay(t, c.file, h), c.count)
			if (got == c.grants) != !broken {
				t.Errorf("%s, broken policy %v: %d of %q, the real policy gives %d", c.file, broken, got, c.count, c.grants)
			}
		}
	}
}

// replay runs a scenario's commands on h and returns what they printed.
func replay(t *testing.T, file string, h *harness) string {
	t.Helper()
	script, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, block := range strings.Split(string(script), "\n\n") {
		line := ""
		for _, l := range strings.Split(block, "\n") {
			if l != "" && !strings.HasPrefix(l, "#") && l != "----" {
				line = l
				break
			}
		}
		if line == "" {
			continue
		}
		cmd, args, err := datadriven.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(h.run(t, &datadriven.TestData{Cmd: cmd, CmdArgs: args}))
	}
	return out.String()
}

// TestChoosingRulesBackEachOther: in choosing_late_add_ticket.txt the
// waiter X sees the earlier request Z only as a choosing flag without a
// number. Two rules keep X out: it waits for a doorway that was there
// when it first looked, and a grant needs its own ticket in a quorum of
// reports made after the leader took it (which any ticket below X's that
// a quorum holds is also in, for a leader refuses numbers not above its
// mark). Here each alone suffices, so breaking one (MutantIgnoreChoosing,
// or MutantUncheckedTicketReports, which only lets reports without X's
// ticket count as fresh) grants nothing more; breaking both grants Z and
// X at once. Elsewhere each stands alone (TestScenariosCatchMutants):
// the choosing wait in limit_waits_for_choosing_share.txt, the ticket
// check in rewatch_report_without_ticket.txt.
func TestChoosingRulesBackEachOther(t *testing.T) {
	for _, c := range []struct {
		mutant core.Mutant
		grants int
	}{
		{0, 1},
		{core.MutantIgnoreChoosing, 1},
		{core.MutantUncheckedTicketReports, 1},
		{core.MutantNoOwnTicket, 1},
		{core.MutantIgnoreChoosing | core.MutantNoOwnTicket, 2},
	} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		out := replay(t, "choosing_late_add_ticket.txt", &harness{mutant: c.mutant})
		if got := strings.Count(out, ": granted "); got != c.grants {
			t.Errorf("mutant %d: %d grants, want %d:\n%s", c.mutant, got, c.grants, out)
		}
	}
}
