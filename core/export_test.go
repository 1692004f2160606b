package core

import (
	"fmt"

	"github.com/sluicehq/sluice/core/wire"
)

// NestingLost describes the first of n's requests that no longer goes
// with its parent tickets, or "": a parent's ticket that belongs to no
// request and is not being let go (it would hold its name, for no one,
// until its lease ends), or a request whose doorway restarted past its
// parents holding fewer parent tickets than it has parents (it could be
// granted beside a holder of a parent that conflicts with it). A doorway
// restart (restartDoorway) is where both happened; the schedule explorer
// asks after every step.
func (n *Node) NestingLost() string {
	found := false
	for _, r := range n.reqs {
		found = found || orphanParent(r) || restartedWithoutParents(r)
	}
	if !found {
		return "" // asked after every step: sorted only for a report
	}
	for _, id := range sortedReqs(n.reqs) {
		switch r := n.reqs[id]; {
		case orphanParent(r):
			return fmt.Sprintf("%s, an %s ticket of %s, belongs to no request", r.id, r.a.Mode, r.a.Name)
		case restartedWithoutParents(r):
			return fmt.Sprintf("%s, the restarted doorway of %s on %s, holds %d of its %d parents", r.id, r.handle,
				r.a.Name, len(r.parents), len(r.a.Parents))
		}
	}
	return ""
}

func orphanParent(r *request) bool {
	return r.phase != phaseReleasing && r.a.Mode.Intent() && r.share == nil && r.parentOf == nil
}

func restartedWithoutParents(r *request) bool {
	return r.phase != phaseReleasing && r.phase != phaseParents && r.handle != (wire.RequestID{}) && r.id != r.handle &&
		len(r.parents) < len(r.a.Parents)
}

// AssumedActive lists the soft writers' tickets of name that n, a
// leader, read back from its store and takes as active on that ground
// alone (mayBeActive): no mark of their master has come since.
func (n *Node) AssumedActive(name string) []wire.RequestID {
	t := n.names[name]
	if t == nil {
		return nil
	}
	var out []wire.RequestID
	for _, req := range sortedReqs(t.recs) {
		if r := t.recs[req]; r.restored && r.markRound == 0 && r.entry.Active && mayBeActive(r.entry.Mode) {
			out = append(out, req)
		}
	}
	return out
}

// SoftWaiting reports whether n's request id waits as a soft writer that
// is neither marked active nor marking itself so: a leader's active mark
// of it is stale.
func (n *Node) SoftWaiting(id wire.RequestID) bool {
	r := n.reqs[id]
	return r != nil && r.phase == phaseWait && mayBeActive(r.a.Mode) && !r.activating && !r.activated
}
