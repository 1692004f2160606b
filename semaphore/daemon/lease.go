package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Lease is a granted lock as the client sees it.
type Lease struct {
	ID    string // the request's handle, "node.incarnation.counter"
	Name  string
	Mode  wire.Mode
	Token uint64
	// TTL is the lease's time to live counted from when the agent took the
	// call this lease answers (the acquire, or the last renewal): a client
	// that counts it from when it sent the call, on its monotonic clock,
	// stops before the leaders free the name. Expires is for display.
	TTL     time.Duration
	Expires time.Time
}

type lease struct {
	handle wire.RequestID
	req    Request
	// parents are the names a nested lease holds too, before req.Name
	// (NodeConfig.NestedNames): the names above it, or, for several names
	// taken together, the others and the names above them. leaves are
	// the names of such an acquire of several, which its leases carry.
	parents      []string
	leaves       []string
	parentTokens []uint64 // the fencing tokens of the parents' tickets
	sent         int64    // tick of the Acquire call
	renewAt      int64    // tick of the pending Renew call
	token        uint64
	expiry       int64 // tick; 0 until granted
	// ttl is the time to live the last grant or renewal gave, counted from
	// the monotonic time of its call (asked, renewAsked).
	ttl        time.Duration
	renewAsked time.Time
	held       bool
	// adopting: a lease of an earlier life of this node, taken over by a
	// renewal (Held) that the leaders have not confirmed yet.
	adopting bool
	// acquired gets the first grant or failure; renewed the answer to a
	// pending renewal (made by the first). Both have room for one: the
	// loop never blocks.
	acquired chan error
	renewed  chan error
	// grant is the lease as granted, set by the loop once, before the
	// nil on acquired: the Acquire call reads it without another turn
	// of the loop.
	grant    Lease
	watchers []chan api.Event
	// toldDraining: the watchers heard that a writer waits (tellDraining);
	// toldYield, that the share must go once idle.
	toldDraining, toldYield bool
	// revoked counts the readers a writer's client revoked on its name
	// (a drain whose grace is over), for operators.
	revoked int
	// pageViews: how many page views run on a reader's lease that its
	// client lends them, as it last said (pageViewsSaid), at pageViewsAt
	// (a tick); tables count them as that many readers.
	pageViews     int
	pageViewsSaid bool
	pageViewsAt   int64
	// asked is when the loop took the acquire call; granted when it was
	// granted (monotonic times, for TTLs and the wait and hold metrics).
	asked, granted time.Time
}

// named reports whether name is one of l's: its request's, or one of an
// acquire of several nested names that it stands for.
func (l *lease) named(name string) bool {
	return name == l.req.Name || slices.Contains(l.leaves, name)
}

// mayUse is nil if ctx's caller may release, renew or watch l: it took l,
// or is an operator, or there is no caller (an in-process call). A lease
// this agent does not know (l nil: an earlier life's, which the leaders
// keep) is released by a caller that may take an exclusive lock on name:
// nobody here remembers its owner or its mode. On the loop.
func (n *Node) mayUse(ctx context.Context, what string, l *lease, name string) error {
	c, ok := callerFrom(ctx)
	switch {
	case !ok || c.Operator():
		return nil
	case l == nil:
		if err := c.may(what+" a lease this agent does not know", name, RoleWriter); err != nil {
			return n.refused(c, what, err)
		}
		return nil
	case l.req.by != nil && l.req.by.same(c):
		return nil
	}
	return n.refused(c, what, fmt.Errorf("%w: %s may not %s lease %s on %q: it is another caller's (only an operator may)",
		codes.ErrForbidden, c, what, l.handle, l.req.Name))
}

// leasesOf is the set of the ids of the leases c took on this agent.
func (n *Node) leasesOf(ctx context.Context, c *Caller) (map[string]bool, error) {
	own := map[string]bool{}
	err := n.run(ctx, func() error {
		for h, l := range n.leases {
			if l.req.by != nil && l.req.by.same(c) {
				own[h.String()] = true
			}
		}
		return nil
	})
	return own, err
}

// refused counts and logs a call c may not make, and returns err.
func (n *Node) refused(c *Caller, action string, err error) error {
	n.metrics.forbidden.WithLabelValues(action).Inc()
	n.log.Warn("call refused: not the caller's role", "action", action, "uid", c.UID, "pid", c.PID, "token", c.Token,
		"err", err)
	return err
}

