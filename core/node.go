package core

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// EventKind says what happened to a lease.
type EventKind uint8

const (
	// EventGranted: the lock is held; Ticket is the fencing token.
	EventGranted EventKind = iota + 1
	// EventFailed: the request ended without a grant; Code says why.
	EventFailed
	// EventUnlocking: the lease reached its duration; the grace period runs.
	EventUnlocking
	// EventUnlocked: the lease ended; Code is CodeNone after a release by its
	// holder, CodeTimedOut when the grace ran out, CodeLost when taken away.
	EventUnlocked
	// EventRenewed: a renewal is durable; the lease runs Lifetime more ticks.
	EventRenewed
	// EventRenewFailed: a renewal was not confirmed; Code says why.
	EventRenewFailed
	// EventReleased: a release asked for by Release or ForceRelease is
	// through: a quorum of the view's leaders dropped the request (and
	// keep its tombstone), or every replica has forgotten it by itself.
	// For a forced release, Code is CodeUnknownLease when no leader of
	// that quorum had the request, and CodeNotReady when no quorum
	// answered in time.
	EventReleased
	eventEnd
)

var eventNames = [...]string{"", "granted", "failed", "unlocking", "unlocked", "renewed", "renew-failed", "released"}

func (e EventKind) String() string { return wire.NameOf(eventNames[:], e, "event") }

// Event is something that happened to a local client's request.
type Event struct {
	Req  wire.RequestID
	Name string
	Kind EventKind
	Code wire.Code
	// Token is the fencing token: the ticket number, which grows with every
	// grant of the name and is never reused.
	Token uint64
	// Elapsed is the ticks from the Acquire (for EventGranted) or Renew (for
	// EventRenewed) call to the decision.
	Elapsed  int64
	Duration int64
	// TTL is the lease's time to live counted from that call: the master
	// ends the lease (and its grace starts) TTL ticks after the call. A
	// client counts it from when it sent the call, on its own monotonic
	// clock, so its lease ends no later than the master's, however long
	// the call and the answer travelled: Elapsed + Duration for a grant,
	// Duration for a renewal (the master counts the renewed lease from
	// the Renew call, not from the confirmation).
	TTL int64
	// Held (EventReleased of a forced release): a leader that dropped the
	// request had it as held, or may have (restored from its store or a
	// handoff). Without it, the request was waiting and is never granted.
	Held bool
	// Forced: the EventReleased answers a ForceRelease, not a Release.
	Forced bool
	// Shared (EventGranted, EventRenewed): granted on this node's shared
	// read ticket of the name (Config.ShareLease), whose number Token is
	// and whose request on the wire (what the leaders list) Share is.
	Shared bool
	Share  wire.RequestID
	// ParentTokens (EventGranted of a request with Acquire.Parents) are
	// the fencing tokens of its parents' tickets, in Parents' order.
	ParentTokens []uint64
}

// ExpiryFrom is the one definition of a lease's end, for
// the agent and the simulator alike: the TTL of a grant or renewal counted
// from sent, the tick its call (Acquire or Renew) was sent on the caller's
// own clock. It is never later than the master ends the lease, even when
// the call travelled before the master saw it.
func (e Event) ExpiryFrom(sent int64) int64 { return sent + e.TTL }

// Ready is the output of the node since the last Advance. Handle it in field
// order: Persist durably, then send Messages, then deliver Events. When
// every write of Persist is Lazy, the messages need not wait: write them
// in order with the others (the next commit), but send at once.
type Ready struct {
	Persist  []Write
	Messages []wire.Message
	Events   []Event
	// Snapshots are tables this node must send, as a previous leader, when
	// Config.SnapshotsFromStore is set: after Persist is durable (it holds
	// the fence), stream the durable table to To (see SnapshotDue).
	Snapshots []SnapshotDue
	// Phases are the phases this node's requests entered, in order: for
	// timing them, without walking every request at every Ready.
	Phases []PhaseChange
}

// PhaseChange: the request of a client's Handle entered Phase (the names
// Requests uses), or, with Phase "", is gone.
type PhaseChange struct {
	Handle wire.RequestID
	Phase  string
}

