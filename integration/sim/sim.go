package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore"
)

// Options configure one run. The zero value of each field means its default.
type Options struct {
	Seed int64
	// Nodes in the cluster (default 5); the first three are the leaders.
	Nodes int
	// FaultTicks is how long clients and faults run (default 700).
	FaultTicks int64
	// SettleTicks is the bound, after faults stop, within which every
	// request must resolve and a fresh request per name must be granted
	// (default 500).
	SettleTicks int64
	// Names is how many object names clients fight over (default: drawn
	// from the seed, 1 to 3).
	Names int
	// ClientsPerNode (default: drawn from the seed, 1 to 4).
	ClientsPerNode int
	// NoFaults turns off loss, duplication, partitions and crashes.
	NoFaults bool
	// Patient clients use obtain timeouts of 300..500 ticks and never abandon,
	// so nobody leaves the line before it is served.
	Patient bool
	// Mutant breaks the core on purpose (mutation tests).
	Mutant core.Mutant
	// TraceLines is how many of the last trace lines a failure shows (default 60).
	TraceLines int
	// IdleBound, when set, fails the run as soon as a name stays free for
	// more ticks than this while a client with a timeout waits for it.
	IdleBound int64
	// TraceMessages adds every delivered message to the trace (slow).
	TraceMessages bool
	// Elect runs the election on every node: the leaders are elected, not
	// fixed, and change (with a handoff of the lock table) when leaders are
	// lost.
	Elect bool
	// ElectionMutant breaks the election on purpose (mutation tests).
	ElectionMutant election.Mutant
	// Modes makes clients take READ_ONLY and READ_WRITE_PRIORITY locks as
	// well as exclusive ones, admitted by the semaphore's policy.
	Modes bool
	// Admit replaces the admission policy (mutation tests).
	Admit core.Admit
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Nodes, 5)
	def(&o.TraceLines, 60)
	if o.FaultTicks <= 0 {
		o.FaultTicks = 700
	}
	if o.SettleTicks <= 0 {
		o.SettleTicks = 500
	}
}

// Result sums up a run that passed.
type Result struct {
	Grants, Failures, Crashes, Messages, Operations int
	// MaxIdleWait is the longest run of ticks in which a name was held by
	// nobody (not even a lease in its grace) while a client waited for it:
	// the cost of a hand-over, or a stall.
	MaxIdleWait int64
	// Views adopted by the lock cores, and Handoffs of the lock table.
	Views, Handoffs int
	// LeaderPairCrashes: two leaders crashed at once; HandoffCrashes: a
	// node crashed while taking a table over.
	LeaderPairCrashes, HandoffCrashes int
	// SharedGrants: reader grants made while another reader held the name.
	SharedGrants int
}

// add sums another run's figures into r (MaxIdleWait keeps the largest).
func (r *Result) add(o Result) {
	r.Grants += o.Grants
	r.Failures += o.Failures
	r.Crashes += o.Crashes
	r.Messages += o.Messages
	r.Operations += o.Operations
	r.MaxIdleWait = max(r.MaxIdleWait, o.MaxIdleWait)
	r.Views += o.Views
	r.Handoffs += o.Handoffs
	r.LeaderPairCrashes += o.LeaderPairCrashes
	r.HandoffCrashes += o.HandoffCrashes
	r.SharedGrants += o.SharedGrants
}

// Failure is a broken invariant, with the seed to replay it and the last
// lines of the trace.
type Failure struct {
	Test  string // the test that replays it; TestSim when empty
	Seed  int64
	Tick  int64
	What  string
	Trace []string
}

func (f *Failure) Error() string {
	test := cmp.Or(f.Test, "TestSim")
	return fmt.Sprintf("seed %d, tick %d: %s\nreplay: go test ./integration/sim -run '%s$' -seed=%d\nlast trace lines:\n  %s",
		f.Seed, f.Tick, f.What, test, f.Seed, strings.Join(f.Trace, "\n  "))
}

