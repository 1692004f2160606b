package election

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// Config configures an Election. Zero values of the tick fields mean their
// defaults.
type Config struct {
	// Node is this node on the wire. Required.
	Node wire.NodeID
	// ID is this node's election id for this start. Required.
	ID ID
	// Incarnation and Nonce are this life of the node: the store's
	// counter, raised at every start, and a random number drawn at start.
	// Members record the newest life of every node; a life older than one
	// they know (a store lost or restored from a copy) is refused.
	// Incarnation is required.
	Incarnation uint32
	Nonce       uint64
	// StoreAge is the age of the node's whole store as found at start:
	// how many changes it holds. Hellos tell the age (SetStoreAge keeps it
	// current), so a store restored from an older copy of the life the
	// members heard is refused. Zero: the store has no age of its own, and
	// the age of the election's record counts (Persisted.Writes), which
	// sees only the election's own writes.
	StoreAge uint64
	// Bootstrap are the members the cluster was born with, on a node's
	// first start; nil on a first start means joining an existing cluster
	// as a non-member (the cluster is learned from the first hello that
	// carries a valid view). Once persisted, the persisted ones rule and a
	// different non-nil Bootstrap is refused (ErrBadConfig).
	Bootstrap []wire.NodeID
	// Peers are other nodes to greet; more come by AddPeer and by views.
	Peers []wire.NodeID
	// HelloTicks is the period of hellos. Default 5.
	HelloTicks int64
	// DeadTicks is how long a silent node counts as alive. Default 20.
	DeadTicks int64
	// VoterHelloTicks is how often a node that is not a member greets the
	// voters once it knows them. The voters' hellos keep its view and its
	// readiness; its own only keep it known to them (an operator's add
	// needs it heard within DeadTicks), and a voter hears them from the
	// whole fleet: they can be rarer. Zero: 3 times HelloTicks, which
	// must stay well within DeadTicks.
	VoterHelloTicks int64
	// ForgetTicks is how long a node that is not a member (a frontend's
	// agent that joined by address) may stay silent before this node
	// forgets it: no more hellos to it, and it leaves Status. A web tier
	// replaces machines all the time, and a voter greets every node it
	// knows of: without forgetting, its hellos and its memory would grow
	// with every machine the fleet ever had. A node that comes back is
	// learned again from its first hello or the mesh (AddPeer). Members,
	// Config.Peers and the nodes of a change under way are never
	// forgotten. Zero: 300 times DeadTicks; negative: never.
	ForgetTicks int64
	// RetryTicks is how long a coordinator lets an election round run
	// before it starts another with a higher epoch. A round that ran out
	// doubles the time of the next (up to 16 times RetryTicks), and a
	// round always gets four of the slowest round trips seen, so links
	// slower than RetryTicks still elect. Default 15.
	RetryTicks int64
	// Codec is the codec this node offers the cluster's level
	// (wire.View.Level): the newest it reads, or less to hold the level
	// back so that the previous release can still take over. The level
	// rises to the lowest codec the alive members offer, never falls, and
	// a node offering less than it does not vote. Zero: wire.MinVersion,
	// which never raises it.
	Codec uint64
	// Release is this node's release, told in hellos ("" for none).
	Release string
	// Mutant breaks the election on purpose, for mutation tests only; it
	// takes effect only in builds with the sluicemutants tag
	// (core/mutation).
	Mutant Mutant
}

// Mutant names a deliberate bug, for the simulator's mutation test.
type Mutant uint16

const (
	// MutantTwoViewsPerEpoch: a node promises and accepts an epoch it has
	// already promised or accepted, so two views may win one epoch.
	MutantTwoViewsPerEpoch Mutant = 1 << iota
	// MutantPrevFromOwnView: the coordinator ignores a newer view accepted
	// by a promiser and names its own valid view as the previous one, which
	// may be older than a view a quorum accepted.
	MutantPrevFromOwnView
	// MutantNonMemberVotes: promises and accepts count from any node, not
	// only from members.
	MutantNonMemberVotes
	// MutantNoCheckIn: a node votes and serves at once after a start, even
	// with a store that lost or rolled back its promises.
	MutantNoCheckIn
	// MutantNoOldQuorum: a view that changes the members is valid with a
	// majority of its own members, without one of the previous members.
	MutantNoOldQuorum
	// MutantNoWriteMarks: a member ignores the age of a node's store that
	// its hellos told: a store restored from an older copy of its newest
	// life passes.
	MutantNoWriteMarks
	// MutantClimbingLives: a member accepts any life newer than the one it
	// knows, whether or not the store remembers that one: a store wiped or
	// rolled back passes once its incarnation climbed past it.
	MutantClimbingLives
	// MutantLevelBackwards: the coordinator sets a view's level from the
	// codecs the alive members offer alone, not at least the previous
	// view's, and acceptors and followers take a view that lowers it.
	MutantLevelBackwards
	// MutantNonVoterGreetsAll: a node that is not a voter greets every
	// node it knows of, as a voter does, so that its hellos, and the peers
	// it talks to, grow with the fleet (the simulator's fleet check).
	MutantNonVoterGreetsAll
)

// Persisted is what a node must find again after a restart. It is handed
// out in Ready.Persist whenever it changed; it must be durable before the
// messages of the same Ready are sent.
type Persisted struct {
	// Cluster is the id of the node's cluster, Bootstrap its first members.
	Cluster   uint64
	Bootstrap []wire.NodeID
	Promised  uint64    // highest epoch promised
	Accepted  wire.View // last view accepted
	Valid     wire.View // last view known to be valid
	// Lives is the newest life of every node that checked in here.
	Lives map[wire.NodeID]Life
	// Confirmed is this node's newest life that a majority of the other
	// members confirmed (zero: none yet on this store); Since are the
	// lives started after it, this one last. A check-in carries both, so
	// a member tells a store that remembers the life it knows from one
	// that lost it, however high the lost store's incarnation climbed.
	Confirmed Life
	Since     []Life
	// Writes counts the times this record was handed out to be stored:
	// its age. Hellos tell it to the other nodes, so a store restored
	// from an older copy of the life they saw is refused at its check-in.
	Writes uint64
}