// SnapshotDue asks the caller to send its durable lock table to To, a new
// leader of view Epoch: one KindSnapshot per high-water mark (Req zero,
// Ticket the mark) and per ticket (Req, Ticket, Mode, Lifetime), one
// KindSnapshotTomb per tombstone (Req, Lifetime), each with
// View.Epoch = Epoch, then one KindSnapshotDone with Size = the number of
// entries sent and Inc = Complete; every one of them with Nonce = Nonce
// and Seq = Answer. Read the table after Persist is durable and in one
// consistent read: the fence is in it, so no ticket stored later can count
// in the old view.
type SnapshotDue struct {
	To    wire.NodeID
	Epoch uint64
	Nonce uint64 // the request's number, echoed in every message
	// Since is the first request whose answer the new leader still
	// accepts: an answer being sent to a request since then may go on.
	Since    uint64
	Answer   uint64 // this answer's number, unique to this node's lives
	Complete uint64
}

// Stats counts what the node rejected or did, for metrics and tests.
type Stats struct {
	BadMessages, WrongTarget, StaleEpoch, StaleIncarnation, StaleReplies uint64
	Granted, Failed, Expired, Retransmits, DoorwayRestarts, TicketRaises uint64
	NotServing, Handoffs                                                 uint64
	// RestoredDropped counts tickets restored from the store that fewer
	// than a quorum of the view's leaders held (released while away).
	RestoredDropped uint64
	// MissedTimers counts requests whose timers were due at a tick but not
	// armed (Config.CheckIncremental only): a broken timer heap.
	MissedTimers uint64
	// MissedDecisions counts waiters left asleep on a report whose decision
	// would have done something (Config.CheckIncremental only): a broken
	// index of blocked waiters.
	MissedDecisions uint64
	// StrayReleases counts releases sent again for requests this node had
	// forgotten, which a late phase message had made a replica take again.
	StrayReleases uint64
	// OneRoundDoorways counts doorways a quorum of leaders completed in
	// one round, taking the number ENTERING proposed with the flag.
	OneRoundDoorways uint64
	// HeldBackReports counts reports a leader held back from a master
	// because nothing they would carry could matter to its requests
	// (holdsBack); a later report carries those changes.
	HeldBackReports uint64
	// LongDoorways counts doorways given up for a fresh one because they
	// lasted more than DoorwayTicks (doorwayOverdue): leaders out of reach,
	// or a herd raising its numbers past each other for that long.
	LongDoorways uint64
	// ShareBypasses counts local readers sent through the bakery by
	// themselves because their share could not be had (its try failed
	// or timed out, or its ticket ended under them): each costs a plain
	// ticket and the leaders' rounds a share's page view does not.
	ShareBypasses uint64
}

// Node is one node's lock core: master of its own requests, and replica
// when it is one of the view's leaders. It is not safe for concurrent use;
// the runtime owns it from one goroutine.
type Node struct {
	cfg   Config
	now   int64
	clock uint64 // Lamport clock
	// answers numbers this life's snapshot answers, from Incarnation<<32.
	answers uint64
	// renewRounds numbers this life's renewals (renewal.round), from
	// Incarnation<<32.
	renewRounds  uint64
	counter      uint32
	watchCounter uint64
	reportSeq    uint64
	stats        Stats

	names map[string]*replicaName
	// checks are the names' deadline checks (deadlines.go); floor is at
	// least every forgotten name's high-water mark (durable), and
	// readersForgotten when forgotten names last saw readers, by bucket.
	checks           checkHeap
	floor            uint64
	readersForgotten [readerBuckets]int64
	// restoredNames: the names that may hold restored tickets (askHolds).
	restoredNames nameSet
	// dirty: the names whose watchers are due a report; reported: the
	// names with reports their waiters have not decided on. Both are
	// settled once per Ready, so a batch of input costs one report per
	// watcher and one decision per waiter.
	dirty, reported nameSet
	// holdable is holdableMasters' map, reused from flush to flush.
	holdable map[wire.NodeID]masterHold
	minInc   map[wire.NodeID]uint32
	fence    uint64 // lock work below this epoch is refused (durable)
	// holdsAskAt: when to ask the other leaders about restored tickets.
	holdsAskAt int64
	// complete is the epoch of the last view whose handoff finished (durable).
	complete uint64
	syncs    map[uint64]*syncState // handoffs in progress, by epoch
	// readerHorizon: before this tick the replica knows nothing of readers
	// (its start, or its last handoff).
	readerHorizon int64
	adopted       map[uint64]wire.View // views this node leads and is not complete for

	// former are tickets of this node's earlier lives that replicas keep
	// (KindFormer), by request, so this life can release them.
	former map[wire.RequestID]formerTicket
	// strays are releases of this life's forgotten requests that a
	// leader took again (releaseStray), sent until it answers.
	strays  map[strayKey]strayRelease
	reqs    map[wire.RequestID]*request // by wire id
	timers  timerHeap                   // requests' next timers (masterTick)
	handles map[wire.RequestID]*request // by the handle Acquire returned
	mnames  map[string]*masterName
	// ticketGuesses: the highest ticket this node knew of each name it
	// asked for lately, bounded (noteTicket).
	ticketGuesses map[string]uint64
	// watchesDue: waits that started since the last Ready, whose first
	// watch goes out with it unless they were granted (startWait).
	watchesDue []*request
	// lazy: messages held back for company (lazy.go), in the order sent;
	// lazySpans: this Ready's candidates for it.
	lazy        []lazyMessage
	lazySpans   []msgSpan
	lazyScratch []int // holdLazy's, kept for the next Ready
	// sharesStopped: StopSharing was called; no share is taken any more.
	sharesStopped bool
	// drained: the names whose shares saw a drain, by share slot: until
	// that tick their shared tries are refused here (Config.DrainMemo).
	drained map[string][2]int64

	persists  []Write
	msgs      []wire.Message
	events    []Event
	snapshots []SnapshotDue
	phases    []PhaseChange
	handed    [5]int // lengths handed out by the last Ready
}

