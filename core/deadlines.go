package core

import (
	"cmp"
	"container/heap"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// A replica's timers, and what it forgets. A tick must not cost more with
// more names: each name has one check due at its earliest deadline (of a
// request, a tombstone or a watch), kept in a heap, and a tick runs only
// the checks that are due. A name left with nothing is forgotten at its
// check: its high-water mark folds into the floor, which every name
// starts from, so fencing tokens keep growing per name however many names
// came and went, and what a million names cost is the floor.

// nameCheck is a check of name's deadlines due at tick at.
type nameCheck struct {
	at   int64
	name string
}

// checkHeap orders checks by tick, then name: a fixed order, so a seed
// replays.
type checkHeap []nameCheck

func (h checkHeap) Len() int { return len(h) }
func (h checkHeap) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(h[i].at, h[j].at), cmp.Compare(h[i].name, h[j].name)) < 0
}
func (h checkHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *checkHeap) Push(x any)   { *h = append(*h, x.(nameCheck)) }
func (h *checkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// schedule makes sure t is checked once deadline has passed (a deadline
// passes at the first tick above it).
func (n *Node) schedule(t *replicaName, deadline int64) {
	at := max(deadline, n.now) + 1
	if t.checkAt != 0 && t.checkAt <= at {
		return
	}
	t.checkAt = at
	heap.Push(&n.checks, nameCheck{at: at, name: t.name})
}

// runChecks runs the checks due by now.
func (n *Node) runChecks() {
	for len(n.checks) > 0 && n.checks[0].at <= n.now {
		c := heap.Pop(&n.checks).(nameCheck)
		t := n.names[c.name]
		if t == nil || t.checkAt != c.at {
			continue // forgotten, or checked earlier than this
		}
		t.checkAt = 0
		n.checkName(t)
	}
}

// checkName expires t's requests, tombstones and watches whose deadline
// passed, forgets t if nothing is left, or schedules its next check.
func (n *Node) checkName(t *replicaName) {
	for _, req := range sortedReqs(t.recs) {
		if t.recs[req].deadline < n.now {
			n.stats.Expired++
			n.dropRecord(t.name, t, req, 0)
		}
	}
	// Every copy the release missed has ended too (one restored at a
	// restart counts again, and is asked about: askHolds).
	for _, req := range t.tombs.expire(n.now) {
		if !n.cfg.Mutant.on(MutantMemoryTombs) {
			n.persist(Write{Kind: WriteDelete, Name: t.name, Entry: wire.Entry{Req: req}, Lazy: true})
		}
	}
	for id, w := range t.watchers {
		if w.deadline < n.now {
			delete(t.watchers, id)
		}
	}
	t.compact()
	if t.idle() {
		n.forgetName(t)
		return
	}
	var deadlines []int64
	for _, r := range t.recs {
		deadlines = append(deadlines, r.deadline)
	}
	if until, ok := t.tombs.earliest(); ok {
		deadlines = append(deadlines, until)
	}
	for _, w := range t.watchers {
		deadlines = append(deadlines, w.deadline)
	}
	n.schedule(t, slices.Min(deadlines)) // not idle: there is one
}

// idle: t holds nothing but its high-water mark.
func (t *replicaName) idle() bool {
	return len(t.recs) == 0 && t.tombs.len() == 0 && len(t.watchers) == 0
}

// checkIfIdle schedules a check of t once nothing is left in it, so that
// it is forgotten.
func (n *Node) checkIfIdle(t *replicaName) {
	if t.idle() {
		n.schedule(t, n.now)
	}
}

// forgetName drops an idle name: its mark goes into the floor, in the same
// write when the mark is on disk, and when its readers were last seen into
// the name's reader bucket, so a name made again never claims a longer
// quiet period than it had (READ_WRITE_GENTLE).
func (n *Node) forgetName(t *replicaName) {
	mark := t.highWater
	if n.cfg.Mutant.on(MutantForgetMarks) {
		mark = 0
	}
	if t.stored {
		// Lazy: lost, the name's mark is still on disk, as before.
		n.persist(Write{Kind: WriteForget, Name: t.name, Entry: wire.Entry{Ticket: mark}, Lazy: true})
	}
	n.floor = max(n.floor, mark)
	n.tellDrainOver(t, true) // nothing is left to refuse a try
	b := readerBucket(t.name)
	n.readersForgotten[b] = max(n.readersForgotten[b], t.readerSeen)
	delete(n.names, t.name)
	delete(n.restoredNames, t.name)
}

// raiseFloor raises the floor durably, to the previous leaders' (handoff),
// and the marks of the names this node holds with it: an old leader that
// forgot a name keeps its mark only in its floor, and a name this node
// kept from an earlier view, with a mark below a ticket it missed, must
// not take that number again. (Names made later start from the floor.)
func (n *Node) raiseFloor(floor uint64) {
	if floor > n.floor {
		n.floor = floor
		n.persist(Write{Kind: WriteFloor, Entry: wire.Entry{Ticket: floor}})
	}
	if n.cfg.Mutant.on(MutantFloorSkipsHeldNames) {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(n.names)) {
		if t := n.names[name]; t.highWater < floor {
			t.highWater, t.stored = floor, true
			n.persist(Write{Kind: WriteHighWater, Name: name, Entry: wire.Entry{Ticket: floor}})
		}
	}
}

// readerBuckets spreads forgotten names' reader times, so that one busy
// name's readers make few other names' GENTLE writers wait.
const readerBuckets = 256

func readerBucket(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % readerBuckets)
}
