package daemon_test

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/semaphore"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// loneTransport is the in-memory twin of the mesh for one node: it records
// what the node sends.
type loneTransport struct {
	mu   sync.Mutex
	sent []wire.Message
	in   chan wire.Message
	// wake, if set (capacity 1), is signalled after every send.
	wake chan struct{}
}

func (t *loneTransport) Send(m wire.Message) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, m)
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return true
}
func (t *loneTransport) SendAll(msgs []wire.Message) int {
	for _, m := range msgs {
		t.Send(m)
	}
	return 0
}
func (t *loneTransport) SendWait(_ context.Context, m wire.Message) error {
	t.Send(m)
	return nil
}
func (t *loneTransport) Inbox() <-chan wire.Message { return t.in }
func (t *loneTransport) Joined() <-chan wire.NodeID { return nil }

// diskTwin is the store's in-memory twin: it applies batches to a
// core.Durable and keeps the election's record, or fails every write once
// broken (a full disk). It outlives the node: open starts the next life
// from what it holds, as store.Open does from the disk.
type diskTwin struct {
	mu          sync.Mutex
	durable     *core.Durable
	elected     *store.ElectionRecord
	incarnation uint32
	broken      bool
	age         uint64
}

func (d *diskTwin) Submit(b store.Batch) <-chan error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan error, 1)
	if d.broken {
		ch <- errors.New("no space left on device")
		return ch
	}
	d.durable.Apply(b.Writes)
	if b.Election != nil {
		d.elected = b.Election // a copy of its own (election.Ready)
	}
	d.age++
	ch <- nil
	return ch
}

// open is what store.Open finds: the state kept, and a new incarnation
// (durably, as the store's first transaction).
func (d *diskTwin) open() store.State {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.durable == nil {
		d.durable = core.NewDurable()
	}
	d.incarnation++
	d.age++
	return store.State{Durable: d.durable.Clone(), Election: d.elected, Incarnation: d.incarnation, Age: d.age}
}

func (d *diskTwin) Age() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.age
}

func idFor(n int) election.ID {
	return election.ID{Priority: 1, Address: "mem", Name: "n" + string(rune('0'+n))}
}

func stateFor() store.State { return store.State{Durable: core.NewDurable(), Incarnation: 1} }

// Snapshot keeps store.Store's contract: one consistent read (a copy, so
// that Submit never waits for fn), names in order, tickets in request id
// order.
func (d *diskTwin) Snapshot(fn func(string, uint64, []core.DurableTicket) error) (uint64, error) {
	d.mu.Lock()
	durable := d.durable.Clone()
	d.mu.Unlock()
	names := maps.Clone(durable.HighWater)
	for name := range durable.Tickets {
		names[name] = durable.HighWater[name]
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		ts := slices.Collect(maps.Values(durable.Tickets[name]))
		slices.SortFunc(ts, func(a, b core.DurableTicket) int { return a.Entry.Req.Compare(b.Entry.Req) })
		if err := fn(name, durable.HighWater[name], ts); err != nil {
			return 0, err
		}
	}
	return durable.Floor, nil
}

func (g *gatedDisk) Snapshot(func(string, uint64, []core.DurableTicket) error) (uint64, error) {
	return 0, nil
}

func startLone(t *testing.T, d daemon.Store) (*daemon.Node, *loneTransport) {
	return startLoneClock(t, d, nil)
}

// startLoneClock is startLone on clock (nil: the boot clock).
func startLoneClock(t *testing.T, d daemon.Store, clock func() time.Duration) (*daemon.Node, *loneTransport) {
	tr := &loneTransport{in: make(chan wire.Message)}
	return startLoneOn(t, d, clock, tr), tr
}