const tryTicks = 30

type disk struct {
	incarnation uint32
	durable     *core.Durable
	elected     *election.Persisted
}

type simNode struct {
	id    wire.NodeID
	core  *core.Node // nil while down
	elect *election.Election
	disk  disk
	// complete is the last handoff this node finished, as last checked.
	complete uint64
}

type envelope struct {
	at  int64
	seq int64 // tie-break, keeps ordering deterministic
	m   wire.Message
}

type clientState uint8

const (
	idle clientState = iota
	waiting
	holding
)

type client struct {
	id       int
	node     int
	state    clientState
	handle   wire.RequestID
	name     string
	mode     wire.Mode
	quiet    int64 // of a READ_WRITE_GENTLE request
	timeout  int64
	deadline int64 // last tick a grant may arrive
	expiry   int64 // holds while tick < expiry
	token    uint64
	epoch    uint64 // of the view its master was in when it was granted
	renewAt  int64  // tick of a pending Renew call, -1 if none
	op       int    // index of the open history operation, -1 if none
	probe    bool   // a settle-phase probe that must be granted
}

// Sim is one simulated cluster.
type Sim struct {
	o     Options
	rng   *rand.Rand
	tick  int64
	nodes []*simNode
	net   []envelope
	seq   int64
	cut   []bool // partition: side of each node, when partitioned
	split bool
	// slow is a directed link whose messages take 8..40 ticks until slowUntil:
	// the asymmetric delays that reorder one request's phases across replicas.
	slowFrom, slowTo wire.NodeID
	slowUntil        int64
	clients          []*client
	names            []string
	view             core.View

	lastToken       map[string]uint64
	lastWriterToken map[string]uint64
	lastReaderEvent map[string]int64 // tick a reader was last granted or stopped holding
	readerLimit     map[string]int   // per name, with Modes (0: none)
	idleWait        map[string]int64
	views           map[uint64]string // epoch -> the view adopted for it, as seen anywhere
	hist            history
	res             Result
	trace           []string
	traceAt         int
	fail            *Failure
	nonce           uint64
}

// Run simulates one cluster with the given options and returns what it saw,
// or the first broken invariant.
func Run(o Options) (Result, error) {
	s, err := run(o)
	return s.res, err
}

func run(o Options) (*Sim, error) {
	o.defaults()
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))
	if o.Names <= 0 {
		o.Names = 1 + rng.IntN(3)
	}
	if o.ClientsPerNode <= 0 {
		o.ClientsPerNode = 1 + rng.IntN(4)
	}
	s := &Sim{o: o, rng: rng, lastToken: map[string]uint64{}, lastWriterToken: map[string]uint64{}, lastReaderEvent: map[string]int64{}, readerLimit: map[string]int{},
		idleWait: map[string]int64{}, views: map[uint64]string{}, trace: make([]string, o.TraceLines)}
	leaders := []wire.NodeID{}
	for i := range o.Nodes {
		if i < 3 {
			leaders = append(leaders, wire.NodeID(i+1))
		}
	}
	s.view = core.View{Epoch: 1, Leaders: leaders}
	if o.Elect {
		s.view = core.View{}
	}
	for i := range o.Nodes {
		s.nodes = append(s.nodes, &simNode{id: wire.NodeID(i + 1), disk: disk{durable: core.NewDurable()}})
	}
	for i := range o.Names {
		s.names = append(s.names, fmt.Sprintf("https://site%d.example/", i))
		if o.Modes {
			s.readerLimit[s.names[i]] = rng.IntN(3)
		}
	}
	for i := range o.Nodes * o.ClientsPerNode {
		s.clients = append(s.clients, &client{id: i, node: i % o.Nodes, renewAt: -1, op: -1})
	}
	s.cut = make([]bool, o.Nodes)
	for i := range s.nodes {
		s.start(i)
	}
	end := o.FaultTicks + o.SettleTicks
	for s.tick = 1; s.tick <= end && s.fail == nil; s.tick++ {
		settling := s.tick > o.FaultTicks
		if s.tick == o.FaultTicks+1 {
			s.stopFaults()
		}
		if !settling && !o.NoFaults {
			s.faults()
		}
		for i, n := range s.nodes {
			if n.elect != nil && n.core != nil {
				n.elect.Tick()
				s.handleElection(i)
			}
			if n.core != nil {
				n.core.Tick()
				s.handle(i)
			}
		}
		s.expireLeases()
		s.stepTick(settling)
		s.measureIdleWait()
		if settling {
			s.settle()
		}
	}
	if s.fail == nil {
		s.final()
	}
	if s.fail == nil {
		s.checkHistory()
	}
	if s.fail != nil {
		return s, s.fail
	}
	s.res.Operations = len(s.hist.ops)
	s.res.Views = len(s.views)
	for _, n := range s.nodes {
		if n.core != nil {
			s.res.Handoffs += int(n.core.Stats().Handoffs)
		}
	}
	return s, nil
}

