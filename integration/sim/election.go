package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// ElectionOptions configure one run of the election simulator. Zero values
// mean defaults: the whole world is modelled.
type ElectionOptions struct {
	Seed int64
	// Nodes are the bootstrap members (default: drawn from the seed, 3 to 7).
	Nodes int
	// Joiners are nodes started later with --join, non-members until an
	// operator adds them (default: drawn, 0 to 3; negative: none).
	Joiners int
	// FaultTicks is how long faults run (default 600); then SettleTicks
	// (default 300, three times that when the links stay slow) in which
	// every node must become ready on one view.
	FaultTicks, SettleTicks int64
	Mutant                  election.Mutant
	// ForgetTicks is the nodes' election.Config.ForgetTicks. Zero: drawn
	// from the seed without the PRNG (so that the other draws stay as
	// they were): even seeds forget after 40 to 199 ticks, shorter than
	// partitions and downtimes, and configure only the bootstrap members
	// as peers (as --peers names a few voters), so that nodes that are not
	// members are forgotten and learned again while the faults run; odd
	// seeds never forget and configure every node. Negative: never.
	ForgetTicks int64
	// Leave parts of the world out, to narrow a failure down: disk wipes
	// and rollbacks, the operator's membership changes, the stray node
	// started with the default flags, and slow links.
	NoDiskFaults, NoOperator, NoStray, NoSlowLinks bool
	// LeaveOut leaves out the parts of the world that the election does
	// not handle yet (KnownGaps: all of them).
	LeaveOut Gap
	// Tracef, when set, gets every trace line as it happens.
	Tracef func(string)
}

// Gap is a part of the world the election does not handle yet: modelled,
// it makes RunElection fail.
type Gap uint8

const (
	// GapLostStoreRestarts (closed, always modelled unless left out): a
	// node found stale, or whose store lost what it acknowledged (a
	// promise or an accepted view), starts again once it is down, like
	// any machine that reboots, with the store it has. Its incarnation
	// counter soon passes the one the members know; its check-in is
	// refused all the same, as it shows lives that do not include the
	// one they know. Left out, such a node never starts again.
	GapLostStoreRestarts Gap = 1 << iota
	// GapNewestLifeRollbacks: a store is rolled back to a copy of the
	// newest life of the node that checked in. That life k restarts as
	// k+1; the members refuse it when its hellos told an age of the store
	// above the copy's, but a copy made after the last age they heard
	// passes for a plain restart. Left out, a store is rolled back only to
	// a copy of an older life.
	GapNewestLifeRollbacks
	// GapUnknownLives (narrowed, modelled unless left out): a store is
	// wiped or rolled back after members were added since the node's
	// life started. Members learn the lives of checked-in nodes from
	// their hellos, so only a node whose life the members added since
	// never heard (it was down all along) can pass with an old store; the
	// simulator has not reached that since hellos teach lives (it found
	// the gap at seed 1848 before). Left out, no such disk fault.
	GapUnknownLives

	// KnownGaps are all the gaps. (GapCheckInBlocked, a node that cannot
	// check in because fewer than a majority of the other members are up,
	// closed: the operator vouches for its store.)
	KnownGaps = GapNewestLifeRollbacks
)

type gapName struct {
	g    Gap
	name string
}

var gapNames = []gapName{{GapNewestLifeRollbacks, "rollbacks"}}