// startLoneOn is startLoneClock with the transport tr.
func startLoneOn(t *testing.T, d daemon.Store, clock func() time.Duration, tr *loneTransport) *daemon.Node {
	t.Helper()
	n, err := daemon.NewNode(daemon.NodeConfig{Self: 1, Bootstrap: []wire.NodeID{1}, Transport: tr, Store: d,
		ID:    election.ID{Priority: 1, Address: "mem", Name: "n1"},
		State: store.State{Durable: core.NewDurable(), Incarnation: 1}, Tick: time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// A call taken in the same turn as another is run on a clock read after
// it was taken: the process may have stopped in between (SIGSTOP, a
// frozen VM), and on the clock of before the stop a leader would count a
// ticket's lifetime from before the ticket arrived, and a node would
// grant a page view on a shared read ticket whose lease ran out.
func TestBatchedCallsSeeTheClockCaughtUp(t *testing.T) {
	var clk atomic.Int64 // nanoseconds
	n, _ := startLoneClock(t, &diskTwin{durable: core.NewDurable()}, func() time.Duration { return time.Duration(clk.Load()) })
	wait, stop := context.WithTimeout(context.Background(), settle)
	defer stop()
	before, after, err := daemon.TicksAcrossStop(wait, n, func() { clk.Add(int64(5 * time.Second)) })
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 5000 {
		t.Fatalf("the second call ran at tick %d, the first at %d: want the 5,000 ticks of the stop counted between them", after, before)
	}
}

// A message taken in the same turn as another is stepped on a clock read
// after it was taken, as a call is (above): the leader's record of the
// second ENTERING must count from after the stop that came between the
// two, or it would count a ticket's lifetime from before it arrived and
// forget it while its holder's lease still ran. Both messages are in the
// inbox before the loop takes either, so they are one turn's batch, and
// each clock read from then on finds the clock 100 ms on.
func TestBatchedMessagesSeeTheClockCaughtUp(t *testing.T) {
	start := time.Now()
	var (
		offset atomic.Int64 // nanoseconds the stops added
		jumps  atomic.Int32 // reads left that find a stop before them
	)
	clock := func() time.Duration {
		for j := jumps.Load(); j > 0; j = jumps.Load() {
			if jumps.CompareAndSwap(j, j-1) {
				offset.Add(int64(100 * time.Millisecond))
				break
			}
		}
		return time.Since(start) + time.Duration(offset.Load())
	}
	tr := &loneTransport{in: make(chan wire.Message, 2), wake: make(chan struct{}, 1)}
	n := startLoneOn(t, &diskTwin{durable: core.NewDurable()}, clock, tr)
	s := waitStatus(t, n, "ready", func(s api.Status) bool { return s.Ready })
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	enter := func(name string, seq uint64) wire.Message {
		return wire.Message{Kind: wire.KindEnter, From: 2, To: 1, Epoch: s.View.Epoch, Name: name,
			Req: wire.RequestID{Node: 2, Seq: 1<<32 | seq}, Mode: wire.ModeExclusive, Lifetime: 60_000}
	}
	err := daemon.OnLoop(ctx, n, func() {
		// Enough for the reads of any turns before the two messages' and
		// for both of theirs; afterwards the clock runs on as time does.
		jumps.Store(10)
		tr.in <- enter("/a", 1)
		tr.in <- enter("/b", 2)
	})
	if err != nil {
		t.Fatal(err)
	}
	for acks := 0; acks < 2; {
		select {
		case <-tr.wake:
		case <-ctx.Done():
			t.Fatalf("the two ENTERINGs were not answered: %v", ctx.Err())
		}
		tr.mu.Lock()
		acks = 0
		for _, m := range tr.sent {
			if m.Kind == wire.KindEnterAck && m.To == 2 {
				acks++
			}
		}
		tr.mu.Unlock()
	}
	table, err := n.Locks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	since := map[string]time.Time{}
	for _, l := range table.Locks {
		for _, e := range l.Entries {
			since[l.Name] = e.Since
		}
	}
	if len(since) != 2 {
		t.Fatalf("the leader's table: %+v, want /a and /b", table.Locks)
	}
	if gap := since["/b"].Sub(since["/a"]); gap < 100*time.Millisecond {
		t.Fatalf("the second ENTERING was recorded %v after the first, want the 100 ms of the stop between them", gap)
	}
}

// waitStatus waits, at most settle, until cond holds for n's status.
func waitStatus(t *testing.T, n *daemon.Node, what string, cond func(api.Status) bool) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	s, err := n.WaitStatus(ctx, cond)
	if err != nil {
		t.Fatalf("not %s: %v; %+v", what, err, s)
	}
	return s
}

// A failed write (a full disk) stops the node from serving: NO_LOCK with the
// reason, no grant, and nothing more sent.
func TestStoreFailureStopsServing(t *testing.T) {
	d := &diskTwin{durable: core.NewDurable()}
	n, tr := startLone(t, d)
	waitStatus(t, n, "ready", func(s api.Status) bool { return s.Ready })
	l, err := n.Acquire(context.Background(), daemon.Request{Name: "/a", Mode: wire.ModeExclusive, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.durable.Tickets["/a"]) != 1 {
		t.Fatalf("the grant's ticket is not on the twin disk: %+v", d.durable.Tickets)
	}
	d.mu.Lock()
	d.broken = true
	d.mu.Unlock()
	tr.mu.Lock()
	before := len(tr.sent)
	tr.mu.Unlock()
	_, err = n.Acquire(context.Background(), daemon.Request{Name: "/b", Mode: wire.ModeExclusive, Duration: time.Minute, Try: true})
	if !errors.Is(err, daemon.ErrStoreFailed) {
		t.Fatalf("acquire on a broken disk: %v, want ErrStoreFailed", err)
	}
	s := waitStatus(t, n, "NO_LOCK", func(s api.Status) bool { return !s.Ready })
	if s.State != "NO_LOCK" || s.Reason == "" {
		t.Fatalf("status: %+v", s)
	}
	if _, err := n.Renew(context.Background(), l.ID); err == nil {
		t.Fatal("renew on a broken disk succeeded")
	}
	tr.mu.Lock()
	after := len(tr.sent)
	tr.mu.Unlock()
	if after != before {
		t.Fatalf("%d messages left the node after its disk failed", after-before)
	}
}

// Nothing of a Ready leaves the node before its writes are durable.
func TestNothingLeavesBeforeDurable(t *testing.T) {
	gate := &gatedDisk{release: make(chan struct{})}
	n, _ := startLone(t, gate)
	// The one-node election persists its promise before anything else; the
	// gate holds that write, so the view never reaches the core.
	waitStatus(t, n, "ticking", func(s api.Status) bool { return s.Stats.Ticks > 50 })
	s := waitStatus(t, n, "held", func(s api.Status) bool { return s.Stats.Persists > 0 })
	if s.Ready || s.View.Epoch != 0 {
		t.Fatalf("ready before its vote was durable: %+v", s)
	}
	close(gate.release)
	waitStatus(t, n, "ready once durable", func(s api.Status) bool { return s.Ready })
}

// gatedDisk makes every write durable only once release is closed.
type gatedDisk struct{ release chan struct{} }

func (g *gatedDisk) Submit(store.Batch) <-chan error {
	ch := make(chan error, 1)
	go func() { <-g.release; ch <- nil }()
	return ch
}

func (g *gatedDisk) Age() uint64 { return 0 }

// Releasing a request that still waits ends its Acquire at once, with
// ErrLost; a request that fails keeps its own reason.
func TestReleaseWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := startLone(t, &diskTwin{durable: core.NewDurable()})
		waitStatus(t, n, "ready", func(s api.Status) bool { return s.Ready })
		ctx := context.Background()
		if _, err := n.Acquire(ctx, daemon.Request{Name: "/a", Mode: wire.ModeExclusive, Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 1)
		go func() {
			_, err := n.Acquire(ctx, daemon.Request{Name: "/a", Mode: wire.ModeExclusive, Duration: time.Minute, Timeout: time.Hour})
			errs <- err
		}()
		synctest.Wait() // the second request went as far as it can: it waits
		tab, err := n.Locks(ctx, "/a")
		if err != nil {
			t.Fatal(err)
		}
		var waiting string
		for _, r := range tab.Requests {
			if r.Phase == "waiting" {
				waiting = r.Request
			}
		}
		if waiting == "" {
			t.Fatalf("the second request does not wait: %+v", tab.Requests)
		}
		if err := n.Release(ctx, waiting, ""); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; !errors.Is(err, codes.ErrLost) {
			t.Fatalf("the released waiter's Acquire: %v, want ErrLost", err)
		}
		_, err = n.Acquire(ctx, daemon.Request{Name: "/a", Mode: wire.ModeExclusive, Duration: time.Minute, Try: true})
		if !errors.Is(err, codes.ErrTimedOut) {
			t.Fatalf("a try on the held name: %v, want ErrTimedOut (its own reason)", err)
		}
	})
}

// A released lease leaves a tombstone in the store, and a leader hands it
// over with its table, streamed from the store: the new leader learns that
// the ticket was released even where an old leader missed the release.
func TestSnapshotFromStoreCarriesTombstones(t *testing.T) {
	st, _, err := store.Open(context.Background(), store.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n, tr := startLone(t, st)
	tr.mu.Lock()
	tr.wake = make(chan struct{}, 1)
	tr.mu.Unlock()
	s := waitStatus(t, n, "ready", func(s api.Status) bool { return s.Ready })
	ctx := context.Background()
	l, err := n.Acquire(ctx, daemon.Request{Name: "/a", Mode: wire.ModeExclusive, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A release that names another lock is not this lease's (ids repeat
	// across the lives of a node whose disk was lost): refused, and the
	// lease holds on.
	if err := n.Release(ctx, l.ID, l.Name+"x"); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("release naming another lock: %v, want semaphore.ErrUnknownLease", err)
	}
	if err := n.Release(ctx, l.ID, l.Name); err != nil {
		t.Fatal(err)
	}
	// Node 2 leads the next view and asks node 1, the last view's leader.
	tr.in <- wire.Message{Kind: wire.KindSnapshotRequest, From: 2, To: 1, SnapshotID: 1, SnapshotSince: 1,
		View: wire.View{Epoch: s.View.Epoch + 1, Leaders: []wire.NodeID{2}, PrevEpoch: s.View.Epoch, PrevLeaders: []wire.NodeID{1}}}
	var answer []wire.Message
	deadline := time.After(settle)
	for len(answer) == 0 || answer[len(answer)-1].Kind != wire.KindSnapshotDone {
		select {
		case <-tr.wake:
		case <-deadline:
			t.Fatalf("no whole snapshot answer: %+v", answer)
		}
		answer = answer[:0]
		tr.mu.Lock()
		for _, m := range tr.sent {
			if m.To == 2 && (m.Kind == wire.KindSnapshot || m.Kind == wire.KindSnapshotTomb || m.Kind == wire.KindSnapshotDone) {
				answer = append(answer, m)
			}
		}
		tr.mu.Unlock()
	}
	kinds := map[wire.Kind]int{}
	for _, m := range answer {
		kinds[m.Kind]++
		// What the mesh carries must pass its codec.
		if b, err := wire.Encode(nil, &m); err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		} else if _, err := wire.Decode(b); err != nil {
			t.Fatalf("decode %+v: %v", m, err)
		}
		if m.Kind == wire.KindSnapshotTomb && (m.Name != "/a" || m.Req.Node != 1 || m.Lifetime == 0) {
			t.Fatalf("tombstone %+v", m)
		}
	}
	// The high-water mark, the tombstone, and no ticket.
	if kinds[wire.KindSnapshot] != 1 || kinds[wire.KindSnapshotTomb] != 1 || answer[len(answer)-1].AnswerSize != 2 {
		t.Fatalf("answer: %+v", answer)
	}
}

// An answer about one name does not wait for another name's write on its
// way to disk (core.Write.Scope): while /slow's ticket is not durable,
// /fast's ENTERING is answered and it goes on to ADD_TICKET, and nothing
// of /slow's that rests on its ticket leaves; once the disk catches up,
// both are granted.
func TestAnswersDoNotWaitForOtherNamesWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &nameGate{twin: &diskTwin{durable: core.NewDurable()}, name: "/slow"}
		n, _ := startLone(t, d)
		waitStatus(t, n, "ready", func(s api.Status) bool { return s.Ready })
		ctx := context.Background()
		granted := make(chan error, 2)
		acquire := func(name string) {
			_, err := n.Acquire(ctx, daemon.Request{Name: name, Mode: wire.ModeExclusive, Duration: time.Minute, Timeout: time.Hour})
			granted <- err
		}
		phase := func(name string) string {
			tab, err := n.Locks(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tab.Requests {
				return r.Phase
			}
			return "none"
		}
		go acquire("/slow")
		synctest.Wait()
		if p := phase("/slow"); p != "add-ticket" {
			t.Fatalf("/slow is %s, want add-ticket: its ticket is on its way to disk", p)
		}
		go acquire("/fast")
		synctest.Wait()
		// The store is in order: /fast's ticket waits behind /slow's, but
		// its ENTERING needed no write.
		if p := phase("/fast"); p != "add-ticket" {
			t.Fatalf("/fast is %s, want add-ticket: its ENTERING waited for /slow's write", p)
		}
		if p := phase("/slow"); p != "add-ticket" {
			t.Fatalf("/slow is %s before its ticket is durable", p)
		}
		d.open()
		for range 2 {
			if err := <-granted; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// nameGate holds, from the first batch that writes name (not lazily) on,
// every batch until open: a disk whose fsync of that batch takes long.
// Batches stay in order, as the store's do.
type nameGate struct {
	twin *diskTwin
	name string
	mu   sync.Mutex
	shut bool
	held []gatedBatch
	done bool
}

type gatedBatch struct {
	b  store.Batch
	ch chan error
}

func (g *nameGate) Submit(b store.Batch) <-chan error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done && !g.shut && slices.ContainsFunc(b.Writes, func(w core.Write) bool { return w.Name == g.name && !w.Lazy }) {
		g.shut = true
	}
	if !g.shut {
		return g.twin.Submit(b)
	}
	ch := make(chan error, 1)
	g.held = append(g.held, gatedBatch{b: b, ch: ch})
	return ch
}

// open makes the held batches durable, in order, and every later one at once.
func (g *nameGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.held {
		h.ch <- <-g.twin.Submit(h.b)
	}
	g.held, g.shut, g.done = nil, false, true
}

func (g *nameGate) Age() uint64 { return g.twin.Age() }

func (g *nameGate) Snapshot(fn func(string, uint64, []core.DurableTicket) error) (uint64, error) {
	return g.twin.Snapshot(fn)
}
