package daemon_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// sleepyClock is a machine's boot clock as its node reads it
// (NodeConfig.Clock), on the bubble's fake clock. A suspended process does
// not run, so it reads nothing: the node of a machine put to sleep still
// runs in the test, so the clock it reads stands still instead, and the
// test keeps everything from reaching it. At the wake-up the clock jumps
// by the whole sleep, as CLOCK_BOOTTIME does, while the ticker, which
// follows Go's monotonic clock, has not fired since.
type sleepyClock struct {
	mu      sync.Mutex
	start   time.Time
	asleep  bool
	stopped time.Duration // the reading while asleep
}

// sleepyOrigin is where the clock starts: any origin must do.
const sleepyOrigin = 1000 * time.Hour

func newSleepyClock() *sleepyClock { return &sleepyClock{start: time.Now()} }

func (c *sleepyClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asleep {
		return c.stopped
	}
	return sleepyOrigin + time.Since(c.start)
}

func (c *sleepyClock) sleep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped, c.asleep = sleepyOrigin+time.Since(c.start), true
}

func (c *sleepyClock) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asleep = false
}

// startClockCluster runs nodes 1..size over a memNetwork, node i on
// clocks[i] (nil: the default clock), with the default tick and share
// lease. Call it in a bubble.
func startClockCluster(t *testing.T, clocks []func() time.Duration) (*memNetwork, []*daemon.Node) {
	t.Helper()
	net := newMemNetwork(memConfig{})
	var ids []wire.NodeID
	for i := range clocks {
		ids = append(ids, wire.NodeID(i+1))
	}
	for i, a := range ids {
		for _, b := range ids[i+1:] {
			net.Connect(a, b)
		}
	}
	var (
		nodes []*daemon.Node
		stops []func()
	)
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
		net.Close()
	})
	for i, id := range ids {
		// Smaller ids win the election: nodes 1..3 lead.
		d := &diskTwin{}
		n, err := daemon.NewNode(daemon.NodeConfig{Self: id, Bootstrap: ids, Nonce: uint64(i + 1), Peers: ids,
			ID:    election.ID{Priority: election.DefaultPriority, Address: "mem", PID: 1, Name: fmt.Sprintf("n%d", i+1)},
			State: d.open(), Transport: net.Attach(id, ids), Store: d, Clock: clocks[i],
			Logger: testLogger(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = n.Run(ctx)
		}()
		stops = append(stops, func() { cancel(); <-done })
		nodes = append(nodes, n)
	}
	return net, nodes
}

// The suspend case. A machine is suspended (a laptop's lid, a VM its host
// paused) while its agent holds a shared read ticket; meanwhile the
// leaders let the ticket expire and grant a drain's writer. At the
// wake-up, the agent's first call is a page view, taken before its ticker
// fired. Its ticks must be caught up with the boot clock before that call
// is run: the share's lease ended during the sleep, so the page view must
// go to the leaders, or wait, not be granted beside the writer. (Ticks
// counted on Go's monotonic clock, which stands still through a suspend,
// or caught up only when the ticker fired, granted it on the stale share.)
func TestSuspendedNodeDropsStaleShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newSleepyClock()
		net, nodes := startClockCluster(t, []func() time.Duration{nil, nil, nil, clock.now})
		waitReady(t, nodes...)
		sleeper := nodes[3]
		ctx := context.Background()

		// A page view on node 4 takes the node's shared read ticket; the
		// share lingers after it.
		r := mustAcquire(t, sleeper, "/site", "read-only", time.Minute)
		tab, err := sleeper.Locks(ctx, "/site")
		if err != nil || len(tab.Requests) != 1 || tab.Requests[0].Phase != "held-shared" {
			t.Fatalf("the page view is not on the node's share: %+v, %v", tab.Requests, err)
		}
		if err := sleeper.Release(ctx, r.ID, ""); err != nil {
			t.Fatal(err)
		}

		// The machine sleeps: its node reads no time pass and hears nothing.
		clock.sleep()
		net.Partition([]wire.NodeID{4}, []wire.NodeID{1, 2, 3})
		// A drain's writer is granted once the leaders let the
		// unreachable share expire.
		w := mustAcquire(t, nodes[1], "/site", "read-write-priority", 10*time.Minute)
		slept := time.Since(clock.start) - (clock.stopped - sleepyOrigin)
		if slept <= daemon.DefaultShareLease {
			t.Fatalf("the writer came after %v asleep, within the share's lease", slept)
		}

		// The wake-up: the boot clock jumped, the network is back, and no
		// tick ran yet; the first thing node 4 runs is a page view.
		clock.wake()
		net.Heal()
		_, err = acquire(t, sleeper, "/site", "read-only", 0, time.Second)
		if err == nil {
			t.Fatal("a page view was granted beside the drain's writer, on a share that expired while the node slept")
		}
		t.Logf("page view after the wake-up: %v", err)
		s, err := sleeper.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64((clock.now() - sleepyOrigin) / daemon.DefaultTick); s.Stats.Ticks != want {
			t.Fatalf("node 4 ran %d ticks, its clock says %d", s.Stats.Ticks, want)
		}
		// One that may wait goes through the bakery, behind the writer.
		if l, err := acquire(t, sleeper, "/site", "read-only", 2*time.Second, time.Second); err == nil {
			t.Fatalf("a waiting page view was granted beside the writer: %+v", l)
		}
		tab, err = sleeper.Locks(ctx, "/site")
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range tab.Requests {
			if q.Phase == "held-shared" {
				t.Fatalf("node 4 holds a page view on its share beside the writer: %+v", tab.Requests)
			}
		}
		if err := nodes[1].Release(ctx, w.ID, ""); err != nil {
			t.Fatal(err)
		}
		// Served again once the writer is gone.
		waitStatusOf(t, "ready", func(s api.Status) bool { return s.Ready }, sleeper)
		mustAcquire(t, sleeper, "/site", "read-only", time.Second)
	})
}

// BenchmarkCatchUp measures what a node far behind its clock costs per
// tick: an idle one-node cluster whose clock jumps by b.N ticks.
//
//	go test ./semaphore/daemon -run '^$' -bench CatchUp -benchtime 1000000x
func BenchmarkCatchUp(b *testing.B) {
	var (
		mu      sync.Mutex
		elapsed time.Duration
	)
	clock := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return elapsed
	}
	d := &diskTwin{}
	n, err := daemon.NewNode(daemon.NodeConfig{Self: 1, Bootstrap: []wire.NodeID{1}, Transport: &loneTransport{in: make(chan wire.Message)},
		Store: d, ID: election.ID{Priority: 1, Address: "mem", Name: "n1"}, State: d.open(), Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(ticks uint64) api.Status {
		s, err := n.WaitStatus(ctx, func(s api.Status) bool { return s.Stats.Ticks >= ticks })
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	// The loop reads the clock's origin before it answers anything.
	if _, err := n.Status(ctx); err != nil {
		b.Fatal(err)
	}
	// Ready first: the ticks then are those of a serving node.
	for i := uint64(1); ; i++ {
		mu.Lock()
		elapsed = time.Duration(i) * daemon.DefaultTick
		mu.Unlock()
		if s := wait(i); s.Ready {
			break
		}
	}
	s, err := n.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	mu.Lock()
	elapsed += time.Duration(b.N) * daemon.DefaultTick
	mu.Unlock()
	wait(s.Stats.Ticks + uint64(b.N))
}
