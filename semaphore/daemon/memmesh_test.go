package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core/wire"
)

// memNetwork is the p2p mesh's in-memory twin for several nodes, in the
// style of hashicorp/raft's InmemTransport: each node gets an endpoint (a
// daemon.Transport), and the test wires, cuts and slows the links between
// them. It keeps the contract of p2p.Host that the node relies on:
//
//   - Send never blocks: each directed link has a bounded queue, like the
//     host's per-peer queue, and a message that does not fit, or that has
//     no live link to its receiver, is dropped (Send returns false).
//   - SendWait waits for room in that queue, until ctx ends.
//   - Messages of one link arrive in order, after the link's delay; what a
//     link holds when it goes down (Disconnect, Partition, a node detached)
//     is lost, as on a broken connection.
//   - Every message passes the wire codec, as on the real mesh, and arrives
//     with From set to its true sender, whatever the sender wrote there.
//   - Joined delivers the peers an endpoint learns after its start.
//
// One goroutine per directed link carries its messages into the receiver's
// inbox; the inbox is unbuffered, so a message counts as delivered when the
// receiving node's loop took it (see Delivered). Close stops them all.
//
// Under testing/synctest, create it inside the bubble: its channels and
// timers then belong to the bubble, and its delays run on the fake clock.
type memNetwork struct {
	cfg memConfig

	mu      sync.Mutex
	nodes   map[wire.NodeID]*memTransport // the attached endpoints
	links   map[memPair]*memLink          // directed
	watches []*memWatch

	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once

	stats memStats
}

// memConfig configures a memNetwork. Zero values mean the defaults.
type memConfig struct {
	// QueueLen bounds each directed link's queue; default 1024, as the
	// p2p host's per-peer queue.
	QueueLen int
	// Delay is every link's delay at Connect (SetDelay changes one).
	Delay time.Duration
}

// memStats counts what the network did, for assertions and failures.
type memStats struct {
	Sent, Delivered, Dropped atomic.Uint64
	// Waited counts SendWait calls that found their link's queue full.
	Waited atomic.Uint64
}

type memPair struct{ from, to wire.NodeID }

// memLink is one direction between two nodes.
type memLink struct {
	queue chan memFrame
	// wired: Connect'ed and not Disconnect'ed; cut: by Partition until Heal.
	wired, cut bool
	delay      time.Duration
	// down is closed when the link goes down, and replaced when it comes
	// up again: what a frame sent before carries is then lost.
	down chan struct{}
}

func (l *memLink) up() bool { return l.wired && !l.cut }

// memFrame is a message on its way, with the lives of its two ends.
type memFrame struct {
	m        wire.Message
	src, dst *memTransport
	due      time.Time
	down     chan struct{}
}

// lost says whether f's link went down or one of its ends is gone.
func (f *memFrame) lost() bool {
	select {
	case <-f.down:
	case <-f.src.closed:
	case <-f.dst.closed:
	default:
		return false
	}
	return true
}

// memWatch is a Delivered call.
type memWatch struct {
	match func(wire.Message) bool
	seen  chan struct{}
}

var (
	errMemDown   = errors.New("memmesh: no live link to the receiver")
	errMemClosed = errors.New("memmesh: network closed")
)

const memJoinedLen = 256 // as p2p's joined channel

func newMemNetwork(cfg memConfig) *memNetwork {
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 1024
	}
	return &memNetwork{cfg: cfg, nodes: map[wire.NodeID]*memTransport{}, links: map[memPair]*memLink{},
		done: make(chan struct{})}
}

// Close stops every link's goroutine. Endpoints stay readable (and empty),
// as p2p's channels are never closed.
func (n *memNetwork) Close() {
	n.closeOnce.Do(func() {
		close(n.done)
		n.wg.Wait()
	})
}

