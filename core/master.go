package core

import (
	"cmp"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// The master role: this node's own requests, driven through the phases.

type phase uint8

const (
	phaseQueued    phase = iota // waiting for a view
	phaseEnter                  // ENTERING, which reads the maximum too
	phaseAddTicket              // ADD_TICKET (+ EXITING)
	phaseWait                   // ACTIVATE: waiting on reports
	phaseHeld                   // granted
	phaseReleasing              // gone for the client; telling the replicas
	phaseLocalWait              // a local reader waiting for its node's shared read ticket
	phaseLocalHeld              // a local reader granted on the shared read ticket
	phaseParents                // a nested name's request waiting for its parents' tickets (nested.go)
)

// request is one of this node's requests, through all its phases. Its
// fields are grouped by the phase that uses them.
type request struct {
	id wire.RequestID // of the current doorway attempt, on the wire
	// handle is the id Acquire returned, which events carry. A doorway that
	// restarts gets a fresh id but keeps the handle; the attempt it leaves
	// behind has a zero handle and reports nothing.
	handle wire.RequestID
	a      Acquire
	phase  phase
	start  int64 // tick of the Acquire call
	dead   int64 // obtain deadline
	sentAt int64 // last send of the current phase's messages
	// doorAt is the tick this id's doorway began (its first ENTERING). A
	// doorway longer than DoorwayTicks is given up (tickWaiting): a leader's
	// tombstone of an operator's force-unlock that found no request
	// lasts longer than that, so no leader takes a forced id's number
	// after its tombstone went and still has it counted.
	doorAt int64
	// timerAt: the tick its timers are armed for in Node.timers (0: none);
	// no later than the first tick at which masterTick acts on it.
	timerAt int64
	// acks of the current phase, by leader; in phaseEnter the value is the
	// leader's incarnation.
	acks    map[wire.NodeID]uint32
	resends int // retransmits of the current phase
	doorway
	waiting
	holding
	releasing
	// share: this is the cluster request of a shared read ticket (no
	// client of its own). local: a local reader on that share
	// (phaseLocalWait, phaseLocalHeld), which never reaches a leader.
	share, local *share
	// ofShare: a share's cluster request, from its doorway until every
	// leader dropped it (SharesOut counts these).
	ofShare bool
	// asked: the strongest yield leaders asked of this request's ticket
	// when it is a plain shared one (a reader on no share: a limited
	// reader, one whose share could not be had, a share-less node's). It
	// only tells the client (AskedToYield): a page view on a plain ticket
	// hears of a drain as one on a share does.
	asked wire.Yield
	// sharedRelease: the release of a share whose last local reader left
	// at readersLeftAt (the replicas count the quiet period from there).
	sharedRelease bool
	readersLeftAt int64
	// localEnd: a local reader's lease end and the end of its grace,
	// both within the share's lease.
	unlockAt, endAt int64
	// parents: a nested name's tickets on the names above it, outermost
	// first (Acquire.Parents); parentOf: this is one of them, of that
	// request, which gets its events (nested.go).
	parents  []*request
	parentOf *request
}

// doorway is what the bakery's doorway (ENTERING to ADD_TICKET) gathers.
type doorway struct {
	// enterInc: the leaders whose ENTERING ack arrived before GET_MAX went
	// out, with their incarnation. ADD_TICKET goes to these only.
	enterInc map[wire.NodeID]uint32
	rejects  map[wire.NodeID]bool // refused ADD_TICKET for good (choosing flag lost)
	tooLow   map[wire.NodeID]bool // refused the current number as too low
	raises   uint64
	max      uint64
	ticket   uint64 // the number: the fencing token once granted
	// guess is the number ENTERING proposed with the choosing flag (0:
	// none), from the last this node knew of the name (ticketGuess); took
	// are the leaders that took it with the flag, in one step.
	guess uint64
	took  map[wire.NodeID]bool
	// heldAt: the leaders whose ack of the current ticket said they hold
	// it already (they took it with nothing ahead, see holdIfClear); a
	// quorum of them makes the confirmation round needless.
	heldAt map[wire.NodeID]bool
}

// waiting is what a request with a ticket waits on (phaseWait).
type waiting struct {
	// Activation (see Decision.Activate): activating while the mark is on
	// its way to a quorum, activated once it is there; marked once any
	// mark was sent, so refreshes repeat the current one.
	activating, activated, marked bool
	actAcks                       map[wire.NodeID]bool
	actSentAt                     int64
	actRound                      uint64 // numbers the marks; acks must echo it
	// confirm: the grant is decided and the leaders are asked whether they
	// still have the ticket (see startConfirm); nil until then.
	confirm *confirmation
	// retryAt: when the policy asked to be asked again (0: not asked).
	retryAt  int64
	watchSeq uint64
	// addSeq is the watch sequence the current ADD_TICKET carries: a
	// replica that takes the ticket watches the name for us from then on,
	// so the reports that decide the grant come with the acks, a round
	// before the ones answering the wait's watch (see fresh). firstWatch
	// is the wait's first watchSeq; an activation or a retry moves past it.
	addSeq, firstWatch uint64
	// firstSeen: the replicas whose first report made after the ticket was
	// durable has been read; first: those reports. Once firstSeen is a
	// quorum, a request in none of them entered its doorway after our
	// ticket was durable, so its number is higher: we never wait for it to
	// finish choosing (as in Lamport's bakery, where a process waits once
	// for each process choosing when it looked).
	firstSeen map[wire.NodeID]bool
	first     []*report
	// blocked: the last decision was a wait on blockedBy alone
	// (Decision.BlockedBy), on fresh reports of every leader; the waiter
	// sleeps in masterName.blockedOn until a report changes that entry or
	// its own.
	blocked   bool
	blockedBy wire.RequestID
	// sharesAsked: the shared read tickets ahead that a limited reader has
	// asked to yield (askSharesAhead).
	sharesAsked map[wire.RequestID]bool
}

// holding is a granted lease's (phaseHeld).
type holding struct {
	// leaseStart is the tick the lease's duration is counted from: the grant,
	// or the call of the last confirmed renewal.
	leaseStart int64
	unlocking  bool
	renew      *renewal
}

// releasing is a request on its way out (phaseReleasing).
type releasing struct {
	releaseUntil int64
	// releaseOf and forceOf are the ids a Release and a ForceRelease call
	// asked to drop (both may wait on one request: a client releasing as
	// an operator forces it), each told EventReleased once a quorum of
	// leaders dropped it (then zero); had: a leader that acked had it.
	releaseOf, forceOf wire.RequestID
	had                bool
	// held: a leader that acked the release had the request as held.
	held bool
}

// confirmation is the round between a grant's decision and its event.
type confirmation struct {
	sentAt  int64
	acks    map[wire.NodeID]bool
	rejects map[wire.NodeID]bool
}

type renewal struct {
	start   int64
	sentAt  int64
	acks    map[wire.NodeID]bool
	rejects map[wire.NodeID]bool
	// round numbers this renewal on the wire (Message.Round), which the
	// leaders echo: an answer to an earlier renewal of the request, late,
	// says the ticket was extended from that one's time, not this one's.
	round uint64
}

// report is the latest report of one replica about one name: its table,
// never changed once made (a newer one replaces it), so a pointer names
// its content.
type report struct {
	inc          uint32
	seq, echo    uint64
	sinceReaders uint64
	entries      []wire.Entry // in request order
}

// has reports whether the report lists req.
func (rep *report) has(req wire.RequestID) bool {
	_, ok := rep.entry(req)
	return ok
}

// entry is req's entry in the report.
func (rep *report) entry(req wire.RequestID) (wire.Entry, bool) {
	i, ok := slices.BinarySearchFunc(rep.entries, req, func(e wire.Entry, id wire.RequestID) int { return e.Req.Compare(id) })
	if !ok {
		return wire.Entry{}, false
	}
	return rep.entries[i], true
}

// relevant reports whether req was in one of r's first reports.
func (r *request) relevant(req wire.RequestID) bool {
	for _, rep := range r.first {
		if rep.has(req) {
			return true
		}
	}
	return false
}

type masterName struct {
	reports map[wire.NodeID]*report
	waiters map[wire.RequestID]*request // this node's requests in phaseWait on the name, by wire id
	count   int                         // requests of this node on the name, in any phase
	adding  int                         // of those, in phaseAddTicket: their tickets watch the name too
	// rewatched: when each replica was last asked for the whole table.
	rewatched map[wire.NodeID]int64
	// merges caches the merge of each set of fresh reports asked for:
	// waiters that see the same reports share one merge.
	merges []mergedReports
	// A report makes only the waiters it may concern decide again: those
	// not blocked (undecided), those blocked on an entry it changed, and
	// those whose own entry it changed. changed: the requests whose entry
	// changed in a report since the waiters last decided; changedAll: a
	// report that cannot be compared (a replica's first, or a new
	// incarnation's), after which all decide.
	undecided  map[wire.RequestID]*request
	blockedOn  map[wire.RequestID]map[wire.RequestID]*request
	changed    map[wire.RequestID]struct{}
	changedAll bool
	// shares are this node's shared tickets of the name, if any
	// (Config.ShareLease): READ_ONLY for its readers, INTENT_SHARED for
	// the readers of names below it (shareSlot).
	shares [2]*share
}

func (mn *masterName) addWaiter(r *request) {
	mn.waiters[r.id] = r
	if mn.undecided == nil {
		mn.undecided = map[wire.RequestID]*request{}
	}
	mn.undecided[r.id] = r
}

func (mn *masterName) removeWaiter(r *request) {
	mn.wake(r)
	delete(mn.waiters, r.id)
	delete(mn.undecided, r.id)
}

// block puts r to sleep until a report changes b or r (see decideReported).
func (mn *masterName) block(r *request, b wire.RequestID) {
	delete(mn.undecided, r.id)
	r.blocked, r.blockedBy = true, b
	if mn.blockedOn == nil {
		mn.blockedOn = map[wire.RequestID]map[wire.RequestID]*request{}
	}
	set := mn.blockedOn[b]
	if set == nil {
		set = map[wire.RequestID]*request{}
		mn.blockedOn[b] = set
	}
	set[r.id] = r
}

// wake makes r decide at every report again.
func (mn *masterName) wake(r *request) {
	if !r.blocked {
		return
	}
	r.blocked = false
	if set := mn.blockedOn[r.blockedBy]; set != nil {
		if delete(set, r.id); len(set) == 0 {
			delete(mn.blockedOn, r.blockedBy)
		}
	}
	mn.undecided[r.id] = r
}

// change notes that a report changed req's entry.
func (mn *masterName) change(req wire.RequestID) {
	if mn.changed == nil {
		mn.changed = map[wire.RequestID]struct{}{}
	}
	mn.changed[req] = struct{}{}
}

// toDecide takes the waiters the reports since the last call may concern,
// in request order, and forgets the changes. (MutantSleepBlocked: only
// those not blocked.)
func (mn *masterName) toDecide(mutant Mutant) []*request {
	var out []*request
	if mutant.on(MutantSleepBlocked) {
		out = slices.Collect(maps.Values(mn.undecided))
	} else if mn.changedAll {
		out = slices.Collect(maps.Values(mn.waiters))
	} else {
		out = slices.Collect(maps.Values(mn.undecided))
		for req := range mn.changed {
			for _, r := range mn.blockedOn[req] {
				out = append(out, r)
			}
			if r := mn.waiters[req]; r != nil && r.blocked {
				out = append(out, r)
			}
		}
	}
	clear(mn.changed)
	mn.changedAll = false
	slices.SortFunc(out, func(a, b *request) int { return a.id.Compare(b.id) })
	return slices.CompactFunc(out, func(a, b *request) bool { return a == b })
}

// mergedReports is the merge of a set of reports: per request, the
// furthest state and the highest number any of them reported (both only
// grow), active if any says so.
type mergedReports struct {
	from []*report
	// choosing: the requests still choosing; ticketed: the others, and
	// those choosing that proposed a number already, in request order:
	// what a waiter's grant is decided on.
	choosing, ticketed []wire.Entry
}

// maxMerges bounds masterName.merges: a name's waiters see at most a few
// sets of fresh reports at once.
const maxMerges = 8

// merged is the merge of the reports from, cached while they stand. The
// reports are in request order, so it is a k-way merge of sorted lists.
func (mn *masterName) merged(from []*report) *mergedReports {
	for i := range mn.merges {
		if slices.Equal(mn.merges[i].from, from) {
			return &mn.merges[i]
		}
	}
	m := mergedReports{from: slices.Clone(from), ticketed: make([]wire.Entry, 0, len(from[0].entries))}
	next := make([]int, len(from)) // per report, its first entry not merged yet
	for {
		var e wire.Entry
		found := false
		for i, rep := range from {
			if next[i] == len(rep.entries) {
				continue
			}
			switch f := rep.entries[next[i]]; {
			case !found || f.Req.Compare(e.Req) < 0:
				e, found = f, true
			case f.Req == e.Req:
				e.State, e.Ticket, e.Active = max(e.State, f.State), max(e.Ticket, f.Ticket), e.Active || f.Active
			}
		}
		if !found {
			break
		}
		for i, rep := range from {
			if next[i] < len(rep.entries) && rep.entries[next[i]].Req == e.Req {
				next[i]++
			}
		}
		if e.State == wire.StateChoosing {
			m.choosing = append(m.choosing, e)
			if e.Ticket == 0 {
				continue // its number will be above ours
			}
		}
		m.ticketed = append(m.ticketed, e)
	}
	if len(mn.merges) >= maxMerges {
		mn.merges = nil
	}
	mn.merges = append(mn.merges, m)
	return &mn.merges[len(mn.merges)-1]
}

func (n *Node) masterName(name string) *masterName {
	mn := n.mnames[name]
	if mn == nil {
		mn = &masterName{reports: map[wire.NodeID]*report{}, waiters: map[wire.RequestID]*request{}}
		n.mnames[name] = mn
	}
	return mn
}

func (n *Node) quorum() int {
	if n.cfg.Mutant.on(MutantQuorumOfOne) {
		return 1
	}
	return n.cfg.View.Quorum()
}

func (n *Node) nextID() wire.RequestID {
	n.counter++
	seq := uint64(n.cfg.Incarnation)<<32 | uint64(n.counter)
	if n.cfg.Mutant.on(MutantStaleIncarnation) {
		seq = uint64(n.counter)
	}
	return wire.RequestID{Node: n.cfg.ID, Seq: seq}
}

// lifetime is how long a replica must keep the request from now: until its
// obtain deadline, plus the lease and its grace. A replica counts it from
// when the message arrives, which is never earlier than now, so it never
// forgets a request its master may still hold.
func (n *Node) lifetime(r *request) uint64 {
	return uint64(max(r.dead-n.now, 0) + r.a.Duration + r.a.Grace)
}

func (n *Node) toLeaders(m wire.Message, skip func(wire.NodeID) bool) {
	for _, l := range n.cfg.View.Leaders {
		if skip == nil || !skip(l) {
			m.To = l
			n.send(m)
		}
	}
}

func (n *Node) startEnter(r *request) {
	n.setPhase(r, phaseEnter)
	r.sentAt, r.resends, r.doorAt = n.now, 0, n.now
	r.acks, r.enterInc, r.rejects, r.max = map[wire.NodeID]uint32{}, nil, nil, 0
	r.guess, r.took, r.heldAt = 0, nil, nil
	if g := n.ticketGuesses[r.a.Name]; g > 0 && !n.cfg.PlainDoorway && !n.crowded(r.a.Name) {
		// The number goes with the choosing flag: a leader whose mark is
		// below it takes it in the same step, and a quorum of them makes
		// the doorway one round (onEnterTicketAck). A leader that refuses
		// it answers as to a plain ENTERING.
		r.guess, r.ticket, r.took = g+1, g+1, map[wire.NodeID]bool{}
		n.watchCounter++
		r.addSeq = n.watchCounter
		n.masterName(r.a.Name).adding++
		// Every leader is proposed the number, and the first quorum of
		// takers ends the doorway: one leader's slow sync does not hold
		// it up (sparing the slowest one its sync, and so waiting for
		// both others, measured worse tails).
	}
	n.sendPhase(r, nil)
}

// crowded: this node has other requests on name in their doorway or
// waiting, so the name is contended and a number proposed from the last
// one seen would likely meet another's: each such proposal refused at
// some leaders and taken at others costs a raise and a sync more.
func (n *Node) crowded(name string) bool {
	mn := n.mnames[name]
	return mn != nil && (len(mn.waiters) > 0 || mn.adding > 0)
}

// maxTicketGuesses bounds the names whose last ticket a node remembers for
// its next doorway there; past it, they are forgotten all at once, which
// costs each of those names one plain doorway.
const maxTicketGuesses = 4096

// noteTicket remembers that name had a ticket as high as t: this node's
// next doorway there proposes t+1 with its choosing flag.
func (n *Node) noteTicket(name string, t uint64) {
	if t <= n.ticketGuesses[name] {
		return
	}
	if n.ticketGuesses == nil || len(n.ticketGuesses) >= maxTicketGuesses {
		n.ticketGuesses = map[string]uint64{}
	}
	n.ticketGuesses[name] = t
}

// sendPhase sends the current phase's message to every leader skip allows.
func (n *Node) sendPhase(r *request, skip func(wire.NodeID) bool) {
	n.arm(r)
	m := wire.Message{Name: r.a.Name, Req: r.id, Mode: r.a.Mode, Lifetime: n.lifetime(r)}
	switch r.phase {
	case phaseEnter:
		m.Kind, m.Try, m.Shared = wire.KindEnter, r.a.Timeout == 0, r.share != nil
		if r.guess != 0 { // the proposed number, to every leader
			m.Ticket, m.WatchSeq = r.guess, r.addSeq
		}
		n.toLeaders(m, skip)
		return
	case phaseAddTicket:
		m.Kind, m.Ticket, m.WatchSeq = wire.KindAddTicket, r.ticket, r.addSeq
		for _, l := range sortedNodes(r.enterInc) {
			if !r.rejects[l] && !r.tooLow[l] && (skip == nil || !skip(l)) {
				m.To, m.Incarnation = l, r.enterInc[l]
				n.send(m)
			}
		}
		return
	case phaseWait:
		// EXITING goes with every (re)watch: a lost one would leave others
		// waiting on a choosing flag.
		m.Kind, m.Ticket = wire.KindExit, r.ticket
		n.toLeaders(m, skip)
		m.Kind, m.WatchSeq = wire.KindWatch, r.watchSeq
	case phaseReleasing:
		m.Kind = wire.KindRelease
		if r.sharedRelease {
			m.ReadersAgo = uint64(max(n.now-r.readersLeftAt, 0))
		}
	default:
		return
	}
	n.toLeaders(m, skip)
}

// addTicketResends is how many times ADD_TICKET is sent again before the
// doorway gives up on the leaders that have not answered.
const addTicketResends = 3

func (n *Node) notAcked(r *request) func(wire.NodeID) bool {
	return func(l wire.NodeID) bool { _, ok := r.acks[l]; return ok }
}

// masterStep handles replies addressed to this node's requests: one
// handler a reply, each for the phase that waits for it. A reply no phase
// waits for any more is stale.
func (n *Node) masterStep(m wire.Message) {
	if m.Kind == wire.KindReport {
		n.onReport(m)
		return
	}
	if m.Kind == wire.KindYield && m.Yield == wire.YieldNone {
		n.drainOver(m.Name, m.Mode) // see share.go, drain memos
		return
	}
	r := n.reqs[m.Req]
	if r != nil && r.share != nil && m.Yield != wire.YieldNone {
		// A writer waits: from any leader, of any view, in any answer.
		// Yielding only ever makes the node more careful.
		n.onYield(r, m.Yield)
	} else if r != nil && r.local == nil && r.a.Mode.Shared() && !n.cfg.Mutant.on(MutantPlainReaderUntold) {
		r.asked = max(r.asked, m.Yield)
	}
	if m.Kind == wire.KindYield {
		return
	}
	if r == nil && m.Kind == wire.KindReleaseAck {
		delete(n.strays, strayKey{req: m.Req, leader: m.From}) // a stray's release arrived
	}
	if r == nil || !n.cfg.View.IsLeader(m.From) {
		n.stats.StaleReplies++
		if r == nil && !m.Reject && (m.Kind == wire.KindEnterAck || m.Kind == wire.KindAddTicketAck) && n.cfg.View.IsLeader(m.From) {
			n.releaseStray(m.From, m.Name, m.Req)
		}
		return
	}
	switch {
	case m.Kind == wire.KindEnterAck && r.phase == phaseEnter:
		n.onEnterAck(r, m)
	case m.Kind == wire.KindAddTicketAck && r.phase == phaseEnter && r.guess != 0 && m.Ticket == r.guess && !m.Reject:
		n.onEnterTicketAck(r, m)
	case m.Kind == wire.KindAddTicketAck && r.phase == phaseAddTicket && m.Ticket == r.ticket:
		n.onAddTicketAck(r, m)
	case m.Kind == wire.KindActivateAck && r.phase == phaseWait && r.activating:
		if !m.Reject && m.Round == r.actRound {
			r.actAcks[m.From] = true
			if len(r.actAcks) >= n.quorum() {
				n.onActivated(r)
			}
		}
	case m.Kind == wire.KindActivateAck:
		// An ack of a mark that is over, or of a clearing: nothing to do.
	case m.Kind == wire.KindConfirmAck && r.phase == phaseWait && r.confirm != nil && m.Ticket == r.ticket:
		n.onConfirmAck(r, m)
	case m.Kind == wire.KindConfirmAck:
	case m.Kind == wire.KindRevoked:
		n.revoke(r)
	case m.Kind == wire.KindReleaseAck && r.phase == phaseReleasing:
		n.onReleaseAck(r, m)
	case m.Kind == wire.KindRenewAck && r.renew != nil:
		n.onRenewAck(r, m)
	default:
		n.stats.StaleReplies++
	}
}

// onEnterAck counts a choosing flag set, with the replica's high-water
// mark read in the same step. Once a quorum set the flag, the number is
// proposed: one round instead of Lamport's two (set the flag, then read
// every number). Reading early is safe because a replica refuses a number
// not above its mark (onAddTicket): a request that is not in a waiter's
// first reports set its flag, and so sends its number, only after the
// waiter's ticket was taken by the replica of those reports that its own
// quorum meets (see fresh), and read there a mark at least as high.
func (n *Node) onEnterAck(r *request, m wire.Message) {
	if m.Reject {
		if r.share != nil && m.Code == wire.CodeDraining {
			n.markDrained(r.a.Name, shareSlot(r.a.Mode)) // the leader remembers us
		}
		n.fail(r, m.Code)
		return
	}
	r.acks[m.From] = m.Incarnation
	r.max = max(r.max, m.HighWater)
	n.noteTicket(r.a.Name, m.HighWater)
	n.enterQuorum(r, false)
}

// onEnterTicketAck counts a leader that took the number ENTERING proposed
// with the choosing flag. The same argument as onEnterAck's holds, with the
// mark read and the number checked against it in one step: the leader
// refuses a number not above its mark, and a number a quorum took with the
// flag is as final as one ADD_TICKET got there.
func (n *Node) onEnterTicketAck(r *request, m wire.Message) {
	r.acks[m.From] = m.Incarnation
	r.took[m.From] = true
	if m.Held {
		r.markedHeldAt(m.From)
	}
	n.enterQuorum(r, false)
}

// enterQuorum moves r on once a quorum answered ENTERING: to its wait when
// a quorum took the proposed number with the flag, else to ADD_TICKET with
// a number above every mark read (the proposed one if it still is; the
// leaders that took it then count as acks of it).
//
// While leaders that have not answered could still make a quorum of
// takers of a proposed number, it waits for them (a taker's answer comes
// after a sync, a refusal's without), until the retransmit timer says
// they are late (late).
func (n *Node) enterQuorum(r *request, late bool) {
	if len(r.acks) < n.quorum() {
		return
	}
	if r.guess != 0 && len(r.took) < n.quorum() && !late {
		pending := 0
		for _, l := range n.cfg.View.Leaders {
			if _, answered := r.acks[l]; !answered {
				pending++
			}
		}
		if len(r.took)+pending >= n.quorum() {
			return
		}
	}
	r.enterInc = maps.Clone(r.acks)
	if r.guess == 0 {
		n.masterName(r.a.Name).adding++
	}
	if r.guess != 0 && len(r.took) >= n.quorum() {
		n.stats.OneRoundDoorways++
		n.startWait(r)
		return
	}
	took, held := r.took, r.heldAt
	r.ticket = max(r.guess, r.max+1)
	r.acks, r.rejects, r.tooLow, r.heldAt = map[wire.NodeID]uint32{}, map[wire.NodeID]bool{}, map[wire.NodeID]bool{}, nil
	n.setPhase(r, phaseAddTicket)
	r.sentAt, r.resends = n.now, 0
	if r.ticket == r.guess {
		// Their ticket stands: acked, and marked held as they said.
		for l := range took {
			r.acks[l] = 0
		}
		r.heldAt = held
	} else {
		n.watchCounter++
		r.addSeq = n.watchCounter
	}
	n.sendPhase(r, func(l wire.NodeID) bool { _, ok := r.acks[l]; return ok })
}

func (n *Node) onAddTicketAck(r *request, m wire.Message) {
	if _, ok := r.enterInc[m.From]; !ok {
		if m.Reject || r.guess == 0 || r.ticket != r.guess {
			return
		}
		// A leader that took the number ENTERING proposed after the
		// quorum of ENTERING was in: flag and number came in one step.
		r.enterInc[m.From] = m.Incarnation
	}
	if m.Reject {
		if m.HighWater == 0 {
			r.rejects[m.From] = true // its choosing flag is gone: for good
		} else {
			r.tooLow[m.From] = true
			r.max = max(r.max, m.HighWater)
			n.noteTicket(r.a.Name, m.HighWater)
		}
		n.checkTicketQuorum(r)
		return
	}
	r.acks[m.From] = 0
	if m.Held {
		r.markedHeldAt(m.From)
	}
	if len(r.acks) >= n.quorum() {
		n.startWait(r)
	}
}

func (n *Node) onConfirmAck(r *request, m wire.Message) {
	if m.Reject {
		r.confirm.rejects[m.From] = true
		if len(n.cfg.View.Leaders)-len(r.confirm.rejects) < n.quorum() {
			n.fail(r, wire.CodeLost) // force-unlocked: the operator's word stands
		}
		return
	}
	r.confirm.acks[m.From] = true
	if len(r.confirm.acks) >= n.quorum() {
		n.grant(r)
	}
}

func (n *Node) onReleaseAck(r *request, m wire.Message) {
	r.acks[m.From] = 0
	r.had = r.had || !m.Reject
	r.held = r.held || m.Held
	if len(r.acks) >= n.quorum() {
		forced := wire.CodeNone
		if !r.had {
			forced = wire.CodeUnknownLease
		}
		n.released(r, wire.CodeNone, forced)
	}
	if len(r.acks) == len(n.cfg.View.Leaders) {
		n.forget(r)
	}
}

func (n *Node) onRenewAck(r *request, m wire.Message) {
	if m.Round != r.renew.round && !n.cfg.Mutant.on(MutantRenewAnyAck) {
		n.stats.StaleReplies++
		return
	}
	if m.Reject {
		r.renew.rejects[m.From] = true
		if len(n.cfg.View.Leaders)-len(r.renew.rejects) < n.quorum() {
			r.renew = nil
			n.event(r, EventRenewFailed, wire.CodeLost)
		}
		return
	}
	r.renew.acks[m.From] = true
	if len(r.renew.acks) >= n.quorum() {
		start := r.renew.start
		r.leaseStart, r.unlocking, r.renew = start, false, nil
		n.arm(r) // after the renewal is over: a parent's next one is timed from it
		ttl := r.a.Duration
		if n.cfg.Mutant.on(MutantRenewFromDecision) {
			ttl += n.now - start // the old formula: counted from the confirmation
		}
		n.emit(r, Event{Kind: EventRenewed, Elapsed: n.now - start, Duration: r.a.Duration, TTL: ttl})
	}
}

// revoke ends r, force-released by an operator: a held lease tells its
// holder (unlocked, lost), a request not granted yet fails. Ending early
// is always safe, and the leaders dropped it already.
func (n *Node) revoke(r *request) {
	switch r.phase {
	case phaseLocalHeld:
		n.event(r, EventUnlocked, wire.CodeLost)
		n.dropLocal(r)
	case phaseLocalWait:
		n.refuseLocal(r, wire.CodeLost)
	case phaseReleasing:
	case phaseHeld:
		n.event(r, EventUnlocked, wire.CodeLost)
		n.startRelease(r)
	default:
		n.fail(r, wire.CodeLost)
	}
}

// checkTicketQuorum reacts when the replicas' refusals leave no quorum for
// the proposed ticket. A number that was too low is raised and proposed
// again: the choosing flag is still set, so a higher number is as good as
// the first. A choosing flag lost with a replica's restart cannot be set
// again in the same doorway: the doorway restarts under a fresh request id.
func (n *Node) checkTicketQuorum(r *request) {
	open := len(r.enterInc) - len(r.rejects)
	if open-len(r.tooLow) >= n.quorum() {
		return
	}
	if open >= n.quorum() {
		n.stats.TicketRaises++
		r.raises++
		r.ticket = r.max + 1 + raiseSpread(r.id, r.raises)
		r.acks, r.tooLow, r.heldAt = map[wire.NodeID]uint32{}, map[wire.NodeID]bool{}, nil
		n.watchCounter++
		r.addSeq = n.watchCounter
		r.sentAt, r.resends = n.now, 0
		n.sendPhase(r, nil)
		return
	}
	n.restartDoorway(r)
}

// restartDoorway gives up r's doorway and starts a new one, under a fresh
// request id, for the same client handle and deadline.
func (n *Node) restartDoorway(r *request) {
	n.stats.DoorwayRestarts++
	fresh := &request{id: n.nextID(), handle: r.handle, a: r.a, start: r.start, dead: r.dead, share: r.share, ofShare: r.ofShare,
		parents: r.parents, parentOf: r.parentOf}
	if fresh.share != nil {
		fresh.share.req, r.share = fresh, nil
	}
	// A nested request keeps its parents' tickets, and a parent its place
	// among its request's: only the attempt on this name starts again.
	r.parents, r.parentOf = nil, nil
	for _, p := range fresh.parents {
		p.parentOf = fresh
	}
	if q := fresh.parentOf; q != nil {
		if i := slices.Index(q.parents, r); i >= 0 {
			q.parents[i] = fresh
		}
	}
	r.handle = wire.RequestID{}
	n.startRelease(r)
	n.reqs[fresh.id] = fresh
	if fresh.handle != (wire.RequestID{}) {
		n.handles[fresh.handle] = fresh
	}
	n.masterName(fresh.a.Name).count++
	n.startEnter(fresh)
}

// raiseSpread keeps masters that raise at the same moment from picking the
// same next number and colliding again. It is derived from the request id,
// not drawn, so the core stays deterministic; fencing tokens only need to
// grow, so the numbers it skips cost nothing.
func raiseSpread(id wire.RequestID, raises uint64) uint64 {
	h := (uint64(id.Node)*0x9e3779b97f4a7c15 ^ id.Seq*0xbf58476d1ce4e5b9 ^ raises*0x94d049bb133111eb)
	h ^= h >> 31
	return h % (2 + min(raises, 6))
}

func (n *Node) startWait(r *request) {
	n.mnames[r.a.Name].adding--
	n.noteTicket(r.a.Name, r.ticket)
	n.watchCounter++
	n.setPhase(r, phaseWait)
	r.sentAt, r.watchSeq = n.now, n.watchCounter
	r.firstWatch = r.watchSeq
	r.acks = nil
	r.firstSeen, r.first = map[wire.NodeID]bool{}, nil
	n.masterName(r.a.Name).addWaiter(r)
	if n.cfg.PlainDoorway {
		n.sendPhase(r, nil)
		n.evaluate(r)
		return
	}
	n.arm(r)
	// EXITING at once; the wait's watch at the Ready (sendWatches), and
	// only if the reports that came with the acks did not grant by then,
	// which would unwatch the name in the same breath. The watch is not
	// for the grant: a report answering it counts for the wait without
	// the ticket in it (see fresh), so a quorum of them that lacks the
	// ticket ends a wait that an operator's force-unlock ended.
	// A grant by the Ready lets it wait (holdLazy).
	at := len(n.msgs)
	n.toLeaders(wire.Message{Kind: wire.KindExit, Name: r.a.Name, Req: r.id, Mode: r.a.Mode, Lifetime: n.lifetime(r), Ticket: r.ticket}, nil)
	n.lazySpans = append(n.lazySpans, msgSpan{r: r, from: at, to: len(n.msgs)})
	n.watchesDue = append(n.watchesDue, r)
	n.evaluate(r)
}

// sendWatches sends the first watch of the waits that started since the
// last Ready and still wait on it.
func (n *Node) sendWatches() {
	for _, r := range n.watchesDue {
		if n.reqs[r.id] == r && r.phase == phaseWait && r.watchSeq == r.firstWatch {
			n.toLeaders(wire.Message{Kind: wire.KindWatch, Name: r.a.Name, Req: r.id, Mode: r.a.Mode, Lifetime: n.lifetime(r),
				Ticket: r.ticket, WatchSeq: r.watchSeq}, nil)
		}
	}
	clear(n.watchesDue)
	n.watchesDue = n.watchesDue[:0]
}

func (n *Node) onReport(m wire.Message) {
	mn := n.mnames[m.Name]
	if mn == nil || !n.cfg.View.IsLeader(m.From) {
		n.stats.StaleReplies++
		return
	}
	// The leader marked m.Req held as it made the report (heldForReport):
	// true whatever becomes of the report itself, late or reordered.
	if r := n.reqs[m.Req]; m.Held && r != nil && r.phase == phaseWait {
		r.markedHeldAt(m.From)
	}
	if old := mn.reports[m.From]; old != nil && (old.inc > m.Incarnation || old.inc == m.Incarnation && old.seq >= m.ReportSeq) {
		return // reordered: an older report of that replica
	}
	entries := m.Entries
	byReq := func(a, b wire.Entry) int { return a.Req.Compare(b.Req) }
	if !slices.IsSortedFunc(entries, byReq) {
		entries = slices.SortedStableFunc(slices.Values(entries), byReq) // replicas send them sorted
	}
	if m.BaseSeq != 0 {
		old := mn.reports[m.From]
		if old == nil || (old.inc != m.Incarnation || old.seq != m.BaseSeq) && !n.cfg.Mutant.on(MutantDeltaAnyBase) {
			n.rewatch(mn, m.Name, m.From)
			return // made on a report we do not have: ask for the whole table
		}
		entries = applyDelta(old.entries, entries)
	}
	switch old := mn.reports[m.From]; {
	case old == nil || old.inc != m.Incarnation || m.WatchSeq < old.echo:
		// Not comparable: a replica's first report, a new life's, or one
		// answering an older watch than the last (a watch dropped and
		// made again by a late message), which may no longer count for
		// a waiter the last one counted for.
		mn.changedAll = true
	case m.BaseSeq != 0:
		for _, e := range m.Entries {
			mn.change(e.Req)
		}
	default:
		diffEntries(old.entries, entries, mn.change)
	}
	mn.reports[m.From] = &report{inc: m.Incarnation, seq: m.ReportSeq, echo: m.WatchSeq, sinceReaders: m.ReadersAgo, entries: entries}
	mn.merges = nil // merges of the replaced report are dead
	var top uint64
	for _, e := range m.Entries {
		top = max(top, e.Ticket)
	}
	n.noteTicket(m.Name, top) // the next doorway here proposes above it
	n.reported.add(m.Name)
	n.releaseStrays(m.From, m.Name, entries)
	n.correctMarks(m.From, entries)
}

// correctMarks tells leader again that this node's waiting soft writers
// its report shows active are not: a leader restarted from its disk takes
// such a ticket as active until the master says otherwise (mayBeActive),
// and the word sent at its restart's announcement (masterRestarted) may
// be lost, or the announcement itself. Left so, the false mark keeps
// later readers waiting for the writer, which waits for them, until a
// timeout. A report that still shows it asks again; the truth costs
// nothing to repeat.
func (n *Node) correctMarks(leader wire.NodeID, entries []wire.Entry) {
	if n.cfg.Mutant.on(MutantStaleRestoredMark) {
		return
	}
	for _, e := range entries {
		if !e.Active || e.Req.Node != n.cfg.ID || !mayBeActive(e.Mode) {
			continue
		}
		// (A writer marked before repeats its mark with every refresh.)
		if r := n.reqs[e.Req]; r != nil && r.phase == phaseWait && !r.marked {
			n.sendMark(r, false, func(l wire.NodeID) bool { return l != leader })
		}
	}
}

// releaseStrays releases again, at the replica that reported them, the
// requests of this life that this node has already forgotten (see
// releaseStray).
func (n *Node) releaseStrays(leader wire.NodeID, name string, entries []wire.Entry) {
	for _, e := range entries {
		n.releaseStray(leader, name, e.Req)
	}
}

// releaseStray releases req again at leader if it is a request of this
// life that this node has already forgotten. A phase message can arrive
// after the request's release and after its tombstone's keep (a link slow
// enough, a replica cut off meanwhile): the replica then takes the
// request again, and its choosing flag or ticket would hold every waiter
// of the name, at any node, until the replica's own deadline. The
// replica's answer to that message, or its report, tells the master. A
// master never grants a request it forgot, so this release is only
// tidying, and its tombstone may be short: a later stray is released the
// same way.
//
// The release is sent again every RetransmitTicks until the leader
// answers it, for up to DoorwayTicks: the stray was made by a message
// that came late, after the tombstones of the request were gone, and
// nothing else brings its word back here when the release is lost (a
// report comes only while this node watches the name), so a lost one
// left the stray choosing flag or ticket holding the name's waiters up
// until the request's deadline there. The bound keeps a leader that
// cannot be reached from costing a message every few ticks for long.
func (n *Node) releaseStray(leader wire.NodeID, name string, req wire.RequestID) {
	if req.Node != n.cfg.ID || req.Incarnation() != n.cfg.Incarnation || uint32(req.Seq) > n.counter ||
		n.reqs[req] != nil || n.cfg.Mutant.on(MutantKeepStrays) {
		return
	}
	n.stats.StrayReleases++
	k := strayKey{req: req, leader: leader}
	if _, ok := n.strays[k]; ok || len(n.strays) < maxStrays && !n.cfg.Mutant.on(MutantStrayReleaseOnce) {
		n.strays[k] = strayRelease{name: name, sentAt: n.now, until: n.now + n.cfg.DoorwayTicks}
	}
	n.send(wire.Message{Kind: wire.KindRelease, To: leader, Name: name, Req: req, Lifetime: 1})
}

// strayKey is a stray copy of one of this life's forgotten requests at
// one leader; strayRelease, its release in flight.
type strayKey struct {
	req    wire.RequestID
	leader wire.NodeID
}

type strayRelease struct {
	name          string
	sentAt, until int64
}

// maxStrays bounds the stray releases a node sends again; past it, one
// is sent once, as the answer that showed the stray comes.
const maxStrays = 1 << 12

// tickStrays sends again the stray releases no leader answered yet, in a
// fixed order, and gives up those past their bound.
func (n *Node) tickStrays() {
	if len(n.strays) == 0 {
		return
	}
	keys := slices.SortedFunc(maps.Keys(n.strays), func(a, b strayKey) int {
		return cmp.Or(a.req.Compare(b.req), cmp.Compare(a.leader, b.leader))
	})
	for _, k := range keys {
		s := n.strays[k]
		switch {
		case n.now > s.until:
			delete(n.strays, k)
		case n.now-s.sentAt >= n.cfg.RetransmitTicks:
			s.sentAt = n.now
			n.strays[k] = s
			n.send(wire.Message{Kind: wire.KindRelease, To: k.leader, Name: s.name, Req: k.req, Lifetime: 1})
		}
	}
}

// applyDelta is the table of base with the changes of delta (both in
// request order; an entry in StateReleased is a request gone), new.
func applyDelta(base, delta []wire.Entry) []wire.Entry {
	out := make([]wire.Entry, 0, len(base)+len(delta))
	i := 0
	for _, d := range delta {
		for i < len(base) && base[i].Req.Compare(d.Req) < 0 {
			out = append(out, base[i])
			i++
		}
		if i < len(base) && base[i].Req == d.Req {
			i++ // replaced or gone
		}
		if d.State != wire.StateReleased {
			out = append(out, d)
		}
	}
	return append(out, base[i:]...)
}

// diffEntries calls changed with every request whose entry differs
// between a and b (both in request order).
func diffEntries(a, b []wire.Entry, changed func(wire.RequestID)) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i].Req.Compare(b[j].Req) < 0:
			changed(a[i].Req)
			i++
		case i == len(a) || b[j].Req.Compare(a[i].Req) < 0:
			changed(b[j].Req)
			j++
		default:
			if a[i] != b[j] {
				changed(a[i].Req)
			}
			i++
			j++
		}
	}
}