func (p *Persisted) clone() *Persisted {
	c := *p
	c.Bootstrap = slices.Clone(p.Bootstrap)
	c.Accepted = p.Accepted.Clone()
	c.Valid = p.Valid.Clone()
	c.Lives = maps.Clone(p.Lives)
	c.Since = slices.Clone(p.Since)
	return &c
}

// Ready is the output since the last Advance.
type Ready struct {
	Persist  *Persisted
	Messages []wire.Message
	// View, when set, is a new valid view for the lock core. It is handed
	// out only once the node checked in.
	View *wire.View
	// Changes are the ends of membership changes started here.
	Changes []ChangeResult
}

// Member is one node as this node sees it.
type Member struct {
	Node   wire.NodeID
	ID     string // empty until its hello arrived
	Alive  bool
	Leader bool
	Off    bool
	// Voter: a member of the current view (or of the bootstrap).
	Voter bool
	// Codec is what its hellos offer the cluster's level (MinVersion for
	// a release before levels; 0 until a hello arrived); Release its
	// release ("" when its hellos do not say).
	Codec   uint64
	Release string
}

// Status is what `sluice status` shows of the election.
type Status struct {
	Ready       bool
	Reason      string // why not ready (NO_LOCK); empty when ready
	View        wire.View
	Coordinator bool
	Members     []Member
	Cluster     uint64
	CheckedIn   bool
}

// Stats counts rejected input.
type Stats struct {
	BadIDs, BadViews, StaleViews, Rejections uint64
	// Rounds started, and Continuations: rounds that proposed again a view
	// a promiser accepted and the coordinator did not know to be valid.
	Rounds, Continuations uint64
	// Foreign: messages of another cluster, refused. StaleLives: check-ins
	// of a life older than one known here, refused. NotCheckedIn: votes
	// asked of this node before it checked in, ignored.
	Foreign, StaleLives, NotCheckedIn uint64
	// BelowLevel: votes of nodes that offer less than the cluster's codec,
	// and views that would lower it, refused.
	BelowLevel uint64
	// Forgotten: nodes that are not members forgotten after a long
	// silence (Config.ForgetTicks).
	Forgotten uint64
}

type member struct {
	id    ID
	heard int64
	// codec is what its hellos offer (MinVersion when they say nothing);
	// release its release.
	codec   uint64
	release string
}

type round struct {
	epoch   uint64
	started int64
	// config: the members at the start (valid view's, or bootstrap).
	config   []wire.NodeID
	promises map[wire.NodeID]wire.View
	voted    map[wire.NodeID]bool // promisers
	accepts  map[wire.NodeID]bool
	proposal *wire.View // set once the promises made a quorum
	change   *Change    // an operator's membership change, if any
}

// Election is one node's election state machine. Not safe for concurrent use.
type Election struct {
	cfg Config
	// peers are the nodes to greet: Config.Peers and those added since;
	// added is when each of the latter was (see forgetSilent).
	peers     []wire.NodeID
	added     map[wire.NodeID]int64
	now       int64
	lastHello int64
	// lastVoterHello: when this node, not a member, last greeted the
	// voters (Config.VoterHelloTicks).
	lastVoterHello int64
	p              Persisted
	members        map[wire.NodeID]*member
	seenEpoch      uint64
	round          *round
	stats          Stats
	// retry is the time the next round gets; rtt the slowest promise seen.
	retry, rtt int64
	checkedIn  bool
	checkAcks  map[wire.NodeID]bool
	// vouched: the operator vouched that the store is this node's own
	// (see VouchStore).
	vouched bool
	// foreign is the last message of another cluster heard (nil: none):
	// while not ready, and while as recent as a live peer's, the status
	// says so, since it is the usual mistake of a node added with
	// --initial-members instead of --join.
	foreign *foreignHeard
	// startWrites is the age of the store this life found (see
	// Persisted.Writes); marks the newest age heard of each node's life.
	startWrites uint64
	marks       map[wire.NodeID]mark
	storeAge    uint64 // durable age of the whole store (0: none; see Config.StoreAge)
	stale       *StaleError

	persist bool
	msgs    []wire.Message
	view    *wire.View
	changes []ChangeResult
	handed  int
	// what the last Ready handed out, so Advance clears only that
	handedPersist bool
	handedView    *wire.View
	handedChanges int
}

// New starts an election from what it persisted (nil on a first start).
func New(cfg Config, persisted *Persisted) (*Election, error) {
	if err := cfg.ID.Validate(); err != nil {
		return nil, err
	}
	if cfg.Node == 0 || cfg.Incarnation == 0 {
		return nil, fmt.Errorf("%w: needs a node id and an incarnation", ErrBadConfig)
	}
	if len(cfg.Bootstrap) > wire.MaxMembers {
		return nil, fmt.Errorf("%w: %d bootstrap members, at most %d", ErrBadConfig, len(cfg.Bootstrap), wire.MaxMembers)
	}
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.HelloTicks, 5)
	def(&cfg.DeadTicks, 20)
	def(&cfg.RetryTicks, 15)
	def(&cfg.ForgetTicks, 300*cfg.DeadTicks)
	def(&cfg.VoterHelloTicks, 3*cfg.HelloTicks)
	cfg.Codec = max(cfg.Codec, uint64(wire.MinVersion))
	cfg.Peers = slices.Clone(cfg.Peers)
	peers := slices.Clone(cfg.Peers)
	boot := slices.Compact(slices.Sorted(slices.Values(cfg.Bootstrap)))
	e := &Election{cfg: cfg, peers: peers, added: map[wire.NodeID]int64{}, members: map[wire.NodeID]*member{cfg.Node: {id: cfg.ID, codec: cfg.Codec, release: cfg.Release}}, lastHello: -cfg.HelloTicks, lastVoterHello: -cfg.VoterHelloTicks,
		retry: cfg.RetryTicks, checkAcks: map[wire.NodeID]bool{}, marks: map[wire.NodeID]mark{}}
	if persisted != nil {
		e.p = *persisted.clone()
	}
	e.startWrites = e.p.Writes
	if cfg.StoreAge > 0 {
		e.startWrites, e.storeAge = cfg.StoreAge, cfg.StoreAge
	}
	switch {
	case e.p.Cluster != 0 && len(boot) > 0 && !slices.Equal(boot, e.p.Bootstrap):
		return nil, fmt.Errorf("%w: bootstrap members %v differ from the %v this node's cluster was born with",
			ErrBadConfig, boot, e.p.Bootstrap)
	case e.p.Cluster == 0 && len(boot) > 0:
		e.p.Cluster, e.p.Bootstrap, e.persist = ClusterID(boot), boot, true
	}
	for _, id := range e.Members() {
		e.AddPeer(id)
	}
	// This life joins the ones the store remembers; past the cap the
	// oldest go (a member that knows only one of those refuses).
	e.p.Since, e.persist = append(e.p.Since, Life{Incarnation: cfg.Incarnation, Nonce: cfg.Nonce}), true
	if over := len(e.p.Since) - (wire.MaxLives - 1); over > 0 {
		e.p.Since = slices.Delete(e.p.Since, 0, over)
	}
	if e.cfg.Mutant.on(MutantNoCheckIn) {
		e.checkedIn = true
		if e.p.Valid.Epoch > 0 {
			v := e.p.Valid.Clone()
			e.view = &v
		}
	}
	e.updateCheckedIn()
	return e, nil
}

