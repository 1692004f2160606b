package core

import (
	"github.com/sluicehq/sluice/core/wire"
)

// Nested names (Acquire.Parents). A name like /site/shop/cart has parents,
// /site and /site/shop, and its holder must meet the holders of its
// parents and of its descendants by the modes' rules: a drain of /site
// keeps out a reader of /site/shop/cart, a writer of /site/shop/cart does
// not touch a reader of /site/blog. This is multiple granularity locking
// on the bakery as it is: the request holds a ticket of its own on each
// parent, in the intent mode of its mode (Mode.IntentOf: INTENT_SHARED
// under a reader, INTENT_EXCLUSIVE under anything else), and the policy
// decides each name alone (wire.Conflicts is its table). Two holders
// whose names nest share the outer one's name, where one holds an intent
// and the other its own mode, and the policy keeps conflicting ones apart
// there; two holders of the same name meet on it as before.
//
// The parents are taken one by one, outermost first, each only once the
// one before it is held, and the name itself last: byte order, as the
// agent takes every name of one acquire. Whoever asks, a request waits on
// a name only while it holds names below it in that order, so waits never
// close a cycle across names; within a name the policy's argument holds
// (every wait is on an earlier ticket or an active soft writer).
//
// A parent's ticket is the request's own, with the request's lease: it is
// renewed with it, released with it, and while the request waits for
// later names the node renews held parents by itself (half their lease
// before the end), so a long wait does not outlast them. Each grant and
// renewal tells the client the shortest time to live of all its tickets,
// and a parent that ends (expired, force-unlocked, its renewal refused)
// ends the request: lost. A reader's parents go through the node's
// INTENT_SHARED shares (share.go), so a page view on a three-level name
// whose shares are held costs no message.
//
// What the simulator does not model here: names whose parents differ
// between agents (the agent derives them with one function,
// semaphore.NamePath, and refuses nested acquires until every voter reads
// the intent modes).

// nestedStart begins r, a request with parents: its first parent now,
// the others as each is granted (nextParent).
func (n *Node) nestedStart(r *request) {
	n.setPhase(r, phaseParents)
	r.parents = make([]*request, 0, len(r.a.Parents))
	n.nextParent(r)
}

// nextParent asks for r's next parent, or for r itself once every parent
// is held.
func (n *Node) nextParent(r *request) {
	i := len(r.parents)
	if n.cfg.Mutant.on(MutantNoParentTickets) {
		i = len(r.a.Parents)
	}
	if i == len(r.a.Parents) {
		n.startOwn(r)
		return
	}
	if n.cfg.Mutant.on(MutantParentsInnermostFirst) {
		i = len(r.a.Parents) - 1 - i
	}
	name := r.a.Parents[i]
	a := Acquire{Name: name, Mode: r.a.Mode.IntentOf(), Duration: r.a.Duration, Grace: r.a.Grace}
	if r.a.ParentModes != nil {
		a.Mode, a.Quiet = r.a.ParentModes[i], r.a.Quiet
		if a.Mode == wire.ModeReadOnly {
			a.Limit = r.a.Limit
		}
	}
	if r.a.Timeout > 0 {
		// A wait that ran out answers as a try then: at once.
		a.Timeout = max(r.dead-n.now, 0)
	}
	mn := n.masterName(name)
	if mn.count >= n.cfg.MaxWaiters {
		if mn.count == 0 {
			delete(n.mnames, name)
		}
		n.fail(r, wire.CodeOverflow)
		return
	}
	p := &request{id: n.nextID(), a: a, start: n.now, dead: min(r.dead, n.now+max(a.Timeout, n.cfg.TryTicks)), parentOf: r}
	n.reqs[p.id] = p
	mn.count++
	r.parents = append(r.parents, p)
	switch {
	case n.sharing(a):
		n.acquireLocal(mn, p)
	case len(n.cfg.View.Leaders) > 0:
		n.startEnter(p)
	default:
		n.setPhase(p, phaseQueued)
	}
	n.arm(p)
}