// rewatch asks replica from for the whole table of name again, at most
// once a retransmit interval: a report on a base we lack says we missed
// one. Any waiter's watch sequence is at most the counter, and the
// report answering comes after this send, so it is fresh for them all.
func (n *Node) rewatch(mn *masterName, name string, from wire.NodeID) {
	if len(mn.waiters) == 0 && mn.adding == 0 {
		return // nobody here waits on the name: let the watch lapse
	}
	if mn.rewatched == nil {
		mn.rewatched = map[wire.NodeID]int64{}
	}
	if at, ok := mn.rewatched[from]; ok && n.now-at < n.cfg.RetransmitTicks {
		return
	}
	mn.rewatched[from] = n.now
	n.send(wire.Message{Kind: wire.KindWatch, To: from, Name: name, WatchSeq: n.watchCounter,
		Lifetime: uint64(n.cfg.RefreshTicks * 2)})
}

// decideReported has the waiters of every name that got reports since the
// last Ready decide on them: once for all the reports of a batch, and only
// those the reports may concern (masterName.toDecide): a waiter blocked on
// a holder sleeps through the other waiters' comings and goings.
func (n *Node) decideReported() {
	for _, name := range n.reported.take() {
		mn := n.mnames[name]
		if mn == nil {
			continue
		}
		rs := mn.toDecide(n.cfg.Mutant)
		if n.cfg.CheckIncremental {
			for _, r := range mn.waiters {
				if _, found := slices.BinarySearchFunc(rs, r.id, func(q *request, id wire.RequestID) int { return q.id.Compare(id) }); !found && n.judge(r, true) {
					n.stats.MissedDecisions++
				}
			}
		}
		for _, r := range rs {
			if mn.waiters[r.id] == r {
				n.evaluate(r)
			}
		}
	}
}