// AddPeer makes id a peer: hellos go to it from now on (a voter's; a
// node that is not a voter greets the voters only). The runtime calls it
// for nodes the mesh learned after the start (announcements, inbound
// connections), so that every voter greets every node.
func (e *Election) AddPeer(id wire.NodeID) {
	if id != 0 && id != e.cfg.Node && !slices.Contains(e.peers, id) {
		e.peers = append(e.peers, id)
		e.added[id] = e.now
	}
}

// forgetSilent forgets the nodes that are neither members, configured
// peers nor part of a change under way, and were not heard from (nor
// added) for ForgetTicks (see Config.ForgetTicks). The marks of their
// lives stay: a node that comes back with a store rolled back is still
// refused at its check-in.
func (e *Election) forgetSilent() {
	if e.cfg.ForgetTicks < 0 {
		return
	}
	keep := map[wire.NodeID]bool{e.cfg.Node: true}
	for _, id := range e.cfg.Peers {
		keep[id] = true
	}
	for _, id := range e.Members() {
		keep[id] = true
	}
	if r := e.round; r != nil {
		for _, id := range r.config {
			keep[id] = true
		}
		if r.change != nil {
			keep[r.change.Add], keep[r.change.Remove] = true, true
		}
		if r.proposal != nil {
			for _, id := range r.proposal.Members {
				keep[id] = true
			}
		}
	}
	silent := func(id wire.NodeID) bool {
		if keep[id] {
			return false
		}
		last, ok := e.added[id]
		if m := e.members[id]; m != nil {
			last, ok = max(last, m.heard), true
		}
		return ok && e.now-last > e.cfg.ForgetTicks
	}
	e.peers = slices.DeleteFunc(e.peers, func(id wire.NodeID) bool {
		if !silent(id) {
			return false
		}
		if e.members[id] == nil {
			e.stats.Forgotten++ // counted below otherwise
		}
		delete(e.added, id)
		return true
	})
	for id := range e.members {
		if silent(id) {
			delete(e.members, id)
			delete(e.added, id)
			e.stats.Forgotten++
		}
	}
}

// SetStoreAge tells the election the durable age of the node's whole
// store (see Config.StoreAge); it never goes down.
func (e *Election) SetStoreAge(age uint64) { e.storeAge = max(e.storeAge, age) }

// age is the durable age of the node's store that hellos tell.
func (e *Election) age() uint64 {
	if e.storeAge > 0 {
		return e.storeAge
	}
	return e.p.Writes
}

// View is the valid view this node knows (epoch 0: none).
func (e *Election) View() wire.View { return e.p.Valid.Clone() }

// Codec is the cluster's codec: the level of the valid view (MinVersion
// before the first). It only reads.
func (e *Election) Codec() uint64 { return e.p.Valid.Codec() }

// Stats returns the counters.
func (e *Election) Stats() Stats { return e.stats }

func (e *Election) alive(id wire.NodeID) bool {
	m := e.members[id]
	return m != nil && (id == e.cfg.Node || e.now-m.heard <= e.cfg.DeadTicks)
}

// aliveIDs are the members alive and known, in id order, smallest first.
func (e *Election) aliveIDs() []wire.NodeID {
	var out []wire.NodeID
	for _, id := range e.Members() {
		if e.alive(id) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b wire.NodeID) int {
		return cmp.Or(e.members[a].id.Compare(e.members[b].id), cmp.Compare(a, b))
	})
	return out
}

// wanted is how many leaders a view of these members has: three, or all
// of them when there are fewer.
func wanted(members []wire.NodeID) int { return min(3, len(members)) }

// candidates are the alive members of set that may lead, best first:
// sitting leaders compete with priority 0.
func (e *Election) candidates(set []wire.NodeID) []wire.NodeID {
	// A node below the cluster's codec may be a release that cannot read
	// what the lock table's messages may hold: it does not lead.
	may := func(id wire.NodeID) bool {
		return e.members[id].id.Priority != Off && e.belowLevel(id, e.p.Valid.Codec()) == ""
	}
	var out []wire.NodeID
	for _, id := range e.aliveIDs() {
		if slices.Contains(set, id) && may(id) {
			out = append(out, id)
		}
	}
	// Nodes added to the set but not yet members count too.
	for _, id := range set {
		if !slices.Contains(out, id) && !e.isMember(id) && e.alive(id) && may(id) {
			out = append(out, id)
		}
	}
	rank := func(id wire.NodeID) ID {
		x := e.members[id].id
		if slices.Contains(e.p.Valid.Leaders, id) {
			x.Priority = 0
		}
		return x
	}
	slices.SortStableFunc(out, func(a, b wire.NodeID) int {
		return cmp.Or(rank(a).Compare(rank(b)), cmp.Compare(a, b))
	})
	return out
}

// blocked says why no election can run now, or "" when one can.
func (e *Election) blocked() string {
	members := e.Members()
	if len(members) == 0 {
		return "this node joined no cluster yet"
	}
	alive, q := len(e.aliveIDs()), Quorum(len(members))
	if alive < q {
		return fmt.Sprintf("%d of %d members know each other, an election needs %d", alive, len(members), q)
	}
	if c := len(e.candidates(members)); c < wanted(members) {
		return fmt.Sprintf("%d candidates are up, an election needs %d (the others are off or down)", c, wanted(members))
	}
	return ""
}

