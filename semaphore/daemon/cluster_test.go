package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// Clusters in one process, two ways. The lock, handoff and restart logic
// runs on daemon.NewNode over the in-memory mesh (memNetwork): in a
// synctest bubble on the fake clock with disks in memory, or, where the
// test is about the disk, in real time on Badger files. A few tests run
// real agents (real libp2p on 127.0.0.1) to keep the mesh itself tested.

const settle = 30 * time.Second // bound on waiting for a cluster's state; far above what it takes

// waitReady waits until every node is LOCK_READY on one epoch, and returns
// the status of the last.
func waitReady(t *testing.T, nodes ...*daemon.Node) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	var epoch uint64
	for {
		// A pass waits for each node in turn; it is over when they all
		// stood on the epoch it started with.
		agreed := true
		var last api.Status
		for _, n := range nodes {
			s, err := n.WaitStatus(ctx, func(s api.Status) bool { return s.Ready && s.View.Epoch >= epoch })
			if err != nil {
				t.Fatalf("node %s not ready on epoch %d or later: %v; %+v", s.Node, epoch, err, s)
			}
			if s.View.Epoch != epoch {
				epoch, agreed = s.View.Epoch, false
			}
			last = s
		}
		if agreed {
			return last
		}
		if ctx.Err() != nil { // a wait whose condition holds returns even then
			t.Fatalf("after %v: the nodes are not ready on one epoch; last %+v", settle, last)
		}
	}
}

// waitStatusOf waits until cond holds for the status of every node at
// once: for each node in turn, then until one pass over them all (a
// reader's view of the cluster) finds it holding everywhere.
func waitStatusOf(t *testing.T, what string, cond func(api.Status) bool, nodes ...*daemon.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	for {
		for _, n := range nodes {
			if s, err := n.WaitStatus(ctx, cond); err != nil {
				t.Fatalf("node %s not %s: %v; %+v", s.Node, what, err, s)
			}
		}
		held := true
		for _, n := range nodes {
			s, err := n.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = held && cond(s)
		}
		if held {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("after %v: the nodes are not %s at once", settle, what)
		}
	}
}

func acquire(t *testing.T, n *daemon.Node, name string, mode string, timeout, duration time.Duration) (daemon.Lease, error) {
	t.Helper()
	m, err := semaphore.ParseMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	return n.Acquire(ctx, daemon.Request{Name: name, Mode: m, Timeout: timeout, Duration: duration})
}

func mustAcquire(t *testing.T, n *daemon.Node, name, mode string, duration time.Duration) daemon.Lease {
	t.Helper()
	l, err := acquire(t, n, name, mode, settle, duration)
	if err != nil {
		t.Fatalf("acquire %s %s: %v", name, mode, err)
	}
	return l
}

// testLogger logs to stderr when SLUICE_TEST_LOG is set (debug, info...).
func testLogger(node int) *slog.Logger {
	lvl := os.Getenv("SLUICE_TEST_LOG")
	if lvl == "" {
		return nil
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(lvl))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("n", node)
}

// memCluster runs nodes 1..size on daemon.NewNode over a memNetwork, every
// pair connected, as StartAgent would run them.
type memCluster struct {
	t     *testing.T
	opts  memClusterOpts
	net   *memNetwork
	ids   []wire.NodeID
	nodes []*memNode
	lives uint64 // the nonces handed out
}

type memClusterOpts struct {
	size     int
	priority []uint8 // per node; 0 = default
	// dir, when set, keeps each node's store in Badger files under it, for
	// the tests about the disk (in real time: Badger does not belong in a
	// bubble). Otherwise a diskTwin keeps it in memory.
	dir  string
	mesh memConfig
	// shareLease is NodeConfig.ShareLease (0: the default).
	shareLease time.Duration
	// nested is NodeConfig.NestedNames; codec, NodeConfig.Codec.
	nested bool
	codec  uint64
}

