package core

import (
	"github.com/sluicehq/sluice/core/wire"
)

// Read-lease aggregation (Config.ShareLease). A web frontend takes a
// READ_ONLY try for every page view, on one name per site; running the
// whole bakery for each would put a quorum and an fsync on every page.
// Instead a node holds one cluster-wide READ_ONLY ticket per name, its
// share, on behalf of all its local readers, and grants and releases
// their leases itself while the share is held.
//
// Safety rests on one rule: a local reader holds only within the share's
// lease. Its lease ends no later than the share's (the master's own end,
// which the replicas outlive by their drift margin), and the share is let
// go only when no local reader holds on it. So every local reader's
// interval lies within a READ_ONLY ticket's, and the bakery keeps writers
// out of those as it does for any reader.
//
// What bounds a local grant is this node's clock: a local reader's lease
// ends, on this node's ticks, no later than the share's, which ends when
// its master's lease does; the leaders keep the share an eighth longer on
// their own ticks (keep). So a page view granted on the share is inside
// the share's life at the leaders as long as this node's ticks run no
// slower than 8/9 of theirs, and never stand still. The runtime counts
// ticks on a clock that runs on through a machine's suspend (the boot
// clock) and catches up before each turn of its loop, so a node that was
// stopped (SIGSTOP, a long pause, a suspended VM) first sees its share's
// time run out, then grants nothing on it. The simulator models clocks
// that drift within ±5 %, agents paused and resumed, machines suspended,
// and, as a broken variant it must catch, a clock that stops in suspend
// and never catches up. It does not model a clock that jumps forward
// (ticks only catch up: a jump ends leases early, which is safe) or one
// slower than the drift bound.
//
// Drains stay exact through yields: a leader that sees a writer's ENTER
// tells the master of every shared READ_ONLY ticket of the name (KindYield;
// again when it takes the writer's ticket, and in every renewal's ack).
// For a priority or exclusive writer (YieldDrain) the master refuses new
// local readers at once (tries with `draining`; the others take the whole
// bakery, behind the writer) and lets the share go when its holders are
// done; for a soft writer (YieldIdle) it lets the share go as soon as no
// local reader holds it, without lingering. The share's release says how
// long ago its last local reader left (Message.ReadersAgo), so a gentle
// drain's quiet period counts from there. A node that cannot be reached
// holds a writer only until its share expires. A reader on a plain ticket
// of its own is told too (a page view whose share could not be had at
// once): its master keeps the yield for its client (AskedToYield), and
// nothing else changes. A reader limit is exact
// only in the table, so limited readers bypass the share, and the table
// does not count a share's page views: a limited reader waits until no
// share is ahead of it (the policy's rule), and asks those ahead to go as
// soon as they are idle (askSharesAhead), as a soft writer's yield does.
// Shares taken after it are behind it in line, and its limit is about
// the readers ahead.
//
// The share's cluster request is always a try: it is granted or refused
// at once, and a local reader that may wait and found no share takes the
// whole bakery by itself.
//
// A node that stops gracefully calls StopSharing first: its idle shares go
// at once, the others as soon as their last holder leaves, and from then
// on its readers take the whole bakery by themselves. The runtime waits
// (bounded) until SharesOut is zero, so the leaders do not keep a stopped
// node's tickets, and a writer does not wait, until their lease runs out.

// A name may have two shares at a node: a READ_ONLY one for the readers of
// the name itself, and an INTENT_SHARED one for the readers of the names
// below it (a nested name's parents, Acquire.Parents). Each yields only to
// the tickets its mode conflicts with (wire.Conflicts): the INTENT_SHARED
// share of /site stays while a job writes /site/shop/cart, whose
// INTENT_EXCLUSIVE ticket on /site makes the READ_ONLY share of /site
// yield; a drain of /site makes both yield.

// share is one name's shared ticket of one mode at this node.
type share struct {
	// mode is READ_ONLY or INTENT_SHARED.
	mode wire.Mode
	// req is the cluster request: in its doorway or held; nil when the
	// node has no share of the name (one being let go is no longer here).
	req *request
	// holders are the local readers granted on req; waiting, those that
	// arrived while req was in its doorway, in arrival order.
	holders map[wire.RequestID]*request
	waiting []*request
	// idleAt is when the last holder left (the linger runs from there).
	idleAt int64
	// yield is the strongest yield asked of req.
	yield wire.Yield
}