// starting reports whether this node is too fresh to judge others: it
// has not had the time to hear every live node's hello. Without it a node
// that just started takes leaders it has not heard from yet for dead, and
// replaces a view that is fine (seen on a real mesh, where a new node's
// hellos and its peers' arrive 200 ms apart).
func (e *Election) starting() bool {
	if len(e.Members()) == 1 {
		return false // nobody to hear
	}
	if e.p.Valid.Epoch > 0 {
		return e.now <= e.cfg.DeadTicks
	}
	return e.now <= 2*e.cfg.HelloTicks
}

// needed reports whether the valid view must be replaced: no view, a
// leader lost or no longer a member, or fewer leaders than the members
// allow when more candidates are up.
func (e *Election) needed() bool {
	if e.p.Valid.Epoch == 0 {
		return true
	}
	for _, l := range e.p.Valid.Leaders {
		if !e.alive(l) || !e.isMember(l) || e.belowLevel(l, e.p.Valid.Codec()) != "" {
			return true
		}
	}
	members := e.Members()
	if e.level(members, e.p.Valid.Level) > e.p.Valid.Level {
		return true // every member offers a newer codec: raise the level
	}
	return len(e.p.Valid.Leaders) < wanted(members) && len(e.candidates(members)) > len(e.p.Valid.Leaders)
}

// offered is the codec node id offers the cluster's level: what its last
// hello said while it is alive, MinVersion otherwise.
func (e *Election) offered(id wire.NodeID) uint64 {
	if m := e.members[id]; m != nil && e.alive(id) {
		return max(m.codec, uint64(wire.MinVersion))
	}
	return uint64(wire.MinVersion)
}

// level is the level of a new view of members: the lowest codec they
// offer, and never below floor, the level of the newest valid view (which
// every earlier valid view's is at most). Zero stands for MinVersion, as
// in views made before levels existed, so that such a view looks the same
// to both releases.
func (e *Election) level(members []wire.NodeID, floor uint64) uint64 {
	low := uint64(0)
	for i, id := range members {
		if c := e.offered(id); i == 0 || c < low {
			low = c
		}
	}
	if !e.cfg.Mutant.on(MutantLevelBackwards) {
		low = max(low, floor)
	}
	if low <= uint64(wire.MinVersion) {
		return 0
	}
	return low
}

// belowLevel says why node id, this one included, must not vote at level
// (a codec): it offers less, so it may be an older release that cannot
// read what the level allows; "" when it may. A release before levels
// never asks: its views have no level, and acceptors refuse them as
// views that would lower it.
func (e *Election) belowLevel(id wire.NodeID, level uint64) string {
	if level <= uint64(wire.MinVersion) {
		return ""
	}
	m := e.members[id]
	if m == nil || m.id.Address == "" {
		return fmt.Sprintf("node %d never said hello here, and the cluster's codec is %d", id, level)
	}
	if c := max(m.codec, uint64(wire.MinVersion)); c < level {
		return fmt.Sprintf("node %d (release %s) offers codec %d, and the cluster's codec is %d", id, releaseOr(m.release), c, level)
	}
	return ""
}

// voteBelowLevel is belowLevel for a vote (a promise or an accept), which
// says itself what its sender offers: a node restarted with another
// release votes with what it runs now, whatever its last hello said.
func (e *Election) voteBelowLevel(m wire.Message, level uint64) string {
	if mb := e.members[m.From]; mb != nil {
		mb.codec = m.Codec
	}
	if c := max(m.Codec, uint64(wire.MinVersion)); c < level {
		release := ""
		if mb := e.members[m.From]; mb != nil {
			release = mb.release
		}
		return fmt.Sprintf("node %d (release %s) votes offering codec %d, and the cluster's codec is %d", m.From, releaseOr(release), c, level)
	}
	return ""
}

// releaseOr is a release for messages: "before 0.9" when a node's hellos
// do not say.
func releaseOr(r string) string {
	if r == "" {
		return "before 0.9"
	}
	return r
}

func (e *Election) send(m wire.Message) {
	m.From, m.Cluster, m.ClusterSize = e.cfg.Node, e.p.Cluster, uint64(len(e.p.Bootstrap))
	e.msgs = append(e.msgs, m)
}