// memNode is one node: its disk outlives its lives.
type memNode struct {
	disk  *diskTwin    // in memory
	store *store.Store // on Badger: open while the node runs
	used  bool         // its store was opened before
	node  *daemon.Node // nil while stopped
	stop  func()
}

// startMemCluster starts the cluster; in a bubble, call it in the bubble.
func startMemCluster(t *testing.T, o memClusterOpts) *memCluster {
	t.Helper()
	c := &memCluster{t: t, opts: o, net: newMemNetwork(o.mesh)}
	for i := range o.size {
		c.ids = append(c.ids, wire.NodeID(i+1))
		c.nodes = append(c.nodes, &memNode{disk: &diskTwin{}})
	}
	for i, a := range c.ids {
		for _, b := range c.ids[i+1:] {
			c.net.Connect(a, b)
		}
	}
	t.Cleanup(func() {
		c.stopAll()
		c.net.Close()
	})
	for i := range o.size {
		c.start(i)
	}
	return c
}

// start starts node i from its disk, as StartAgent does.
func (c *memCluster) start(i int) {
	c.t.Helper()
	m, id := c.nodes[i], c.ids[i]
	var st daemon.Store = m.disk
	var state store.State
	if c.opts.dir == "" {
		state = m.disk.open()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		s, loaded, err := store.Open(ctx, store.Config{Dir: filepath.Join(c.opts.dir, fmt.Sprintf("n%d", i+1)),
			Identity: uint64(id), Fresh: !m.used, Logger: testLogger(i + 1)})
		if err != nil {
			c.t.Fatalf("open the store of node %d: %v", i+1, err)
		}
		m.store, st, state = s, s, loaded
	}
	m.used = true
	boot := c.ids
	if e := state.Election; e != nil && e.Cluster != 0 {
		boot = nil // the store rules after the first start
	}
	prio := uint8(election.DefaultPriority)
	if i < len(c.opts.priority) && c.opts.priority[i] != 0 {
		prio = c.opts.priority[i]
	}
	c.lives++
	n, err := daemon.NewNode(daemon.NodeConfig{Self: id, Bootstrap: boot, Nonce: c.lives, Peers: c.ids,
		ID:    election.ID{Priority: prio, Address: "mem", PID: 1, Name: fmt.Sprintf("n%d", i+1)},
		State: state, Transport: c.net.Attach(id, c.ids), Store: st, ShareLease: c.opts.shareLease, Logger: testLogger(i + 1),
		NestedNames: c.opts.nested, Codec: c.opts.codec})
	if err != nil {
		c.t.Fatalf("node %d: %v", i+1, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx) // nil when ctx ends
	}()
	m.node = n
	m.stop = func() {
		// Not answered when the leaders are gone: Agent.Stop goes on too.
		_ = n.StopSharing(context.Background())
		cancel()
		<-done
		c.net.Detach(id)
		if m.store != nil {
			if err := m.store.Close(); err != nil {
				c.t.Errorf("close the store of node %d: %v", i+1, err)
			}
			m.store = nil
		}
		m.node = nil
	}
}

// stop stops node i as Agent.Stop does: its shared read tickets, the
// loop, then the mesh, then the store.
func (c *memCluster) stop(i int) {
	if m := c.nodes[i]; m.node != nil {
		m.stop()
	}
}

func (c *memCluster) stopAll() {
	for i := range c.nodes {
		c.stop(i)
	}
}

func (c *memCluster) node(i int) *daemon.Node { return c.nodes[i].node }

// running are the nodes that run.
func (c *memCluster) running() []*daemon.Node {
	var out []*daemon.Node
	for _, m := range c.nodes {
		if m.node != nil {
			out = append(out, m.node)
		}
	}
	return out
}

func (c *memCluster) waitReady() api.Status {
	c.t.Helper()
	return waitReady(c.t, c.running()...)
}

