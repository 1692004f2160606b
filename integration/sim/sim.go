package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore"
)

// Options configure one run. The zero value of each field means its default.
type Options struct {
	Seed int64
	// Nodes in the cluster (default 5); the first three are the leaders.
	Nodes int
	// FaultTicks is how long clients and faults run (default 700).
	FaultTicks int64
	// SettleTicks is the bound, after faults stop, within which every
	// request must resolve and a fresh request per name must be granted
	// (default 500).
	SettleTicks int64
	// Names is how many object names clients fight over (default: drawn
	// from the seed, 1 to 3); with Nested, how many sites (default 1 or 2).
	Names int
	// ClientsPerNode (default: drawn from the seed, 1 to 4).
	ClientsPerNode int
	// NoFaults turns off loss, duplication, partitions and crashes.
	NoFaults bool
	// Patient clients use obtain timeouts of 300..500 ticks and never abandon,
	// so nobody leaves the line before it is served.
	Patient bool
	// Mutant breaks the core on purpose (mutation tests).
	Mutant core.Mutant
	// PlainDoorways is how many nodes, from node 1, run the doorway of the
	// release before (core.Config.PlainDoorway: no number proposed with
	// ENTERING, none taken with it) and send a report at every change of a
	// name (core.Config.EagerReports), as in a cluster in the middle of an
	// upgrade; 0: none, Nodes or more: all.
	PlainDoorways int
	// TraceLines is how many of the last trace lines a failure shows (default 60).
	TraceLines int
	// IdleBound, when set, fails the run as soon as a name stays free for
	// more ticks than this while a client with a timeout waits for it.
	IdleBound int64
	// TraceMessages adds every delivered message to the trace (slow).
	TraceMessages bool
	// Elect runs the election on every node: the leaders are elected, not
	// fixed, and change (with a handoff of the lock table) when leaders are
	// lost.
	Elect bool
	// ElectionMutant breaks the election on purpose (mutation tests).
	ElectionMutant election.Mutant
	// Modes makes clients take READ_ONLY and READ_WRITE_PRIORITY locks as
	// well as exclusive ones, admitted by the semaphore's policy.
	Modes bool
	// Admit replaces the admission policy (mutation tests).
	Admit core.Admit
	// ReadHeavy (with Modes) is a web site's load: four in five requests
	// are readers, without reader limits, so nodes keep shared read
	// tickets and drains must make them yield.
	ReadHeavy bool
	// NoShare turns read-lease aggregation off (core.Config.ShareLease):
	// every reader then runs the whole bakery. On by default, as in the
	// agent.
	NoShare bool
	// Operators (with Elect) models machines and their operators: a
	// crashed node may restart with its disk wiped or rolled back to an
	// older copy, or never come back (a dead machine); a node whose
	// election turns stale stops for good, as the runtime stops it; an
	// operator replaces a stale or dead node by the runbook (start a
	// node under a new id, remove the old member, add the new one) and
	// now and then adds a node past the bootstrap members that only
	// hosts clients. One disk or machine fault at a time, none in the
	// last OperatorTicks of the faults, so the runbook is done before
	// they stop. A node whose disk lost what one of its lives that
	// checked in wrote should turn stale; Result.Unnoticed counts those
	// that checked in all the same (a copy made in the life that crashed
	// looks like a plain restart; a wiped node that restarts again before
	// it hears the refusal comes back with a higher incarnation).
	Operators bool
	// LeaderDiskFaults (with Operators) also crashes a leader now and then
	// and restarts it at once with its disk wiped or rolled back.
	LeaderDiskFaults bool
	// WorstDrift sets the worst clocks the drift allows: the first three
	// nodes (the first leaders) run 5 % fast, every other 5 % slow, so
	// replicas forget soonest and holders count longest.
	WorstDrift bool
	// LoseRevocations drops every KindRevoked: a force-unlocked waiter's
	// master then learns of it only from the replicas' reports.
	LoseRevocations bool
	// Batch models the agent's loop stepping what its inbox holds before
	// one Ready: after a message, a node's output waits, by chance, until
	// its next client's call or the end of the tick, so the core settles
	// the reports and changes of several messages at once.
	Batch bool
	// Hostile makes the world as bad as the model allows, to reach the
	// schedules that uniform delays rarely line up: one link at a time,
	// either way between any two nodes, delays its messages 5 to 15 times
	// the others'; a phase message (ENTERING, ADD_TICKET, EXITING, an
	// activation mark, a confirmation, a watch) is now and then late at
	// one leader; a node cannot reach one leader for a while, though
	// everyone else can; reports are lost more often, so masters rewatch;
	// and
	// machines are suspended (Suspends).
	Hostile bool
	// Ambush (with Hostile) times faults to the protocol: a message that a
	// safety rule is for (an activation mark, a renewal, a confirmation,
	// a force-unlock) may spring an ambush around its node, whose links
	// then go late or lost in their own ways for a while (see ambush).
	Ambush bool
	// SlowDisk keeps a Ready's writes on their way to disk most of the
	// time while the node goes on (answers of other names leave before
	// them, core.Write.Scope), and machines often die in that window.
	SlowDisk bool
	// Swarm draws the world's make-up from the seed (swarm testing): each
	// kind of fault is on or off, at a rate of its own, and holders keep
	// their leases longer or shorter. A fault that is always on can keep
	// a schedule away (crashes end the holds a force-unlock must meet);
	// seeds without it reach that schedule. Traced at the run's start.
	Swarm bool
	// Suspends suspends machines now and then (a laptop's lid, a VM its
	// host pauses), often for longer than a shared read ticket's lease:
	// the agent and its clients stop, while the machine's boot clock runs
	// on (see MonotonicAgentClock).
	Suspends bool
	// MonotonicAgentClock counts an agent's ticks, and its clients'
	// leases, on a clock that stops while the machine is suspended
	// (CLOCK_MONOTONIC) instead of one that runs on (CLOCK_BOOTTIME):
	// after a suspend the agent stays behind for good. The runtime's old
	// clock, for the mutation tests only.
	MonotonicAgentClock bool
	// LeaveOut leaves known gaps out of the world (see Gap): with
	// GapNewestLifeRollbacks, a disk is rolled back only to a copy of a
	// life older than the newest that checked in.
	LeaveOut Gap
	// Nested makes each of the Names sites a small tree of URLs (see
	// nestedNames), and every acquire names the levels above its name as
	// its parents (semaphore.NamePath), as the agent does. The nodes run
	// the semaphore's policy, the agent's, also for exclusive locks.
	Nested bool
	// conflicts replaces the table the nested check holds holders to
	// (wire.Conflicts): a wrong one shows what the check sees.
	conflicts func(a, b wire.Mode) bool
}

// OperatorTicks is how long before the faults stop the last disk or
// machine fault may happen: the operator's time to notice it and run the
// runbook.
const OperatorTicks = 300

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Nodes, 5)
	def(&o.TraceLines, 60)
	if o.FaultTicks <= 0 {
		o.FaultTicks = 700
	}
	if o.SettleTicks <= 0 {
		o.SettleTicks = 500
	}
}

// Result sums up a run that passed.
type Result struct {
	Grants, Failures, Crashes, Messages, Operations int
	// MaxIdleWait is the longest run of ticks in which a name was held by
	// nobody (not even a lease in its grace) while a client waited for it:
	// the cost of a hand-over, or a stall.
	MaxIdleWait int64
	// Views adopted by the lock cores, and Handoffs of the lock table.
	Views, Handoffs int
	// LeaderPairCrashes: two leaders crashed at once; HandoffCrashes: a
	// node crashed while taking a table over.
	LeaderPairCrashes, HandoffCrashes int
	// SharedGrants: reader grants made while another reader held the name.
	SharedGrants int
	// LocalGrants: readers granted on their node's shared read ticket;
	// Drains: drain yields delivered to a node (for its shared ticket, or
	// a client's plain one); PlainDrains: of those, the ones for a
	// client's plain shared ticket, which its client must be told.
	LocalGrants, Drains, PlainDrains int
	// With Operators: disks Wiped and rolled back (Rollbacks; SameLife of
	// them to a copy made in the life that crashed, which no check-in can
	// tell from a plain restart); Stale nodes stopped for good; DeadMachines
	// that never came back; Unnoticed disk faults (see Options.Operators);
	// Replacements started by the runbook; ExtraNodes added past the
	// bootstrap members; membership changes committed, and failed (refused
	// at once or lost).
	Wipes, Rollbacks, SameLife, Stale, DeadMachines, Unnoticed int
	Replacements, ExtraNodes, ChangesCommitted, ChangesFailed  int
	// Pauses of an agent (longer than a lease, often); Orphans: leases
	// whose client kept holding while its agent crashed or restarted;
	// Forced: force-unlocks by an operator (of holders: ForcedHolders).
	Pauses, Orphans, Forced, ForcedHolders int
	// Batched: Readies that settled more than one message (Options.Batch).
	Batched int
	// With Hostile or Suspends: Suspends of a machine; with Hostile:
	// SlowMessages on the slow links;
	// LateMessages, phase messages late at one leader; LostReports, lost
	// on top of the usual loss; Rewatches, masters that asked a replica
	// for a whole table again.
	Suspends, SlowMessages, LateMessages, LostReports int
	// Ambushes sprung (Options.Ambush).
	Ambushes int
	// LimitedGrants: readers with a limit granted while another reader
	// held the name (Modes).
	LimitedGrants int
	// LazyLost: crashes that lost lazy writes (core.Write.Lazy): released
	// tickets that came back, and names not forgotten.
	LazyLost int
	// OvertakenLost: crashes that lost writes of a Ready while answers of
	// other names, made after it, had left (core.Write.Scope).
	OvertakenLost int
	// RequestsOvertakenLost: crashes that lost writes of a name after its
	// node's master had sent messages of that name past them
	// (core.RequestScope: a master's messages wait for no write of their
	// name).
	RequestsOvertakenLost int
	// OneRoundDoorways: doorways a quorum completed in one round, with the
	// number proposed with ENTERING (the nodes' last lives only).
	OneRoundDoorways int
	// With Nested: NestedGrants made while a client held a name above or
	// below the one granted (readers both); SideBySide writer grants made
	// while a writer held another name of the same site (one that does
	// not nest with it).
	NestedGrants, SideBySide int
}

// add sums another run's figures into r (MaxIdleWait keeps the largest).
func (r *Result) add(o Result) {
	r.Grants += o.Grants
	r.Pauses += o.Pauses
	r.Orphans += o.Orphans
	r.Forced += o.Forced
	r.ForcedHolders += o.ForcedHolders
	r.Batched += o.Batched
	r.Suspends += o.Suspends
	r.SlowMessages += o.SlowMessages
	r.LateMessages += o.LateMessages
	r.LostReports += o.LostReports
	r.Ambushes += o.Ambushes
	r.LimitedGrants += o.LimitedGrants
	r.LazyLost += o.LazyLost
	r.OvertakenLost += o.OvertakenLost
	r.RequestsOvertakenLost += o.RequestsOvertakenLost
	r.OneRoundDoorways += o.OneRoundDoorways
	r.NestedGrants += o.NestedGrants
	r.SideBySide += o.SideBySide
	r.Failures += o.Failures
	r.Crashes += o.Crashes
	r.Messages += o.Messages
	r.Operations += o.Operations
	r.MaxIdleWait = max(r.MaxIdleWait, o.MaxIdleWait)
	r.Views += o.Views
	r.Handoffs += o.Handoffs
	r.LeaderPairCrashes += o.LeaderPairCrashes
	r.HandoffCrashes += o.HandoffCrashes
	r.SharedGrants += o.SharedGrants
	r.LocalGrants += o.LocalGrants
	r.Drains += o.Drains
	r.PlainDrains += o.PlainDrains
	r.Wipes += o.Wipes
	r.Rollbacks += o.Rollbacks
	r.SameLife += o.SameLife
	r.Stale += o.Stale
	r.DeadMachines += o.DeadMachines
	r.Unnoticed += o.Unnoticed
	r.Replacements += o.Replacements
	r.ExtraNodes += o.ExtraNodes
	r.ChangesCommitted += o.ChangesCommitted
	r.ChangesFailed += o.ChangesFailed
}

// Failure is a broken invariant, with the seed to replay it and the last
// lines of the trace.
type Failure struct {
	Test  string // the test that replays it; TestSim when empty
	Flags string // more flags the replay needs
	Seed  int64
	Tick  int64
	What  string
	Trace []string
}

func (f *Failure) Error() string {
	test := cmp.Or(f.Test, "TestSim")
	flags := ""
	if f.Flags != "" {
		flags = " " + f.Flags
	}
	return fmt.Sprintf("seed %d, tick %d: %s\nreplay: go test ./integration/sim -run '%s$'%s -seed=%d\nlast trace lines:\n  %s",
		f.Seed, f.Tick, f.What, test, flags, f.Seed, strings.Join(f.Trace, "\n  "))
}

