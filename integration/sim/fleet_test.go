package sim

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/election"

	"github.com/sluicehq/sluice/core/mutation"
)

var (
	fleetSizes = flag.String("fleet-sizes", "50,200,1000", "the fleet sizes TestFleetIdleCostDoesNotGrow runs, "+
		"the smallest first: the others are held to its figures")
	fleetIdle = flag.Duration("fleet-idle", 2*time.Minute, "the simulated idle window of TestFleetIdleCostDoesNotGrow")
)

// Bounds of the fleet check. A fleet's idle cost per agent that is not a
// voter must not grow with the fleet: at every size its figures are at
// most fleetGrowth times the smallest fleet's plus a constant (messages
// per minute: fleetMsgSlack; peers and nodes tracked: fleetPeerSlack),
// and it talks to at most fleetMaxPeers peers. The view change after a
// leader is lost takes at most fleetChangeTicks whatever the size: the
// survivors count the leader dead after DeadTicks of silence, notice at
// their next hello period and elect in one round; and at most the
// smallest fleet's time plus fleetChangeSlack, the spread of when the lost
// leader's last hello came (one hello period) and of the deliveries.
const (
	fleetGrowth      = 1.5
	fleetMsgSlack    = 60 // a message a second
	fleetPeerSlack   = 2
	fleetMaxPeers    = 16 // TestFleet's bound on a real agent's connections
	fleetChangeTicks = fleetDeadTicks + fleetHelloTicks + fleetRetryTicks
	fleetChangeSlack = 2 * fleetHelloTicks
	// fleetReadyTicks bounds the time from the last agent's start to every
	// node ready on one view: two hello periods and a few deliveries.
	fleetReadyTicks = 3 * fleetHelloTicks
)

// fleetBounds says which of the fleet check's bounds large breaks against
// small, the same run on the smallest fleet; none when it keeps them.
func fleetBounds(small, large FleetResult) []string {
	var broken []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			broken = append(broken, fmt.Sprintf("%d agents: ", large.Agents)+fmt.Sprintf(format, args...))
		}
	}
	grows := func(what string, s, l FleetStat, slack float64) {
		check(l.Max <= fleetGrowth*s.Max+slack, "a non-voter's %s is up to %.0f, at %d agents %.0f: more than %.1f times that and %.0f",
			what, l.Max, small.Agents, s.Max, fleetGrowth, slack)
	}
	a, b := small.Idle, large.Idle
	grows("messages sent a minute", a.Sent, b.Sent, fleetMsgSlack)
	grows("messages received a minute", a.Received, b.Received, fleetMsgSlack)
	grows("count of peers", a.Peers, b.Peers, fleetPeerSlack)
	grows("count of peers within 10 s", a.Peers10s, b.Peers10s, fleetPeerSlack)
	grows("count of nodes tracked", a.Known, b.Known, fleetPeerSlack)
	grows("count of lives stored", a.Lives, b.Lives, fleetPeerSlack)
	check(b.Peers.Max <= fleetMaxPeers, "a non-voter exchanged messages with %.0f peers, more than %d", b.Peers.Max, fleetMaxPeers)
	check(large.ReadyTicks-large.LastStart <= fleetReadyTicks, "every node was ready %d ticks after the last start, more than %d",
		large.ReadyTicks-large.LastStart, fleetReadyTicks)
	if large.NewView {
		check(large.ChangeTicks <= fleetChangeTicks, "the leader loss took %d ticks, more than %d", large.ChangeTicks, fleetChangeTicks)
		check(large.ChangeTicks <= small.ChangeTicks+fleetChangeSlack, "the leader loss took %d ticks, at %d agents %d, more than %d ticks longer",
			large.ChangeTicks, small.Agents, small.ChangeTicks, fleetChangeSlack)
		a, b := small.ChangeIdle, large.ChangeIdle
		check(b.Sent.Max <= fleetGrowth*a.Sent.Max+fleetMsgSlack && b.Received.Max <= fleetGrowth*a.Received.Max+fleetMsgSlack,
			"the leader loss cost a non-voter up to %.0f messages sent and %.0f received, at %d agents %.0f and %.0f",
			b.Sent.Max, b.Received.Max, small.Agents, a.Sent.Max, a.Received.Max)
	}
	return broken
}

// sizes parses -fleet-sizes.
func sizes(t *testing.T) []int {
	var out []int
	for f := range strings.SplitSeq(*fleetSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("-fleet-sizes: %q is not a size", f)
		}
		out = append(out, n)
	}
	return out
}

