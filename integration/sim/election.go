package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// ElectionOptions configure one run of the election simulator. Zero values
// mean defaults.
type ElectionOptions struct {
	Seed int64
	// Nodes in the cluster (default: drawn from the seed, 3 to 9).
	Nodes int
	// FaultTicks is how long faults run (default 600); then SettleTicks
	// (default 300) in which every node must become ready on one view.
	FaultTicks, SettleTicks int64
	Mutant                  election.Mutant
}

// ElectionResult sums up a run that passed.
type ElectionResult struct {
	ValidViews, Crashes, Messages int
	// Continuations counts rounds that proposed an accepted view again.
	Continuations int
}

type electionNode struct {
	e         *election.Election // nil while down
	persisted *election.Persisted
	off       bool
	adopted   uint64 // highest epoch adopted in this life
	inc       uint32 // the store's incarnation counter
}

type electionSim struct {
	o       ElectionOptions
	rng     *rand.Rand
	tick    int64
	nodes   []*electionNode
	net     []envelope
	seq     int64
	cut     map[[2]int]bool // directed links that drop everything
	valid   map[uint64]wire.View
	accepts map[string]map[int]bool // view key -> nodes that persisted it as accepted
	res     ElectionResult
	trace   []string
	fail    *Failure
	nonce   uint64
}

// RunElection simulates the election of a cluster with one seeded PRNG:
// random delays, loss, duplication, crashes and restarts from what was
// persisted, clean partitions and one-way link cuts. After every step it
// checks, from what the nodes persisted (not from what coordinators claim):
// a view is valid once a quorum persisted it as accepted; at most one view
// is valid per epoch; every valid view's previous view is at least as
// recent as every valid view of a lower epoch (so its leaders hold the
// lock table); nodes adopt only valid views, with growing epochs; no off
// node leads. After the faults stop every node must be ready on one view.
func RunElection(o ElectionOptions) (ElectionResult, error) {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0xe1ec7))
	if o.Nodes <= 0 {
		o.Nodes = 3 + rng.IntN(7)
	}
	if o.FaultTicks <= 0 {
		o.FaultTicks = 600
	}
	if o.SettleTicks <= 0 {
		o.SettleTicks = 300
	}
	s := &electionSim{o: o, rng: rng, cut: map[[2]int]bool{}, valid: map[uint64]wire.View{}, accepts: map[string]map[int]bool{}}
	// Some nodes are off, leaving at least three candidates (or all nodes).
	offs := 0
	for range o.Nodes {
		n := &electionNode{}
		if o.Nodes-offs > 3 && rng.IntN(5) == 0 {
			n.off = true
			offs++
		}
		s.nodes = append(s.nodes, n)
	}
	for i := range s.nodes {
		s.start(i)
	}
	for s.tick = 1; s.tick <= o.FaultTicks+o.SettleTicks && s.fail == nil; s.tick++ {
		if s.tick <= o.FaultTicks {
			s.faults()
		} else if s.tick == o.FaultTicks+1 {
			clear(s.cut)
			for i, n := range s.nodes {
				if n.e == nil {
					s.start(i)
				}
			}
		}
		s.deliver()
		for i, n := range s.nodes {
			if n.e != nil {
				n.e.Tick()
				s.ready(i)
			}
		}
	}
	if s.fail == nil {
		s.settled()
	}
	if s.fail != nil {
		return s.res, s.fail
	}
	s.res.ValidViews = len(s.valid)
	for _, n := range s.nodes {
		s.res.Continuations += int(n.e.Stats().Continuations)
	}
	return s.res, nil
}

func (s *electionSim) failf(format string, args ...any) {
	if s.fail == nil {
		s.fail = &Failure{Test: "TestElection", Seed: s.o.Seed, Tick: s.tick, What: fmt.Sprintf(format, args...), Trace: s.trace}
	}
}

func (s *electionSim) tracef(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("t%d ", s.tick)+fmt.Sprintf(format, args...))
	if len(s.trace) > 40 {
		s.trace = s.trace[1:]
	}
}

func (s *electionSim) start(i int) {
	n := s.nodes[i]
	prio := uint8(1 + s.rng.IntN(14))
	if n.off {
		prio = election.Off
	}
	peers := make([]wire.NodeID, len(s.nodes))
	for j := range peers {
		peers[j] = wire.NodeID(j + 1)
	}
	n.inc++
	s.nonce++
	e, err := election.New(election.Config{Node: wire.NodeID(i + 1), Bootstrap: peers, Peers: peers, Mutant: s.o.Mutant,
		Incarnation: n.inc, Nonce: s.nonce,
		ID: election.ID{Priority: prio, Random: s.rng.Uint32(), Address: fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+i), PID: uint32(i), Name: fmt.Sprintf("n%d", i+1)}},
		n.persisted)
	if err != nil {
		s.failf("start: %v", err)
		return
	}
	n.e, n.adopted = e, 0
	s.tracef("node %d starts (priority %d)", i+1, prio)
	s.ready(i)
}