func (s *Sim) tracef(format string, args ...any) {
	s.trace[s.traceAt%len(s.trace)] = fmt.Sprintf("t%d ", s.tick) + fmt.Sprintf(format, args...)
	s.traceAt++
}

func (s *Sim) failf(format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.fail = &Failure{Seed: s.o.Seed, Tick: s.tick, What: fmt.Sprintf(format, args...)}
	if s.o.Elect {
		s.fail.Test = "TestSimElected"
	}
	for i := range len(s.trace) {
		if l := s.trace[(s.traceAt+i)%len(s.trace)]; l != "" {
			s.fail.Trace = append(s.fail.Trace, l)
		}
	}
}

func (s *Sim) chance(p float64) bool { return s.rng.Float64() < p }

func (s *Sim) start(i int) {
	n := s.nodes[i]
	n.disk.incarnation++
	peers := make([]wire.NodeID, len(s.nodes))
	for j := range s.nodes {
		peers[j] = wire.NodeID(j + 1)
	}
	admit := s.o.Admit
	if admit == nil && s.o.Modes {
		admit = semaphore.Admit
	}
	c, err := core.New(core.Config{ID: n.id, Incarnation: n.disk.incarnation, View: s.view, Peers: peers,
		TryTicks: tryTicks, Mutant: s.o.Mutant, Admit: admit}, n.disk.durable.Clone())
	if err != nil {
		s.failf("start node %d: %v", n.id, err)
		return
	}
	n.core = c
	s.tracef("node %d starts, incarnation %d", n.id, n.disk.incarnation)
	if s.o.Elect {
		s.nonce++
		e, err := election.New(election.Config{Node: n.id, Bootstrap: peers, Peers: peers, Mutant: s.o.ElectionMutant,
			Incarnation: n.disk.incarnation, Nonce: s.nonce, ID: election.ID{Priority: uint8(1 + s.rng.IntN(14)), Random: s.rng.Uint32(), Address: fmt.Sprintf("sim:%d", n.id),
				PID: n.disk.incarnation, Name: fmt.Sprintf("n%d", n.id)}}, n.disk.elected)
		if err != nil {
			s.failf("start election %d: %v", n.id, err)
			return
		}
		n.elect = e
		s.handleElection(i)
	}
	s.handle(i)
}

// handleElection applies node i's election Ready: persist, send, then give
// a new valid view to the lock core.
func (s *Sim) handleElection(i int) {
	n := s.nodes[i]
	for n.core != nil && n.elect.HasReady() {
		rd := n.elect.Ready()
		if rd.Persist != nil {
			n.disk.elected = rd.Persist
		}
		for _, m := range rd.Messages {
			s.post(m)
		}
		n.elect.Advance()
		if rd.View != nil {
			v := core.ViewOf(*rd.View)
			key := fmt.Sprintf("%v after %d%v", v.Leaders, v.PrevEpoch, v.PrevLeaders)
			if old, ok := s.views[v.Epoch]; ok && old != key {
				s.failf("two views for epoch %d: %s and %s", v.Epoch, old, key)
				return
			}
			s.views[v.Epoch] = key
			s.tracef("node %d adopts view %d: %s", n.id, v.Epoch, key)
			n.core.SetView(v)
			s.handle(i)
		}
	}
}