// TestFleetIdleCostDoesNotGrow runs fleets of -fleet-sizes agents (50, 200
// and 1,000) in the simulator, three voters and the others joining, and
// prints each kind of node's idle cost; an agent that is not a voter
// must cost the same in every fleet (fleetBounds). Then the leader that
// coordinates is lost: with three voters no other view can be elected
// and every node must stay ready on the two leaders left; with five
// voters a new view must be ready everywhere within fleetChangeTicks
// whatever the size. A real agent's connections are those peers, plus
// its four gossip ring peers; see integration/TESTING.md for what the
// simulator does not count.
func TestFleetIdleCostDoesNotGrow(t *testing.T) {
	ns := sizes(t)
	seed := max(*seedFlag, 1)
	var runs []FleetOptions
	for _, voters := range []int{3, 5} {
		for _, n := range ns {
			o := FleetOptions{Seed: seed, Voters: voters, Agents: n, IdleTicks: int64(*fleetIdle / FleetTick)}
			if voters == 5 {
				o.IdleTicks = fleetLingerTicks // its figures are for the view change
			}
			runs = append(runs, o)
		}
	}
	start := time.Now()
	res, err := parallelSeeds(0, len(runs), func(i int64) (FleetResult, error) { return RunFleet(runs[i]) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleets of %v agents, %v of idle time, seed %d: %v", ns, *fleetIdle, seed, time.Since(start).Round(time.Millisecond))
	t.Log("idle, three voters; per node, mean/max: election messages a minute, distinct peers (and most within 10 s), " +
		"nodes its election tracks, lives its store records; ready: from the last start to every node ready on one view")
	t.Logf("%6s %6s | %-19s %-10s %-6s %-6s %-7s %-6s | %-16s %-16s %-10s %-10s %-10s", "agents", "ready",
		"non-voter sent/min", "recv/min", "peers", "10s", "tracked", "lives",
		"voter sent/min", "recv/min", "peers", "tracked", "lives")
	for _, r := range res {
		if r.Voters != 3 {
			continue
		}
		t.Logf("%6d %5.2fs | %-19s %-10s %-6s %-6s %-7s %-6s | %-16s %-16s %-10s %-10s %-10s", r.Agents, FleetSeconds(r.ReadyTicks-r.LastStart),
			r.Idle.Sent, r.Idle.Received, r.Idle.Peers, r.Idle.Peers10s, r.Idle.Known, r.Idle.Lives,
			r.Voter.Sent, r.Voter.Received, r.Voter.Peers, r.Voter.Known, r.Voter.Lives)
	}
	t.Log("the leader that coordinates lost: time until every live node is ready on a new valid view (three voters: " +
		"none can be elected, and every node was checked to stay ready that long); messages per node in that time, mean/max")
	t.Logf("%6s %6s %8s %8s | %-14s %-14s | %-19s %-19s", "agents", "voters", "new view", "time",
		"non-voter sent", "recv", "voter sent", "recv")
	for _, r := range res {
		t.Logf("%6d %6d %8v %7.2fs | %-14s %-14s | %-19s %-19s", r.Agents, r.Voters, r.NewView, FleetSeconds(r.ChangeTicks),
			r.ChangeIdle.Sent, r.ChangeIdle.Received, r.ChangeVoter.Sent, r.ChangeVoter.Received)
	}
	for k, r := range res {
		if r.Voters == 5 && !r.NewView {
			t.Errorf("%d agents, five voters: the loss of a leader made no new view", r.Agents)
		}
		small := res[k-k%len(ns)] // the smallest fleet with as many voters
		if r.Voters == 3 {
			// Its window is IdleTicks long; the five voters' is too short
			// to hold them to the idle bounds, only to the change's.
			for _, b := range fleetBounds(small, r) {
				t.Error(b)
			}
			continue
		}
		for _, b := range fleetBounds(small, r) {
			if strings.Contains(b, "leader loss") || strings.Contains(b, "ready") {
				t.Error(b)
			}
		}
	}
}

// TestFleetMutantIsCaught: an agent that is not a voter and greets every
// node it knows of, as a voter does, must break the fleet check.
func TestFleetMutantIsCaught(t *testing.T) {
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	// Small fleets and a short window: the mutant's fleet sends the
	// square of its size in hellos.
	run := func(n int) FleetResult {
		r, err := RunFleet(FleetOptions{Seed: 1, Agents: n, IdleTicks: fleetLingerTicks, KeepLeaders: true,
			Mutant: election.MutantNonVoterGreetsAll})
		if err != nil {
			t.Fatalf("%d agents: %v", n, err)
		}
		return r
	}
	small, large := run(50), run(200)
	broken := fleetBounds(small, large)
	if len(broken) == 0 {
		t.Fatalf("the fleet check did not catch non-voters that greet every node: at 200 agents a non-voter sends %s a minute, at 50 %s",
			large.Idle.Sent, small.Idle.Sent)
	}
	for _, b := range broken {
		t.Logf("caught: %s", b)
	}
}
