package core

import (
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// The replica role: a leader's part of the lock table.

// record is one request of one name at this replica. Only tickets are
// durable; a choosing flag lives in memory and dies with the incarnation.
type record struct {
	entry    wire.Entry
	deadline int64 // the replica forgets the request after this tick
	since    int64 // the tick this replica learned of the request
	// markRound is the newest activation round applied to the entry.
	markRound uint64
	// restored: read back from the store at a restart, or taken over in
	// a handoff; the other leaders are asked whether they hold it until it
	// ends. notAt are the leaders of view notAtEpoch that last said they
	// do not.
	restored bool
	// held: the master confirmed a grant of it here, or renewed it.
	// Held or restored, a force-unlock of it is taken as a holder's.
	held       bool
	notAt      map[wire.NodeID]bool
	notAtEpoch uint64
	// flagVer is the table's version when this life of the replica set
	// the request's choosing flag (0: restored or taken over): reports
	// made before it cannot list the request (see holdsBack).
	flagVer uint64
	// try: a writer's try (its ENTER said so). It asks shared read
	// tickets to go when idle, never to turn readers away: it runs only
	// if nobody holds the name now, and must not put a site's frontends
	// on their maintenance page for as long as their readers hold.
	try bool
}

// tomb is a released request, kept until the tick until. held: it was
// held here when dropped, or may have been (restored, or taken over): a
// force-unlock that finds it answers that it took a holder (KindReleaseAck).
type tomb struct {
	until int64
	held  bool
}

type watcher struct {
	seq      uint64 // highest watch sequence seen from this master for the name
	deadline int64
	due      bool // owed a report: it watched since the last flush
	// sentVer and sentSeq are the table's version and the ReportSeq of
	// the last report sent to it; sentSeq 0: the next report is whole.
	sentVer, sentSeq uint64
}

// A replica sends a watcher the whole table at each watch, and then only
// what changed: the requests changed since its last report, each with its
// entry, or in StateReleased if it is gone, on top of that report
// (KindReport's BaseSeq). A master that missed one watches again.

// journaled is one change of a name's table: req's entry changed, at
// table version ver; mode is the request's, for a removal.
type journaled struct {
	ver  uint64
	req  wire.RequestID
	mode wire.Mode
}

// maxJournal bounds a name's journal; a watcher further behind gets the
// whole table.
const maxJournal = 64

type replicaName struct {
	highWater uint64
	recs      map[wire.RequestID]*record
	// tombs remembers released requests until their deadline, so a late
	// duplicate ENTERING does not bring a released request back.
	tombs    tombSet
	watchers map[wire.NodeID]*watcher
	name     string
	// dirty: the table changed since its watchers' last report (the name
	// is in Node.dirty then, as for a single watcher that is due).
	dirty bool
	// readerSeen is the last tick a READ_ONLY ticket was in the table (or
	// the start of what this replica knows of the name).
	readerSeen int64
	// checkAt is the tick of the name's next deadline check (0: none).
	checkAt int64
	// stored: the high-water mark may be on disk (read back, or written).
	stored bool
	// ver counts the table's changes; journal lists the last ones while
	// the name has watchers, complete from version journalFrom on.
	ver, journalFrom uint64
	journal          []journaled
	// promised is one above the highest number this replica told a
	// master to go above (suggest): while it is above the mark, masters
	// raising at once were told different numbers. Not stored: a restart
	// only makes the next suggestions the mark again.
	promised uint64
	// drainTold: the nodes whose shares of the name this replica asked to
	// yield to a draining writer, or whose shares' tries it refused with
	// draining, by share slot (bit 1<<shareSlot): each is told when the
	// table no longer refuses such a try (see share.go, drain memos).
	drainTold map[wire.NodeID]uint8
}

// noteDrainTold remembers that node's share of mode saw a drain here.
func (t *replicaName) noteDrainTold(node wire.NodeID, mode wire.Mode) {
	if t.drainTold == nil {
		t.drainTold = map[wire.NodeID]uint8{}
	}
	t.drainTold[node] |= 1 << shareSlot(mode)
}

// A name's maps are made at their first entry and dropped when emptied:
// a name left with one tombstone, the common state of a busy churn, then
// costs its tombstone only.

func (t *replicaName) putRec(req wire.RequestID, r *record) {
	if t.recs == nil {
		t.recs = map[wire.RequestID]*record{}
	}
	t.recs[req] = r
}

func (t *replicaName) putTomb(req wire.RequestID, tb tomb) { t.tombs.put(req, tb) }

// gone: t has a tombstone of req, so it refuses req from now on.
func (t *replicaName) gone(req wire.RequestID) bool {
	_, ok := t.tombs.get(req)
	return ok
}

// compact drops t's empty maps (a Go map keeps its memory when emptied).
func (t *replicaName) compact() {
	if len(t.recs) == 0 {
		t.recs = nil
	}
	if len(t.watchers) == 0 {
		t.watchers = nil
	}
}

func (n *Node) replicaName(name string) *replicaName {
	t := n.names[name]
	if t == nil {
		// A name made again starts from the floor: above every ticket
		// it had before it was forgotten.
		t = &replicaName{name: name, highWater: n.floor, readerSeen: max(n.readerHorizon, n.readersForgotten[readerBucket(name)])}
		n.names[name] = t
		n.schedule(t, n.now) // forgotten at once if nothing comes of it
	}
	return t
}

func (n *Node) restore(d *Durable) {
	if d == nil {
		return
	}
	for name, hw := range d.HighWater {
		t := n.replicaName(name)
		t.highWater, t.stored = max(t.highWater, hw), true
	}
	for name, ts := range d.Tickets {
		t := n.replicaName(name)
		t.stored = true
		n.restoredNames.add(name)
		for req, dt := range ts {
			if dt.Entry.State == wire.StateReleased {
				t.putTomb(req, tomb{until: n.now + dt.Lifetime, held: true})
				continue
			}
			// A stored ticket comes back as exited: its choosing flag is not
			// durable, and its number can only be lower than the final one.
			// A node's shared read ticket stays one (its mark is stored
			// with it): a limited reader counts it as full, for the table
			// does not count its page views.
			e := dt.Entry
			e.State = wire.StateTicket
			e.Active = mayBeActive(e.Mode) || shared(dt.Entry) && !n.cfg.Mutant.on(MutantRestoreSharesAsReaders)
			t.putRec(req, &record{entry: e, deadline: n.now + dt.Lifetime, since: n.now, restored: true})
			if dt.Entry.Ticket > t.highWater {
				t.highWater = dt.Entry.Ticket
			}
		}
	}
}

// mayBeActive: whether a ticket of mode m whose active mark was lost (a
// restart, a handoff) must be taken as active until its master says
// otherwise. Only writers that let later readers pass are marked.
func mayBeActive(m wire.Mode) bool { return m.Soft() }

// replicaStep handles the messages a leader answers: one handler a kind.
func (n *Node) replicaStep(m wire.Message) {
	// A node's own message about a request of a newer life than this
	// replica knows of says that it restarted, as its announcement
	// (KindRestarted) would: incarnations grow before every start. The
	// announcement may have been lost, and the earlier life's choosing
	// flags would then stay until their deadlines, holding up every
	// waiter that saw them.
	if inc := uint32(m.Req.Incarnation()); m.Kind != wire.KindRestarted && m.From == m.Req.Node && inc > n.minInc[m.From] &&
		inc > 1 && !n.cfg.Mutant.on(MutantNoRestartFromRequests) {
		n.onRestarted(wire.Message{From: m.From, Incarnation: inc})
	}
	// A release may name a request of an earlier life: a former ticket
	// kept after a restart, released by the new life or an operator.
	if m.Kind != wire.KindRestarted && m.Kind != wire.KindUnwatch && m.Kind != wire.KindWatch && m.Kind != wire.KindRelease &&
		uint32(m.Req.Incarnation()) < n.minInc[m.Req.Node] {
		n.stats.StaleIncarnation++
		return // the request's node restarted since; its requests are gone
	}
	switch m.Kind {
	case wire.KindEnter:
		if m.Ticket != 0 && !n.cfg.PlainDoorway {
			n.onEnterTicket(m)
		} else {
			n.onEnter(m)
		}
	case wire.KindGetMax:
		// Masters read the maximum with ENTERING now; an agent of the
		// version before still asks apart.
		reply := n.replyTo(m, wire.KindGetMaxAck)
		reply.HighWater = n.replicaName(m.Name).highWater
		n.send(reply)
	case wire.KindAddTicket:
		n.onAddTicket(m)
	case wire.KindExit:
		n.onExit(m)
	case wire.KindConfirm:
		n.onConfirm(m)
	case wire.KindWatch:
		n.onWatch(m)
	case wire.KindUnwatch:
		if t := n.names[m.Name]; t != nil {
			if w := t.watchers[m.From]; w != nil && w.seq <= m.WatchSeq {
				delete(t.watchers, m.From)
				t.compact()
				n.checkIfIdle(t)
			}
		}
	case wire.KindRelease:
		n.onRelease(m)
	case wire.KindActivate:
		n.onActivate(m)
	case wire.KindRenew:
		n.onRenew(m)
	case wire.KindHolds:
		n.onHolds(m)
	case wire.KindHoldsAck:
		n.onHoldsAck(m)
	case wire.KindRestarted:
		n.onRestarted(m)
	}
}

// suggest is the number a replica tells a master to go above, in
// ENTERING's answer and in the refusal of a number not above its mark:
// the mark, unless it already told a master to go above the mark, then
// one above what it told last. Masters that enter or raise at once then
// propose different numbers, which mostly come back in rising order, and
// the leader, which takes only numbers above its mark, takes most of
// them: a fleet's page views coming back after a drain, hundreds on one
// name, no longer meet each other's numbers round after round. An
// uncontended master is told the mark, as before.
//
// Safety does not rest on it: a master proposes a number above what it
// was told, and every leader takes a number only above its mark
// (aboveMark); a number told too high only leaves a gap below a ticket,
// and fencing tokens need only grow.
func (n *Node) suggest(t *replicaName) uint64 {
	s := t.highWater
	if t.promised > s {
		s = t.promised
	}
	t.promised = s + 1
	return s
}

// replyTo is the start of a replica's answer to m.
func (n *Node) replyTo(m wire.Message, k wire.Kind) wire.Message {
	return wire.Message{Kind: k, To: m.From, Name: m.Name, Req: m.Req, Incarnation: n.cfg.Incarnation}
}

// onEnter sets Req's choosing flag (ENTERING), unless the name is full,
// and answers with the name's high-water mark.
func (n *Node) onEnter(m wire.Message) {
	fresh := n.replicaName(m.Name).recs[m.Req] == nil
	if reply, ok := n.enter(m); ok {
		reply.HighWater = n.suggestFor(n.names[m.Name], fresh)
		n.send(reply)
	}
}

// onEnterTicket is ENTERING with a number proposed (Message.Ticket): the
// choosing flag is set and, if the number is above the name's mark, taken
// as ADD_TICKET would take it, in one step, answered by ADD_TICKET's ack
// (and the report its watch brings). A number not above the mark is
// refused as by ADD_TICKET, but the answer is ENTERING's, with the mark:
// the master proposes a higher one with ADD_TICKET, as after a plain
// ENTERING. A leader that takes it checks it against the same mark
// ADD_TICKET does, after the same flag is up: the bakery's order rests on
// that check, not on the master having read the mark first.
func (n *Node) onEnterTicket(m wire.Message) {
	fresh := n.replicaName(m.Name).recs[m.Req] == nil
	reply, ok := n.enter(m)
	if !ok {
		return
	}
	t := n.names[m.Name]
	r := t.recs[m.Req]
	if r.entry.Ticket == m.Ticket || r.entry.State == wire.StateChoosing && r.entry.Ticket == 0 && n.aboveMark(t, m.Ticket, true) {
		m.Incarnation = n.cfg.Incarnation // the flag is this life's: set just now, or earlier in it
		n.addTicket(m, true)
		return
	}
	reply.HighWater = n.suggestFor(t, fresh)
	n.send(reply)
}

// suggestFor is suggest for an ENTERING that set its flag just now (a
// doorway that starts) and for a refused number, the mark for a repeated
// ENTERING (a retransmission gets no number of its own) and on a replica
// that runs the plain doorway, as releases before 0.9 answered.
func (n *Node) suggestFor(t *replicaName, fresh bool) uint64 {
	if !fresh || n.cfg.PlainDoorway {
		return t.highWater
	}
	return n.suggest(t)
}

// aboveMark: ticket may be taken for a request of t: it is above every
// number t had (tickets, and so fencing tokens, are unique per name).
// withFlag: proposed with ENTERING.
func (n *Node) aboveMark(t *replicaName, ticket uint64, withFlag bool) bool {
	return ticket > t.highWater || n.cfg.Mutant.on(MutantSharedTickets) ||
		withFlag && n.cfg.Mutant.on(MutantEnterTicketUnchecked)
}

// enter sets m.Req's choosing flag, unless the request is gone or refused;
// ok when the flag is up (set now or before), with the answer to complete.
// A refusal is sent from here; a request gone gets no answer.
func (n *Node) enter(m wire.Message) (wire.Message, bool) {
	reply := n.replyTo(m, wire.KindEnterAck)
	t := n.replicaName(m.Name)
	if _, gone := t.tombs.get(m.Req); gone {
		return reply, false
	}
	if t.recs[m.Req] == nil {
		if len(t.recs) >= n.cfg.MaxWaiters {
			reply.Reject, reply.Code = true, wire.CodeOverflow
			n.send(reply)
			return reply, false
		}
		if code := n.refuseEarly(t, m); code != wire.CodeNone {
			// Refused before it costs a durable ticket and two rounds:
			// a drain's readers knock thousands of times a second.
			reply.Reject, reply.Code = true, code
			if m.Shared && code == wire.CodeDraining {
				t.noteDrainTold(m.From, m.Mode)
			}
			n.send(reply)
			return reply, false
		}
		t.putRec(m.Req, &record{
			since: n.now,
			// A READ_ONLY entry is Active when it is a node's shared read
			// ticket (its ENTER says so): writers ask it to yield
			// (KindYield), and a writer's try waits for that instead of
			// failing at once (semaphore.Admit). Stored with the ticket.
			entry:    wire.Entry{Req: m.Req, Mode: m.Mode, State: wire.StateChoosing, Active: m.Shared && m.Mode.Shared()},
			deadline: n.now + n.keep(m.Lifetime),
			try:      m.Try && !n.cfg.Mutant.on(MutantTryDrains),
		})
		n.schedule(t, t.recs[m.Req].deadline)
		n.changedReq(t, m.Req, m.Mode)
		t.recs[m.Req].flagVer = t.ver
		if !m.Mode.Shared() {
			// A drain's readers are turned away from here, a round and a
			// durable ticket before the writer's ticket is taken (asked
			// again then): a yield only makes a node more careful, and a
			// writer that goes at once costs a share's renewal at most.
			n.askYields(t, t.recs[m.Req])
		}
	}
	return reply, true
}

// ticketOf is the replica's table of m.Name, its record of m.Req, and
// whether that record has a ticket.
func (n *Node) ticketOf(m wire.Message) (*replicaName, *record, bool) {
	t := n.replicaName(m.Name)
	r := t.recs[m.Req]
	return t, r, r != nil && r.entry.Ticket != 0
}

// onAddTicket stores Req's number durably (ADD_TICKET), if the choosing
// flag it rests on is still here and the number is above every other.
func (n *Node) onAddTicket(m wire.Message) {
	n.addTicket(m, false)
}

// addTicket is onAddTicket's, and onEnterTicket's when withFlag.
func (n *Node) addTicket(m wire.Message, withFlag bool) {
	reply := n.replyTo(m, wire.KindAddTicketAck)
	reply.Ticket = m.Ticket
	t := n.replicaName(m.Name)
	r := t.recs[m.Req]
	switch {
	case r != nil && r.entry.Ticket == m.Ticket:
		// A duplicate: the ticket is durable already, or is in this Ready's Persist.
		n.watchFromTicket(t, m)
		reply.Held = n.holdIfClear(t, r)
	case r == nil || r.entry.State != wire.StateChoosing ||
		(m.Incarnation != n.cfg.Incarnation && !n.cfg.Mutant.on(MutantStaleIncarnation)):
		// The choosing flag this ticket rests on is not here, or was set
		// in a previous life of this replica and may have been lost since.
		reply.Reject = true
	case !n.aboveMark(t, m.Ticket, withFlag):
		// Another request holds this number: tickets, and so fencing
		// tokens, are unique per name. The master raises its number.
		reply.Reject, reply.HighWater = true, n.suggestFor(t, true)
	default:
		r.entry.Ticket = m.Ticket
		r.deadline = max(r.deadline, n.now+n.keep(m.Lifetime))
		t.highWater, t.stored = max(t.highWater, m.Ticket), true
		n.changedReq(t, m.Req, r.entry.Mode)
		if !n.cfg.Mutant.on(MutantNotDurable) {
			n.persist(Write{Kind: WriteTicket, Name: m.Name, Entry: r.entry, Lifetime: r.deadline - n.now})
		}
		n.watchFromTicket(t, m)
		n.askYields(t, r)
		reply.Held = n.holdIfClear(t, r)
	}
	n.send(reply)
}

// clearScan bounds the table holdIfClear and flushReports look through:
// a name with more requests than this is crowded, and its grants are
// confirmed (startConfirm) instead.
const clearScan = 32

// holdIfClear marks r held when nothing in this replica's table is ahead
// of it in a conflicting mode (no such earlier ticket, no such request
// still choosing), and reports whether r is held. The ack of ADD_TICKET
// says so (Message.Held), and a master that has that word from a quorum
// grants without the confirmation round (startConfirm): from here on a
// force-unlock of r at this replica is taken as a holder's, as after a
// confirmation. Any force-unlock is answered by a quorum, which meets
// that one at a replica that marked r held when it took the ticket; one
// that came there first left a tombstone, which refuses the ticket. The
// test is for the answers' sake only (a waiter behind a holder is
// answered as a waiter): marking any ticket held would be as safe.
func (n *Node) holdIfClear(t *replicaName, r *record) bool {
	if r.held || len(t.recs) > clearScan {
		return r.held
	}
	if !t.clear(r) {
		return false
	}
	if n.cfg.Mutant.on(MutantClearNotHeld) {
		return true // says so, and forgets it
	}
	r.held = true
	return true
}

// clear: r has a ticket, and no request of t in a conflicting mode is
// ahead of it (an earlier ticket) or may end up so (still choosing).
func (t *replicaName) clear(r *record) bool {
	if r.entry.Ticket == 0 {
		return false
	}
	for req, o := range t.recs {
		if req == r.entry.Req || !wire.Conflicts(o.entry.Mode, r.entry.Mode) {
			continue
		}
		if o.entry.Ticket == 0 || Earlier(o.entry.Ticket, req, r.entry.Ticket, r.entry.Req) {
			return false
		}
	}
	return true
}

// heldForReport picks the request of master that a report to it marks
// held (Message.Req, Message.Held): its earliest one that is clear and not
// held yet, marked held now (see holdIfClear); none on a crowded name. A
// waiter whose turn came by a handoff is then granted on the report,
// without a confirmation round, when a quorum of leaders marked it so; a
// report lost on the way costs that round only.
func (n *Node) heldForReport(t *replicaName, master wire.NodeID) (wire.RequestID, bool) {
	if len(t.recs) > clearScan {
		return wire.RequestID{}, false
	}
	var pick *record
	for req, r := range t.recs {
		if req.Node != master || r.held || !t.clear(r) {
			continue
		}
		if pick == nil || Earlier(r.entry.Ticket, req, pick.entry.Ticket, pick.entry.Req) {
			pick = r
		}
	}
	if pick == nil {
		return wire.RequestID{}, false
	}
	if !n.cfg.Mutant.on(MutantClearNotHeld) {
		pick.held = true
	}
	return pick.entry.Req, true
}

// watchFromTicket: a ticket taken is also a watch of the name by its
// master (m.WatchSeq), so the report the grant may rest on leaves at this
// Ready's flush, after the ack and with the ticket in it.
func (n *Node) watchFromTicket(t *replicaName, m wire.Message) {
	if m.WatchSeq > 0 {
		n.watch(t, m.From, m.WatchSeq, int64(m.Lifetime))
	}
}

// onConfirm marks a ticket held before its grant. Only a ticket still
// here is confirmed: one released or force-unlocked here must not be
// granted on older reports.
func (n *Node) onConfirm(m wire.Message) {
	reply := n.replyTo(m, wire.KindConfirmAck)
	reply.Ticket = m.Ticket
	t, r, ticketed := n.ticketOf(m)
	if !ticketed {
		reply.Reject = true
	} else {
		n.exit(t, r, m.Ticket)
		r.held = true
	}
	n.send(reply)
}

func (n *Node) onWatch(m wire.Message) {
	n.watch(n.replicaName(m.Name), m.From, m.WatchSeq, int64(m.Lifetime))
}

// watch has t pushed to master from for lifetime ticks, reports echoing seq.
func (n *Node) watch(t *replicaName, from wire.NodeID, seq uint64, lifetime int64) {
	w := t.watchers[from]
	if w == nil {
		w = &watcher{}
		if t.watchers == nil {
			t.watchers = map[wire.NodeID]*watcher{}
		}
		t.watchers[from] = w
	}
	w.seq = max(w.seq, seq)
	w.deadline = max(w.deadline, n.now+lifetime)
	// The master may have dropped what it had: whole again.
	w.sentSeq = 0
	n.schedule(t, w.deadline)
	// Answered at the flush, with every change of this batch: a master
	// with many waiters on the name watches for each of them.
	w.due = true
	n.dirty.add(t.name)
}

func (n *Node) onRelease(m wire.Message) {
	reply := n.replyTo(m, wire.KindReleaseAck)
	t := n.replicaName(m.Name)
	r, had := t.recs[m.Req]
	tb, _ := t.tombs.get(m.Req)
	reply.Held = had && (r.held || r.restored) || !had && tb.held
	seen := t.readerSeen
	// A release sent by another node than the request's master is an
	// operator's force-unlock: the master still runs, and may confirm or
	// renew the request. Its tombstone is durable before the ack, so a
	// crash cannot bring the ticket back for that confirmation to count
	// (the answers of a quorum of leaders are what the next waiter's
	// grant rests on). A master's own release may stay lazy: it has
	// ended the request and sends nothing more for it, so a ticket a
	// crash brings back is only restored, and dropped by the other
	// leaders' word (askHolds) or its lifetime: a delay, not a grant.
	byOperator := m.From != m.Req.Node
	forced := byOperator && !n.cfg.Mutant.on(MutantLazyForcedTomb)
	lifetime := m.Lifetime
	if byOperator && !had && !n.cfg.Mutant.on(MutantUnboundedDoorway) {
		// Not here yet: the request may still be in its doorway, and
		// its ENTERING on its way. The tombstone refuses it for longer
		// than a master keeps a doorway going (doorwayOverdue).
		bound := n.cfg.DoorwayTicks
		if n.cfg.Mutant.on(MutantTombForATry) {
			bound = n.cfg.TryTicks
		}
		lifetime = max(lifetime, uint64(bound))
	}
	n.dropRecordAs(m.Name, t, m.Req, n.now+n.keep(lifetime), !forced)
	if had && shared(r.entry) {
		// A share's readers left ReadersAgo ticks before, on its master's
		// clock: a quiet period counts from there, less the margin for a
		// clock faster than ours, as a plain reader's counts from its
		// release (flushReports does not count a share as a reader).
		ago := int64(min(m.ReadersAgo, maxSpan*4))
		if !n.cfg.Mutant.on(MutantNoDriftMargin) {
			ago = ago * 8 / 9
		}
		t.readerSeen = max(seen, n.now-ago)
	}
	reply.Reject = !had
	n.send(reply)
	// Released by an operator on another node: tell the request's
	// master now, not at its next renewal; also when this leader has not
	// heard of it yet: its master may be in the doorway, and ends it.
	if byOperator {
		n.send(wire.Message{Kind: wire.KindRevoked, To: m.Req.Node, Name: m.Name, Req: m.Req})
	}
}

func (n *Node) onActivate(m wire.Message) {
	reply := n.replyTo(m, wire.KindActivateAck)
	reply.Round = m.Round
	t, r, ticketed := n.ticketOf(m)
	switch {
	case !ticketed:
		reply.Reject = true
	case m.Round < r.markRound:
		return // a mark the master has since replaced, arriving late
	default:
		r.markRound = m.Round
		if r.entry.Active != !m.Reject {
			r.entry.Active = !m.Reject
			n.changedReq(t, r.entry.Req, r.entry.Mode)
		}
	}
	n.send(reply)
}

func (n *Node) onRenew(m wire.Message) {
	reply := n.replyTo(m, wire.KindRenewAck)
	reply.Round = m.Round // which renewal this answers
	if t, r, ticketed := n.ticketOf(m); !ticketed {
		reply.Reject = true
	} else {
		if r.entry.Mode.Shared() {
			// Again, should a KindYield be lost.
			reply.Yield, reply.Ticket = t.writerYield(r.entry.Mode), r.entry.Ticket
		}
		r.held = true
		r.deadline = max(r.deadline, n.now+n.keep(m.Lifetime))
		n.persist(Write{Kind: WriteLifetime, Name: m.Name, Entry: r.entry, Lifetime: r.deadline - n.now})
	}
	n.send(reply)
}

// onHolds answers which of the asked tickets this leader holds: a ticket
// (StateTicket with its number), gone for good here (StateReleased: a
// tombstone, which refuses the request from now on), or neither
// (StateChoosing: unknown here, or a choosing flag without a number). A
// request in its doorway may still take its number here after this
// answer (its ENTERING or ADD_TICKET late on the wire), so "neither"
// says less than a tombstone (see onHoldsAck). The answer echoes the
// ask's Round: when it was asked.
func (n *Node) onHolds(m wire.Message) {
	reply := n.replyTo(m, wire.KindHoldsAck)
	reply.Round = m.Round
	reply.Entries = make([]wire.Entry, 0, len(m.Entries))
	t := n.names[m.Name]
	for _, e := range m.Entries {
		held := wire.Entry{Req: e.Req, Mode: e.Mode, State: wire.StateChoosing}
		switch {
		case t != nil && t.recs[e.Req] != nil && t.recs[e.Req].entry.Ticket != 0:
			held.Ticket, held.State = t.recs[e.Req].entry.Ticket, wire.StateTicket
		case t != nil && t.recs[e.Req] == nil && t.gone(e.Req) || n.cfg.Mutant.on(MutantHoldsUnknownAsGone):
			held.State = wire.StateReleased
		}
		reply.Entries = append(reply.Entries, held)
	}
	n.send(reply)
}

// onRestarted drops what a restarted node's earlier lives were choosing,
// and keeps their tickets as former ones.
func (n *Node) onRestarted(m wire.Message) {
	inc := m.Incarnation
	if inc <= n.minInc[m.From] {
		return
	}
	n.minInc[m.From] = inc
	for _, name := range sortedKeys(n.names) {
		t := n.names[name]
		for _, req := range sortedReqs(t.recs) {
			if req.Node != m.From || req.Incarnation() >= inc {
				continue
			}
			r := t.recs[req]
			if r.entry.Ticket == 0 || n.cfg.Mutant.on(MutantDropFormerTickets) {
				// Still choosing its number here: this replica never
				// counted for its grant. No tombstone: another replica
				// may keep its ticket, and hand it over to this one.
				// (The old life's late messages are refused by minInc.)
				n.dropRecord(name, t, req, 0)
				continue
			}
			// A ticket may be a granted lease, and its client outlives
			// the agent: keep it until released, force-released or
			// expired. Its choosing flag died with its master: the
			// number stays, as after a restart of this replica.
			if r.entry.State == wire.StateChoosing {
				r.entry.State = wire.StateTicket
				n.changedReq(t, req, r.entry.Mode)
			}
			n.tellFormer(m.From, name, r)
		}
		delete(t.watchers, m.From)
		t.compact()
		n.checkIfIdle(t)
	}
}

// onExit takes Req's choosing flag down (EXITING). A replica that set the
// flag but missed the request's ADD_TICKET (its ENTER ack came after the
// quorum's, or the number was refused as too low) takes the final number
// from EXITING, as a late ADD_TICKET would: the number is durable at a
// quorum of the others and unique there, and a flag without a number would
// otherwise stay in this replica's table and reports, where the operators'
// view shows it and masters wait on it, until the request's deadline. The
// write is lazy: EXITING has no answer, so nothing sent rests on it (a
// crash that loses it loses a copy the safety argument never counted); a
// renewal's durable write later makes it durable first, in order.
func (n *Node) onExit(m wire.Message) {
	t := n.replicaName(m.Name)
	r := t.recs[m.Req]
	if r != nil && r.entry.State == wire.StateChoosing && r.entry.Ticket == 0 && m.Ticket != 0 &&
		!n.cfg.Mutant.on(MutantNumberlessChoosing) {
		r.entry.Ticket = m.Ticket
		r.deadline = max(r.deadline, n.now+n.keep(m.Lifetime))
		t.highWater, t.stored = max(t.highWater, m.Ticket), true
		if !n.cfg.Mutant.on(MutantNotDurable) {
			n.persist(Write{Kind: WriteTicket, Name: m.Name, Entry: r.entry, Lifetime: r.deadline - n.now, Lazy: true})
		}
		n.askYields(t, r)
	}
	n.exit(t, r, m.Ticket)
}

// exit takes r's choosing flag down: its number ticket is durable at a
// quorum. Not durable here: a restart brings the ticket back as exited with
// the number on disk, never higher than the final one, which only makes
// others wait longer for this request.
func (n *Node) exit(t *replicaName, r *record, ticket uint64) {
	if r != nil && r.entry.State == wire.StateChoosing && r.entry.Ticket != 0 {
		r.entry.State, r.entry.Ticket = wire.StateTicket, max(r.entry.Ticket, ticket)
		n.changedReq(t, r.entry.Req, r.entry.Mode)
	}
}

// maxHoldsAsked bounds the entries of one KindHolds.
const maxHoldsAsked = 1024

// askHolds asks the view's other leaders which of the tickets this leader
// restored from its store or took over in a handoff they hold: every
// RefreshTicks while serving, for as long as it keeps them, and once more
// as soon as a ticket's doorway bound is past (doorwayOver), when the
// answers start to count for it. Round carries when it asked, plus one
// (0 is an answer of a release that does not echo it).
func (n *Node) askHolds() {
	if !n.Serving() || n.now < n.holdsAskAt {
		return
	}
	n.holdsAskAt = n.now + n.cfg.RefreshTicks
	for _, name := range sortedKeys(n.restoredNames) {
		t := n.names[name] // forgetName takes a name out of restoredNames
		var asked []wire.Entry
		for _, req := range sortedReqs(t.recs) {
			if r := t.recs[req]; r.restored && len(asked) < maxHoldsAsked {
				asked = append(asked, r.entry)
				if over := r.since + n.doorwayKeep(); over > n.now {
					n.holdsAskAt = min(n.holdsAskAt, over)
				}
			}
		}
		if len(asked) == 0 {
			delete(n.restoredNames, name)
			continue
		}
		n.toLeaders(wire.Message{Kind: wire.KindHolds, Name: name, Entries: asked, Round: uint64(n.now) + 1},
			func(l wire.NodeID) bool { return l == n.cfg.ID })
	}
}

// doorwayKeep is how long, on this replica's clock, a master's doorway
// can go on at most: DoorwayTicks of the master's (doorwayOverdue), with
// keep's margin for a master's clock that runs slower.
func (n *Node) doorwayKeep() int64 { return n.keep(uint64(n.cfg.DoorwayTicks)) }

// doorwayOver: an answer to an ask of holds with Round round was made
// after every doorway that r's ticket could belong to was given up. r
// was taken (before a restart, or at its old leader before a handoff)
// before this replica learned of it, so its doorway began before r.since;
// its master counts no take made more than DoorwayTicks after that.
func (n *Node) doorwayOver(r *record, round uint64) bool {
	return round > 0 && int64(round-1) >= r.since+n.doorwayKeep()
}

// onHoldsAck: a restored ticket held by another leader is kept as any
// other; one that too many leaders of the view refuse for good is no
// live lease. A live lease is at a quorum of the view's leaders from its
// grant until its holder's timer runs out (restarts restore it, handoffs
// carry it, only releases and expiry drop it), so a ticket fewer than a
// quorum can ever hold was released or expired while this leader was
// away, and would otherwise block its name until its restored lifetime
// ran out.
//
// A leader with a tombstone of the request can never hold it. One that
// merely lacks the ticket may still take it while the request is in its
// doorway: its number is taken at one leader before the others, and this
// leader's take, acknowledged before it restarted or again since, may be
// one its master counts. Dropped on the word of leaders that had not yet
// taken it, the ticket would end up at fewer leaders than the master's
// quorum of takers, and a later request's quorum could miss it: two
// holders. So such a word counts only when it was asked for after the
// request's doorway was over (doorwayOver): from then on no take is
// counted, and every counted take is durable at its taker, which answers
// that it holds the ticket.
func (n *Node) onHoldsAck(m wire.Message) {
	t := n.names[m.Name]
	if t == nil || !n.cfg.View.IsLeader(m.From) || m.From == n.cfg.ID {
		return
	}
	for _, e := range m.Entries {
		r := t.recs[e.Req]
		if r == nil || !r.restored {
			continue
		}
		if r.notAtEpoch != n.cfg.View.Epoch {
			r.notAt, r.notAtEpoch = map[wire.NodeID]bool{}, n.cfg.View.Epoch
		}
		if e.Ticket != 0 {
			// Held there now; asked again later, for that copy may be
			// a stale one too, and go.
			delete(r.notAt, m.From)
			continue
		}
		if n.cfg.Mutant.on(MutantDropRestoredAtOnce) {
			n.stats.RestoredDropped++
			n.dropRecord(m.Name, t, e.Req, 0)
			continue
		}
		if e.State != wire.StateReleased && !n.doorwayOver(r, m.Round) {
			delete(r.notAt, m.From) // it may take it yet
			continue
		}
		r.notAt[m.From] = true
		if len(n.cfg.View.Leaders)-len(r.notAt) < n.cfg.View.Quorum() {
			n.stats.RestoredDropped++
			// A tombstone, held since the ticket may have been: an
			// operator's force-unlock of the request that comes after
			// (its own tombstones at the other leaders may be what
			// dropped it here) must hear from this leader that it took
			// a holder, not that it never had the request.
			until := r.deadline
			if n.cfg.Mutant.on(MutantHoldsDropUntold) {
				until = 0
			}
			n.dropRecord(m.Name, t, e.Req, until)
		}
	}
}

// tellFormer tells a restarted node that this replica keeps r, a ticket
// of one of its earlier lives, so the new life can release it.
func (n *Node) tellFormer(to wire.NodeID, name string, r *record) {
	m := wire.Message{Kind: wire.KindFormer, To: to, Name: name, Req: r.entry.Req, Ticket: r.entry.Ticket,
		Lifetime: uint64(max(r.deadline-n.now, 0))}
	if to == n.cfg.ID {
		m.From = to
		n.onFormer(m)
		return
	}
	n.send(m)
}

// keep is how many ticks a replica keeps a request whose master asked for
// lifetime ticks (counted on the master's clock): an eighth longer, so a
// replica whose clock runs up to 6 % faster than its master's still keeps
// every lease as long as its holder counts it.
func (n *Node) keep(lifetime uint64) int64 {
	l := int64(min(lifetime, maxSpan*4))
	if !n.cfg.Mutant.on(MutantNoDriftMargin) {
		l += l / 8
	}
	return l
}

// shared reports whether e is a node's shared read ticket (Message.Shared),
// which stands for local readers that came and went while it was held. It
// keeps soft writers out while it is in the table, so a quiet period counts
// from when its readers left, which its release tells (Message.ReadersAgo).
func shared(e wire.Entry) bool {
	return e.Mode.Shared() && e.Active
}

// keepHandedOver is how many ticks a replica keeps a ticket or tombstone
// that a handoff gave it with remaining ticks left on its old leader's
// clock. The old leader's remaining time already has the margin of keep
// in it, so it is not applied again (each handoff would otherwise stretch
// a lease by another eighth, and a ticket handed around stays long after
// its holder let go): it is taken off, rounded up, and put back, which is
// remaining or one tick more. Safe whatever the two leaders' clocks do, as
// long as each runs at most an eighth faster than the holder's master's: the
// old leader's faster ticks only shrink what it hands over, and with L the
// remaining ticks without the margin, the holder's lease ends within L of
// its master's ticks from the handoff, before the new leader's keep(L) ends
// (the proof is in TestHandedOverLifetime).
func (n *Node) keepHandedOver(remaining uint64) int64 {
	r := min(remaining, maxSpan*4)
	if n.cfg.Mutant.on(MutantNoDriftMargin) {
		return int64(r)
	}
	return n.keep((8*r + 8) / 9)
}

// dropRecord forgets a request (released, abandoned, expired or of a dead
// incarnation), durably if it held a ticket. A release (tombUntil in the
// future) leaves a durable tombstone until tombUntil, or until the record
// would have ended if that is later: a copy of the ticket that the release
// missed, at another replica, may live as long. The tombstone goes with
// every snapshot, so a handoff or a restart never brings the ticket back.
// Expiry and the other drops leave none: they are this replica's own view,
// and a renewal this replica missed may keep the ticket alive elsewhere.
func (n *Node) dropRecord(name string, t *replicaName, req wire.RequestID, tombUntil int64) {
	n.dropRecordAs(name, t, req, tombUntil, true)
}

// dropRecordAs is dropRecord whose writes are lazy or not: a drop that an
// acknowledgement rests on (a force-unlock's) is written before it.
func (n *Node) dropRecordAs(name string, t *replicaName, req wire.RequestID, tombUntil int64, lazy bool) {
	r := t.recs[req]
	if r != nil {
		if r.entry.Mode.Reader() {
			t.readerSeen = n.now
		}
		delete(t.recs, req)
		t.compact()
		n.changedReq(t, req, r.entry.Mode)
		if tombUntil > n.now {
			tombUntil = max(tombUntil, r.deadline)
		}
	}
	old, had := t.tombs.get(req)
	if tombUntil > n.now {
		t.putTomb(req, tomb{until: max(old.until, tombUntil), held: old.held || r != nil && (r.held || r.restored)})
		tb, _ := t.tombs.get(req)
		n.schedule(t, tb.until)
	}
	n.checkIfIdle(t)
	// Lazy, for a plain release: it is answered before its tombstone is
	// durable. A crash that loses it brings the ticket back as restored,
	// which the other leaders' word (askHolds) or its lifetime ends: only
	// liveness, as long as the request's master sends nothing more for it.
	switch {
	case tombUntil > n.now && (r != nil || !had || !lazy) && !n.cfg.Mutant.on(MutantMemoryTombs):
		// In the ticket's place; a tombstone extended in memory only
		// (a release sent again) is not written again, unless an ack
		// rests on it.
		n.persist(Write{Kind: WriteTomb, Name: name, Entry: wire.Entry{Req: req}, Lifetime: max(old.until, tombUntil) - n.now, Lazy: lazy})
	case r != nil && r.entry.Ticket != 0:
		n.persist(Write{Kind: WriteDelete, Name: name, Entry: r.entry, Lazy: lazy})
	}
}

// replicaTick runs the checks of the names whose deadlines passed.
func (n *Node) replicaTick() {
	n.askHolds()
	n.runChecks()
}

// changed notes that t's watchers are due a report of the whole table:
// anything in it may have changed.
func (n *Node) changed(t *replicaName) {
	t.ver++
	t.journal, t.journalFrom = t.journal[:0], t.ver+1
	t.dirty = true
	n.dirty.add(t.name)
}

// changedReq notes that req's entry in t changed (or went, with mode).
func (n *Node) changedReq(t *replicaName, req wire.RequestID, mode wire.Mode) {
	t.ver++
	switch {
	case len(t.watchers) == 0:
		// Nobody to tell: a new watcher starts from the whole table.
		t.journal, t.journalFrom = nil, t.ver+1
	case len(t.journal) == maxJournal:
		t.journal = append(t.journal[:0], t.journal[maxJournal/2:]...)
		t.journalFrom = t.journal[0].ver
		fallthrough
	default:
		t.journal = append(t.journal, journaled{ver: t.ver, req: req, mode: mode})
	}
	t.dirty = true
	n.dirty.add(t.name)
}

// delta is what changed in t since version since, in request order; ok is
// false when the journal does not reach back that far.
func (t *replicaName) delta(since uint64) (entries []wire.Entry, ok bool) {
	if since+1 < t.journalFrom {
		return nil, false
	}
	var changed []journaled
	for _, j := range t.journal {
		if j.ver > since {
			changed = append(changed, j)
		}
	}
	slices.SortStableFunc(changed, func(a, b journaled) int { return a.req.Compare(b.req) })
	entries = make([]wire.Entry, 0, len(changed))
	for i, j := range changed {
		if i > 0 && changed[i-1].req == j.req {
			continue
		}
		if r := t.recs[j.req]; r != nil {
			entries = append(entries, r.entry)
		} else {
			entries = append(entries, wire.Entry{Req: j.req, Mode: j.mode, State: wire.StateReleased})
		}
	}
	return entries, true
}

// flushReports pushes one report per watcher of every name that changed
// since the last flush. It runs once per Ready, not per message: under
// load a report then answers a batch of changes, and a name's table is
// listed once for all its watchers.
func (n *Node) flushReports() {
	for _, name := range n.dirty.take() {
		t := n.names[name]
		if t == nil {
			continue // dropped since
		}
		n.tellDrainOver(t, false)
		all := t.dirty
		t.dirty = false
		if len(t.watchers) > 0 {
			for _, r := range t.recs {
				if r.entry.Mode.Reader() && !shared(r.entry) {
					t.readerSeen = n.now
					break
				}
			}
		}
		// Reports of this flush share their entries: receivers never
		// change a report's entries.
		var whole []wire.Entry
		var deltas map[uint64][]wire.Entry // by the version they start after
		crowd := n.holdableMasters(t)
		for _, id := range sortedNodes(t.watchers) {
			w := t.watchers[id]
			if !all && !w.due || !w.due && n.holdsBack(t, id, w, crowd) {
				continue
			}
			w.due = false
			m := wire.Message{Kind: wire.KindReport, To: id, Name: name, Incarnation: n.cfg.Incarnation,
				WatchSeq: w.seq, ReadersAgo: uint64(n.now - t.readerSeen)}
			if w.sentSeq != 0 {
				d, ok := deltas[w.sentVer]
				if !ok {
					d, ok = t.delta(w.sentVer)
					if ok {
						if deltas == nil {
							deltas = map[uint64][]wire.Entry{}
						}
						deltas[w.sentVer] = d
					}
				}
				if ok {
					m.Entries, m.BaseSeq = d, w.sentSeq
				}
			}
			if m.BaseSeq == 0 {
				if whole == nil {
					whole = make([]wire.Entry, 0, len(t.recs))
					for _, req := range sortedReqs(t.recs) {
						whole = append(whole, t.recs[req].entry)
					}
				}
				m.Entries = whole
			}
			m.Req, m.Held = n.heldForReport(t, id)
			n.reportSeq++
			m.ReportSeq = n.reportSeq
			w.sentVer, w.sentSeq = t.ver, n.reportSeq
			n.send(m)
		}
	}
}

// holdsBack: the changes of t since master's last report cannot matter
// to master's requests there, so the report waits until one that does
// (a release, a change of its own requests or of a request it has seen,
// a request of its own that the report would mark held, its watch) and
// then carries them all. Under a queue of writers on one name this saves
// a report per leader and waiting master for a newcomer's flag and
// ticket (16 writers on one name: 16 reports a handoff instead of 20);
// when a fleet's page views all come at once, it saves each waiting
// reader's agent a report per leader for every reader after it.
//
// They cannot matter when every request of master in t is not a soft
// writer and has its ticket, taken in this life, and every change since
// is of another node's request that master's last report did not list:
// its flag was set here after that report, so after master's tickets
// were taken here, and the number it gets is above them wherever it is
// taken (a taker checks it above a mark at least as high, and every
// quorum it may be taken at shares a leader with the quorum that reported
// our tickets). A hard writer waits only for earlier tickets and for a
// soft writer marked active; a reader or an intent only for earlier
// tickets it conflicts with and for a soft writer marked active, and its
// limit counts only earlier readers; and the doorways it waits for are
// those its reports showed. Soft writers' changes are sent at once, and
// a soft writer's master always gets its reports: it also waits for later
// readers.
//
// Nor can any change of a request in a mode that conflicts with none of
// master's requests, when those are all nodes' shared tickets (Entry.Active
// on a shared mode): a share is never of a request with a reader limit
// (the only waiter that counts requests it does not conflict with), so it
// waits for conflicting requests only, whatever the others do. After a
// drain, hundreds of agents' shares of one site come back at once, and
// their flags, tickets, grants and releases no longer cost every other
// waiting share a report per leader.
//
// On a crowded table (more than clearScan requests) no report marks a
// request held, so that condition is not asked, and master's requests are
// read for every watcher in one pass (holdableMasters).
//
// Safety does not rest on any of this: a report held back is a report
// late on the wire, which the masters' freshness rules already allow
// (fresh). What rests on it is that no waiter waits for it.
func (n *Node) holdsBack(t *replicaName, master wire.NodeID, w *watcher, crowd map[wire.NodeID]masterHold) bool {
	if n.cfg.EagerReports || w.sentSeq == 0 || w.sentVer+1 < t.journalFrom {
		return false
	}
	var mh masterHold
	if len(t.recs) > clearScan {
		mh = crowd[master]
	} else {
		mh = masterHold{ticketed: true, shares: true}
		for req, r := range t.recs {
			if req.Node != master {
				continue
			}
			mh.add(r, n.cfg.Mutant)
			if !r.held && t.clear(r) && !n.cfg.Mutant.on(MutantHoldBackAny) {
				return false // the report marks it held (heldForReport): a grant without a confirmation
			}
		}
	}
	if !mh.ticketed || mh.modes == 0 {
		return false
	}
	for _, j := range t.journal {
		if j.ver <= w.sentVer || n.cfg.Mutant.on(MutantHoldBackAny) {
			continue
		}
		if j.req.Node == master {
			return false
		}
		if mh.shares && !mh.conflicts(j.mode) {
			continue
		}
		r := t.recs[j.req]
		if r == nil || r.flagVer <= w.sentVer || r.entry.Mode.Soft() {
			return false
		}
	}
	n.stats.HeldBackReports++
	return true
}

// masterHold is what holdsBack asks of a master's requests in a table.
type masterHold struct {
	// ticketed: every one is not a soft writer and has its ticket,
	// taken in this life of the replica.
	ticketed bool
	// shares: every one is a node's shared ticket.
	shares bool
	modes  uint32 // a bit per mode among them; 0: none
}

func (h *masterHold) add(r *record, mutant Mutant) {
	h.ticketed = h.ticketed && !r.entry.Mode.Soft() && r.entry.Ticket != 0 && !r.restored
	h.shares = h.shares && (r.entry.Active || mutant.on(MutantHoldBackForReaders)) && r.entry.Mode.Shared()
	h.modes |= 1 << r.entry.Mode
}

// conflicts: a request in mode m conflicts with one of the modes.
func (h masterHold) conflicts(m wire.Mode) bool {
	for mine := wire.Mode(0); mine < 32; mine++ {
		if h.modes&(1<<mine) != 0 && wire.Conflicts(m, mine) {
			return true
		}
	}
	return false
}

// holdableMasters is, on a crowded table with watchers, each master's
// masterHold: one pass over the table for all its watchers. Nil
// otherwise; the map is reused from flush to flush.
func (n *Node) holdableMasters(t *replicaName) map[wire.NodeID]masterHold {
	if len(t.recs) <= clearScan || len(t.watchers) == 0 || n.cfg.EagerReports {
		return nil
	}
	if n.holdable == nil {
		n.holdable = map[wire.NodeID]masterHold{}
	}
	clear(n.holdable)
	for req, r := range t.recs {
		h, ok := n.holdable[req.Node]
		if !ok {
			h = masterHold{ticketed: true, shares: true}
		}
		h.add(r, n.cfg.Mutant)
		n.holdable[req.Node] = h
	}
	return n.holdable
}

// refuseEarly asks Config.RefuseEarly about a try entering t.
func (n *Node) refuseEarly(t *replicaName, m wire.Message) wire.Code {
	if !m.Try || n.cfg.RefuseEarly == nil {
		return wire.CodeNone
	}
	return n.cfg.RefuseEarly(m.Mode, t.earlyView())
}

// earlyView is what RefuseEarly looks at in t: its tickets and the
// requests still choosing, in request order.
func (t *replicaName) earlyView() []wire.Entry {
	tickets := make([]wire.Entry, 0, len(t.recs))
	for _, r := range t.recs {
		if r.entry.State == wire.StateTicket || r.entry.State == wire.StateChoosing {
			tickets = append(tickets, r.entry)
		}
	}
	slices.SortFunc(tickets, func(a, b wire.Entry) int { return a.Req.Compare(b.Req) })
	return tickets
}

// tellDrainOver tells the nodes of t.drainTold whose shares' tries t no
// longer refuses that the drain is over (KindYield, YieldNone): their
// readers may take a share again. Without a RefuseEarly policy nothing
// is told (their memos run out).
func (n *Node) tellDrainOver(t *replicaName, gone bool) {
	if len(t.drainTold) == 0 || n.cfg.RefuseEarly == nil {
		return
	}
	var view []wire.Entry
	if !gone {
		view = t.earlyView()
	}
	for _, id := range sortedNodes(t.drainTold) {
		bits := t.drainTold[id]
		for slot, mode := range [2]wire.Mode{wire.ModeReadOnly, wire.ModeIntentShared} {
			if bits&(1<<slot) != 0 && n.cfg.RefuseEarly(mode, view) == wire.CodeNone {
				bits &^= 1 << slot
				n.send(wire.Message{Kind: wire.KindYield, To: id, Name: t.name, Mode: mode, Yield: wire.YieldNone})
			}
		}
		if bits == 0 {
			delete(t.drainTold, id)
		} else {
			t.drainTold[id] = bits
		}
	}
	if len(t.drainTold) == 0 {
		t.drainTold = nil
	}
}

// askYields tells the masters of the name's shared tickets (READ_ONLY or
// INTENT_SHARED) that a writer waits, when r, a ticket just taken or a
// choosing flag just set, is of a mode some of them conflict with (a
// writer's, or INTENT_EXCLUSIVE, which READ_ONLY shares yield to); or r's
// own master, when r is a shared ticket and such a ticket waits already.
// A master that holds the ticket for its local readers (a share) lets it
// go; one of a plain reader's ticket tells its client (a page view that
// took the bakery by itself hears of a drain too); others ignore it (a
// ticket taken over in a handoff may be either: snapshots do not carry
// the mark). Only shares are remembered for the drain's end (drainTold):
// a plain reader keeps no drain memo.
func (n *Node) askYields(t *replicaName, r *record) {
	e := r.entry
	if e.Mode.Shared() {
		if y := t.writerYield(e.Mode); y != wire.YieldNone {
			n.send(wire.Message{Kind: wire.KindYield, To: e.Req.Node, Name: t.name, Req: e.Req, Ticket: e.Ticket, Yield: y})
			if y == wire.YieldDrain && (e.Active || r.restored) {
				t.noteDrainTold(e.Req.Node, e.Mode)
			}
		}
		return
	}
	y := yieldFor(e.Mode, r.try)
	for _, req := range sortedReqs(t.recs) {
		if r := t.recs[req]; r.entry.Mode.Shared() && r.entry.Ticket != 0 && wire.Conflicts(e.Mode, r.entry.Mode) &&
			(r.entry.Active || r.restored || !n.cfg.Mutant.on(MutantPlainReaderUntold)) {
			n.send(wire.Message{Kind: wire.KindYield, To: req.Node, Name: t.name, Req: req, Ticket: r.entry.Ticket, Yield: y})
			if y == wire.YieldDrain && (r.entry.Active || r.restored) {
				t.noteDrainTold(req.Node, r.entry.Mode)
			}
		}
	}
}

// writerYield is the strongest yield that the tickets in t of the modes a
// shared ticket of mode m conflicts with ask.
func (t *replicaName) writerYield(m wire.Mode) wire.Yield {
	y := wire.YieldNone
	for _, r := range t.recs {
		if !r.entry.Mode.Shared() && r.entry.Ticket != 0 && wire.Conflicts(m, r.entry.Mode) {
			y = max(y, yieldFor(r.entry.Mode, r.try))
		}
	}
	return y
}

// yieldFor is the yield a ticket of mode m (a writer's, or
// INTENT_EXCLUSIVE) asks of the shared tickets it conflicts with: one
// that lets later readers pass, or a try, only needs them gone when idle.
func yieldFor(m wire.Mode, try bool) wire.Yield {
	if mayBeActive(m) || try {
		return wire.YieldIdle
	}
	return wire.YieldDrain
}