// fresh reports whether rep may decide r: it answers r's watch, or, until
// an activation or a retry asks for newer ones, it lists r's ticket as
// proposed, so the replica made it after it took the ticket (the watch
// ADD_TICKET carries). Either way a request missing from it entered its
// doorway there after our ticket, and read a mark at least as high.
func (n *Node) fresh(r *request, rep *report) bool {
	if rep.echo >= r.watchSeq || n.cfg.Mutant.on(MutantStaleReports) {
		return true
	}
	if r.watchSeq != r.firstWatch || rep.echo < r.addSeq {
		return false
	}
	if n.cfg.Mutant.on(MutantUncheckedTicketReports) {
		return true
	}
	e, ok := rep.entry(r.id)
	return ok && e.Ticket == r.ticket
}

// evaluate decides a waiting request on the merged view of a quorum of
// fresh reports (see fresh).
func (n *Node) evaluate(r *request) {
	n.judge(r, false)
}

// judge decides r (evaluate), or, dry, only reports whether deciding would
// do anything: Config.CheckIncremental's look at the waiters left asleep.
// With a thousand waiters on a name, each decision must cost little more
// than the policy's own look at the table: reports are searched, not
// scanned, and merged once for all.
func (n *Node) judge(r *request, dry bool) bool {
	mn := n.mnames[r.a.Name]
	if !dry {
		mn.wake(r)
	}
	fresh, own := 0, 0
	sinceReaders := int64(maxSpan)
	from := make([]*report, 0, len(n.cfg.View.Leaders))
	for _, l := range n.cfg.View.Leaders {
		rep := mn.reports[l]
		if rep == nil || !n.fresh(r, rep) {
			continue
		}
		fresh++
		from = append(from, rep)
		sinceReaders = min(sinceReaders, int64(min(rep.sinceReaders, maxSpan)))
		if !r.firstSeen[l] && len(r.firstSeen) < n.quorum() {
			if dry {
				return true
			}
			r.firstSeen[l] = true
			r.first = append(r.first, rep)
		}
		if rep.has(r.id) {
			own++
		}
	}
	// Grant only what is still there: a quorum of fresh reports without
	// our ticket means it was dropped (an operator's force-unlock), and a
	// grant would stand beside the next waiter's.
	if !n.cfg.Mutant.on(MutantNoOwnTicket) {
		if fresh-own >= n.quorum() {
			if !dry {
				n.fail(r, wire.CodeLost)
			}
			return true
		}
		if own < n.quorum() {
			return false
		}
	}
	if r.confirm != nil {
		return false // decided: the confirmation answers
	}
	if fresh < n.quorum() || len(r.firstSeen) < n.quorum() {
		return false
	}
	merged := mn.merged(from)
	var d Decision
	me := Candidate{Req: r.id, Ticket: r.ticket, Mode: r.a.Mode, Try: r.a.Timeout == 0,
		Quiet: r.a.Quiet, SinceReaders: sinceReaders, Activated: r.activated, Limit: r.a.Limit}
	if b, waits := n.waitsOnChoosing(r, me, merged.choosing); waits {
		d.BlockedBy = b
	} else {
		d = n.cfg.Admit(me, merged.ticketed)
	}
	sleeps := !d.Grant && d.Refuse == wire.CodeNone && d.RetryIn == 0 && !d.Requeue
	if dry {
		return !sleeps || r.activated || r.activating
	}
	marked := r.activated || r.activating
	n.decide(r, d)
	if !d.Grant && d.Refuse == wire.CodeNone && r.phase == phaseWait {
		n.askSharesAhead(r, merged.ticketed)
	}
	// Asleep until the blocker or our entry changes: only on every leader's
	// fresh report, so no report yet to come may join the view with an
	// older copy of the blocker; not while a mark is out, whose
	// acknowledgement decides again. A new watch of its own (rewatchFor)
	// wakes it: the reports it slept on may stop counting for it.
	// Nor when it was marked at the decision: what blocked it then (a
	// reader's doorway at any place in line) does not once it backed off.
	if sleeps && d.BlockedBy != (wire.RequestID{}) && fresh == len(n.cfg.View.Leaders) &&
		r.phase == phaseWait && !marked && !r.activated && !r.activating && mn.waiters[r.id] == r {
		mn.block(r, d.BlockedBy)
	}
	return true
}