// ParseLeaseID reads a lease id as Lease.ID spells it.
func ParseLeaseID(s string) (wire.RequestID, error) {
	// Cut by hand, not by strings.Split: every page view's release is
	// parsed.
	var parts [3]string
	rest := s
	for i := range parts {
		p, after, found := strings.Cut(rest, ".")
		if found != (i < 2) {
			return wire.RequestID{}, fmt.Errorf("%w: lease id %q is not node.incarnation.counter", codes.ErrInvalid, s)
		}
		parts[i], rest = p, after
	}
	var v [3]uint64
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 64)
		if err != nil || i > 0 && x > 1<<32-1 {
			return wire.RequestID{}, fmt.Errorf("%w: lease id %q is not node.incarnation.counter", codes.ErrInvalid, s)
		}
		v[i] = x
	}
	if v[0] == 0 {
		return wire.RequestID{}, fmt.Errorf("%w: lease id %q names node 0", codes.ErrInvalid, s)
	}
	return wire.RequestID{Node: wire.NodeID(v[0]), Seq: v[1]<<32 | v[2]}, nil
}

// coreAcquire is a valid request in the core's units: ticks, with the
// default quiet period filled in.
func (n *Node) coreAcquire(r Request) core.Acquire {
	a := core.Acquire{Name: r.Name, Mode: r.Mode, Timeout: n.toTicks(r.Timeout),
		Duration: max(int64(r.Duration/n.cfg.Tick), 1), Grace: n.toTicks(r.Grace), Quiet: n.toTicks(r.Quiet), Limit: r.Limit}
	if r.Try {
		a.Timeout = 0
	}
	if r.Mode == semaphore.ReadWriteGentle && r.Quiet == 0 {
		a.Quiet = n.toTicks(semaphore.DefaultQuiet)
	}
	return a
}

// Acquire asks for a lock and waits until it is granted, refused, timed
// out, or ctx ends; in the last case the request is abandoned (a grant that
// raced with it is released). A request that Validate refuses is refused
// before anything else.
func (n *Node) Acquire(ctx context.Context, r Request) (Lease, error) {
	if err := r.Validate(); err != nil {
		return Lease{}, err
	}
	if r.ETA > 0 {
		r.etaAt = time.Now().Add(r.ETA)
	}
	if r.ReadersGrace > 0 {
		r.graceAt = time.Now().Add(r.ReadersGrace)
	}
	name, parents, err := n.nested(r.Name)
	if err != nil {
		return Lease{}, err
	}
	r.Name = name
	c, ok := callerFrom(ctx)
	if ok {
		if c.Role(r.Name) < modeRole(r.Mode) { // as c.may, its words built only for a refusal
			return Lease{}, n.refused(c, "acquire", c.forbidden("take a "+r.Mode.String()+" lock", r.Name, modeRole(r.Mode)))
		}
		r.by = c
	}
	l, _, err := n.acquire(ctx, r, steps{names: parents})
	if ok && r.Mode != semaphore.ReadOnly && err == nil {
		// A drain or a deploy's lock, taken through the API. Refusals are
		// not audited: a flood of them (overflow) must cost the agent
		// nothing more than their answers.
		n.audit(ctx, "write_lock", r.Name, nil, r.Owner, fmt.Sprintf("%s lease %s token %d", r.Mode, l.ID, l.Token))
	}
	return l, err
}

// nested is name as a nested lease takes it (NodeConfig.NestedNames): its
// canonical form, and the names above it, outermost first. An agent of
// flat names takes every name as given.
func (n *Node) nested(name string) (string, []string, error) {
	if !n.cfg.NestedNames {
		return name, nil, nil
	}
	path, err := semaphore.NamePath(name)
	if err != nil {
		return "", nil, err
	}
	return path[len(path)-1], path[:len(path)-1], nil
}

// canonical is name as this agent's leases carry it; a name NamePath
// refuses is left as it is (no lease has it).
func (n *Node) canonical(name string) string {
	if c, _, err := n.nested(name); err == nil && name != "" {
		return c
	}
	return name
}

// steps are the names a request takes before its own (core.Acquire's
// Parents), and their modes (nil: the intent of the request's mode);
// leaves are the names of an acquire of several nested names, which its
// leases carry.
type steps struct {
	names  []string
	modes  []wire.Mode
	leaves []string
}

