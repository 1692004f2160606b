package core_test

// Benchmarks of the core's hot paths, through its public API only, so that
// an internal refactor does not break them and a regression shows in
// benchstat. Each drives real nodes to a result it checks (a grant, a
// release, a table of the expected size) and fails when the result does
// not come: a broken benchmark must not measure nothing.

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// benchCluster is three nodes, all leaders of one view, wired together in
// memory. Messages are delivered in rounds: every node steps all it was
// sent, then handles its Ready in the contract's order (persist, send,
// events), as a runtime does with its inbox. Persist is applied to a
// core.Durable per node, the reference store, unless the cluster has no
// disks. Order is deterministic: no clock, no randomness.
type benchCluster struct {
	nodes     []*core.Node
	disks     []*core.Durable // nil: writes are counted, not applied
	cur, next []wire.Message
	touched   []bool
	// msgs and writes count what was delivered and persisted; events
	// collects what the nodes told their clients since the last expect.
	msgs, writes int
	// rounds counts the delivery rounds settle ran: sequential message
	// hops, the latency a cycle would have on a real network.
	rounds int
	// grantedAt is the round of the last grant handed out.
	grantedAt int
	events    []core.Event
	// tombs and deletes count each node's WriteTomb and WriteDelete.
	tombs, deletes []int
	// tap, if set, sees every message as it is delivered.
	tap func(wire.Message)
	// phases, if set, collects each node's Ready.Phases, in order.
	phases [][]core.PhaseChange
}

