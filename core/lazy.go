package core

import "github.com/sluicehq/sluice/core/wire"

// Messages that may wait for company.
//
// An uncontended writer's cycle sends a leader three batches: ENTERING
// (with the proposed number), then EXITING and the end of the name's watch
// the moment the reports grant it, then the release. EXITING tells the
// leader nothing any other request waits for: every request that meets
// the writer on the name conflicts with it, and whatever its number, a
// request that sees the writer's choosing flag waits, as it would for the
// writer's ticket, until the release. So a grant's EXITING waits until a
// whole tick has passed, and a release drops it (the release ends the
// flag as well): under load that is three messages fewer per cycle. The
// grant's UNWATCH waits for company: the next message to the same leader,
// in front of which it goes, or a whole tick.
//
// What this changes in the safety argument: nothing. A lazy message is a
// message delayed (an EXITING may arrive after later messages of its
// master, an UNWATCH never does), and a dropped EXITING one lost; the
// protocol is safe under any delay, order and loss, and the simulator and
// the explorer delay, reorder and drop every kind. What it changes for
// liveness: a writer's choosing flag stays up at most two ticks after its
// grant, or until its release; a leader pushes a holder's master the
// name's reports for as long (holdsBack keeps most back).

// lazyMessage is a message held back since tick at.
type lazyMessage struct {
	m  wire.Message
	at int64
}

// msgSpan is the messages n.msgs[from:to], sent for r (an EXITING when r
// is set, an UNWATCH of a grant otherwise).
type msgSpan struct {
	r        *request
	from, to int
}

// exitMayWait: r's EXITING may wait once r is granted. Only a writer's
// (every request on the name conflicts with it), and not a share's or a
// parent's ticket, whose holders are other requests.
func exitMayWait(r *request) bool {
	return r.phase == phaseHeld && r.a.Mode.Writer() && r.share == nil && r.parentOf == nil
}

// holdLazy runs at Ready: this Ready's grants' EXITING waits, and their
// UNWATCH to a leader nothing else of this Ready goes to; earlier waiting
// UNWATCH to a leader something else goes to, and whatever waited a
// whole tick, go first.
func (n *Node) holdLazy() {
	spans := n.lazySpans
	n.lazySpans = n.lazySpans[:0]
	if n.cfg.EagerExit {
		return
	}
	start := n.handed[1]
	var cand map[int]bool
	for _, s := range spans {
		if s.r != nil && (n.reqs[s.r.id] != s.r || !exitMayWait(s.r)) {
			continue
		}
		for i := max(s.from, start); i < s.to && i < len(n.msgs); i++ {
			if k := n.msgs[i].Kind; k == wire.KindExit || k == wire.KindUnwatch {
				if cand == nil {
					cand = map[int]bool{}
				}
				cand[i] = true
			}
		}
	}
	if cand == nil && len(n.lazy) == 0 {
		return
	}
	busy := map[wire.NodeID]bool{}
	for i := start; i < len(n.msgs); i++ {
		if !cand[i] {
			busy[n.msgs[i].To] = true
		}
	}
	var front []wire.Message
	keep := n.lazy[:0]
	for _, l := range n.lazy {
		if n.now > l.at+1 || l.m.Kind == wire.KindUnwatch && busy[l.m.To] {
			front = append(front, l.m)
		} else {
			keep = append(keep, l)
		}
	}
	if cand == nil && len(front) == 0 {
		n.lazy = keep
		return
	}
	out := make([]wire.Message, 0, len(n.msgs)+len(front))
	out = append(out, n.msgs[:start]...)
	out = append(out, front...)
	for i := start; i < len(n.msgs); i++ {
		if m := n.msgs[i]; cand[i] && (m.Kind == wire.KindExit || !busy[m.To]) {
			keep = append(keep, lazyMessage{m: m, at: n.now})
		} else {
			out = append(out, m)
		}
	}
	n.msgs, n.lazy = out, keep
}

// shiftLazySpans keeps the candidates' places in n.msgs when Advance
// drops the k messages a Ready handed out before them.
func (n *Node) shiftLazySpans(k int) {
	if k == 0 {
		return
	}
	keep := n.lazySpans[:0]
	for _, s := range n.lazySpans {
		if s.to > k {
			s.from, s.to = max(s.from-k, 0), s.to-k
			keep = append(keep, s)
		}
	}
	n.lazySpans = keep
}

// lazyDue: a waiting message has waited a whole tick.
func (n *Node) lazyDue() bool { return len(n.lazy) > 0 && n.now > n.lazy[0].at+1 }

// dropLazyExit forgets r's waiting EXITING: its release is on the way.
func (n *Node) dropLazyExit(r *request) {
	if len(n.lazy) == 0 {
		return
	}
	keep := n.lazy[:0]
	for _, l := range n.lazy {
		if l.m.Kind != wire.KindExit || l.m.Req != r.id {
			keep = append(keep, l)
		}
	}
	clear(n.lazy[len(keep):])
	n.lazy = keep
}