// sharing reports whether a goes through the node's share of its name.
func (n *Node) sharing(a Acquire) bool {
	return n.cfg.ShareLease > 0 && !n.sharesStopped && a.Mode.Shared() && a.Limit == 0 && len(n.cfg.View.Leaders) > 0
}

// shareSlot is where a name's share of mode m (a shared mode) is kept.
func shareSlot(m wire.Mode) int {
	if m == wire.ModeIntentShared {
		return 1
	}
	return 0
}

// held reports whether sh can grant local readers now.
func (sh *share) held() bool {
	return sh.req != nil && sh.req.phase == phaseHeld && !sh.req.unlocking
}

// Draining reports whether a shared ticket of this node on name was asked
// to let a writer in (a drain waits, YieldDrain): the page views on it, of
// the name or below it, should end soon. It only reads.
func (n *Node) Draining(name string) bool {
	mn := n.mnames[name]
	if mn == nil {
		return false
	}
	for _, sh := range mn.shares {
		if sh != nil && sh.req != nil && sh.yield == wire.YieldDrain {
			return true
		}
	}
	return false
}

// Yielding reports whether a shared ticket of this node on name must go
// as soon as no local reader holds it: a writer of any kind waits for it
// (a yield was asked), or the node stops sharing. A client that keeps one
// reader's lease for many page views (the middleware's lent lease) gives
// it back once they are done, as a share does. It only reads.
func (n *Node) Yielding(name string) bool {
	mn := n.mnames[name]
	if mn == nil {
		return false
	}
	for _, sh := range mn.shares {
		if sh != nil && sh.req != nil && (sh.yield != wire.YieldNone || n.sharesStopped) {
			return true
		}
	}
	return false
}

// OnShare reports whether the local request of handle h holds or waits
// within its name's share (not alone in the bakery): Yielding speaks for
// it. It only reads.
func (n *Node) OnShare(h wire.RequestID) bool {
	r := n.handles[h]
	return r != nil && r.local != nil
}

// acquireLocal starts r, a request of a local client in a shared mode, on
// its name's share of that mode.
func (n *Node) acquireLocal(mn *masterName, r *request) {
	slot := shareSlot(r.a.Mode)
	if mn.shares[slot] == nil {
		mn.shares[slot] = &share{mode: r.a.Mode, holders: map[wire.RequestID]*request{}}
	}
	sh := mn.shares[slot]
	r.local = sh
	n.setPhase(r, phaseLocalWait)
	switch {
	case sh.yield == wire.YieldDrain && !n.cfg.Mutant.on(MutantAdmitAfterYield):
		n.endWaitingLocal(r, wire.CodeDraining)
	case sh.held():
		n.grantLocal(sh, r)
	case sh.req == nil && n.drainSeen(r.a.Name, slot):
		// A drain was seen a moment ago: the leaders would refuse the
		// share's try as they just did, a round per page view for all
		// the agents while the writer waits.
		n.endWaitingLocal(r, wire.CodeDraining)
	default:
		sh.waiting = append(sh.waiting, r)
		n.arm(r)
		if sh.req == nil {
			n.startShare(sh, r.a.Name)
		}
	}
}

// startShare asks the leaders for a share of name: a try, for as long as
// ShareLease.
func (n *Node) startShare(sh *share, name string) {
	r := &request{id: n.nextID(), a: Acquire{Name: name, Mode: sh.mode, Duration: n.cfg.ShareLease},
		start: n.now, dead: n.now + n.cfg.TryTicks, share: sh, ofShare: true}
	sh.req, sh.yield = r, wire.YieldNone
	n.reqs[r.id] = r
	n.masterName(name).count++
	n.startEnter(r)
	n.arm(r)
}

// grantLocal grants w on the held share sh: its lease ends within the
// share's.
func (n *Node) grantLocal(sh *share, w *request) {
	end := sh.req.leaseStart + sh.req.a.Duration
	w.unlockAt = min(n.now+w.a.Duration, end)
	w.endAt = min(w.unlockAt+w.a.Grace, end)
	w.leaseStart, w.ticket, w.unlocking = n.now, sh.req.ticket, false
	n.setPhase(w, phaseLocalHeld)
	sh.holders[w.id] = w
	n.arm(w)
	n.stats.Granted++
	n.emit(w, Event{Kind: EventGranted, Elapsed: n.now - w.start, Duration: w.a.Duration, TTL: w.unlockAt - w.start,
		Shared: true, Share: sh.req.id})
	n.keepShare(sh)
}