func newBenchCluster(b testing.TB, disks bool, admit core.Admit) *benchCluster {
	b.Helper()
	view := wire.View{Epoch: 1, Leaders: []wire.NodeID{1, 2, 3}}
	c := &benchCluster{touched: make([]bool, 3), tombs: make([]int, 3), deletes: make([]int, 3)}
	for i := range view.Leaders {
		n, err := core.New(core.Config{ID: view.Leaders[i], Incarnation: 1, View: view, Peers: view.Leaders, Admit: admit}, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		if disks {
			c.disks = append(c.disks, core.NewDurable())
		}
	}
	c.settle(b)
	return c
}

// handle takes node i's Ready until it has none.
func (c *benchCluster) handle(i int) {
	n := c.nodes[i]
	for n.HasReady() {
		rd := n.Ready()
		if c.disks != nil {
			c.disks[i].Apply(rd.Persist)
		}
		c.writes += len(rd.Persist)
		for _, w := range rd.Persist {
			switch w.Kind {
			case core.WriteTomb:
				c.tombs[i]++
			case core.WriteDelete:
				c.deletes[i]++
			}
		}
		c.next = append(c.next, rd.Messages...)
		c.events = append(c.events, rd.Events...)
		if c.phases != nil {
			c.phases[i] = append(c.phases[i], rd.Phases...)
		}
		for _, e := range rd.Events {
			if e.Kind == core.EventGranted {
				c.grantedAt = c.rounds
			}
		}
		n.Advance()
	}
}

// settle delivers messages until none is in flight.
func (c *benchCluster) settle(b testing.TB) {
	b.Helper()
	for i := range c.nodes {
		c.handle(i)
	}
	for rounds := 0; len(c.next) > 0; rounds++ {
		if rounds == 1000 {
			b.Fatalf("still %d messages in flight after %d rounds", len(c.next), rounds)
		}
		c.cur, c.next = c.next, c.cur[:0]
		for _, m := range c.cur {
			if c.tap != nil {
				c.tap(m)
			}
			if err := c.nodes[m.To-1].Step(m); err != nil {
				b.Fatalf("step %v: %v", m, err)
			}
			c.touched[m.To-1] = true
		}
		c.msgs += len(c.cur)
		c.rounds++
		for i := range c.nodes {
			if c.touched[i] {
				c.touched[i] = false
				c.handle(i)
			}
		}
	}
}

// tick advances every node by one tick and settles.
func (c *benchCluster) tick(b testing.TB) {
	b.Helper()
	for i, n := range c.nodes {
		n.Tick()
		c.handle(i)
	}
	c.settle(b)
}

// expect fails unless an event of kind for req (without a failure code)
// came since the last expect, and forgets the events.
func (c *benchCluster) expect(b testing.TB, kind core.EventKind, req wire.RequestID) {
	b.Helper()
	for _, e := range c.events {
		if e.Req == req && e.Kind == kind && e.Code == wire.CodeNone {
			c.events = c.events[:0]
			return
		}
	}
	b.Fatalf("no %s event for %s; events: %+v", kind, req, c.events)
}

// acquire proposes a on node (1-based) and returns its handle.
func (c *benchCluster) acquire(b testing.TB, node int, a core.Acquire) wire.RequestID {
	b.Helper()
	id, err := c.nodes[node-1].Acquire(a)
	if err != nil {
		b.Fatal(err)
	}
	return id
}

func (c *benchCluster) release(b testing.TB, node int, id wire.RequestID) {
	b.Helper()
	if err := c.nodes[node-1].Release(id, ""); err != nil {
		b.Fatal(err)
	}
}

// Housekeeping: a released request leaves a tombstone at every replica
// until its lifetime is over, which only ticks end. Without ticks, a
// benchmark of lock cycles would grow the name's table with b.N and
// measure a different table at every b.N. Every housekeepEvery cycles the
// cluster is ticked past every tombstone those cycles left, with the timer
// stopped and the counters put back: the steady state of a stream of
// cycles, with only the cycles timed and counted.
const (
	housekeepEvery = 64
	// housekeepTicks is more than any tombstone of these benchmarks lives
	// (obtain timeout, or the try's TryTicks, plus duration, plus an
	// eighth for clock drift).
	housekeepTicks = 64
)

func (c *benchCluster) housekeep(b *testing.B) {
	b.StopTimer()
	msgs, writes := c.msgs, c.writes
	for range housekeepTicks {
		c.tick(b)
	}
	c.msgs, c.writes = msgs, writes
	c.events = c.events[:0]
	b.StartTimer()
}

// BenchmarkLockCycle is one exclusive lock's whole life on a 3-leader
// cluster: acquire, every message of the doorway, the wait and the
// confirmation delivered, granted; released, every leader acknowledging.
// msgs/op counts the messages delivered (a node's to itself included),
// writes/op the Writes persisted.
func BenchmarkLockCycle(b *testing.B) {
	c := newBenchCluster(b, true, nil)
	a := core.Acquire{Name: "lock", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}
	c.cycles(b, a)
	if got := len(c.disks[0].Tickets[a.Name]); got > housekeepEvery {
		b.Fatalf("%d tombstones on disk: housekeeping does not expire them", got)
	}
}

// cycles is the measured loop of the cycle benchmarks: node 1 acquires a
// and releases it, each to completion, once per iteration. It reports the
// messages and writes per cycle.
func (c *benchCluster) cycles(b *testing.B, a core.Acquire) {
	msgs, writes := c.msgs, c.writes
	cycles, grantRounds := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		id := c.acquire(b, 1, a)
		before := c.rounds
		c.settle(b)
		grantRounds += c.grantedAt - before
		c.expect(b, core.EventGranted, id)
		c.release(b, 1, id)
		c.settle(b)
		c.expect(b, core.EventReleased, id)
		if cycles++; cycles%housekeepEvery == 0 {
			c.housekeep(b)
		}
	}
	b.ReportMetric(float64(c.msgs-msgs)/float64(cycles), "msgs/op")
	b.ReportMetric(float64(c.writes-writes)/float64(cycles), "writes/op")
	b.ReportMetric(float64(grantRounds)/float64(cycles), "grant-rounds/op")
}