const tryTicks = 30

// shareTicks is the shared read tickets' lease: about the clients' own
// lease lengths, so local leases are often cut to the share's end, and
// renewals and lapses are frequent.
const shareTicks = 60

// drainMemoTicks is the nodes' drain memo (core.Config.DrainMemo): how
// long a node refuses a name's shared tries itself after a drain, unless
// a leader says sooner that it is over.
const drainMemoTicks = 20

type disk struct {
	incarnation uint32
	durable     *core.Durable
	elected     *election.Persisted
	// age counts the batches the disk holds, as the store's age does:
	// hellos tell it, and it is what a copy is older by.
	age uint64
	// queue are batches on their way to disk, in order, as the agent's
	// store takes them: a Ready's writes, whose answers in their scopes
	// wait for them (core.Write.Scope), or lazy ones (core.Write.Lazy),
	// whose Ready went out without waiting. A commit makes a prefix of
	// them durable, in order; a crash loses the rest.
	queue []batch
}

// batch is one Ready's writes on their way to disk; ready is the Ready
// whose answers wait for them (nil when they are lazy).
type batch struct {
	ws    []core.Write
	ready *heldReady
}

// commit makes the first k batches durable (all of them for k < 0), and
// says whether there were any.
func (d *disk) commit(k int) bool {
	if k < 0 || k > len(d.queue) {
		k = len(d.queue)
	}
	for _, b := range d.queue[:k] {
		d.durable.Apply(b.ws)
		d.age++
		if b.ready != nil {
			b.ready.durable = true
		}
	}
	d.queue = slices.Delete(d.queue, 0, k)
	return k > 0
}

// unsynced says whether writes on their way to disk are lazy ones, and
// whether some are a Ready's that waits for them.
func (d *disk) unsynced() (lazy, strict bool) {
	for _, b := range d.queue {
		lazy = lazy || b.ready == nil
		strict = strict || b.ready != nil
	}
	return lazy, strict
}

// write queues a Ready's writes: when one of them is not lazy, h's
// answers in their scopes wait until they are durable.
func (d *disk) write(ws []core.Write, h *heldReady) {
	if len(ws) == 0 {
		return
	}
	if !slices.ContainsFunc(ws, func(w core.Write) bool { return !w.Lazy }) {
		d.queue = append(d.queue, batch{ws: ws})
		return
	}
	h.durable = false
	h.written, h.whole = core.Scopes(ws)
	d.queue = append(d.queue, batch{ws: ws, ready: h})
}

// heldReady is a Ready of a node's lock core whose messages have not
// all left: each leaves, in the order of the Readys per scope, once no
// earlier write of its scope is on its way to disk (the agent's flush).
// Its events go when it is taken.
type heldReady struct {
	durable bool
	written []string
	whole   bool
	msgs    []wire.Message
	events  []core.Event
	// sentAfter: answers of other scopes left while these writes were on
	// their way (what a crash then shows).
	sentAfter bool
	// requestAfter: a master's message of a name these writes are about
	// left while they were on their way (core.RequestScope).
	requestAfter bool
}

type simNode struct {
	id    wire.NodeID
	core  *core.Node // nil while down
	elect *election.Election
	disk  disk
	// held are the Readys whose answers wait for writes of their scope.
	held []*heldReady
	// complete is the last handoff this node finished, as last checked.
	complete uint64
	// bootstrap is the node's configured initial members: the first
	// nodes', nil for a node that joins (it survives a wiped disk).
	bootstrap []wire.NodeID
	// backup is a copy of the disk made at tick backupAt, what a rollback
	// restores.
	backup   *disk
	backupAt int64
	// diskFault says how the disk of this life was damaged ("wiped",
	// "rolled back"), until the node checked in or turned stale; harmful
	// when it lost writes of a life that checked in (and so may have
	// voted or served); lost is set once its disk ever was damaged.
	diskFault     string
	harmful, lost bool
	// served is the highest incarnation of this disk that checked in.
	served uint32
	// gone: stopped for good (stale) or a dead machine, never restarted;
	// retired: gone, and the runbook is done with it.
	gone, retired bool
	// The machine's monotonic clock: it runs at rate ticks per simulated
	// tick (drift), on through crashes and pauses of the agent. The lock
	// core and the election tick to catch up with it, as the runtime
	// does; lifeStart is the clock at the start of this life (core tick 0).
	rate      float64
	acc       float64
	clock     int64
	lifeStart int64
	ticks     int64 // core ticks run in this life
	// pausedUntil: the agent is stopped (SIGSTOP, a long GC pause, a
	// frozen VM) until this simulated tick: it handles nothing, and its
	// clients' calls wait.
	pausedUntil int64
	// suspendedUntil: the whole machine sleeps until this tick (Hostile):
	// the agent is paused too, and lag counts the clock ticks that a
	// clock stopping in suspend (Options.MonotonicAgentClock) missed in
	// this life of the agent.
	suspendedUntil, lag int64
	// stepped: messages stepped since the core's output was last handled
	// (see Options.Batch).
	stepped int
}

func (n *simNode) paused(tick int64) bool { return tick < n.pausedUntil }

// job is the operator's runbook for a stale or dead node: start a
// replacement under a new id, remove the old member, add the new one.
type job struct {
	old    int  // index of the node replaced
	member bool // the old node was a member: the new one becomes one
	at     int64
	repl   int // index of the replacement, -1 until it started
	issued *issued
	done   bool
}

// issued is a membership change in flight at a node.
type issued struct {
	node   int
	change election.Change
	at     int64
}

type envelope struct {
	at  int64
	seq int64 // tie-break, keeps ordering deterministic
	m   wire.Message
}

type clientState uint8

const (
	idle clientState = iota
	waiting
	holding
)

type client struct {
	id       int
	node     int
	state    clientState
	handle   wire.RequestID
	name     string
	mode     wire.Mode
	limit    int   // of a READ_ONLY request (0: none)
	quiet    int64 // of a READ_WRITE_GENTLE request
	timeout  int64
	deadline int64 // machine clock: the last a grant may come at
	// sent and renewAt are the agent's clock at the Acquire and Renew
	// calls, on the machine's scale (agentClock): what the agent counts a
	// TTL from. The runtime's TTL is the time from the call to the tick of
	// the end (Node.ttlFrom), so a client ends where the agent's clock
	// reaches the end, even when that clock lagged at the call (a pause).
	sent    int64
	expiry  int64 // machine clock: holds while the clock is below it
	token   uint64
	epoch   uint64 // of the view its master was in when it was granted
	renewAt int64  // agent clock of a pending Renew call, -1 if none
	// renewTick: the simulated tick of the last Renew call.
	renewTick int64
	// orphan: its agent crashed or restarted while it held; the client
	// holds on by its own timer and gives the lease back to the new life.
	orphan bool
	// forced: an operator force-unlocked its lease; it does not watch, so
	// it holds on by its timer, and the invariant leaves it out (the
	// operator declared it gone). A grant that raced the unlock may come
	// after the next one's, with a lower token: fencing stops its writes.
	// Its force-unlock then answers that it took a holder (onForceAnswer).
	forced bool
	// forcedSince: the history's mark of the force-unlock a grant raced
	// (0: none): the hold the client learns of late ended from there on.
	forcedSince int64
	// share: the node's shared read ticket (its request on the wire) the
	// lease was granted on; zero for a lease of its own.
	share wire.RequestID
	op    int  // index of the open history operation, -1 if none
	probe bool // a settle-phase probe that must be granted
	// parentForced: the history's mark of an operator's force-unlock of
	// an intent ticket above its name that may be its request's, taken
	// while it waited (0: none): a grant that raced it is forced.
	parentForced int64
}

// Sim is one simulated cluster.
type Sim struct {
	o     Options
	rng   *rand.Rand
	tick  int64
	nodes []*simNode
	net   []envelope
	seq   int64
	cut   []bool // partition: side of each node, when partitioned
	split bool
	// slow is a directed link whose messages take 8..40 ticks until slowUntil:
	// the asymmetric delays that reorder one request's phases across replicas.
	slowFrom, slowTo wire.NodeID
	slowUntil        int64
	// slowNode (Hostile) is a node whose messages out (or, slowIn, in)
	// take 4 to 10 times their delay until slowNodeUntil: a loaded or
	// distant machine, slow on every link at once.
	slowNode      wire.NodeID
	slowIn        bool
	slowNodeUntil int64
	// cutA and cutB (Hostile) cannot reach each other until cutUntil,
	// though each reaches everyone else: a broken route or a firewall
	// rule, a partition that is not a split into two sides.
	cutA, cutB wire.NodeID
	cutUntil   int64
	// ambushes (Options.Ambush) on now, or yet to come.
	ambushes []*ambush
	// rates are the chances of the faults and of a holder's release, per
	// tick or message (see Options.Swarm).
	rates rates
	// renewRound is, per request on the wire, the round of its master's
	// latest renewal; renewAcks, per request and round, the leaders that
	// acknowledged that renewal: a renewal completes on a quorum of them.
	renewRound map[wire.RequestID]uint64
	renewAcks  map[renewal]map[wire.NodeID]bool
	clients    []*client
	names      []string
	view       wire.View
	// paths are, with Nested, each name's levels (semaphore.NamePath),
	// the site's root first and the name last; unprobed are the names
	// the settle has yet to probe.
	paths    map[string][]string
	unprobed []string
	// readerUnprobed are the names whose reader probe (probeReaders) is
	// yet to be made; busyAt, the last tick a client held or waited on
	// each name in the settle.
	readerUnprobed []string
	busyAt         map[string]int64
	// readerRetries counts each name's reader probes refused as draining
	// (readerProbeTries).
	readerRetries map[string]int
	// readerRetryNode is the node whose reader was refused: the next try
	// of the name is made there.
	readerRetryNode map[string]int
	// conflicting are the two holders the nested check failed on.
	conflicting [2]*client

	lastToken       map[string]uint64
	lastWriterToken map[string]uint64
	// drained: the shared read tickets a drain yield reached; the node
	// must admit no local reader on them.
	drained         map[drainKey]bool
	drainNext       map[int][]drainKey // per node, yields taken since its last Ready
	lastReaderEvent map[string]int64   // tick a reader was last granted or stopped holding
	readerLimit     map[string]int     // per name, with Modes (0: none)
	idleWait        map[string]int64
	views           map[uint64]string        // epoch -> the view adopted for it, as seen anywhere
	members         map[uint64][]wire.NodeID // epoch -> members of its view, as adopted
	hist            history
	res             Result
	trace           []string
	traceAt         int
	fail            *Failure
	nonce           uint64

	// forces are the operators' force-unlocks, by the request's id on
	// the wire.
	forces map[wire.RequestID]*force
	// jobs are the operator's runbooks under way or done (Operators).
	jobs []*job
	// commits are changes reported committed in a view no node adopted
	// (a newer one continued it): the next view adopted must carry them.
	commits []election.ChangeResult
}

// Run simulates one cluster with the given options and returns what it saw,
// or the first broken invariant.
func Run(o Options) (Result, error) {
	s, err := run(o)
	return s.res, err
}

func run(o Options) (*Sim, error) {
	s := newSim(o)
	for i := range s.nodes {
		s.start(i)
	}
	s.runTicks()
	if s.fail == nil {
		s.final()
	}
	if s.fail == nil {
		s.checkHistory()
	}
	if s.fail != nil {
		return s, s.fail
	}
	s.res.Operations = len(s.hist.ops)
	s.res.Views = len(s.views)
	for _, n := range s.nodes {
		if n.core != nil {
			s.res.Handoffs += int(n.core.Stats().Handoffs)
			s.res.OneRoundDoorways += int(n.core.Stats().OneRoundDoorways)
		}
	}
	return s, nil
}