// waitsOnChoosing reports whether a relevant request still choosing may
// end below r, unless a number it proposed is above r's already:
// proposals only grow.
//
// An activated soft writer also waits for every reader still choosing,
// whatever its number: readers keep it out from any place in line, and
// one may decide on reports made before the activation mark reached them
// (a report lists a ticket as soon as the replica takes it, before the
// ticket is at a quorum). Such a reader set its choosing flag at a quorum
// before it read anything, so before the mark was at a quorum, and the
// writer's reports, all made after that, show its flag or its ticket at
// the replica the two quorums share: the writer waits for the flag to
// come down, then sees the ticket and backs off. Hard writers need no
// such wait: they wait for every earlier ticket, active or not. Soft
// writers among themselves neither: each reads only after its own mark
// is at a quorum.
//
// The policy may say that a doorway cannot change r's decision
// (Config.ChoosingMatters): two readers without a limit. A page view then
// does not wait for the other page views' doorways, which a herd of
// agents coming back at once keeps open for round trips.
func (n *Node) waitsOnChoosing(r *request, me Candidate, choosing []wire.Entry) (wire.RequestID, bool) {
	anyPlace := mayBeActive(r.a.Mode) && r.activated && !n.cfg.Mutant.on(MutantSoftIgnoresLaterDoorways)
	matters := n.cfg.ChoosingMatters
	for _, e := range choosing {
		if e.Req == r.id {
			continue
		}
		below := e.Ticket == 0 || Earlier(e.Ticket, e.Req, r.ticket, r.id)
		below = below && (matters == nil || matters(me, e))
		if below && !n.cfg.Mutant.on(MutantIgnoreChoosing) && r.relevant(e.Req) || anyPlace && e.Mode.Reader() {
			return e.Req, true
		}
	}
	return wire.RequestID{}, false
}