// String names the gaps as -election-gaps does.
func (g Gap) String() string {
	var names []string
	for _, n := range gapNames {
		if g&n.g != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// ElectionResult sums up a run that passed.
type ElectionResult struct {
	// ValidViews of every cluster (the main one and the stray one).
	ValidViews, Crashes, Messages int
	// Continuations counts rounds that proposed an accepted view again,
	// over every life of every node.
	Continuations int
	// Changes: membership changes committed (as reported to the node the
	// operator asked); ChangesRefused: refused at once by ChangeMembers;
	// ChangesLost: started but not committed.
	Changes, ChangesRefused, ChangesLost int
	// Joiners started with --join (replacements among them), and added:
	// nodes that became members after the bootstrap.
	Joiners, Added, Removed int
	// Wipes and Rollbacks of a node's store (NewestLife: rollbacks to a
	// copy of the newest life that checked in, which no check-in can tell
	// from a restart; see GapNewestLifeRollbacks).
	Wipes, Rollbacks, NewestLife int
	// Stale: lives refused at check-in; Replaced: stale nodes replaced by
	// a new identity (the runbook: remove the old, add the new).
	Stale, Replaced int
	// Foreign: messages of another cluster (or of a joiner that has none
	// yet) refused, over every life of every node.
	Foreign int
	// Stray: runs with a node started with the default flags (a cluster of
	// one) in the same network; Captured: joiners that joined its cluster.
	Stray, Captured int
	// SlowLinks: slow-link episodes; SlowSettle: runs whose links stayed
	// slow (1 to 3 times RetryTicks) after the faults.
	SlowLinks, SlowSettle int
	// NoQuorum: runs whose liveness check of the main cluster was skipped
	// because too few healthy members were left to elect (a member that
	// cannot check in and whose store the operator restored counts as
	// lost). Vouched: lives that checked in on the operator's word (see
	// election.VouchStore), too few other members being up.
	NoQuorum, Vouched int
	// LevelRises: valid views of the main cluster that raised its codec;
	// BelowLevel: votes of nodes below it, and views that would lower it,
	// refused.
	LevelRises, BelowLevel int
	// OldAfterLevel: starts of the release before after the level moved.
	OldAfterLevel int
}

// Add adds o's counts to r's.
func (r *ElectionResult) Add(o ElectionResult) {
	r.ValidViews += o.ValidViews
	r.Crashes += o.Crashes
	r.Messages += o.Messages
	r.Continuations += o.Continuations
	r.Changes += o.Changes
	r.ChangesRefused += o.ChangesRefused
	r.ChangesLost += o.ChangesLost
	r.Joiners += o.Joiners
	r.Added += o.Added
	r.Removed += o.Removed
	r.Wipes += o.Wipes
	r.Rollbacks += o.Rollbacks
	r.NewestLife += o.NewestLife
	r.Stale += o.Stale
	r.Replaced += o.Replaced
	r.Foreign += o.Foreign
	r.Stray += o.Stray
	r.Captured += o.Captured
	r.SlowLinks += o.SlowLinks
	r.SlowSettle += o.SlowSettle
	r.NoQuorum += o.NoQuorum
	r.Vouched += o.Vouched
	r.LevelRises += o.LevelRises
	r.BelowLevel += o.BelowLevel
	r.OldAfterLevel += o.OldAfterLevel
}

type nodeKind uint8

const (
	bootMember nodeKind = iota // one of the initial members
	joiner                     // started with --join
	stray                      // started with the default flags: a cluster of one
)

func (k nodeKind) String() string {
	return [...]string{"member", "joiner", "stray"}[k]
}

type storeCopy struct {
	persisted *election.Persisted
	inc       uint32
}

type electionNode struct {
	id        wire.NodeID
	kind      nodeKind
	e         *election.Election // nil while down
	persisted *election.Persisted
	inc       uint32 // the store's incarnation counter
	nonce     uint64 // of this life
	since     int64  // when this life started
	checkedIn uint32 // the newest incarnation that checked in
	// disk: the last wipe or rollback, diskLife: when the life before it
	// started; starts: since then
	disk     string
	diskLife int64
	starts   int
	off      bool
	adopted  uint64 // highest epoch adopted in this life
	startAt  int64  // first start (joiners start late)
	started  bool
	retired  bool // shut down for good by the operator
	stale    bool // this life was refused at check-in
	// everStale: some life of this identity was refused; since then it
	// must never vote again. promisedAt/acceptedAt: its store then.
	everStale              bool
	promisedAt, acceptedAt uint64
	// The highest epoch this identity ever promised (or accepted) and the
	// epoch of the newest view it ever accepted, over all its lives, in
	// each cluster (epochs of two clusters are unrelated: a joiner whose
	// store was lost may join another): what it acknowledged. A vote must
	// never be made with less.
	hiPromised, hiAccepted map[uint64]uint64
	captured               bool
	copies                 []storeCopy // backups of the store, oldest first
	vouched                bool        // the operator vouched for this life's store
	// codec is what this life offers the cluster's level: an upgrade or a
	// downgrade happens at a restart.
	codec uint64
}

type slowLink struct{ extra, until int64 }

type electionSim struct {
	o     ElectionOptions
	rng   *rand.Rand
	tick  int64
	nodes []*electionNode
	boot  []wire.NodeID
	main  uint64 // the main cluster's id
	// the stray node (-1: none), when it joins the mesh, its cluster
	strayIdx    int
	strayAt     int64
	strayOn     bool
	strayC      uint64
	net         []envelope
	seq         int64
	cut         map[[2]int]bool     // directed links that drop everything
	slow        map[[2]int]slowLink // directed links with extra delay
	slowSettle  bool
	latency     map[[2]int]int64                // per link, while settling slowly
	valid       map[uint64]map[uint64]wire.View // cluster -> epoch -> valid view
	top         map[uint64]uint64               // cluster -> highest valid epoch
	bootOf      map[uint64][]wire.NodeID
	accepts     map[string]map[int]bool // cluster/view key -> nodes that persisted it as accepted
	addAsked    map[wire.NodeID]bool    // the operator asked to add
	memberSince map[wire.NodeID]int64   // when a node last became a member of the main cluster
	removeAsked map[wire.NodeID]bool    // the operator asked to remove
	ops         []operatorStep          // the runbook's steps, in order
	opsNext     int64
	opsAt       int           // the node the operator is logged into
	settle      int64         // ticks the cluster gets to settle
	replace     map[int]int64 // stale node -> when the operator replaces it
	lastDisk    int64
	res         ElectionResult
	trace       []string
	fail        *Failure
	nonce       uint64
	// levelAsked: some coordinator proposed a view with a level; from then
	// on every start offers the newest codec, as an operator who checked
	// `sluice members` would (a node of the release before would not even
	// open a store that holds the level).
	levelAsked bool
	// proposed is the level of each proposal, by cluster and epoch, as
	// its coordinator sent it: a node of the release before keeps the view
	// it accepted without it, and is judged by what it accepted.
	proposed map[[2]uint64]uint64
	// healing: the faults stopped; starts run the new release.
	healing bool
	// levels are the levels of the views nodes of the new release learned
	// as valid, by cluster and epoch (checkLevel).
	levels map[uint64]map[uint64]uint64
}

// RunElection simulates the election of a cluster and the world around it
// with one seeded PRNG: random delays, loss, duplication, crashes and
// restarts from what was persisted, clean partitions, one-way link cuts
// and slow links (up to three times RetryTicks, some staying slow after
// the faults); 3 to 7 bootstrap members, and nodes that join late with
// --join; an operator who adds joiners and removes members (often crashed
// or stale ones) during the faults; stores wiped or rolled back to an
// earlier copy, and the runbook for them (a new identity replaces the old:
// remove the old, add the new); and a node started with the default flags
// (a cluster of one) in the same network.
//
// After every step it checks, from what the nodes persisted (not from what
// coordinators claim), per cluster: a view is valid once a majority of its
// members and of its previous members persisted it as accepted; at most
// one view is valid per epoch; every valid view's previous view is valid
// and at least as recent as every valid view of a lower epoch (so its
// leaders hold the lock table); members change one at a time and only as
// the operator asked (never to the stray node); leaders are members, never
// off, three (or all members); nodes adopt only valid views, with growing
// epochs; a change reported committed is in a valid view; no node votes
// with less than it acknowledged (a promise of an epoch at or below one it
// promised, or carrying an older view than one it accepted, in any earlier
// life); a node found stale never votes again. After the faults stop every
// node of a cluster that is up and not stale must be ready on one view,
// unless too few healthy members are left for a majority or to lead
// (counted in NoQuorum). LeaveOut leaves out the known gaps (see Gap).
func RunElection(o ElectionOptions) (ElectionResult, error) {
	s := newElectionSim(o)
	for i, n := range s.nodes {
		if n.startAt == 0 {
			s.start(i)
		}
	}
	s.runTicks()
	if s.fail == nil {
		s.settled(s.settle)
	}
	if s.fail != nil {
		return s.res, s.fail
	}
	for i := range s.nodes {
		s.stop(i)
	}
	for _, vs := range s.valid {
		s.res.ValidViews += len(vs)
	}
	return s.res, nil
}

// newElectionSim sets up the world of o, nothing started yet: the
// bootstrap members (some off), the joiners and when they start, the
// stray node, and whether links stay slow while the cluster settles. The
// seeded PRNG draws in this order; a change to it changes every seed's run.
func newElectionSim(o ElectionOptions) *electionSim {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0xe1ec7))
	if o.Nodes <= 0 {
		o.Nodes = 3 + rng.IntN(5)
	}
	if o.Joiners == 0 {
		o.Joiners = rng.IntN(4)
	}
	if o.FaultTicks <= 0 {
		o.FaultTicks = 600
	}
	if o.ForgetTicks == 0 {
		o.ForgetTicks = -1
		if o.Seed%2 == 0 {
			o.ForgetTicks = 40 + o.Seed%160
			if o.ForgetTicks < 40 {
				o.ForgetTicks += 160 // negative seeds
			}
		}
	}
	if o.SettleTicks <= 0 {
		o.SettleTicks = 300
	}
	s := &electionSim{o: o, rng: rng, strayIdx: -1, cut: map[[2]int]bool{}, slow: map[[2]int]slowLink{},
		valid: map[uint64]map[uint64]wire.View{}, levels: map[uint64]map[uint64]uint64{}, top: map[uint64]uint64{}, bootOf: map[uint64][]wire.NodeID{},
		accepts: map[string]map[int]bool{}, addAsked: map[wire.NodeID]bool{}, memberSince: map[wire.NodeID]int64{}, removeAsked: map[wire.NodeID]bool{},
		replace: map[int]int64{}, lastDisk: -1000, opsAt: -1}
	// Some members are off, leaving at least three candidates (or all).
	offs := 0
	for i := range o.Nodes {
		n := s.add(bootMember)
		if o.Nodes-offs > 3 && rng.IntN(5) == 0 {
			n.off = true
			offs++
		}
		s.boot = append(s.boot, wire.NodeID(i+1))
	}
	s.main = election.ClusterID(s.boot)
	s.bootOf[s.main] = s.boot
	for range max(o.Joiners, 0) {
		n := s.add(joiner)
		n.off = rng.IntN(6) == 0
		n.startAt = 1 + rng.Int64N(o.FaultTicks*2/3)
	}
	if !o.NoStray && rng.IntN(3) == 0 {
		n := s.add(stray)
		s.strayIdx = len(s.nodes) - 1
		s.strayC = election.ClusterID([]wire.NodeID{n.id})
		s.bootOf[s.strayC] = []wire.NodeID{n.id}
		n.startAt = rng.Int64N(o.FaultTicks / 2)
		s.strayAt = rng.Int64N(o.FaultTicks / 2)
		s.res.Stray++
	}
	s.slowSettle = !o.NoSlowLinks && rng.IntN(5) == 0
	s.settle = o.SettleTicks
	if s.slowSettle {
		// Rounds that run out double their time, from RetryTicks (15) up:
		// on links this slow an election takes some 500 ticks.
		s.settle *= 3
		s.res.SlowSettle++
	}
	return s
}