// newSim sets up the cluster of o, nothing started yet: its nodes with
// their clocks' drift, names and clients. The seeded PRNG draws in this
// order; a change to it changes every seed's run.
func newSim(o Options) *Sim {
	o.defaults()
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))
	if o.Names <= 0 {
		o.Names = 1 + rng.IntN(3)
		if o.Nested && o.Names == 3 {
			// Sites of five names each: one or two keep them busy.
			o.Names = 1
		}
	}
	if o.ClientsPerNode <= 0 {
		o.ClientsPerNode = 1 + rng.IntN(4)
	}
	s := &Sim{o: o, rng: rng, lastToken: map[string]uint64{}, lastWriterToken: map[string]uint64{}, drained: map[drainKey]bool{}, drainNext: map[int][]drainKey{}, lastReaderEvent: map[string]int64{}, readerLimit: map[string]int{},
		idleWait: map[string]int64{}, views: map[uint64]string{}, members: map[uint64][]wire.NodeID{}, trace: make([]string, o.TraceLines),
		forces: map[wire.RequestID]*force{}, renewRound: map[wire.RequestID]uint64{}, renewAcks: map[renewal]map[wire.NodeID]bool{}}
	leaders := []wire.NodeID{}
	for i := range o.Nodes {
		if i < 3 {
			leaders = append(leaders, wire.NodeID(i+1))
		}
	}
	s.view = wire.View{Epoch: 1, Leaders: leaders}
	if o.Elect {
		s.view = wire.View{}
	}
	var initial []wire.NodeID
	for i := range o.Nodes {
		initial = append(initial, wire.NodeID(i+1))
	}
	for i := range o.Nodes {
		s.nodes = append(s.nodes, &simNode{id: wire.NodeID(i + 1), disk: disk{durable: core.NewDurable()}, bootstrap: initial,
			rate: s.driftRate()})
		if o.WorstDrift {
			s.nodes[i].rate = 0.95
			if i < 3 {
				s.nodes[i].rate = 1.05
			}
		}
	}
	for i := range o.Names {
		names := []string{fmt.Sprintf("https://site%d.example/", i)}
		if o.Nested {
			names = nestedNames(names[0])
		}
		for _, name := range names {
			s.names = append(s.names, name)
			if o.Modes && !o.ReadHeavy {
				// Half of its readers ask for it (acquire).
				s.readerLimit[name] = 1 + rng.IntN(3)
			}
		}
	}
	if o.Nested {
		s.paths = namePaths(s.names)
	}
	for i := range o.Nodes * o.ClientsPerNode {
		s.clients = append(s.clients, &client{id: i, node: i % o.Nodes, renewAt: -1, op: -1})
	}
	s.cut = make([]bool, o.Nodes)
	s.rates = defaultRates
	if o.Swarm {
		s.rates = s.swarmRates()
	}
	if o.SlowDisk {
		s.rates.slowDisk, s.rates.crashUnsynced = 0.9, 0.05
	}
	return s
}

// runTicks runs the faults, then the settling, until a failure.
func (s *Sim) runTicks() {
	o := s.o
	end := o.FaultTicks + o.SettleTicks
	for s.tick = 1; (s.tick <= end || s.probing(end)) && s.fail == nil; s.tick++ {
		settling := s.tick > o.FaultTicks
		if s.tick == o.FaultTicks+1 {
			s.stopFaults()
		}
		if !settling && !o.NoFaults {
			s.faults()
		}
		if o.Operators && o.Elect {
			s.operate()
		}
		for i := range s.nodes {
			s.advanceClock(i)
		}
		s.stepTick(settling)
		s.measureIdleWait()
		if settling {
			s.settle()
		}
	}
}

// driftRate draws a machine's clock rate: within ±5 % with faults on,
// half of the machines at one of the two extremes (the worst pairs of
// clocks are the ones that matter).
func (s *Sim) driftRate() float64 {
	if s.o.NoFaults {
		return 1
	}
	switch r := s.rng.Float64(); {
	case r < 0.25:
		return 0.95
	case r < 0.5:
		return 1.05
	default:
		return 0.95 + 0.1*s.rng.Float64()
	}
}

// advanceClock runs machine i's clock for one simulated tick, and lets an
// agent that is up and not paused catch up with it: a tick of the core and
// the election per tick of the clock. An agent that wakes from a pause
// catches up before it handles what waited for it (this tick's
// deliveries), as the runtime's loop does: it reads the clock after it
// takes each message or call. (Handled on the clock of before the pause,
// a ticket that reached a paused leader had its lifetime counted from
// before it was sent, and the leader forgot it while its holder's lease
// ran: two holders, at TestSimElected seed 153 under a report schedule
// that was tried.)
func (s *Sim) advanceClock(i int) {
	n := s.nodes[i]
	n.acc += n.rate
	k := int64(n.acc)
	n.acc -= float64(k)
	n.clock += k
	if s.tick < n.suspendedUntil {
		n.lag += k
	}
	// A client stops at its timer before anything else happens at this
	// instant: the history must show the end before any later grant.
	s.expireLeases(i)
	if n.core == nil || n.paused(s.tick) {
		return
	}
	for n.core != nil && s.agentClock(i) < s.machineClock(i) {
		if n.elect != nil {
			n.elect.Tick()
			s.handleElection(i)
		}
		if n.core != nil {
			// A group commit lands within a tick.
			if n.disk.commit(-1) && n.elect != nil {
				n.elect.SetStoreAge(n.disk.age)
			}
			n.core.Tick()
			if missed := n.core.Stats().MissedTimers; missed > 0 {
				s.failf("node %d: %d requests' timers were due at tick %d but not armed", n.id, missed, s.tick)
				return
			}
			n.ticks++
			s.handle(i)
		}
	}
}

// agentClock is node i's agent clock on its machine's scale: the machine
// clock when the agent's core last caught up (behind it during a pause).
func (s *Sim) agentClock(i int) int64 { return s.nodes[i].lifeStart + s.nodes[i].ticks }

// machineClock is the clock node i's agent and clients count on, on the
// machine's scale: its boot clock, which runs through suspends, or with
// MonotonicAgentClock one that stopped during the suspends of the agent's
// life. Clients count leases on the same kind of clock as their agent:
// the Go client checks its leases on the boot clock too.
func (s *Sim) machineClock(i int) int64 {
	if s.o.MonotonicAgentClock {
		return s.nodes[i].clock - s.nodes[i].lag
	}
	return s.nodes[i].clock
}

func (s *Sim) tracef(format string, args ...any) {
	s.trace[s.traceAt%len(s.trace)] = fmt.Sprintf("t%d ", s.tick) + fmt.Sprintf(format, args...)
	s.traceAt++
}

func (s *Sim) failf(format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.fail = &Failure{Seed: s.o.Seed, Tick: s.tick, What: fmt.Sprintf(format, args...)}
	if s.o.Elect {
		s.fail.Test = "TestSimElected"
	}
	if s.o.Elect && s.o.Operators {
		s.fail.Test = "TestSimMembers"
		if s.o.LeaderDiskFaults {
			s.fail.Flags = "-members-leader-faults"
		}
	}
	if s.o.Nested {
		// Only the nested tests run nested names: the one that ran it
		// names itself (runSeeds).
		s.fail.Test, s.fail.Flags = "", ""
	}
	// Where each node's handoffs stand: what a liveness failure's reader
	// asks first.
	for _, n := range s.nodes {
		if n.core != nil {
			h := n.core.Handoff()
			s.tracef("node %d: view %d, complete %d, fence %d, handoffs pending %v", n.id, n.core.View().Epoch, h.Complete, h.Fence, h.Pending)
		}
	}
	for i := range len(s.trace) {
		if l := s.trace[(s.traceAt+i)%len(s.trace)]; l != "" {
			s.fail.Trace = append(s.fail.Trace, l)
		}
	}
}

func (s *Sim) chance(p float64) bool { return s.rng.Float64() < p }

func (s *Sim) start(i int) {
	n := s.nodes[i]
	n.disk.incarnation++
	n.disk.age++
	peers := make([]wire.NodeID, len(s.nodes))
	for j := range s.nodes {
		peers[j] = wire.NodeID(j + 1)
	}
	// With the semaphore's modes, its word on doorways: readers without
	// a limit skip each other's.
	admit, refuse, matters := s.o.Admit, core.RefuseEarly(nil), core.ChoosingMatters(nil)
	if s.o.Modes || s.o.Nested {
		if admit == nil {
			admit, refuse = semaphore.Admit, semaphore.RefuseEarly
		}
		matters = semaphore.ChoosingMatters
	}
	share := int64(shareTicks)
	if s.o.NoShare {
		share = 0
	}
	c, err := core.New(core.Config{ID: n.id, Incarnation: n.disk.incarnation, View: s.view, Peers: peers,
		TryTicks: tryTicks, Mutant: s.o.Mutant, Admit: admit, RefuseEarly: refuse, ChoosingMatters: matters,
		ShareLease: share,
		DrainMemo:  drainMemoTicks, CheckIncremental: true, PlainDoorway: int(n.id) <= s.o.PlainDoorways,
		EagerReports: int(n.id) <= s.o.PlainDoorways}, n.disk.durable.Clone())
	if err != nil {
		s.failf("start node %d: %v", n.id, err)
		return
	}
	n.core = c
	n.lifeStart, n.ticks, n.pausedUntil, n.lag = n.clock, 0, 0, 0
	s.tracef("node %d starts, incarnation %d", n.id, n.disk.incarnation)
	if s.o.Elect {
		s.nonce++
		e, err := election.New(election.Config{Node: n.id, Bootstrap: n.bootstrap, Peers: peers, Mutant: s.o.ElectionMutant,
			Incarnation: n.disk.incarnation, Nonce: s.nonce, StoreAge: n.disk.age, ID: election.ID{Priority: uint8(1 + s.rng.IntN(14)), Random: s.rng.Uint32(), Address: fmt.Sprintf("sim:%d", n.id),
				PID: n.disk.incarnation, Name: fmt.Sprintf("n%d", n.id)}}, n.disk.elected)
		if err != nil {
			s.failf("start election %d: %v", n.id, err)
			return
		}
		n.elect = e
		s.handleElection(i)
	}
	s.handle(i)
}

// handleElection applies node i's election Ready: persist, send, then give
// a new valid view to the lock core.
func (s *Sim) handleElection(i int) {
	n := s.nodes[i]
	for n.core != nil && n.elect.HasReady() {
		rd := n.elect.Ready()
		if rd.Persist != nil {
			n.disk.commit(-1) // the store's batches are durable in order
			n.disk.elected = rd.Persist
			n.disk.age++
		}
		n.elect.SetStoreAge(n.disk.age)
		for _, m := range rd.Messages {
			s.post(m)
		}
		n.elect.Advance()
		if rd.View != nil {
			v := *rd.View
			key := fmt.Sprintf("%v after %d%v members %v", v.Leaders, v.PrevEpoch, v.PrevLeaders, rd.View.Members)
			if old, ok := s.views[v.Epoch]; ok && old != key {
				s.failf("two views for epoch %d: %s and %s", v.Epoch, old, key)
				return
			}
			s.views[v.Epoch], s.members[v.Epoch] = key, rd.View.Members
			s.commits = slices.DeleteFunc(s.commits, func(r election.ChangeResult) bool {
				if r.Epoch < v.Epoch {
					s.checkCommit(r, v.Epoch)
				}
				return r.Epoch < v.Epoch
			})
			s.tracef("node %d adopts view %d: %s", n.id, v.Epoch, key)
			n.core.SetView(v)
			s.handle(i)
		}
		for _, c := range rd.Changes {
			s.changed(i, c)
		}
	}
	if n.core != nil && n.elect.CheckedIn() {
		n.served = max(n.served, n.disk.incarnation)
		if n.diskFault != "" {
			if n.harmful {
				s.tracef("node %d checked in with a %s disk that lost what an earlier life that checked in wrote", n.id, n.diskFault)
				s.res.Unnoticed++
			} else {
				s.tracef("node %d checked in with a %s disk that lost nothing a life that checked in wrote", n.id, n.diskFault)
			}
			n.diskFault, n.harmful = "", false
		}
	}
}

func (s *Sim) crash(i int) {
	n := s.nodes[i]
	if n.gone {
		return
	}
	n.core, n.stepped = nil, 0 // what it stepped and did not hand out dies with it
	lazy, strict := n.disk.unsynced()
	if lazy {
		s.res.LazyLost++
	}
	if strict && slices.ContainsFunc(n.held, func(h *heldReady) bool { return !h.durable && h.sentAfter }) {
		s.res.OvertakenLost++
	}
	if strict && slices.ContainsFunc(n.held, func(h *heldReady) bool { return !h.durable && h.requestAfter }) {
		s.res.RequestsOvertakenLost++
	}
	n.disk.queue, n.held = nil, nil // written, not yet durable; answers waiting for them

	s.res.Crashes++
	s.tracef("node %d crashes", n.id)
	s.orphanClients(i, "its node crashed")
}

// orphanClients: the agent of node i is gone. Its waiting clients' calls
// fail; its holding clients hold on by their own timers (the client is
// another process), and give the lease back to the agent's next life.
func (s *Sim) orphanClients(i int, why string) {
	for _, c := range s.clients {
		switch {
		case c.node != i || c.state == idle:
		case c.state == holding && c.token != 0:
			if !c.orphan {
				s.res.Orphans++
			}
			c.orphan, c.renewAt = true, -1
			s.tracef("client %d holds %s token %d on by its timer: %s", c.id, c.name, c.token, why)
		default:
			s.clientGone(c, why)
		}
	}
}

