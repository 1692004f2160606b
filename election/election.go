package election

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// Config configures an Election. Zero values of the tick fields mean their
// defaults.
type Config struct {
	// Node is this node on the wire. Required.
	Node wire.NodeID
	// ID is this node's election id for this start. Required.
	ID ID
	// ClusterSize is the configured number of nodes, n. Required, >= 1.
	ClusterSize int
	// Peers are the cluster's other nodes: hellos go to them, and a view
	// naming a node that is neither a peer nor heard from is refused.
	Peers []wire.NodeID
	// HelloTicks is the period of hellos. Default 5.
	HelloTicks int64
	// DeadTicks is how long a silent node counts as alive. Default 20.
	DeadTicks int64
	// RetryTicks is how long a coordinator lets an election round run
	// before it starts another with a higher epoch. Default 15.
	RetryTicks int64
	// Mutant breaks the election on purpose, for mutation tests only.
	Mutant Mutant
}

// Mutant names a deliberate bug, for the simulator's mutation test.
type Mutant uint8

const (
	// MutantTwoViewsPerEpoch: a node promises and accepts an epoch it has
	// already promised or accepted, so two views may win one epoch.
	MutantTwoViewsPerEpoch Mutant = 1 << iota
	// MutantPrevFromOwnView: the coordinator ignores a newer view accepted
	// by a promiser and names its own valid view as the previous one, which
	// may be older than a view a quorum accepted.
	MutantPrevFromOwnView
)

// Persisted is what a node must find again after a restart. It is handed
// out in Ready.Persist whenever it changed; it must be durable before the
// messages of the same Ready are sent.
type Persisted struct {
	Promised uint64    // highest epoch promised
	Accepted wire.View // last view accepted
	Valid    wire.View // last view known to be valid
}

func (p *Persisted) clone() *Persisted {
	c := *p
	c.Accepted = cloneView(p.Accepted)
	c.Valid = cloneView(p.Valid)
	return &c
}

func cloneView(v wire.View) wire.View {
	v.Leaders, v.PrevLeaders = slices.Clone(v.Leaders), slices.Clone(v.PrevLeaders)
	return v
}

// Ready is the output since the last Advance.
type Ready struct {
	Persist  *Persisted
	Messages []wire.Message
	// View, when set, is a new valid view for the lock core.
	View *wire.View
}

// Member is one node as this node sees it.
type Member struct {
	Node   wire.NodeID
	ID     string // empty until its hello arrived
	Alive  bool
	Leader bool
	Off    bool
}

// Status is what `sluice status` shows of the election.
type Status struct {
	Ready       bool
	Reason      string // why not ready (NO_LOCK); empty when ready
	View        wire.View
	Coordinator bool
	Members     []Member
}

// Stats counts rejected input.
type Stats struct {
	BadIDs, BadViews, StaleViews, Rejections uint64
	// Rounds started, and Continuations: rounds that proposed again a view
	// a promiser accepted and the coordinator did not know to be valid.
	Rounds, Continuations uint64
}

type member struct {
	id    ID
	heard int64
}

type round struct {
	epoch    uint64
	started  int64
	promises map[wire.NodeID]wire.View
	accepts  map[wire.NodeID]bool
	proposal *wire.View // set once the promises made a quorum
}

// Election is one node's election state machine. Not safe for concurrent use.
type Election struct {
	cfg       Config
	now       int64
	lastHello int64
	p         Persisted
	members   map[wire.NodeID]*member
	seenEpoch uint64
	round     *round
	stats     Stats

	persist bool
	msgs    []wire.Message
	view    *wire.View
	handed  int
	// what the last Ready handed out, so Advance clears only that
	handedPersist bool
	handedView    *wire.View
}

// New starts an election from what it persisted (nil on a first start).
func New(cfg Config, persisted *Persisted) (*Election, error) {
	if err := cfg.ID.Validate(); err != nil {
		return nil, err
	}
	if cfg.Node == 0 || cfg.ClusterSize < 1 {
		return nil, fmt.Errorf("%w: needs a node id and a cluster size >= 1", ErrBadConfig)
	}
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.HelloTicks, 5)
	def(&cfg.DeadTicks, 20)
	def(&cfg.RetryTicks, 15)
	cfg.Peers = slices.Clone(cfg.Peers)
	e := &Election{cfg: cfg, members: map[wire.NodeID]*member{cfg.Node: {id: cfg.ID}}, lastHello: -cfg.HelloTicks}
	if persisted != nil {
		e.p = *persisted.clone()
		if e.p.Valid.Epoch > 0 {
			v := cloneView(e.p.Valid)
			e.view = &v
		}
	}
	return e, nil
}

