package core

import (
	"fmt"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// A lease outlives its node's restart: the leaders keep an earlier life's
// tickets (onRestarted) until they are released or expire, and the
// lease's client, which did not restart, renews it by id through the new
// life. Adopt makes such a ticket a held request of this life again;
// renewStep lets the leaders extend it.

// Adopt takes over, for this life, the lease id that an earlier life of
// this node was granted on a.Name, and renews it at once: EventRenewed
// (counted from now) says a quorum of the leaders still keeps its ticket,
// and the request is held as if this life had been granted it;
// EventRenewFailed with CodeLost says they do not (Disown it then). a
// gives the name, mode, duration and grace (Timeout and Quiet are not
// used); ticket is the fencing token the leaders' tables show, which
// events carry (0: unknown). Nothing is granted: a renewal only extends a
// ticket the leaders keep, and is refused for one they dropped.
func (n *Node) Adopt(id wire.RequestID, a Acquire, ticket uint64) error {
	if err := n.validate(a); err != nil {
		return err
	}
	switch {
	case id.Node != n.cfg.ID || id.Incarnation() == 0 || id.Incarnation() >= n.cfg.Incarnation:
		return fmt.Errorf("%w: %s is not a request of an earlier life of node %d", codes.ErrInvalid, id, n.cfg.ID)
	case n.handles[id] != nil:
		return fmt.Errorf("%w: %s is this life's already", codes.ErrInvalid, id)
	case n.reqs[id] != nil:
		return fmt.Errorf("%w: %s is being released", codes.ErrUnknownLease, id)
	case len(n.cfg.View.Leaders) == 0:
		return fmt.Errorf("%w: no leaders to ask", codes.ErrNotReady)
	}
	mn := n.masterName(a.Name)
	if mn.count >= n.cfg.MaxWaiters {
		if mn.count == 0 {
			delete(n.mnames, a.Name)
		}
		return fmt.Errorf("%w: %d requests on %q", codes.ErrOverflow, mn.count, a.Name)
	}
	delete(n.former, id)
	r := &request{id: id, handle: id, a: a, start: n.now, dead: n.now}
	r.ticket = ticket
	n.reqs[id], n.handles[id] = r, r
	mn.count++
	n.setPhase(r, phaseHeld)
	r.leaseStart = n.now
	r.renew = &renewal{start: n.now, acks: map[wire.NodeID]bool{}, rejects: map[wire.NodeID]bool{}}
	n.sendRenew(r, nil)
	return nil
}

// Disown forgets id, a lease Adopt took over whose renewal the leaders
// refused: no quorum of them keeps its ticket on its name, so nobody
// holds it, and there is nothing to release (a copy a leader may still
// keep ends with its lifetime). A request in any other state is left
// alone: Release it.
func (n *Node) Disown(id wire.RequestID) {
	if r := n.handles[id]; r != nil && r.phase == phaseHeld && r.renew == nil && id.Incarnation() < n.cfg.Incarnation {
		n.forget(r)
	}
}

// Former is the name of id, a ticket of an earlier life of this node that
// a leader said it keeps (KindFormer), if one did.
func (n *Node) Former(id wire.RequestID) (string, bool) {
	f, ok := n.former[id]
	return f.name, ok
}

// renewStep is a leader's handling of KindRenew. A renewal of an earlier
// life's request comes from its node's new life, which adopted the lease:
// it extends the ticket if this leader keeps it, and is refused
// otherwise, as any renewal is; other messages of earlier lives stay
// refused (replicaStep).
func (n *Node) renewStep(m wire.Message) {
	if m.From == m.Req.Node && m.Req.Incarnation() < n.minInc[m.Req.Node] {
		n.onRenew(m)
		return
	}
	n.replicaStep(m)
}