// runTicks runs the faults, then the settling, until a failure.
func (s *electionSim) runTicks() {
	o := s.o
	for s.tick = 1; s.tick <= o.FaultTicks+s.settle && s.fail == nil; s.tick++ {
		if s.tick <= o.FaultTicks {
			s.world()
		} else if s.tick == o.FaultTicks+1 {
			s.heal()
		}
		if s.tick > o.FaultTicks && s.tick <= o.FaultTicks+o.SettleTicks/2 && !o.NoOperator {
			s.operator(false)
		}
		s.deliver()
		for i, n := range s.nodes {
			if n.e != nil && s.fail == nil {
				n.e.Tick()
				s.ready(i)
			}
		}
	}
}

func (s *electionSim) add(k nodeKind) *electionNode {
	n := &electionNode{id: wire.NodeID(len(s.nodes) + 1), kind: k, hiPromised: map[uint64]uint64{}, hiAccepted: map[uint64]uint64{}}
	s.nodes = append(s.nodes, n)
	if k == joiner {
		s.res.Joiners++
	}
	return n
}

func (s *electionSim) failf(format string, args ...any) {
	if s.fail == nil {
		what := fmt.Sprintf(format, args...)
		if g := KnownGaps &^ s.o.LeaveOut; g != 0 {
			what += fmt.Sprintf(" [with the known gaps %s: add -election-gaps=%s to replay]", g, g)
		}
		if s.o.Mutant != 0 {
			what += fmt.Sprintf(" [mutant %d]", s.o.Mutant)
		}
		s.fail = &Failure{Test: "TestElection", Seed: s.o.Seed, Tick: s.tick, What: what, Trace: s.trace}
	}
}

func (s *electionSim) tracef(format string, args ...any) {
	line := fmt.Sprintf("t%d ", s.tick) + fmt.Sprintf(format, args...)
	if s.o.Tracef != nil {
		s.o.Tracef(line)
	}
	s.trace = append(s.trace, line)
	if len(s.trace) > 60 {
		s.trace = s.trace[1:]
	}
}

// onMesh reports whether node i is connected to the others: the stray
// node only from strayAt on.
func (s *electionSim) onMesh(i int) bool {
	return s.nodes[i].started && (i != s.strayIdx || s.strayOn)
}

// peers are the nodes the mesh tells node i of: every started node.
func (s *electionSim) peers(i int) []wire.NodeID {
	var out []wire.NodeID
	if !s.onMesh(i) && i == s.strayIdx {
		return nil
	}
	for j, n := range s.nodes {
		if j != i && (n.kind == bootMember || s.onMesh(j) && s.o.ForgetTicks < 0) {
			out = append(out, n.id)
		}
	}
	return out
}

func (s *electionSim) start(i int) {
	n := s.nodes[i]
	prio := uint8(1 + s.rng.IntN(14))
	if n.off {
		prio = election.Off
	}
	var boot []wire.NodeID
	switch n.kind {
	case bootMember:
		boot = s.boot
	case stray:
		boot = []wire.NodeID{n.id}
	}
	if n.persisted != nil && s.rng.IntN(2) == 0 {
		s.copyStore(n) // a backup before the start, of the life that ended
	}
	n.started = true
	n.inc++
	s.nonce++
	n.nonce = s.nonce
	// A rolling upgrade and its rollback: until the level moved, a start
	// runs the release before (codec 3) or the new one (codec 4).
	n.codec = uint64(wire.Version)
	switch {
	case s.healing:
	case !s.levelAsked:
		if s.rng.IntN(3) == 0 {
			n.codec = uint64(wire.MinVersion)
		}
	case s.rng.IntN(8) == 0 && (n.persisted == nil || n.persisted.Accepted.Level == 0 && n.persisted.Valid.Level == 0):
		// The release before, after the level moved, on a store that never
		// held a view with a level (which it would refuse): a node that
		// was down when it moved, downgraded, or one that joins. Its links
		// carry codec 3, which strips the levels of the views it hears
		// and relays (deliver); it may not vote, and the operator
		// upgrades it when the faults stop (heal).
		n.codec = uint64(wire.MinVersion)
		s.res.OldAfterLevel++
	}
	e, err := election.New(election.Config{Node: n.id, Bootstrap: boot, Peers: s.peers(i), Mutant: s.o.Mutant, ForgetTicks: s.o.ForgetTicks,
		Incarnation: n.inc, Nonce: n.nonce, Codec: n.codec,
		ID: election.ID{Priority: prio, Random: s.rng.Uint32(), Address: fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+i),
			PID: uint32(i), Name: fmt.Sprintf("n%d", i+1)}},
		n.persisted)
	if err != nil {
		s.failf("start of node %d: %v", n.id, err)
		return
	}
	n.e, n.adopted, n.stale, n.since, n.vouched = e, 0, false, s.tick, false
	n.starts++
	s.tracef("node %d (%s) starts, incarnation %d, priority %d", n.id, n.kind, n.inc, prio)
	// The node learns the started nodes from the mesh (a peer's roster)
	// when its configuration names only the bootstrap members.
	if s.o.ForgetTicks >= 0 && s.onMesh(i) {
		for j, m := range s.nodes {
			if j != i && m.started && s.onMesh(j) {
				e.AddPeer(m.id)
			}
		}
	}
	// The mesh tells the others (an inbound connection, an announcement).
	if s.onMesh(i) {
		for j, m := range s.nodes {
			if j != i && m.e != nil && s.onMesh(j) {
				m.e.AddPeer(n.id)
			}
		}
	}
	s.ready(i)
}

// stop takes node i down, keeping the counters of the life that ends.
func (s *electionSim) stop(i int) {
	n := s.nodes[i]
	if n.e == nil {
		return
	}
	st := n.e.Stats()
	s.res.Foreign += int(st.Foreign)
	s.res.Continuations += int(st.Continuations)
	s.res.BelowLevel += int(st.BelowLevel)
	n.e = nil
}

// lost reports whether n was found stale, or its store holds less than
// it acknowledged.
func (s *electionSim) lost(n *electionNode) bool {
	p := n.persisted
	if p == nil {
		p = &election.Persisted{}
	}
	if n.everStale {
		return true
	}
	for c, hp := range n.hiPromised {
		ha := n.hiAccepted[c]
		if hp == 0 && ha == 0 {
			continue
		}
		// A store of another cluster than one it voted in forgot that one.
		if p.Cluster != c || p.Promised < hp || p.Accepted.Epoch < ha {
			return true
		}
	}
	return false
}