// New starts a node from what it persisted (nil for a first start). Its first
// Ready tells every peer that it restarted, so replicas drop its old requests
// and masters re-send what the old life held in memory.
func New(cfg Config, persisted *Durable) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: c, names: map[string]*replicaName{}, minInc: map[wire.NodeID]uint32{},
		syncs: map[uint64]*syncState{}, adopted: map[uint64]wire.View{},
		reqs: map[wire.RequestID]*request{}, handles: map[wire.RequestID]*request{}, mnames: map[string]*masterName{},
		former: map[wire.RequestID]formerTicket{}, strays: map[strayKey]strayRelease{}, dirty: nameSet{}, reported: nameSet{},
		restoredNames: nameSet{}}
	if persisted != nil {
		n.floor = persisted.Floor
	}
	n.restore(persisted)
	if persisted != nil {
		n.fence, n.complete = persisted.Fence, persisted.Complete
		for _, e := range sortedKeys(persisted.Led) {
			if e > n.complete {
				n.adopted[e] = persisted.Led[e].Leadership()
				n.startSync(n.adopted[e]) // resume what the last life left unfinished
			}
		}
	}
	n.lead(c.View)
	n.startSync(c.View)
	// Our own requests of earlier lives died with them.
	n.replicaStep(wire.Message{Kind: wire.KindRestarted, From: c.ID, Incarnation: c.Incarnation})
	for _, p := range c.Peers {
		if p != c.ID {
			n.send(wire.Message{Kind: wire.KindRestarted, To: p, Incarnation: c.Incarnation})
		}
	}
	return n, nil
}

// Stats returns the counters.
func (n *Node) Stats() Stats { return n.stats }

// View returns the current view.
func (n *Node) View() wire.View { return n.cfg.View }

// SetView installs a view newer than the current one (an older or equal
// epoch is ignored). A leader of the new view takes the lock table over
// from the previous view's leaders before it serves; requests that were
// not granted restart at the new epoch; granted leases carry on.
func (n *Node) SetView(v wire.View) {
	if v.Epoch <= n.cfg.View.Epoch {
		return
	}
	n.adoptView(v)
}

func (n *Node) send(m wire.Message) {
	n.clock++
	m.From, m.Epoch, m.Clock = n.cfg.ID, n.cfg.View.Epoch, n.clock
	n.msgs = append(n.msgs, m)
}

func (n *Node) persist(w Write) { n.persists = append(n.persists, w) }

