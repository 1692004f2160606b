package election_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/quick"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

func node(t *testing.T, id wire.NodeID, size int, mutant election.Mutant) *election.Election {
	t.Helper()
	e, err := election.New(election.Config{Node: id, ClusterSize: size, Peers: []wire.NodeID{1, 2, 3, 4, 5}, Mutant: mutant,
		ID: election.ID{Priority: 14, Random: uint32(id), Address: fmt.Sprintf("a%d", id), PID: 1, Name: fmt.Sprintf("n%d", id)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestIDRoundTrip(t *testing.T) {
	f := func(prio uint8, random, pid uint32, addr, name string) bool {
		id := election.ID{Priority: 1 + prio%15, Random: random, PID: pid, Address: "a" + addr, Name: "n" + name}
		if id.Validate() != nil {
			return true // '|' or oversized: refused, checked below
		}
		back, err := election.ParseID(id.String())
		return err == nil && back == id
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestIDOrder(t *testing.T) {
	a := election.ID{Priority: 2, Random: 9, Address: "z", PID: 1, Name: "x"}
	b := election.ID{Priority: 14, Random: 1, Address: "a", PID: 1, Name: "x"}
	if a.Compare(b) >= 0 {
		t.Fatal("priority must decide first")
	}
	c := b
	c.Random = 0
	if c.Compare(b) >= 0 {
		t.Fatal("then the random part")
	}
}

func TestBadIDs(t *testing.T) {
	for _, s := range []string{"", "14|1|a|1", "14|zz|a|1|n", "0|1|a|1|n", "16|1|a|1|n", "14|1||1|n", "14|1|a|1|", "x|1|a|1|n", "14|1|a|-1|n"} {
		if _, err := election.ParseID(s); !errors.Is(err, election.ErrBadID) {
			t.Errorf("%q: got %v", s, err)
		}
	}
	for _, s := range []string{"0", "15", "x", "-1"} {
		if _, err := election.ParsePriority(s); err == nil {
			t.Errorf("priority %q accepted", s)
		}
	}
	if p, err := election.ParsePriority("off"); err != nil || p != election.Off {
		t.Fatal("off")
	}
}

// TestBadInputIsRefusedAndNeverAdopted: malformed ids, stale or malformed
// views, and views naming unknown nodes are counted and change nothing.
func TestBadInputIsRefusedAndNeverAdopted(t *testing.T) {
	e := node(t, 1, 5, 0)
	good := wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2, 3}}
	if err := e.Step(wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: good}); err != nil {
		t.Fatal(err)
	}
	for e.HasReady() {
		e.Ready()
		e.Advance()
	}
	cases := []struct {
		name string
		m    wire.Message
		want error
	}{
		{"hello with a bad id", wire.Message{Kind: wire.KindHello, From: 2, To: 1, Name: "garbage"}, election.ErrBadID},
		{"stale commit", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 2, Leaders: []wire.NodeID{1, 2, 3}}}, election.ErrStaleView},
		{"view naming an unknown node", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 9, Leaders: []wire.NodeID{1, 2, 77}}}, election.ErrBadView},
		{"view with no leaders", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 9}}, election.ErrBadView},
		{"view with a leader twice", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 9, Leaders: []wire.NodeID{2, 2, 3}}}, election.ErrBadView},
		{"previous view not older", wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: wire.View{Epoch: 9, Leaders: []wire.NodeID{1, 2, 3}, PrevEpoch: 9}}, election.ErrBadView},
		{"prepare without epoch", wire.Message{Kind: wire.KindPrepare, From: 2, To: 1}, election.ErrBadView},
		{"hello carrying a bad view", wire.Message{Kind: wire.KindHello, From: 2, To: 1, Name: "14|1|a|1|n", View: wire.View{Epoch: 9, Leaders: []wire.NodeID{99}}}, election.ErrBadView},
		{"lock message", wire.Message{Kind: wire.KindEnter, From: 2, To: 1, View: wire.View{Epoch: 9}}, election.ErrBadView},
		{"for another node", wire.Message{Kind: wire.KindCommit, From: 2, To: 4, View: good}, election.ErrBadView},
	}
	for _, c := range cases {
		stats := e.Stats()
		if err := e.Step(c.m); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if e.HasReady() {
			t.Errorf("%s: produced output %+v", c.name, e.Ready())
			e.Advance()
		}
		if v := e.View(); v.Epoch != 3 {
			t.Errorf("%s: adopted %+v", c.name, v)
		}
		if e.Stats() == stats {
			t.Errorf("%s: not counted", c.name)
		}
	}
}

// TestOneViewPerEpoch: a node that accepted a view for an epoch refuses
// another view for the same epoch, unless the election is the mutant.
func TestOneViewPerEpoch(t *testing.T) {
	for _, c := range []struct {
		mutant election.Mutant
		reject bool
	}{{0, true}, {election.MutantTwoViewsPerEpoch, false}} {
		e := node(t, 1, 5, c.mutant)
		first := wire.View{Epoch: 4, Leaders: []wire.NodeID{1, 2, 3}}
		other := wire.View{Epoch: 4, Leaders: []wire.NodeID{3, 4, 5}}
		_ = e.Step(wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: first})
		e.Ready()
		e.Advance()
		_ = e.Step(wire.Message{Kind: wire.KindAccept, From: 4, To: 1, View: other})
		rd := e.Ready()
		e.Advance()
		if len(rd.Messages) != 1 || rd.Messages[0].Reject != c.reject {
			t.Fatalf("mutant %d: answer %+v", c.mutant, rd.Messages)
		}
		if !c.reject && rd.Persist == nil {
			t.Fatal("an accept must be persisted before it is answered")
		}
	}
}

func TestPersistBeforeAnswer(t *testing.T) {
	e := node(t, 1, 5, 0)
	_ = e.Step(wire.Message{Kind: wire.KindPrepare, From: 2, To: 1, View: wire.View{Epoch: 7}})
	rd := e.Ready()
	if rd.Persist == nil || rd.Persist.Promised != 7 || len(rd.Messages) != 1 || rd.Messages[0].Kind != wire.KindPromise {
		t.Fatalf("a promise must come with its persisted state: %+v", rd)
	}
	e.Advance()
	// A lower or equal epoch is refused after that, with the promise.
	_ = e.Step(wire.Message{Kind: wire.KindPrepare, From: 3, To: 1, View: wire.View{Epoch: 7}})
	rd = e.Ready()
	if !rd.Messages[0].Reject || rd.Messages[0].Seq != 7 || rd.Persist != nil {
		t.Fatalf("got %+v", rd)
	}
}

// A node learned after the start (AddPeer) is greeted like a configured
// peer; adding a known peer, itself or 0 changes nothing.
func TestAddPeerGetsHellos(t *testing.T) {
	e, err := election.New(election.Config{Node: 1, ClusterSize: 3,
		ID: election.ID{Priority: 5, Address: "a", Name: "n1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hellosTo := func() []wire.NodeID {
		var to []wire.NodeID
		for range 5 {
			e.Tick()
		}
		rd := e.Ready()
		for _, m := range rd.Messages {
			if m.Kind == wire.KindHello {
				to = append(to, m.To)
			}
		}
		e.Advance()
		return to
	}
	if to := hellosTo(); len(to) != 0 {
		t.Fatalf("hellos to %v with no peers", to)
	}
	e.AddPeer(7)
	e.AddPeer(7)
	e.AddPeer(1)
	e.AddPeer(0)
	if to := hellosTo(); !slices.Equal(to, []wire.NodeID{7}) {
		t.Fatalf("hellos to %v, want [7]", to)
	}
}