// acquire takes r, after the names of before; it answers the lease of r's
// name and the fencing tokens of the steps' tickets.
func (n *Node) acquire(ctx context.Context, r Request, before steps) (Lease, []uint64, error) {
	a := n.coreAcquire(r)
	a.Parents, a.ParentModes = before.names, before.modes
	// One turn of the loop: the call waits for the answer alone, which a
	// refusal, or a grant on the agent's shared read ticket, gives in the
	// same turn. The lease is filled in and kept by the loop when the
	// core takes the request: read only there, or after an answer.
	l := &lease{req: r, parents: before.names, leaves: before.leaves, acquired: make(chan error, 1)}
	acquired := l.acquired
	if err := n.send(ctx, func() {
		if n.failed != nil {
			acquired <- n.failed
			return
		}
		// A try cannot be decided without a quorum: say so at once, not
		// "held by others" after the try's wait.
		if a.Timeout == 0 {
			if ready, why := n.readiness(); !ready {
				acquired <- fmt.Errorf("%w: %s", codes.ErrNotReady, why)
				return
			}
		}
		if c := n.elect.Codec(); len(a.Parents) > 0 && c < uint64(wire.Version) {
			// An older leader would refuse the intent modes' messages.
			acquired <- fmt.Errorf("%w: a nested name's lease needs cluster codec %d, and the cluster is at %d "+
				"(every voter must run a release that reads it)", codes.ErrNotReady, wire.Version, c)
			return
		}
		h, err := n.core.Acquire(a)
		if err != nil {
			acquired <- err
			return
		}
		l.handle, l.sent, l.asked = h, n.ticks, time.Now()
		n.leases[h] = l
		n.metrics.waiters.Inc()
	}); err != nil {
		return Lease{}, nil, err
	}
	var out Lease
	var tokens []uint64
	var err error
	select {
	case err = <-acquired:
		if err == nil {
			out, tokens = l.grant, l.parentTokens
		}
	case <-ctx.Done():
	case <-n.done:
		err = ErrStopped
	}
	if ctx.Err() != nil {
		// Give up, even on a grant that came as the caller went away
		// (both were ready): nobody would hold it until it expired. A
		// fresh context, because the caller's is over.
		abandon, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.do(abandon, func() { n.drop(l, true) }) // nothing when the core did not take it
		return Lease{}, nil, ctx.Err()
	}
	return out, tokens, err
}

// answered waits for the loop's answer on ch about l, and returns the
// lease as it then is.
func (n *Node) answered(ctx context.Context, l *lease, ch chan error) (Lease, error) {
	select {
	case err := <-ch:
		if err != nil {
			return Lease{}, err
		}
		var out Lease
		err = n.do(context.WithoutCancel(ctx), func() { out = n.leaseOf(l) })
		return out, err
	case <-ctx.Done():
		return Lease{}, ctx.Err()
	case <-n.done:
		return Lease{}, ErrStopped
	}
}

// run is do for a function that can fail.
func (n *Node) run(ctx context.Context, fn func() error) error {
	var err error
	if e := n.do(ctx, func() { err = fn() }); e != nil {
		return e
	}
	return err
}

func (n *Node) leaseOf(l *lease) Lease {
	return Lease{ID: l.handle.String(), Name: l.req.Name, Mode: l.req.Mode, Token: l.token, TTL: l.ttl, Expires: n.wallTime(l.expiry)}
}

// drop forgets a lease; release says whether to tell the core, and the
// error is the core's (the request is being released already: it ended,
// or was revoked, and the loop has not heard of it yet).
func (n *Node) drop(l *lease, release bool) error {
	if n.leases[l.handle] != l {
		return nil
	}
	var err error
	if release {
		err = n.core.Abandon(l.handle)
	}
	mode := l.req.Mode.String()
	n.metrics.pageViews.Sub(float64(l.pageViews))
	if l.held {
		n.metrics.active.WithLabelValues(mode).Dec()
		n.metrics.hold.WithLabelValues(mode).Observe(time.Since(l.granted).Seconds())
	} else {
		n.metrics.waiters.Dec()
	}
	if !l.held {
		// A waiting Acquire must not wait for a request that is gone.
		select { // unless an answer (a failure) is already there
		case l.acquired <- fmt.Errorf("%w: %s was released while it waited", codes.ErrLost, l.handle):
		default:
		}
	}
	delete(n.leases, l.handle)
	for _, w := range l.watchers {
		close(w)
	}
	l.watchers = nil
	return err
}

// Release gives a lease (or a waiting request) back. It returns once a
// quorum of the leaders dropped the request, durably: from then on no
// restart brings it back. The lease is over for the client at once; if the
// agent is not ready, or ctx ends first, the release goes on and the
// error says it was not confirmed (the leaders drop the lease at its
// expiry at the latest). name, when not empty, is the lease's name as the
// client knows it: a lease of that id on another name is not the client's
// (core.Node.Release).
func (n *Node) Release(ctx context.Context, id, name string) error {
	// A write lock's request, for the audit: set on the loop, which may
	// still run the release's turn after ctx ended.
	var writer atomic.Pointer[Request]
	err := n.release(ctx, id, name, &writer)
	n.auditRelease(ctx, id, &writer, err)
	return err
}

// auditRelease records the release of a write lock's lease id, called by
// a caller the agent knows, with its outcome err.
func (n *Node) auditRelease(ctx context.Context, id string, writer *atomic.Pointer[Request], err error) {
	if w := writer.Load(); w != nil {
		if _, ok := callerFrom(ctx); ok {
			n.audit(ctx, "write_lock_released", w.Name, err, w.Owner, fmt.Sprintf("%s lease %s", w.Mode, id))
		}
	}
}