func (s *Sim) crash(i int) {
	n := s.nodes[i]
	n.core = nil
	s.res.Crashes++
	s.tracef("node %d crashes", n.id)
	for _, c := range s.clients {
		if c.node == i && c.state != idle {
			s.clientGone(c, "its node crashed")
		}
	}
}

// handle applies node i's Ready: persist, send, deliver events, advance. With
// faults on, the node may crash after persisting and sending only a prefix.
func (s *Sim) handle(i int) {
	for n := s.nodes[i]; n.core != nil && n.core.HasReady(); {
		rd := n.core.Ready()
		n.disk.durable.Apply(rd.Persist)
		msgs := rd.Messages
		crashing := !s.o.NoFaults && s.tick <= s.o.FaultTicks && len(msgs) > 0 && s.chance(0.002) && s.downCount() < 2
		if crashing {
			msgs = msgs[:s.rng.IntN(len(msgs))]
		}
		for _, m := range msgs {
			s.post(m)
		}
		if crashing {
			s.tracef("node %d crashes while sending (%d of %d sent)", n.id, len(msgs), len(rd.Messages))
			s.crash(i)
			return
		}
		for _, e := range rd.Events {
			s.onEvent(i, e)
		}
		n.core.Advance()
	}
	s.checkHandoff(i)
}

// checkHandoff: when a leader has just taken a view's table over from the
// previous view, every lease a client still holds that was granted in that
// previous view or before must be in it, with the client's token. (A lease
// granted later, in the new view or in one that the new view continues with
// the same leaders, is only promised at a quorum of them.)
func (s *Sim) checkHandoff(i int) {
	n := s.nodes[i]
	if n.core == nil {
		return
	}
	h := n.core.Handoff()
	if h.Complete == n.complete {
		return
	}
	n.complete = h.Complete
	v := n.core.View()
	if !n.core.Serving() || v.Epoch != h.Complete {
		return
	}
	for _, c := range s.clients {
		if !c.holds(s.tick) || c.epoch > v.PrevEpoch {
			continue
		}
		entries, _ := n.core.Table(c.name)
		found := false
		for _, e := range entries {
			found = found || e.Ticket == c.token
		}
		if !found {
			s.failf("node %d took view %d over without the lease of client %d on %s (token %d, granted in epoch %d)",
				n.id, h.Complete, c.id, c.name, c.token, c.epoch)
			return
		}
	}
}

func (s *Sim) delay() int64 {
	if !s.o.NoFaults && s.tick <= s.o.FaultTicks && s.chance(0.05) {
		return 1 + s.rng.Int64N(20)
	}
	return 1 + s.rng.Int64N(3)
}

func (s *Sim) post(m wire.Message) {
	s.res.Messages++
	s.seq++
	d := s.delay()
	if s.tick < s.slowUntil && m.From == s.slowFrom && m.To == s.slowTo {
		d = 8 + s.rng.Int64N(33)
	}
	s.net = append(s.net, envelope{at: s.tick + d, seq: s.seq, m: m})
}

func (s *Sim) downCount() int {
	k := 0
	for _, n := range s.nodes {
		if n.core == nil {
			k++
		}
	}
	return k
}