// refuseLocal ends w, a local reader not granted, with code c.
func (n *Node) refuseLocal(w *request, c wire.Code) {
	n.stats.Failed++
	n.event(w, EventFailed, c)
	n.dropLocal(w)
}

// dropLocal forgets w, a local reader, and lets its share go when that
// was the last thing keeping it.
func (n *Node) dropLocal(w *request) {
	sh := w.local
	if w.phase == phaseLocalHeld {
		delete(sh.holders, w.id)
		if len(sh.holders) == 0 {
			sh.idleAt = n.now
		}
	} else {
		for i, o := range sh.waiting {
			if o == w {
				sh.waiting = append(sh.waiting[:i], sh.waiting[i+1:]...)
				break
			}
		}
	}
	n.forget(w)
	n.keepShare(sh)
	if w.parents != nil {
		n.releaseParents(w)
	}
}

// bypass sends w, a local reader that may wait, through the whole bakery
// by itself: no share could be had at once.
func (n *Node) bypass(w *request) {
	n.stats.ShareBypasses++
	w.local = nil
	n.startEnter(w)
	n.arm(w)
}

// keepShare lets sh's cluster ticket go when nothing keeps it: no holder,
// and a yield asked for or the node stopping (StopSharing); it arms its
// timers (linger, renewal) otherwise.
func (n *Node) keepShare(sh *share) {
	r := sh.req
	if r == nil || r.phase != phaseHeld {
		return
	}
	if n.sharesStopped && (len(sh.holders) == 0 || n.cfg.Mutant.on(MutantStopWithHolders)) {
		n.releaseShare(sh)
		return
	}
	if sh.yield != wire.YieldNone && (len(sh.holders) == 0 || n.cfg.Mutant.on(MutantYieldWithHolders)) {
		n.releaseShare(sh)
		return
	}
	n.arm(r)
}

// releaseShare lets sh's cluster ticket go; the next local reader asks
// for a new one.
func (n *Node) releaseShare(sh *share) {
	r := sh.req
	if sh.yield == wire.YieldDrain {
		n.markDrained(r.a.Name, shareSlot(sh.mode))
	}
	sh.req, sh.yield = nil, wire.YieldNone
	r.share = nil
	r.sharedRelease, r.readersLeftAt = true, sh.idleAt
	if len(sh.holders) > 0 {
		r.readersLeftAt = n.now // MutantYieldWithHolders
	}
	if n.cfg.Mutant.on(MutantShareIdleFromGrant) {
		r.readersLeftAt = r.leaseStart
	}
	n.startRelease(r)
}

// onShareEvent is what happens to the cluster request r of a share,
// instead of an event to a client.
func (n *Node) onShareEvent(r *request, e Event) {
	sh := r.share
	switch e.Kind {
	case EventGranted:
		waiting := sh.waiting
		sh.waiting = nil
		sh.idleAt = n.now
		// A drain asked for while in the doorway: the readers waiting on
		// it arrived before it, but are not granted on a share that must
		// go (the first refusal lets it go: no holder).
		drain := sh.yield == wire.YieldDrain && !n.cfg.Mutant.on(MutantAdmitAfterYield)
		for _, w := range waiting {
			if drain || !sh.held() {
				// (Not held any more: only a core that lets a share go
				// with holders, MutantYieldWithHolders, gets here.)
				n.endWaitingLocal(w, wire.CodeDraining)
			} else {
				n.grantLocal(sh, w)
			}
		}
		n.keepShare(sh)
	case EventFailed:
		sh.req, r.share = nil, nil
		waiting := sh.waiting
		sh.waiting = nil
		for _, w := range waiting {
			n.endWaitingLocal(w, e.Code)
		}
	case EventRenewFailed:
		// A quorum of leaders no longer has the ticket (an operator, an
		// expiry while unreachable): its local readers lost it too.
		n.revoke(r)
	case EventUnlocked:
		// Force-unlocked, or its lease ran out unrenewed: every holder's
		// lease ended by then (they end within it) or ends now.
		sh.req, sh.yield, r.share = nil, wire.YieldNone, nil
		for _, id := range sortedReqs(sh.holders) {
			w := sh.holders[id]
			n.event(w, EventUnlocked, e.Code)
			n.dropLocal(w)
		}
		switch {
		case len(sh.waiting) == 0:
		case n.sharesStopped:
			// No new share: they go through the bakery, as readers
			// that come now do.
			waiting := sh.waiting
			sh.waiting = nil
			for _, w := range waiting {
				n.bypass(w)
			}
		default:
			n.startShare(sh, r.a.Name)
		}
	}
}