// Attach gives node id a new endpoint: its first, or that of a restarted
// node, whose former endpoint is detached. known are the peers the node is
// configured with (NodeConfig.Peers); live links to any other peer are
// announced on Joined, as the real mesh announces peers it learns.
func (n *memNetwork) Attach(id wire.NodeID, known []wire.NodeID) *memTransport {
	t := &memTransport{net: n, id: id, inbox: make(chan wire.Message), joined: make(chan wire.NodeID, memJoinedLen),
		closed: make(chan struct{}), known: map[wire.NodeID]bool{}}
	for _, p := range known {
		t.known[p] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.nodes[id]; old != nil {
		close(old.closed)
	}
	n.nodes[id] = t
	for p, l := range n.links {
		switch {
		case !l.up():
		case p.from == id:
			n.learn(id, p.to)
		case p.to == id:
			n.learn(p.from, id) // as a peer that hears from a new node
		}
	}
	return t
}

// Detach takes node id off the network, as a stopped process: what it
// sends and what is on its way to or from it is lost. Its links keep
// their state for the next Attach.
func (n *memNetwork) Detach(id wire.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t := n.nodes[id]; t != nil {
		close(t.closed)
		delete(n.nodes, id)
	}
}

// Connect links a and b both ways.
func (n *memNetwork) Connect(a, b wire.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setLinks(a, b, func(l *memLink) { l.wired = true })
}

// Disconnect unlinks a and b both ways.
func (n *memNetwork) Disconnect(a, b wire.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setLinks(a, b, func(l *memLink) { l.wired = false })
}

// Partition cuts every link between nodes of different groups until Heal;
// links of nodes named in no group stay as they are.
func (n *memNetwork) Partition(groups ...[]wire.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					n.setLinks(a, b, func(l *memLink) { l.cut = true })
				}
			}
		}
	}
}

// Heal undoes every Partition; what was never connected stays so.
func (n *memNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p, l := range n.links {
		if p.from < p.to && l.cut {
			n.setLinks(p.from, p.to, func(l *memLink) { l.cut = false })
		}
	}
}

// SetDelay makes the link between a and b take d each way, from the next
// message on; a link keeps its order even when its delay shrinks.
func (n *memNetwork) SetDelay(a, b wire.NodeID, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setLinks(a, b, func(l *memLink) { l.delay = d })
}

// Delivered returns a channel closed once a message for which match is
// true has been taken from its receiver's inbox. The receiving node steps
// a message it took before it runs any later call (its loop takes one
// case at a time), so after the signal, a call to that node sees the
// message's effect. Only messages delivered after the call count. match
// runs on a link's goroutine, with the network locked.
func (n *memNetwork) Delivered(match func(wire.Message) bool) <-chan struct{} {
	w := &memWatch{match: match, seen: make(chan struct{})}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watches = append(n.watches, w)
	return w.seen
}

// setLinks applies change to both directions between a and b, creating
// them, and handles what going up or down means. n.mu is held.
func (n *memNetwork) setLinks(a, b wire.NodeID, change func(*memLink)) {
	if a == b {
		return
	}
	for _, p := range []memPair{{a, b}, {b, a}} {
		l := n.links[p]
		if l == nil {
			l = &memLink{queue: make(chan memFrame, n.cfg.QueueLen), delay: n.cfg.Delay, down: make(chan struct{})}
			close(l.down)
			n.links[p] = l
			n.wg.Add(1)
			go n.carry(l)
		}
		was := l.up()
		change(l)
		switch now := l.up(); {
		case was && !now:
			close(l.down)
		case !was && now:
			l.down = make(chan struct{})
			n.learn(p.from, p.to)
		}
	}
}

// learn tells from's endpoint about peer, unless it knows it. n.mu is held.
func (n *memNetwork) learn(from, peer wire.NodeID) {
	t := n.nodes[from]
	if t == nil || t.known[peer] {
		return
	}
	t.known[peer] = true
	select {
	case t.joined <- peer:
	default: // nobody reads: dropped, as by p2p
	}
}

