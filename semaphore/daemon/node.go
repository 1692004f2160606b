package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/internal/bootclock"
)

// Transport is what a node needs of the mesh; *p2p.Host satisfies it.
type Transport interface {
	// Send queues m for m.To and never blocks; false means dropped (the
	// core retransmits what matters).
	Send(m wire.Message) bool
	// SendAll is Send for a Ready's messages: those to one peer travel
	// together. It returns how many it dropped.
	SendAll(msgs []wire.Message) int
	// SendWait queues m, waiting for room: for bulk sends off the loop.
	SendWait(ctx context.Context, m wire.Message) error
	// Inbox delivers messages from peers, From set to the true sender.
	Inbox() <-chan wire.Message
	// Joined delivers peers learned after the start.
	Joined() <-chan wire.NodeID
}

// keeper is what a transport may offer to keep connections to the nodes
// a node talks to all the time (p2p.Host.Keep): its voters.
type keeper interface {
	Keep(nodes []wire.NodeID)
}

// Store is what a node needs of its disk; *store.Store satisfies it.
type Store interface {
	// Submit never blocks; the channel says when b is durable. Batches
	// become durable in Submit order.
	Submit(b store.Batch) <-chan error
	// Snapshot streams the durable lock table from one consistent read,
	// in name order; it is called off the loop.
	// It returns the floor (core.Durable.Floor) of the same read.
	Snapshot(fn func(name string, highWater uint64, tickets []core.DurableTicket) error) (uint64, error)
	// Age is the store's durable age: how many changes it holds.
	Age() uint64
}

// Sentinel errors of the runtime. The node cannot serve after any of the
// first three: each is also an ErrNotReady (a client hears not_ready).
var (
	// ErrStopped: the node's loop is not running (stopped, or not started).
	ErrStopped = codes.Mark(codes.ErrNotReady, "not ready: this agent is stopping or stopped")
	// ErrStoreFailed: a write to disk failed; the node stopped serving
	// rather than grant from a table it cannot keep.
	ErrStoreFailed = codes.Mark(codes.ErrNotReady, "not ready: this agent could not write its store, and stopped serving")
	// ErrStale: the members know a newer life of this node than its store
	// does; the node stopped rather than vote or serve with lost state.
	ErrStale = codes.Mark(codes.ErrNotReady, "not ready: this node's store is older than what the cluster knows of it")
)

// staleHelp is the runbook the log and the status point to.
const staleHelp = "this node must not vote or serve again under its identity; follow the manual's runbook (cmd/sluice/MANUAL.md) " +
	"'A node lost its disk': move its data directory away, start it again with --join (a new identity), " +
	"then run `sluice members remove OLD-ID` and `sluice members add NEW-ID`"

// Timing of the runtime, in ticks of NodeConfig.Tick (10 ms by default).
// Loopback and LAN round trips are far below a tick; these leave room for
// a loaded machine and for GC pauses.
const (
	DefaultTick = 10 * time.Millisecond
	// DefaultShareLease is NodeConfig.ShareLease's default: a node that
	// cannot be reached holds a drain up to this long (and the leaders'
	// drift margin), and renews a busy share every half of it.
	DefaultShareLease = 10 * time.Second
	retransmitTicks   = 20     // a lost phase message is sent again after 200 ms
	refreshTicks      = 100    // waiting masters renew their watches every second
	tryTicks          = 100    // a try's round trips must finish within a second
	doorwayTicks      = 1000   // a doorway lasting 10 s starts over (core.Config.DoorwayTicks)
	helloTicks        = 20     // hellos every 200 ms
	deadTicks         = 150    // a node silent for 1.5 s counts as down
	forgetTicks       = 60_000 // a node that is not a member, silent for 10 minutes, is forgotten (a replaced machine)
	// quietWakeTicks: a node with no request of its own wakes every 100
	// ms; its hellos (every 200 ms) and a leader's expiries of others'
	// tickets run at most that late, far within a node's 1.5 s of
	// silence and the tickets' lifetimes.
	quietWakeTicks   = 10
	electionRetry    = 100 // a stuck election round is retried after a second
	watcherQueue     = 64
	maxTicksPerWake  = 10000 // catching up after a long stop flushes its output this often
	opQueue          = 256
	inboxBatchPerRun = 256
	opsBatchPerRun   = 64 // calls answered by one Ready at most
	// driveRoundsPerTurn bounds the rounds of messages a node sends
	// itself in one drive: a chain that kept bringing more would
	// otherwise keep the loop from its peers, its calls and a stop. The
	// rest waits for the loop's next turn, which comes at once.
	driveRoundsPerTurn = 64
	// stopSharingWait bounds how long StopSharing waits for the leaders'
	// confirmations: one that does not answer drops the shares when their
	// lease ends anyway, and a stop must not hang on it.
	stopSharingWait = time.Second
)