// BenchmarkHandoff is a contended name's handoff on a 3-leader cluster:
// nodes 1 and 2 take turns holding one exclusive lock, each asking again
// as soon as it released, so the other always waits. Each iteration is a
// release and the waiter's grant; grant-rounds/op counts the message
// hops from the release to the grant (2: the release reaches the
// leaders, their reports the waiter, which the leaders marked held as
// they made them; 4 with a confirmation round).
func BenchmarkHandoff(b *testing.B) {
	c := newBenchCluster(b, true, nil)
	a := core.Acquire{Name: "lock", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}
	var holder, waiter wire.RequestID
	var holderNode, waiterNode int
	// start makes node 1 the holder and node 2 the waiter behind it.
	start := func() {
		holder, holderNode = c.acquire(b, 1, a), 1
		c.settle(b)
		c.expect(b, core.EventGranted, holder)
		waiter, waiterNode = c.acquire(b, 2, a), 2
		c.settle(b)
	}
	start()
	msgs, writes := c.msgs, c.writes
	handoffs, grantRounds := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		c.release(b, holderNode, holder)
		before := c.rounds
		c.settle(b)
		grantRounds += c.grantedAt - before
		granted := false
		for _, e := range c.events {
			granted = granted || e.Kind == core.EventGranted && e.Req == waiter
		}
		if !granted {
			b.Fatalf("no grant for %s; events: %+v", waiter, c.events)
		}
		c.events = c.events[:0]
		holder, holderNode = waiter, waiterNode
		waiterNode = 3 - holderNode
		waiter = c.acquire(b, waiterNode, a)
		c.settle(b)
		if handoffs++; handoffs%housekeepEvery == 0 {
			// Both go, their tombstones expire, and the pair starts
			// again: none of it counted.
			b.StopTimer()
			m, w := c.msgs, c.writes
			c.release(b, holderNode, holder)
			c.settle(b)
			c.release(b, waiterNode, waiter)
			c.settle(b)
			c.msgs, c.writes = m, w
			c.housekeep(b)
			b.StopTimer()
			start()
			c.msgs, c.writes = m, w
			c.events = c.events[:0]
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(c.msgs-msgs)/float64(handoffs), "msgs/op")
	b.ReportMetric(float64(c.writes-writes)/float64(handoffs), "writes/op")
	b.ReportMetric(float64(grantRounds)/float64(handoffs), "grant-rounds/op")
}

// BenchmarkReadersOneName: 63 READ_ONLY leases held on one name, spread
// over the three nodes; each iteration a 64th reader tries (obtain timeout
// 0), is granted, and releases. Every change of the table is reported to
// the waiting master with all 64 entries and decided on: the cost of a
// busy name's reports.
func BenchmarkReadersOneName(b *testing.B) {
	const name, holders = "site", 63
	c := newBenchCluster(b, true, semaphore.Admit)
	held := make([]wire.RequestID, holders)
	for i := range held {
		held[i] = c.acquire(b, i%3+1, core.Acquire{Name: name, Mode: wire.ModeReadOnly, Timeout: 10, Duration: 1 << 30})
	}
	c.settle(b)
	if granted := countEvents(c.events, core.EventGranted); granted != holders {
		b.Fatalf("%d of %d readers granted: %+v", granted, holders, c.events)
	}
	c.events = c.events[:0]
	c.cycles(b, core.Acquire{Name: name, Mode: wire.ModeReadOnly, Timeout: 0, Duration: 10})
	if e, _ := c.nodes[0].Table(name); len(e) != holders {
		b.Fatalf("%d entries in the table, want the %d holders", len(e), holders)
	}
}

// BenchmarkTickIdleNames measures one Node.Tick of a leader that has seen
// names names, each locked and released once and idle since: while their
// tombstones live (tombs=live), and once they expired (tombs=expired),
// when the names are forgotten and only the floor is left. A tick runs
// only the deadline checks that are due, so neither should grow with N.
func BenchmarkTickIdleNames(b *testing.B) {
	for _, names := range []int{1000, 10000, 100000} {
		for _, live := range []bool{true, false} {
			state := map[bool]string{true: "live", false: "expired"}[live]
			b.Run(fmt.Sprintf("N=%d/tombs=%s", names, state), func(b *testing.B) {
				n := idleLeader(b, names, live)
				b.ReportAllocs()
				for b.Loop() {
					n.Tick()
				}
				// An idle leader's tick has nothing to say; output would
				// mean tombstones expired under the measurement.
				if n.HasReady() {
					b.Fatalf("a tick of idle names produced %+v", n.Ready())
				}
				if got, want := len(n.Names()), map[bool]int{true: names, false: 0}[live]; got != want {
					b.Fatalf("the leader holds %d names after the ticks, want %d", got, want)
				}
			})
		}
	}
}