// endWaitingLocal ends w, a local reader whose share could not be had: a
// try is refused with c; one that may wait goes through the bakery by
// itself.
func (n *Node) endWaitingLocal(w *request, c wire.Code) {
	if w.a.Timeout == 0 || n.now > w.dead {
		n.refuseLocal(w, c)
		return
	}
	n.bypass(w)
}

// releaseLocal is Release of a local reader: nothing to tell the leaders.
func (n *Node) releaseLocal(w *request, id wire.RequestID) {
	n.events = append(n.events, Event{Kind: EventReleased, Req: id, Name: w.a.Name, Token: w.ticket,
		Held: w.phase == phaseLocalHeld})
	n.dropLocal(w)
}

// renewLocal is Renew of a local reader: its lease runs its duration more,
// within the share's.
func (n *Node) renewLocal(w *request) {
	sh := w.local
	end := sh.req.leaseStart + sh.req.a.Duration
	w.unlockAt = min(n.now+w.a.Duration, end)
	w.endAt = min(w.unlockAt+w.a.Grace, end)
	w.leaseStart, w.unlocking = n.now, false
	n.arm(w)
	n.emit(w, Event{Kind: EventRenewed, Duration: w.a.Duration, TTL: w.unlockAt - n.now, Shared: true, Share: sh.req.id})
	n.keepShare(sh)
}

// tickLocal times a local reader: its obtain deadline while waiting, its
// lease's end and grace while held.
func (n *Node) tickLocal(w *request) {
	switch {
	case w.phase == phaseLocalWait && n.now > w.dead:
		n.refuseLocal(w, wire.CodeTimedOut)
	case w.phase == phaseLocalHeld && n.now >= w.endAt:
		n.event(w, EventUnlocked, wire.CodeTimedOut)
		n.dropLocal(w)
	case w.phase == phaseLocalHeld && !w.unlocking && n.now >= w.unlockAt:
		w.unlocking = true
		n.event(w, EventUnlocking, wire.CodeNone)
	case w.phase == phaseLocalHeld && w.parentOf != nil:
		n.tickParent(w)
	}
}

// tickShare runs a held share's own timers: it is let go after lingering
// idle, and renewed while local readers hold it and less than half its
// lease is left.
func (n *Node) tickShare(r *request) {
	sh := r.share
	switch {
	case len(sh.holders) == 0 && n.now >= sh.idleAt+n.cfg.ShareLinger:
		n.releaseShare(sh)
	case len(sh.holders) > 0 && r.renew == nil && n.now >= n.shareRenewAt(r):
		r.renew = &renewal{start: n.now, acks: map[wire.NodeID]bool{}, rejects: map[wire.NodeID]bool{}}
		n.sendRenew(r, nil)
	}
}

// shareRenewAt is when a held share with holders is renewed: half its
// lease before its end.
func (n *Node) shareRenewAt(r *request) int64 {
	return r.leaseStart + r.a.Duration - r.a.Duration/2
}

// shareTimer is the first tick tickShare may act on r, a held share.
func (n *Node) shareTimer(r *request) int64 {
	sh := r.share
	switch {
	case len(sh.holders) == 0:
		return sh.idleAt + n.cfg.ShareLinger
	case r.renew == nil:
		return n.shareRenewAt(r)
	}
	return maxSpan
}

// onYield: a leader asks the share r to let a waiting writer in.
func (n *Node) onYield(r *request, y wire.Yield) {
	sh := r.share
	if sh == nil || y <= sh.yield {
		return // a plain reader's lease, or asked already
	}
	sh.yield = y
	n.keepShare(sh)
}

// Drain memos. A drain turns a site's page views away for as long as
// the writer waits and holds, and each agent's readers keep knocking
// (a frontend retries, or serves its next visitor). Without a memo,
// every knock after the share went would be a share's try refused at the
// leaders: a round to every leader per page view, on the cores the
// writer's own rounds need. So a node that saw a drain of a name (its
// share let go for a draining writer's yield, or its share's try refused
// with draining at ENTERING) refuses that name's shared tries itself for
// Config.DrainMemo ticks; the leaders that asked the share to yield, or
// refused its try, remember the node (replicaName.drainTold) and tell it
// when their table no longer refuses such a try (KindYield with
// YieldNone), so readers come back as soon as the drain ends. Refusing
// locally is always safe (a refused try holds nothing); a word lost,
// or leaders that never send it (an older release), costs readers the
// memo's ticks after the drain at most. Patient readers are not refused:
// they go through the bakery by themselves, as when a share's try fails.