// NodeConfig configures a Node. Zero values mean the documented defaults.
type NodeConfig struct {
	// Self is this node's id on the wire. Required.
	Self wire.NodeID
	// Bootstrap are the cluster's first members, on the node's first
	// start; nil to join an existing cluster as a non-member, or when the
	// store holds the cluster already (see election.Config.Bootstrap).
	Bootstrap []wire.NodeID
	// Nonce is drawn at random at every start: with the store's
	// incarnation it names this life of the node (election.Life).
	Nonce uint64
	// ElectionTicks is how long an election round may run at first
	// (default electionRetry); slow links get more (election.Config).
	ElectionTicks int64
	// Peers are the other nodes known at start; more arrive by Joined.
	Peers []wire.NodeID
	// ID is this node's election id (priority, random, address, pid, name).
	ID election.ID
	// State is what the store loaded; State.Incarnation must be new.
	State store.State
	// Transport and Store are required.
	Transport Transport
	Store     Store
	// Tick is the length of a core tick. Default DefaultTick.
	Tick time.Duration
	// Clock is how long it has been since an arbitrary origin, on a clock
	// that keeps running while the machine is suspended: the node counts
	// its ticks on it, since the leaders count a lease in time, whatever
	// this machine did meanwhile. It must never go back. Nil: the boot
	// clock (CLOCK_BOOTTIME on Linux; elsewhere Go's monotonic clock,
	// which a suspend may stop). Tests set a fake one.
	Clock func() time.Duration
	// ShareLease turns read-lease aggregation on (core.Config.ShareLease):
	// the node holds one cluster-wide READ_ONLY ticket per name for its
	// local readers, asked for this long. Zero: DefaultShareLease;
	// negative: off (every reader runs the whole bakery).
	ShareLease time.Duration
	// ShareLinger is how long a shared read ticket is kept with no local
	// reader. Zero: ShareLease/8.
	ShareLinger time.Duration
	// NestedNames makes names nest (semaphore.NamePath): a lease on
	// /site/shop/cart also holds an intent ticket on /site and /site/shop,
	// so a drain of /site keeps it out and a writer of /site/blog does
	// not. Names are taken in their canonical form. Every agent that
	// serves a subtree must have it: a flat lease on /site/shop/cart
	// takes no ticket on /site, and a drain of /site does not see it.
	// Nested acquires wait for a cluster codec of 4 (not_ready before).
	// False: every name is flat, as in 0.8.
	NestedNames bool
	// Codec is the codec the node offers the cluster's level
	// (election.Config.Codec): less than this build's newest holds the
	// level back, so that the previous release can still take over.
	// Zero: wire.Version, this build's newest.
	Codec uint64
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Cluster asks other agents over the mesh (p2p.Host); with it, a lease
	// renewed through this node after it restarted is looked up in the
	// leaders' tables first (its name, mode, token, and that it is held).
	// Nil: the renewal's answer from the leaders alone decides.
	Cluster querier
	// Broken deliberately breaks the lock core (see core.Mutant). Only the
	// integration tests' broken builds set it, to prove that their checks
	// catch an unsafe agent. Zero: the real core.
	Broken core.Mutant
}

// pendingReady is one Ready whose writes are on their way to disk, or
// whose messages wait for earlier ones: a message leaves once every
// earlier write of its scope (core.Write.Scope, MessageScope) is durable,
// so answers about one name do not wait for another name's fsync, and a
// master's requests wait only for writes about the whole table.
// Snapshots wait for every earlier write; events wait for none.
type pendingReady struct {
	durable <-chan error // nil: durable, or nothing to write
	// written are the scopes of its writes while they are not durable;
	// whole: one of them is about no name (or it is the election's).
	written   []string
	whole     bool
	msgs      []wire.Message
	events    []core.Event
	snapshots []core.SnapshotDue
}