// decide carries out the policy's decision on r.
func (n *Node) decide(r *request, d Decision) {
	switch {
	case d.Grant && d.Activate && !r.activated && !n.cfg.Mutant.on(MutantNoConfirm):
		if !r.activating {
			n.sendMark(r, true, nil)
		}
	case d.Grant && !n.heldByQuorum(r) && !n.cfg.Mutant.on(MutantNoOwnTicket|MutantUnconfirmedGrant):
		n.startConfirm(r)
	case d.Grant:
		n.grant(r)
	case d.Refuse != wire.CodeNone:
		n.fail(r, d.Refuse)
	case d.Requeue && !n.cfg.Mutant.on(MutantSoftKeepsPlace):
		n.restartDoorway(r) // its mark, if any, goes with the old ticket
		return
	case r.activated || r.activating:
		n.sendMark(r, false, nil) // back off: others must not see us active
	}
	if !d.Grant && d.Refuse == wire.CodeNone && d.RetryIn > 0 {
		r.retryAt = n.now + d.RetryIn
		n.arm(r)
	}
}

// startConfirm asks the leaders whether they still have r's ticket before
// granting it. The reports a decision rests on may be older than an
// operator's force-unlock of r (a partition kept the newer ones away):
// granted on them, r would stand beside the next holder, whose grant saw
// r gone. A quorum that confirms orders every such force-unlock at one of
// its replicas after the confirmation, where it is taken as a holder's;
// one that cannot confirm means r was dropped, and r fails. A ticket that
// a quorum took with nothing ahead needs no confirmation (decide): each
// of them marked it held as it took it (holdIfClear), which orders every
// force-unlock after that mark in the same way, a round earlier.
func (n *Node) startConfirm(r *request) {
	r.confirm = &confirmation{acks: map[wire.NodeID]bool{}, rejects: map[wire.NodeID]bool{}}
	n.sendConfirm(r)
}