// current is the newest valid view of the main cluster (epoch 0: none).
func (s *electionSim) current() wire.View {
	return s.valid[s.main][s.top[s.main]]
}

// members are the members of the main cluster now.
func (s *electionSim) members() []wire.NodeID {
	if v := s.current(); v.Epoch > 0 {
		return v.Members
	}
	return s.boot
}

func (s *electionSim) node(id wire.NodeID) *electionNode { return s.nodes[id-1] }

// healthy: up or down, not retired, in the main cluster, and with a store
// that holds what it acknowledged and was not found stale.
func (s *electionSim) healthy(id wire.NodeID) bool {
	n := s.node(id)
	return !n.retired && !n.captured && !s.lost(n)
}

// serving: up, not stale, in the main cluster.
func (s *electionSim) serving(id wire.NodeID) bool {
	n := s.node(id)
	return n.e != nil && !n.stale && n.e.Cluster() == s.main
}

func (s *electionSim) world() {
	s.network()
	if s.fail == nil && !s.o.NoDiskFaults {
		s.disks()
	}
	if s.fail == nil && !s.o.NoOperator {
		s.operator(true)
	}
	for i, n := range s.nodes {
		if !n.started && n.startAt == s.tick && s.fail == nil {
			s.start(i)
		}
	}
	if s.strayIdx >= 0 && !s.strayOn && s.tick >= s.strayAt && s.nodes[s.strayIdx].started {
		// The stray node joins the mesh: everyone greets everyone.
		s.strayOn = true
		st := s.nodes[s.strayIdx]
		s.tracef("stray node %d joins the mesh", st.id)
		for j, n := range s.nodes {
			if j != s.strayIdx && n.e != nil {
				n.e.AddPeer(st.id)
				if st.e != nil {
					st.e.AddPeer(n.id)
				}
			}
		}
	}
}

// network draws at most one fault of the machines and links per tick.
func (s *electionSim) network() {
	down, running := 0, 0
	for _, n := range s.nodes {
		if n.started && !n.retired {
			running++
			if n.e == nil {
				down++
			}
		}
	}
	switch {
	case s.rng.Float64() < 0.01 && down < running/2:
		s.crashOne()
	case down > 0 && s.rng.Float64() < 0.03:
		s.restartOne()
	case s.rng.Float64() < 0.005:
		s.partition()
	case s.rng.Float64() < 0.02:
		// One link goes down one way: connectivity stops being transitive.
		a, b := s.rng.IntN(len(s.nodes)), s.rng.IntN(len(s.nodes))
		s.cut[[2]int{a, b}] = true
		s.tracef("link %d->%d cut", a+1, b+1)
	case !s.o.NoSlowLinks && s.rng.Float64() < 0.01:
		s.slowDown()
	case len(s.cut) > 0 && s.rng.Float64() < 0.03:
		clear(s.cut)
		s.tracef("heal")
	}
}

// crashOne crashes a random node, if it is up.
func (s *electionSim) crashOne() {
	i := s.rng.IntN(len(s.nodes))
	n := s.nodes[i]
	if n.e == nil {
		return
	}
	s.stop(i)
	s.res.Crashes++
	s.tracef("node %d crashes", i+1)
	if s.o.LeaveOut&GapLostStoreRestarts != 0 && s.lost(n) {
		s.replaceLater(i) // it will not start again: the runbook
	}
}

// restartOne brings the first machine that is down back, stale or not:
// nothing stops a reboot.
func (s *electionSim) restartOne() {
	for i, n := range s.nodes {
		if n.e == nil && n.started && !n.retired && !(s.o.LeaveOut&GapLostStoreRestarts != 0 && s.lost(n)) {
			s.start(i)
			return
		}
	}
}

// partition cuts a clean partition: a random side against the rest.
func (s *electionSim) partition() {
	side := make([]bool, len(s.nodes))
	for i := range side {
		side[i] = s.rng.IntN(2) == 0
	}
	for a := range s.nodes {
		for b := range s.nodes {
			if side[a] != side[b] {
				s.cut[[2]int{a, b}] = true
			}
		}
	}
	s.tracef("partition %v", side)
}

// slowDown makes one link one way, or every link of one node, slow: up to
// three times RetryTicks (15) of extra delay for a while.
func (s *electionSim) slowDown() {
	sl := slowLink{extra: 15 + s.rng.Int64N(31), until: s.tick + 50 + s.rng.Int64N(200)}
	a := s.rng.IntN(len(s.nodes))
	if s.rng.IntN(3) == 0 {
		for b := range s.nodes {
			s.slow[[2]int{a, b}], s.slow[[2]int{b, a}] = sl, sl
		}
		s.tracef("node %d slow (+%d) until t%d", a+1, sl.extra, sl.until)
	} else {
		b := s.rng.IntN(len(s.nodes))
		s.slow[[2]int{a, b}] = sl
		s.tracef("link %d->%d slow (+%d) until t%d", a+1, b+1, sl.extra, sl.until)
	}
	s.res.SlowLinks++
}

// disks copies stores now and then, and sometimes wipes one or rolls it
// back to a copy: at most one node at a time, never leaving the members
// without a healthy majority.
func (s *electionSim) disks() {
	if s.rng.Float64() < 0.05 {
		if n := s.nodes[s.rng.IntN(len(s.nodes))]; n.e != nil && n.persisted != nil {
			s.copyStore(n) // a backup of a running node
		}
	}
	if s.tick-s.lastDisk < 100 || s.rng.Float64() >= 0.006 {
		return
	}
	members := s.members()
	for _, id := range members {
		if !s.healthy(id) {
			return // one damaged member at a time
		}
	}
	// A rollback, to a copy this node has, or a wipe.
	rollback := s.rng.IntN(2) == 0
	if i := s.diskVictim(members, rollback); i >= 0 {
		s.damageDisk(i, rollback)
	}
}

// copiesOf are the copies of n's store a rollback may restore.
func (s *electionSim) copiesOf(n *electionNode) []storeCopy {
	if s.o.LeaveOut&GapNewestLifeRollbacks == 0 {
		return n.copies
	}
	return slices.DeleteFunc(slices.Clone(n.copies), func(c storeCopy) bool { return c.inc >= n.checkedIn })
}

// diskVictim picks the node whose store is damaged next (-1: none may
// be). A node whose life some members never learned (they were added
// since it started) is the gap's case: when it is modelled, it is aimed
// at.
func (s *electionSim) diskVictim(members []wire.NodeID, rollback bool) int {
	unknown := func(n *electionNode) bool {
		return slices.ContainsFunc(members, func(id wire.NodeID) bool { return s.memberSince[id] > n.since })
	}
	var cands, unknowns []int
	for i, n := range s.nodes {
		if !n.started || n.retired || n.kind == stray || !s.healthy(n.id) || rollback && len(s.copiesOf(n)) == 0 {
			continue
		}
		switch {
		case !unknown(n):
			cands = append(cands, i)
		case s.o.LeaveOut&GapUnknownLives == 0:
			unknowns = append(unknowns, i)
		}
	}
	if len(unknowns) > 0 && (len(cands) == 0 || s.rng.IntN(3) != 0) {
		cands = unknowns // the gap is modelled: aim at it
	}
	if len(cands) == 0 {
		return -1
	}
	i := cands[s.rng.IntN(len(cands))]
	n := s.nodes[i]
	if slices.Contains(members, n.id) {
		if len(members)-1 < election.Quorum(len(members)) {
			return -1 // it would leave no healthy majority
		}
		// Before the first view no operator can remove a lost member: it
		// must not leave too few candidates to elect one.
		cands := 0
		for _, id := range members {
			if id != n.id && !s.node(id).off {
				cands++
			}
		}
		if s.current().Epoch == 0 && cands < min(3, len(members)) {
			return -1
		}
	}
	return i
}