func (n *Node) release(ctx context.Context, id, name string, writer *atomic.Pointer[Request]) error {
	done, err := n.sendRelease(ctx, id, name, writer, n.send)
	if err != nil {
		return err
	}
	return n.releaseAnswered(ctx, id, writer, n.released(ctx, id, done))
}

// releaseAnswered finishes a release whose loop turn answered err: an
// earlier life's lease released by id alone is looked up by its name in
// the cluster's table and released again.
func (n *Node) releaseAnswered(ctx context.Context, id string, writer *atomic.Pointer[Request], err error) error {
	if errors.Is(err, errNameNeeded) {
		h, _ := ParseLeaseID(id) // parsed by sendRelease already
		name, _, err := n.clusterEntry(ctx, h, "")
		if err != nil {
			return err
		}
		return n.release(ctx, id, name, writer)
	}
	return err
}

// sendRelease hands the release of id to the loop with send, and returns
// the channel its answer comes on (released waits for it).
func (n *Node) sendRelease(ctx context.Context, id, name string, writer *atomic.Pointer[Request], send func(context.Context, func()) error) (chan error, error) {
	h, err := ParseLeaseID(id)
	if err != nil {
		return nil, err
	}
	name = n.canonical(name)
	// One turn of the loop, as Acquire: a release of a lease held on the
	// agent's shared read ticket is through in the same turn.
	done := make(chan error, 1)
	if err := send(ctx, func() {
		l := n.leases[h]
		if l != nil && l.req.Mode != semaphore.ReadOnly {
			req := l.req
			writer.Store(&req)
		}
		if l != nil && name != "" && !l.named(name) {
			done <- fmt.Errorf("%w: %s on %q", semaphore.ErrUnknownLease, id, name)
			return
		}
		if l != nil || n.earlierLife(h) {
			if err := n.mayUse(ctx, "release", l, name); err != nil {
				done <- err
				return
			}
		}
		if l == nil {
			// A lease granted before this agent restarted: the leaders keep
			// it for its client.
			switch {
			case !n.earlierLife(h):
				done <- fmt.Errorf("%w: %s", semaphore.ErrUnknownLease, id)
				return
			case n.core.Release(h, name) == nil:
				// They told this life so (core.Node.Former): given back.
			case name == "":
				done <- errNameNeeded
				return
			default:
				// Their word was lost, or is on its way: drop it on name,
				// where a quorum of the leaders keeps it if anybody holds
				// it; unknown_lease when none of them has it.
				if ready, why := n.readiness(); !ready {
					done <- fmt.Errorf("%w: release of %s not confirmed: %s", codes.ErrNotReady, id, why)
					return
				}
				if err := n.core.ForceRelease(name, h); err != nil {
					done <- err
					return
				}
				n.awaitReleaseOn(h, true, done)
				return
			}
		} else {
			n.emitTo(l, api.Event{Kind: core.EventUnlocked.String()})
			if n.drop(l, true) != nil {
				// Ended or revoked already (the loop has not heard yet):
				// the core releases it on its own; nothing to wait for.
				done <- nil
				return
			}
		}
		if ready, why := n.readiness(); !ready {
			done <- fmt.Errorf("%w: release of %s not confirmed: %s", codes.ErrNotReady, id, why)
			return
		}
		n.awaitReleaseOn(h, false, done)
	}); err != nil {
		return nil, err
	}
	return done, nil
}

// PageViews records what a reader's client says of its lease lent to
// its process's page views: how many run on it now (api.PageViewsBody).
func (n *Node) PageViews(ctx context.Context, id, name string, inFlight int) error {
	h, err := ParseLeaseID(id)
	if err != nil {
		return err
	}
	if inFlight < 0 || inFlight > api.MaxPageViews {
		return fmt.Errorf("%w: in_flight %d: from 0 to %d page views", codes.ErrInvalid, inFlight, api.MaxPageViews)
	}
	name = n.canonical(name)
	return n.run(ctx, func() error {
		l := n.leases[h]
		if l == nil || name != "" && !l.named(name) {
			return fmt.Errorf("%w: %s", semaphore.ErrUnknownLease, id)
		}
		if err := n.mayUse(ctx, "say the page views of", l, name); err != nil {
			return err
		}
		if l.req.Mode != semaphore.ReadOnly {
			return fmt.Errorf("%w: lease %s is a %s lease: page views run on readers' leases", codes.ErrInvalid, id, l.req.Mode)
		}
		n.metrics.pageViews.Add(float64(inFlight - l.pageViews))
		l.pageViews, l.pageViewsSaid, l.pageViewsAt = inFlight, true, n.ticks
		return nil
	})
}