// Node runs one node: it owns the core and election state machines on one
// goroutine (Run), drives the store and the transport, and serves the
// client calls (Acquire, Release, ...) by running them on that goroutine.
type Node struct {
	cfg NodeConfig
	log *slog.Logger
	// forced are the last force-unlocks asked through this node's API
	// (the operator's page); safe for any goroutine.
	forced forceLog
	audits auditLog
	core   *core.Node
	elect  *election.Election
	ops    chan func()
	done   chan struct{}
	// origin is the Clock at Run: tick t is due at origin + t*Tick.
	origin time.Duration
	// now and nowAt are when the loop last read the Clock, on Go's clock
	// and on the Clock: wallTime counts from there, so a suspend before
	// then is no part of a time it gives.
	now    time.Time
	nowAt  time.Duration
	ticks  int64
	failed error

	pending []pendingReady
	// heldScopes is flush's scratch set of the scopes still on their way.
	heldScopes map[string]struct{}
	// lazy are the answers of batches of lazy writes (core.Write.Lazy)
	// whose Ready went out without waiting: a failure still stops the node.
	lazy    []<-chan error
	metrics *metrics
	// voters are the voters last seen (and told to a keeper transport);
	// told the nodes told of this life since the start.
	voters []wire.NodeID
	told   map[wire.NodeID]bool
	// senders counts the goroutines streaming snapshots; sending holds
	// them by (new leader, epoch), so that a new leader's repeated request
	// does not start a second stream, and one that no longer takes the
	// answer on its way replaces it.
	senders sync.WaitGroup
	sending map[[2]uint64]*snapshotSend
	// loopback holds released messages addressed to this node itself (a
	// leader is its own replica; the election counts its own vote).
	loopback []wire.Message
	// loopbackSpare is the array of the loopback stepped last, cleared:
	// the next one fills it, not a new array every turn of drive.
	loopbackSpare []wire.Message
	outbox        []wire.Message // flush's buffer of one Ready's messages to peers, reused
	leases        map[wire.RequestID]*lease
	// watchedReaders are the readers' leases with watchers, told when a
	// writer waits (tellDraining).
	watchedReaders map[wire.RequestID]*lease
	// releases are the Release and ForceUnlock calls waiting for a quorum
	// of the leaders to drop the request (core.EventReleased).
	releases map[releaseCall]chan error
	stats    api.NodeStats
	period   time.Duration // the loop's ticker's (tickPeriod)
	// changed gets the end of the membership change this node runs.
	changed chan election.ChangeResult
	// foreignLogged rate-limits the log of refused foreign messages.
	foreignLogged map[wire.NodeID]time.Time
	// belowLogged: when a refusal below the cluster's codec was last
	// logged, per sender.
	belowLogged map[wire.NodeID]time.Time
	// statusWaits are the WaitStatus calls whose condition did not hold yet.
	statusWaits []*statusWait
	// sharesGone are the StopSharing calls waiting for the leaders to drop
	// this node's shared read tickets (room for one answer each).
	sharesGone []chan error
}

