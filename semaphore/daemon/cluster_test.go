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
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// Clusters of real agents in one process: real libp2p on 127.0.0.1, real
// Badger files in temporary directories.

const settle = 30 * time.Second // bound on waiting for a cluster's state; far above what it takes

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

// nodeStr spells a node id as the API does.
func nodeStr(id wire.NodeID) string { return strconv.FormatUint(uint64(id), 10) }

// dump logs every running node's status and table of name, for a failure.
func (c *cluster) dump(name string) {
	for i, a := range c.agents {
		if a == nil {
			continue
		}
		s, err := c.node(i).Status(context.Background())
		c.t.Logf("node %d (%d): err %v, status %+v", i+1, a.Host().Self(), err, s)
		tab, err := c.node(i).Locks(context.Background(), name)
		c.t.Logf("node %d table: %+v, err %v", i+1, tab, err)
	}
}

func (c *cluster) status(i int) api.Status {
	c.t.Helper()
	s, err := c.node(i).Status(context.Background())
	if err != nil {
		c.t.Fatalf("status of node %d: %v", i+1, err)
	}
	return s
}

// waitFor polls cond until it holds, failing the test after settle.
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
	var last api.Status
	c.waitFor("ready on one view", func() bool {
		epoch := uint64(0)
		for i, a := range c.agents {
			if a == nil {
				continue
			}
			s := c.status(i)
			if !s.Ready || epoch != 0 && s.View.Epoch != epoch {
				return false
			}
			epoch, last = s.View.Epoch, s
		}
		return true
	})
	return last
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

func TestLocksAcrossNodes(t *testing.T) {
	c := startCluster(t, clusterOpts{size: 3})
	st := c.waitReady()
	if len(st.View.Leaders) != 3 {
		t.Fatalf("view %+v, want three leaders", st.View)
	}
	held := mustAcquire(t, c.node(0), "/site", "exclusive", time.Minute)

	// A try from another node is refused while the lock is held.
	if _, err := acquire(t, c.node(1), "/site", "exclusive", 0, time.Minute); !errors.Is(err, codes.ErrTimedOut) {
		t.Fatalf("try on a held name: %v, want timed out", err)
	}
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
	c.waitFor("the waiter queued", func() bool {
		tab, err := c.node(2).Locks(context.Background(), "/site")
		return err == nil && len(tab.Requests) == 1 && tab.Requests[0].Phase == "waiting"
	})
	// A leader lists node 1's lease as the holder and node 3's request as
	// waiting, with the times it learned of them. (Which leader: both
	// tickets are durable at a quorum, and two quorums meet; a leader
	// outside a quorum may have missed one.)
	c.waitFor("a leader's table to show holder and waiter", func() bool {
		for i := range 3 {
			tab, err := c.node(i).Locks(context.Background(), "/site")
			if err != nil || len(tab.Locks) != 1 || len(tab.Locks[0].Entries) != 2 {
				continue
			}
			h, w := tab.Locks[0].Entries[0], tab.Locks[0].Entries[1]
			if h.Request == held.ID && h.Holder && !w.Holder && w.Ticket > h.Ticket &&
				!h.Since.IsZero() && h.Until.After(h.Since) {
				return true
			}
		}
		return false
	})
	if err := c.node(0).Release(context.Background(), held.ID); err != nil {
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
}

// A leader stops; the new view's leaders take its table over from the
// others' Badger over the network, and the held lease stays in force.
func TestLeaderLossKeepsLocks(t *testing.T) {
	// Four nodes, node 4 last in priority: it becomes a leader only when
	// one of the three first leaders is lost.
	c := startCluster(t, clusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}})
	st := c.waitReady()
	if slices.Contains(st.View.Leaders, nodeStr(c.agents[3].Host().Self())) {
		t.Fatalf("node 4 leads from the start: %+v", st.View)
	}
	// Node 2 holds a lock; node 1, a leader, will be stopped.
	held := mustAcquire(t, c.node(1), "/db", "exclusive", 10*time.Minute)
	lost := c.agents[0].Host().Self()
	c.stop(0)
	c.waitFor("a new view without node 1", func() bool {
		for _, i := range []int{1, 2, 3} {
			s := c.status(i)
			if !s.Ready || slices.Contains(s.View.Leaders, nodeStr(lost)) {
				return false
			}
		}
		return true
	})
	s4 := c.status(3)
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
	if err := c.node(1).Release(context.Background(), held.ID); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, c.node(2), "/db", "exclusive", time.Minute)
	if l.Token <= held.Token {
		t.Fatalf("token %d after %d", l.Token, held.Token)
	}
}

