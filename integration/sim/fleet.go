package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// The daemon's timing (semaphore/daemon/node.go: DefaultTick, helloTicks,
// deadTicks, electionRetry), copied because this package may not import
// the daemon (it would bring libp2p): a fleet run ticks as the agents do,
// so that its ticks convert to their seconds.
const (
	// FleetTick is the length of a tick of the fleet run: the daemon's
	// default tick.
	FleetTick        = 10 * time.Millisecond
	fleetHelloTicks  = 20  // hellos every 200 ms
	fleetDeadTicks   = 150 // a node silent for 1.5 s counts as down
	fleetRetryTicks  = 100 // a stuck election round is retried after a second
	fleetMinuteTicks = int64(time.Minute / FleetTick)
	// fleetLingerTicks is how long the p2p layer keeps a dialed
	// connection after its last use (10 s): the peers a node exchanged
	// messages with within that long are those it holds connections to,
	// beyond the voters and its four gossip ring peers.
	fleetLingerTicks = int64(10 * time.Second / FleetTick)
)

// FleetOptions configure one fleet run. Zero values mean the defaults.
type FleetOptions struct {
	Seed int64
	// Voters are the bootstrap members (default 3, as TestFleet's).
	Voters int
	// Agents is the size of the fleet, voters included (default 50); the
	// others join by one address, a voter's or an earlier agent's.
	Agents int
	// JoinTicks is how long the agents that are not voters take to start,
	// each at a random tick (default 1000: ten seconds).
	JoinTicks int64
	// IdleTicks is the idle window in which the costs are counted, once
	// every node is ready on one view (default two minutes).
	IdleTicks int64
	// ReadyTicks bounds the wait for every node to be ready on one view,
	// from the last start, and, after the leader is lost, on a new one
	// (default 6000: a minute; a run that takes longer fails).
	ReadyTicks int64
	// KeepLeaders leaves the leader loss out: the run ends with the idle
	// window.
	KeepLeaders bool
	// Mutant breaks the election on purpose (mutation tests only).
	Mutant election.Mutant
}

// FleetStat is a figure of one kind of node: its mean and its maximum
// over the nodes of that kind.
type FleetStat struct{ Mean, Max float64 }

func (s FleetStat) String() string { return fmt.Sprintf("%.1f/%.0f", s.Mean, s.Max) }

// FleetFigures are the per-node figures of one kind of node (voters, or
// the others) over a window.
type FleetFigures struct {
	Nodes int
	// Sent and Received: election messages per minute.
	Sent, Received FleetStat
	// Peers: distinct nodes it exchanged messages with (either way) in the
	// window; Peers10s: the most within any ten seconds of it, which is
	// what decides its dialed connections (see fleetLingerTicks).
	Peers, Peers10s FleetStat
	// Known: nodes its election tracks (election.Status's members: those
	// heard from, and the voters); Lives: nodes whose lives its store
	// records (Persisted.Lives). Both are its state that could grow with
	// the fleet. The mesh's roster (AddPeer) is not counted: every node
	// holds one, as the p2p layer's member table does.
	Known, Lives FleetStat
}

// FleetResult sums up a fleet run that passed.
type FleetResult struct {
	Agents, Voters int
	// ReadyTicks: from the first start until every node was ready on one
	// view; LastStart: the tick the last agent started.
	ReadyTicks, LastStart int64
	// Epoch of the view the fleet settled on.
	Epoch uint64
	// Idle are the figures of the idle window (IdleTicks long).
	IdleTicks   int64
	Voter, Idle FleetFigures
	// The leader loss: the leader that coordinates crashes. NewView says
	// whether a new view was needed and possible (with three members all
	// of them lead, and the two left answer for the view they have: no
	// other view can be elected); ChangeTicks is the time from the crash
	// until every live node is ready on a new valid view without it (or,
	// without NewView, how long every node was checked to stay ready).
	// ChangeVoter and ChangeIdle count the messages of that time, per
	// node, not per minute.
	Lost                    wire.NodeID
	NewView                 bool
	ChangeTicks             int64
	ChangeEpoch             uint64
	ChangeVoter, ChangeIdle FleetFigures
	// Messages: every message sent in the run.
	Messages int
}

// FleetSeconds converts ticks of a fleet run to seconds.
func FleetSeconds(ticks int64) float64 { return (time.Duration(ticks) * FleetTick).Seconds() }

type fleetNode struct {
	id      wire.NodeID
	voter   bool
	e       *election.Election // nil before the start and after a crash
	startAt int64
	join    wire.NodeID // the address it was told (0: a voter)
	epoch   uint64      // the newest view handed out to it
	lives   int         // its store's Lives
	// counting, in the current window
	sent, recv int64
	last       map[wire.NodeID]int64 // peer -> last exchange in the window
	peers10s   int                   // most peers within fleetLingerTicks
}