// errNameNeeded: a lease of an earlier life released without its name,
// which this life does not know.
var errNameNeeded = fmt.Errorf("%w: give the lease's name", semaphore.ErrUnknownLease)

// earlierLife reports whether h is a request of an earlier life of this
// node: a lease the leaders may keep for a client that outlived it.
func (n *Node) earlierLife(h wire.RequestID) bool {
	return h.Node == n.cfg.Self && h.Incarnation() > 0 && h.Incarnation() < n.cfg.State.Incarnation
}

// clusterEntry finds request h in the cluster's table (a quorum of the
// leaders' tables, merged), on name or, when name is "", on any name. A
// lease is in a quorum of the leaders' tables while anybody holds it, so
// it is in that merge: ErrUnknownLease when it is not.
func (n *Node) clusterEntry(ctx context.Context, h wire.RequestID, name string) (string, api.Entry, error) {
	if n.cfg.Cluster == nil {
		return "", api.Entry{}, fmt.Errorf("%w: %s: a lease of this agent before its restart: give its name", semaphore.ErrUnknownLease, h)
	}
	t, err := n.ClusterLocks(ctx, n.cfg.Cluster, name)
	if err != nil {
		return "", api.Entry{}, err
	}
	want := h.String()
	for _, l := range t.Locks {
		if name != "" && l.Name != name {
			continue
		}
		for _, e := range l.Entries {
			if e.Request == want {
				return l.Name, e, nil
			}
		}
	}
	on := ""
	if name != "" {
		on = fmt.Sprintf(" on %q", name)
	}
	return "", api.Entry{}, fmt.Errorf("%w: %s%s: no leader of a quorum has it (released, force-unlocked or expired)", semaphore.ErrUnknownLease, h, on)
}

// releaseCall names a call waiting for EventReleased: a client's Release
// and an operator's force-unlock of one request may wait at once.
type releaseCall struct {
	req    wire.RequestID
	forced bool
}

// awaitRelease registers a call waiting for EventReleased of req.
func (n *Node) awaitRelease(req wire.RequestID, forced bool) chan error {
	ch := make(chan error, 1)
	n.awaitReleaseOn(req, forced, ch)
	return ch
}

// awaitReleaseOn is awaitRelease answering on ch, which has room for one.
func (n *Node) awaitReleaseOn(req wire.RequestID, forced bool, ch chan error) {
	k := releaseCall{req, forced}
	if old := n.releases[k]; old != nil {
		old <- fmt.Errorf("%w: %s: asked again", codes.ErrNotReady, req)
	}
	n.releases[k] = ch
}

// released waits for the answer of awaitRelease.
func (n *Node) released(ctx context.Context, id string, done chan error) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: release of %s not confirmed yet (it goes on): %w", codes.ErrNotReady, id, ctx.Err())
	case <-n.done:
		return ErrStopped
	}
}

// onReleased answers the call waiting for e, an EventReleased.
func (n *Node) onReleased(e core.Event) {
	k := releaseCall{e.Req, e.Forced}
	ch := n.releases[k]
	if ch == nil {
		return
	}
	delete(n.releases, k)
	switch e.Code {
	case wire.CodeNone:
		ch <- nil
	case wire.CodeUnknownLease:
		ch <- fmt.Errorf("%w: no leader of a quorum has %s on %q (give the request id `sluice locks` shows)", semaphore.ErrUnknownLease, e.Req, e.Name)
	default:
		ch <- fmt.Errorf("%w: release of %s not confirmed by a quorum of the leaders", codes.ErrNotReady, e.Req)
	}
}

// Renew extends a held lease by its duration, counted from now, and waits
// for the leaders to confirm it. It is RenewHeld without what the client
// knows of the lease.
func (n *Node) Renew(ctx context.Context, id string) (Lease, error) {
	return n.RenewHeld(ctx, id, Held{})
}

// Held is a lease as its client knows it, sent along with a renewal. An
// agent that restarted since the grant lost the lease from its memory
// while the leaders keep its ticket for the client: the renewal takes it
// over (core.Node.Adopt) with these. Every field is optional.
type Held struct {
	// Name is the lease's name; a lease of that id on another name is
	// not the caller's (unknown_lease). Empty: the name the leaders told
	// the agent, or the one the cluster's table lists.
	Name string
	// Mode is for display: the cluster's table says which it is. Zero:
	// unknown.
	Mode wire.Mode
	// Duration and Grace are the lease's (renewals extend it by
	// Duration). Zero: the API's default duration, 1m, and no grace.
	Duration, Grace time.Duration
}