// AddPeer makes id a peer: hellos go to it from now on. The runtime calls
// it for nodes the mesh learned after the start (announcements, inbound
// connections), so that every node greets every other one.
func (e *Election) AddPeer(id wire.NodeID) {
	if id != 0 && id != e.cfg.Node && !slices.Contains(e.cfg.Peers, id) {
		e.cfg.Peers = append(e.cfg.Peers, id)
	}
}

// Quorum is the number of nodes that must know each other, and accept a
// view, in a cluster of n: all of them up to three, a majority above.
func Quorum(n int) int {
	if n <= 3 {
		return n
	}
	return n/2 + 1
}

// View is the valid view this node knows (epoch 0: none).
func (e *Election) View() wire.View { return cloneView(e.p.Valid) }

// Stats returns the counters.
func (e *Election) Stats() Stats { return e.stats }

func (e *Election) alive(id wire.NodeID) bool {
	m := e.members[id]
	return m != nil && (id == e.cfg.Node || e.now-m.heard <= e.cfg.DeadTicks)
}

// aliveIDs are the nodes alive and known, in id order, smallest first.
func (e *Election) aliveIDs() []wire.NodeID {
	var out []wire.NodeID
	for id := range e.members {
		if e.alive(id) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b wire.NodeID) int {
		return cmp.Or(e.members[a].id.Compare(e.members[b].id), cmp.Compare(a, b))
	})
	return out
}

// wanted is how many leaders a view has: three, or n when n < 3.
func (e *Election) wanted() int { return min(3, e.cfg.ClusterSize) }

// candidates are the alive nodes that may lead, best first: sitting leaders
// compete with priority 0.
func (e *Election) candidates() []wire.NodeID {
	var out []wire.NodeID
	for _, id := range e.aliveIDs() {
		if e.members[id].id.Priority != Off {
			out = append(out, id)
		}
	}
	rank := func(id wire.NodeID) ID {
		x := e.members[id].id
		if slices.Contains(e.p.Valid.Leaders, id) {
			x.Priority = 0
		}
		return x
	}
	slices.SortStableFunc(out, func(a, b wire.NodeID) int { return rank(a).Compare(rank(b)) })
	return out
}

// blocked says why no election can run now, or "" when one can.
func (e *Election) blocked() string {
	alive, q := len(e.aliveIDs()), Quorum(e.cfg.ClusterSize)
	if alive < q {
		return fmt.Sprintf("%d of %d nodes know each other, an election needs %d", alive, e.cfg.ClusterSize, q)
	}
	if c := len(e.candidates()); c < e.wanted() {
		return fmt.Sprintf("%d candidates are up, an election needs %d (the others are off or down)", c, e.wanted())
	}
	return ""
}

// starting reports whether this node is too fresh to judge others: it
// has not had the time to hear every live node's hello. Without it a node
// that just started takes leaders it has not heard from yet for dead, and
// replaces a view that is fine (seen on a real mesh, where a new node's
// hellos and its peers' arrive 200 ms apart).
func (e *Election) starting() bool {
	if e.cfg.ClusterSize == 1 {
		return false // nobody to hear
	}
	if e.p.Valid.Epoch > 0 {
		return e.now <= e.cfg.DeadTicks
	}
	return e.now <= 2*e.cfg.HelloTicks
}

// needed reports whether the valid view must be replaced.
func (e *Election) needed() bool {
	if e.p.Valid.Epoch == 0 {
		return true
	}
	for _, l := range e.p.Valid.Leaders {
		if !e.alive(l) {
			return true
		}
	}
	return false
}

func (e *Election) send(m wire.Message) { e.msgs = append(e.msgs, m) }