// Acquire starts a lock request for a local client.
func (n *Node) Acquire(a Acquire) (wire.RequestID, error) {
	if err := n.validate(a); err != nil {
		return wire.RequestID{}, err
	}
	mn := n.masterName(a.Name)
	if mn.count >= n.cfg.MaxWaiters {
		if mn.count == 0 {
			delete(n.mnames, a.Name)
		}
		return wire.RequestID{}, fmt.Errorf("%w: %d requests on %q", codes.ErrOverflow, mn.count, a.Name)
	}
	wait := a.Timeout
	if wait == 0 {
		wait = n.cfg.TryTicks
	}
	r := &request{id: n.nextID(), a: a, start: n.now, dead: n.now + wait}
	r.handle = r.id
	n.reqs[r.id] = r
	n.handles[r.handle] = r
	mn.count++
	if len(a.Parents) > 0 {
		a.Parents = slices.Clone(a.Parents)
		r.a.Parents = a.Parents
		n.nestedStart(r)
		n.arm(r)
	} else {
		n.startOwn(r)
	}
	return r.id, nil
}

// Release ends a held lease, or abandons a request still waiting. It also
// releases a ticket of an earlier life of this node that the replicas
// keep (a lease granted before a restart, which its client may still
// hold): the client can give it back after the restart. EventReleased
// with id follows once a quorum of the leaders dropped the request: from
// then on no restart or handoff brings it back.
//
// name, when not empty, is the lease's name as its client knows it: a
// request of that id on another name is not the client's. Ids repeat
// across the lives of a node whose disk was lost (its incarnations start
// over), and a client of an earlier life gives its lease back by id.
func (n *Node) Release(id wire.RequestID, name string) error {
	if f, ok := n.former[id]; ok && n.handles[id] == nil && (name == "" || name == f.name) {
		n.releaseFormer(id, f)
		return nil
	}
	r := n.handles[id]
	if r == nil || r.phase == phaseReleasing || name != "" && name != r.a.Name {
		return fmt.Errorf("%w: %s", codes.ErrUnknownLease, id)
	}
	if r.local != nil {
		n.releaseLocal(r, id)
		return nil
	}
	delete(n.handles, id)
	n.phases = append(n.phases, PhaseChange{Handle: id}) // gone for its client
	r.handle, r.releaseOf = wire.RequestID{}, id
	n.startRelease(r)
	return nil
}

// Abandon gives up a request whose client went away; a granted lease is
// released. It is Release by another name, kept for the API's sake.
func (n *Node) Abandon(id wire.RequestID) error { return n.Release(id, "") }

// Renew asks to extend a held lease by its duration, counted from now. The
// lease is extended only when EventRenewed arrives.
func (n *Node) Renew(id wire.RequestID) error {
	r := n.handles[id]
	if r != nil && r.phase == phaseLocalHeld {
		if sh := r.local.req; sh == nil || sh.phase != phaseHeld {
			return fmt.Errorf("%w: %s: its node's shared read ticket is gone", codes.ErrLost, id)
		}
		n.renewParents(r) // first: the grant's time to live counts theirs
		n.renewLocal(r)
		return nil
	}
	if r == nil || r.phase != phaseHeld {
		return fmt.Errorf("%w: %s is not held", codes.ErrLost, id)
	}
	n.renewParents(r)
	r.renew = &renewal{start: n.now, acks: map[wire.NodeID]bool{}, rejects: map[wire.NodeID]bool{}}
	n.sendRenew(r, nil)
	return nil
}

// ForceRelease is the operator's unlock: it tells every leader of the view
// to drop req's ticket of name, whoever holds it, until a quorum of them
// confirmed (or TryTicks passed). The leaders tell the holder's node at
// once (KindRevoked). EventReleased with req follows: CodeUnknownLease if
// no leader of that quorum had the request, CodeNotReady if no quorum
// answered in time.
func (n *Node) ForceRelease(name string, req wire.RequestID) error {
	switch {
	case name == "" || len(name) > n.cfg.MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes", codes.ErrInvalid, len(name))
	case req.Node == 0:
		return fmt.Errorf("%w: no request", codes.ErrInvalid)
	case len(n.cfg.View.Leaders) == 0:
		return fmt.Errorf("%w: no leaders to ask", codes.ErrNotReady)
	}
	if r := n.reqs[req]; r != nil {
		if r.a.Name != name {
			return fmt.Errorf("%w: request %s is not on %q", codes.ErrInvalid, req, name)
		}
		// A request of this node's own clients: the leaders tell only
		// other nodes' masters (KindRevoked), so end it here.
		n.revoke(r)
		if n.reqs[req] == r && r.phase == phaseReleasing {
			r.forceOf = req
		} else {
			n.events = append(n.events, Event{Kind: EventReleased, Req: req, Name: name, Forced: true})
		}
		return nil
	}
	n.releaseOther(req, name, n.cfg.TryTicks, true)
	return nil
}