// dump logs every running node's status and table of name, for a failure.
func (c *memCluster) dump(name string) {
	for i, n := range c.nodes {
		if n.node == nil {
			continue
		}
		s, err := n.node.Status(context.Background())
		c.t.Logf("node %d: err %v, status %+v", i+1, err, s)
		tab, err := n.node.Locks(context.Background(), name)
		c.t.Logf("node %d table: %+v, err %v", i+1, tab, err)
	}
}

func TestLocksAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		held := holdOnFirst(t, c)
		// A waiter on node 3 is granted once node 1 releases, with a larger token.
		got := make(chan daemon.Lease, 1)
		errs := make(chan error, 1)
		go func() {
			l, err := acquire(t, c.node(2), "/site", "exclusive", settle, time.Minute)
			if err != nil {
				errs <- err
				return
			}
			got <- l
		}()
		// Everything the request set going has happened once the bubble
		// is idle: it waits for the holder.
		synctest.Wait()
		tab, err := c.node(2).Locks(context.Background(), "/site")
		if err != nil || len(tab.Requests) != 1 || tab.Requests[0].Phase != "waiting" {
			t.Fatalf("the waiter is not queued: %+v, %v", tab.Requests, err)
		}
		// A leader lists node 1's lease as the holder and node 3's request as
		// waiting, with the times it learned of them. (Which leader: both
		// tickets are durable at a quorum, and two quorums meet; a leader
		// outside a quorum may have missed one.)
		shown := false
		for i := range 3 {
			tab, err := c.node(i).Locks(context.Background(), "/site")
			if err != nil || len(tab.Locks) != 1 || len(tab.Locks[0].Entries) != 2 {
				continue
			}
			h, w := tab.Locks[0].Entries[0], tab.Locks[0].Entries[1]
			if h.Request == held.ID && h.Holder && !w.Holder && w.Ticket > h.Ticket &&
				!h.Since.IsZero() && h.Until.After(h.Since) {
				shown = true
			}
		}
		if !shown {
			c.dump("/site")
			t.Fatal("no leader's table shows the holder and the waiter")
		}
		if err := c.node(0).Release(context.Background(), held.ID, ""); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-got:
			if l.Token <= held.Token {
				t.Fatalf("token %d after %d: fencing tokens must grow", l.Token, held.Token)
			}
		case err := <-errs:
			t.Fatalf("waiter: %v", err)
		}

		// Readers on different nodes share.
		r1 := mustAcquire(t, c.node(0), "/shop", "read-only", time.Minute)
		r2 := mustAcquire(t, c.node(1), "/shop", "read-only", time.Minute)
		if r1.Token == r2.Token {
			t.Fatalf("two readers with token %d", r1.Token)
		}
	})
}

// A leader stops; the new view's leaders take its table over from the
// others' stores over the network, and the held lease stays in force.
func TestLeaderLossKeepsLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Four nodes, node 4 last in priority: it becomes a leader only when
		// one of the three first leaders is lost.
		c := startMemCluster(t, memClusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}})
		st := c.waitReady()
		if slices.Contains(st.View.Leaders, nodeStr(c.ids[3])) {
			t.Fatalf("node 4 leads from the start: %+v", st.View)
		}
		// Node 2 holds a lock; node 1, a leader, will be stopped.
		held := mustAcquire(t, c.node(1), "/db", "exclusive", 10*time.Minute)
		lost := nodeStr(c.ids[0])
		c.stop(0)
		waitStatusOf(t, "on a new view without node 1", func(s api.Status) bool {
			return s.Ready && !slices.Contains(s.View.Leaders, lost)
		}, c.node(1), c.node(2), c.node(3))
		s4, err := c.node(3).Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !s4.Leader || !s4.Serving || s4.View.PrevEpoch == 0 {
			t.Fatalf("node 4 is not a serving leader that took over: %+v", s4)
		}
		// Node 4 never saw the lock: it has it only from the handoff.
		tab, err := c.node(3).Locks(context.Background(), "/db")
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Locks) != 1 || len(tab.Locks[0].Entries) != 1 || tab.Locks[0].Entries[0].Request != held.ID ||
			tab.Locks[0].Entries[0].Ticket != held.Token {
			t.Fatalf("node 4's table after the handoff: %+v, want %s with ticket %d", tab.Locks, held.ID, held.Token)
		}
		// The lease is in force: a try from another node is refused, and the
		// holder can renew it.
		if _, err := acquire(t, c.node(2), "/db", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
			t.Fatalf("try on the held name after the handoff: %v, want timed out", err)
		}
		if _, err := c.node(1).Renew(context.Background(), held.ID); err != nil {
			t.Fatalf("renew after the handoff: %v", err)
		}
		if err := c.node(1).Release(context.Background(), held.ID, ""); err != nil {
			t.Fatal(err)
		}
		l := mustAcquire(t, c.node(2), "/db", "exclusive", time.Minute)
		if l.Token <= held.Token {
			t.Fatalf("token %d after %d", l.Token, held.Token)
		}
	})
}