// RenewHeld extends a held lease by its duration, counted from now, and
// waits for the leaders to confirm it. A lease granted by an earlier life
// of this agent is taken over when the cluster's table lists it as
// held (Held says what the client knows of it): unknown_lease when no
// quorum of the leaders keeps it, whatever the client says.
func (n *Node) RenewHeld(ctx context.Context, id string, as Held) (Lease, error) {
	h, err := ParseLeaseID(id)
	if err != nil {
		return Lease{}, err
	}
	var l *lease
	earlier := false
	if err := n.run(ctx, func() error {
		l = n.leases[h]
		switch {
		case l == nil && n.earlierLife(h) && n.failed == nil:
			earlier = true
			if as.Name == "" {
				as.Name, _ = n.core.Former(h)
			}
			return nil
		case l == nil, as.Name != "" && !l.named(n.canonical(as.Name)):
			return fmt.Errorf("%w: %s", semaphore.ErrUnknownLease, id)
		case n.failed != nil:
			return n.failed
		}
		if err := n.mayUse(ctx, "renew", l, ""); err != nil {
			return err
		}
		return n.renewOn(l)
	}); err != nil {
		return Lease{}, err
	}
	if earlier {
		return n.adopt(ctx, h, as)
	}
	return n.answered(ctx, l, l.renewed)
}

// renewOn asks the leaders to renew l; on the loop.
func (n *Node) renewOn(l *lease) error {
	if l.renewed == nil {
		l.renewed = make(chan error, 1) // at the first renewal: page views are never renewed
	}
	select {
	case <-l.renewed: // an answer nobody waited for
	default:
	}
	l.renewAt, l.renewAsked = n.ticks, time.Now()
	return n.core.Renew(l.handle)
}

// adopt takes h, a lease of an earlier life of this node, over and renews
// it: the cluster's table must list it as a holder (a request of that life
// still waiting in line was never granted, and its id is nobody's lease).
func (n *Node) adopt(ctx context.Context, h wire.RequestID, as Held) (Lease, error) {
	if as.Name != "" {
		if err := validName(as.Name); err != nil {
			return Lease{}, err
		}
	}
	if _, parents, _ := n.nested(as.Name); len(parents) > 0 {
		// Its tickets on the names above were the earlier life's, which
		// nobody here knows: held alone, the name would not keep a drain
		// of its parents out.
		return Lease{}, fmt.Errorf("%w: %s on %q: a lease on a nested name is not taken over after its agent restarted; "+
			"take the name again", semaphore.ErrLost, h, as.Name)
	}
	req := Request{Name: as.Name, Mode: as.Mode, Duration: cmp.Or(as.Duration, defaultDuration), Grace: as.Grace}
	var token uint64
	if n.cfg.Cluster != nil || as.Name == "" {
		name, e, err := n.clusterEntry(ctx, h, as.Name)
		if err != nil {
			return Lease{}, err
		}
		if !e.Holder {
			return Lease{}, fmt.Errorf("%w: %s on %q waits in line: it was never granted", semaphore.ErrUnknownLease, h, name)
		}
		req.Name, token = name, e.Ticket
		if m, err := semaphore.ParseMode(e.Mode); err == nil {
			req.Mode = m
		}
	}
	if !req.Mode.Valid() {
		req.Mode = semaphore.Exclusive // unknown: for display only
	}
	if err := req.Validate(); err != nil {
		return Lease{}, err
	}
	// Nobody here remembers its owner: it is taken over by a caller that
	// may take such a lock on the name (the mode the leaders say), and is
	// that caller's from now on.
	if c, ok := callerFrom(ctx); ok {
		if err := c.may("take over a "+req.Mode.String()+" lease", req.Name, modeRole(req.Mode)); err != nil {
			return Lease{}, n.refused(c, "renew", err)
		}
		req.by = c
	}
	var l *lease
	if err := n.run(ctx, func() error {
		if n.failed != nil {
			return n.failed
		}
		if l = n.leases[h]; l != nil { // taken over meanwhile, by another call
			if l.req.Name != req.Name {
				return fmt.Errorf("%w: %s on %q", semaphore.ErrUnknownLease, h, req.Name)
			}
			if err := n.mayUse(ctx, "renew", l, ""); err != nil {
				return err
			}
			return n.renewOn(l)
		}
		if err := n.core.Adopt(h, n.coreAcquire(req), token); err != nil {
			return err
		}
		now := time.Now()
		l = &lease{handle: h, req: req, sent: n.ticks, renewAt: n.ticks, renewAsked: now, token: token, adopting: true,
			acquired: make(chan error, 1), renewed: make(chan error, 1), asked: now}
		n.leases[h] = l
		n.metrics.waiters.Inc()
		n.log.Info("lease of an earlier life of this agent taken over", "lease", h.String(), "name", req.Name)
		return nil
	}); err != nil {
		return Lease{}, err
	}
	return n.answered(ctx, l, l.renewed)
}