// markedHeldAt records that leader marked r's ticket held (an ack of
// ADD_TICKET or a report said so).
func (r *request) markedHeldAt(leader wire.NodeID) {
	if r.heldAt == nil {
		r.heldAt = map[wire.NodeID]bool{}
	}
	r.heldAt[leader] = true
}

// heldByQuorum: a quorum of the view's leaders marked r's ticket held (as
// they took it, or in a report).
func (n *Node) heldByQuorum(r *request) bool {
	held := 0
	for l := range r.heldAt {
		if n.cfg.View.IsLeader(l) {
			held++
		}
	}
	return held >= n.quorum()
}

func (n *Node) sendConfirm(r *request) {
	r.confirm.sentAt = n.now
	n.arm(r)
	n.toLeaders(wire.Message{Kind: wire.KindConfirm, Name: r.a.Name, Req: r.id, Ticket: r.ticket},
		func(l wire.NodeID) bool { return r.confirm.acks[l] || r.confirm.rejects[l] })
}

// sendMark marks r active at the leaders (or clears the mark), to those
// skip allows. A new activation waits for a quorum of acks.
func (n *Node) sendMark(r *request, active bool, skip func(wire.NodeID) bool) {
	if skip == nil {
		r.activating, r.activated, r.marked = active, false, true
		r.actAcks, r.actSentAt = map[wire.NodeID]bool{}, n.now
		r.actRound++
		n.arm(r)
	}
	n.toLeaders(wire.Message{Kind: wire.KindActivate, Name: r.a.Name, Req: r.id, Reject: !active, Round: r.actRound}, skip)
}