func (s *electionSim) faults() {
	down := 0
	for _, n := range s.nodes {
		if n.e == nil {
			down++
		}
	}
	switch {
	case s.rng.Float64() < 0.01 && down < len(s.nodes)/2:
		i := s.rng.IntN(len(s.nodes))
		if s.nodes[i].e != nil {
			s.nodes[i].e = nil
			s.res.Crashes++
			s.tracef("node %d crashes", i+1)
		}
	case down > 0 && s.rng.Float64() < 0.03:
		for i, n := range s.nodes {
			if n.e == nil {
				s.start(i)
				break
			}
		}
	case s.rng.Float64() < 0.005:
		// A clean partition: a random side against the rest.
		side := map[int]bool{}
		for i := range s.nodes {
			side[i] = s.rng.IntN(2) == 0
		}
		for a := range s.nodes {
			for b := range s.nodes {
				if side[a] != side[b] {
					s.cut[[2]int{a, b}] = true
				}
			}
		}
		s.tracef("partition %v", side)
	case s.rng.Float64() < 0.02:
		// One link goes down one way: connectivity stops being transitive.
		a, b := s.rng.IntN(len(s.nodes)), s.rng.IntN(len(s.nodes))
		s.cut[[2]int{a, b}] = true
		s.tracef("link %d->%d cut", a+1, b+1)
	case len(s.cut) > 0 && s.rng.Float64() < 0.03:
		clear(s.cut)
		s.tracef("heal")
	}
}

func (s *electionSim) deliver() {
	due := takeDue(&s.net, s.tick)
	faulty := s.tick <= s.o.FaultTicks
	for _, k := range s.rng.Perm(len(due)) {
		m := due[k].m
		from, to := int(m.From)-1, int(m.To)-1
		n := s.nodes[to]
		if n.e == nil || s.cut[[2]int{from, to}] || faulty && s.rng.Float64() < 0.05 {
			continue
		}
		if faulty && s.rng.Float64() < 0.03 {
			s.post(m)
		}
		_ = n.e.Step(m)
		s.ready(to)
		if s.fail != nil {
			return
		}
	}
}

func (s *electionSim) post(m wire.Message) {
	s.seq++
	s.res.Messages++
	d := 1 + s.rng.Int64N(3)
	if s.tick <= s.o.FaultTicks && s.rng.Float64() < 0.05 {
		d += s.rng.Int64N(30)
	}
	s.net = append(s.net, envelope{at: s.tick + d, seq: s.seq, m: m})
}

func viewKey(v wire.View) string {
	return fmt.Sprintf("%d%v/%d%v", v.Epoch, v.Leaders, v.PrevEpoch, v.PrevLeaders)
}

func (s *electionSim) ready(i int) {
	n := s.nodes[i]
	for n.e != nil && n.e.HasReady() {
		rd := n.e.Ready()
		if p := rd.Persist; p != nil {
			n.persisted = p
			if p.Accepted.Epoch > 0 {
				s.accepted(i, p.Accepted)
			}
		}
		for _, m := range rd.Messages {
			s.post(m)
		}
		if v := rd.View; v != nil {
			s.adopt(i, *v)
		}
		n.e.Advance()
	}
}

// accepted records a durable accept and checks the valid views it makes.
func (s *electionSim) accepted(i int, v wire.View) {
	key := viewKey(v)
	if s.accepts[key] == nil {
		s.accepts[key] = map[int]bool{}
	}
	s.accepts[key][i] = true
	votes := map[wire.NodeID]bool{}
	for j := range s.accepts[key] {
		votes[wire.NodeID(j+1)] = true
	}
	if !election.Valid(v, votes, 0) {
		return
	}
	if old, ok := s.valid[v.Epoch]; ok {
		if viewKey(old) != key {
			s.failf("two valid views for epoch %d: %s and %s", v.Epoch, viewKey(old), key)
		}
		return
	}
	for e, w := range s.valid {
		if e < v.Epoch && !covers(v, w) {
			s.failf("valid view %s takes its table from epoch %d, but epoch %d was valid: %s", key, v.PrevEpoch, e, viewKey(w))
		}
		if e > v.Epoch && !covers(w, v) {
			s.failf("valid view %s skips the valid view %s", viewKey(w), key)
		}
	}
	if v.PrevEpoch > 0 {
		if p, ok := s.valid[v.PrevEpoch]; !ok || !slices.Equal(p.Leaders, v.PrevLeaders) {
			s.failf("valid view %s names a previous view that is not valid", key)
		}
	}
	for _, l := range v.Leaders {
		if s.nodes[l-1].off {
			s.failf("view %s makes the off node %d a leader", key, l)
		}
	}
	if want := min(3, len(v.Members)); len(v.Leaders) != want {
		s.failf("view %s has %d leaders, want %d", key, len(v.Leaders), want)
	}
	s.valid[v.Epoch] = v
	s.tracef("valid: %s", key)
}

// covers reports whether later, a valid view, knows where the lock table of
// the earlier valid view is: it takes its table from earlier or a newer
// view, or it carries earlier's leaders and previous view unchanged.
func covers(later, earlier wire.View) bool {
	return later.PrevEpoch >= earlier.Epoch ||
		slices.Equal(later.Leaders, earlier.Leaders) && later.PrevEpoch == earlier.PrevEpoch
}

func (s *electionSim) adopt(i int, v wire.View) {
	n := s.nodes[i]
	if w, ok := s.valid[v.Epoch]; !ok || viewKey(w) != viewKey(v) {
		s.failf("node %d adopted %s, which no quorum accepted", i+1, viewKey(v))
	}
	if v.Epoch <= n.adopted {
		s.failf("node %d adopted epoch %d after epoch %d", i+1, v.Epoch, n.adopted)
	}
	n.adopted = v.Epoch
}

func (s *electionSim) settled() {
	var views []string
	for i, n := range s.nodes {
		st := n.e.Status()
		if !st.Ready {
			s.failf("liveness: node %d not ready %d ticks after faults stopped: %s", i+1, s.o.SettleTicks, st.Reason)
			return
		}
		views = append(views, viewKey(st.View))
	}
	slices.Sort(views)
	if views = slices.Compact(views); len(views) != 1 {
		s.failf("liveness: nodes settled on different views: %s", strings.Join(views, " "))
	}
}
