package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// nodeID spells a node id as the API does: a decimal string, which
// JavaScript clients read without losing digits.
func nodeID(id wire.NodeID) string { return strconv.FormatUint(uint64(id), 10) }

// nodeNumber reads a node id as nodeID spells it (0 for anything else),
// to order node ids as numbers.
func nodeNumber(s string) uint64 {
	x, _ := strconv.ParseUint(s, 10, 64)
	return x
}

func nodeIDs(in []wire.NodeID) []string {
	out := make([]string, len(in))
	for i, id := range in {
		out[i] = nodeID(id)
	}
	return out
}

// coreStats is the core's counters as the API shows them.
func coreStats(s core.Stats) api.CoreStats {
	return api.CoreStats{BadMessages: s.BadMessages, WrongTarget: s.WrongTarget, StaleEpoch: s.StaleEpoch,
		StaleIncarnation: s.StaleIncarnation, StaleReplies: s.StaleReplies, Granted: s.Granted, Failed: s.Failed,
		Expired: s.Expired, Retransmits: s.Retransmits, DoorwayRestarts: s.DoorwayRestarts, TicketRaises: s.TicketRaises,
		OneRoundDoorways: s.OneRoundDoorways, LongDoorways: s.LongDoorways, ShareBypasses: s.ShareBypasses,
		NotServing: s.NotServing, Handoffs: s.Handoffs, RestoredDropped: s.RestoredDropped}
}

// Status reports readiness: LOCK_READY when the election knows a valid
// view with a quorum of its leaders alive and, on a leader, the lock table
// is taken over and served.
func (n *Node) Status(ctx context.Context) (api.Status, error) {
	var s api.Status
	err := n.do(ctx, func() { s = n.status() })
	return s, err
}

// status is Status, on the loop.
func (n *Node) status() api.Status {
	es := n.elect.Status()
	v := n.core.View()
	h := n.core.Handoff()
	s := api.Status{Node: nodeID(n.cfg.Self), Name: n.cfg.ID.Name, Ready: es.Ready, Reason: es.Reason, Coordinator: es.Coordinator,
		View: api.ViewStatus{Epoch: v.Epoch, Leaders: nodeIDs(v.Leaders), PrevEpoch: v.PrevEpoch,
			PrevLeaders: nodeIDs(v.PrevLeaders)},
		Leader:      v.IsLeader(n.cfg.Self),
		Serving:     n.core.Serving(),
		Incarnation: n.cfg.State.Incarnation,
		Cluster:     fmt.Sprintf("%016x", es.Cluster), CheckedIn: es.CheckedIn,
		Handoff: api.HandoffInfo{Complete: h.Complete, Fence: h.Fence, Pending: h.Pending},
		Leases:  len(n.leases), Stats: n.stats, Core: coreStats(n.core.Stats()), Members: []api.Member{}}
	for _, m := range es.Members {
		s.Members = append(s.Members, api.Member{Node: nodeID(m.Node), ID: m.ID, Name: memberName(m.ID), Alive: m.Alive,
			Leader: m.Leader, Off: m.Off, Voter: m.Voter})
	}
	s.Ready, s.Reason = n.readiness()
	s.State = "NO_LOCK"
	if s.Ready {
		s.State = "LOCK_READY"
	}
	return s
}

// heldShared is the phase of a request granted on its node's shared read
// ticket (core.RequestStatus.Phase).
const heldShared = "held-shared"

// memberName is the name in a member's election id ("" when the id is
// not known yet or does not parse).
func memberName(id string) string {
	if parsed, err := election.ParseID(id); err == nil {
		return parsed.Name
	}
	return ""
}

// nodeNames maps the members this node knows to their names; on the loop.
func (n *Node) nodeNames() map[string]string {
	names := map[string]string{}
	for _, m := range n.elect.Status().Members {
		if name := memberName(m.ID); name != "" {
			names[nodeID(m.Node)] = name
		}
	}
	return names
}

// nameNodes fills in the node names of t's entries that names knows.
func nameNodes(t *api.Table, names map[string]string) {
	t.NodeName = cmp.Or(t.NodeName, names[t.Node])
	for i := range t.Locks {
		for j := range t.Locks[i].Entries {
			e := &t.Locks[i].Entries[j]
			e.NodeName = cmp.Or(e.NodeName, names[e.Node])
		}
	}
}

