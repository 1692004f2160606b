package core

import (
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

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
	if len(spans) == 0 && len(n.lazy) == 0 {
		return
	}
	start := n.handed[1]
	// The candidates' places, rising (spans come in the order sent), and
	// the leaders they and the waiting messages go to: few, so a Ready
	// costs a scan of its messages and no map.
	cands := n.lazyScratch[:0]
	for _, s := range spans {
		if s.r != nil && (n.reqs[s.r.id] != s.r || !exitMayWait(s.r)) {
			continue
		}
		for i := max(s.from, start); i < s.to && i < len(n.msgs); i++ {
			if k := n.msgs[i].Kind; k == wire.KindExit || k == wire.KindUnwatch {
				cands = append(cands, i)
			}
		}
	}
	n.lazyScratch = cands[:0]
	if len(cands) == 0 && len(n.lazy) == 0 {
		return
	}
	var toBuf [8]wire.NodeID
	var busyBuf [8]bool
	to, busy := toBuf[:0], busyBuf[:0]
	want := func(id wire.NodeID) int {
		if k := slices.Index(to, id); k >= 0 {
			return k
		}
		to, busy = append(to, id), append(busy, false)
		return len(to) - 1
	}
	for _, i := range cands {
		want(n.msgs[i].To)
	}
	for _, l := range n.lazy {
		want(l.m.To)
	}
	for i, c := start, 0; i < len(n.msgs); i++ {
		if c < len(cands) && cands[c] == i {
			c++
			continue
		}
		if k := slices.Index(to, n.msgs[i].To); k >= 0 {
			busy[k] = true
		}
	}
	isBusy := func(id wire.NodeID) bool { return busy[slices.Index(to, id)] }
	var front []wire.Message
	keep := n.lazy[:0]
	for _, l := range n.lazy {
		if n.now > l.at+1 || l.m.Kind == wire.KindUnwatch && isBusy(l.m.To) {
			front = append(front, l.m)
		} else {
			keep = append(keep, l)
		}
	}
	// This Ready's candidates that wait leave n.msgs, in place.
	w := start
	for i, c := start, 0; i < len(n.msgs); i++ {
		m := n.msgs[i]
		if c < len(cands) && cands[c] == i {
			c++
			if m.Kind == wire.KindExit || !isBusy(m.To) {
				keep = append(keep, lazyMessage{m: m, at: n.now})
				continue
			}
		}
		n.msgs[w] = m
		w++
	}
	clear(n.msgs[w:])
	n.msgs = slices.Insert(n.msgs[:w], start, front...)
	n.lazy = keep
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