// Restarting every leader from its data directory keeps a lease held by a
// client of a node that stayed up, and the fencing high-water marks; a
// restart of the whole cluster keeps the high-water marks. On Badger
// files, in real time: the test is about what the disk keeps.
func TestRestartFromDisk(t *testing.T) {
	c := startMemCluster(t, memClusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}, dir: t.TempDir()})
	c.waitReady()
	held := mustAcquire(t, c.node(3), "/cart", "exclusive", 10*time.Minute)
	other := mustAcquire(t, c.node(0), "/other", "exclusive", time.Minute)
	if err := c.node(0).Release(context.Background(), other.ID, ""); err != nil {
		t.Fatal(err)
	}
	// The leaders stop right after the release: one of them may not have
	// it yet. The others' tombstones, on disk, keep its ticket from coming
	// back with the handoff after the restart, or the
	// try on /other below would wait for the lease's minute.
	for i := range 3 {
		c.stop(i)
	}
	for i := range 3 {
		c.start(i)
	}
	c.waitReady()
	if _, err := acquire(t, c.node(1), "/cart", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
		t.Fatalf("try on /cart after the leaders restarted: %v, want timed out (held by node 4)", err)
	}
	if _, err := c.node(3).Renew(context.Background(), held.ID); err != nil {
		t.Fatalf("renew after the leaders restarted: %v", err)
	}
	// Whole cluster, the holder's node included: its client outlives the
	// node, so the lease stays until released. The
	// restarted node 4 learns its former lease from the leaders.
	heldID, err := daemon.ParseLeaseID(held.ID)
	if err != nil {
		t.Fatal(err)
	}
	former := c.net.Delivered(func(m wire.Message) bool {
		return m.Kind == wire.KindFormer && m.To == c.ids[3] && m.Req == heldID
	})
	c.stopAll()
	for i := range 4 {
		c.start(i)
	}
	c.waitReady()
	l, err := acquire(t, c.node(2), "/other", "exclusive", settle, time.Minute)
	if err != nil {
		c.dump("/other")
		t.Fatalf("acquire /other after a full restart: %v", err)
	}
	if l.Token <= other.Token {
		t.Fatalf("token %d after a restart, %d before: the high-water mark was lost", l.Token, other.Token)
	}
	for i := range 4 {
		if got, err := acquire(t, c.node(i), "/cart", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
			t.Fatalf("try on /cart through node %d after a full restart: %+v, %v; want timed out (held through node 4)", i+1, got, err)
		}
	}
	// The client gives it back through its restarted node, by the id it
	// was given, once the node heard of it.
	select {
	case <-former:
	case <-time.After(settle):
		c.dump("/cart")
		t.Fatalf("after %v: node 4 never heard of its former lease", settle)
	}
	if err := c.node(3).Release(context.Background(), held.ID, ""); err != nil {
		c.dump("/cart")
		t.Fatalf("release of the former lease through the restarted node 4: %v", err)
	}
	l2, err := acquire(t, c.node(2), "/cart", "exclusive", settle, time.Minute)
	if err != nil {
		c.dump("/cart")
		t.Fatalf("acquire /cart after its release: %v", err)
	}
	if l2.Token <= held.Token {
		t.Fatalf("token %d on /cart after a restart, %d before", l2.Token, held.Token)
	}
}