func (s *Sim) faults() {
	if s.o.Elect && s.electionFaults() {
		return
	}
	switch {
	case s.chance(0.006) && s.downCount() < 2:
		s.crash(s.rng.IntN(len(s.nodes)))
	case s.chance(0.03):
		for i, n := range s.nodes {
			if n.core == nil {
				s.start(i)
				break
			}
		}
	case !s.split && s.chance(0.004):
		s.split = true
		for i := range s.cut {
			s.cut[i] = s.chance(0.5)
		}
		s.tracef("partition %v", s.cut)
	case s.split && s.chance(0.03):
		s.split = false
		s.tracef("heal")
	case s.tick >= s.slowUntil && s.chance(0.02):
		s.slowFrom = wire.NodeID(1 + s.rng.IntN(len(s.nodes)))
		s.slowTo = wire.NodeID(1 + s.rng.IntN(3)) // towards a leader
		s.slowUntil = s.tick + 20 + s.rng.Int64N(60)
		s.tracef("link %d->%d slow until %d", s.slowFrom, s.slowTo, s.slowUntil)
	}
}

// electionFaults are the faults that matter to views: two leaders of the
// current view crashing at once, and a leader crashing in the middle of
// taking a table over.
func (s *Sim) electionFaults() bool {
	if s.downCount() > 0 {
		return false
	}
	var view core.View
	for _, n := range s.nodes {
		if v := n.core.View(); v.Epoch > view.Epoch {
			view = v
		}
	}
	switch {
	case len(view.Leaders) == 3 && s.chance(0.002):
		for _, k := range s.rng.Perm(3)[:2] {
			s.tracef("leader %d of view %d crashes with another", view.Leaders[k], view.Epoch)
			s.crash(int(view.Leaders[k]) - 1)
		}
		s.res.LeaderPairCrashes++
		return true
	case s.chance(0.01):
		for i, n := range s.nodes {
			if len(n.core.Handoff().Pending) > 0 {
				s.tracef("node %d crashes while taking a table over", n.id)
				s.crash(i)
				s.res.HandoffCrashes++
				return true
			}
		}
	}
	return false
}

func (s *Sim) stopFaults() {
	s.split, s.slowUntil = false, 0
	for i, n := range s.nodes {
		if n.core == nil {
			s.start(i)
		}
	}
	s.tracef("faults stop")
}

// takeDue removes from *net, and returns in sending order, the envelopes
// due by tick.
func takeDue(net *[]envelope, tick int64) []envelope {
	var due []envelope
	keep := (*net)[:0]
	for _, e := range *net {
		if e.at <= tick {
			due = append(due, e)
		} else {
			keep = append(keep, e)
		}
	}
	*net = keep
	return due
}

// stepTick runs this tick's deliveries and client actions in random order.
func (s *Sim) stepTick(settling bool) {
	due := takeDue(&s.net, s.tick)
	actions := len(due) + len(s.clients)
	order := s.rng.Perm(actions)
	faulty := !s.o.NoFaults && !settling
	for _, k := range order {
		if s.fail != nil {
			return
		}
		if k >= len(due) {
			s.clientAct(s.clients[k-len(due)], settling)
			continue
		}
		e := due[k]
		to := int(e.m.To) - 1
		if to < 0 || to >= len(s.nodes) || s.nodes[to].core == nil {
			continue
		}
		if faulty && e.m.From != e.m.To {
			if s.split && s.cut[int(e.m.From)-1] != s.cut[to] || s.chance(0.03) {
				continue
			}
			if s.chance(0.03) {
				s.seq++
				s.net = append(s.net, envelope{at: s.tick + s.delay(), seq: s.seq, m: e.m})
			}
		}
		if s.o.TraceMessages {
			s.tracef("deliver %v", e.m)
		}
		if e.m.Kind.Election() {
			if s.nodes[to].elect != nil {
				_ = s.nodes[to].elect.Step(e.m)
				s.handleElection(to)
			}
			continue
		}
		if el := s.nodes[to].elect; el != nil && !el.CheckedIn() && e.m.Kind == wire.KindSnapshotRequest {
			continue // the runtime hands no table over until the node checked in
		}
		if err := s.nodes[to].core.Step(e.m); errors.Is(err, core.ErrBadMessage) {
			s.failf("node %d rejected a valid message %v: %v", to+1, e.m, err)
			return
		}
		s.handle(to)
		s.checkInvariants()
	}
}