// damageDisk rolls node i's store back to one of its copies, or wipes
// it, and restarts the node on it.
func (s *electionSim) damageDisk(i int, rollback bool) {
	n := s.nodes[i]
	s.lastDisk = s.tick
	s.stop(i)
	n.starts, n.diskLife = 0, n.since
	if cs := s.copiesOf(n); rollback {
		c := cs[s.rng.IntN(len(cs))]
		same := c.inc >= n.checkedIn
		n.persisted, n.inc = c.persisted, c.inc
		s.res.Rollbacks++
		if same {
			s.res.NewestLife++
		}
		n.disk = fmt.Sprintf("its store was rolled back at t%d to a copy of incarnation %d, the newest that checked in being %d", s.tick, c.inc, n.checkedIn)
		s.tracef("node %d's store rolled back to a copy of incarnation %d (of the newest life that checked in: %v)", n.id, c.inc, same)
	} else {
		n.persisted, n.inc = nil, 0
		s.res.Wipes++
		n.disk = fmt.Sprintf("its store was wiped at t%d", s.tick)
		s.tracef("node %d's store wiped", n.id)
	}
	n.copies = nil
	s.start(i)
}

// copyStore keeps a copy of n's store, as a backup would: the newest
// copy of each of its last four lives.
func (s *electionSim) copyStore(n *electionNode) {
	c := storeCopy{persisted: n.persisted, inc: n.inc}
	if k := len(n.copies); k > 0 && n.copies[k-1].inc == c.inc {
		n.copies[k-1] = c
		return
	}
	n.copies = append(n.copies, c)
	if len(n.copies) > 4 {
		n.copies = n.copies[1:]
	}
}

// operator carries out the runbook's steps in order (also while the
// cluster settles: operators finish what they started), and during the
// faults now and then adds a joiner or removes a member.
func (s *electionSim) operator(faulty bool) {
	s.vouch()
	for _, i := range slices.Sorted(maps.Keys(s.replace)) {
		if s.replace[i] <= s.tick {
			delete(s.replace, i)
			s.runbook(i)
		}
	}
	if len(s.ops) > 0 {
		s.nextStep()
		return
	}
	if !faulty || s.rng.Float64() >= 0.006 {
		return
	}
	i := s.console()
	if i < 0 {
		return
	}
	cur := s.nodes[i].e.View()
	if cur.Epoch == 0 {
		return
	}
	if s.rng.IntN(2) == 0 {
		s.askAdd(i, cur)
	} else {
		s.askRemove(i, cur)
	}
}

// nextStep carries on with the runbook's first step, from the machine the
// operator is logged into: done, it moves on to the next.
func (s *electionSim) nextStep() {
	if s.tick < s.opsNext {
		return
	}
	s.opsNext = s.tick + 30 + s.rng.Int64N(50)
	op := &s.ops[0]
	// The operator stays logged into one machine while it serves.
	i := s.opsAt
	if i < 0 || i >= len(s.nodes) || !s.serves(i) {
		if i = s.console(); i < 0 {
			return
		}
		s.opsAt = i
	}
	if s.done(i, op.c) {
		s.ops = s.ops[1:]
		s.opsNext = s.tick + 5 + s.rng.Int64N(20)
		return
	}
	s.ask(i, op.c)
	// After a few tries that did not commit the operator reads the
	// errors and tries the other step first (adding before removing
	// keeps enough candidates to lead when some members are off).
	if op.tries++; op.tries >= 3 && len(s.ops) > 1 {
		op.tries = 0
		s.ops = append(s.ops[1:], *op)
	}
}

// askAdd asks node i to add a random node of the main cluster that is up
// and not a member of cur, while cur has fewer than nine members.
func (s *electionSim) askAdd(i int, cur wire.View) {
	var cands []wire.NodeID
	for _, n := range s.nodes {
		if n.e != nil && n.e.Cluster() == s.main && !n.stale && !slices.Contains(cur.Members, n.id) {
			cands = append(cands, n.id)
		}
	}
	if len(cands) > 0 && len(cur.Members) < 9 {
		s.ask(i, election.Change{Add: cands[s.rng.IntN(len(cands))]})
	}
}

// askRemove asks node i to remove a member of cur: mostly a dead one (down
// or stale) if there is one, else any while more than three are left.
func (s *electionSim) askRemove(i int, cur wire.View) {
	var dead []wire.NodeID
	for _, id := range cur.Members {
		if n := s.node(id); n.e == nil || n.stale {
			dead = append(dead, id)
		}
	}
	switch {
	case len(dead) > 0 && s.rng.IntN(4) != 0:
		s.ask(i, election.Change{Remove: dead[s.rng.IntN(len(dead))]})
	case len(cur.Members) > 3:
		s.ask(i, election.Change{Remove: cur.Members[s.rng.IntN(len(cur.Members))]})
	}
}

type operatorStep struct {
	c     election.Change
	tries int
}

// replaceLater has the operator replace node i soon (see runbook).
func (s *electionSim) replaceLater(i int) {
	if _, ok := s.replace[i]; !ok && s.tick < s.o.FaultTicks+s.settle/4 && !s.o.NoOperator {
		s.replace[i] = s.tick + 5 + s.rng.Int64N(80)
	}
}

// runbook replaces node i, found stale (or, when lost stores do not
// restart, down with a lost store): it is shut down for good, a new
// identity joins, and the operator removes the old and adds the new (or
// adds first).
func (s *electionSim) runbook(i int) {
	old := s.nodes[i]
	if old.retired {
		return
	}
	s.stop(i)
	old.retired = true
	n := s.add(joiner)
	n.off = old.off
	s.res.Replaced++
	s.tracef("runbook: node %d retired, node %d replaces it", old.id, n.id)
	s.start(len(s.nodes) - 1)
	steps := []operatorStep{{c: election.Change{Remove: old.id}}, {c: election.Change{Add: n.id}}}
	if s.rng.IntN(3) == 0 {
		steps[0], steps[1] = steps[1], steps[0]
	}
	s.ops = append(s.ops, steps...)
	s.opsNext = s.tick + 20 + s.rng.Int64N(40)
}

