package p2p

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/sluicehq/sluice/core/wire"
)

// Every host picks gossipPeers fingers and is picked by as many: its
// gossip connections do not grow with the fleet.
func TestFingersBounded(t *testing.T) {
	for _, n := range []int{2, 3, 9, 50, 1000} {
		known := make([]wire.NodeID, n)
		for i := range known {
			known[i] = wire.NodeID(1000 + 7*i)
		}
		picked := map[wire.NodeID]int{}
		for _, self := range known {
			f := fingers(self, known)
			if f[self] {
				t.Fatalf("n=%d: node %d picks itself", n, self)
			}
			if want := min(gossipPeers, n-1); len(f) > want || n > 2*gossipPeers && len(f) != want {
				t.Fatalf("n=%d: node %d picks %d fingers, want %d", n, self, len(f), want)
			}
			for p := range f {
				picked[p]++
			}
		}
		for id, c := range picked {
			if c > gossipPeers {
				t.Fatalf("n=%d: node %d picked by %d hosts, over %d", n, id, c, gossipPeers)
			}
		}
	}
}

// A host that knows only some of the members still picks among them, and
// none that it does not know.
func TestFingersOfPartialKnowledge(t *testing.T) {
	f := fingers(5, []wire.NodeID{9, 1})
	if len(f) != 2 || !f[9] || !f[1] {
		t.Fatalf("fingers of 5 among 1 and 9: %v", f)
	}
	if f := fingers(5, nil); len(f) != 0 {
		t.Fatalf("fingers of a host alone: %v", f)
	}
}

// A host learns at start the members its configured peer knows, even
// those whose announcements it never heard.
func TestRosterAtStart(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Name: "b"})
	xid, _ := unreachable(t, b, "x") // a member that never announces
	c := start(t, Config{Name: "c", Peers: b.Addrs()})
	eventually(t, "c learned x from b's roster", func() bool {
		m, ok := memberOf(c, NodeIDOf(xid))
		return ok && m.Name == "x" && len(m.Addrs) == 1
	})
}

// A member that is neither configured nor kept is forgotten once unheard
// for ForgetAfter (a machine the fleet replaced); a configured peer and a
// kept one are not, however long they are down, nor a peer connected to
// the host. A forgotten peer is learned again as new.
func TestForgetsUnheardMembers(t *testing.T) {
	t.Parallel()
	down := start(t, Config{Name: "down"})
	downAddrs := down.Addrs()
	downNode := down.self
	_ = down.Close()
	a := start(t, Config{Name: "a", ForgetAfter: time.Second, Peers: downAddrs})
	// b is connected all along. It and a swap rosters before a learns the
	// dead ones, so that no roster brings one back here.
	b := start(t, Config{Name: "b", Peers: a.Addrs()})
	eventually(t, "a and b swapped rosters", func() bool {
		a.mu.RLock()
		b.mu.RLock()
		defer a.mu.RUnlock()
		defer b.mu.RUnlock()
		return a.rostered && b.rostered
	})
	goneID, goneAddr := unreachable(t, a, "gone")
	gone := NodeIDOf(goneID)
	keptID, _ := unreachable(t, a, "kept")
	kept := NodeIDOf(keptID)
	a.Keep([]wire.NodeID{kept})

	eventually(t, "a forgot the member unheard for long", func() bool { _, ok := memberOf(a, gone); return !ok })
	for _, n := range []wire.NodeID{downNode, kept, b.self} {
		if _, ok := memberOf(a, n); !ok {
			t.Fatalf("a forgot member %d, which is configured, kept or connected", n)
		}
	}
	if f := a.Stats().Forgotten; f != 1 {
		t.Fatalf("Stats.Forgotten = %d, want 1", f)
	}
	if !a.addMember(goneID, "gone", []ma.Multiaddr{goneAddr}, false) {
		t.Fatal("a forgotten member is not learned again as new")
	}
}

// A roster says how long its host has gone without word of each member:
// a starting host does not take in one it would forget at once, and
// takes the others as long unheard as the roster says.
func TestRosterCarriesUnheard(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Name: "b"})
	member := func(name string, unheard time.Duration) wire.NodeID {
		id, _ := unreachable(t, b, name)
		b.mu.Lock()
		b.members[NodeIDOf(id)].heard = time.Now().Add(-unheard)
		b.mu.Unlock()
		return NodeIDOf(id)
	}
	old := member("old", 2*time.Hour)
	recent := member("recent", 10*time.Minute)
	c := start(t, Config{Name: "c", Peers: b.Addrs(), ForgetAfter: time.Hour})
	eventually(t, "c learned the recent member from b's roster", func() bool { _, ok := memberOf(c, recent); return ok })
	if _, ok := memberOf(c, old); ok {
		t.Fatal("c took in a member b has not heard of for longer than c's ForgetAfter")
	}
	c.mu.RLock()
	unheard := time.Since(c.members[recent].heard)
	c.mu.RUnlock()
	if unheard < 9*time.Minute {
		t.Fatalf("c takes the recent member as unheard for %v, b said 10m", unheard)
	}
}

// unreachable adds to h a member that never answers: a fresh identity at
// an address where nothing listens.
func unreachable(t *testing.T, h *Host, name string) (peer.ID, ma.Multiaddr) {
	t.Helper()
	id, err := PeerIDOf(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := ma.NewMultiaddr("/ip4/127.0.0.1/tcp/1")
	if err != nil {
		t.Fatal(err)
	}
	h.addMember(id, name, []ma.Multiaddr{addr}, false)
	return id, addr
}
