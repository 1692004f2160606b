package core

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// A master's timers. A tick must not cost more with more requests: each
// request is armed in a heap for the first tick at which its timers may act
// (nextTimer), and a tick runs only the requests that are due, in request
// order as a walk of them all would. Arming is done wherever a request's
// deadlines may move earlier (a new phase, a send, a grant, a renewal, a
// retry asked for); a request armed too early is only looked at and armed
// again. Config.CheckIncremental counts requests that were due but not armed.

// reqTimer is request id's timer, armed for tick at.
type reqTimer struct {
	at int64
	id wire.RequestID
}

// timerHeap orders timers by tick, then request: a fixed order, so a seed
// replays.
type timerHeap []reqTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(h[i].at, h[j].at), h[i].id.Compare(h[j].id)) < 0
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(reqTimer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// arm makes sure r's timers run by the first tick they may act at, and
// not before the next tick.
func (n *Node) arm(r *request) {
	at := max(n.nextTimer(r), n.now+1)
	if r.timerAt != 0 && r.timerAt <= at {
		return
	}
	r.timerAt = at
	heap.Push(&n.timers, reqTimer{at: at, id: r.id})
}

// dueTimers takes the requests whose timers are due by now off the heap,
// in request order.
func (n *Node) dueTimers() []wire.RequestID {
	var due []wire.RequestID
	for len(n.timers) > 0 && n.timers[0].at <= n.now {
		t := heap.Pop(&n.timers).(reqTimer)
		if r := n.reqs[t.id]; r != nil && r.timerAt == t.at {
			r.timerAt = 0
			due = append(due, t.id)
		}
	}
	slices.SortFunc(due, wire.RequestID.Compare)
	if n.cfg.CheckIncremental {
		for id, r := range n.reqs {
			if _, found := slices.BinarySearchFunc(due, id, wire.RequestID.Compare); !found && n.nextTimer(r) <= n.now {
				n.stats.MissedTimers++
			}
		}
	}
	return due
}

// nextTimer is the first tick at which masterTick may act on r: it mirrors
// tickWaiting, tickHeld and the releasing case of masterTick, condition by
// condition (a deadline passes at the first tick above it).
func (n *Node) nextTimer(r *request) int64 {
	resend, refresh := n.cfg.RetransmitTicks, n.cfg.RefreshTicks
	switch r.phase {
	case phaseQueued:
		return r.dead + 1
	case phaseEnter, phaseAddTicket:
		at := min(r.dead+1, r.sentAt+resend)
		if !n.cfg.Mutant.on(MutantUnboundedDoorway) {
			at = min(at, r.doorAt+n.cfg.DoorwayTicks+1)
		}
		return at
	case phaseWait:
		at := min(r.dead+1, r.sentAt+refresh)
		if r.confirm != nil {
			at = min(at, r.confirm.sentAt+resend)
		}
		if r.activating {
			at = min(at, r.actSentAt+resend)
		}
		if r.retryAt > 0 {
			at = min(at, r.retryAt)
		}
		return at
	case phaseHeld:
		end := r.leaseStart + r.a.Duration
		at := end + r.a.Grace
		if !r.unlocking {
			at = min(at, end)
		}
		if r.renew != nil {
			at = min(at, r.renew.sentAt+resend)
		}
		if r.share != nil {
			at = min(at, n.shareTimer(r))
		}
		if r.parentOf != nil {
			at = min(at, n.parentRenewAt(r))
		}
		return at
	case phaseLocalWait, phaseParents:
		return r.dead + 1
	case phaseLocalHeld:
		at := min(r.unlockAt, r.endAt)
		if r.unlocking {
			at = r.endAt
		}
		if r.parentOf != nil {
			at = min(at, n.parentRenewAt(r))
		}
		return at
	default: // phaseReleasing
		return min(r.releaseUntil+1, r.sentAt+resend)
	}
}