// handle takes node i's Readys as the agent does: it queues their writes
// for the disk, advances, and sends and delivers whatever no write on its
// way holds back (sendHeld). The disk commits a Ready's writes at once, or
// (slowDisk) at a later step or the node's next tick, while answers of
// other names leave. With faults on, the node may crash after sending
// only a prefix, or while writes are on their way.
func (s *Sim) handle(i int) {
	if s.nodes[i].stepped > 1 {
		s.res.Batched++
	}
	s.nodes[i].stepped = 0
	defer func() {
		for _, k := range s.drainNext[i] {
			s.drained[k] = true
		}
		delete(s.drainNext, i)
	}()
	n := s.nodes[i]
	for n.core != nil && n.core.HasReady() {
		rd := n.core.Ready()
		if missed := n.core.Stats().MissedDecisions; missed > 0 {
			s.failf("node %d: %d waiters slept through a report they had to decide on (tick %d)", n.id, missed, s.tick)
			return
		}
		h := &heldReady{durable: true, msgs: rd.Messages, events: rd.Events}
		n.disk.write(rd.Persist, h)
		n.held = append(n.held, h)
		n.core.Advance()
		if !h.durable && !s.chance(s.rates.slowDisk) {
			s.commit(i, -1)
		}
		if !s.sendHeld(i) {
			return
		}
	}
	if n.core != nil && len(n.held) > 0 {
		// The store's writer goes on while the loop waits.
		if _, strict := n.disk.unsynced(); strict && s.chance(0.5) {
			s.commit(i, 1+s.rng.IntN(len(n.disk.queue)))
		}
		if !s.sendHeld(i) {
			return
		}
	}
	s.checkHandoff(i)
}

// commit makes node i's first k batches durable (all for k < 0).
func (s *Sim) commit(i, k int) {
	if n := s.nodes[i]; n.disk.commit(k) && n.elect != nil {
		n.elect.SetStoreAge(n.disk.age)
	}
}

// checkPlainAsked: a yield that reached the master of a client's plain
// shared ticket (a reader on no share: limited, or whose share could not
// be had) must be what the client is told (core AskedToYield), so its
// frontend hears of the drain as one on a share does.
func (s *Sim) checkPlainAsked(to int, m wire.Message) {
	for _, st := range s.nodes[to].core.Requests() {
		if st.Req != m.Req || !st.Mode.Shared() {
			continue
		}
		if m.Yield == wire.YieldDrain {
			s.res.PlainDrains++
		}
		if st.Asked < m.Yield {
			s.failf("node %d's plain shared ticket %s (%s, %s) was asked to yield (%d, in a %s) and its client is told %d",
				to+1, st.Handle, st.Name, st.Phase, m.Yield, m.Kind, st.Asked)
		}
		return
	}
}

// sendHeld sends and delivers node i's held answers that no write on its
// way holds back, in the agent's order (see daemon's flush), and says
// whether the node is still up: with faults on it may crash after a
// prefix of a Ready's messages, or after answers left while writes of
// other names (or lazy ones) were still on their way.
func (s *Sim) sendHeld(i int) bool {
	n := s.nodes[i]
	faulty := !s.o.NoFaults && s.tick <= s.o.FaultTicks
	held := map[string]bool{}
	whole, sent := false, 0
	kept := n.held[:0]
	for _, h := range n.held {
		if !h.durable {
			whole = whole || h.whole
			for _, name := range h.written {
				held[name] = true
			}
		}
		free := func(scope string) bool { return !whole && (len(held) == 0 || scope != "" && !held[scope]) }
		var out []wire.Message
		msgs := h.msgs[:0:0]
		for _, m := range h.msgs {
			if free(n.core.MessageScope(m)) {
				out = append(out, m)
			} else {
				msgs = append(msgs, m)
			}
		}
		h.msgs = msgs
		crashing := faulty && len(out) > 0 && s.chance(s.rates.crashSending) && s.downCount() < 2
		if crashing {
			out = out[:s.rng.IntN(len(out))]
		}
		for _, m := range out {
			if held[m.Name] && n.core.MessageScope(m) == core.RequestScope {
				// A master's message past its own node's writes of the name.
				for _, o := range kept {
					o.requestAfter = o.requestAfter || !o.durable && slices.Contains(o.written, m.Name)
				}
				h.requestAfter = h.requestAfter || !h.durable && slices.Contains(h.written, m.Name)
			}
			s.post(m)
		}
		sent += len(out)
		if len(out) > 0 && len(held) > 0 {
			// Overtaken: the writes on their way of this Ready and the
			// ones before it (kept holds every one not yet durable).
			for _, o := range kept {
				o.sentAfter = o.sentAfter || !o.durable
			}
			h.sentAfter = h.sentAfter || !h.durable
		}
		if crashing {
			s.tracef("node %d crashes while sending (%d sent)", n.id, len(out))
			s.crash(i)
			return false
		}
		// Events rest on no write (core.Write.Scope): they go now.
		events := h.events
		h.events = nil
		for _, e := range events {
			s.onEvent(i, e)
			if n.core == nil {
				return false
			}
		}
		if !h.durable || len(h.msgs) > 0 {
			kept = append(kept, h)
		}
	}
	clear(n.held[len(kept):])
	n.held = kept
	// A machine that dies in the millisecond after answers left and
	// before its store's writer committed the writes they did not wait
	// for: lazy ones, or another name's.
	lazy, strict := n.disk.unsynced()
	crash := faulty && sent > 0 && s.downCount() < 2 &&
		(strict && s.chance(s.rates.crashUnsynced) || s.o.Hostile && (lazy || strict) && s.chance(0.01))
	if crash {
		s.tracef("node %d crashes with writes on their way to disk", n.id)
		s.crash(i)
		return false
	}
	return true
}

// checkHandoff: when a leader has just taken a view's table over from the
// previous view, every lease a client still holds that was granted in that
// previous view or before must be in it, with the client's token. (A lease
// granted later, in the new view or in one that the new view continues with
// the same leaders, is only promised at a quorum of them.)
func (s *Sim) checkHandoff(i int) {
	n := s.nodes[i]
	if n.core == nil {
		return
	}
	h := n.core.Handoff()
	if h.Complete == n.complete {
		return
	}
	n.complete = h.Complete
	v := n.core.View()
	if !n.core.Serving() || v.Epoch != h.Complete {
		return
	}
	for _, c := range s.clients {
		if !s.holds(c) || c.forced || c.epoch > v.PrevEpoch {
			continue
		}
		entries, _ := n.core.Table(c.name)
		found := false
		for _, e := range entries {
			found = found || e.Ticket == c.token
		}
		if !found {
			s.failf("node %d took view %d over without the lease of client %d on %s (token %d, granted in epoch %d)",
				n.id, h.Complete, c.id, c.name, c.token, c.epoch)
			return
		}
	}
}

func (s *Sim) delay() int64 {
	if !s.o.NoFaults && s.tick <= s.o.FaultTicks && s.chance(0.05) {
		return 1 + s.rng.Int64N(20)
	}
	return 1 + s.rng.Int64N(3)
}

func (s *Sim) post(m wire.Message) {
	s.res.Messages++
	s.noteRenewal(m)
	s.seq++
	d := s.delay()
	if s.tick < s.slowNodeUntil && (s.slowIn && m.To == s.slowNode || !s.slowIn && m.From == s.slowNode) {
		d *= 4 + s.rng.Int64N(7)
		s.res.SlowMessages++
	}
	switch {
	case s.tick < s.slowUntil && m.From == s.slowFrom && m.To == s.slowTo:
		if s.o.Hostile {
			d *= 5 + s.rng.Int64N(11) // 5 to 15 times its delay
		} else {
			d = 8 + s.rng.Int64N(33)
		}
		s.res.SlowMessages++
	case s.o.Hostile && s.tick <= s.o.FaultTicks && (phaseMessage(m.Kind) || answer(m.Kind)) && s.chance(0.06):
		d += 10 + s.rng.Int64N(30) // late at this one node only
		s.res.LateMessages++
	}
	if s.o.Ambush && s.tick <= s.o.FaultTicks {
		s.springAmbush(m)
		d += s.ambushDelay(m)
	}
	s.net = append(s.net, envelope{at: s.tick + d, seq: s.seq, m: m})
}

// renewal is one renewal of a request: its round.
type renewal struct {
	req   wire.RequestID
	round uint64
}

// noteRenewal keeps what renewedByQuorum checks: the rounds masters send,
// and which leaders said yes to which.
func (s *Sim) noteRenewal(m wire.Message) {
	switch {
	case m.Kind == wire.KindRenew:
		s.renewRound[m.Req] = max(s.renewRound[m.Req], m.Round)
	case m.Kind == wire.KindRenewAck && !m.Reject:
		k := renewal{m.Req, m.Round}
		if s.renewAcks[k] == nil {
			s.renewAcks[k] = map[wire.NodeID]bool{}
		}
		s.renewAcks[k][m.From] = true
	}
}

// renewedByQuorum checks a renewal that completed at node for client c:
// a quorum of the leaders must have extended their copies of the ticket
// for this very renewal (its latest round), since the lease is counted
// from its start. Answers to an earlier renewal extended the copies from
// that one's time only.
func (s *Sim) renewedByQuorum(node int, c *client, id wire.RequestID) bool {
	round := s.renewRound[id]
	acks := len(s.renewAcks[renewal{id, round}])
	if q := s.nodes[node].core.View().Quorum(); acks < q {
		s.failf("client %d's lease %s on %s renewed on %d leaders' acknowledgements of its renewal (round %d); a quorum is %d",
			c.id, id, c.name, acks, round, q)
		return false
	}
	return true
}

// answer: a leader's answer to a master, whose lateness makes it meet a
// later phase of the same request (a renewal's ack the next renewal).
func answer(k wire.Kind) bool {
	switch k {
	case wire.KindAddTicketAck, wire.KindRenewAck, wire.KindConfirmAck, wire.KindActivateAck, wire.KindReport:
		return true
	}
	return false
}

// phaseMessage: a master's message of a request's phases to a leader,
// whose lateness at one leader reorders the phases across the leaders.
func phaseMessage(k wire.Kind) bool {
	switch k {
	case wire.KindEnter, wire.KindAddTicket, wire.KindExit, wire.KindActivate, wire.KindConfirm, wire.KindWatch:
		return true
	}
	return false
}

// downCount counts the nodes down, stale and dead ones included until
// the runbook replaced them.
func (s *Sim) downCount() int {
	k := 0
	for _, n := range s.nodes {
		if n.core == nil && !n.retired {
			k++
		}
	}
	return k
}

func (s *Sim) faults() {
	if s.o.Elect && s.electionFaults() {
		return
	}
	if s.o.Elect && s.o.Operators && s.machineFaults() {
		return
	}
	if s.timeFaults() {
		return
	}
	switch {
	case s.chance(s.rates.crash) && s.downCount() < 2:
		s.crash(s.rng.IntN(len(s.nodes)))
	case s.chance(0.03):
		for i, n := range s.nodes {
			if n.core == nil && !n.gone {
				s.restart(i)
				break
			}
		}
	case !s.split && s.chance(s.rates.partition):
		s.split = true
		for i := range s.cut {
			s.cut[i] = s.chance(0.5)
		}
		s.tracef("partition %v", s.cut)
	case s.split && s.chance(0.03):
		s.split = false
		s.tracef("heal")
	case s.o.Hostile && s.tick >= s.cutUntil && s.chance(0.02):
		s.cutA, s.cutB = wire.NodeID(1+s.rng.IntN(len(s.nodes))), wire.NodeID(1+s.rng.IntN(3))
		s.cutUntil = s.tick + 50 + s.rng.Int64N(100)
		s.tracef("link %d-%d cut until %d", s.cutA, s.cutB, s.cutUntil)
	case s.o.Hostile && s.tick >= s.slowNodeUntil && s.chance(0.02):
		s.slowNode, s.slowIn = wire.NodeID(1+s.rng.IntN(len(s.nodes))), s.chance(0.5)
		s.slowNodeUntil = s.tick + 30 + s.rng.Int64N(70)
		s.tracef("node %d slow (incoming %v) until %d", s.slowNode, s.slowIn, s.slowNodeUntil)
	case s.tick >= s.slowUntil && s.chance(0.02) || s.o.Hostile && s.tick >= s.slowUntil:
		s.slowFrom = wire.NodeID(1 + s.rng.IntN(len(s.nodes)))
		s.slowTo = wire.NodeID(1 + s.rng.IntN(3)) // towards a leader
		if s.o.Hostile && s.chance(0.5) {
			// Either way: a leader's reports and acks to a master.
			s.slowFrom, s.slowTo = s.slowTo, s.slowFrom
		}
		s.slowUntil = s.tick + 20 + s.rng.Int64N(60)
		s.tracef("link %d->%d slow until %d", s.slowFrom, s.slowTo, s.slowUntil)
	}
}