func (s *Sim) clientAct(c *client, settling bool) {
	n := s.nodes[c.node].core
	if n == nil {
		return
	}
	switch c.state {
	case idle:
		if settling || !s.chance(0.08) {
			return
		}
		s.acquire(c, s.names[s.rng.IntN(len(s.names))], false)
	case waiting:
		if !settling && !s.o.Patient && s.chance(0.005) {
			s.tracef("client %d abandons %s", c.id, c.handle)
			if err := n.Abandon(c.handle); err != nil {
				s.failf("abandon: %v", err)
				return
			}
			s.finishOp(c, false, 0)
			c.state = idle
			s.handle(c.node)
		}
	case holding:
		switch {
		case s.chance(0.06) || c.token == 0 && s.chance(0.2):
			s.tracef("client %d releases %s token %d", c.id, c.name, c.token)
			s.endHold(c, "release")
			if err := n.Release(c.handle); err != nil {
				s.failf("release of a held lease: %v", err)
				return
			}
			s.handle(c.node)
		case c.renewAt < 0 && c.token != 0 && s.chance(0.02):
			if err := n.Renew(c.handle); err == nil {
				c.renewAt = s.tick
				s.handle(c.node)
			}
		}
	}
}

func (s *Sim) acquire(c *client, name string, probe bool) {
	a := core.Acquire{Name: name, Mode: wire.ModeExclusive, Duration: 10 + s.rng.Int64N(50), Grace: s.rng.Int64N(10)}
	if s.o.Modes && !probe {
		switch r := s.rng.IntN(20); {
		case r < 11:
			a.Mode, a.Limit = semaphore.ReadOnly, s.readerLimit[name]
		case r < 14:
			a.Mode = semaphore.ReadWritePriority
		case r < 16:
			a.Mode = semaphore.ReadWrite
		case r < 18:
			a.Mode, a.Quiet = semaphore.ReadWriteGentle, 10+s.rng.Int64N(30)
		}
	}
	if probe {
		a.Timeout = s.o.SettleTicks / 2
	} else if s.o.Patient {
		a.Timeout = 300 + s.rng.Int64N(200)
	} else if !s.chance(0.2) {
		a.Timeout = 5 + s.rng.Int64N(120)
	}
	id, err := s.nodes[c.node].core.Acquire(a)
	if err != nil {
		s.failf("acquire refused: %v", err)
		return
	}
	wait := a.Timeout
	if wait == 0 {
		wait = tryTicks
	}
	*c = client{id: c.id, node: c.node, state: waiting, handle: id, name: name, mode: a.Mode, quiet: a.Quiet, timeout: a.Timeout,
		deadline: s.tick + wait, renewAt: -1, probe: probe}
	c.op = s.hist.call(c.id, name, opAcquire, 0, a.Mode != semaphore.ReadOnly)
	s.tracef("client %d on node %d acquires %s %s as %s (timeout %d, duration %d)", c.id, c.node+1, name, a.Mode, id, a.Timeout, a.Duration)
	s.handle(c.node)
}