// console is the node the operator logs into: one of the main cluster
// that checked in and is not stale (-1: none).
func (s *electionSim) console() int {
	var at []int
	for i := range s.nodes {
		if s.serves(i) {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return -1
	}
	return at[s.rng.IntN(len(at))]
}

// serves reports whether node i is up in the main cluster, checked in and
// not stale: an operator can use it.
func (s *electionSim) serves(i int) bool {
	n := s.nodes[i]
	return n.e != nil && n.e.Cluster() == s.main && n.e.CheckedIn() && n.e.Stale() == nil
}

// done reports whether `sluice members` at node i shows c done.
func (s *electionSim) done(i int, c election.Change) bool {
	m := s.nodes[i].e.View().Members
	if c.Add != 0 {
		// An added node gone bad is the next runbook's business.
		n := s.node(c.Add)
		return slices.Contains(m, c.Add) || n.retired || n.captured
	}
	return !slices.Contains(m, c.Remove)
}

// ask makes the change at node i, as `sluice members` would on the
// machine the operator logged into.
func (s *electionSim) ask(i int, c election.Change) {
	if err := s.nodes[i].e.ChangeMembers(c); err != nil {
		s.res.ChangesRefused++
		s.tracef("operator at node %d: %s refused: %v", i+1, c, err)
		return
	}
	if c.Add != 0 {
		s.addAsked[c.Add] = true
	} else {
		s.removeAsked[c.Remove] = true
	}
	s.tracef("operator at node %d: %s", i+1, c)
	s.ready(i)
}

// heal stops the faults: links mend, crashed nodes that are not stale
// come back, and while settling slowly every link gets a fixed latency
// of up to three times RetryTicks.
func (s *electionSim) heal() {
	clear(s.cut)
	clear(s.slow)
	s.tracef("faults stop")
	if s.slowSettle {
		s.latency = map[[2]int]int64{}
		for a := range s.nodes {
			for b := range s.nodes {
				s.latency[[2]int{a, b}] = s.rng.Int64N(46)
			}
		}
	}
	s.healing = true
	for i, n := range s.nodes {
		if n.e != nil && n.codec < uint64(wire.Version) && s.levelAsked {
			s.tracef("node %d is upgraded to the new release", n.id)
			s.stop(i)
			s.start(i)
		}
		if n.e == nil && n.started && !n.retired && !n.everStale && !(s.o.LeaveOut&GapLostStoreRestarts != 0 && s.lost(n)) {
			s.start(i)
		}
	}
}

func (s *electionSim) deliver() {
	due := takeDue(&s.net, s.tick)
	faulty := s.tick <= s.o.FaultTicks
	for _, k := range s.rng.Perm(len(due)) {
		m := due[k].m
		from, to := int(m.From)-1, int(m.To)-1
		if to < 0 || to >= len(s.nodes) {
			continue
		}
		n := s.nodes[to]
		if n.e == nil || s.cut[[2]int{from, to}] || faulty && s.rng.Float64() < 0.05 {
			continue
		}
		if faulty && s.rng.Float64() < 0.03 {
			s.post(m)
		}
		if from >= 0 && from < len(s.nodes) && s.nodes[from].codec < uint64(wire.Version) || n.codec < uint64(wire.Version) {
			// A link of codec 3: what it lacks does not arrive.
			m.View.Level, m.Codec, m.Release = 0, 0, ""
		}
		_ = n.e.Step(m)
		s.ready(to)
		if s.fail != nil {
			return
		}
	}
}

func (s *electionSim) post(m wire.Message) {
	s.seq++
	s.res.Messages++
	d := 1 + s.rng.Int64N(3)
	if s.tick <= s.o.FaultTicks && s.rng.Float64() < 0.05 {
		d += s.rng.Int64N(30)
	}
	link := [2]int{int(m.From) - 1, int(m.To) - 1}
	if sl, ok := s.slow[link]; ok && s.tick < sl.until {
		d += sl.extra/2 + s.rng.Int64N(sl.extra/2+1)
	}
	d += s.latency[link]
	s.net = append(s.net, envelope{at: s.tick + d, seq: s.seq, m: m})
}

// viewKey names a view; its level is not part of it: a copy that crossed
// a link of codec 3 lost it, and is the same view.
func viewKey(v wire.View) string {
	return fmt.Sprintf("%d%v/%d%v m%v/%v", v.Epoch, v.Leaders, v.PrevEpoch, v.PrevLeaders, v.Members, v.PrevMembers)
}

func (s *electionSim) ready(i int) {
	n := s.nodes[i]
	for n.e != nil && n.e.HasReady() && s.fail == nil {
		rd := n.e.Ready()
		// The votes of this Ready, judged against what this identity
		// acknowledged before it.
		for _, m := range rd.Messages {
			s.vote(n, m)
			if m.Kind == wire.KindAccept && m.View.Level > 0 && !s.levelAsked {
				s.levelAsked = true
				s.tracef("node %d proposes the cluster's codec %d", n.id, m.View.Level)
			}
			if m.Kind == wire.KindAccept {
				if s.proposed == nil {
					s.proposed = map[[2]uint64]uint64{}
				}
				s.proposed[[2]uint64{m.Cluster, m.View.Epoch}] = m.View.Level
			}
		}
		if p := rd.Persist; p != nil {
			if n.everStale && (p.Promised > n.promisedAt || p.Accepted.Epoch > n.acceptedAt) {
				s.failf("node %d was found stale, yet its store now holds a promise of epoch %d and an accepted view of epoch %d (then %d and %d)%s",
					n.id, p.Promised, p.Accepted.Epoch, n.promisedAt, n.acceptedAt, s.history(n))
			}
			n.persisted = p
			n.hiPromised[p.Cluster] = max(n.hiPromised[p.Cluster], p.Promised, p.Accepted.Epoch)
			n.hiAccepted[p.Cluster] = max(n.hiAccepted[p.Cluster], p.Accepted.Epoch)
			if v := p.Accepted; v.Epoch > 0 {
				s.accepted(i, p.Cluster, v)
			}
		}
		for _, m := range rd.Messages {
			s.post(m)
		}
		if v := rd.View; v != nil {
			s.adopt(i, *v)
		}
		for _, c := range rd.Changes {
			s.changed(i, c)
		}
		n.e.Advance()
	}
	if n.e == nil {
		return
	}
	if n.e.CheckedIn() {
		n.checkedIn = max(n.checkedIn, n.inc)
	}
	if !n.stale && n.e.Stale() != nil {
		n.stale = true
		s.res.Stale++
		s.tracef("node %d is stale: %v", n.id, n.e.Stale())
		if !n.everStale && n.persisted != nil {
			n.promisedAt, n.acceptedAt = n.persisted.Promised, n.persisted.Accepted.Epoch
		}
		n.everStale = true
		s.replaceLater(i)
	}
	if s.strayC != 0 && n.kind == joiner && !n.captured && n.e.Cluster() == s.strayC {
		n.captured = true
		s.res.Captured++
		s.tracef("joiner %d joined the stray node's cluster", n.id)
	}
}

// vote checks a vote that n sends against what n acknowledged in any
// life: a node never votes with less.
func (s *electionSim) vote(n *electionNode, m wire.Message) {
	c := m.Cluster
	hiP, hiA := n.hiPromised[c], n.hiAccepted[c]
	switch {
	case m.Reject:
	case m.Kind == wire.KindPromise:
		if m.PrepareEpoch <= hiP || m.View.Epoch < hiA {
			s.failf("node %d (incarnation %d) promises epoch %d carrying its accepted view of epoch %d, "+
				"but it promised epoch %d and accepted a view of epoch %d before: it votes with less than it acknowledged%s",
				n.id, n.inc, m.PrepareEpoch, m.View.Epoch, hiP, hiA, s.history(n))
		}
		n.hiPromised[c] = m.PrepareEpoch
	case m.Kind == wire.KindAccepted:
		if m.View.Epoch < hiP || m.View.Epoch <= hiA {
			s.failf("node %d (incarnation %d) accepts epoch %d, but it promised epoch %d and accepted a view of epoch %d before: "+
				"it votes with less than it acknowledged%s", n.id, n.inc, m.View.Epoch, hiP, hiA, s.history(n))
		}
		n.hiPromised[c], n.hiAccepted[c] = max(hiP, m.View.Epoch), m.View.Epoch
	}
}

// history tells what happened to n's store, for a failure.
func (s *electionSim) history(n *electionNode) string {
	if n.disk == "" {
		return ""
	}
	h := fmt.Sprintf(" (%s; %d starts since", n.disk, n.starts)
	if n.everStale {
		h += "; found stale before"
	}
	var news []wire.NodeID
	for _, id := range s.members() {
		if s.memberSince[id] > n.diskLife {
			news = append(news, id)
		}
	}
	if len(news) > 0 {
		h += fmt.Sprintf("; members %v were added after its last life before that started", news)
	}
	return h + ")"
}

// accepted records a durable accept and checks the valid views it makes.
func (s *electionSim) accepted(i int, cluster uint64, v wire.View) {
	key := viewKey(v)
	if !s.countAccept(i, cluster, v, key) {
		return
	}
	valid := s.valid[cluster]
	if valid == nil {
		valid = map[uint64]wire.View{}
		s.valid[cluster] = valid
	}
	if old, ok := valid[v.Epoch]; ok {
		if viewKey(old) != key {
			s.failf("two valid views for epoch %d: %s and %s", v.Epoch, viewKey(old), key)
		}
		return
	}
	// A new valid view: every check runs, the first failure is the one
	// reported.
	s.checkChain(cluster, v, key, valid)
	s.checkLeaders(v, key)
	s.checkMemberChange(cluster, v, key)
	if cluster == s.main && v.Epoch > s.top[cluster] {
		s.countMemberChange(v)
		if v.Codec() > s.current().Codec() {
			s.res.LevelRises++
		}
	}
	valid[v.Epoch] = v
	s.top[cluster] = max(s.top[cluster], v.Epoch)
	s.tracef("valid: %s", key)
}

// countAccept records that node i persisted v (key) of cluster as
// accepted, and reports whether v is valid now.
func (s *electionSim) countAccept(i int, cluster uint64, v wire.View, key string) bool {
	ck := fmt.Sprintf("%016x/%s", cluster, key)
	if s.accepts[ck] == nil {
		s.accepts[ck] = map[int]bool{}
	}
	s.accepts[ck][i] = true
	votes := map[wire.NodeID]bool{}
	for j := range s.accepts[ck] {
		votes[wire.NodeID(j+1)] = true
	}
	return election.Valid(v, votes, 0)
}

// checkChain checks the new valid view v (key) against the valid views of
// its cluster: it covers the lower epochs' and is covered by the higher
// ones', and its previous view is valid (or, for the first, its previous
// members are the bootstrap members).
func (s *electionSim) checkChain(cluster uint64, v wire.View, key string, valid map[uint64]wire.View) {
	for _, e := range slices.Sorted(maps.Keys(valid)) {
		w := valid[e]
		if e < v.Epoch && !covers(v, w) {
			s.failf("valid view %s takes its table from epoch %d, but epoch %d was valid: %s", key, v.PrevEpoch, e, viewKey(w))
		}
		if e > v.Epoch && !covers(w, v) {
			s.failf("valid view %s skips the valid view %s", viewKey(w), key)
		}
	}
	if v.PrevEpoch > 0 {
		if p, ok := valid[v.PrevEpoch]; !ok || !slices.Equal(p.Leaders, v.PrevLeaders) || !slices.Equal(p.Members, v.PrevMembers) {
			s.failf("valid view %s names a previous view that is not valid", key)
		}
	} else if boot := s.bootOf[cluster]; !slices.Equal(v.PrevMembers, boot) {
		s.failf("valid view %s is the first of cluster %016x, but its previous members are not the bootstrap members %v", key, cluster, boot)
	}
}

// checkLeaders checks v's leaders: members, never off, three (or all
// members).
func (s *electionSim) checkLeaders(v wire.View, key string) {
	for _, l := range v.Leaders {
		if !slices.Contains(v.Members, l) {
			s.failf("view %s makes the non-member %d a leader", key, l)
		}
		if s.node(l).off {
			s.failf("view %s makes the off node %d a leader", key, l)
		}
	}
	if want := min(3, len(v.Members)); len(v.Leaders) != want {
		s.failf("view %s has %d leaders, want %d", key, len(v.Leaders), want)
	}
}

// checkMemberChange checks that v changes members one at a time, as the
// operator asked, and never makes the stray node a member of the main
// cluster.
func (s *electionSim) checkMemberChange(cluster uint64, v wire.View, key string) {
	var added, removed []wire.NodeID
	for _, id := range v.Members {
		if !slices.Contains(v.PrevMembers, id) {
			added = append(added, id)
		}
	}
	for _, id := range v.PrevMembers {
		if !slices.Contains(v.Members, id) {
			removed = append(removed, id)
		}
	}
	if len(added)+len(removed) > 1 {
		s.failf("valid view %s changes more than one member: %v added, %v removed", key, added, removed)
	}
	for _, id := range added {
		if cluster != s.main || !s.addAsked[id] {
			s.failf("valid view %s adds node %d, which no operator asked to add to cluster %016x", key, id, cluster)
		}
	}
	for _, id := range removed {
		if cluster != s.main || !s.removeAsked[id] {
			s.failf("valid view %s removes node %d, which no operator asked to remove", key, id)
		}
	}
	if cluster == s.main && s.strayIdx >= 0 {
		if id := s.nodes[s.strayIdx].id; slices.Contains(v.Members, id) {
			s.failf("valid view %s of the main cluster counts the stray node %d", key, id)
		}
	}
}

// countMemberChange counts the members the newest valid view v of the main
// cluster added and removed, against those of the newest valid view
// before it.
func (s *electionSim) countMemberChange(v wire.View) {
	before := s.members()
	for _, id := range v.Members {
		if !slices.Contains(before, id) {
			s.res.Added++
			s.memberSince[id] = s.tick
		}
	}
	for _, id := range before {
		if !slices.Contains(v.Members, id) {
			s.res.Removed++
		}
	}
}

// covers reports whether later, a valid view, knows where the lock table of
// the earlier valid view is: it takes its table from earlier or a newer
// view, or it carries earlier's leaders and previous view unchanged.
func covers(later, earlier wire.View) bool {
	return later.PrevEpoch >= earlier.Epoch ||
		slices.Equal(later.Leaders, earlier.Leaders) && later.PrevEpoch == earlier.PrevEpoch
}

func (s *electionSim) adopt(i int, v wire.View) {
	n := s.nodes[i]
	c := n.e.Cluster()
	if w, ok := s.valid[c][v.Epoch]; !ok || viewKey(w) != viewKey(v) {
		s.failf("node %d adopted %s, which no majority of its members and previous members accepted", i+1, viewKey(v))
	}
	if v.Epoch <= n.adopted {
		s.failf("node %d adopted epoch %d after epoch %d", i+1, v.Epoch, n.adopted)
	}
	n.adopted = v.Epoch
	if n.codec == uint64(wire.Version) {
		s.checkLevel(c, i, v)
	}
}

// checkLevel checks the level of v, which node i of the new release just
// learned as valid: the cluster's codec never falls, so no node of the
// new release learns a view of a lower level than one a node of it
// learned at an earlier epoch. (A node of the release before drops
// levels; it does not count.)
func (s *electionSim) checkLevel(cluster uint64, i int, v wire.View) {
	if s.levels[cluster] == nil {
		s.levels[cluster] = map[uint64]uint64{}
	}
	for e, lv := range s.levels[cluster] {
		if e < v.Epoch && v.Codec() < lv || e > v.Epoch && lv < v.Codec() {
			s.failf("node %d learned %s of codec %d, and a node of the new release learned epoch %d of codec %d: the cluster's codec fell",
				i+1, viewKey(v), v.Codec(), e, lv)
		}
	}
	s.levels[cluster][v.Epoch] = max(s.levels[cluster][v.Epoch], v.Codec())
}

// changed checks the end of a membership change the operator started.
func (s *electionSim) changed(i int, c election.ChangeResult) {
	if c.Err != nil {
		s.res.ChangesLost++
		s.tracef("node %d: %s lost: %v", i+1, c.Change, c.Err)
		return
	}
	s.res.Changes++
	v, ok := s.valid[s.nodes[i].e.Cluster()][c.Epoch]
	switch {
	case !ok:
		s.failf("node %d reports %s committed in epoch %d, which is not valid", i+1, c.Change, c.Epoch)
	case c.Change.Add != 0 && !slices.Contains(v.Members, c.Change.Add),
		c.Change.Remove != 0 && slices.Contains(v.Members, c.Change.Remove):
		s.failf("node %d reports %s committed in %s, which does not carry it", i+1, c.Change, viewKey(v))
	}
	s.tracef("node %d: %s committed in epoch %d", i+1, c.Change, c.Epoch)
}

// settled checks liveness: every node that is up and not stale is ready,
// on the same view as every other node of its cluster. The main cluster
// is let off when too few healthy members are left to elect.
func (s *electionSim) settled(settle int64) {
	// The main cluster is let off when too few healthy members are left
	// for a majority, or (by design, until an operator removes the lost
	// ones) to lead; but not when only the check-in keeps a node from
	// voting for that removal, unless that gap is left out.
	electable := true
	switch {
	case !s.quorate() || s.restoredBlocked():
		electable = false
		s.res.NoQuorum++
		s.tracef("liveness of the main cluster not checked: too few healthy members")
	case !s.candidates():
		electable = false
		s.res.NoQuorum++
		s.tracef("liveness of the main cluster not checked: too few healthy candidates, and no operator removed the lost ones")
	}
	views := map[uint64][]string{}
	for i, n := range s.nodes {
		if n.e == nil || n.stale {
			continue
		}
		c := n.e.Cluster()
		if c == 0 && n.kind == joiner {
			c = s.main // it has not heard from the cluster it joins yet
		}
		if c == s.main && !electable {
			continue
		}
		st := n.e.Status()
		if !st.Ready {
			for j, o := range s.nodes { // what every node says, for the reader
				if o.e != nil {
					s.tracef("node %d: %s", j+1, o.e.Status().Reason)
				}
			}
			s.failf("liveness: node %d (%s) not ready %d ticks after faults stopped: %s", i+1, n.kind, settle, st.Reason)
			return
		}
		key := viewKey(st.View)
		if n.codec == uint64(wire.Version) {
			key += fmt.Sprintf(" codec %d", st.View.Codec()) // the new release's copies come whole
		} else {
			key += fmt.Sprintf(" codec %d", wire.View{Level: s.proposed[[2]uint64{c, st.View.Epoch}]}.Codec())
		}
		views[c] = append(views[c], key)
	}
	for _, c := range slices.Sorted(maps.Keys(views)) {
		vs := slices.Compact(slices.Sorted(slices.Values(views[c])))
		if len(vs) != 1 {
			s.failf("liveness: nodes of cluster %016x settled on different views: %s", c, strings.Join(vs, " "))
		}
	}
}

// quorate reports whether the main cluster keeps a majority of healthy
// members and previous members in its newest valid view and in every newer
// view a live node accepted (a continuation may have to finish it).
func (s *electionSim) quorate() bool {
	cur := s.current()
	views := []wire.View{cur}
	for _, n := range s.nodes {
		if n.e != nil && n.persisted != nil && n.persisted.Cluster == s.main && n.persisted.Accepted.Epoch > cur.Epoch {
			views = append(views, n.persisted.Accepted)
		}
	}
	for _, v := range views {
		for _, set := range [][]wire.NodeID{v.Members, v.PrevMembers} {
			if len(set) > 0 && s.up(set) < election.Quorum(len(set)) {
				return false
			}
		}
	}
	return true
}

// up counts the nodes of set that serve the main cluster.
func (s *electionSim) up(set []wire.NodeID) int {
	k := 0
	for _, id := range set {
		if s.serving(id) {
			k++
		}
	}
	return k
}

// candidates reports whether the main cluster has the leaders it needs:
// every leader of its newest valid view up, or enough healthy candidates
// (three, or all members) to elect others.
func (s *electionSim) candidates() bool {
	cur := s.current()
	if cur.Epoch > 0 && s.up(cur.Leaders) == len(cur.Leaders) {
		return true
	}
	members := s.members()
	cands := 0
	for _, id := range members {
		if s.serving(id) && !s.node(id).off {
			cands++
		}
	}
	return cands >= min(3, len(members))
}

// blockedCheckIn reports whether n, up in the main cluster and not stale,
// cannot check in: fewer than a majority of the other members it knows
// serve.
func (s *electionSim) blockedCheckIn(n *electionNode) bool {
	if n.e == nil || n.stale || n.e.Cluster() != s.main || n.e.CheckedIn() {
		return false
	}
	members := n.e.Members()
	if !slices.Contains(members, n.id) {
		return false
	}
	up := 0
	for _, id := range members {
		if id != n.id && s.serving(id) {
			up++
		}
	}
	return up < election.Quorum(len(members)-1)
}

// vouch: the operator vouches for the store of a member that cannot check
// in (sluice members vouch), when its data directory was never restored
// from a copy or wiped; a restored one it replaces by the runbook instead.
func (s *electionSim) vouch() {
	for i, n := range s.nodes {
		if !s.blockedCheckIn(n) || n.vouched || n.disk != "" || s.tick-n.since < 30 {
			continue
		}
		n.vouched = true
		if err := n.e.VouchStore(); err != nil {
			s.tracef("operator: vouch for node %d refused: %v", n.id, err)
			continue
		}
		s.res.Vouched++
		s.tracef("operator: vouches for node %d's store", n.id)
		s.ready(i)
	}
}

// restoredBlocked reports whether a member that cannot check in had its
// store restored or wiped: the operator cannot vouch for it, and with the
// members that are down it makes too few healthy ones.
func (s *electionSim) restoredBlocked() bool {
	for _, n := range s.nodes {
		if s.blockedCheckIn(n) && n.disk != "" {
			s.tracef("node %d cannot check in, and its store was restored: no quorum of healthy members", n.id)
			return true
		}
	}
	return false
}