// statusWait is a WaitStatus call waiting on the loop.
type statusWait struct {
	cond func(api.Status) bool
	met  chan api.Status // room for one: the loop never blocks
}

// WaitStatus waits until cond holds for the node's status and returns that
// status; when ctx ends first, the last status with ctx's error. cond is
// checked after every turn of the loop, the only times the status
// changes, so a caller waits for the change itself rather than polling.
// It runs on the loop: it must be quick, must not call the node, and must
// not keep or change the status it is given.
func (n *Node) WaitStatus(ctx context.Context, cond func(api.Status) bool) (api.Status, error) {
	w := &statusWait{cond: cond, met: make(chan api.Status, 1)}
	if err := n.do(ctx, func() {
		if s := n.status(); cond(s) {
			w.met <- s
			return
		}
		n.statusWaits = append(n.statusWaits, w)
	}); err != nil {
		return api.Status{}, err
	}
	select {
	case s := <-w.met:
		return s, nil
	case <-n.done:
		return api.Status{}, ErrStopped
	case <-ctx.Done():
	}
	var last api.Status
	err := n.do(context.WithoutCancel(ctx), func() {
		n.statusWaits = slices.DeleteFunc(n.statusWaits, func(x *statusWait) bool { return x == w })
		last = n.status()
	})
	select {
	case s := <-w.met: // met before the wait was dropped
		return s, nil
	default:
	}
	if err != nil {
		return api.Status{}, err
	}
	return last, ctx.Err()
}

// answerStatusWaits checks the waiting WaitStatus calls; called on the loop
// after every turn.
func (n *Node) answerStatusWaits() {
	if len(n.statusWaits) == 0 {
		return
	}
	s := n.status()
	n.statusWaits = slices.DeleteFunc(n.statusWaits, func(w *statusWait) bool {
		if !w.cond(s) {
			return false
		}
		w.met <- s
		return true
	})
}

// readiness says whether the node can decide lock requests now (LOCK_READY)
// and, when not, why. Called on the loop.
func (n *Node) readiness() (bool, string) {
	if n.failed != nil {
		return false, n.failed.Error()
	}
	ready, why := n.elect.LockReady()
	if v := n.core.View(); ready && v.IsLeader(n.cfg.Self) && !n.core.Serving() {
		return false, fmt.Sprintf("taking the lock table of epoch %d over", v.PrevEpoch)
	}
	if c := n.elect.Codec(); ready && n.cfg.NestedNames && c < uint64(wire.Version) {
		// Its leases would all be refused: say why, as /readyz does.
		return false, fmt.Sprintf("nested names need cluster codec %d, and the cluster is at %d "+
			"(`sluice members` shows which agents hold it)", wire.Version, c)
	}
	if r, ok := n.cfg.Transport.(peerReach); !ready && ok {
		if connected, known := r.Reach(); connected == 0 {
			// The usual causes of a node that hears from nobody: say them.
			why += fmt.Sprintf("; connected to none of the %d peers known: check --peers, the network, "+
				"and that every node has the same cluster secret (--psk-file)", known)
		}
	}
	return ready, why
}

// peerReach is a transport that knows how many peers it is connected
// to; *p2p.Host is one.
type peerReach interface {
	Reach() (connected, known int)
}