func (s *Sim) onEvent(node int, e core.Event) {
	var c *client
	for _, x := range s.clients {
		if x.node == node && x.handle == e.Req && x.state != idle {
			c = x
		}
	}
	if c == nil {
		return // the client released or abandoned it already
	}
	s.tracef("node %d event %s %s code=%s token=%d for client %d", node+1, e.Kind, e.Name, e.Code, e.Token, c.id)
	switch e.Kind {
	case wire.EventGranted:
		if c.state != waiting {
			s.failf("client %d granted while %v", c.id, c.state)
			return
		}
		if s.tick > c.deadline {
			s.failf("client %d granted at %d after its obtain deadline %d", c.id, s.tick, c.deadline)
			return
		}
		// Every token is above every earlier writer's. A hard writer's is
		// above every earlier grant's; readers that passed a waiting soft
		// writer may hold higher tokens than it, by design.
		last := s.lastWriterToken[c.name]
		if c.mode == semaphore.ReadWritePriority || c.mode == semaphore.Exclusive {
			last = s.lastToken[c.name]
		}
		if e.Token <= last {
			s.failf("fencing token %d of a %s grant on %s is not above the previous %d", e.Token, c.mode, c.name, last)
			return
		}
		s.lastToken[c.name] = max(s.lastToken[c.name], e.Token)
		if c.mode == semaphore.ReadWriteGentle {
			if since := s.tick - s.lastReaderEvent[c.name]; since < c.quiet {
				s.failf("gentle writer client %d granted %s %d ticks after a reader came or went, quiet period %d",
					c.id, c.name, since, c.quiet)
				return
			}
		}
		if c.mode != semaphore.ReadOnly {
			s.lastWriterToken[c.name] = e.Token
		} else {
			s.lastReaderEvent[c.name] = s.tick
			s.checkReaderBehindWriters(c, e.Token)
			for _, o := range s.clients {
				if o != c && o.name == c.name && o.mode == semaphore.ReadOnly && o.holds(s.tick) {
					s.res.SharedGrants++
					break
				}
			}
		}
		s.idleWait[c.name] = 0 // a grant is progress, even one released at once
		c.state, c.token = holding, e.Token
		c.epoch = s.nodes[node].core.View().Epoch
		call := s.tick - e.Elapsed // same node: the call's tick
		c.expiry = semaphore.LeaseOf(e, c.mode, call).Expiry
		s.res.Grants++
		s.finishOp(c, true, e.Token)
		s.checkInvariants()
	case wire.EventFailed:
		if c.state != waiting {
			s.failf("client %d failed while %v", c.id, c.state)
			return
		}
		if c.probe {
			s.failf("settle probe of client %d on %s failed with %s after faults stopped", c.id, c.name, e.Code)
			return
		}
		s.res.Failures++
		s.finishOp(c, false, 0)
		c.state = idle
	case wire.EventRenewed:
		// A lease the client already let lapse stays lapsed: it stopped
		// acting under it, and its history says so.
		if c.state == holding && c.renewAt >= 0 && c.token != 0 {
			c.expiry = c.renewAt + e.Duration
			c.renewAt = -1
		}
	case wire.EventRenewFailed:
		c.renewAt = -1
	case wire.EventUnlocked:
		if c.state == holding {
			s.endHold(c, "unlocked: "+e.Code.String())
		}
		c.state = idle
	}
}

// measureIdleWait counts, per name, the ticks it stays free while a client
// that asked long enough ago to have been served waits for it.
func (s *Sim) measureIdleWait() {
	for _, name := range s.names {
		held, starving := false, false
		for _, c := range s.clients {
			if c.name != name {
				continue
			}
			held = held || c.state == holding
			starving = starving || c.state == waiting && c.timeout > 0
		}
		if held || !starving {
			s.idleWait[name] = 0
			continue
		}
		s.idleWait[name]++
		s.res.MaxIdleWait = max(s.res.MaxIdleWait, s.idleWait[name])
		if s.o.IdleBound > 0 && s.idleWait[name] > s.o.IdleBound {
			s.failf("%s stayed free %d ticks while a client waited for it", name, s.idleWait[name])
		}
	}
}

// expireLeases ends holds whose client-side expiry passed.
func (s *Sim) expireLeases() {
	for _, c := range s.clients {
		if c.state == holding && s.tick >= c.expiry && c.op < 0 {
			s.closeHold(c)
		}
	}
}

func (s *Sim) endHold(c *client, why string) {
	s.closeHold(c)
	c.state = idle
	s.tracef("client %d stops holding %s (%s)", c.id, c.name, why)
}

// closeHold records the end of the client's hold once.
func (s *Sim) closeHold(c *client) {
	if c.token != 0 && c.mode == semaphore.ReadOnly {
		s.lastReaderEvent[c.name] = s.tick
	}
	if c.token != 0 {
		s.hist.instant(c.id, c.name, opEnd, c.token, c.mode != semaphore.ReadOnly)
		c.token = 0
	}
}