// idleLeader returns node 1 of a cluster that locked and released names
// names once each, through masters on all three nodes; with live, their
// tombstones outlive any run of the benchmark, without, they are expired.
func idleLeader(b *testing.B, names int, live bool) *core.Node {
	b.Helper()
	c := newBenchCluster(b, false, nil)
	// Short leases leave tombstones that end within a few ticks: each tick
	// of the setup costs as much as the ticks measured.
	a := core.Acquire{Mode: wire.ModeExclusive, Timeout: 1, Duration: 1}
	if live {
		a.Duration = 1 << 30
	}
	for start := 0; start < names; start += 1000 {
		c.lockBatch(b, a, start, min(start+1000, names))
	}
	for ticks := 0; !live && c.deletes[0] < names && ticks < housekeepTicks; ticks++ {
		c.tick(b)
	}
	n := c.nodes[0]
	wantDeletes := map[bool]int{true: 0, false: names}[live]
	// Names whose tombstones expired are forgotten: only the floor is left.
	wantNames := map[bool]int{true: names, false: 0}[live]
	switch {
	case len(n.Names()) != wantNames:
		b.Fatalf("the leader holds %d names, want %d", len(n.Names()), wantNames)
	case c.tombs[0] != names || c.deletes[0] != wantDeletes:
		b.Fatalf("the leader wrote %d tombstones and %d deletes, want %d and %d", c.tombs[0], c.deletes[0], names, wantDeletes)
	case n.HasReady():
		b.Fatal("the leader is not idle")
	}
	return n
}

// lockBatch locks names /site/<from> to /site/<to-1> with a through
// masters on all three nodes, each to its grant, then releases them, each to
// its release.
func (c *benchCluster) lockBatch(tb testing.TB, a core.Acquire, from, to int) {
	tb.Helper()
	ids := make([]wire.RequestID, 0, to-from)
	for i := from; i < to; i++ {
		a.Name = fmt.Sprintf("/site/%07d", i)
		ids = append(ids, c.acquire(tb, i%3+1, a))
	}
	c.settle(tb)
	if done := countEvents(c.events, core.EventGranted); done != len(ids) {
		tb.Fatalf("%d of %d granted", done, len(ids))
	}
	c.events = c.events[:0]
	for i, id := range ids {
		c.release(tb, (from+i)%3+1, id)
	}
	c.settle(tb)
	if done := countEvents(c.events, core.EventReleased); done != len(ids) {
		tb.Fatalf("%d of %d released", done, len(ids))
	}
	c.events = c.events[:0]
}

func countEvents(events []core.Event, kind core.EventKind) int {
	k := 0
	for _, e := range events {
		if e.Kind == kind && e.Code == wire.CodeNone {
			k++
		}
	}
	return k
}