// Locks lists the names starting with prefix that this node holds as a
// leader, and its own clients' requests.
func (n *Node) Locks(ctx context.Context, prefix string) (api.Table, error) {
	// With nested names, a prefix spelt as a name is (HTTPS://Shop.Example/
	// lists https://shop.example/'s names).
	prefix = n.canonical(prefix)
	var t api.Table
	err := n.do(ctx, func() {
		t = api.Table{Node: nodeID(n.cfg.Self), Leader: n.core.View().IsLeader(n.cfg.Self), Locks: []api.Lock{},
			Requests: []api.OwnRequest{}}
		for _, name := range n.core.Names() {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			detail := n.core.TableDetail(name)
			_, hw := n.core.Table(name)
			ticketed := ticketedEntries(detail)
			l := api.Lock{Name: name, HighWater: hw, Entries: []api.Entry{}}
			for _, d := range sortDetail(detail) {
				e := d.Entry
				holder := isHolder(e, ticketed)
				l.Entries = append(l.Entries, api.Entry{Request: e.Req.String(), Node: nodeID(e.Req.Node), Ticket: e.Ticket,
					Mode: e.Mode.String(), State: e.State.String(), Active: e.Active, Holder: holder,
					Since: n.wallTime(d.Since), Until: n.wallTime(d.Until)})
			}
			t.Locks = append(t.Locks, l)
		}
		for _, r := range n.core.Requests() {
			if !strings.HasPrefix(r.Name, prefix) {
				continue
			}
			o := api.OwnRequest{Request: r.Handle.String(), Name: r.Name, Mode: r.Mode.String(), Phase: r.Phase,
				Ticket: r.Ticket, Since: n.wallTime(r.Since)}
			if l := n.leases[r.Handle]; l != nil {
				o.Owner, o.Reason, o.ETA = l.req.Owner, l.req.Reason, l.req.etaAt
				o.GraceEnd, o.Revoked, o.Preview = l.req.graceAt, l.revoked, l.req.Preview
				if l.held {
					o.Expires = n.wallTime(l.expiry)
				}
				if l.pageViewsSaid {
					o.PageViews, o.PageViewsAt = new(l.pageViews), n.wallTime(l.pageViewsAt)
				}
			}
			t.Requests = append(t.Requests, o)
			if r.Phase == heldShared {
				if t.SharedReaders == nil {
					t.SharedReaders = map[string]int{}
				}
				// A lease lent to page views stands for them (at least
				// itself: it holds until given back).
				t.SharedReaders[r.Name] += max(1, ptrValue(o.PageViews))
			}
		}
		nameNodes(&t, n.nodeNames())
	})
	return t, err
}

// sortDetail orders entries as the bakery does: by ticket, then request;
// requests still choosing (ticket 0) go last.
func sortDetail(es []core.TableEntry) []core.TableEntry {
	out := slices.Clone(es)
	slices.SortFunc(out, func(a, b core.TableEntry) int {
		return cmp.Or(cmp.Compare(bakeryKey(a.Entry.Ticket), bakeryKey(b.Entry.Ticket)), a.Entry.Req.Compare(b.Entry.Req))
	})
	return out
}

// bakeryKey orders tickets as the bakery does, requests still choosing
// (ticket 0) last.
func bakeryKey(ticket uint64) uint64 {
	if ticket == 0 {
		return ^uint64(0)
	}
	return ticket
}

