package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore/api"
)

// MemberList is what `sluice members` shows.
type MemberList = api.MemberList

// Members lists the voters and every other node this node knows of, as
// the election sees them; mesh, when set, adds peer ids, names, addresses
// and connections.
func (n *Node) Members(ctx context.Context, mesh func() []api.MeshPeer) (MemberList, error) {
	var out MemberList
	err := n.do(ctx, func() {
		es := n.elect.Status()
		out = MemberList{Node: uint64(n.cfg.Self), Cluster: fmt.Sprintf("%016x", es.Cluster), Epoch: es.View.Epoch,
			Members: []api.MemberInfo{}}
		for _, m := range es.Members {
			info := api.MemberInfo{Node: uint64(m.Node), Voter: m.Voter, Leader: m.Leader, Reachable: m.Alive, Off: m.Off}
			if id, err := election.ParseID(m.ID); err == nil {
				info.Name, info.Address = id.Name, id.Address
			}
			out.Members = append(out.Members, info)
		}
	})
	if err != nil || mesh == nil {
		return out, err
	}
	for _, p := range mesh() {
		i := slices.IndexFunc(out.Members, func(m api.MemberInfo) bool { return m.Node == p.Node })
		if i < 0 {
			out.Members = append(out.Members, api.MemberInfo{Node: p.Node})
			i = len(out.Members) - 1
		}
		m := &out.Members[i]
		m.Peer = p.Peer
		if m.Name == "" {
			m.Name = p.Name
		}
		if m.Address == "" && len(p.Addrs) > 0 {
			m.Address = p.Addrs[0]
		}
		if uint64(n.cfg.Self) != p.Node {
			m.Connected = p.Connected
		}
	}
	slices.SortFunc(out.Members, func(a, b api.MemberInfo) int {
		switch {
		case a.Voter != b.Voter:
			if a.Voter {
				return -1
			}
			return 1
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out, nil
}

// ChangeMembers adds or removes one member, and returns once a valid view
// carries the change (its epoch), or the change failed. Nothing changes
// on failure; a second change while one runs here fails at once with
// election.ErrBusy.
func (n *Node) ChangeMembers(ctx context.Context, c election.Change) (uint64, error) {
	if err := n.run(ctx, func() error {
		if n.failed != nil {
			return n.failed
		}
		select {
		case <-n.changed: // a result nobody waited for
		default:
		}
		if err := n.elect.ChangeMembers(c); err != nil {
			return err
		}
		n.log.Warn("membership change", "change", c.String())
		return nil
	}); err != nil {
		return 0, err
	}
	select {
	case r := <-n.changed:
		if r.Err != nil {
			return 0, r.Err
		}
		n.log.Warn("membership changed", "change", c.String(), "epoch", r.Epoch)
		return r.Epoch, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: the change may still commit; check `sluice members`", ctx.Err())
	case <-n.done:
		return 0, ErrStopped
	}
}

// VouchStore is the operator's word that this node's store is its own
// (see election.VouchStore): a member that cannot check in because too
// few other members are up checks in with a majority of all members
// counting itself. It answers whether the node checked in at once.
func (n *Node) VouchStore(ctx context.Context) (api.StoreVouched, error) {
	out := api.StoreVouched{Node: uint64(n.cfg.Self)}
	err := n.run(ctx, func() error {
		if n.failed != nil {
			return n.failed
		}
		if err := n.elect.VouchStore(); err != nil {
			return err
		}
		st := n.elect.Status()
		out.CheckedIn = st.CheckedIn
		if !st.CheckedIn {
			out.Reason = st.Reason
		}
		n.log.Warn("the operator vouched for this node's store", "checked_in", st.CheckedIn)
		return nil
	})
	return out, err
}

// ParseNodeRef reads a node as an operator names it: a peer id as `sluice
// id` prints it, or a node number as `sluice members` shows it.
func ParseNodeRef(s string, peerNode func(string) (wire.NodeID, error)) (wire.NodeID, error) {
	if x, err := strconv.ParseUint(s, 10, 64); err == nil {
		if x == 0 {
			return 0, fmt.Errorf("%w: node 0", election.ErrBadChange)
		}
		return wire.NodeID(x), nil
	}
	id, err := peerNode(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is neither a peer id nor a node number: %w", election.ErrBadChange, s, err)
	}
	return id, nil
}

// changeStatus maps a membership change's failure to the API's status.
func changeStatus(err error) (int, string) {
	switch {
	case errors.Is(err, election.ErrBadChange):
		return 400, api.CodeBadRequest
	case errors.Is(err, election.ErrBusy), errors.Is(err, election.ErrChangeLost), errors.Is(err, election.ErrCheckedIn):
		return 409, api.CodeConflict
	case errors.Is(err, election.ErrNotReady), errors.Is(err, ErrStale), errors.Is(err, ErrStoreFailed):
		return 503, "not_ready"
	case errors.Is(err, context.DeadlineExceeded):
		return 504, api.CodeTimedOutChange
	}
	return 500, api.CodeUnavailable
}