// onActivated: the mark is at a quorum. Decide again, on reports made
// after it: watch under a new sequence.
func (n *Node) onActivated(r *request) {
	r.activating, r.activated = false, true
	n.rewatchFor(r)
}

// rewatchFor watches r's name under a new sequence, so that r decides
// only on reports made from now on. r wakes: a report it slept on may no
// longer count for it, and without it the rest may decide otherwise.
func (n *Node) rewatchFor(r *request) {
	n.watchCounter++
	r.watchSeq, r.sentAt = n.watchCounter, n.now
	n.mnames[r.a.Name].wake(r)
	n.sendPhase(r, nil)
}

// leaveWait: r no longer watches its name, as a waiter or by its ticket.
// The last to leave stops the watch.
func (n *Node) leaveWait(r *request) {
	mn := n.mnames[r.a.Name]
	switch r.phase {
	case phaseWait:
		mn.removeWaiter(r)
	case phaseAddTicket:
		mn.adding--
	case phaseEnter:
		if r.guess == 0 {
			return
		}
		mn.adding--
		if len(r.took) == 0 {
			// No leader took the proposed number, so none watches for it
			// (a drain's readers are refused here by thousands); one that
			// takes it late stops by the watch's lifetime.
			return
		}
	default:
		return
	}
	if len(mn.waiters) == 0 && mn.adding == 0 {
		n.watchCounter++
		n.toLeaders(wire.Message{Kind: wire.KindUnwatch, Name: r.a.Name, WatchSeq: n.watchCounter}, nil)
		clear(mn.reports)
		mn.merges = nil
	}
}

func (n *Node) grant(r *request) {
	at := len(n.msgs)
	n.leaveWait(r)
	n.lazySpans = append(n.lazySpans, msgSpan{from: at, to: len(n.msgs)}) // the watch's end may wait
	n.setPhase(r, phaseHeld)
	r.leaseStart = n.now
	n.arm(r)
	n.stats.Granted++
	n.emit(r, Event{Kind: EventGranted, Elapsed: n.now - r.start, Duration: r.a.Duration, TTL: n.now - r.start + r.a.Duration})
}

// setPhase moves r to phase p, and tells Ready.Phases when r has a client.
func (n *Node) setPhase(r *request, p phase) {
	r.phase = p
	if r.handle != (wire.RequestID{}) {
		n.phases = append(n.phases, PhaseChange{Handle: r.handle, Phase: phaseNames[p]})
	}
}

func (n *Node) event(r *request, k EventKind, c wire.Code) {
	n.emit(r, Event{Kind: k, Code: c})
}

func (n *Node) emit(r *request, e Event) {
	if r.share != nil {
		n.onShareEvent(r, e)
		return
	}
	if r.parentOf != nil {
		n.onParentEvent(r, e)
		return
	}
	if r.handle == (wire.RequestID{}) {
		return
	}
	if len(r.parents) > 0 && (e.Kind == EventGranted || e.Kind == EventRenewed) {
		// Its client holds within every ticket of its: the first of
		// their ends, counted from the call as TTL is.
		e.TTL = min(e.TTL, n.parentsEnd(r)-(n.now-e.Elapsed))
	}
	if len(r.parents) > 0 && e.Kind == EventGranted {
		e.ParentTokens = make([]uint64, len(r.parents))
		for i, p := range r.parents {
			e.ParentTokens[i] = p.ticket
		}
	}
	e.Req, e.Name, e.Token = r.handle, r.a.Name, r.ticket
	n.events = append(n.events, e)
}

// fail ends a request that was not granted.
func (n *Node) fail(r *request, c wire.Code) {
	n.stats.Failed++
	n.event(r, EventFailed, c)
	n.startRelease(r)
}

// startRelease tells every leader to drop the request, until each confirmed
// or the replicas would have forgotten it by themselves.
func (n *Node) startRelease(r *request) {
	n.dropLazyExit(r)
	n.leaveWait(r)
	if r.parents != nil {
		n.releaseParents(r)
	}
	if r.phase == phaseQueued || r.phase == phaseParents {
		n.released(r, wire.CodeNone, wire.CodeNone) // never reached a leader
		n.forget(r)
		return
	}
	n.setPhase(r, phaseReleasing)
	r.sentAt, r.renew = n.now, nil
	r.acks = map[wire.NodeID]uint32{}
	r.releaseUntil = n.now + int64(n.lifetime(r))
	n.sendPhase(r, nil)
}

// released tells the callers that asked for r's release that it is
// through: a Release with code c, a ForceRelease with code forced.
func (n *Node) released(r *request, c, forced wire.Code) {
	for _, w := range []struct {
		id     *wire.RequestID
		code   wire.Code
		forced bool
	}{{&r.releaseOf, c, false}, {&r.forceOf, forced, true}} {
		if *w.id != (wire.RequestID{}) {
			n.events = append(n.events, Event{Kind: EventReleased, Code: w.code, Req: *w.id, Name: r.a.Name,
				Token: r.ticket, Held: r.held, Forced: w.forced})
			*w.id = wire.RequestID{}
		}
	}
}

func (n *Node) forget(r *request) {
	delete(n.reqs, r.id)
	if n.handles[r.handle] == r {
		delete(n.handles, r.handle)
		n.phases = append(n.phases, PhaseChange{Handle: r.handle})
	}
	mn := n.mnames[r.a.Name]
	if mn.count--; mn.count == 0 {
		delete(n.mnames, r.a.Name)
	}
}