// timeFaults are what time and operators do to leases: an agent paused
// for longer than a lease, the agent of a lease's holder restarting while
// its client holds on, an operator's force-unlock of a holder or a waiter.
func (s *Sim) timeFaults() bool {
	switch {
	case (s.o.Hostile || s.o.Suspends) && s.chance(0.004):
		// The machine sleeps: agent and clients stop, the boot clock runs
		// on. Often about a share's lease, which a clock that stops would
		// let the agent's page views outlive.
		i := s.rng.IntN(len(s.nodes))
		n := s.nodes[i]
		if n.core == nil || n.paused(s.tick) {
			return false
		}
		n.suspendedUntil = s.tick + 10 + s.rng.Int64N(100)
		n.pausedUntil = n.suspendedUntil
		s.res.Suspends++
		s.tracef("machine %d is suspended until %d", n.id, n.suspendedUntil)
		return true
	case s.chance(s.rates.pause):
		i := s.rng.IntN(len(s.nodes))
		n := s.nodes[i]
		if n.core == nil || n.paused(s.tick) {
			return false
		}
		n.pausedUntil = s.tick + 10 + s.rng.Int64N(120)
		s.res.Pauses++
		s.tracef("node %d pauses until %d", n.id, n.pausedUntil)
		return true
	case s.chance(s.rates.agentRestart) && s.downCount() == 0:
		for _, k := range s.rng.Perm(len(s.clients)) {
			c := s.clients[k]
			if n := s.nodes[c.node]; c.state == holding && c.token != 0 && n.core != nil && !n.paused(s.tick) {
				s.tracef("the agent of client %d's lease on %s restarts", c.id, c.name)
				s.crash(c.node)
				s.restart(c.node)
				return true
			}
		}
	case s.chance(s.rates.force):
		s.forceUnlock()
		return true
	}
	return false
}

// force is one operator's force-unlock, from its call to its answer.
type force struct {
	by int // the node it was called on

	// answered: EventReleased came (at tick answeredAt); waiting: it said
	// that no leader of its quorum held the request (confirmed, renewed,
	// or restored), or that none had it: such a request is never granted,
	// before or after. Nor is a renewal sent after the answer confirmed.
	answered, waiting bool
	answeredAt        int64
	// dropped: the answer said a quorum of the leaders dropped the
	// request (or none had it); one that says the leaders could not be
	// reached (not ready) took nothing, and the lease may go on.
	dropped bool
	granted bool // the request was granted (raced the unlock)
	// calledAt is the history's mark of the call: a hold it took ends
	// from there on (history.endSince).
	calledAt int64
}

// forceUnlock is an operator's `sluice unlock --force`: read a name's
// table at one leader, pick a request with a ticket, and force it out
// through any agent that is up.
func (s *Sim) forceUnlock() {
	name := s.names[s.rng.IntN(len(s.names))]
	from, by, byIdx := s.forceNodes()
	if from == nil || by == nil {
		return
	}
	var tickets []wire.Entry
	for _, d := range from.TableDetail(name) {
		if d.Entry.Ticket != 0 {
			tickets = append(tickets, d.Entry)
		}
	}
	if len(tickets) == 0 {
		return
	}
	e := tickets[s.rng.IntN(len(tickets))]
	if err := by.ForceRelease(name, e.Req); errors.Is(err, codes.ErrNotReady) {
		return // the CLI says the agent is not ready; the operator tries later
	} else if err != nil {
		s.failf("force-unlock of %s on %s: %v", e.Req, name, err)
		return
	}
	if s.forces[e.Req] == nil {
		s.forces[e.Req] = &force{by: byIdx, calledAt: s.hist.mark()}
	}
	s.res.Forced++
	s.endForcedHold(name, e)
	s.tracef("operator force-unlocks %s ticket %d on %s through node %d", e.Req, e.Ticket, name, byIdx+1)
	s.handle(byIdx)
}

// forceNodes picks, among the agents up and not paused, a leader whose
// table the operator reads (from) and another agent to force the unlock
// through (by, node byIdx); nil when there is none.
func (s *Sim) forceNodes() (from, by *core.Node, byIdx int) {
	byIdx = -1
	for _, k := range s.rng.Perm(len(s.nodes)) {
		n := s.nodes[k]
		if n.core == nil || n.paused(s.tick) {
			continue
		}
		if from == nil && n.core.View().IsLeader(n.id) {
			from = n.core
		} else if by == nil {
			by, byIdx = n.core, k
		}
	}
	return from, by, byIdx
}

// endForcedHold ends the hold of the client holding the forced lease e of
// name, found by its token or its request's id on the wire. A waiter is
// judged when it is granted and when the unlock answers (onForceAnswer).
func (s *Sim) endForcedHold(name string, e wire.Entry) {
	var handle wire.RequestID
	node := -1
	for i, n := range s.nodes {
		if n.core == nil {
			continue
		}
		for _, r := range n.core.Requests() {
			if r.Req == e.Req {
				handle, node = r.Handle, i
			}
		}
	}
	for _, c := range s.clients {
		switch {
		case c.name != name || c.state == idle:
		case c.share != (wire.RequestID{}):
			// Granted on its node's shared read ticket: forced with it.
			if c.state == holding && c.share == e.Req {
				c.forced = true
				s.res.ForcedHolders++
				s.closeHold(c)
			}
		case c.state == holding && (c.token == e.Ticket || c.node == node && c.handle == handle):
			c.forced = true
			if c.token != 0 {
				// Its hold ends here for the history: the operator took it.
				s.res.ForcedHolders++
				s.closeHold(c)
			}
		}
	}
	if s.o.Nested {
		s.endForcedBelow(name, e)
	}
}

// electionFaults are the faults that matter to views: two leaders of the
// current view crashing at once, and a leader crashing in the middle of
// taking a table over.
func (s *Sim) electionFaults() bool {
	if s.downCount() > 0 {
		return false
	}
	view := s.newestView()
	switch {
	case len(view.Leaders) == 3 && s.chance(0.002):
		for _, k := range s.rng.Perm(3)[:2] {
			s.tracef("leader %d of view %d crashes with another", view.Leaders[k], view.Epoch)
			s.crash(int(view.Leaders[k]) - 1)
		}
		s.res.LeaderPairCrashes++
		return true
	case s.chance(0.01):
		for i, n := range s.nodes {
			if n.core != nil && len(n.core.Handoff().Pending) > 0 {
				s.tracef("node %d crashes while taking a table over", n.id)
				s.crash(i)
				s.res.HandoffCrashes++
				return true
			}
		}
	}
	return false
}

func (s *Sim) stopFaults() {
	s.split, s.slowUntil, s.slowNodeUntil, s.cutUntil, s.ambushes = false, 0, 0, 0, nil
	for _, n := range s.nodes {
		n.pausedUntil = min(n.pausedUntil, s.tick)
		n.suspendedUntil = min(n.suspendedUntil, s.tick)
	}
	for i, n := range s.nodes {
		if n.core == nil && !n.gone {
			s.start(i)
		}
	}
	s.tracef("faults stop")
}

// takeDue removes from *net, and returns in sending order, the envelopes
// due by tick.
func takeDue(net *[]envelope, tick int64) []envelope {
	var due []envelope
	keep := (*net)[:0]
	for _, e := range *net {
		if e.at <= tick {
			due = append(due, e)
		} else {
			keep = append(keep, e)
		}
	}
	*net = keep
	return due
}

// stepTick runs this tick's deliveries and client actions in random order.
func (s *Sim) stepTick(settling bool) {
	due := takeDue(&s.net, s.tick)
	actions := len(due) + len(s.clients)
	order := s.rng.Perm(actions)
	faulty := !s.o.NoFaults && !settling
	for _, k := range order {
		if s.fail != nil {
			return
		}
		if k >= len(due) {
			s.clientAct(s.clients[k-len(due)], settling)
			continue
		}
		if !s.deliver(due[k], faulty) {
			return
		}
	}
	for i, n := range s.nodes {
		if n.stepped > 0 && n.core != nil {
			s.handle(i)
		}
	}
}

// deliver steps e's message at its node, if it arrives (see arrives);
// false when that broke an invariant, which ends the tick at once.
func (s *Sim) deliver(e envelope, faulty bool) bool {
	to := int(e.m.To) - 1
	if to < 0 || to >= len(s.nodes) || s.nodes[to].core == nil {
		return true
	}
	if !s.arrives(e, to, faulty) {
		return true
	}
	if s.o.TraceMessages {
		s.tracef("deliver %v", e.m)
	}
	// Every message crosses the wire codec, as on the mesh, which
	// drops a frame the codec refuses (and resets its stream).
	m, err := codecRoundTrip(e.m)
	if err != nil {
		s.failf("the wire codec refuses %v: %v", e.m, err)
		return false
	}
	if m.Kind.Election() {
		s.stepElection(to, m)
		return true
	}
	if el := s.nodes[to].elect; el != nil && !el.CheckedIn() && m.Kind == wire.KindSnapshotRequest {
		return true // the runtime hands no table over until the node checked in
	}
	err = s.nodes[to].core.Step(m)
	if errors.Is(err, core.ErrBadMessage) {
		s.failf("node %d rejected a valid message %v: %v", to+1, m, err)
		return false
	}
	if err == nil && m.Yield == wire.YieldDrain {
		// Taken (not from another epoch): the node admits no local reader
		// on that share from its next Ready on (a batch of messages may
		// have granted one before this one, in the same Ready).
		s.drainNext[to] = append(s.drainNext[to], drainKey{to, m.Req})
		s.res.Drains++
	}
	if err == nil && m.Yield != wire.YieldNone {
		s.checkPlainAsked(to, m)
	}
	s.nodes[to].stepped++
	// Hostile: a leader that takes an operator's force-unlock dies right
	// after its answer left, before its store writer commits (the
	// window in which a write not waited for is lost).
	forced := m.Kind == wire.KindRelease && m.From != m.Req.Node && err == nil
	crash := forced && (s.o.Hostile || s.o.Ambush) && faulty && s.chance(0.3) && s.downCount() < 2
	if !s.o.Batch || s.chance(0.5) || crash {
		s.handle(to)
	}
	if crash && s.nodes[to].core != nil {
		// Its answer leaves first: the writes it waits for are
		// committed, lazy ones after them are not.
		k := 0
		for j, b := range s.nodes[to].disk.queue {
			if b.ready != nil {
				k = j + 1
			}
		}
		if k > 0 {
			s.commit(to, k)
		}
		if !s.sendHeld(to) {
			return true
		}
		s.tracef("node %d crashes after a force-unlock's answer left", to+1)
		s.crash(to)
		return true
	}
	s.checkInvariants()
	return true
}

// arrives says whether e reaches node to now. A paused agent's kernel
// keeps it until the pause ends; with faults on, a partition or loss drops
// it, and it may also arrive again later (a duplicate).
func (s *Sim) arrives(e envelope, to int, faulty bool) bool {
	if s.nodes[to].paused(s.tick) {
		e.at = s.nodes[to].pausedUntil // the kernel keeps it for the agent
		s.net = append(s.net, e)
		return false
	}
	if e.m.Kind == wire.KindRevoked && (s.o.LoseRevocations || s.rates.loseRevocations) {
		return false
	}
	if faulty && e.m.From != e.m.To {
		if s.split && s.cut[int(e.m.From)-1] != s.cut[to] || s.chance(s.rates.loss) {
			return false
		}
		if s.tick < s.cutUntil && (e.m.From == s.cutA && e.m.To == s.cutB || e.m.From == s.cutB && e.m.To == s.cutA) {
			return false
		}
		if s.o.Ambush && s.ambushLost(e.m) {
			return false
		}
		if s.o.Hostile && e.m.Kind == wire.KindReport && s.chance(s.rates.reportLoss) {
			// The next report on it does not apply: the master rewatches.
			s.res.LostReports++
			return false
		}
		if s.chance(s.rates.dup) {
			s.seq++
			s.net = append(s.net, envelope{at: s.tick + s.delay(), seq: s.seq, m: e.m})
		}
	}
	return true
}

// stepElection steps an election message at node to, if it is up.
func (s *Sim) stepElection(to int, m wire.Message) {
	el := s.nodes[to].elect
	if el == nil {
		return
	}
	_ = el.Step(m)
	if st := el.Stale(); st != nil {
		s.stale(to, st)
		return
	}
	s.handleElection(to)
}

