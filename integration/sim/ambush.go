package sim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// An ambush (Options.Ambush) is a set of faults around one node, sprung
// by a message that a safety rule is for: a soft writer's activation
// mark, a renewal, a confirmation, an operator's force-unlock. For a while
// each way of each of the node's links goes wrong in its own way, chosen
// at random: its messages late, or, from a few ticks on (once the message
// that sprang it went through), lost. The rules guard exactly such
// meetings (a late answer to an earlier renewal that the next renewal
// meets, a mark that arrives after a reader's ticket, a force-unlock one
// leader never hears of), which faults drawn independently of the
// protocol rarely line up.
type ambush struct {
	node wire.NodeID
	// from and until are the ticks the faults are on; losses start at
	// lostFrom.
	from, lostFrom, until int64
	// to and back are the faults of the node's messages to each other
	// node, and of that node's messages back.
	to, back map[wire.NodeID]linkFault
}

type linkFault uint8

const (
	linkFine linkFault = iota
	linkLate           // messages arrive 10 to 40 ticks late
	linkLost           // messages are lost
	// linkReportsLost: a leader's reports to the node are lost, its
	// answers go through. A full send queue drops whatever frame meets
	// it, and reports are most of a busy leader's frames.
	linkReportsLost
)

// maxAmbushes bounds the ambushes on at once.
const maxAmbushes = 2

// ambushTargets says whether m may spring an ambush, and around which
// nodes: the sender, and for an operator's force-unlock the master of the
// request it forces as well.
func ambushTargets(m wire.Message) []wire.NodeID {
	switch {
	case m.Kind == wire.KindActivate && !m.Reject, m.Kind == wire.KindRenew, m.Kind == wire.KindConfirm:
		return []wire.NodeID{m.From}
	case m.Kind == wire.KindRelease && m.From != m.Req.Node:
		return []wire.NodeID{m.From, m.Req.Node}
	}
	return nil
}

// springAmbush may set an ambush around the nodes m is about (see
// ambushTargets), unless enough are on already.
func (s *Sim) springAmbush(m wire.Message) {
	s.ambushes = slices.DeleteFunc(s.ambushes, func(a *ambush) bool { return a.until < s.tick })
	targets := ambushTargets(m)
	if len(targets) == 0 || len(s.ambushes) >= maxAmbushes || !s.chance(0.3) {
		return
	}
	for _, node := range targets {
		if len(s.ambushes) >= maxAmbushes || int(node) < 1 || int(node) > len(s.nodes) {
			break
		}
		a := &ambush{node: node, from: s.tick, to: map[wire.NodeID]linkFault{}, back: map[wire.NodeID]linkFault{}}
		a.lostFrom = a.from + s.rng.Int64N(9)
		a.until = a.from + 20 + s.rng.Int64N(60)
		for i := range s.nodes {
			if other := wire.NodeID(i + 1); other != node {
				a.to[other] = linkFault(s.rng.IntN(3))
				a.back[other] = linkFault(s.rng.IntN(4))
			}
		}
		s.ambushes = append(s.ambushes, a)
		s.res.Ambushes++
		s.tracef("ambush around node %d from %d (losses from %d) until %d: %s", node, a.from, a.lostFrom, a.until, a)
	}
}

func (a *ambush) String() string {
	var out []string
	for _, other := range slices.Sorted(maps.Keys(a.to)) {
		out = append(out, fmt.Sprintf("%d: to %s, back %s", other, a.to[other], a.back[other]))
	}
	return fmt.Sprint(out)
}

// linkFault is what the ambushes on at tick do to m's way of its link.
func (s *Sim) linkFault(m wire.Message, tick int64) linkFault {
	worst := linkFine
	for _, a := range s.ambushes {
		if tick < a.from || tick > a.until {
			continue
		}
		f := linkFine
		switch a.node {
		case m.From:
			f = a.to[m.To]
		case m.To:
			f = a.back[m.From]
		}
		if f == linkReportsLost && m.Kind != wire.KindReport || (f == linkLost || f == linkReportsLost) && tick < a.lostFrom {
			f = linkFine
		}
		worst = max(worst, f)
	}
	return worst
}

// ambushDelay is how much later the ambushes make m, sent now, arrive.
func (s *Sim) ambushDelay(m wire.Message) int64 {
	if s.linkFault(m, s.tick) == linkLate {
		return 10 + s.rng.Int64N(31)
	}
	return 0
}

// ambushLost says whether the ambushes lose m, arriving now.
func (s *Sim) ambushLost(m wire.Message) bool {
	f := s.linkFault(m, s.tick)
	return f == linkLost || f == linkReportsLost
}

func (f linkFault) String() string { return [...]string{"fine", "late", "lost", "reports lost"}[f] }

// rates are the chances, per tick or per message, of the faults and of
// a holder's release (Options.Swarm draws them per seed).
type rates struct {
	crash, crashSending, partition, pause, agentRestart, force float64
	loss, dup, reportLoss                                      float64
	release                                                    float64
	// slowDisk: a Ready's writes are not yet durable when the node goes
	// on (answers of other names leave before them); crashUnsynced: a
	// node that sent something while writes were on their way crashes.
	slowDisk, crashUnsynced float64
	// loseRevocations: every KindRevoked is lost (Options.LoseRevocations).
	loseRevocations bool
}

// defaultRates are the rates of every world but a swarm's.
var defaultRates = rates{crash: 0.006, crashSending: 0.002, partition: 0.004, pause: 0.003, agentRestart: 0.004, force: 0.004,
	loss: 0.03, dup: 0.03, reportLoss: 0.1, release: 0.06, slowDisk: 0.3, crashUnsynced: 0.003}

// swarmRates draws a swarm's rates: each fault off in half of the seeds,
// and at a half to three times its usual rate in the others; force-unlocks
// up to ten times as often, and holders that let go at a sixth to once
// their usual rate (longer holds: more renewals for faults to meet); in
// a quarter of the seeds the leaders' word of a force-unlock to the
// request's master is lost, which leaves the master to learn it from
// its renewals and reports.
func (s *Sim) swarmRates() rates {
	some := func(p float64) float64 {
		if s.chance(0.5) {
			return 0
		}
		return p * (0.5 + 2.5*s.rng.Float64())
	}
	r := rates{crash: some(0.006), crashSending: some(0.002), partition: some(0.004), pause: some(0.003),
		agentRestart: some(0.004), force: some(0.04), loss: some(0.03), dup: some(0.03), reportLoss: some(0.1),
		release: 0.01 + 0.05*s.rng.Float64(), loseRevocations: s.chance(0.25), slowDisk: some(0.3), crashUnsynced: some(0.003)}
	s.tracef("swarm: %+v", r)
	return r
}