// A table larger than a peer's send queue (1024 frames, as p2p's) is
// handed over whole. The links' delay holds the frames in the queue, so the
// stream must wait for room: SendWait, not a drop.
func TestBigHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const names = 1500
		c := startMemCluster(t, memClusterOpts{size: 4, priority: []uint8{1, 2, 3, 9},
			mesh: memConfig{QueueLen: 1024, Delay: time.Millisecond}})
		c.waitReady()
		work := make(chan int)
		errs := make(chan error, names)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := range work {
					_, err := c.node(1).Acquire(context.Background(), daemon.Request{Name: fmt.Sprintf("/n/%d", i),
						Mode: semaphore.Exclusive, Timeout: settle, Duration: 10 * time.Minute})
					errs <- err
				}
			})
		}
		for i := range names {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		lost := nodeStr(c.ids[0])
		start := time.Now()
		waited := c.net.stats.Waited.Load()
		c.stop(0)
		waitStatusOf(t, "on a new view without node 1, served by node 4", func(s api.Status) bool {
			return s.Ready && s.Serving && !slices.Contains(s.View.Leaders, lost)
		}, c.node(3))
		t.Logf("handoff took %v (fake time)", time.Since(start))
		if c.net.stats.Waited.Load() == waited {
			t.Fatal("no handoff frame waited for room: the table did not outgrow the queue")
		}
		tab, err := c.node(3).Locks(context.Background(), "/n/")
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, l := range tab.Locks {
			if len(l.Entries) == 1 {
				held++
			}
		}
		if held != names {
			t.Fatalf("node 4 took %d of %d held names over", held, names)
		}
	})
}

// With a quorum of the leaders lost, a request cannot be decided: a try
// answers not_ready at once, and a waiting request at its deadline, not
// timedout as if someone held the name.
func TestQuorumLostIsNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startMemCluster(t, memClusterOpts{size: 3})
		c.waitReady()
		c.stop(1)
		c.stop(2)
		waitStatusOf(t, "NO_LOCK", func(s api.Status) bool { return !s.Ready }, c.node(0))
		if _, err := acquire(t, c.node(0), "/site", "read-only", 0, time.Minute); !errors.Is(err, codes.ErrNotReady) {
			t.Fatalf("try without a quorum: %v, want not ready", err)
		}
		start := time.Now()
		if _, err := acquire(t, c.node(0), "/site", "exclusive", 200*time.Millisecond, time.Minute); !errors.Is(err, codes.ErrNotReady) {
			t.Fatalf("wait without a quorum: %v, want not ready", err)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("a waiting request answered after %v, before its deadline", d)
		}
	})
}

// Clusters of real agents: real libp2p on 127.0.0.1, Badger in temporary
// directories. They keep the path through the mesh tested.

type cluster struct {
	t      *testing.T
	dirs   []string
	agents []*daemon.Agent
	opts   clusterOpts
	// members are the peer ids of the initial members: every node.
	members []string
}

type clusterOpts struct {
	size     int
	psk      []byte
	allow    []string // peer ids admitted; empty: any with the PSK
	priority []uint8  // per node; 0 = default
}

func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, opts: o, agents: make([]*daemon.Agent, o.size)}
	root := t.TempDir()
	for i := range o.size {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i+1)))
		key, _, err := p2p.LoadOrCreateIdentity(c.dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		pid, err := p2p.PeerIDOf(key)
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, pid.String())
	}
	t.Cleanup(c.stopAll)
	for i := range o.size {
		c.start(i)
	}
	return c
}