func (s *Sim) clientAct(c *client, settling bool) {
	if s.nodes[c.node].core == nil || s.nodes[c.node].paused(s.tick) {
		return // its calls wait for the agent
	}
	// The agent's loop drives the core before it takes a client's call:
	// the client sees what the messages stepped so far decided.
	s.handle(c.node)
	n := s.nodes[c.node].core
	if n == nil {
		return // crashed while sending that output
	}
	switch c.state {
	case idle:
		if settling || !s.chance(0.08) || s.lull() {
			return
		}
		s.acquire(c, s.names[s.rng.IntN(len(s.names))], false)
	case waiting:
		if !settling && !s.o.Patient && s.chance(0.005) {
			s.tracef("client %d abandons %s", c.id, c.handle)
			if err := n.Abandon(c.handle); err != nil {
				s.failf("abandon: %v", err)
				return
			}
			s.finishOp(c, false, 0)
			c.state = idle
			s.handle(c.node)
		}
	case holding:
		clock := s.machineClock(c.node)
		// Renewals race the expiry: most come in the lease's last ticks.
		nearEnd := c.expiry-clock < 6
		release := s.rates.release
		if settling {
			// Once the faults stop, holders let go at the usual rate at
			// least: a swarm's long holds are there for renewals to meet
			// faults, and the settle probes wait behind them (at 0.013 a
			// tick, a hold outlasted a probe's 250 ticks: swarm seed 4958).
			release = max(release, defaultRates.release)
		}
		switch {
		case c.probe && s.o.Nested && c.token != 0:
			// A nested probe lets go at once: the site's next probe may
			// wait for it.
			s.tracef("client %d releases its probe of %s token %d", c.id, c.name, c.token)
			s.endHold(c, "probe granted")
			s.release(c, n)
			s.handle(c.node)
		case s.chance(release) || c.token == 0 && !c.forced && s.chance(0.2):
			s.tracef("client %d releases %s token %d", c.id, c.name, c.token)
			s.endHold(c, "release")
			s.release(c, n)
			s.handle(c.node)
		case c.renewAt < 0 && (c.token != 0 || c.forced) && !c.orphan && s.chance(renewChance(nearEnd)):
			// A forced holder renews on too until its agent tells it
			// (its hold ended for the history when the operator took
			// it): the leaders must refuse it.
			if err := n.Renew(c.handle); err == nil {
				c.renewAt, c.renewTick = s.agentClock(c.node), s.tick
				s.tracef("client %d renews %s token %d at clock %d, expiry %d", c.id, c.name, c.token, clock, c.expiry)
				s.handle(c.node)
			}
		}
	}
}

// renewChance is a holder's chance per tick to renew: high in the
// lease's last ticks, so renewals race the expiry.
func renewChance(nearEnd bool) float64 {
	if nearEnd {
		return 0.3
	}
	return 0.02
}

// release gives c's lease back to its agent. The agent may have ended it
// already (expired, force-unlocked), and an orphan gives it to the
// agent's new life, which knows it only once a replica told it. The
// caller handles the node's Ready (onEvent runs inside handle).
func (s *Sim) release(c *client, n *core.Node) {
	err := n.Release(c.handle, c.name)
	if err != nil && !errors.Is(err, codes.ErrUnknownLease) {
		s.failf("release of client %d's lease %s: %v", c.id, c.handle, err)
		return
	}
	c.orphan = false
}

// lull: a read-heavy site goes quiet half of the time (no new request
// for 150 ticks), so gentle drains find their quiet periods, and shares
// linger idle and go.
func (s *Sim) lull() bool {
	return s.o.ReadHeavy && s.tick/150%2 == 1
}

// probeKind is what a settle probe asks for: none (a workload's request),
// an exclusive lock that may wait, or a reader's try.
type probeKind int

const (
	noProbe probeKind = iota
	probeExclusive
	probeReader
)

func (s *Sim) acquire(c *client, name string, probe bool) {
	kind := noProbe
	if probe {
		kind = probeExclusive
	}
	s.acquireAs(c, name, kind)
}

func (s *Sim) acquireAs(c *client, name string, kind probeKind) {
	probe := kind != noProbe
	a := core.Acquire{Name: name, Mode: wire.ModeExclusive, Duration: 10 + s.rng.Int64N(50), Grace: s.rng.Int64N(10),
		Parents: s.parents(name)}
	if s.o.Modes && !probe {
		r := s.rng.IntN(20)
		if s.o.ReadHeavy {
			// Readers 16 in 20 (not 11), priority writers 2, each soft
			// writer 1.
			switch {
			case r < 16:
				r = 0
			case r < 18:
				r = 11
			case r == 18:
				r = 14
			default:
				r = 16
			}
		}
		switch {
		case r < 11:
			// Half of the readers of a name with a limit ask for it;
			// the others go through their node's shared read ticket,
			// whose page views the limit counts too.
			a.Mode = semaphore.ReadOnly
			if l := s.readerLimit[name]; l > 0 && s.chance(0.5) {
				a.Limit = l
			}
		case r < 14:
			a.Mode = semaphore.ReadWritePriority
		case r < 16:
			a.Mode = semaphore.ReadWrite
		case r < 18:
			a.Mode, a.Quiet = semaphore.ReadWriteGentle, 10+s.rng.Int64N(30)
		}
	}
	if kind == probeReader {
		a.Mode = semaphore.ReadOnly
	} else if probe {
		a.Timeout = s.o.SettleTicks / 2
		if s.o.Nested {
			// Its node renews its parents while it waits, half their
			// lease before the end: a lease of ten ticks leaves less
			// than a round trip to do so, and a probe must not fail.
			a.Duration += 30
		}
	} else if s.o.Patient {
		a.Timeout = 300 + s.rng.Int64N(200)
	} else if s.o.ReadHeavy && a.Mode == semaphore.ReadWriteGentle {
		// A gentle drain of a busy site waits for the lull; within the
		// settle probe's bound (a restart counts a waiter's persisted
		// lifetime from there).
		a.Timeout = 100 + s.rng.Int64N(150)
	} else if !s.chance(0.2) {
		a.Timeout = 5 + s.rng.Int64N(120)
		if len(a.Parents) > 0 {
			// A round of the bakery per level: a nested request that
			// waits at all waits longer.
			a.Timeout += 20 * int64(len(a.Parents))
		}
	}
	id, err := s.nodes[c.node].core.Acquire(a)
	if err != nil {
		s.failf("acquire refused: %v", err)
		return
	}
	wait := a.Timeout
	if wait == 0 {
		wait = tryTicks
	}
	*c = client{id: c.id, node: c.node, state: waiting, handle: id, name: name, mode: a.Mode, limit: a.Limit, quiet: a.Quiet, timeout: a.Timeout,
		deadline: s.machineClock(c.node) + wait, renewAt: -1, probe: probe, sent: s.agentClock(c.node)}
	c.op = s.hist.call(c.id, name, opAcquire, 0, a.Mode != semaphore.ReadOnly)
	s.tracef("client %d on node %d acquires %s %s as %s (timeout %d, duration %d)", c.id, c.node+1, name, a.Mode, id, a.Timeout, a.Duration)
	s.handle(c.node)
}

func (s *Sim) onEvent(node int, e core.Event) {
	if f := s.forces[e.Req]; f != nil && e.Kind == core.EventReleased && e.Forced && f.by == node && !f.answered {
		s.onForceAnswer(e, f)
		return
	}
	var c *client
	for _, x := range s.clients {
		if x.node == node && x.handle == e.Req && x.state != idle {
			c = x
		}
	}
	if c == nil {
		return // the client released or abandoned it already
	}
	s.tracef("node %d event %s %s code=%s token=%d for client %d", node+1, e.Kind, e.Name, e.Code, e.Token, c.id)
	switch e.Kind {
	case core.EventGranted:
		s.onGranted(node, c, e)
	case core.EventFailed:
		if c.state != waiting {
			s.failf("client %d failed while %v", c.id, c.state)
			return
		}
		if c.probe && c.mode == semaphore.ReadOnly && e.Code == wire.CodeDraining && s.readerRetries[c.name] < readerProbeTries-1 {
			// A reader's try refused as draining tries again once the
			// name is quiet again, as a site's next page view does: a
			// copy of a writer's ENTERING that a slow link of the faults
			// delivers only now sets a choosing flag at a leader (a
			// stray), until its master, told by that leader's answer,
			// releases it. A drain word, memo or share that stays stuck
			// refuses every try.
			s.readerRetries[c.name]++
			s.readerRetryNode[c.name] = c.node // a memo stuck at a node refuses there
			s.tracef("settle probe of client %d on %s refused as draining; tries again when the name is quiet", c.id, c.name)
			s.readerUnprobed = append(s.readerUnprobed, c.name)
			s.busyAt[c.name] = s.tick
			s.finishOp(c, false, 0)
			c.state, c.probe = idle, false
			return
		}
		if c.probe {
			s.failf("settle probe of client %d on %s failed with %s after faults stopped; the leaders' tables: %s",
				c.id, c.name, e.Code, s.tables(c.name))
			return
		}
		s.res.Failures++
		s.finishOp(c, false, 0)
		c.state = idle
	case core.EventRenewed:
		if f := s.forces[s.wireID(node, e.Req)]; f != nil && f.dropped && !e.Shared && c.renewTick > f.answeredAt {
			// A quorum of the leaders dropped the ticket before this
			// renewal was sent: one of them must refuse it.
			s.failf("client %d's lease %s on %s renewed by a renewal sent at tick %d, after its force-unlock was answered at tick %d",
				c.id, e.Req, e.Name, c.renewTick, f.answeredAt)
			return
		}
		if !e.Shared && !s.renewedByQuorum(node, c, s.wireID(node, e.Req)) {
			return
		}
		// A lease the client already let lapse stays lapsed: it stopped
		// acting under it, and its history says so.
		if c.state == holding && c.renewAt >= 0 && c.token != 0 {
			c.expiry = e.ExpiryFrom(c.renewAt)
			c.renewAt = -1
		}
	case core.EventRenewFailed:
		c.renewAt = -1
	case core.EventUnlocked:
		// The client does not watch: it holds on until its own timer
		// runs out (expireLeases), and gives back a lease the agent ended.
		if c.state == holding && c.token == 0 {
			c.state = idle
		}
	}
}

// onGranted makes waiting client c the holder of e's grant at node, once
// the grant passed the checks a grant alone can fail: in time, above the
// earlier tokens, after the quiet period.
func (s *Sim) onGranted(node int, c *client, e core.Event) {
	if c.state != waiting {
		s.failf("client %d granted while %v", c.id, c.state)
		return
	}
	if at := s.nodes[node].lifeStart + s.nodes[node].ticks; at > c.deadline {
		s.failf("client %d granted at clock %d after its obtain deadline %d", c.id, at, c.deadline)
		return
	}
	if expiry := e.ExpiryFrom(c.sent); expiry <= s.machineClock(node) {
		// Decided by an agent whose clock was behind (it woke from a
		// pause): the lease is over by the client's timer before the
		// answer comes, and the agent answers timed out.
		s.tracef("client %d granted %s token %d already over (expiry %d, clock %d)", c.id, c.name, e.Token, expiry, s.machineClock(node))
		s.res.Failures++
		s.finishOp(c, false, 0)
		c.state = idle
		s.release(c, s.nodes[node].core)
		return
	}
	if e.Shared && s.drained[drainKey{node, e.Share}] {
		s.failf("node %d admitted client %d on its shared read ticket %d of %s after a drain yield for it reached the node",
			node+1, c.id, e.Token, e.Name)
		return
	}
	if e.Shared {
		s.res.LocalGrants++
	}
	if !s.grantRacedForce(node, c, e) || !s.checkGrantToken(c, e) {
		return
	}
	s.grantRacedParentForce(c)
	s.idleWait[s.idleKey(c.name)] = 0 // a grant is progress, even one released at once
	c.state, c.token, c.share = holding, e.Token, e.Share
	c.epoch = s.nodes[node].core.View().Epoch
	// The agent's own arithmetic, counted from the call as the agent's
	// clock saw it, on the machine's scale (see client.sent).
	c.expiry = e.ExpiryFrom(c.sent)
	s.res.Grants++
	s.finishOp(c, true, e.Token)
	if c.forced {
		s.closeHold(c)
	}
	if s.o.Nested && !c.forced {
		s.noteIntents(c)
		s.countNested(c)
	}
	s.checkInvariants()
}

// grantRacedForce marks c forced when an operator's force-unlock of its
// request was on its way; false (a failure) when the unlock had found the
// request waiting, which is then never granted.
func (s *Sim) grantRacedForce(node int, c *client, e core.Event) bool {
	f := s.forces[s.wireID(node, e.Req)]
	if e.Shared {
		// Granted on its node's shared read ticket: an unlock of that
		// ticket is one of its lease.
		f = s.forces[e.Share]
	}
	if f == nil {
		return true
	}
	if f.waiting {
		s.failf("client %d granted %s token %d after an operator's force-unlock found its request waiting",
			c.id, c.name, e.Token)
		return false
	}
	// Granted while the unlock was on its way, or after a leader
	// that dropped it had confirmed its grant: the unlock took a
	// holder, whose token may be below the next grant's.
	f.granted = true
	c.forced, c.forcedSince = true, f.calledAt
	s.res.ForcedHolders++
	return true
}