// masterTick runs the timers of this node's requests.
func (n *Node) masterTick() {
	for id, f := range n.former {
		if f.until < n.now {
			delete(n.former, id)
		}
	}
	n.tickStrays()
	due := n.dueTimers()
	for _, id := range due {
		r := n.reqs[id]
		if r == nil {
			continue
		}
		switch r.phase {
		case phaseQueued, phaseEnter, phaseAddTicket, phaseWait:
			n.tickWaiting(r)
		case phaseHeld:
			n.tickHeld(r)
			if r.phase == phaseHeld && r.share != nil {
				n.tickShare(r)
			}
			if r.phase == phaseHeld && r.parentOf != nil {
				n.tickParent(r)
			}
		case phaseLocalWait, phaseLocalHeld:
			n.tickLocal(r)
		case phaseParents:
			if n.now > r.dead {
				n.fail(r, wire.CodeTimedOut)
			}
		case phaseReleasing:
			if n.now > r.releaseUntil {
				// The replicas forgot the request by themselves; a force
				// of another's request has nobody's word for that.
				n.released(r, wire.CodeNone, wire.CodeNotReady)
				n.forget(r)
			} else if n.now-r.sentAt >= n.cfg.RetransmitTicks {
				r.sentAt = n.now
				n.sendPhase(r, n.notAcked(r))
			}
		}
		if n.reqs[id] == r {
			n.arm(r)
		}
	}
}

// tickWaiting times a request not granted yet out, and sends again what
// is due: confirmations, marks, watches and the doorway's messages.
func (n *Node) tickWaiting(r *request) {
	since := n.now - r.sentAt
	if n.now > r.dead {
		n.fail(r, wire.CodeTimedOut)
		return
	}
	if n.doorwayOverdue(r) {
		n.stats.LongDoorways++
		n.restartDoorway(r)
		return
	}
	if r.phase == phaseWait {
		if r.confirm != nil && n.now-r.confirm.sentAt >= n.cfg.RetransmitTicks {
			n.sendConfirm(r)
		}
		if r.activating && n.now-r.actSentAt >= n.cfg.RetransmitTicks {
			r.actSentAt = n.now
			n.sendMark(r, true, func(l wire.NodeID) bool { return r.actAcks[l] })
		}
		if since >= n.cfg.RefreshTicks && r.marked && !r.activating {
			n.sendMark(r, r.activated, func(wire.NodeID) bool { return false })
		}
		if r.retryAt > 0 && n.now >= r.retryAt {
			// The wait the policy timed may be over: fresh reports.
			r.retryAt = 0
			n.rewatchFor(r)
			return
		}
	}
	if r.phase == phaseWait && since >= n.cfg.RefreshTicks ||
		r.phase != phaseWait && r.phase != phaseQueued && since >= n.cfg.RetransmitTicks {
		r.sentAt = n.now
		r.resends++
		if r.phase == phaseEnter && r.guess != 0 && len(r.acks) >= n.quorum() {
			// A quorum answered, not one of takers: the leaders that
			// were proposed the number and are silent are late, and the
			// doorway goes on with ADD_TICKET.
			n.enterQuorum(r, true)
			return
		}
		if r.phase == phaseAddTicket && r.resends > addTicketResends {
			// A leader that acked ENTERING is gone and does not come
			// back: only a new doorway can use the leaders still up.
			r.rejects = maps.Clone(r.tooLow)
			for l := range r.enterInc {
				if _, ok := r.acks[l]; !ok {
					r.rejects[l] = true
				}
			}
			r.tooLow = map[wire.NodeID]bool{}
			n.checkTicketQuorum(r)
			return
		}
		n.stats.Retransmits++
		n.sendPhase(r, n.notAcked(r))
	}
}

// doorwayOverdue: r's doorway has lasted more than DoorwayTicks, and is given
// up for a fresh one (a new id; the client's wait goes on). An operator's
// force-unlock of r that reached a leader before r's ENTERING did left
// there a tombstone that refuses the ENTERING, but only for
// keep(DoorwayTicks) of that leader's ticks (onRelease); and r's id was made
// before any operator could see it, so the force came after this doorway
// began. Were r's ENTERING to arrive after that tombstone went (a
// partition, or the word of the force lost on its way to this master),
// the leader would take it, and its ack, counted here, would grant a
// request the operator was told was dropped. Acks that come after this
// deadline are for an id this node has given up: the clock moves only by
// Tick, and the tick that passes the deadline runs r's timer (armed for
// it, nextTimer) before any later message is stepped; a runtime that
// wakes from a suspend runs its due ticks before it steps anything.
func (n *Node) doorwayOverdue(r *request) bool {
	return (r.phase == phaseEnter || r.phase == phaseAddTicket) && n.now > r.doorAt+n.cfg.DoorwayTicks &&
		!n.cfg.Mutant.on(MutantUnboundedDoorway)
}

// tickHeld ends a lease at its duration and grace, and sends a renewal
// again while it is unconfirmed.
func (n *Node) tickHeld(r *request) {
	end := r.leaseStart + r.a.Duration
	if n.now >= end+r.a.Grace {
		n.event(r, EventUnlocked, wire.CodeTimedOut)
		n.startRelease(r)
		return
	}
	if !r.unlocking && n.now >= end {
		r.unlocking = true
		n.event(r, EventUnlocking, wire.CodeNone)
	}
	if r.renew != nil && n.now-r.renew.sentAt >= n.cfg.RetransmitTicks {
		n.sendRenew(r, r.renew.acks)
	}
}

func (n *Node) sendRenew(r *request, skip map[wire.NodeID]bool) {
	r.renew.sentAt = n.now
	if r.renew.round == 0 {
		// Unique to this life and above every earlier life's: a later
		// life may renew an earlier one's lease (Adopt).
		if n.renewRounds == 0 {
			n.renewRounds = uint64(n.cfg.Incarnation) << 32
		}
		n.renewRounds++
		r.renew.round = n.renewRounds
	}
	n.arm(r)
	n.toLeaders(wire.Message{Kind: wire.KindRenew, Name: r.a.Name, Req: r.id, Round: r.renew.round,
		Lifetime: uint64(r.a.Duration + r.a.Grace)}, func(l wire.NodeID) bool { return skip[l] })
}

// formerTicket is a ticket of an earlier life of this node that a replica
// keeps until tick until.
type formerTicket struct {
	name  string
	until int64
}

// maxFormer bounds what peers can make this node remember.
const maxFormer = 1 << 16

func (n *Node) onFormer(m wire.Message) {
	if m.Req.Node != n.cfg.ID || uint32(m.Req.Incarnation()) >= n.cfg.Incarnation || n.reqs[m.Req] != nil {
		return
	}
	f, ok := n.former[m.Req]
	if !ok && len(n.former) >= maxFormer {
		return
	}
	f.name, f.until = m.Name, max(f.until, n.now+int64(m.Lifetime))
	n.former[m.Req] = f
}

// releaseFormer tells the leaders to drop a former ticket, as a release of
// one of this life's requests: until every leader confirmed, or the
// replicas would have forgotten it by themselves.
func (n *Node) releaseFormer(id wire.RequestID, f formerTicket) {
	delete(n.former, id)
	n.releaseOther(id, f.name, max(f.until-n.now, 1), false)
}

// releaseOther releases id on name, a request this life did not make (a
// former ticket, or another node's request forced by an operator), as if
// it were one of its own that lived duration more ticks.
func (n *Node) releaseOther(id wire.RequestID, name string, duration int64, forced bool) {
	r := &request{id: id, a: Acquire{Name: name, Duration: duration}, phase: phaseEnter}
	if forced {
		r.forceOf = id
	} else {
		r.releaseOf = id
	}
	n.reqs[id] = r
	n.masterName(name).count++
	n.startRelease(r)
}

// masterRestarted re-sends pending work to a leader that restarted: what it
// held in memory for us is gone.
func (n *Node) masterRestarted(from wire.NodeID, inc uint32) {
	if !n.cfg.View.IsLeader(from) {
		return
	}
	only := func(l wire.NodeID) bool { return l != from }
	for _, id := range sortedReqs(n.reqs) {
		r := n.reqs[id]
		if r == nil {
			continue // ended by an earlier one's turn (a nested request's parents)
		}
		switch r.phase {
		case phaseEnter:
			if old, ok := r.acks[from]; ok && old < inc {
				delete(r.acks, from)
			}
			n.sendPhase(r, only)
		case phaseAddTicket:
			if old, ok := r.enterInc[from]; ok && old < inc {
				r.rejects[from] = true
				n.checkTicketQuorum(r)
			}
		case phaseWait:
			n.sendPhase(r, only)
			if r.phase == phaseWait && mayBeActive(r.a.Mode) {
				// A restarted replica takes such tickets as active: correct it.
				n.sendMark(r, r.activated || r.activating, only)
			}
		case phaseReleasing:
			if _, ok := r.acks[from]; !ok {
				n.sendPhase(r, only)
			}
		}
	}
}