type fleetSim struct {
	o     FleetOptions
	rng   *rand.Rand
	tick  int64
	nodes []*fleetNode
	boot  []wire.NodeID
	net   [8][]wire.Message // by delivery tick modulo 8 (delays are 1 to 3)
	count bool              // the window is counting
	// valid views, by epoch; accepts: who persisted each view as accepted
	valid   map[uint64]wire.View
	top     uint64
	accepts map[string]map[wire.NodeID]bool
	msgs    int
	fail    error
}

// RunFleet runs a fleet without faults: Voters bootstrap members and the
// others joining one by one with --join, each told one address (a voter's,
// or an earlier agent's); the mesh tells every node of every other, as
// the p2p layer's announcements do. Once every node is ready on one view
// it counts, in an idle window, the messages each node sends and receives
// and the peers it exchanges them with; then the leader that coordinates
// crashes, and it measures how long every live node takes to be ready on
// a new valid view, and what that cost. Views are judged valid from what
// the members persisted (election.Valid), and a node handed a view that
// is not valid fails the run, as a node not ready in time does.
func RunFleet(o FleetOptions) (FleetResult, error) {
	o.Voters = cmpOr(o.Voters, 3)
	o.Agents = max(cmpOr(o.Agents, 50), o.Voters)
	o.JoinTicks = cmpOr(o.JoinTicks, 1000)
	o.IdleTicks = cmpOr(o.IdleTicks, 2*fleetMinuteTicks)
	o.ReadyTicks = cmpOr(o.ReadyTicks, fleetMinuteTicks)
	s := &fleetSim{o: o, rng: rand.New(rand.NewPCG(uint64(o.Seed), 0xf1ee7)), valid: map[uint64]wire.View{},
		accepts: map[string]map[wire.NodeID]bool{}}
	res := FleetResult{Agents: o.Agents, Voters: o.Voters, IdleTicks: o.IdleTicks}
	// The agents that are not voters start in the order of their ids, at
	// random ticks: an agent told an earlier one's address finds it up.
	starts := make([]int64, o.Agents-o.Voters)
	for k := range starts {
		starts[k] = 1 + s.rng.Int64N(o.JoinTicks)
	}
	slices.Sort(starts)
	for i := range o.Agents {
		n := &fleetNode{id: wire.NodeID(i + 1), voter: i < o.Voters}
		if n.voter {
			s.boot = append(s.boot, n.id)
		} else {
			n.startAt = starts[i-o.Voters]
			// Told a voter's address, as a frontend configured with the
			// voters'; or an earlier agent's.
			if s.rng.IntN(2) == 0 {
				n.join = wire.NodeID(1 + s.rng.IntN(o.Voters))
			} else {
				n.join = wire.NodeID(1 + s.rng.IntN(i))
			}
		}
		res.LastStart = max(res.LastStart, n.startAt)
		s.nodes = append(s.nodes, n)
	}
	for i := range s.nodes {
		if s.nodes[i].voter {
			s.start(i)
		}
	}

	// Until every node is ready on one view.
	ready := false
	for s.tick = 1; s.fail == nil && !ready; s.tick++ {
		if s.tick > res.LastStart+o.ReadyTicks {
			return res, s.failure(fmt.Sprintf("not every node ready on one view %d ticks after the last start: %s", o.ReadyTicks, s.notReady()))
		}
		for i, n := range s.nodes {
			if n.e == nil && n.startAt == s.tick {
				s.start(i)
			}
		}
		s.step()
		ready = s.tick >= res.LastStart && s.allReady(0, 0)
	}
	if s.fail != nil {
		return res, s.fail
	}
	res.ReadyTicks, res.Epoch = s.tick-1, s.top

	// The idle window.
	s.window()
	for end := s.tick + o.IdleTicks; s.tick < end && s.fail == nil; s.tick++ {
		s.step()
		s.sample()
	}
	if s.fail != nil {
		return res, s.fail
	}
	if !s.allReady(0, 0) || s.top != res.Epoch {
		return res, s.failure(fmt.Sprintf("the idle fleet left view %d (now %d), or a node stopped being ready: %s", res.Epoch, s.top, s.notReady()))
	}
	res.Voter, res.Idle = s.figures(true, o.IdleTicks), s.figures(false, o.IdleTicks)
	if o.KeepLeaders {
		res.Messages = s.msgs
		return res, nil
	}

	// A leader lost: the one that coordinates.
	lost := s.coordinator()
	res.Lost = s.nodes[lost].id
	before := s.valid[s.top]
	s.nodes[lost].e = nil
	s.window()
	left := len(before.Members) - 1
	res.NewView = left >= 3
	start := s.tick
	done := false
	for ; s.fail == nil && !done; s.tick++ {
		if s.tick > start+o.ReadyTicks {
			return res, s.failure(fmt.Sprintf("leader %d lost: not every live node ready on a new view within %d ticks: %s",
				res.Lost, o.ReadyTicks, s.notReady()))
		}
		s.step()
		s.sample()
		if res.NewView {
			done = s.allReady(before.Epoch+1, res.Lost)
		} else {
			// No view can replace it: the two other leaders answer for
			// this one, and every node must stay ready on it the while a
			// new view would take.
			if !s.allReady(0, 0) {
				return res, s.failure(fmt.Sprintf("leader %d of three lost: a node stopped being ready: %s", res.Lost, s.notReady()))
			}
			done = s.tick-start+1 >= fleetDeadTicks+fleetHelloTicks+fleetRetryTicks
		}
	}
	if s.fail != nil {
		return res, s.fail
	}
	res.ChangeTicks, res.ChangeEpoch = s.tick-start, s.top
	res.ChangeVoter, res.ChangeIdle = s.figures(true, 0), s.figures(false, 0)
	res.Messages = s.msgs
	return res, nil
}