// startOwn begins r's own ticket: through its name's share, or the whole
// bakery.
func (n *Node) startOwn(r *request) {
	switch {
	case n.sharing(r.a):
		n.acquireLocal(n.masterName(r.a.Name), r)
	case len(n.cfg.View.Leaders) > 0:
		n.startEnter(r)
	default:
		n.setPhase(r, phaseQueued)
	}
	n.arm(r)
}

// onParentEvent is what happens to p, a parent's ticket, instead of an
// event to a client.
func (n *Node) onParentEvent(p *request, e Event) {
	r := p.parentOf
	switch e.Kind {
	case EventGranted:
		if r.phase == phaseParents && r.parents[len(r.parents)-1] == p {
			n.nextParent(r)
		}
	case EventFailed:
		// Not granted: the request fails as the parent did (p is on its
		// way out already).
		n.detachParent(p)
		n.revokeAs(r, e.Code)
	case EventUnlocked:
		// Expired or force-released: whoever held below it lost it (p
		// is on its way out already).
		n.detachParent(p)
		n.revokeAs(r, wire.CodeLost)
	case EventRenewFailed:
		// The leaders no longer have it: let it go, and the request.
		n.detachParent(p)
		n.startRelease(p)
		n.revokeAs(r, wire.CodeLost)
	}
}

// revokeAs ends r as revoke does, a request not granted failing with c.
func (n *Node) revokeAs(r *request, c wire.Code) {
	switch r.phase {
	case phaseLocalHeld, phaseLocalWait, phaseReleasing, phaseHeld:
		n.revoke(r)
	default:
		n.fail(r, c)
	}
}

// detachParent takes p out of its request's parents: its events go
// nowhere from now on.
func (n *Node) detachParent(p *request) {
	r := p.parentOf
	p.parentOf = nil
	for i, q := range r.parents {
		if q == p {
			r.parents = append(r.parents[:i:i], r.parents[i+1:]...)
			break
		}
	}
}

// releaseParents lets r's parents go, innermost first: r ended, or is on
// its way out.
func (n *Node) releaseParents(r *request) {
	ps := r.parents
	r.parents = nil
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		p.parentOf = nil
		switch p.phase {
		case phaseLocalWait, phaseLocalHeld:
			n.dropLocal(p)
		case phaseReleasing:
		default:
			n.startRelease(p)
		}
	}
}

// renewParents renews r's held parents with r: from the same tick, so
// they end together.
func (n *Node) renewParents(r *request) {
	for _, p := range r.parents {
		n.renewParent(p)
	}
}

// renewParent renews p, a held parent, unless a renewal of it is under
// way.
func (n *Node) renewParent(p *request) {
	switch {
	case p.phase == phaseLocalHeld && p.local.held():
		n.renewLocal(p)
	case p.phase == phaseHeld && p.renew == nil:
		p.renew = &renewal{start: n.now, acks: map[wire.NodeID]bool{}, rejects: map[wire.NodeID]bool{}}
		n.sendRenew(p, nil)
	}
}

// parentsEnd is the first tick at which one of r's parents' leases ends,
// as far as r's client may count on (maxSpan with none).
func (n *Node) parentsEnd(r *request) int64 {
	end := int64(maxSpan) * 4
	for _, p := range r.parents {
		switch p.phase {
		case phaseLocalHeld:
			end = min(end, p.unlockAt)
		case phaseHeld:
			end = min(end, p.leaseStart+p.a.Duration)
		default:
			end = min(end, n.now) // not held: nothing to count on
		}
	}
	return end
}

// parentRenewAt is when p, a held parent of a request that still waits for
// later names, is renewed by the node: half its lease before the end. A
// parent of a granted request is renewed with it, by its client (maxSpan).
func (n *Node) parentRenewAt(p *request) int64 {
	r := p.parentOf
	if r == nil || r.phase == phaseHeld || r.phase == phaseLocalHeld || r.phase == phaseReleasing ||
		p.phase == phaseHeld && p.renew != nil {
		return maxSpan * 4
	}
	return p.leaseStart + p.a.Duration - p.a.Duration/2
}

// tickParent renews p, a held parent, while its request waits.
func (n *Node) tickParent(p *request) {
	if p.parentOf != nil && n.now >= n.parentRenewAt(p) {
		n.renewParent(p)
	}
}