// ForceUnlock is the operator's release of someone else's lease. The lease
// is named by its id, or by its token, which this node looks up in its own
// table (so only a leader can resolve a token). It returns the request ids
// the leaders dropped, once a quorum of them confirmed; ErrUnknownLease
// when none of that quorum had the request.
func (n *Node) ForceUnlock(ctx context.Context, name, leaseID string, token uint64) ([]string, error) {
	var out []string
	var waits []chan error
	var want wire.RequestID
	if err := validName(name); err != nil {
		return nil, err
	}
	name = n.canonical(name)
	if leaseID != "" {
		h, err := ParseLeaseID(leaseID)
		if err != nil {
			return nil, err
		}
		want = h
	} else if token == 0 {
		return nil, fmt.Errorf("%w: force-unlock needs a lease id or a token", codes.ErrInvalid)
	}
	err := n.run(ctx, func() error {
		if n.failed != nil {
			return n.failed
		}
		reqs := []wire.RequestID{want}
		if want.Node == 0 {
			if !n.core.View().IsLeader(n.cfg.Self) {
				return fmt.Errorf("%w: node %d is not a leader and cannot look token %d up; give the lease id", codes.ErrInvalid, n.cfg.Self, token)
			}
			entries, _ := n.core.Table(name)
			reqs = reqs[:0]
			for _, e := range entries {
				if e.Ticket == token {
					reqs = append(reqs, e.Req)
				}
			}
			if len(reqs) == 0 {
				return fmt.Errorf("%w: no ticket %d on %q", semaphore.ErrUnknownLease, token, name)
			}
		}
		for _, r := range reqs {
			if err := n.core.ForceRelease(name, r); err != nil {
				return err
			}
			n.log.Warn("forced unlock", "name", name, "request", r.String())
			n.metrics.forced.Inc()
			out = append(out, r.String())
			waits = append(waits, n.awaitRelease(r, true))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, ch := range waits {
		if err := n.released(ctx, out[i], ch); err != nil {
			return out, err
		}
	}
	return out, nil
}

// RevokeReaders drops every READ_ONLY holder of name, as the cluster's
// table lists them (this node's own table without q): page views on
// agents' shared read tickets, and readers' own leases; and, with nested
// names, every INTENT_SHARED holder of it, which the readers of the names
// below it hold. Their clients
// lose them at once (the middleware cuts their requests). It returns the
// requests dropped, and how many readers they were (the readers on a
// shared read ticket, as its agent answered); none is not an error.
func (n *Node) RevokeReaders(ctx context.Context, q querier, name string) ([]string, int, error) {
	if err := validName(name); err != nil {
		return nil, 0, err
	}
	name = n.canonical(name)
	var t api.Table
	var err error
	if q != nil {
		t, err = n.ClusterLocks(ctx, q, name)
	} else {
		t, err = n.Locks(ctx, name)
	}
	if err != nil {
		return nil, 0, err
	}
	out, readers := []string{}, 0
	for _, l := range t.Locks {
		if l.Name != name {
			continue
		}
		for _, e := range l.Entries {
			// The readers of the name, and of the names below it (a
			// nested name's intent tickets: the page views below it on
			// an agent's share, or a reader's own parent ticket).
			if !e.Holder || e.Mode != semaphore.ReadOnly.String() && e.Mode != semaphore.IntentShared.String() {
				continue
			}
			reqs, err := n.ForceUnlock(ctx, name, e.Request, 0)
			out = append(out, reqs...)
			if len(reqs) > 0 {
				readers += max(1, ptrValue(e.Readers))
			}
			if err != nil && !errors.Is(err, semaphore.ErrUnknownLease) { // gone meanwhile: fine
				n.noteRevoked(ctx, name, readers)
				return out, readers, err
			}
		}
	}
	n.noteRevoked(ctx, name, readers)
	return out, readers, nil
}

func ptrValue(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// noteRevoked counts readers revoked on name for this node's writers of
// it (the drain that revoked them), which operators see.
func (n *Node) noteRevoked(ctx context.Context, name string, revoked int) {
	if revoked == 0 {
		return
	}
	_ = n.do(context.WithoutCancel(ctx), func() {
		for _, l := range n.leases {
			if l.req.Name == name && l.req.Mode != semaphore.ReadOnly {
				l.revoked += revoked
			}
		}
	})
}

// ticketedEntries are the entries of a table that have a number: those a
// holder could be behind.
func ticketedEntries(detail []core.TableEntry) []wire.Entry {
	var out []wire.Entry
	for _, d := range detail {
		if d.Entry.Ticket > 0 {
			out = append(out, d.Entry)
		}
	}
	return out
}

// isHolder reports whether the request of e holds its name by the table's
// tickets: what its master would decide on them, long past any quiet
// period, activation as marked. A request still choosing, without a
// number yet, is not ahead of it: the holder's master waited for every
// doorway under way when it looked that could change its decision
// (ChoosingMatters: not another reader's, for a reader without a limit)
// before it granted, so one under way now that could began after its
// ticket was taken, and its number will be above.
// Counted as ahead (ticket 0 sorts first), a request of any client in its
// doorway made a holder look like a waiter, and an agent that restarted
// refused to take its lease over ("waits in line") while the name was
// busy. The other way round, a request that still waits only for a
// doorway that began before it looked shows as holding; a client learns
// a lease id with its grant, so only a caller that renews an id it read
// in `sluice locks` while the request waited, after its agent restarted,
// could take such a request over (the leaders' held marks would tell the
// two apart; the tables do not carry them yet).
func isHolder(e wire.Entry, ticketed []wire.Entry) bool {
	if e.Ticket == 0 {
		return false
	}
	return semaphore.Admit(core.Candidate{Req: e.Req, Ticket: e.Ticket, Mode: e.Mode,
		Activated: e.Active, SinceReaders: 1 << 40}, ticketed).Grant
}