func (s *Sim) clientGone(c *client, why string) {
	if c.state == waiting {
		if c.probe {
			c.probe = false
		}
		s.finishOp(c, false, 0)
	} else {
		s.closeHold(c)
	}
	c.state = idle
	s.tracef("client %d gone: %s", c.id, why)
}

func (s *Sim) finishOp(c *client, ok bool, token uint64) {
	if c.op >= 0 {
		s.hist.ret(c.op, ok, token)
		c.op = -1
	}
}

func (c *client) holds(tick int64) bool { return c.state == holding && c.token != 0 && tick < c.expiry }

// checkInvariants: per name, at most one writer holds, and no reader
// holds beside a writer.
func (s *Sim) checkInvariants() {
	for _, name := range s.names {
		var writers, readers []string
		for _, c := range s.clients {
			if c.name == name && c.holds(s.tick) {
				who := fmt.Sprintf("client %d (%s, token %d, expiry %d)", c.id, c.mode, c.token, c.expiry)
				if c.mode == semaphore.ReadOnly {
					readers = append(readers, who)
				} else {
					writers = append(writers, who)
				}
			}
		}
		if len(writers) > 1 || len(writers) == 1 && len(readers) > 0 {
			s.failf("%s held by writers %s and readers %s at once", name, strings.Join(writers, ", "), strings.Join(readers, ", "))
		}
		if l := s.readerLimit[name]; l > 0 && len(readers) > l {
			s.failf("%s held by %d readers, limit %d: %s", name, len(readers), l, strings.Join(readers, ", "))
		}
	}
}

// checkReaderBehindWriters: a reader is never granted while a hard writer
// (priority, exclusive) whose ticket comes before its own waits with that
// ticket durable at a quorum. Soft writers let readers pass: by design.
func (s *Sim) checkReaderBehindWriters(c *client, token uint64) {
	for _, n := range s.nodes {
		if n.core == nil {
			continue
		}
		for _, r := range n.core.Requests() {
			hard := r.Mode == semaphore.ReadWritePriority || r.Mode == semaphore.Exclusive
			if r.Name == c.name && hard && r.Phase == "waiting" && r.Ticket < token {
				s.failf("reader client %d granted %s with token %d while writer %s waits with ticket %d",
					c.id, c.name, token, r.Handle, r.Ticket)
				return
			}
		}
	}
}

// settle runs after the faults stop: every request must resolve within its
// timeout plus a bound, and one probe per name must be granted.
func (s *Sim) settle() {
	since := s.tick - s.o.FaultTicks
	for _, c := range s.clients {
		if c.state == waiting && s.tick > c.deadline+20 {
			s.failf("liveness: client %d still waits on %s %d ticks after its deadline", c.id, c.name, s.tick-c.deadline)
			return
		}
		if c.state == holding && s.tick >= c.expiry+1 {
			// Its lease is over for the client; let the core's UNLOCKED come.
			continue
		}
	}
	if since == 200 {
		for _, name := range s.names {
			c := s.pickProbe()
			if c == nil {
				s.failf("no client left to probe %s", name)
				return
			}
			s.acquire(c, name, true)
		}
	}
}

// pickProbe finds an idle client, or frees a holding one.
func (s *Sim) pickProbe() *client {
	for _, c := range s.clients {
		if c.state == idle {
			return c
		}
	}
	for _, c := range s.clients {
		if c.state == holding {
			s.endHold(c, "release before probe")
			_ = s.nodes[c.node].core.Release(c.handle)
			s.handle(c.node)
			return c
		}
	}
	return nil
}

func (s *Sim) final() {
	for _, c := range s.clients {
		if c.probe && c.state == waiting {
			s.failf("liveness: probe of client %d on %s not granted within %d ticks of faults stopping", c.id, c.name, s.o.SettleTicks)
			return
		}
	}
}
