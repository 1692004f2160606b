package p2p

import (
	"testing"

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
	xid, err := PeerIDOf(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	xaddr, err := ma.NewMultiaddr("/ip4/127.0.0.1/tcp/1")
	if err != nil {
		t.Fatal(err)
	}
	b.addMember(xid, "x", []ma.Multiaddr{xaddr}, false) // a member that never announces
	c := start(t, Config{Name: "c", Peers: b.Addrs()})
	eventually(t, "c learned x from b's roster", func() bool {
		m, ok := memberOf(c, NodeIDOf(xid))
		return ok && m.Name == "x" && len(m.Addrs) == 1
	})
}