func cmpOr[T int | int64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

func (s *fleetSim) failure(what string) error {
	if s.fail == nil {
		if s.o.Mutant != 0 {
			what += fmt.Sprintf(" [mutant %d]", s.o.Mutant)
		}
		s.fail = &Failure{Test: "TestFleetIdleCostDoesNotGrow", Seed: s.o.Seed, Tick: s.tick,
			What: fmt.Sprintf("fleet of %d: %s", s.o.Agents, what)}
	}
	return s.fail
}

// start starts node i; the mesh tells it of every node started, and them
// of it.
func (s *fleetSim) start(i int) {
	n := s.nodes[i]
	var boot, peers []wire.NodeID
	if n.voter {
		boot = s.boot
		peers = slices.DeleteFunc(slices.Clone(s.boot), func(id wire.NodeID) bool { return id == n.id })
	} else {
		peers = []wire.NodeID{n.join}
	}
	e, err := election.New(election.Config{Node: n.id, Bootstrap: boot, Peers: peers, Mutant: s.o.Mutant,
		Incarnation: 1, Nonce: uint64(n.id), Codec: uint64(wire.Version),
		HelloTicks: fleetHelloTicks, DeadTicks: fleetDeadTicks, RetryTicks: fleetRetryTicks,
		ID: election.ID{Priority: uint8(1 + s.rng.IntN(14)), Random: s.rng.Uint32(),
			Address: fmt.Sprintf("/ip4/10.0.%d.%d/tcp/7946", i/250, i%250+1), PID: uint32(1000 + i), Name: fmt.Sprintf("agent%d", i+1)}},
		nil)
	if err != nil {
		s.failure(fmt.Sprintf("start of node %d: %v", n.id, err))
		return
	}
	n.e = e
	for _, m := range s.nodes {
		if m != n && m.e != nil {
			m.e.AddPeer(n.id)
			n.e.AddPeer(m.id)
		}
	}
	s.ready(n)
}

// step delivers the messages due, in a random order, and ticks every node.
func (s *fleetSim) step() {
	// Messages are sent at least a tick ahead: none joins this slot while
	// it is delivered, and its array serves again (a fleet's voters send
	// thousands a tick).
	slot := &s.net[s.tick%int64(len(s.net))]
	due := *slot
	defer func() { *slot = due[:0] }()
	for _, k := range s.rng.Perm(len(due)) {
		m := due[k]
		to := s.nodes[m.To-1]
		if to.e == nil {
			continue
		}
		if s.count && m.From != to.id {
			to.recv++
			to.last[m.From] = s.tick
		}
		_ = to.e.Step(m)
		s.ready(to)
	}
	for _, n := range s.nodes {
		if n.e != nil {
			n.e.Tick()
			s.ready(n)
		}
	}
}

// ready handles node n's Ready: its store, its messages, its view.
func (s *fleetSim) ready(n *fleetNode) {
	for n.e != nil && n.e.HasReady() && s.fail == nil {
		rd := n.e.Ready()
		if p := rd.Persist; p != nil {
			n.lives = len(p.Lives)
			if p.Cluster == election.ClusterID(s.boot) && p.Accepted.Epoch > 0 {
				s.accepted(n.id, p.Accepted)
			}
		}
		for _, m := range rd.Messages {
			s.msgs++
			if s.count && m.To != n.id {
				n.sent++
				n.last[m.To] = s.tick
			}
			at := s.tick + 1 + s.rng.Int64N(3)
			slot := &s.net[at%int64(len(s.net))]
			*slot = append(*slot, m)
		}
		if v := rd.View; v != nil {
			if w, ok := s.valid[v.Epoch]; !ok || viewKey(w) != viewKey(*v) {
				s.failure(fmt.Sprintf("node %d was handed %s, which no majority of its members and previous members accepted", n.id, viewKey(*v)))
				return
			}
			n.epoch = v.Epoch
		}
		n.e.Advance()
	}
}

// accepted records that node id persisted v as accepted, and v as valid
// once a majority of its members and previous members did.
func (s *fleetSim) accepted(id wire.NodeID, v wire.View) {
	if _, ok := s.valid[v.Epoch]; ok {
		return
	}
	key := viewKey(v)
	if s.accepts[key] == nil {
		s.accepts[key] = map[wire.NodeID]bool{}
	}
	s.accepts[key][id] = true
	if election.Valid(v, s.accepts[key], 0) {
		s.valid[v.Epoch] = v.Clone()
		s.top = max(s.top, v.Epoch)
	}
}

// allReady reports whether every live node is ready on the newest valid
// view, of epoch at least from, whose leaders do not include lost.
func (s *fleetSim) allReady(from uint64, lost wire.NodeID) bool {
	v, ok := s.valid[s.top]
	if !ok || s.top < from || slices.Contains(v.Leaders, lost) {
		return false
	}
	for _, n := range s.nodes {
		if n.e == nil {
			continue
		}
		if ok, _ := n.e.LockReady(); !ok || n.epoch != s.top {
			return false
		}
	}
	return true
}

// notReady tells, for a failure, how many nodes are not ready and why
// the first of them is not.
func (s *fleetSim) notReady() string {
	k, first := 0, ""
	for _, n := range s.nodes {
		if n.e == nil {
			continue
		}
		if ok, why := n.e.LockReady(); !ok || n.epoch != s.top {
			if k++; first == "" {
				first = fmt.Sprintf("node %d (voter %v, view %d of %d): %s", n.id, n.voter, n.epoch, s.top, why)
			}
		}
	}
	return fmt.Sprintf("%d nodes not ready, first %s", k, first)
}

// coordinator is the index of the leader that coordinates (the first
// leader when none says so).
func (s *fleetSim) coordinator() int {
	v := s.valid[s.top]
	for _, l := range v.Leaders {
		if n := s.nodes[l-1]; n.e != nil && n.e.Status().Coordinator {
			return int(l - 1)
		}
	}
	return int(v.Leaders[0] - 1)
}

// window starts counting afresh.
func (s *fleetSim) window() {
	s.count = true
	for _, n := range s.nodes {
		n.sent, n.recv, n.peers10s = 0, 0, 0
		n.last = map[wire.NodeID]int64{}
	}
}

// sample updates every node's most peers within fleetLingerTicks, once
// per hello period: a peer counts from its last exchange until the p2p
// layer would close the connection.
func (s *fleetSim) sample() {
	if s.tick%fleetHelloTicks != 0 {
		return
	}
	for _, n := range s.nodes {
		k := 0
		for _, at := range n.last {
			if s.tick-at < fleetLingerTicks {
				k++
			}
		}
		n.peers10s = max(n.peers10s, k)
	}
}

// figures sums up the window's counts of the live voters, or of the
// others: per minute over ticks, or as counted when ticks is 0.
func (s *fleetSim) figures(voters bool, ticks int64) FleetFigures {
	var f FleetFigures
	per := 1.0
	if ticks > 0 {
		per = float64(fleetMinuteTicks) / float64(ticks)
	}
	add := func(st *FleetStat, x float64) {
		st.Mean += x
		st.Max = max(st.Max, x)
	}
	for _, n := range s.nodes {
		if n.voter != voters || n.e == nil {
			continue
		}
		f.Nodes++
		add(&f.Sent, float64(n.sent)*per)
		add(&f.Received, float64(n.recv)*per)
		add(&f.Peers, float64(len(n.last)))
		add(&f.Peers10s, float64(n.peers10s))
		add(&f.Known, float64(len(n.e.Status().Members)))
		add(&f.Lives, float64(n.lives))
	}
	if f.Nodes > 0 {
		for _, st := range []*FleetStat{&f.Sent, &f.Received, &f.Peers, &f.Peers10s, &f.Known, &f.Lives} {
			st.Mean /= float64(f.Nodes)
		}
	}
	return f
}
