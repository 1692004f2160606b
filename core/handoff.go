package core

import (
	"cmp"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// Leader handoff. When a view names leaders, each of them
// takes the lock table over from the previous view's leaders before it
// serves: it asks them for their tables; each of them first fences (it
// refuses lock work below the new epoch, durably) and then sends its whole
// table. Once a quorum of the previous leaders answered, at least one of
// them complete for the previous view, the new leader merges the tables
// into its own (tombstones first, from every answer: a released request
// stays released; per entry, the higher number wins; high-water marks take
// the maximum), persists the result, and only then serves.
//
// Why that suffices: a ticket that counted for a grant in the previous view
// is durable at a quorum of its leaders, and every such leader stored it
// before it fenced (after, it refuses the ticket); a quorum of answers meets
// that quorum. What the previous view started with is held by each of its
// leaders that completed its own handoff. The election makes the previous
// view a valid one, so its leaders are known.

type snapKey struct {
	name string
	req  wire.RequestID
	tomb bool
}

// pull is one previous leader's answer being gathered. Every request has
// its own number (Nonce), echoed by each message of the answer, and every
// answer a number of its own (Seq). A pull accepts the answer to any of
// its requests since since, the first one that arrives; asking again while
// nothing has come loses nothing, and an answer on its way is not
// interrupted. Only an answer found broken (it went quiet short) resets
// the pull: the rest of it, still on its way, is then ignored.
type pull struct {
	since uint64 // the first request this pull accepts an answer to
	// nonce and answer identify the answer being gathered, once its first
	// message arrived.
	nonce, answer uint64
	entries       map[snapKey]wire.Message
	// want is the size the answer announced (SnapshotDone may overtake
	// entries); done once that many entries are here.
	want, complete  uint64 // complete: the responder's last completed handoff
	floor           uint64 // the responder's floor (Durable.Floor)
	announced, done bool
	// askedAt is when the last request went, heardAt when the last message
	// of the answer came; quiet is how long an answer under way may go
	// without one before it counts as broken: it doubles at every break,
	// so a table bigger than one period is not asked for again and again.
	askedAt, heardAt, quiet int64
}

// syncState is one handoff in progress: taking view's table over from the
// leaders of view's previous view.
type syncState struct {
	view  wire.View
	from  map[wire.NodeID]*pull
	nonce uint64 // of the last request sent
}

// syncRetryTicks is how often a handoff asks a previous leader again
// while no answer is under way; syncQuietTicks how long an answer under
// way may first go without a message before it counts as broken,
// doubling at every break up to syncQuietMaxTicks.
const (
	syncRetryTicks    = 10
	syncQuietTicks    = 4 * syncRetryTicks
	syncQuietMaxTicks = 64 * syncRetryTicks
)

// Serving reports whether this node, as a leader, serves the lock table:
// it is a leader of its view, not fenced by a newer one, and complete.
func (n *Node) Serving() bool {
	v := n.cfg.View
	return v.IsLeader(n.cfg.ID) && n.fence <= v.Epoch && n.complete >= v.Epoch
}

// lead records, durably, a view this node leads and has not taken over yet.
func (n *Node) lead(v wire.View) {
	if v.IsLeader(n.cfg.ID) && v.Epoch > n.complete && n.adopted[v.Epoch].Epoch == 0 {
		n.adopted[v.Epoch] = v.Leadership()
		n.persist(Write{Kind: WriteLedView, View: v.Leadership()})
	}
}

// startSync begins taking the table over for view, if this node leads it
// and is not complete for it yet. A node keeps every such handoff going,
// even after it adopted a newer view: the newer view's leaders may need it
// to be complete for this one.
func (n *Node) startSync(v wire.View) {
	if !v.IsLeader(n.cfg.ID) || n.complete >= v.Epoch || n.syncs[v.Epoch] != nil {
		return
	}
	if v.PrevEpoch == 0 {
		n.setComplete(v.Epoch) // the first view: nothing to take over
		return
	}
	// Request numbers start at the incarnation: answers sent to an earlier
	// life never match a request of this one.
	s := &syncState{view: v.Leadership(), from: map[wire.NodeID]*pull{}, nonce: uint64(n.cfg.Incarnation) << 32}
	n.syncs[v.Epoch] = s
	n.requestSnapshots(s)
}

func (n *Node) setComplete(epoch uint64) {
	if epoch <= n.complete {
		return
	}
	n.complete = epoch
	n.persist(Write{Kind: WriteComplete, Epoch: epoch})
	for e := range n.syncs {
		if e <= epoch {
			delete(n.syncs, e)
		}
	}
	for e := range n.adopted {
		if e < epoch {
			delete(n.adopted, e)
		}
	}
	for _, t := range n.names {
		n.changed(t)
	}
}

// requestSnapshots asks every previous leader whose answer is not whole:
// all of them when the handoff starts, then every syncRetryTicks while no
// answer is under way, and at once when one went quiet short for its
// quiet period (a broken answer). A whole answer from a leader not
// complete for the previous view is asked for again too: that leader may
// complete meanwhile.
func (n *Node) requestSnapshots(s *syncState) {
	v := s.view
	for _, l := range v.PrevLeaders {
		p := s.from[l]
		switch {
		case p == nil:
			p = &pull{quiet: syncQuietTicks}
		case p.done && p.complete >= v.PrevEpoch:
			continue
		case p.done:
			if n.now-p.heardAt < syncRetryTicks {
				continue
			}
			p = &pull{quiet: p.quiet}
		case p.answer != 0:
			if n.now-p.heardAt < p.quiet {
				continue // under way
			}
			p = &pull{quiet: min(2*p.quiet, syncQuietMaxTicks)} // broken
		case n.now-p.askedAt < syncRetryTicks:
			continue
		}
		s.nonce++
		if p.since == 0 {
			p.since, p.entries = s.nonce, map[snapKey]wire.Message{}
		}
		p.askedAt = n.now
		s.from[l] = p
		// SnapshotSince tells the leader which answers still count here:
		// one it is sending to a request since then need not start again.
		n.send(wire.Message{Kind: wire.KindSnapshotRequest, To: l, SnapshotID: s.nonce, SnapshotSince: p.since,
			View: wire.View{Epoch: v.Epoch, Leaders: v.Leaders, PrevEpoch: v.PrevEpoch, PrevLeaders: v.PrevLeaders}})
	}
}

// onSnapshotRequest fences, durably, then sends the whole table. The
// fence is in this Ready's Persist, so it is on disk before the table
// leaves: no ticket stored after the snapshot can count in the old view.
func (n *Node) onSnapshotRequest(m wire.Message) {
	e := m.View.Epoch
	if e > n.fence && !n.cfg.Mutant.on(MutantNoFence) {
		n.fence = e
		n.persist(Write{Kind: WriteFence, Epoch: e})
	}
	// Asked for a view we lead but have not taken over yet: take it over,
	// so that the asker can finish once we are complete.
	if prev, ok := n.adopted[m.View.PrevEpoch]; ok {
		n.startSync(prev)
	}
	if n.answers == 0 {
		n.answers = uint64(n.cfg.Incarnation) << 32
	}
	n.answers++
	due := SnapshotDue{To: m.From, Epoch: e, Nonce: m.SnapshotID, Since: m.SnapshotSince,
		Answer: n.answers, Complete: n.complete}
	if n.cfg.SnapshotsFromStore {
		n.snapshots = append(n.snapshots, due)
		return
	}
	answer := SnapshotAnswer{Due: due, Floor: n.floor}
	send := func(m wire.Message) error { n.send(m); return nil }
	for _, name := range sortedKeys(n.names) {
		_ = answer.Name(name, n.names[name].highWater, n.memoryTable(n.names[name]), send)
	}
	n.send(answer.Done())
}

// memoryTable is a name's tickets and tombstones as the store would hand
// them to a snapshot: tickets first, then tombstones, each in request order.
func (n *Node) memoryTable(t *replicaName) []DurableTicket {
	var out []DurableTicket
	for _, req := range sortedReqs(t.recs) {
		r := t.recs[req]
		if r.entry.Ticket == 0 {
			continue // still choosing its first number: its doorway restarts anyway
		}
		out = append(out, DurableTicket{Entry: r.entry, Lifetime: r.deadline - n.now})
	}
	if n.cfg.Mutant.on(MutantMemoryTombs) {
		return out
	}
	for _, req := range t.tombs.sorted() {
		tb, _ := t.tombs.get(req)
		out = append(out, DurableTicket{Entry: wire.Entry{Req: req, State: wire.StateReleased},
			Lifetime: tb.until - n.now})
	}
	return out
}

// SnapshotAnswer writes one answer to a snapshot request: the one form of
// the handoff's stream, whether the table comes from the core's memory or
// from a store (Config.SnapshotsFromStore).
type SnapshotAnswer struct {
	Due SnapshotDue
	// Floor is the sender's Durable.Floor, from the same read as the
	// table: it goes with Done.
	Floor uint64
	count uint64
}

// Name sends one name's part of the table: its high-water mark, then each
// ticket, or tombstone (an entry in StateReleased), in the order given. It
// stops at the first error of send.
func (a *SnapshotAnswer) Name(name string, highWater uint64, tickets []DurableTicket, send func(wire.Message) error) error {
	msg := wire.Message{Kind: wire.KindSnapshot, To: a.Due.To, Name: name, SnapshotID: a.Due.Nonce,
		Answer: a.Due.Answer, View: wire.View{Epoch: a.Due.Epoch}}
	if highWater > 0 {
		m := msg
		m.HighWater = highWater
		if err := a.send(m, send); err != nil {
			return err
		}
	}
	for _, t := range tickets {
		m := msg
		m.Req, m.Lifetime = t.Entry.Req, uint64(max(t.Lifetime, 0))
		if t.Entry.State == wire.StateReleased {
			m.Kind = wire.KindSnapshotTomb
		} else {
			// A node's shared read ticket goes over as one.
			m.Ticket, m.Mode, m.Shared = t.Entry.Ticket, t.Entry.Mode, shared(t.Entry)
		}
		if err := a.send(m, send); err != nil {
			return err
		}
	}
	return nil
}

func (a *SnapshotAnswer) send(m wire.Message, send func(wire.Message) error) error {
	a.count++
	return send(m)
}

// Done is the answer's last message: how many entries it had, and the
// floor.
func (a *SnapshotAnswer) Done() wire.Message {
	return wire.Message{Kind: wire.KindSnapshotDone, To: a.Due.To, AnswerSize: a.count, HighWater: a.Floor,
		HandoffEpoch: a.Due.Complete, SnapshotID: a.Due.Nonce, Answer: a.Due.Answer,
		View: wire.View{Epoch: a.Due.Epoch}}
}

func (n *Node) onSnapshot(m wire.Message) {
	sync := n.syncs[m.View.Epoch]
	if sync == nil {
		return
	}
	p := sync.from[m.From]
	switch {
	case p == nil || p.done || m.SnapshotID < p.since || m.SnapshotID > sync.nonce:
		return // a whole one again, or an answer this pull does not accept
	case p.answer == 0:
		p.nonce, p.answer = m.SnapshotID, m.Answer
	case m.SnapshotID != p.nonce || m.Answer != p.answer:
		return // another answer than the one being gathered
	}
	p.heardAt = n.now
	switch m.Kind {
	case wire.KindSnapshot:
		p.entries[snapKey{m.Name, m.Req, false}] = m
	case wire.KindSnapshotTomb:
		p.entries[snapKey{m.Name, m.Req, true}] = m
	case wire.KindSnapshotDone:
		p.want, p.complete, p.floor, p.announced = m.AnswerSize, m.HandoffEpoch, m.HighWater, true
	}
	// Entries lost on the way leave the answer short for good: it goes
	// quiet, and requestSnapshots asks again.
	if p.announced && uint64(len(p.entries)) == p.want {
		p.done = true
		n.finishSync(sync)
	}
}

// finishSync merges once a quorum of the previous leaders answered in full
// and one of them was complete for the previous view.
func (n *Node) finishSync(sync *syncState) {
	v := sync.view
	done, complete := 0, false
	for _, l := range v.PrevLeaders {
		if p := sync.from[l]; p != nil && p.done {
			done++
			complete = complete || p.complete >= v.PrevEpoch
		}
	}
	need := len(v.PrevLeaders)/2 + 1
	if n.cfg.Mutant.on(MutantHandoffFromOne) {
		need = 1
	}
	if done < need || !complete {
		return
	}
	// The floor first: names the old leaders forgot keep their tokens
	// growing here too.
	// (One write of the highest: the map's order must not show.)
	var floor uint64
	for _, p := range sync.from {
		if p != nil && p.done {
			floor = max(floor, p.floor)
		}
	}
	n.raiseFloor(floor)
	// Tombstones first, from every answer: a release that one old leader
	// missed is known to another, and its ticket must not come back.
	for _, tombs := range []bool{true, false} {
		for _, l := range sortedNodes(sync.from) {
			p := sync.from[l]
			if p == nil || !p.done {
				continue
			}
			for _, k := range sortedSnapKeys(p.entries) {
				if k.tomb == tombs {
					n.mergeEntry(p.entries[k])
				}
			}
		}
	}
	n.stats.Handoffs++
	// Readers of the old view came and went without us: what we know of
	// them starts now.
	n.readerHorizon = n.now
	for _, t := range n.names {
		t.readerSeen = n.now
	}
	n.setComplete(v.Epoch)
}

func (n *Node) mergeEntry(m wire.Message) {
	t := n.replicaName(m.Name)
	if m.Kind == wire.KindSnapshotTomb {
		n.dropRecord(m.Name, t, m.Req, n.now+n.keepHandedOver(m.Lifetime))
		if tb, ok := t.tombs.get(m.Req); ok {
			tb.held = true // an old leader's: it may have been held there
			t.putTomb(m.Req, tb)
		}
		return
	}
	if m.Req == (wire.RequestID{}) {
		if m.HighWater > t.highWater {
			t.highWater, t.stored = m.HighWater, true
			n.persist(Write{Kind: WriteHighWater, Name: m.Name, Entry: wire.Entry{Ticket: m.HighWater}})
		}
		return
	}
	if _, gone := t.tombs.get(m.Req); gone {
		return
	}
	r := t.recs[m.Req]
	if r != nil && r.entry.Ticket > m.Ticket {
		return
	}
	if r != nil && r.entry.Ticket == m.Ticket {
		// The same ticket from another old leader: keep its longest life. A
		// renewal reached only a quorum of the old leaders, and this answer
		// may be the one that saw it.
		if dl := n.now + n.keepHandedOver(m.Lifetime); dl > r.deadline {
			r.deadline = dl
			n.persist(Write{Kind: WriteLifetime, Name: m.Name, Entry: r.entry, Lifetime: dl - n.now})
		}
		return
	}
	if r == nil {
		// Taken over: a copy a release missed may come this way too.
		r = &record{entry: wire.Entry{Req: m.Req, Mode: m.Mode}, since: n.now, restored: true}
		t.putRec(m.Req, r)
		n.restoredNames.add(m.Name)
	}
	r.entry.State, r.entry.Ticket = wire.StateTicket, m.Ticket
	r.entry.Active = r.entry.Active || mayBeActive(m.Mode) ||
		m.Shared && m.Mode.Shared() && !n.cfg.Mutant.on(MutantRestoreSharesAsReaders)
	r.deadline = max(r.deadline, n.now+n.keepHandedOver(m.Lifetime))
	n.schedule(t, r.deadline)
	t.highWater, t.stored = max(t.highWater, m.Ticket), true
	n.changedReq(t, m.Req, r.entry.Mode)
	n.persist(Write{Kind: WriteTicket, Name: m.Name, Entry: r.entry, Lifetime: r.deadline - n.now})
}

func sortedSnapKeys(m map[snapKey]wire.Message) []snapKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b snapKey) int {
		return cmp.Or(cmp.Compare(a.name, b.name), a.req.Compare(b.req), compareBool(a.tomb, b.tomb))
	})
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func (n *Node) syncTick() {
	for _, e := range sortedKeys(n.syncs) {
		if s := n.syncs[e]; s != nil {
			n.requestSnapshots(s)
		}
	}
}