// start starts node i from its data directory; it knows every running node.
func (c *cluster) start(i int) {
	c.t.Helper()
	var peers []string
	for j, a := range c.agents {
		if a != nil && j != i {
			peers = append(peers, a.Host().Addrs()...)
		}
	}
	cfg := daemon.AgentConfig{Name: fmt.Sprintf("n%d", i+1), DataDir: c.dirs[i], InitialMembers: c.members,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: peers, PSK: c.opts.psk, AllowList: c.opts.allow, Logger: testLogger(i + 1)}
	if i < len(c.opts.priority) {
		cfg.Priority = c.opts.priority[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, cfg)
	if err != nil {
		c.t.Fatalf("start node %d: %v", i+1, err)
	}
	c.agents[i] = a
}

func (c *cluster) stop(i int) {
	if a := c.agents[i]; a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			c.t.Errorf("stop node %d: %v", i+1, err)
		}
		c.agents[i] = nil
	}
}

func (c *cluster) stopAll() {
	for i := range c.agents {
		c.stop(i)
	}
}

func (c *cluster) node(i int) *daemon.Node { return c.agents[i].Node() }

func (c *cluster) status(i int) api.Status {
	c.t.Helper()
	s, err := c.node(i).Status(context.Background())
	if err != nil {
		c.t.Fatalf("status of node %d: %v", i+1, err)
	}
	return s
}

// waitFor polls cond until it holds, failing the test after settle. Only
// for conditions no node signals (the API tests' tables).
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(settle)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: still not %s", settle, what)
		}
		<-tick.C
	}
}

// waitReady waits until every running node is LOCK_READY on one epoch.
func (c *cluster) waitReady() api.Status {
	c.t.Helper()
	var nodes []*daemon.Node
	for _, a := range c.agents {
		if a != nil {
			nodes = append(nodes, a.Node())
		}
	}
	return waitReady(c.t, nodes...)
}

// Locks across real agents: the bakery's messages over libp2p.
func TestLocksAcrossAgents(t *testing.T) {
	c := startCluster(t, clusterOpts{size: 3})
	held := holdOnFirst(t, c)
	if err := c.node(0).Release(context.Background(), held.ID, ""); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, c.node(2), "/site", "exclusive", time.Minute)
	if l.Token <= held.Token {
		t.Fatalf("token %d after %d: fencing tokens must grow", l.Token, held.Token)
	}
	// The name's next locks on the same node propose the next number
	// with the choosing flag: a doorway in one round, unless a leader's
	// answer was later than the node's retransmit timer (40 ms), which a
	// few more locks get past. /metrics counts them as the core does,
	// and counts the messages to the peers by kind.
	n := c.node(2)
	for i := 0; c.status(2).Core.OneRoundDoorways == 0; i++ {
		if i == 20 {
			t.Fatal("20 locks of a name the node had locked, none in one round")
		}
		if err := n.Release(context.Background(), l.ID, ""); err != nil {
			t.Fatal(err)
		}
		next := mustAcquire(t, n, "/site", "exclusive", time.Minute)
		if next.Token <= l.Token {
			t.Fatalf("token %d after %d: fencing tokens must grow", next.Token, l.Token)
		}
		l = next
	}
	want := c.status(2).Core.OneRoundDoorways
	if got := metricValue(t, n, "sluice_one_round_doorways_total", ""); got != float64(want) {
		t.Errorf("sluice_one_round_doorways_total %v, status says %d", got, want)
	}
	if got := metricValue(t, n, "sluice_peer_messages_total", "enter"); got < 2 {
		t.Errorf(`sluice_peer_messages_total{kind="enter"} %v: each lock sends ENTERING to both other leaders`, got)
	}
	if got := metricValue(t, c.node(0), "sluice_peer_messages_total", "enter-ack"); got < 1 {
		t.Errorf(`sluice_peer_messages_total{kind="enter-ack"} %v at a leader that answered ENTERING`, got)
	}
}

// metricValue is the value of the counter name of n's /metrics registry
// (its child of label kind, when kind is not empty); the test fails
// without it.
func metricValue(t *testing.T, n *daemon.Node, name, kind string) float64 {
	t.Helper()
	fams, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if kind == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "kind" && l.GetValue() == kind }) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{kind=%q} in the metrics", name, kind)
	return 0
}