// Watch streams the events of a lease until it ends or ctx ends. The
// channel closes after the lease's last event; a watcher that falls
// behind by more than a few dozen events is closed too.
func (n *Node) Watch(ctx context.Context, id string) (<-chan api.Event, error) {
	h, err := ParseLeaseID(id)
	if err != nil {
		return nil, err
	}
	ch := make(chan api.Event, watcherQueue)
	if err := n.run(ctx, func() error {
		l := n.leases[h]
		if l == nil {
			return fmt.Errorf("%w: %s", semaphore.ErrUnknownLease, id)
		}
		if err := n.mayUse(ctx, "watch", l, ""); err != nil {
			return err
		}
		l.watchers = append(l.watchers, ch)
		reader := l.req.Mode == semaphore.ReadOnly
		if l.held {
			ch <- api.Event{Lease: id, Name: l.req.Name, Kind: core.EventGranted.String(), Token: l.token, Expires: n.wallTime(l.expiry),
				Yields: reader && n.core.OnShare(h)}
		}
		if reader {
			// A reader hears that a writer waits (tellDraining).
			l.toldDraining, l.toldYield = false, false
			n.watchedReaders[h] = l
			n.tellDraining()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	go func() {
		// Stop watching when the client does, so the lease does not keep a
		// dead channel.
		select {
		case <-ctx.Done():
			_ = n.do(context.Background(), func() {
				if l := n.leases[h]; l != nil {
					if i := slices.Index(l.watchers, ch); i >= 0 {
						l.watchers = slices.Delete(l.watchers, i, i+1)
						close(ch)
					}
				}
			})
		case <-n.done:
		}
	}()
	return ch, nil
}

// tellDraining tells the watchers of readers' leases, once per watch,
// that a writer waits for their name: this agent's shared read ticket of
// it was asked to drain (draining: long polls and streams can end early,
// and responses can close their connections), or to go once idle (yield:
// a lease lent to many page views goes once they are done, as the share
// does). On the loop, after each Ready: only watched readers (requests
// that outlived the middleware's first look, and lent leases) are looked
// at. A reader on a plain ticket of its own (no share: a limited reader,
// or one whose share could not be had at once) hears it from the leaders'
// word to its ticket (core AskedToYield).
func (n *Node) tellDraining() {
	for h, l := range n.watchedReaders {
		switch {
		case n.leases[h] != l || len(l.watchers) == 0:
			delete(n.watchedReaders, h)
		case !l.toldDraining && (n.core.Draining(l.req.Name) || slices.ContainsFunc(l.parents, n.core.Draining) ||
			n.core.AskedToYield(h) == wire.YieldDrain):
			l.toldDraining, l.toldYield = true, true // draining says yield too
			n.emitTo(l, api.Event{Kind: "draining"})
		case !l.toldYield && (n.core.Yielding(l.req.Name) || slices.ContainsFunc(l.parents, n.core.Yielding) ||
			n.core.AskedToYield(h) != wire.YieldNone):
			l.toldYield = true
			n.emitTo(l, api.Event{Kind: "yield"})
		}
	}
}

// emitTo gives e to every watcher of l, without ever blocking the loop.
func (n *Node) emitTo(l *lease, e api.Event) {
	if len(l.watchers) == 0 {
		return // most leases (page views): no id to format
	}
	e.Lease, e.Name = l.handle.String(), l.req.Name
	kept := l.watchers[:0]
	for _, w := range l.watchers {
		select {
		case w <- e:
			kept = append(kept, w)
		default:
			close(w) // too slow: the client reconnects and reads the state again
		}
	}
	l.watchers = kept
}

// onEvent hands a core event to the handler of its kind.
func (n *Node) onEvent(e core.Event) {
	if e.Kind == core.EventReleased {
		n.onReleased(e)
		return
	}
	l := n.leases[e.Req]
	if l == nil {
		return
	}
	ev := api.Event{Kind: e.Kind.String(), Token: e.Token, Code: e.Code.String()}
	switch e.Kind {
	case core.EventGranted:
		n.onGranted(l, e, ev)
	case core.EventFailed:
		n.onFailed(l, e, ev)
	case core.EventRenewed:
		n.onRenewed(l, e, ev)
	case core.EventRenewFailed:
		n.onRenewFailed(l, e, ev)
	case core.EventUnlocking:
		n.emitTo(l, ev) // the lease reached its duration: a warning for the watchers
	case core.EventUnlocked:
		n.onUnlocked(l, ev)
	}
}

// onGranted holds l, unless the lease is over before anyone could use it.
func (n *Node) onGranted(l *lease, e core.Event, ev api.Event) {
	expiry := e.ExpiryFrom(l.sent)
	if n.ttlFrom(time.Now(), expiry) == 0 {
		// Decided while the loop's clock was behind (the process was
		// stopped, or starved): the lease is over before anyone could
		// use it. The client hears timed out; the leaders, a release.
		n.metrics.failures.WithLabelValues(wire.CodeTimedOut.String()).Inc()
		n.emitTo(l, api.Event{Kind: core.EventFailed.String(), Code: wire.CodeTimedOut.String()})
		putLatest(l.acquired, fmt.Errorf("%w: granted after the lease's end (the agent was paused)", codes.ErrTimedOut))
		n.drop(l, true)
		return
	}
	l.held, l.token, l.expiry, l.granted = true, e.Token, expiry, time.Now()
	l.parentTokens = e.ParentTokens
	l.ttl = n.ttlFrom(l.asked, l.expiry)
	mode := l.req.Mode.String()
	n.metrics.waiters.Dec()
	n.metrics.grants.WithLabelValues(mode).Inc()
	n.metrics.active.WithLabelValues(mode).Inc()
	n.metrics.wait.WithLabelValues(mode).Observe(l.granted.Sub(l.asked).Seconds())
	ev.Expires = n.wallTime(l.expiry)
	n.emitTo(l, ev)
	l.grant = n.leaseOf(l)
	putLatest(l.acquired, nil)
}

// onFailed ends a request that was not granted.
func (n *Node) onFailed(l *lease, e core.Event, ev api.Event) {
	err := errorOf(e.Code)
	// Out of time while the node cannot decide anything: the service is
	// down, not the name held.
	if e.Code == wire.CodeTimedOut {
		if ready, why := n.readiness(); !ready {
			ev.Code, err = wire.CodeNotReady.String(), fmt.Errorf("%w: %s", codes.ErrNotReady, why)
		}
	}
	n.metrics.failures.WithLabelValues(ev.Code).Inc()
	n.emitTo(l, ev)
	putLatest(l.acquired, err)
	n.drop(l, false)
}

// onRenewed extends l by the renewal's TTL, counted from its Renew call.
func (n *Node) onRenewed(l *lease, e core.Event, ev api.Event) {
	l.expiry = e.ExpiryFrom(l.renewAt)
	l.ttl = n.ttlFrom(l.renewAsked, l.expiry)
	if l.adopting {
		// The leaders keep it: held by this life from now on.
		l.adopting, l.held, l.granted = false, true, time.Now()
		mode := l.req.Mode.String()
		n.metrics.waiters.Dec()
		n.metrics.active.WithLabelValues(mode).Inc()
		l.grant = n.leaseOf(l)
	}
	ev.Expires = n.wallTime(l.expiry)
	n.emitTo(l, ev)
	putLatest(l.renewed, nil)
}

// onRenewFailed answers the pending Renew call; the lease runs on until
// its expiry.
func (n *Node) onRenewFailed(l *lease, e core.Event, ev api.Event) {
	n.emitTo(l, ev)
	if l.adopting {
		// Not a lease of the cluster's (any more): nobody's, here too.
		putLatest(l.renewed, fmt.Errorf("%w: %s on %q: no quorum of the leaders keeps it (released, force-unlocked or expired)",
			semaphore.ErrUnknownLease, l.handle, l.req.Name))
		n.drop(l, false)
		n.core.Disown(l.handle)
		return
	}
	putLatest(l.renewed, errorOf(e.Code))
}

// onUnlocked ends a held lease: released by force, or out of grace.
func (n *Node) onUnlocked(l *lease, ev api.Event) {
	n.emitTo(l, ev)
	putLatest(l.renewed, codes.ErrLost)
	n.drop(l, false)
}

// ttlFrom is the time from asked, when the loop took a call, to tick
// expiry. The loop never runs a tick before its time (ticks only catch up
// with the clock), so the master ends the lease no earlier than asked +
// the TTL, and a client that sent the call before asked ends it earlier.
func (n *Node) ttlFrom(asked time.Time, expiry int64) time.Duration {
	return max(n.wallTime(expiry).Sub(asked), 0)
}

// putLatest leaves v in a one-slot channel, replacing an unread value.
func putLatest(ch chan error, v error) {
	if ch == nil {
		return // no renewal was ever asked of the lease: nobody to tell
	}
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// errorOf is the sentinel of a core event's code.
func errorOf(c wire.Code) error {
	if r, ok := codes.ByWire(c); ok {
		return r.Err
	}
	return fmt.Errorf("%w: ended without a code", codes.ErrLost)
}

// failAll ends every waiting client with err; the node is stopping or has
// stopped serving.
func (n *Node) failAll(err error) {
	for _, l := range n.leases {
		if !l.held {
			select {
			case l.acquired <- err:
			default:
			}
		}
		putLatest(l.renewed, err)
		n.drop(l, false)
	}
	for req, ch := range n.releases {
		ch <- err
		delete(n.releases, req)
	}
}