// adoptView moves the node to a newer view: as a replica it forgets
// doorways of the old epoch and starts taking the table over; as a master
// it restarts every request that was not granted yet, under a fresh id at
// the new epoch, and sends what granted leases need to the new leaders.
func (n *Node) adoptView(v wire.View) {
	n.cfg.View = v.Leadership()
	n.lazy = nil // to the old view's leaders: as if lost
	clear(n.lazySpans)
	n.lazySpans = n.lazySpans[:0] // already out: they go as they are
	n.lead(v)
	for _, name := range sortedKeys(n.names) {
		t := n.names[name]
		for _, req := range sortedReqs(t.recs) {
			r := t.recs[req]
			if r.entry.State != wire.StateChoosing {
				continue
			}
			if r.entry.Ticket == 0 {
				delete(t.recs, req)
			} else {
				r.entry.State = wire.StateTicket // durable; its master releases it
			}
			n.changed(t)
		}
		t.watchers = nil
		t.compact()
	}
	n.startSync(v)
	for _, name := range sortedKeys(n.mnames) {
		clear(n.mnames[name].reports)
		n.mnames[name].merges = nil
	}
	for _, id := range sortedReqs(n.reqs) {
		r := n.reqs[id]
		if r == nil {
			continue
		}
		switch r.phase {
		case phaseQueued:
			if len(v.Leaders) > 0 {
				n.startEnter(r)
			}
		case phaseEnter, phaseAddTicket, phaseWait:
			n.restartDoorway(r)
		case phaseHeld:
			if r.renew != nil {
				r.renew.acks, r.renew.rejects = map[wire.NodeID]bool{}, map[wire.NodeID]bool{}
				n.sendRenew(r, nil)
			}
		case phaseReleasing:
			r.acks, r.sentAt = map[wire.NodeID]uint32{}, n.now
			n.sendPhase(r, nil)
		}
	}
}

// HandoffStatus describes this node's part in leader handoffs.
type HandoffStatus struct {
	// Complete is the epoch of the last view whose table this node took
	// over; Fence the epoch below which it refuses lock work.
	Complete, Fence uint64
	// Pending are the epochs of handoffs in progress.
	Pending []uint64
}

// Handoff reports the node's handoff state, for status output and tests.
func (n *Node) Handoff() HandoffStatus {
	return HandoffStatus{Complete: n.complete, Fence: n.fence, Pending: sortedKeys(n.syncs)}
}