// send is Send (wait false) and SendWait.
func (n *memNetwork) send(ctx context.Context, src *memTransport, m wire.Message, wait bool) error {
	n.stats.Sent.Add(1)
	// Through the codec, as on the wire: the copy shares nothing with the
	// sender's message, and carries only what the mesh carries.
	b, err := wire.Encode(nil, &m)
	if err != nil {
		n.stats.Dropped.Add(1)
		return err
	}
	c, err := wire.Decode(b)
	if err != nil {
		n.stats.Dropped.Add(1)
		return err
	}
	c.From = src.id
	n.mu.Lock()
	l := n.links[memPair{src.id, m.To}]
	dst := n.nodes[m.To]
	if l == nil || !l.up() || dst == nil || n.nodes[src.id] != src {
		n.mu.Unlock()
		n.stats.Dropped.Add(1)
		return fmt.Errorf("%w: %d to %d", errMemDown, src.id, m.To)
	}
	f := memFrame{m: c, src: src, dst: dst, due: time.Now().Add(l.delay), down: l.down}
	n.mu.Unlock()
	select {
	case l.queue <- f:
		return nil
	default:
	}
	if !wait {
		n.stats.Dropped.Add(1)
		return fmt.Errorf("memmesh: queue from %d to %d full", src.id, m.To)
	}
	n.stats.Waited.Add(1)
	select {
	case l.queue <- f:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-f.down:
		err = errMemDown
	case <-src.closed:
		err = errMemDown
	case <-n.done:
		err = errMemClosed
	}
	n.stats.Dropped.Add(1)
	return err
}

// carry moves l's frames, in order, into their receivers' inboxes once
// they are due; frames whose link went down or whose ends are gone are lost.
func (n *memNetwork) carry(l *memLink) {
	defer n.wg.Done()
	for {
		var f memFrame
		select {
		case f = <-l.queue:
		case <-n.done:
			return
		}
		if d := time.Until(f.due); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-n.done:
				timer.Stop()
				return
			}
		}
		if f.lost() {
			n.stats.Dropped.Add(1)
			continue
		}
		select {
		case f.dst.inbox <- f.m:
			n.stats.Delivered.Add(1)
			n.seen(f.m)
		case <-f.down:
			n.stats.Dropped.Add(1)
		case <-f.src.closed:
			n.stats.Dropped.Add(1)
		case <-f.dst.closed:
			n.stats.Dropped.Add(1)
		case <-n.done:
			return
		}
	}
}

// seen answers the Delivered calls that m matches.
func (n *memNetwork) seen(m wire.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watches = slices.DeleteFunc(n.watches, func(w *memWatch) bool {
		if !w.match(m) {
			return false
		}
		close(w.seen)
		return true
	})
}

// memTransport is one node's endpoint: a daemon.Transport.
type memTransport struct {
	net    *memNetwork
	id     wire.NodeID
	inbox  chan wire.Message
	joined chan wire.NodeID
	// closed is closed when the endpoint is detached or replaced.
	closed chan struct{}
	known  map[wire.NodeID]bool // guarded by net.mu
}

func (t *memTransport) Send(m wire.Message) bool {
	return t.net.send(context.Background(), t, m, false) == nil
}

func (t *memTransport) SendAll(msgs []wire.Message) int {
	dropped := 0
	for _, m := range msgs {
		if !t.Send(m) {
			dropped++
		}
	}
	return dropped
}

func (t *memTransport) SendWait(ctx context.Context, m wire.Message) error {
	return t.net.send(ctx, t, m, true)
}

func (t *memTransport) Inbox() <-chan wire.Message { return t.inbox }
func (t *memTransport) Joined() <-chan wire.NodeID { return t.joined }

// Reach counts live links to attached peers, as p2p.Host's does
// connections: the node's status names the cause when it is zero.
func (t *memTransport) Reach() (connected, known int) {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for p := range t.known {
		if l := n.links[memPair{t.id, p}]; l != nil && l.up() && n.nodes[p] != nil {
			connected++
		}
	}
	return connected, len(t.known)
}