// NewNode builds a node from what its store loaded. It does nothing until
// Run.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Transport == nil || cfg.Store == nil || cfg.Self == 0 || cfg.State.Durable == nil {
		return nil, fmt.Errorf("daemon: node config needs Self, Transport, Store and a loaded State")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Clock == nil {
		cfg.Clock = bootclock.New().Since
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	peers := slices.DeleteFunc(slices.Clone(cfg.Peers), func(p wire.NodeID) bool { return p == cfg.Self })
	share := cmp.Or(cfg.ShareLease, DefaultShareLease)
	tick := cmp.Or(cfg.Tick, DefaultTick)
	c, err := core.New(core.Config{ID: cfg.Self, Incarnation: cfg.State.Incarnation, Peers: peers,
		RetransmitTicks: retransmitTicks, RefreshTicks: refreshTicks, TryTicks: tryTicks, DoorwayTicks: doorwayTicks,
		ShareLease: max(int64(share/tick), 0), ShareLinger: max(int64(cfg.ShareLinger/tick), 0),
		Admit: semaphore.Admit, RefuseEarly: semaphore.RefuseEarly, ChoosingMatters: semaphore.ChoosingMatters,
		SnapshotsFromStore: true, Mutant: cfg.Broken}, cfg.State.Durable)
	if err != nil {
		return nil, fmt.Errorf("daemon: start the lock core: %w", err)
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = electionRetry
	}
	e, err := election.New(election.Config{Node: cfg.Self, ID: cfg.ID, Bootstrap: cfg.Bootstrap, Peers: peers,
		Incarnation: cfg.State.Incarnation, Nonce: cfg.Nonce, StoreAge: cfg.State.Age,
		Codec: cmp.Or(cfg.Codec, uint64(wire.Version)), Release: semaphore.Version,
		HelloTicks: helloTicks, DeadTicks: deadTicks, ForgetTicks: forgetTicks, RetryTicks: cfg.ElectionTicks},
		(*election.Persisted)(cfg.State.Election)) // the store's copy of the same fields
	if err != nil {
		if errors.Is(err, election.ErrBadConfig) {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil, fmt.Errorf("daemon: start the election: %w", err)
	}
	return &Node{cfg: cfg, log: cfg.Logger, core: c, elect: e, ops: make(chan func(), opQueue),
		done: make(chan struct{}), leases: map[wire.RequestID]*lease{}, watchedReaders: map[wire.RequestID]*lease{}, releases: map[releaseCall]chan error{},
		changed:       make(chan election.ChangeResult, 1),
		foreignLogged: map[wire.NodeID]time.Time{}, belowLogged: map[wire.NodeID]time.Time{},
		sending: map[[2]uint64]*snapshotSend{}, heldScopes: map[string]struct{}{}, metrics: newMetrics()}, nil
}

// Run is the node's loop. It returns when ctx ends (nil) and never blocks
// on the network or the disk: sends are queued by the transport, writes
// are submitted to the store and waited for in the same select.
func (n *Node) Run(ctx context.Context) error {
	defer close(n.done)
	defer n.failAll(ErrStopped)
	defer n.senders.Wait() // they stop with ctx
	n.origin, n.now = n.cfg.Clock(), time.Now()
	// The ticker only wakes the loop up: the Clock says how many ticks
	// are due, which after a suspend is more than the ticker counted.
	// A quiet node (core.Node.Quiet: no request of its own) is woken
	// quietWakeTicks ticks apart: an idle frontend's agent would otherwise
	// wake a hundred times a second for nothing.
	n.period = n.cfg.Tick * quietWakeTicks
	ticker := time.NewTicker(n.period)
	defer ticker.Stop()
	n.drive(ctx)
	n.answerWaits()
	for {
		if p := n.tickPeriod(); p != n.period {
			n.period = p
			ticker.Reset(p)
		}
		durable := n.firstDurable()
		var lazy <-chan error
		if len(n.lazy) > 0 {
			lazy = n.lazy[0]
		}
		var (
			m         wire.Message
			gotMsg    bool
			id        wire.NodeID
			gotJoined bool
			op        func()
		)
		select {
		case <-ctx.Done():
			return nil
		case err := <-lazy:
			n.lazy = n.lazy[1:]
			if err != nil {
				n.fail(err)
				continue
			}
			n.elect.SetStoreAge(n.cfg.Store.Age())
		case err := <-durable:
			for i := range n.pending {
				if n.pending[i].durable == durable {
					n.pending[i].durable = nil
				}
			}
			if err != nil {
				n.fail(err)
				continue
			}
			n.elect.SetStoreAge(n.cfg.Store.Age())
		case <-ticker.C:
		case <-n.selfPending():
		case m = <-n.cfg.Transport.Inbox():
			gotMsg = true
		case id = <-n.cfg.Transport.Joined():
			gotJoined = true
		case op = <-n.ops:
		}
		// Whatever woke the loop, the core's clock is caught up with the
		// Clock before anything is stepped: after a suspend, the first
		// thing may be a page view, which the node's shared read ticket
		// must not grant if its lease ran out meanwhile.
		if !n.catchUp(ctx) {
			return nil
		}
		switch {
		case gotMsg:
			n.step(m)
			// Take what else is already there before driving, so one Ready
			// (one disk write) serves many messages under load. Each is
			// stepped on a clock read after it was taken: the process may
			// have stopped (SIGSTOP, a frozen VM) since the last read, and
			// a leader that counted a ticket's lifetime from a clock read
			// before the ticket arrived would forget it while its holder's
			// lease still runs.
			for i := 0; i < inboxBatchPerRun; i++ {
				select {
				case m := <-n.cfg.Transport.Inbox():
					if !n.catchUp(ctx) {
						return nil
					}
					n.step(m)
					continue
				default:
				}
				break
			}
		case gotJoined:
			n.elect.AddPeer(id)
			// A peer learned late may have missed this node's restart
			// announcement: replicas drop an old life's requests on it.
			// A voter tells every node; any other node tells the voters
			// only (keepVoters, or here when the mesh did not know one
			// then): replicas are voters, and between two other nodes of
			// a fleet it would open connections nobody needs.
			if slices.Contains(n.voters, n.cfg.Self) || slices.Contains(n.voters, id) && !n.told[id] {
				n.tellRestarted(id)
			}
		case op != nil:
			op()
			// Calls that came meanwhile go in the same turn: one Ready
			// answers them all (64 frontends' page views on one agent).
			for i := 0; i < opsBatchPerRun; i++ {
				select {
				case op := <-n.ops:
					if !n.catchUp(ctx) {
						return nil
					}
					op()
					continue
				default:
				}
				break
			}
		}
		n.drive(ctx)
		n.answerWaits()
	}
}

// tickPeriod is how often the loop wakes for its timers: every tick, or
// quietWakeTicks apart while the core is quiet.
func (n *Node) tickPeriod() time.Duration {
	if n.core.Quiet() {
		return n.cfg.Tick * quietWakeTicks
	}
	return n.cfg.Tick
}

// answerWaits answers the calls waiting for a change of the node's state;
// called on the loop after every turn, the only times it changes.
func (n *Node) answerWaits() {
	n.answerStatusWaits()
	n.answerSharesGone()
}

// StopSharing begins a graceful stop: the node lets its shared read
// tickets go (core.Node.StopSharing: at once when idle, when their last
// local reader leaves otherwise), and readers that come from now on take
// the whole bakery by themselves. It waits until every leader confirmed,
// for at most stopSharingWait or until ctx ends; the loop goes on
// meanwhile, and the caller stops it after. Without it, the leaders keep
// a stopped node's tickets until their lease (ShareLease) runs out, and a
// writer on their names waits that long.
func (n *Node) StopSharing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stopSharingWait)
	defer cancel()
	gone := make(chan error, 1)
	if err := n.send(ctx, func() {
		n.core.StopSharing()
		n.sharesGone = append(n.sharesGone, gone)
	}); err != nil {
		return err
	}
	select {
	case err := <-gone:
		return err
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("daemon: the leaders did not confirm that this node's shared read tickets are gone: %w", ctx.Err())
	}
}