// maxDrained bounds the names a node keeps drain memos of; past it, no
// new memo is kept (its readers knock at the leaders, as without one).
const maxDrained = 4096

// markDrained starts a drain memo of name's share slot.
func (n *Node) markDrained(name string, slot int) {
	if n.drained == nil {
		n.drained = map[string][2]int64{}
	}
	if _, ok := n.drained[name]; !ok && len(n.drained) >= maxDrained {
		for k, d := range n.drained {
			if d[0] <= n.now && d[1] <= n.now {
				delete(n.drained, k)
			}
		}
		if len(n.drained) >= maxDrained {
			return
		}
	}
	d := n.drained[name]
	d[slot] = n.now + n.cfg.DrainMemo
	n.drained[name] = d
}

// drainSeen reports whether name's share slot has a drain memo running.
func (n *Node) drainSeen(name string, slot int) bool {
	d, ok := n.drained[name]
	if !ok {
		return false
	}
	if n.cfg.Mutant.on(MutantStuckDrainMemo) {
		return d[slot] != 0
	}
	if d[0] <= n.now && d[1] <= n.now {
		delete(n.drained, name)
		return false
	}
	return d[slot] > n.now
}

// drainOver ends name's drain memo of mode's slot: a leader that refused
// its try, or asked its share to yield, no longer would.
func (n *Node) drainOver(name string, mode wire.Mode) {
	d, ok := n.drained[name]
	if !ok || !mode.Shared() || n.cfg.Mutant.on(MutantStuckDrainMemo) {
		return
	}
	d[shareSlot(mode)] = 0
	if d[0] == 0 && d[1] == 0 {
		delete(n.drained, name)
		return
	}
	n.drained[name] = d
}

// askSharesAhead asks the nodes of the shared read tickets ahead of r, a
// waiting READ_ONLY request with a reader limit, to let them go once idle
// (YieldIdle): the policy counts such a ticket as full, for its page views
// are not in the table, so r goes in when none is ahead. The request's own
// master asks, once per share: the leaders do not know the limit. A share
// of this node is told at once.
func (n *Node) askSharesAhead(r *request, ticketed []wire.Entry) {
	if r.a.Mode != wire.ModeReadOnly || r.a.Limit == 0 || r.phase != phaseWait || n.cfg.Mutant.on(MutantLimitIgnoresShares) {
		return
	}
	for _, e := range ticketed {
		if e.Mode != wire.ModeReadOnly || !e.Active || !Earlier(e.Ticket, e.Req, r.ticket, r.id) || r.sharesAsked[e.Req] {
			continue
		}
		if r.sharesAsked == nil {
			r.sharesAsked = map[wire.RequestID]bool{}
		}
		r.sharesAsked[e.Req] = true
		if e.Req.Node == n.cfg.ID {
			if sh := n.reqs[e.Req]; sh != nil && sh.share != nil {
				n.onYield(sh, wire.YieldIdle)
			}
			continue
		}
		n.send(wire.Message{Kind: wire.KindYield, To: e.Req.Node, Name: r.a.Name, Req: e.Req, Ticket: e.Ticket, Yield: wire.YieldIdle})
	}
}

// StopSharing is the start of a graceful stop: each share with no local
// reader is let go now, each other one when its last reader leaves (it
// keeps its ticket until then: the readers hold within it), and readers
// that come from now on take the whole bakery by themselves. A share in
// its doorway grants the readers waiting on it, and goes with them.
func (n *Node) StopSharing() {
	if n.sharesStopped {
		return
	}
	n.sharesStopped = true
	for _, name := range sortedKeys(n.mnames) {
		for _, sh := range n.mnames[name].shares {
			if sh != nil {
				n.keepShare(sh)
			}
		}
	}
}

// SharesOut counts the shares the leaders may still hold a ticket of: held,
// in their doorway, or let go but not yet dropped by every leader (by its
// confirmation, or by the time it would forget the ticket by itself).
// After StopSharing, zero means a writer waits for none of this node's
// shares. It only reads.
func (n *Node) SharesOut() int {
	out := 0
	for _, r := range n.reqs {
		if r.ofShare {
			out++
		}
	}
	return out
}