// Restarting every leader from its data directory keeps a lease held by a
// client of a node that stayed up, and the fencing high-water marks; a
// restart of the whole cluster keeps the high-water marks.
func TestRestartFromDisk(t *testing.T) {
	c := startCluster(t, clusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}})
	c.waitReady()
	held := mustAcquire(t, c.agents[3].Node(), "/cart", "exclusive", 10*time.Minute)
	other := mustAcquire(t, c.node(0), "/other", "exclusive", time.Minute)
	if err := c.node(0).Release(context.Background(), other.ID); err != nil {
		t.Fatal(err)
	}
	// The leaders stop right after the release: one of them may not have
	// it yet. The others' tombstones, on disk, keep its ticket from coming
	// back with the handoff after the restart (issue 11, item 5), or the
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
	// Whole cluster, the holder's agent included: its client outlives the
	// agent, so the lease stays until released (issue 11, break 2).
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
	// The client gives it back through its restarted agent, by the id it
	// was given; the agent learns its former leases from the leaders.
	c.waitFor("node 4 releases its former lease", func() bool {
		return c.node(3).Release(context.Background(), held.ID) == nil
	})
	l2, err := acquire(t, c.node(2), "/cart", "exclusive", settle, time.Minute)
	if err != nil {
		c.dump("/cart")
		t.Fatalf("acquire /cart after its release: %v", err)
	}
	if l2.Token <= held.Token {
		t.Fatalf("token %d on /cart after a restart, %d before", l2.Token, held.Token)
	}
}

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
			s, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "stranger", InMemory: true, Join: true,
				Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: addrs, PSK: tc.psk})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Stop(ctx); err != nil {
					t.Error(err)
				}
			}()
			c.waitFor("the stranger's dials failing", func() bool { return s.Host().Stats().DialFailures >= 3 })
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

// A table larger than a peer's send queue (1024 frames) is handed over
// whole. (Whether the queue would overflow here depends on timing; that
// SendWait never drops is p2p's TestSendWaitNeverDrops.)
func TestBigHandoff(t *testing.T) {
	const names = 1500
	c := startCluster(t, clusterOpts{size: 4, priority: []uint8{1, 2, 3, 9}})
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
	lost := c.agents[0].Host().Self()
	start := time.Now()
	t.Cleanup(func() { // what the mesh did, for a failure's reader
		for i, a := range c.agents {
			if a != nil && t.Failed() {
				t.Logf("node %d's mesh: %+v", i+1, a.Host().Stats())
			}
		}
	})
	c.stop(0)
	c.waitFor("a new view without node 1, served by node 4", func() bool {
		s := c.status(3)
		return s.Ready && s.Serving && !slices.Contains(s.View.Leaders, nodeStr(lost))
	})
	t.Logf("handoff took %v", time.Since(start))
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
}

// With a quorum of the leaders lost, a request cannot be decided: a try
// answers not_ready at once, and a waiting request at its deadline, not
// timedout as if someone held the name (issue 11, break 5).
func TestQuorumLostIsNotReady(t *testing.T) {
	c := startCluster(t, clusterOpts{size: 3})
	c.waitReady()
	c.stop(1)
	c.stop(2)
	c.waitFor("node 1 NO_LOCK", func() bool { return !c.status(0).Ready })
	if _, err := acquire(t, c.node(0), "/site", "read-only", 0, time.Minute); !errors.Is(err, codes.ErrNotReady) {
		t.Fatalf("try without a quorum: %v, want not ready", err)
	}
	if _, err := acquire(t, c.node(0), "/site", "exclusive", 200*time.Millisecond, time.Minute); !errors.Is(err, codes.ErrNotReady) {
		t.Fatalf("wait without a quorum: %v, want not ready", err)
	}
}