// answerSharesGone answers the StopSharing calls once no shared read
// ticket of this node is left at the leaders, or, after a failure, with it
// (nothing leaves the node any more).
func (n *Node) answerSharesGone() {
	if len(n.sharesGone) == 0 || n.failed == nil && n.core.SharesOut() > 0 {
		return
	}
	for _, ch := range n.sharesGone {
		ch <- n.failed
	}
	n.sharesGone = nil
}

// catchUp runs every tick the Clock says is due; false if ctx ended first.
//
// A node far behind (a long suspend: an hour is 360,000 ticks) keeps at
// it in the same turn rather than answer anything before it is caught up:
// until then its timers are stale, and its shared read tickets look held
// though the leaders dropped them. Refusing calls meanwhile would instead
// need every call path to say so; catching up is cheap: an idle tick costs
// about a microsecond (BenchmarkCatchUp), an hour's suspend a fraction of
// a second. What the ticks produce (a hello every helloTicks, resends) goes
// out every maxTicksPerWake ticks instead of piling up in memory, and a
// stop is heard between those batches.
func (n *Node) catchUp(ctx context.Context) bool {
	for !n.tick() {
		n.drive(ctx)
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// tick runs the ticks due by the Clock, at most maxTicksPerWake of them,
// and says whether it ran them all. Lease lengths are counted in ticks on
// every node, so a node that fell behind (a GC pause, a loaded machine, a
// suspend) must not let its ticks run slower than time.
func (n *Node) tick() bool {
	n.nowAt, n.now = n.cfg.Clock()-n.origin, time.Now()
	due := int64(n.nowAt / n.cfg.Tick)
	for i := 0; n.ticks < due && i < maxTicksPerWake; i++ {
		n.ticks++
		n.stats.Ticks++
		if n.failed == nil {
			n.core.Tick()
			n.elect.Tick()
		}
	}
	return n.ticks >= due
}

func (n *Node) step(m wire.Message) {
	n.stats.MessagesIn++
	n.metrics.msgIn.Inc()
	if n.failed != nil {
		return
	}
	var err error
	if m.Kind.Election() {
		err = n.elect.Step(m)
	} else if m.Kind == wire.KindSnapshotRequest && !n.elect.CheckedIn() {
		// Until a majority of the members confirmed this life, the node
		// hands no table over: a store restored from an old copy must not
		// answer from its old table. (Without a view, which the election
		// gives only after the check-in, it serves no replica work.)
		err = election.ErrNotCheckedIn
	} else {
		err = n.core.Step(m)
	}
	if st := n.elect.Stale(); st != nil && n.failed == nil {
		n.stop(fmt.Errorf("%w: %w; %s", ErrStale, st, staleHelp))
		return
	}
	switch {
	case errors.Is(err, election.ErrForeign):
		n.metrics.foreign.Inc()
		// Said once a minute per sender: enough for an operator, not a flood.
		if now := time.Now(); now.Sub(n.foreignLogged[m.From]) > time.Minute {
			n.foreignLogged[m.From] = now
			n.log.Warn("message of another cluster refused", "from", uint64(m.From), "err", err)
		}
	case errors.Is(err, election.ErrBelowLevel):
		// A node of an older release, or a view that lost the cluster's
		// codec on the way: once a minute per sender, as above.
		if now := time.Now(); now.Sub(n.belowLogged[m.From]) > time.Minute {
			n.belowLogged[m.From] = now
			n.log.Warn("a vote or view below the cluster's codec refused: upgrade that node", "from", uint64(m.From), "err", err)
		}
	case errors.Is(err, election.ErrStale):
		n.metrics.stale.Inc()
		n.log.Warn("check-in of an older life refused: that node's store was lost or restored from a copy", "from", uint64(m.From), "err", err)
	}
	if err != nil {
		n.stats.Rejected++
		n.metrics.rejected.Inc()
		n.log.Debug("message refused", "kind", m.Kind.String(), "from", uint64(m.From), "err", err)
	}
}

// drive collects the state machines' output, hands the writes to the store
// and queues the rest behind them, then releases whatever is durable, and
// goes on while messages to itself bring more.
func (n *Node) drive(ctx context.Context) {
	for round := 1; n.failed == nil; round++ {
		n.collect()
		n.flush(ctx)
		// A yield asked of a shared read ticket with holders changes no
		// output of the core: its readers' watchers hear of it here.
		n.tellDraining()
		if len(n.loopback) == 0 || round > driveRoundsPerTurn || ctx.Err() != nil {
			return // the rest on the loop's next turn (selfPending)
		}
		msgs := n.loopback
		n.loopback = n.loopbackSpare[:0]
		for _, m := range msgs {
			n.step(m)
		}
		clear(msgs)
		n.loopbackSpare = msgs
	}
}

func (n *Node) collect() {
	for n.elect.HasReady() || n.core.HasReady() {
		for n.elect.HasReady() {
			rd := n.elect.Ready()
			p := pendingReady{msgs: rd.Messages}
			if rd.Persist != nil {
				p.durable, p.whole = n.cfg.Store.Submit(store.Batch{Election: (*store.ElectionRecord)(rd.Persist)}), true
				n.stats.Persists++
				n.metrics.persists.Inc()
			}
			n.pending = append(n.pending, p)
			n.elect.Advance()
			for _, c := range rd.Changes {
				// Said only once durable? The change is a valid view: a
				// majority persisted it, whatever this node's disk does.
				select {
				case n.changed <- c:
				default:
				}
			}
			if rd.View != nil {
				n.stats.Views++
				n.metrics.views.Inc()
				if key := fmt.Sprint(rd.View.Leaders); key != n.metrics.lastLeaders {
					n.metrics.lastLeaders = key
					n.metrics.leaderSets.Inc()
				}
				n.log.Info("view", "epoch", rd.View.Epoch, "leaders", rd.View.Leaders, "prev_epoch", rd.View.PrevEpoch)
				n.core.SetView(*rd.View)
			}
		}
		if n.core.HasReady() {
			rd := n.core.Ready()
			n.observePhases(rd.Phases, time.Now())
			p := pendingReady{msgs: rd.Messages, events: rd.Events, snapshots: rd.Snapshots}
			if len(rd.Persist) > 0 {
				lazy := !slices.ContainsFunc(rd.Persist, func(w core.Write) bool { return !w.Lazy })
				durable := n.cfg.Store.Submit(store.Batch{Writes: rd.Persist, Lazy: lazy})
				if !lazy {
					p.durable = durable
					p.written, p.whole = core.Scopes(rd.Persist)
				} else {
					// Nothing sent rests on these writes: they go with the
					// next commit, and only a failure matters.
					n.lazy = append(n.lazy, durable)
				}
				n.stats.Persists++
				n.metrics.persists.Inc()
			}
			n.pending = append(n.pending, p)
			n.core.Advance()
		}
	}
	st := n.core.Stats()
	if h := st.Handoffs; h > n.metrics.handoffSeen {
		n.metrics.handoffs.Add(float64(h - n.metrics.handoffSeen))
		n.metrics.handoffSeen = h
	}
	if d := st.OneRoundDoorways; d > n.metrics.oneRoundSeen {
		n.metrics.oneRound.Add(float64(d - n.metrics.oneRoundSeen))
		n.metrics.oneRoundSeen = d
	}
	if d := st.ShareBypasses; d > n.metrics.bypassSeen {
		n.metrics.bypasses.Add(float64(d - n.metrics.bypassSeen))
		n.metrics.bypassSeen = d
	}
	n.keepVoters()
}

// keepVoters tells the transport the voters when they changed (it keeps
// connections to them and to a few gossip peers, not to every member),
// and tells the new ones of this node's life.
func (n *Node) keepVoters() {
	if n.elect.MembersAre(n.voters) {
		return
	}
	voters := n.elect.Members()
	n.voters = voters
	if k, ok := n.cfg.Transport.(keeper); ok {
		k.Keep(voters)
	}
	for _, v := range voters {
		if v != n.cfg.Self && !n.told[v] {
			n.tellRestarted(v)
		}
	}
}

// tellRestarted tells id of this node's life (wire.KindRestarted); id is
// told once the transport took the message.
func (n *Node) tellRestarted(id wire.NodeID) {
	if !n.cfg.Transport.Send(wire.Message{Kind: wire.KindRestarted, From: n.cfg.Self, To: id,
		Incarnation: n.cfg.State.Incarnation}) {
		return
	}
	if n.told == nil {
		n.told = map[wire.NodeID]bool{}
	}
	n.told[id] = true
}

// flush sends and delivers what no write on its way to disk holds back:
// walking the Readys in order, a message leaves when no earlier write of
// its scope, nor of no name, is still on its way; events go at once. Per
// scope that keeps the Readys' order; a Ready is dropped once all of it
// is out.
func (n *Node) flush(ctx context.Context) {
	held := n.heldScopes
	clear(held)
	whole := false
	kept := n.pending[:0]
	for i := range n.pending {
		if n.failed != nil {
			return
		}
		p := &n.pending[i]
		if p.durable != nil {
			select {
			case err := <-p.durable:
				p.durable = nil
				if err != nil {
					n.fail(err)
					return
				}
				// Hellos tell how far the store got, so a copy restored
				// from an older backup is refused at its next check-in.
				n.elect.SetStoreAge(n.cfg.Store.Age())
			default:
				whole = whole || p.whole
				for _, name := range p.written {
					held[name] = struct{}{}
				}
			}
		}
		free := func(scope string) bool {
			if whole || scope == "" {
				return !whole && len(held) == 0
			}
			_, waits := held[scope]
			return !waits
		}
		out := n.outbox[:0]
		msgs := p.msgs[:0]
		for _, m := range p.msgs {
			if !free(n.core.MessageScope(m)) {
				msgs = append(msgs, m)
				continue
			}
			n.stats.MessagesOut++
			n.metrics.msgOut.Inc()
			if m.Kind == wire.KindPrepare || m.Kind == wire.KindCommit {
				n.log.Debug("election", "kind", m.Kind.String(), "to", uint64(m.To), "epoch", m.View.Epoch, "leaders", m.View.Leaders)
			}
			if m.To == n.cfg.Self {
				n.loopback = append(n.loopback, m)
				continue
			}
			n.metrics.sentToPeer(m.Kind)
			out = append(out, m)
		}
		clear(p.msgs[len(msgs):])
		p.msgs = msgs
		// One entry per peer for what leaves of the Ready, before its
		// events and snapshots, as if each were sent in turn.
		if dropped := n.cfg.Transport.SendAll(out); dropped > 0 {
			n.stats.Dropped += uint64(dropped)
			n.metrics.dropped.Add(float64(dropped))
		}
		clear(out)
		n.outbox = out
		// Events rest on no write (core.Write.Scope): they go now.
		for _, e := range p.events {
			n.onEvent(e)
		}
		p.events = nil
		if free("") {
			for _, due := range p.snapshots {
				n.sendSnapshot(ctx, due)
			}
			p.snapshots = nil
		}
		if p.durable != nil || len(p.msgs) > 0 || len(p.snapshots) > 0 {
			kept = append(kept, *p)
		}
	}
	clear(n.pending[len(kept):])
	n.pending = kept
}

// selfPending is ready while messages the node sent itself wait for
// the loop's next turn (drive's bound), nil otherwise.
func (n *Node) selfPending() <-chan time.Time {
	if len(n.loopback) == 0 {
		return nil
	}
	return closedTimeChan
}

// closedTimeChan is always ready.
var closedTimeChan = func() chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// firstDurable is the answer of the first Ready still on its way to disk:
// batches become durable in order, so it is the next to come.
func (n *Node) firstDurable() <-chan error {
	for i := range n.pending {
		if d := n.pending[i].durable; d != nil {
			return d
		}
	}
	return nil
}

// snapshotSend is a snapshot on its way to a new leader: the request it
// answers, and how to stop it when a newer request replaces it.
type snapshotSend struct {
	nonce  uint64
	cancel context.CancelFunc
}

// sendSnapshot streams the durable table to a new leader, off the loop:
// reading it is disk work. The fence it rests on is durable already (its
// Ready was released), and one read transaction gives a consistent table.
func (n *Node) sendSnapshot(ctx context.Context, due core.SnapshotDue) {
	key := [2]uint64{uint64(due.To), due.Epoch}
	if s, ok := n.sending[key]; ok {
		if s.nonce >= due.Since {
			return // the asker still takes the answer on its way
		}
		s.cancel() // the asker gave up on that answer and ignores it
	}
	loop := ctx
	ctx, cancel := context.WithCancel(ctx)
	s := &snapshotSend{nonce: due.Nonce, cancel: cancel}
	n.sending[key] = s
	n.senders.Go(func() {
		defer cancel()
		defer func() {
			select {
			case n.ops <- func() {
				if n.sending[key] == s {
					delete(n.sending, key)
				}
			}:
			case <-loop.Done():
			}
		}()
		n.streamSnapshot(ctx, due)
	})
}

// streamSnapshot reads the table and sends it as one answer.
func (n *Node) streamSnapshot(ctx context.Context, due core.SnapshotDue) {
	// To itself (a leader of both views): the messages go back into the
	// loop, in one op, once the table is read.
	var local []wire.Message
	send := func(m wire.Message) error {
		m.From = n.cfg.Self
		if due.To == n.cfg.Self {
			local = append(local, m)
			return ctx.Err()
		}
		// Waiting for room: a big table is more than a peer's queue.
		return n.cfg.Transport.SendWait(ctx, m)
	}
	answer := core.SnapshotAnswer{Due: due}
	floor, err := n.cfg.Store.Snapshot(func(name string, highWater uint64, tickets []core.DurableTicket) error {
		return answer.Name(name, highWater, tickets, send)
	})
	answer.Floor = floor
	if err == nil {
		err = send(answer.Done())
	}
	if err != nil {
		// The new leader asks again after its retry period.
		n.log.Warn("snapshot not sent", "to", uint64(due.To), "epoch", due.Epoch, "err", err)
		return
	}
	if len(local) > 0 {
		select {
		case n.ops <- func() {
			for _, m := range local {
				n.step(m)
			}
		}:
		case <-ctx.Done():
			return
		}
	}
	n.log.Info("snapshot sent", "to", uint64(due.To), "epoch", due.Epoch, "entries", answer.Done().AnswerSize)
}

// fail stops serving after a failed write: what the core holds in memory
// is no longer what the disk holds, so nothing more may leave this node.
func (n *Node) fail(err error) {
	if n.failed != nil {
		return
	}
	n.log.Error("store failed; the node stops serving", "err", err)
	n.stop(fmt.Errorf("%w: %w", ErrStoreFailed, err))
}

// stop ends serving for good: nothing more leaves the node, waiting
// clients get err.
func (n *Node) stop(err error) {
	if n.failed != nil {
		return
	}
	if errors.Is(err, ErrStale) {
		n.log.Error("the node stops", "err", err)
	}
	n.failed = err
	n.pending, n.lazy = nil, nil
	n.failAll(n.failed)
}

// send hands fn to the loop without waiting for it to run: the caller
// waits for what fn answers on a channel of its own.
func (n *Node) send(ctx context.Context, fn func()) error {
	select {
	case n.ops <- fn:
		return nil
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendBounded is send for a caller without a deadline of its own: at
// once while the loop's queue has room, else within giveBackWait (no
// timer for the common case: a page view's release costs one).
func (n *Node) sendBounded(ctx context.Context, fn func()) error {
	select {
	case n.ops <- fn:
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, giveBackWait)
	defer cancel()
	return n.send(ctx, fn)
}

// do runs fn on the loop and waits for it.
func (n *Node) do(ctx context.Context, fn func()) error {
	finished := make(chan struct{})
	select {
	case n.ops <- func() { fn(); close(finished) }:
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-finished:
		return nil
	case <-n.done:
		return ErrStopped
	}
}

// toTicks converts a client's duration, rounding up: a timeout or a quiet
// period never ends early.
func (n *Node) toTicks(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + n.cfg.Tick - 1) / n.cfg.Tick)
}

// wallTime is when tick t happens, on Go's clock: counted from the last
// read of the Clock, since Go's monotonic clock may have stood still
// through a suspend before it (a TTL must not count that time twice).
func (n *Node) wallTime(t int64) time.Time {
	return n.now.Add(time.Duration(t)*n.cfg.Tick - n.nowAt)
}