// sendAll sends m to every node this one knows of: peers, nodes heard
// from, and members; only to the alive ones when alive is set.
func (e *Election) sendAll(m wire.Message, alive bool) {
	targets := map[wire.NodeID]bool{}
	for _, p := range e.peers {
		targets[p] = true
	}
	for id := range e.members {
		targets[id] = true
	}
	for _, id := range e.Members() {
		targets[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(targets)) {
		if id == e.cfg.Node && m.Kind == wire.KindHello || alive && !e.alive(id) {
			continue
		}
		m.To = id
		e.send(m)
	}
}

// greet sends a hello. A voter greets every node it knows of: the
// others learn the view and hear the leaders from it. A node that is not
// a voter greets the voters only, once it knows them, and less often
// (VoterHelloTicks): the hellos of a fleet's agents to one another would
// grow with the fleet, and no vote or readiness rests on them. Before it
// knows any voter it greets its configured peers and the nodes that
// greeted it, to find its cluster (a node that is not a voter answers it:
// see hello), not every node the mesh told it of.
func (e *Election) greet(hello wire.Message) {
	members := e.Members()
	if slices.Contains(members, e.cfg.Node) || e.cfg.Mutant.on(MutantNonVoterGreetsAll) {
		e.sendAll(hello, false)
		return
	}
	targets := members
	if len(members) > 0 {
		if e.now-e.lastVoterHello < e.cfg.VoterHelloTicks {
			return
		}
		e.lastVoterHello = e.now
	} else {
		targets = slices.Clone(e.cfg.Peers)
		for id := range e.members {
			if id != e.cfg.Node && !slices.Contains(targets, id) {
				targets = append(targets, id)
			}
		}
		slices.Sort(targets)
	}
	for _, id := range targets {
		hello.To = id
		e.send(hello)
	}
}

// helloMessage is this node's hello. The age told is durable: the Ready
// that handed it out was stored before its messages left. A life checked
// in says so with its nonce: members added since learn it.
func (e *Election) helloMessage() wire.Message {
	hello := wire.Message{Kind: wire.KindHello, ElectionID: e.cfg.ID.String(), View: e.p.Valid.Clone(),
		Incarnation: e.cfg.Incarnation, StoreAge: e.age(), Codec: e.cfg.Codec, Release: e.cfg.Release}
	if e.checkedIn && !e.cfg.Mutant.on(MutantNoCheckIn) {
		hello.Nonce = e.cfg.Nonce
	}
	return hello
}

// Tick advances time: hellos, check-ins, and the coordinator's elections.
func (e *Election) Tick() {
	e.now++
	if e.stale != nil {
		return
	}
	if e.now-e.lastHello >= e.cfg.HelloTicks {
		e.lastHello = e.now
		e.forgetSilent()
		e.greet(e.helloMessage())
		if !e.checkedIn {
			e.checkIn()
		}
	}
	if r := e.round; r != nil && e.now-r.started >= max(e.retry, 4*e.rtt) {
		// Out of time: slow links, or lost messages. The next round gets
		// twice the time, up to a cap.
		e.endChange(fmt.Errorf("%w: the round of epoch %d ran out of time", ErrChangeLost, r.epoch))
		e.round = nil
		e.retry = min(2*e.retry, 16*e.cfg.RetryTicks)
	}
	// Only a voter coordinates: the others, a fleet's agents, stop here
	// at every tick.
	if e.round != nil || !e.checkedIn || !e.isMember(e.cfg.Node) {
		return
	}
	alive := e.aliveIDs()
	coordinator := len(alive) > 0 && alive[0] == e.cfg.Node
	if !coordinator || !e.needed() || e.blocked() != "" || e.starting() {
		return
	}
	e.startRound(nil)
}

// startRound prepares an epoch above every one seen, for an election or
// for an operator's change.
func (e *Election) startRound(c *Change) {
	e.endChange(fmt.Errorf("%w: replaced by a newer change", ErrChangeLost))
	epoch := max(e.p.Promised, e.p.Accepted.Epoch, e.p.Valid.Epoch, e.seenEpoch) + 1
	e.seenEpoch = epoch
	e.stats.Rounds++
	e.round = &round{epoch: epoch, started: e.now, config: e.Members(), promises: map[wire.NodeID]wire.View{},
		voted: map[wire.NodeID]bool{}, accepts: map[wire.NodeID]bool{}, change: c}
	if c != nil {
		// The change needs the new member's vote too: greet it.
		e.AddPeer(c.Add)
	}
	e.sendAll(wire.Message{Kind: wire.KindPrepare, View: wire.View{Epoch: epoch}}, true)
}

// Step handles one message. Malformed or stale input is counted and
// returned as an error; it changes nothing.
func (e *Election) Step(m wire.Message) error {
	if m.To != e.cfg.Node || m.From == 0 {
		e.stats.BadViews++
		return fmt.Errorf("%w: message for %d from %d at node %d", ErrBadView, m.To, m.From, e.cfg.Node)
	}
	if e.stale != nil {
		return e.stale
	}
	if _, ok := e.added[m.From]; ok {
		// Alive, even when refused below: a node that joins greets
		// without a cluster until a hello of this one tells it.
		e.added[m.From] = e.now
	} else if m.Kind == wire.KindHello && m.Cluster == 0 && e.p.Cluster != 0 {
		// A node looking for its cluster that this one forgot (it was
		// silent long): greeted again, it learns the cluster, as the
		// mesh's word had this node greet it at first.
		e.AddPeer(m.From)
	}
	if err := e.checkCluster(m); err != nil {
		return err
	}
	switch m.Kind {
	case wire.KindHello:
		return e.hello(m)
	case wire.KindCheckIn:
		return e.onCheckIn(m)
	case wire.KindCheckInAck:
		return e.onCheckInAck(m)
	}
	if m.View.Epoch == 0 && m.Kind != wire.KindPromise && m.Kind != wire.KindAccepted {
		e.stats.BadViews++
		return fmt.Errorf("%w: %s without an epoch", ErrBadView, m.Kind)
	}
	e.seenEpoch = max(e.seenEpoch, m.View.Epoch, m.PrepareEpoch, m.Promised)
	switch m.Kind {
	case wire.KindPrepare:
		return e.onPrepare(m)
	case wire.KindPromise:
		return e.onPromise(m)
	case wire.KindAccept:
		return e.onAccept(m)
	case wire.KindAccepted:
		return e.onAccepted(m)
	case wire.KindCommit:
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
		if m.View.Epoch <= e.p.Valid.Epoch {
			e.stats.StaleViews++
			return fmt.Errorf("%w: commit of epoch %d, valid is %d", ErrStaleView, m.View.Epoch, e.p.Valid.Epoch)
		}
		return e.adoptNotBelow(m)
	}
	e.stats.BadViews++
	return fmt.Errorf("%w: kind %s is not the election's", ErrBadView, m.Kind)
}

// checkCluster refuses messages of another cluster. A node that joins
// learns its cluster from the first hello carrying a valid view.
func (e *Election) checkCluster(m wire.Message) error {
	if m.Cluster == e.p.Cluster && m.Cluster != 0 {
		return nil
	}
	if e.p.Cluster == 0 && m.Cluster != 0 && m.Kind == wire.KindHello && m.View.Epoch > 0 && len(m.View.Members) > 0 {
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
		e.p.Cluster, e.persist = m.Cluster, true
		return nil
	}
	e.stats.Foreign++
	e.foreign = &foreignHeard{from: m.From, cluster: m.Cluster, size: m.ClusterSize, at: e.now}
	if e.p.Cluster == 0 {
		return fmt.Errorf("%w: %s from node %d before this joining node learned its cluster", ErrForeign, m.Kind, m.From)
	}
	return fmt.Errorf("%w: %s from node %d of cluster %016x (%d bootstrap members); this node's cluster is %016x (%d bootstrap members)",
		ErrForeign, m.Kind, m.From, m.Cluster, m.ClusterSize, e.p.Cluster, len(e.p.Bootstrap))
}

func (e *Election) onPrepare(m wire.Message) error {
	if !e.checkedIn {
		e.stats.NotCheckedIn++
		return fmt.Errorf("%w: prepare of epoch %d", ErrNotCheckedIn, m.View.Epoch)
	}
	ep := m.View.Epoch
	if ep > e.p.Promised || e.cfg.Mutant.on(MutantTwoViewsPerEpoch) && ep == e.p.Promised {
		e.p.Promised, e.persist = ep, true
		e.send(wire.Message{Kind: wire.KindPromise, To: m.From, PrepareEpoch: ep, View: e.p.Accepted.Clone(), Codec: e.cfg.Codec})
		return nil
	}
	e.stats.Rejections++
	e.send(wire.Message{Kind: wire.KindPromise, To: m.From, PrepareEpoch: ep, Reject: true, Promised: e.p.Promised})
	return nil
}

func (e *Election) onPromise(m wire.Message) error {
	r := e.round
	if r == nil || r.proposal != nil || m.PrepareEpoch != r.epoch {
		return nil // an answer to a round that is over
	}
	if m.Reject {
		// A higher epoch exists; the next tick tries above it.
		e.endChange(fmt.Errorf("%w: node %d promised epoch %d to another coordinator", ErrChangeLost, m.From, m.Promised))
		e.round = nil
		return nil
	}
	if err := e.checkView(m.View, true); err != nil {
		return err
	}
	if why := e.voteBelowLevel(m, e.p.Valid.Codec()); why != "" {
		e.stats.BelowLevel++
		return fmt.Errorf("%w: promise not counted: %s", ErrBelowLevel, why)
	}
	r.promises[m.From], r.voted[m.From] = m.View.Clone(), true
	e.rtt = max(e.rtt*3/4, e.now-r.started)
	e.propose(r)
	return nil
}

// propose sends the round's proposal once the promises allow one. They
// must hold a majority of the members the round started with; and when
// a promiser accepted a view newer than this node's valid view, also a
// majority of that view's members and of its previous members: those
// are the majorities any later valid view needed, so no valid view is
// newer than the highest view the promisers accepted.
func (e *Election) propose(r *round) {
	// The members may have changed since the round started (a commit
	// arrived): a majority of the current ones is needed too.
	if !e.quorumOf(r.voted, r.config) || !e.quorumOf(r.voted, e.Members()) {
		return
	}
	var high wire.View
	// The level is at least every promiser's accepted view's: one of them
	// accepted the newest valid view or a later one, whatever this node's
	// own copy of the valid view lost on the way.
	floor := e.p.Valid.Level
	for _, id := range slices.Sorted(maps.Keys(r.promises)) {
		v := r.promises[id]
		if v.Epoch > high.Epoch {
			high = v
		}
		floor = max(floor, v.Level)
	}
	if high.Epoch > e.p.Valid.Epoch && !e.cfg.Mutant.on(MutantPrevFromOwnView) {
		if !e.quorumOf(r.voted, high.Members) || !e.quorumOf(r.voted, high.PrevMembers) {
			return // wait for more promises
		}
		// We cannot tell whether that view won. Propose it again as it
		// was (same leaders, members, previous view): if it won, its
		// leaders carry on with their table; if not, it wins now. Either
		// way the previous view a view names was valid, so its leaders
		// hold the lock table to hand over.
		e.stats.Continuations++
		e.endChange(fmt.Errorf("%w: another view change (epoch %d) was under way; try again", ErrChangeLost, high.Epoch))
		p := high.Clone()
		p.Epoch = r.epoch
		if !e.cfg.Mutant.on(MutantLevelBackwards) {
			p.Level = max(p.Level, floor) // a copy may have lost it
		}
		r.proposal = &p
	} else {
		old := e.Members()
		members := applyChange(old, r.change)
		leaders := e.pickLeaders(members)
		if leaders == nil {
			e.endChange(fmt.Errorf("%w: fewer than %d candidates to lead are up among %v", ErrChangeLost, wanted(members), members))
			e.round = nil
			return
		}
		prev := e.p.Valid
		r.proposal = &wire.View{Epoch: r.epoch, Leaders: leaders, PrevEpoch: prev.Epoch, PrevLeaders: slices.Clone(prev.Leaders),
			Members: members, PrevMembers: old, Level: e.level(members, floor)}
	}
	for _, id := range r.proposal.Members {
		e.AddPeer(id)
	}
	e.sendAll(wire.Message{Kind: wire.KindAccept, View: r.proposal.Clone()}, true)
}

// pickLeaders chooses the leaders of a view of members: the sitting
// leaders that are still alive members first, then the best candidates;
// nil when too few candidates are up.
func (e *Election) pickLeaders(members []wire.NodeID) []wire.NodeID {
	cands := e.candidates(members)
	if len(cands) < wanted(members) {
		return nil
	}
	leaders := slices.Clone(cands[:wanted(members)])
	slices.Sort(leaders)
	return leaders
}

func (e *Election) onAccept(m wire.Message) error {
	if err := e.checkView(m.View, false); err != nil {
		return err
	}
	if !e.checkedIn {
		e.stats.NotCheckedIn++
		return fmt.Errorf("%w: accept of epoch %d", ErrNotCheckedIn, m.View.Epoch)
	}
	ep := m.View.Epoch
	if lv, valid := m.View.Codec(), e.p.Valid.Codec(); lv < valid && !e.cfg.Mutant.on(MutantLevelBackwards) || lv > uint64(wire.Version) {
		// Never backwards; and a level above what this build reads asks for
		// what it cannot do.
		e.stats.BelowLevel++
		e.send(wire.Message{Kind: wire.KindAccepted, To: m.From, View: wire.View{Epoch: ep}, Reject: true, Promised: e.p.Promised})
		return fmt.Errorf("%w: the view of epoch %d has codec %d; the valid view's is %d and this build reads up to %d",
			ErrBelowLevel, ep, lv, valid, wire.Version)
	}
	if ep >= e.p.Promised && (e.p.Accepted.Epoch < ep || e.cfg.Mutant.on(MutantTwoViewsPerEpoch)) {
		e.p.Promised, e.p.Accepted, e.persist = ep, m.View.Clone(), true
		for _, id := range m.View.Members {
			e.AddPeer(id)
		}
		e.send(wire.Message{Kind: wire.KindAccepted, To: m.From, View: wire.View{Epoch: ep}, Codec: e.cfg.Codec})
		return nil
	}
	e.stats.Rejections++
	e.send(wire.Message{Kind: wire.KindAccepted, To: m.From, View: wire.View{Epoch: ep}, Reject: true, Promised: e.p.Promised})
	return nil
}

func (e *Election) onAccepted(m wire.Message) error {
	r := e.round
	if r == nil || r.proposal == nil || m.View.Epoch != r.epoch {
		return nil
	}
	if m.Reject {
		e.endChange(fmt.Errorf("%w: node %d refused epoch %d", ErrChangeLost, m.From, r.epoch))
		e.round = nil
		return nil
	}
	if why := e.voteBelowLevel(m, max(e.p.Valid.Codec(), r.proposal.Codec())); why != "" {
		e.stats.BelowLevel++
		return fmt.Errorf("%w: accept not counted: %s", ErrBelowLevel, why)
	}
	r.accepts[m.From] = true
	if !Valid(*r.proposal, r.accepts, e.cfg.Mutant) {
		return nil
	}
	v := *r.proposal
	if r.change != nil {
		e.changes = append(e.changes, ChangeResult{Change: *r.change, Epoch: v.Epoch})
	}
	e.round = nil
	e.retry = e.cfg.RetryTicks
	e.adopt(v)
	e.sendAll(wire.Message{Kind: wire.KindCommit, View: v.Clone()}, false)
	return nil
}

// Valid reports whether the nodes in accepts make v valid: a majority of
// its members and a majority of its previous members. The simulator
// judges views by it, from what nodes persisted.
func Valid(v wire.View, accepts map[wire.NodeID]bool, mutant Mutant) bool {
	e := &Election{cfg: Config{Mutant: mutant}}
	if !e.quorumOf(accepts, v.Members) {
		return false
	}
	return mutant.on(MutantNoOldQuorum) || e.quorumOf(accepts, v.PrevMembers)
}

func (e *Election) hello(m wire.Message) error {
	id, err := ParseID(m.ElectionID)
	if err != nil {
		e.stats.BadIDs++
		return err
	}
	if m.View.Epoch > 0 {
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
	}
	mb := e.members[m.From]
	if mb == nil {
		mb = &member{}
		e.members[m.From] = mb
	}
	mb.id, mb.heard, mb.codec, mb.release = id, e.now, m.Codec, m.Release
	// Only a life that checked in (its hellos carry its nonce) counts: a
	// new life's first hello, ahead of its check-in, must not hide the
	// age its previous life told.
	if inc := m.Incarnation; inc > 0 && m.Nonce != 0 {
		if mk := e.marks[m.From]; inc > mk.inc || inc == mk.inc && m.StoreAge > mk.writes {
			e.marks[m.From] = mark{inc: inc, writes: m.StoreAge}
		}
		if known, ok := e.p.Lives[m.From]; !ok || inc > known.Incarnation {
			if e.p.Lives == nil {
				e.p.Lives = map[wire.NodeID]Life{}
			}
			e.p.Lives[m.From], e.persist = Life{Incarnation: inc, Nonce: m.Nonce}, true
		}
	}
	if m.View.Epoch == 0 && e.p.Valid.Epoch > 0 && !e.isMember(e.cfg.Node) && !e.isMember(m.From) {
		// A node looking for its cluster greeted this one, which greets
		// the voters only: answer, so that it learns the view (and the
		// voters) from any node it was told to join by.
		h := e.helloMessage()
		h.To = m.From
		e.send(h)
	}
	return e.learnView(m)
}

// learnView takes the valid view m carries (checked already): a newer
// one, or the level of this node's copy of the same one.
func (e *Election) learnView(m wire.Message) error {
	if m.View.Epoch > e.p.Valid.Epoch {
		return e.adoptNotBelow(m) // how a late joiner learns the leaders
	}
	if v := m.View; v.Epoch == e.p.Valid.Epoch && v.Level > e.p.Valid.Level && v.Level <= uint64(wire.Version) && sameView(v, e.p.Valid) {
		// This node's copy lost its level on the way (a link of codec 3,
		// or a start of the release before): the same view, whole.
		e.p.Valid.Level, e.persist = v.Level, true
	}
	return nil
}

// sameView reports whether a and b are one view but for their levels.
func sameView(a, b wire.View) bool {
	return a.Epoch == b.Epoch && a.PrevEpoch == b.PrevEpoch && slices.Equal(a.Leaders, b.Leaders) &&
		slices.Equal(a.PrevLeaders, b.PrevLeaders) && slices.Equal(a.Members, b.Members) && slices.Equal(a.PrevMembers, b.PrevMembers)
}

// adoptNotBelow adopts the view m carries unless its level is below the
// valid view's: a view relayed by a release before levels, or over its
// codec, lost its level on the way; taken as it came, it would let this
// node, as coordinator, lower the cluster's codec. The same view comes
// whole from the others.
func (e *Election) adoptNotBelow(m wire.Message) error {
	if lv, valid := m.View.Codec(), e.p.Valid.Codec(); lv < valid && !e.cfg.Mutant.on(MutantLevelBackwards) {
		e.stats.BelowLevel++
		return fmt.Errorf("%w: %s from node %d: the view of epoch %d has codec %d, the valid view's is %d",
			ErrBelowLevel, m.Kind, m.From, m.View.Epoch, lv, valid)
	}
	e.adopt(m.View)
	return nil
}

// checkView refuses views that cannot be right: no leaders or members
// where some are needed, too many, duplicates, leaders that are not
// members, a previous view that is not older.
func (e *Election) checkView(v wire.View, emptyOK bool) error {
	bad := func(why string) error {
		e.stats.BadViews++
		return fmt.Errorf("%w: epoch %d: %s", ErrBadView, v.Epoch, why)
	}
	if v.Epoch == 0 {
		if emptyOK && len(v.Leaders) == 0 && len(v.Members) == 0 {
			return nil
		}
		return bad("no epoch")
	}
	if len(v.Leaders) == 0 || len(v.Leaders) > wire.MaxLeaders || v.PrevEpoch >= v.Epoch {
		return bad(fmt.Sprintf("%d leaders, previous epoch %d", len(v.Leaders), v.PrevEpoch))
	}
	if len(v.Members) == 0 || len(v.PrevMembers) == 0 {
		return bad("no members")
	}
	for _, set := range [][]wire.NodeID{v.Members, v.PrevMembers} {
		if !slices.IsSorted(set) || len(slices.Compact(slices.Clone(set))) != len(set) || slices.Contains(set, 0) {
			return bad(fmt.Sprintf("members %v not in order, repeated or zero", set))
		}
	}
	for i, l := range v.Leaders {
		if slices.Contains(v.Leaders[:i], l) {
			return bad(fmt.Sprintf("leader %d twice", l))
		}
		if !slices.Contains(v.Members, l) {
			return bad(fmt.Sprintf("leader %d is not a member", l))
		}
	}
	return nil
}

func (e *Election) adopt(v wire.View) {
	if v.Epoch <= e.p.Valid.Epoch {
		return
	}
	e.p.Valid, e.persist = v.Clone(), true
	for _, id := range v.Members {
		e.AddPeer(id)
	}
	if e.checkedIn {
		nv := v.Clone()
		e.view = &nv
	} else {
		// The members may have changed: so has the majority to check in with.
		e.updateCheckedIn()
	}
}

// Status reports readiness: checked in, a valid view and a quorum of its
// leaders alive.
func (e *Election) Status() Status {
	s := Status{View: e.p.Valid.Clone(), Cluster: e.p.Cluster, CheckedIn: e.checkedIn}
	alive := e.aliveIDs()
	s.Coordinator = len(alive) > 0 && alive[0] == e.cfg.Node && e.checkedIn && e.stale == nil
	known := map[wire.NodeID]bool{}
	for id := range e.members {
		known[id] = true
	}
	for _, id := range e.Members() {
		known[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(known)) {
		m := Member{Node: id, Alive: e.alive(id), Leader: slices.Contains(e.p.Valid.Leaders, id), Voter: e.isMember(id)}
		if mb := e.members[id]; mb != nil && mb.id.Address != "" {
			m.ID, m.Off = mb.id.String(), mb.id.Priority == Off
			m.Codec, m.Release = max(mb.codec, uint64(wire.MinVersion)), mb.release
		}
		s.Members = append(s.Members, m)
	}
	s.Ready, s.Reason = e.LockReady()
	return s
}

// LockReady reports whether this node can serve locks (LOCK_READY): it
// checked in, knows a valid view, and a majority of its leaders answer;
// when not, why. Cheap on the ready path: the per-request check of the
// runtime calls it.
func (e *Election) LockReady() (bool, string) {
	ready, why := e.lockReady()
	// Only a node that never had a view of its own cluster: for a member of
	// a working cluster, a stranger is not why it cannot serve.
	if f := e.foreign; !ready && f != nil && f.cluster != 0 && e.p.Cluster != 0 && e.p.Valid.Epoch == 0 && e.now-f.at <= e.cfg.DeadTicks {
		// First: it explains what follows (no one confirms this node).
		why = fmt.Sprintf("node %d speaks for another cluster (%016x, %d initial members; this node's is %016x, %d): "+
			"a node added to a running cluster starts with --join, not --initial-members; %s",
			f.from, f.cluster, f.size, e.p.Cluster, len(e.p.Bootstrap), why)
	}
	return ready, why
}

// foreignHeard is a message of another cluster: who sent it, its cluster,
// and when (in ticks).
type foreignHeard struct {
	from          wire.NodeID
	cluster, size uint64
	at            int64
}

func (e *Election) lockReady() (bool, string) {
	switch {
	case e.stale != nil:
		return false, e.stale.Error()
	case e.p.Cluster == 0:
		return false, "joining: no member of a cluster has said hello yet"
	case !e.checkedIn:
		confirmed := 0
		for _, id := range e.Members() {
			if id != e.cfg.Node && e.checkAcks[id] {
				confirmed++
			}
		}
		members := len(e.Members())
		if e.vouched {
			return false, fmt.Sprintf("checking in (store vouched for): %d of %d other members confirmed this node's life, %d needed",
				confirmed, max(members-1, 0), Quorum(members)-1)
		}
		return false, fmt.Sprintf("checking in: %d of %d other members confirmed this node's life, %d needed "+
			"(if too few of them will ever come back and this data directory was never restored from a copy, see `sluice members vouch`)",
			confirmed, max(members-1, 0), Quorum(max(members-1, 0)))
	case e.p.Valid.Epoch == 0:
		why := e.blocked()
		if why == "" {
			why = "election in progress"
		}
		return false, "no valid view: " + why
	}
	if lv := e.p.Valid.Codec(); lv > uint64(wire.Version) {
		return false, fmt.Sprintf("the cluster's codec is %d and this release (%s) reads codecs up to %d: run a newer release",
			lv, releaseOr(e.cfg.Release), wire.Version)
	}
	up := 0
	for _, l := range e.p.Valid.Leaders {
		if e.alive(l) {
			up++
		}
	}
	if need := len(e.p.Valid.Leaders)/2 + 1; up < need {
		return false, fmt.Sprintf("%d of %d leaders answer, %d needed", up, len(e.p.Valid.Leaders), need)
	}
	return true, ""
}

// HasReady reports whether Ready has anything to handle.
func (e *Election) HasReady() bool {
	return e.persist || len(e.msgs) > 0 || e.view != nil && e.checkedIn || len(e.changes) > 0
}

// Ready returns the output since the last Advance.
func (e *Election) Ready() Ready {
	rd := Ready{Messages: e.msgs[:len(e.msgs):len(e.msgs)], Changes: e.changes[:len(e.changes):len(e.changes)]}
	if e.checkedIn {
		rd.View = e.view
	}
	if e.persist {
		e.p.Writes++
		rd.Persist = e.p.clone()
	}
	e.handed, e.handedPersist, e.handedView, e.handedChanges = len(e.msgs), e.persist, rd.View, len(e.changes)
	return rd
}

// Advance acknowledges the last Ready.
func (e *Election) Advance() {
	if e.msgs = e.msgs[e.handed:]; len(e.msgs) == 0 {
		e.msgs = nil // what Ready handed out stays intact
	}
	if e.changes = e.changes[e.handedChanges:]; len(e.changes) == 0 {
		e.changes = nil
	}
	if e.handedPersist {
		e.persist = false
	}
	if e.view != nil && e.view == e.handedView {
		e.view = nil
	}
	e.handed, e.handedPersist, e.handedView, e.handedChanges = 0, false, nil, 0
}