// checkGrantToken checks c's grant of token e.Token against the earlier
// grants of its name (fencing, the gentle writer's quiet period) and
// records it; false on a failure.
func (s *Sim) checkGrantToken(c *client, e core.Event) bool {
	// Every token is above every earlier writer's. A hard writer's is
	// above every earlier grant's; readers that passed a waiting soft
	// writer may hold higher tokens than it, by design.
	last := s.lastWriterToken[c.name]
	if c.mode == semaphore.ReadWritePriority || c.mode == semaphore.Exclusive {
		last = s.lastToken[c.name]
	}
	if e.Token <= last && !c.forced {
		// Each node's mark of the name, to tell which lost it.
		var marks strings.Builder
		for _, n := range s.nodes {
			if n.core == nil {
				fmt.Fprintf(&marks, " node %d down;", n.id)
				continue
			}
			_, hw := n.core.Table(c.name)
			fmt.Fprintf(&marks, " node %d %d (leader %v);", n.id, hw, n.core.View().IsLeader(n.id))
		}
		s.failf("fencing token %d of a %s grant on %s is not above the previous %d; the nodes' marks:%s", e.Token, c.mode, c.name, last, strings.TrimSuffix(marks.String(), ";"))
		return false
	}
	s.lastToken[c.name] = max(s.lastToken[c.name], e.Token)
	if c.mode == semaphore.ReadWriteGentle {
		if since := s.tick - s.lastReaderEvent[c.name]; since < c.quiet {
			s.failf("gentle writer client %d granted %s %d ticks after a reader came or went, quiet period %d",
				c.id, c.name, since, c.quiet)
			return false
		}
	}
	if c.mode != semaphore.ReadOnly {
		s.lastWriterToken[c.name] = e.Token
		return true
	}
	s.lastReaderEvent[c.name] = s.tick
	s.checkReaderBehindWriters(c, e.Token)
	for _, o := range s.clients {
		if o != c && o.name == c.name && o.mode == semaphore.ReadOnly && s.holds(o) {
			s.res.SharedGrants++
			if c.limit > 0 {
				s.res.LimitedGrants++
			}
			break
		}
	}
	return true
}

// measureIdleWait counts, per name (with Nested, per site: idleKey), the
// ticks it stays free while a client that asked long enough ago to have
// been served waits for it.
func (s *Sim) measureIdleWait() {
	for _, name := range s.idleKeys() {
		held, starving := false, false
		for _, c := range s.clients {
			if c.state == idle || s.idleKey(c.name) != name {
				continue
			}
			held = held || c.state == holding
			starving = starving || c.state == waiting && c.timeout > 0
		}
		if held || !starving {
			s.idleWait[name] = 0
			continue
		}
		s.idleWait[name]++
		s.res.MaxIdleWait = max(s.res.MaxIdleWait, s.idleWait[name])
		if s.o.IdleBound > 0 && s.idleWait[name] > s.o.IdleBound {
			if s.o.Nested {
				s.failf("%s and every name below it stayed free %d ticks while a client waited for one", name, s.idleWait[name])
				return
			}
			s.failf("%s stayed free %d ticks while a client waited for it", name, s.idleWait[name])
		}
	}
}

// expireLeases ends holds whose client-side expiry passed, on the client's
// machine clock; the client then gives the lease back (when its agent
// can be called) and is free for another request.
func (s *Sim) expireLeases(node int) {
	for _, c := range s.clients {
		n := s.nodes[c.node]
		if c.node != node || c.state != holding || s.machineClock(node) < c.expiry || c.op >= 0 {
			continue
		}
		if c.token != 0 {
			s.tracef("client %d stops holding %s token %d: its timer ran out at clock %d", c.id, c.name, c.token, c.expiry)
			s.closeHold(c)
		}
		if r := s.replacementOf(node); n.core == nil && r >= 0 {
			s.tracef("client %d moves to node %d, its node's replacement", c.id, r+1)
			c.node = r
			continue
		}
		if n.core != nil && !n.paused(s.tick) {
			c.state = idle
			s.release(c, n.core)
			s.handle(c.node)
		}
	}
}

func (s *Sim) endHold(c *client, why string) {
	s.closeHold(c)
	c.state = idle
	s.tracef("client %d stops holding %s (%s)", c.id, c.name, why)
}

// closeHold records the end of the client's hold once.
func (s *Sim) closeHold(c *client) {
	if c.token != 0 && c.mode == semaphore.ReadOnly {
		s.lastReaderEvent[c.name] = s.tick
	}
	if c.token != 0 && s.o.Nested {
		s.noteIntents(c)
	}
	switch {
	case c.token != 0 && c.forcedSince != 0:
		s.hist.endSince(c.forcedSince, c.id, c.name, c.token, c.mode != semaphore.ReadOnly)
	case c.token != 0:
		s.hist.instant(c.id, c.name, opEnd, c.token, c.mode != semaphore.ReadOnly)
	}
	c.token, c.forcedSince = 0, 0
}

func (s *Sim) clientGone(c *client, why string) {
	if c.state == waiting {
		if c.probe {
			c.probe = false
		}
		s.finishOp(c, false, 0)
	} else {
		s.closeHold(c)
	}
	c.state = idle
	s.tracef("client %d gone: %s", c.id, why)
}

func (s *Sim) finishOp(c *client, ok bool, token uint64) {
	if c.op >= 0 {
		s.hist.ret(c.op, ok, token)
		c.op = -1
	}
}

// wireID is the id on the wire of the current request of handle on node.
func (s *Sim) wireID(node int, handle wire.RequestID) wire.RequestID {
	for _, r := range s.nodes[node].core.Requests() {
		if r.Handle == handle {
			return r.Req
		}
	}
	return handle
}

// onForceAnswer: an operator's force-unlock is through. A request that no
// leader of the answering quorum held was waiting: it must never be
// granted, and a grant already given to it is two holders.
func (s *Sim) onForceAnswer(e core.Event, f *force) {
	f.answered, f.answeredAt = true, s.tick
	f.dropped = e.Code == wire.CodeNone || e.Code == wire.CodeUnknownLease
	f.waiting = !e.Held && f.dropped
	s.tracef("node %d answers the force-unlock of %s on %s: code=%s held=%v", f.by+1, e.Req, e.Name, e.Code, e.Held)
	if f.waiting && f.granted {
		s.failf("force-unlock of %s on %s found it waiting, but it was granted", e.Req, e.Name)
	}
}

// holds: c holds its lease now by its own timer, on its machine's clock.
func (s *Sim) holds(c *client) bool {
	return c.state == holding && c.token != 0 && s.machineClock(c.node) < c.expiry
}

// checkInvariants: per name, at most one writer holds, and no reader
// holds beside a writer; with Nested, nor across names that nest
// (checkNested).
func (s *Sim) checkInvariants() {
	for _, name := range s.names {
		var writers, readers []string
		var holders []*client // the readers
		for _, c := range s.clients {
			if c.name == name && s.holds(c) && !c.forced {
				who := fmt.Sprintf("client %d (%s, token %d, expiry %d)", c.id, c.mode, c.token, c.expiry)
				if c.mode == semaphore.ReadOnly {
					readers = append(readers, who)
					holders = append(holders, c)
				} else {
					writers = append(writers, who)
				}
			}
		}
		if len(writers) > 1 || len(writers) == 1 && len(readers) > 0 {
			s.failf("%s held by writers %s and readers %s at once", name, strings.Join(writers, ", "), strings.Join(readers, ", "))
		}
		s.checkLimits(name, holders)
	}
	if s.o.Nested {
		s.checkNested()
	}
}

// checkLimits: a reader with a limit L holds with fewer than L readers
// ahead of it in line (lower tokens), counting every page view on a
// node's shared read ticket (their token is the share's). Of L+1 limited
// readers holding at once, the last would have seen the L before it.
func (s *Sim) checkLimits(name string, readers []*client) {
	for _, c := range readers {
		if c.limit == 0 {
			continue
		}
		var ahead []string
		for _, o := range readers {
			if o != c && o.token < c.token {
				ahead = append(ahead, fmt.Sprintf("client %d (token %d, limit %d)", o.id, o.token, o.limit))
			}
		}
		if len(ahead) >= c.limit {
			s.failf("%s: client %d holds with limit %d, token %d, behind %d readers: %s", name, c.id, c.limit, c.token,
				len(ahead), strings.Join(ahead, ", "))
			return
		}
	}
}

// checkReaderBehindWriters: a reader is never granted while a hard writer
// (priority, exclusive) whose ticket comes before its own waits with that
// ticket durable at a quorum. Soft writers let readers pass: by design.
func (s *Sim) checkReaderBehindWriters(c *client, token uint64) {
	for i, n := range s.nodes {
		if n.core == nil || s.agentClock(i) < s.machineClock(i) {
			continue // a paused agent's requests may be long expired at the leaders
		}
		for _, r := range n.core.Requests() {
			hard := r.Mode == semaphore.ReadWritePriority || r.Mode == semaphore.Exclusive
			if s.forces[r.Req] != nil {
				// An operator force-unlocked it: gone from the leaders'
				// tables, it waits only until its master hears so (a
				// reader on a node's shared ticket is granted sooner than
				// that news travels).
				continue
			}
			if r.Name == c.name && hard && r.Phase == "waiting" && r.Ticket < token {
				s.failf("reader client %d granted %s with token %d while writer %s waits with ticket %d",
					c.id, c.name, token, r.Handle, r.Ticket)
				return
			}
		}
	}
}

// settle runs after the faults stop: every request must resolve within its
// timeout plus a bound, and one probe per name must be granted.
func (s *Sim) settle() {
	since := s.tick - s.o.FaultTicks
	for _, c := range s.clients {
		// (An agent that was paused past the deadline answers once awake.)
		if n := s.nodes[c.node]; c.state == waiting && s.machineClock(c.node) > c.deadline+20 && s.tick > n.pausedUntil+20 {
			clock := s.machineClock(c.node)
			s.failf("liveness: client %d still waits on %s %d ticks after its deadline", c.id, c.name, clock-c.deadline)
			return
		}
	}
	if s.o.Nested {
		s.probeNested(since)
		return
	}
	if since == 200 {
		for _, name := range s.names {
			c := s.pickProbe()
			if c == nil {
				s.failf("no client left to probe %s", name)
				return
			}
			s.acquire(c, name, true)
		}
	}
	if s.o.Modes && since >= 200 {
		s.probeReaders(since)
	}
}

// readerProbeTries is how many reader probes of a name may be refused as
// draining before the last one fails the run.
const readerProbeTries = 3

// probeReaders: with semaphore modes, once the exclusive probes are done
// and a name has been quiet longer than a drain memo and a round trip, a
// READ_ONLY try on it (through a share, when the nodes share) must be
// granted: readers come back after every drain. A share, a drain memo
// or a leader's drain word that stayed stuck would refuse it; the
// settle goes on until every name was probed so (probing).
func (s *Sim) probeReaders(since int64) {
	if since == 200 {
		s.readerUnprobed, s.busyAt, s.readerRetries = slices.Clone(s.names), map[string]int64{}, map[string]int{}
		s.readerRetryNode = map[string]int{}
	}
	for _, c := range s.clients {
		if c.state == waiting || c.state == holding {
			s.busyAt[c.name] = s.tick
		}
	}
	for _, name := range slices.Clone(s.readerUnprobed) {
		if s.tick-s.busyAt[name] <= drainMemoTicks+2*tryTicks {
			continue
		}
		retryAt, retry := s.readerRetryNode[name]
		i := slices.IndexFunc(s.clients, func(c *client) bool {
			n := s.nodes[c.node]
			return c.state == idle && n.core != nil && !n.paused(s.tick) && (!retry || c.node == retryAt)
		})
		if i < 0 {
			return // every client busy: they let go soon
		}
		// Out of the list first: a try refused at once (a memo at the
		// node) puts the name back to be tried again.
		s.readerUnprobed = slices.DeleteFunc(s.readerUnprobed, func(n string) bool { return n == name })
		s.acquireAs(s.clients[i], name, probeReader)
		if s.fail != nil {
			return
		}
	}
}

// pickProbe finds an idle client, or frees a holding one.
func (s *Sim) pickProbe() *client {
	for _, c := range s.clients {
		if c.state == idle && s.nodes[c.node].core != nil {
			return c
		}
	}
	for _, c := range s.clients {
		if c.state == holding && s.nodes[c.node].core != nil {
			s.endHold(c, "release before probe")
			s.release(c, s.nodes[c.node].core)
			s.handle(c.node)
			return c
		}
	}
	return nil
}