// BenchmarkEvaluateWaiters: waiters exclusive requests of node 1 wait on a
// name node 2 holds; each iteration node 1 steps one report of the name
// from leader 2 and handles its Ready, where every waiter decides on it.
// The report is leader 2's last real one, sent again with a higher
// sequence number: a refresh of the same table.
func BenchmarkEvaluateWaiters(b *testing.B) {
	for _, waiters := range []int{1, 256} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			const name = "busy"
			c := newBenchCluster(b, true, nil)
			holder := c.acquire(b, 2, core.Acquire{Name: name, Mode: wire.ModeExclusive, Timeout: 10, Duration: 1 << 30})
			c.settle(b)
			c.expect(b, core.EventGranted, holder)
			var rep wire.Message
			c.tap = func(m wire.Message) {
				if m.Kind == wire.KindReport && m.From == 2 && m.To == 1 {
					rep = m
				}
			}
			first := wire.RequestID{}
			for i := range waiters {
				id := c.acquire(b, 1, core.Acquire{Name: name, Mode: wire.ModeExclusive, Timeout: 1 << 30, Duration: 10})
				if i == 0 {
					first = id
				}
			}
			c.settle(b)
			c.tap = nil
			n := c.nodes[0]
			waiting := func() {
				b.Helper()
				rs := n.Requests()
				if len(rs) != waiters || len(c.events) != 0 {
					b.Fatalf("%d requests, want %d waiting; events %+v", len(rs), waiters, c.events)
				}
				for _, r := range rs {
					if r.Phase != "waiting" {
						b.Fatalf("request %s is %s, not waiting", r.Handle, r.Phase)
					}
				}
			}
			waiting()
			if rep.Kind != wire.KindReport || len(rep.Entries) != waiters+1 {
				b.Fatalf("leader 2's last report lists %d requests, want %d", len(rep.Entries), waiters+1)
			}
			b.ReportAllocs()
			for b.Loop() {
				rep.ReportSeq++
				if err := n.Step(rep); err != nil {
					b.Fatal(err)
				}
				if rd := n.Ready(); len(rd.Events) != 0 {
					b.Fatalf("a waiter decided on a refresh: %+v", rd.Events)
				}
				n.Advance()
			}
			b.StopTimer()
			// Still waiting, and on a live name: released, the first
			// waiter is granted. Leader 2's reports of the release come
			// with sequence numbers below the replays' and are dropped as
			// reordered (the replayed table, with the holder, stays in the
			// merge): its last one is delivered again after the replays.
			// (A change made on the report the replays copy: the master
			// would refuse it for its base otherwise.)
			waiting()
			seq := rep.ReportSeq
			rep = wire.Message{}
			c.tap = func(m wire.Message) {
				if m.Kind == wire.KindReport && m.From == 2 && m.To == 1 {
					rep = m
				}
			}
			c.release(b, 2, holder)
			c.settle(b)
			c.tap = nil
			if countEvents(c.events, core.EventGranted) == 0 {
				if rep.Kind != wire.KindReport {
					b.Fatalf("no report of the release from leader 2; events %+v", c.events)
				}
				// A change on top of the table replayed: renumbered as
				// the replays were.
				rep.ReportSeq = seq + 1
				if rep.BaseSeq != 0 {
					rep.BaseSeq = seq
				}
				if err := n.Step(rep); err != nil {
					b.Fatal(err)
				}
				c.settle(b)
			}
			c.expect(b, core.EventGranted, first)
		})
	}
}

// BenchmarkAdmit is one admission decision on a table of entries tickets,
// the candidate's own among them, where the policy must read every
// entry: an exclusive request with the lowest ticket (core.Exclusive),
// and a reader behind readers only (semaphore.Admit).
func BenchmarkAdmit(b *testing.B) {
	for _, p := range []struct {
		name   string
		admit  core.Admit
		mode   wire.Mode
		rankMe func(entries int) int // the candidate's place in the table
	}{
		{"exclusive", core.Exclusive, wire.ModeExclusive, func(int) int { return 0 }},
		{"semaphore-reader", semaphore.Admit, wire.ModeReadOnly, func(k int) int { return k - 1 }},
	} {
		for _, entries := range []int{1, 64, 1024} {
			b.Run(fmt.Sprintf("%s/entries=%d", p.name, entries), func(b *testing.B) {
				table := make([]wire.Entry, entries)
				for i := range table {
					table[i] = wire.Entry{Req: wire.RequestID{Node: wire.NodeID(i%3 + 1), Seq: 1<<32 | uint64(i+1)},
						Ticket: uint64(i + 1), Mode: p.mode, State: wire.StateTicket}
				}
				own := table[p.rankMe(entries)]
				me := core.Candidate{Req: own.Req, Ticket: own.Ticket, Mode: p.mode, SinceReaders: 1 << 20}
				b.ReportAllocs()
				for b.Loop() {
					if d := p.admit(me, table); !d.Grant {
						b.Fatalf("not granted: %+v", d)
					}
				}
			})
		}
	}
}
