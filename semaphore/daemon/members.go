package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Members lists the voters and every other node this node knows of, as
// the election sees them; mesh, when set, adds peer ids, names, addresses
// and connections.
func (n *Node) Members(ctx context.Context, mesh func() []api.MeshPeer) (api.MemberList, error) {
	var out api.MemberList
	err := n.do(ctx, func() {
		es := n.elect.Status()
		out = api.MemberList{Node: nodeID(n.cfg.Self), Cluster: fmt.Sprintf("%016x", es.Cluster), Epoch: es.View.Epoch,
			Members: []api.MemberInfo{}}
		if es.View.Epoch > 0 {
			out.Level = int(es.View.Codec())
		}
		for _, m := range es.Members {
			info := api.MemberInfo{Node: nodeID(m.Node), Voter: m.Voter, Leader: m.Leader, Reachable: m.Alive, Off: m.Off, Offers: int(m.Codec)}
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
		if nodeID(n.cfg.Self) != p.Node {
			m.Connected = p.Connected
		}
		m.Version, m.Codec = p.Version, p.Codec
	}
	for _, m := range out.Members {
		if m.Voter {
			// A voter that announced no codec runs the previous release.
			c := cmp.Or(m.Codec, int(wire.MinVersion))
			if out.Codec == 0 || c < out.Codec {
				out.Codec = c
			}
		}
	}
	slices.SortFunc(out.Members, func(a, b api.MemberInfo) int {
		if a.Voter != b.Voter {
			if a.Voter {
				return -1
			}
			return 1
		}
		return cmp.Compare(nodeNumber(a.Node), nodeNumber(b.Node))
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
	out := api.StoreVouched{Node: nodeID(n.cfg.Self)}
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

// changeErr files the failure of a membership change (or of a vouch)
// under its code in the table: a change that must not be made is a bad
// request, one that lost to another (or a vouch with nothing to vouch
// for) a conflict, one without a quorum not ready, one out of time a
// change that may still commit. The runtime's own failures (a stale or
// failed store) are not_ready already.
func changeErr(err error) error {
	switch {
	case errors.Is(err, election.ErrBadChange):
		return codes.With(codes.ErrBadRequest, err)
	case errors.Is(err, election.ErrBusy), errors.Is(err, election.ErrChangeLost), errors.Is(err, election.ErrCheckedIn):
		return codes.With(codes.ErrConflict, err)
	case errors.Is(err, election.ErrNotReady):
		return codes.With(codes.ErrNotReady, err)
	case errors.Is(err, context.DeadlineExceeded):
		return codes.With(codes.ErrChangeTimedOut, err)
	}
	return err
}