// logSignal is a slog.Handler that signals every record with one of the
// messages msgs: the event to wait for where the code logs one and offers
// no other.
type logSignal struct {
	msgs []string
	ch   chan struct{} // room for one: a signal says "at least one since"
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if slices.Contains(h.msgs, r.Message) {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSignal) WithGroup(string) slog.Handler      { return h }

// A stranger cannot join: not with the wrong cluster secret, and not, with
// the right one, when it is missing from the allow-list. Each tries (its
// dials fail), stays NO_LOCK, and never shows up among the cluster's
// members.
func TestStrangersCannotJoin(t *testing.T) {
	psk := bytes.Repeat([]byte{7}, 32)
	root := t.TempDir()
	var allow []string
	for i := range 3 {
		key, _, err := p2p.LoadOrCreateIdentity(filepath.Join(root, fmt.Sprintf("n%d", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		id, err := p2p.PeerIDOf(key)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, id.String())
	}
	c := &cluster{t: t, opts: clusterOpts{size: 3, psk: psk, allow: allow}, agents: make([]*daemon.Agent, 3), members: allow}
	for i := range 3 {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i+1)))
	}
	t.Cleanup(c.stopAll)
	for i := range 3 {
		c.start(i)
	}
	c.waitReady()
	var addrs []string
	for _, a := range c.agents {
		addrs = append(addrs, a.Host().Addrs()...)
	}
	for _, tc := range []struct {
		name string
		psk  []byte
	}{
		{"wrong secret", bytes.Repeat([]byte{8}, 32)},
		{"not on the allow-list", psk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), settle)
			defer cancel()
			// The mesh logs every failed dial, of a connection or of the
			// lock stream, after counting it.
			failed := &logSignal{msgs: []string{"p2p: dial failed", "p2p: open lock stream failed"}, ch: make(chan struct{}, 1)}
			s, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "stranger", InMemory: true, Join: true,
				Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: addrs, PSK: tc.psk, Logger: slog.New(failed)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Stop(ctx); err != nil {
					t.Error(err)
				}
			}()
			for s.Host().Stats().DialFailures < 3 {
				select {
				case <-failed.ch:
				case <-ctx.Done():
					t.Fatalf("after %v: %d dials of the stranger failed, want 3", settle, s.Host().Stats().DialFailures)
				}
			}
			st, err := s.Node().Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Ready || len(st.Members) != 1 || st.Stats.MessagesIn != 0 {
				t.Fatalf("the stranger joined: %+v", st)
			}
			stranger := s.Host().Self()
			for i := range 3 {
				for _, m := range c.status(i).Members {
					if m.Node == nodeStr(stranger) {
						t.Fatalf("node %d knows the stranger: %+v", i+1, m)
					}
				}
				for _, m := range c.agents[i].Host().Members() {
					if m.Node == stranger {
						t.Fatalf("node %d's mesh knows the stranger: %+v", i+1, m)
					}
				}
			}
		})
	}
}

// nodeStr spells a node id as the API does.
func nodeStr(id wire.NodeID) string { return strconv.FormatUint(uint64(id), 10) }

// lockCluster is a cluster of either kind: in memory or real agents.
type lockCluster interface {
	waitReady() api.Status
	node(i int) *daemon.Node
}

// holdOnFirst waits for a ready view of three leaders, takes /site
// exclusively on node 1, and checks that a try from node 2 is refused
// while it is held.
func holdOnFirst(t *testing.T, c lockCluster) daemon.Lease {
	t.Helper()
	if st := c.waitReady(); len(st.View.Leaders) != 3 {
		t.Fatalf("view %+v, want three leaders", st.View)
	}
	held := mustAcquire(t, c.node(0), "/site", "exclusive", time.Minute)
	if _, err := acquire(t, c.node(1), "/site", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
		t.Fatalf("try on a held name: %v, want timed out", err)
	}
	return held
}