// Quiet reports whether nothing of this node's own runs on its timers: no
// request of its clients (waiting, held, releasing, a shared read ticket
// or a local reader) and no handoff under way. The runtime may then tick
// it less often (several ticks at once, late): what remains on timers
// is the replica side's (the expiry of other nodes' tickets, tombstones,
// the questions about restored tickets), and running those late only
// keeps what they drop a little longer. A lease of this node's own must
// end on time, to its client, before the leaders drop its ticket: a node
// with one is never quiet.
func (n *Node) Quiet() bool { return len(n.reqs) == 0 && len(n.syncs) == 0 && len(n.lazy) == 0 }

// Tick advances time by one tick.
func (n *Node) Tick() {
	n.now++
	n.syncTick()
	n.replicaTick()
	n.masterTick()
}

// Step handles one message from a peer. A message that is malformed, for
// another node or from another epoch is counted and dropped with an error;
// it changes nothing.
func (n *Node) Step(m wire.Message) error {
	if err := n.check(m); err != nil {
		return err
	}
	n.clock = max(n.clock, m.Clock) + 1
	switch m.Kind {
	case wire.KindRestarted:
		n.replicaStep(m)
		n.masterRestarted(m.From, m.Incarnation)
	case wire.KindFormer:
		n.onFormer(m)
	case wire.KindRenew:
		n.renewStep(m) // adopt.go: an earlier life's lease too
	case wire.KindSnapshotRequest:
		n.onSnapshotRequest(m)
	case wire.KindSnapshot, wire.KindSnapshotTomb, wire.KindSnapshotDone:
		n.onSnapshot(m)
	default:
		if masterKind(m.Kind) {
			n.masterStep(m)
		} else {
			n.replicaStep(m) // check let only replicaKind through
		}
	}
	return nil
}

func (n *Node) check(m wire.Message) error {
	bad := func(format string, args ...any) error {
		n.stats.BadMessages++
		return fmt.Errorf("%w: "+format, append([]any{ErrBadMessage}, args...)...)
	}
	if m.To != n.cfg.ID {
		n.stats.WrongTarget++
		return fmt.Errorf("%w: to %d, I am %d", ErrWrongTarget, m.To, n.cfg.ID)
	}
	if m.From == 0 {
		return bad("no sender")
	}
	switch m.Kind {
	case wire.KindRestarted:
		if m.Incarnation == 0 {
			return bad("incarnation 0")
		}
		return nil // about lives, not views: valid in any epoch
	case wire.KindYield:
		if m.Name == "" || len(m.Name) > n.cfg.MaxNameLen || m.Yield > wire.YieldDrain {
			return bad("yield %d of a name of %d bytes", m.Yield, len(m.Name))
		}
		return nil // a writer waits, whatever the view: always worth heeding
	case wire.KindFormer:
		if m.Name == "" || len(m.Name) > n.cfg.MaxNameLen || m.Lifetime > maxSpan*4 {
			return bad("former ticket with a name of %d bytes, lifetime %d", len(m.Name), m.Lifetime)
		}
		return nil // about lives too: the restarted node may have no view yet
	case wire.KindSnapshotRequest, wire.KindSnapshot, wire.KindSnapshotTomb, wire.KindSnapshotDone:
		if why := n.checkHandoff(m); why != "" {
			return bad("%s", why)
		}
		return nil
	default:
		switch {
		case replicaKind(m.Kind):
			if !n.cfg.View.IsLeader(n.cfg.ID) {
				n.stats.WrongTarget++
				return fmt.Errorf("%w: %s to a node that is not a leader", ErrWrongTarget, m.Kind)
			}
			if m.Kind == wire.KindEnter && !m.Mode.Valid() {
				return bad("mode %d", m.Mode)
			}
			if m.Lifetime > maxSpan*4 {
				return bad("lifetime %d", m.Lifetime)
			}
		case masterKind(m.Kind):
			if m.Yield > wire.YieldDrain {
				return bad("yield %d", m.Yield)
			}
		default:
			return bad("kind %s is not for the lock core", m.Kind)
		}
	}
	if m.Name == "" || len(m.Name) > n.cfg.MaxNameLen {
		return bad("name of %d bytes", len(m.Name))
	}
	if m.Epoch != n.cfg.View.Epoch {
		n.stats.StaleEpoch++
		return fmt.Errorf("%w: epoch %d, mine is %d", ErrStaleEpoch, m.Epoch, n.cfg.View.Epoch)
	}
	if replicaKind(m.Kind) && !n.Serving() {
		n.stats.NotServing++
		return fmt.Errorf("%w: epoch %d, fenced at %d, complete for %d", ErrNotServing, n.cfg.View.Epoch, n.fence, n.complete)
	}
	return nil
}