func (e *Election) sendAll(m wire.Message, alive bool) {
	targets := map[wire.NodeID]bool{}
	for _, p := range e.cfg.Peers {
		targets[p] = true
	}
	for id := range e.members {
		targets[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(targets)) {
		if id == e.cfg.Node && m.Kind == wire.KindHello || alive && !e.alive(id) {
			continue
		}
		m.To, m.From = id, e.cfg.Node
		e.send(m)
	}
}

// Tick advances time: hellos, and the coordinator's elections.
func (e *Election) Tick() {
	e.now++
	if e.now-e.lastHello >= e.cfg.HelloTicks {
		e.lastHello = e.now
		e.sendAll(wire.Message{Kind: wire.KindHello, Name: e.cfg.ID.String(), View: cloneView(e.p.Valid)}, false)
	}
	alive := e.aliveIDs()
	coordinator := len(alive) > 0 && alive[0] == e.cfg.Node
	if !coordinator || !e.needed() || e.blocked() != "" || e.starting() {
		e.round = nil
		return
	}
	if e.round != nil && e.now-e.round.started < e.cfg.RetryTicks {
		return
	}
	epoch := max(e.p.Promised, e.p.Accepted.Epoch, e.p.Valid.Epoch, e.seenEpoch) + 1
	e.seenEpoch = epoch
	e.stats.Rounds++
	e.round = &round{epoch: epoch, started: e.now, promises: map[wire.NodeID]wire.View{}, accepts: map[wire.NodeID]bool{}}
	e.sendAll(wire.Message{Kind: wire.KindPrepare, View: wire.View{Epoch: epoch}}, true)
}

// Step handles one message. Malformed or stale input is counted and
// returned as an error; it changes nothing.
func (e *Election) Step(m wire.Message) error {
	if m.To != e.cfg.Node || m.From == 0 {
		e.stats.BadViews++
		return fmt.Errorf("%w: message for %d from %d at node %d", ErrBadView, m.To, m.From, e.cfg.Node)
	}
	if m.Kind == wire.KindHello {
		return e.hello(m)
	}
	if m.View.Epoch == 0 && m.Kind != wire.KindPromise && m.Kind != wire.KindAccepted {
		e.stats.BadViews++
		return fmt.Errorf("%w: %s without an epoch", ErrBadView, m.Kind)
	}
	e.seenEpoch = max(e.seenEpoch, m.View.Epoch, m.Ticket, m.Seq)
	mutant := e.cfg.Mutant&MutantTwoViewsPerEpoch != 0
	switch m.Kind {
	case wire.KindPrepare:
		ep := m.View.Epoch
		if ep > e.p.Promised || mutant && ep == e.p.Promised {
			e.p.Promised, e.persist = ep, true
			e.send(wire.Message{Kind: wire.KindPromise, From: e.cfg.Node, To: m.From, Ticket: ep, View: cloneView(e.p.Accepted)})
			return nil
		}
		e.stats.Rejections++
		e.send(wire.Message{Kind: wire.KindPromise, From: e.cfg.Node, To: m.From, Ticket: ep, Reject: true, Seq: e.p.Promised})

	case wire.KindPromise:
		r := e.round
		if r == nil || r.proposal != nil || m.Ticket != r.epoch {
			return nil // an answer to a round that is over
		}
		if m.Reject {
			e.round = nil // a higher epoch exists; the next tick tries above it
			return nil
		}
		if err := e.checkView(m.View, true); err != nil {
			return err
		}
		r.promises[m.From] = cloneView(m.View)
		if len(r.promises) < Quorum(e.cfg.ClusterSize) {
			return nil
		}
		// Every valid view was accepted by a quorum, which meets this one:
		// no valid view is newer than the highest view a promiser accepted.
		var high wire.View
		for _, id := range slices.Sorted(maps.Keys(r.promises)) {
			if v := r.promises[id]; v.Epoch > high.Epoch {
				high = v
			}
		}
		if high.Epoch > e.p.Valid.Epoch && e.cfg.Mutant&MutantPrevFromOwnView == 0 {
			// We cannot tell whether that view won. Propose it again as it
			// was (same leaders, same previous view): if it won, its leaders
			// carry on with their table; if not, it wins now. Either way
			// the previous view a view names was valid, so its leaders
			// hold the lock table to hand over.
			e.stats.Continuations++
			r.proposal = &wire.View{Epoch: r.epoch, Leaders: slices.Clone(high.Leaders),
				PrevEpoch: high.PrevEpoch, PrevLeaders: slices.Clone(high.PrevLeaders)}
		} else {
			cands := e.candidates()
			if len(cands) < e.wanted() {
				e.round = nil
				return nil
			}
			leaders := slices.Clone(cands[:e.wanted()])
			slices.Sort(leaders)
			prev := e.p.Valid
			r.proposal = &wire.View{Epoch: r.epoch, Leaders: leaders, PrevEpoch: prev.Epoch, PrevLeaders: slices.Clone(prev.Leaders)}
		}
		e.sendAll(wire.Message{Kind: wire.KindAccept, View: cloneView(*r.proposal)}, true)

	case wire.KindAccept:
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
		ep := m.View.Epoch
		if ep >= e.p.Promised && (e.p.Accepted.Epoch < ep || mutant) {
			e.p.Promised, e.p.Accepted, e.persist = ep, cloneView(m.View), true
			e.send(wire.Message{Kind: wire.KindAccepted, From: e.cfg.Node, To: m.From, View: wire.View{Epoch: ep}})
			return nil
		}
		e.stats.Rejections++
		e.send(wire.Message{Kind: wire.KindAccepted, From: e.cfg.Node, To: m.From, View: wire.View{Epoch: ep},
			Reject: true, Seq: e.p.Promised})

	case wire.KindAccepted:
		r := e.round
		if r == nil || r.proposal == nil || m.View.Epoch != r.epoch {
			return nil
		}
		if m.Reject {
			e.round = nil
			return nil
		}
		r.accepts[m.From] = true
		if len(r.accepts) >= Quorum(e.cfg.ClusterSize) {
			v := *r.proposal
			e.round = nil
			e.adopt(v)
			e.sendAll(wire.Message{Kind: wire.KindCommit, View: cloneView(v)}, false)
		}

	case wire.KindCommit:
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
		if m.View.Epoch <= e.p.Valid.Epoch {
			e.stats.StaleViews++
			return fmt.Errorf("%w: commit of epoch %d, valid is %d", ErrStaleView, m.View.Epoch, e.p.Valid.Epoch)
		}
		e.adopt(m.View)

	default:
		e.stats.BadViews++
		return fmt.Errorf("%w: kind %s is not the election's", ErrBadView, m.Kind)
	}
	return nil
}

func (e *Election) hello(m wire.Message) error {
	id, err := ParseID(m.Name)
	if err != nil {
		e.stats.BadIDs++
		return err
	}
	if m.View.Epoch > 0 {
		if err := e.checkView(m.View, false); err != nil {
			return err
		}
	}
	mb := e.members[m.From]
	if mb == nil {
		mb = &member{}
		e.members[m.From] = mb
	}
	mb.id, mb.heard = id, e.now
	if m.View.Epoch > e.p.Valid.Epoch {
		e.adopt(m.View) // how a late joiner learns the leaders
	}
	return nil
}

// checkView refuses views that cannot be right: no leaders where some are
// needed, too many, duplicates, or nodes nobody knows.
func (e *Election) checkView(v wire.View, emptyOK bool) error {
	bad := func(why string) error {
		e.stats.BadViews++
		return fmt.Errorf("%w: epoch %d: %s", ErrBadView, v.Epoch, why)
	}
	if v.Epoch == 0 {
		if emptyOK && len(v.Leaders) == 0 {
			return nil
		}
		return bad("no epoch")
	}
	if len(v.Leaders) == 0 || len(v.Leaders) > wire.MaxLeaders || v.PrevEpoch >= v.Epoch {
		return bad(fmt.Sprintf("%d leaders, previous epoch %d", len(v.Leaders), v.PrevEpoch))
	}
	for i, l := range v.Leaders {
		if slices.Contains(v.Leaders[:i], l) {
			return bad(fmt.Sprintf("leader %d twice", l))
		}
		if _, known := e.members[l]; !known && !slices.Contains(e.cfg.Peers, l) {
			return bad(fmt.Sprintf("unknown node %d", l))
		}
	}
	return nil
}

func (e *Election) adopt(v wire.View) {
	if v.Epoch <= e.p.Valid.Epoch {
		return
	}
	e.p.Valid, e.persist = cloneView(v), true
	nv := cloneView(v)
	e.view = &nv
}

// Status reports readiness: a valid view and a quorum of its leaders alive.
func (e *Election) Status() Status {
	s := Status{View: cloneView(e.p.Valid)}
	alive := e.aliveIDs()
	s.Coordinator = len(alive) > 0 && alive[0] == e.cfg.Node
	for _, id := range slices.Sorted(maps.Keys(e.members)) {
		m := Member{Node: id, Alive: e.alive(id), Leader: slices.Contains(e.p.Valid.Leaders, id)}
		m.ID, m.Off = e.members[id].id.String(), e.members[id].id.Priority == Off
		s.Members = append(s.Members, m)
	}
	switch {
	case e.p.Valid.Epoch == 0:
		why := e.blocked()
		if why == "" {
			why = "election in progress"
		}
		s.Reason = "no valid view: " + why
	default:
		up := 0
		for _, l := range e.p.Valid.Leaders {
			if e.alive(l) {
				up++
			}
		}
		if need := len(e.p.Valid.Leaders)/2 + 1; up < need {
			s.Reason = fmt.Sprintf("%d of %d leaders answer, %d needed", up, len(e.p.Valid.Leaders), need)
		} else {
			s.Ready = true
		}
	}
	return s
}

// HasReady reports whether Ready has anything to handle.
func (e *Election) HasReady() bool { return e.persist || len(e.msgs) > 0 || e.view != nil }

// Ready returns the output since the last Advance.
func (e *Election) Ready() Ready {
	rd := Ready{Messages: e.msgs[:len(e.msgs):len(e.msgs)], View: e.view}
	if e.persist {
		rd.Persist = e.p.clone()
	}
	e.handed, e.handedPersist, e.handedView = len(e.msgs), e.persist, e.view
	return rd
}

// Advance acknowledges the last Ready.
func (e *Election) Advance() {
	if e.msgs = e.msgs[e.handed:]; len(e.msgs) == 0 {
		e.msgs = nil // what Ready handed out stays intact
	}
	if e.handedPersist {
		e.persist = false
	}
	if e.view == e.handedView {
		e.view = nil
	}
	e.handed, e.handedPersist, e.handedView = 0, false, nil
}