// The twin must keep the mesh's contract, or the tests on it prove nothing.
func TestMemNetwork(t *testing.T) {
	// mesh starts a network of nodes 1..size, all connected, in the bubble.
	mesh := func(t *testing.T, cfg memConfig, size int) (*memNetwork, []*memTransport) {
		n := newMemNetwork(cfg)
		t.Cleanup(n.Close)
		var ids []wire.NodeID
		for i := range size {
			ids = append(ids, wire.NodeID(i+1))
		}
		var ts []*memTransport
		for _, id := range ids {
			ts = append(ts, n.Attach(id, ids))
		}
		for i, a := range ids {
			for _, b := range ids[i+1:] {
				n.Connect(a, b)
			}
		}
		return n, ts
	}
	msg := func(to wire.NodeID, seq uint64) wire.Message {
		return wire.Message{Kind: wire.KindHello, From: 99, To: to, StoreAge: seq}
	}
	recv := func(t *testing.T, tr *memTransport) wire.Message {
		t.Helper()
		select {
		case m := <-tr.Inbox():
			return m
		case <-time.After(time.Minute): // fake time: only when nothing else can happen
			t.Fatalf("nothing arrives at node %d", tr.id)
			return wire.Message{}
		}
	}
	// none checks, once everything in flight has landed, that nothing is
	// there for tr.
	none := func(t *testing.T, tr *memTransport) {
		t.Helper()
		synctest.Wait()
		select {
		case m := <-tr.Inbox():
			t.Fatalf("node %d got %+v", tr.id, m)
		default:
		}
	}
	t.Run("in order, from the true sender, through the codec", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, ts := mesh(t, memConfig{}, 2)
			for i := range 100 {
				m := msg(2, uint64(i))
				m.Name = "/a"
				if !ts[0].Send(m) {
					t.Fatalf("send %d dropped", i)
				}
			}
			for i := range 100 {
				m := recv(t, ts[1])
				if m.StoreAge != uint64(i) || m.From != 1 || m.To != 2 || m.Kind != wire.KindHello {
					t.Fatalf("message %d: %+v", i, m)
				}
			}
			if ts[0].Send(msg(1, 0)) {
				t.Fatal("a send to itself was taken")
			}
			if ts[0].Send(msg(7, 0)) {
				t.Fatal("a send to an unknown node was taken")
			}
		})
	})
	t.Run("Send drops when the queue is full", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{QueueLen: 2}, 2)
			ts[0].Send(msg(2, 0))
			synctest.Wait() // the link holds it out, blocked on the unread inbox
			if !ts[0].Send(msg(2, 1)) || !ts[0].Send(msg(2, 2)) {
				t.Fatal("dropped with room in the queue")
			}
			if ts[0].Send(msg(2, 3)) {
				t.Fatal("a send to a full queue was taken")
			}
			if d := n.stats.Dropped.Load(); d != 1 {
				t.Fatalf("%d dropped, want 1", d)
			}
			for i := range 3 {
				if m := recv(t, ts[1]); m.StoreAge != uint64(i) {
					t.Fatalf("got %d, want %d", m.StoreAge, i)
				}
			}
			none(t, ts[1])
		})
	})
	t.Run("SendWait waits for room until ctx ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{QueueLen: 1}, 2)
			ts[0].Send(msg(2, 0))
			synctest.Wait()
			ts[0].Send(msg(2, 1))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			if err := ts[0].SendWait(ctx, msg(2, 9)); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
				t.Fatalf("SendWait on a full queue: %v after %v, want the deadline after 1s", err, time.Since(start))
			}
			errs := make(chan error, 1)
			go func() { errs <- ts[0].SendWait(t.Context(), msg(2, 2)) }()
			synctest.Wait()
			select {
			case err := <-errs:
				t.Fatalf("SendWait returned %v with the queue full", err)
			default:
			}
			recv(t, ts[1]) // makes room
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 2; i++ {
				if m := recv(t, ts[1]); m.StoreAge != uint64(i) {
					t.Fatalf("got %d, want %d", m.StoreAge, i)
				}
			}
			if w := n.stats.Waited.Load(); w != 2 {
				t.Fatalf("%d sends waited, want 2", w)
			}
		})
	})
	t.Run("delay keeps the order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{Delay: 5 * time.Millisecond}, 2)
			start := time.Now()
			ts[0].Send(msg(2, 0))
			n.SetDelay(1, 2, time.Millisecond)
			ts[0].Send(msg(2, 1))
			for i := range 2 {
				m := recv(t, ts[1])
				if m.StoreAge != uint64(i) || time.Since(start) != 5*time.Millisecond {
					t.Fatalf("got %d after %v, want %d after 5ms", m.StoreAge, time.Since(start), i)
				}
			}
			start = time.Now()
			ts[1].Send(msg(1, 2))
			if m := recv(t, ts[0]); m.StoreAge != 2 || time.Since(start) != time.Millisecond {
				t.Fatalf("got %d after %v, want 2 after 1ms", m.StoreAge, time.Since(start))
			}
		})
	})
	t.Run("what a link holds when it goes down is lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{Delay: 10 * time.Millisecond}, 3)
			ts[0].Send(msg(2, 0))
			n.Disconnect(1, 2)
			if ts[0].Send(msg(2, 1)) || ts[1].Send(msg(1, 1)) {
				t.Fatal("a send over a disconnected link was taken")
			}
			if err := ts[0].SendWait(t.Context(), msg(2, 1)); err == nil {
				t.Fatal("SendWait over a disconnected link succeeded")
			}
			time.Sleep(20 * time.Millisecond) // past the delay
			none(t, ts[1])
			n.Connect(1, 2)
			ts[0].Send(msg(2, 2))
			if m := recv(t, ts[1]); m.StoreAge != 2 {
				t.Fatalf("got %d after the reconnection, want 2", m.StoreAge)
			}

			n.Partition([]wire.NodeID{1}, []wire.NodeID{2, 3})
			if ts[0].Send(msg(2, 3)) || ts[2].Send(msg(1, 3)) {
				t.Fatal("a send across the partition was taken")
			}
			if !ts[1].Send(msg(3, 3)) {
				t.Fatal("a send within a side was dropped")
			}
			recv(t, ts[2])
			n.Disconnect(2, 3)
			n.Heal()
			if !ts[0].Send(msg(2, 4)) || !ts[2].Send(msg(1, 4)) {
				t.Fatal("a send after Heal was dropped")
			}
			if ts[1].Send(msg(3, 4)) {
				t.Fatal("Heal connected what was disconnected")
			}
			recv(t, ts[1])
			recv(t, ts[0])
		})
	})
	t.Run("a detached node's messages are lost both ways", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{Delay: 10 * time.Millisecond}, 2)
			ts[0].Send(msg(2, 0))
			ts[1].Send(msg(1, 0))
			n.Detach(2)
			if ts[0].Send(msg(2, 1)) || ts[1].Send(msg(1, 1)) {
				t.Fatal("a send to or from a detached node was taken")
			}
			time.Sleep(20 * time.Millisecond)
			none(t, ts[0])
			none(t, ts[1])
			again := n.Attach(2, []wire.NodeID{1})
			ts[0].Send(msg(2, 2))
			if m := recv(t, again); m.StoreAge != 2 {
				t.Fatalf("the restarted node got %d, want 2", m.StoreAge)
			}
			none(t, ts[1])
		})
	})
	t.Run("Joined tells the peers learned after the start", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newMemNetwork(memConfig{})
			t.Cleanup(n.Close)
			a := n.Attach(1, []wire.NodeID{2})
			b := n.Attach(2, []wire.NodeID{1})
			n.Connect(1, 2)
			n.Connect(1, 3) // before 3 starts
			c := n.Attach(3, nil)
			n.Connect(2, 3)
			n.Disconnect(1, 3)
			n.Connect(1, 3) // known by now: not told again
			got := func(tr *memTransport) []wire.NodeID {
				var out []wire.NodeID
				for {
					select {
					case id := <-tr.Joined():
						out = append(out, id)
					default:
						slices.Sort(out)
						return out
					}
				}
			}
			for _, tc := range []struct {
				tr   *memTransport
				want []wire.NodeID
			}{{a, []wire.NodeID{3}}, {b, []wire.NodeID{3}}, {c, []wire.NodeID{1, 2}}} {
				if j := got(tc.tr); !slices.Equal(j, tc.want) {
					t.Fatalf("node %d was told of %v, want %v", tc.tr.id, j, tc.want)
				}
			}
			if c, k := c.Reach(); c != 2 || k != 2 {
				t.Fatalf("node 3 reaches %d of %d, want 2 of 2", c, k)
			}
		})
	})
	t.Run("Delivered signals when the receiver took the message", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, ts := mesh(t, memConfig{}, 2)
			seen := n.Delivered(func(m wire.Message) bool { return m.StoreAge == 1 })
			ts[0].Send(msg(2, 0))
			ts[0].Send(msg(2, 1))
			recv(t, ts[1])
			synctest.Wait()
			select {
			case <-seen:
				t.Fatal("signalled before the message was taken")
			default:
			}
			recv(t, ts[1])
			<-seen
		})
	})
}