// checkHandoff says what is wrong with a message of the handoff between
// epochs (View.Epoch says which), or "".
func (n *Node) checkHandoff(m wire.Message) string {
	entry := m.Kind == wire.KindSnapshot || m.Kind == wire.KindSnapshotTomb
	switch {
	case m.View.Epoch == 0 || entry && (m.Name == "" || len(m.Name) > n.cfg.MaxNameLen):
		return fmt.Sprintf("%s without an epoch or a name", m.Kind)
	case entry && m.Lifetime > maxSpan*4:
		return fmt.Sprintf("lifetime %d", m.Lifetime)
	case m.Kind == wire.KindSnapshotTomb && m.Req.Node == 0:
		return "tombstone without a request"
	// Only a leader of the view it names may ask, and only a leader of
	// that view's previous view is asked: a stray request must not fence
	// this node.
	case m.Kind == wire.KindSnapshotRequest && (!slices.Contains(m.View.Leaders, m.From) ||
		!slices.Contains(m.View.PrevLeaders, n.cfg.ID) || m.View.PrevEpoch >= m.View.Epoch):
		return fmt.Sprintf("snapshot request from %d for view %d %v after %d %v", m.From, m.View.Epoch,
			m.View.Leaders, m.View.PrevEpoch, m.View.PrevLeaders)
	}
	return ""
}

// The message kinds of the bakery, by the half of the core that takes
// them: this is their one list (Step and check dispatch on it). The
// kinds of lives, yields and handoffs are Step's own cases.

// replicaKind: a master's request to a leader's replica.
func replicaKind(k wire.Kind) bool {
	switch k {
	case wire.KindEnter, wire.KindGetMax, wire.KindAddTicket, wire.KindExit, wire.KindWatch,
		wire.KindUnwatch, wire.KindRelease, wire.KindRenew, wire.KindActivate, wire.KindHolds, wire.KindHoldsAck,
		wire.KindConfirm:
		return true
	}
	return false
}

// masterKind: a leader's answer or report to a master (KindYield, which
// check takes first, among them).
func masterKind(k wire.Kind) bool {
	switch k {
	case wire.KindEnterAck, wire.KindGetMaxAck, wire.KindAddTicketAck, wire.KindReleaseAck, wire.KindRenewAck,
		wire.KindReport, wire.KindActivateAck, wire.KindRevoked, wire.KindConfirmAck, wire.KindYield:
		return true
	}
	return false
}

// HasReady reports whether Ready has anything to handle.
func (n *Node) HasReady() bool {
	return len(n.dirty) > 0 || len(n.reported) > 0 || len(n.watchesDue) > 0 || len(n.persists) > 0 || len(n.msgs) > 0 || len(n.events) > 0 || len(n.snapshots) > 0 || len(n.phases) > 0 || n.lazyDue()
}

// Ready returns the output accumulated so far; Advance drops exactly what
// it handed out, even if more input came in between. First it settles
// what the input since the last Ready left due: waiters decide on the
// reports that came, and watchers get reports of the tables that changed.
func (n *Node) Ready() Ready {
	n.decideReported()
	n.sendWatches()
	n.flushReports()
	n.holdLazy()
	n.handed = [5]int{len(n.persists), len(n.msgs), len(n.events), len(n.snapshots), len(n.phases)}
	return Ready{Persist: n.persists[:len(n.persists):len(n.persists)],
		Messages: n.msgs[:len(n.msgs):len(n.msgs)], Events: n.events[:len(n.events):len(n.events)],
		Snapshots: n.snapshots[:len(n.snapshots):len(n.snapshots)], Phases: n.phases[:len(n.phases):len(n.phases)]}
}