func (s *Sim) final() {
	for _, r := range s.commits {
		s.failf("%s reported committed in epoch %d, and no node adopted that view or a later one", r.Change, r.Epoch)
		return
	}
	if len(s.readerUnprobed) > 0 {
		s.failf("liveness: %v never quiet long enough for a reader's probe after faults stopped", s.readerUnprobed)
		return
	}
	for _, c := range s.clients {
		if c.probe && c.state == waiting {
			s.failf("liveness: probe of client %d on %s not granted within %d ticks of faults stopping", c.id, c.name, s.o.SettleTicks)
			return
		}
	}
}

// newestView is the view of the highest epoch a live lock core holds.
func (s *Sim) newestView() wire.View {
	var view wire.View
	for _, n := range s.nodes {
		if n.core == nil {
			continue
		}
		if v := n.core.View(); v.Epoch > view.Epoch {
			view = v
		}
	}
	return view
}

// restart starts a crashed node; with Operators, its disk may be wiped
// or rolled back to its backup first.
func (s *Sim) restart(i int) {
	if s.o.Operators && s.o.Elect && s.diskFaultsAllowed() {
		switch r := s.rng.Float64(); {
		case r < 0.12:
			s.wipe(i)
		case r < 0.24 && s.canRollBack(i):
			s.rollBack(i)
		}
	}
	s.start(i)
}

// diskFaultsAllowed: one disk or machine fault at a time, the last one
// dealt with (the node checked in, or the runbook replaced it, and the
// newest view's leaders hold the table again), and time left for the
// operator.
func (s *Sim) diskFaultsAllowed() bool {
	if s.tick > s.o.FaultTicks-OperatorTicks {
		return false
	}
	for _, n := range s.nodes {
		if n.diskFault != "" {
			return false
		}
	}
	for _, j := range s.jobs {
		if !j.done {
			return false
		}
	}
	// The table is whole again: every leader of the newest view runs and
	// took it over. A fault before that can leave a quorum of some view's
	// leaders without what they acknowledged: two faults at once, after
	// which no node may safely serve that table again.
	v := s.newestView()
	for _, l := range v.Leaders {
		n := s.nodes[int(l)-1]
		if n.core == nil || n.core.Handoff().Complete < v.Epoch {
			return false
		}
	}
	return true
}

// wipe loses node i's disk: lock table, election state, incarnation. Its
// configuration (id, initial members) stays.
func (s *Sim) wipe(i int) {
	n := s.nodes[i]
	n.disk = disk{durable: core.NewDurable()}
	n.diskFault, n.lost, n.harmful = "wiped", true, n.harmful || n.served > 0
	n.backup, n.served = nil, 0 // copies of the old disk go with it
	s.res.Wipes++
	s.tracef("node %d's disk is wiped", n.id)
}

// canRollBack: node i has a backup to roll back to, one the world may
// hold (see Options.LeaveOut).
func (s *Sim) canRollBack(i int) bool {
	n := s.nodes[i]
	return n.backup != nil && (s.o.LeaveOut&GapNewestLifeRollbacks == 0 || n.backup.incarnation < n.served)
}

// rollBack restores node i's disk from its backup.
func (s *Sim) rollBack(i int) {
	n := s.nodes[i]
	b := *n.backup
	b.durable = b.durable.Clone()
	if b.incarnation == n.disk.incarnation {
		s.res.SameLife++
	}
	s.tracef("node %d's disk is rolled back to its copy of tick %d (incarnation %d, now %d)", n.id, n.backupAt, b.incarnation, n.disk.incarnation)
	n.disk = b
	n.diskFault, n.lost, n.harmful = "rolled back", true, n.harmful || n.served >= b.incarnation
	s.res.Rollbacks++
}

// stale stops node i for good, as the runtime does when a member refused
// its life, and calls the operator.
func (s *Sim) stale(i int, err error) {
	n := s.nodes[i]
	s.tracef("node %d is stale and stops for good: %v", n.id, err)
	if !n.lost {
		s.failf("node %d turned stale, but its disk never lost anything: %v", n.id, err)
		return
	}
	n.core, n.gone, n.diskFault, n.harmful = nil, true, "", false
	s.res.Stale++
	s.orphanClients(i, "its node stopped")
	s.newJob(i, 20+s.rng.Int64N(60))
}

func (s *Sim) newJob(i int, delay int64) {
	var members []wire.NodeID
	var epoch uint64
	for e, m := range s.members {
		if e > epoch {
			epoch, members = e, m
		}
	}
	if epoch == 0 {
		members = s.nodes[0].bootstrap
	}
	s.jobs = append(s.jobs, &job{old: i, member: slices.Contains(members, s.nodes[i].id), at: s.tick + delay, repl: -1})
}

// machineFaults are the faults of machines: disks copied (what a rollback
// restores), machines that die for good, nodes added past the bootstrap
// members, and (LeaderDiskFaults) leaders restarted at once with a disk
// wiped or rolled back.
func (s *Sim) machineFaults() bool {
	if s.chance(0.05) {
		if n := s.nodes[s.rng.IntN(len(s.nodes))]; n.core != nil {
			b := n.disk
			b.durable, b.queue = b.durable.Clone(), nil // a copy holds what is durable
			n.backup, n.backupAt = &b, s.tick
		}
	}
	allowed := s.diskFaultsAllowed()
	switch {
	case allowed && s.downCount() < 2 && s.chance(0.0015):
		i := s.rng.IntN(len(s.nodes))
		if s.nodes[i].core == nil {
			return false
		}
		s.tracef("node %d's machine dies for good", s.nodes[i].id)
		s.crash(i)
		s.nodes[i].gone = true
		s.res.DeadMachines++
		s.newJob(i, 50+s.rng.Int64N(100))
		return true
	case allowed && s.o.LeaderDiskFaults && s.downCount() == 0 && s.chance(0.01):
		v := s.newestView()
		if len(v.Leaders) == 0 {
			return false
		}
		i := int(v.Leaders[s.rng.IntN(len(v.Leaders))]) - 1
		s.tracef("leader %d of view %d crashes, its disk fails", i+1, v.Epoch)
		s.crash(i)
		if s.canRollBack(i) && s.chance(0.5) {
			s.rollBack(i)
		} else {
			s.wipe(i)
		}
		s.start(i)
		return true
	case s.res.ExtraNodes < 2 && s.tick <= s.o.FaultTicks-OperatorTicks && s.chance(0.001):
		i := s.addNode()
		s.res.ExtraNodes++
		for range s.o.ClientsPerNode {
			s.clients = append(s.clients, &client{id: len(s.clients), node: i, renewAt: -1, op: -1})
		}
		s.tracef("node %d joins as a non-member, with %d clients", i+1, s.o.ClientsPerNode)
		return true
	}
	return false
}

// addNode starts a node that joins the cluster as a non-member under a
// new id: every live node learns of it, as the mesh tells the runtime.
func (s *Sim) addNode() int {
	i := len(s.nodes)
	n := &simNode{id: wire.NodeID(i + 1), disk: disk{durable: core.NewDurable()}, rate: s.driftRate()}
	s.nodes = append(s.nodes, n)
	s.cut = append(s.cut, s.chance(0.5))
	for _, o := range s.nodes {
		if o.core != nil && o.elect != nil {
			o.elect.AddPeer(n.id)
		}
	}
	s.start(i)
	return i
}

// replacementOf is the index of the node that replaced node i for good,
// -1 if none started.
func (s *Sim) replacementOf(i int) int {
	for _, j := range s.jobs {
		if j.old == i && j.repl >= 0 {
			return j.repl
		}
	}
	return -1
}

// operate runs the operator's runbook for every stale or dead node, once
// the operator noticed it: start a replacement under a new id (the old
// node's clients move to it), then, at some live checked-in node, remove
// the old member and add the new one, looking at that node's members
// before each step and trying again later when a change is refused or
// lost.
func (s *Sim) operate() {
	for _, j := range s.jobs {
		if j.done || s.tick < j.at || s.fail != nil {
			continue
		}
		if j.repl < 0 {
			j.repl = s.addNode()
			for _, c := range s.clients {
				// A client that still holds by its timer counts its lease
				// on the old machine's clock: it moves when that ends
				// (expireLeases). Moved now, it would count the rest on
				// the new machine's clock, which began at the start.
				if c.node == j.old && (c.state != holding || c.token == 0) {
					c.node = j.repl
				}
			}
			s.res.Replacements++
			s.tracef("operator replaces node %d by node %d", j.old+1, j.repl+1)
			j.at = s.tick + 10 + s.rng.Int64N(20)
			continue
		}
		if is := j.issued; is != nil {
			if s.nodes[is.node].core != nil && s.tick-is.at < 200 {
				continue
			}
			j.issued = nil // its node went down, or no answer came: look again
		}
		x := s.operatorNode()
		if x < 0 {
			j.at = s.tick + 10
			continue
		}
		old, repl := s.nodes[j.old].id, s.nodes[j.repl].id
		members := s.nodes[x].elect.Members()
		var c election.Change
		switch {
		case slices.Contains(members, old):
			j.member, c.Remove = true, old
		case j.member && !slices.Contains(members, repl):
			c.Add = repl
		default:
			j.done, s.nodes[j.old].retired = true, true
			s.tracef("operator: node %d replaced by node %d, members %v at node %d", old, repl, members, x+1)
			continue
		}
		if err := s.nodes[x].elect.ChangeMembers(c); err != nil {
			s.res.ChangesFailed++
			s.tracef("operator: %s at node %d refused: %v", c, x+1, err)
			j.at = s.tick + 10 + s.rng.Int64N(30)
			continue
		}
		s.tracef("operator: %s at node %d", c, x+1)
		j.issued = &issued{node: x, change: c, at: s.tick}
		s.handleElection(x)
	}
}

// operatorNode picks a live node that checked in and knows a valid view,
// where the operator runs its commands; -1 when there is none.
func (s *Sim) operatorNode() int {
	var ok []int
	for i, n := range s.nodes {
		if n.core != nil && n.elect != nil && n.elect.CheckedIn() && n.elect.Stale() == nil && n.elect.View().Epoch > 0 {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		return -1
	}
	return ok[s.rng.IntN(len(ok))]
}

// changed takes the end of a membership change started at node i: a
// committed one must be carried by the view of its epoch.
func (s *Sim) changed(i int, r election.ChangeResult) {
	for _, j := range s.jobs {
		if is := j.issued; is != nil && is.node == i && is.change == r.Change {
			j.issued, j.at = nil, s.tick+5+s.rng.Int64N(20)
		}
	}
	if r.Err != nil {
		s.res.ChangesFailed++
		s.tracef("operator: %s at node %d failed: %v", r.Change, i+1, r.Err)
		return
	}
	s.res.ChangesCommitted++
	s.tracef("operator: %s at node %d committed in epoch %d", r.Change, i+1, r.Epoch)
	if _, ok := s.members[r.Epoch]; ok {
		s.checkCommit(r, r.Epoch)
	} else {
		s.commits = append(s.commits, r)
	}
}

// checkCommit: the view adopted for epoch carries the committed change r
// (the operator makes one change at a time, so no later one undid it).
func (s *Sim) checkCommit(r election.ChangeResult, epoch uint64) {
	members := s.members[epoch]
	if r.Change.Add != 0 && !slices.Contains(members, r.Change.Add) || r.Change.Remove != 0 && slices.Contains(members, r.Change.Remove) {
		s.failf("%s reported committed in epoch %d, but the view of epoch %d has members %v", r.Change, r.Epoch, epoch, members)
	}
}

// codecRoundTrip encodes m and decodes it again.
func codecRoundTrip(m wire.Message) (wire.Message, error) {
	b, err := wire.Encode(nil, &m)
	if err != nil {
		return wire.Message{}, err
	}
	return wire.Decode(b)
}

// drainKey is a node's shared read ticket, by its request on the wire
// (a number alone may repeat: a proposal that one replica took and a
// quorum did not may be proposed again by another request).
type drainKey struct {
	node int
	req  wire.RequestID
}

// tables describes the leaders' tables of name, for a failure's message.
func (s *Sim) tables(name string) string {
	var b strings.Builder
	for _, n := range s.nodes {
		if n.core == nil || !n.core.View().IsLeader(n.id) {
			continue
		}
		fmt.Fprintf(&b, "\n  node %d (tick %d):", n.id, n.ticks)
		for _, d := range n.core.TableDetail(name) {
			fmt.Fprintf(&b, " %v(since %d until %d)", d.Entry, d.Since, d.Until)
		}
	}
	return b.String()
}