// Advance acknowledges that the last Ready was handled. What that Ready
// handed out stays intact: the node only stops pointing at it.
func (n *Node) Advance() {
	n.persists = dropHanded(n.persists, n.handed[0])
	n.msgs = dropHanded(n.msgs, n.handed[1])
	n.shiftLazySpans(n.handed[1])
	n.events = dropHanded(n.events, n.handed[2])
	n.snapshots = dropHanded(n.snapshots, n.handed[3])
	n.phases = dropHanded(n.phases, n.handed[4])
	n.handed = [5]int{}
}

func dropHanded[T any](s []T, k int) []T {
	if k == len(s) {
		return nil
	}
	return s[k:]
}

// RequestStatus describes one of this node's own requests.
type RequestStatus struct {
	Handle wire.RequestID
	// Req is the id of its current doorway, on the wire and in the
	// leaders' tables (Handle's, unless the doorway restarted).
	Req    wire.RequestID
	Name   string
	Mode   wire.Mode
	Phase  string
	Ticket uint64
	// Since is the tick of the Acquire call.
	Since int64
	// Asked is AskedToYield of Handle.
	Asked wire.Yield
}

var phaseNames = [...]string{"queued", "entering", "add-ticket", "waiting", "held", "releasing", "waiting-shared", "held-shared",
	"waiting-parents"}

// PhaseNames are the phases RequestStatus and PhaseChange name, in order.
func PhaseNames() []string { return append([]string(nil), phaseNames[:]...) }

// Requests lists this node's own requests that a client still holds or
// waits for, in handle order.
func (n *Node) Requests() []RequestStatus {
	out := []RequestStatus{}
	for _, h := range sortedReqs(n.handles) {
		r := n.handles[h]
		out = append(out, RequestStatus{Handle: h, Req: r.id, Name: r.a.Name, Mode: r.a.Mode, Phase: phaseNames[r.phase],
			Ticket: r.ticket, Since: r.start, Asked: n.AskedToYield(h)})
	}
	return out
}

// AskedToYield is the strongest yield the leaders asked of the plain
// shared ticket of the request of handle h, or of its parents' (a nested
// name's): a writer waits for it. A reader on a share hears of it
// through Draining and Yielding instead (YieldNone here). It only reads.
func (n *Node) AskedToYield(h wire.RequestID) wire.Yield {
	r := n.handles[h]
	if r == nil {
		return wire.YieldNone
	}
	y := r.asked
	for _, p := range r.parents {
		y = max(y, p.asked)
	}
	return y
}

// TableEntry is one request of a name as this replica holds it, with the
// ticks it learned of it (Since) and will forget it by itself (Until: the
// lease, if granted, ends before).
type TableEntry struct {
	Entry        wire.Entry
	Since, Until int64
}

// TableDetail is Table with the ticks of each entry, for listings.
func (n *Node) TableDetail(name string) []TableEntry {
	t := n.names[name]
	if t == nil {
		return nil
	}
	out := make([]TableEntry, 0, len(t.recs))
	for _, req := range sortedReqs(t.recs) {
		r := t.recs[req]
		out = append(out, TableEntry{Entry: r.entry, Since: r.since, Until: r.deadline})
	}
	return out
}

// Names lists, in order, the names this node holds anything of as a
// replica: tickets or a high-water mark.
func (n *Node) Names() []string {
	out := []string{}
	for _, name := range sortedKeys(n.names) {
		if t := n.names[name]; len(t.recs) > 0 || t.highWater > 0 {
			out = append(out, name)
		}
	}
	return out
}

// Table returns what this node, as a replica, holds for name: its requests
// in order of id, and the name's high-water ticket (the floor, for a name
// it does not hold: a ticket of it must be above that).
func (n *Node) Table(name string) ([]wire.Entry, uint64) {
	t := n.names[name]
	if t == nil {
		return nil, n.floor
	}
	out := make([]wire.Entry, 0, len(t.recs))
	for _, req := range sortedReqs(t.recs) {
		out = append(out, t.recs[req].entry)
	}
	return out, t.highWater
}
