package election_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// hellosTo ticks e until it greets, and returns whom it greeted.
func hellosTo(t *testing.T, e *election.Election) []wire.NodeID {
	t.Helper()
	for range 100 {
		e.Tick()
		rd := e.Ready()
		e.Advance()
		var to []wire.NodeID
		for _, m := range rd.Messages {
			if m.Kind == wire.KindHello {
				to = append(to, m.To)
			}
		}
		if len(to) > 0 {
			return to
		}
	}
	t.Fatal("no hello in 100 ticks")
	return nil
}

// A node that is not a voter greets only the voters once it knows them,
// however many nodes the mesh told it of; before, only its configured
// peers and the nodes that greeted it. A voter greets everyone.
func TestNonVoterGreetsVoters(t *testing.T) {
	e, err := election.New(election.Config{Node: 9, Peers: []wire.NodeID{1}, Incarnation: 1, Nonce: 1,
		ID: election.ID{Priority: 14, Random: 9, Address: "a9", PID: 1, Name: "n9"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id := wire.NodeID(10); id < 40; id++ {
		e.AddPeer(id) // the mesh's other agents
	}
	if got := hellosTo(t, e); !slices.Equal(got, []wire.NodeID{1}) {
		t.Fatalf("a joiner without a view greeted %v, want its configured peer 1", got)
	}
	// Node 1, a voter, answers with the view.
	if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: 1, To: 9, View: view(2, 1, 2, 3), ElectionID: "14|1|a1|1|n1"})); err != nil {
		t.Fatal(err)
	}
	if got := hellosTo(t, e); !slices.Equal(got, members(5)) {
		t.Fatalf("a non-voter greeted %v, want the voters %v", got, members(5))
	}

	v := node(t, 1, 5, 0)
	for id := wire.NodeID(10); id < 40; id++ {
		v.AddPeer(id)
	}
	if got := hellosTo(t, v); len(got) != 4+30 {
		t.Fatalf("a voter greeted %d nodes, want the 4 other members and the 30 others", len(got))
	}
}

// A non-voter answers the hello of a node that has no view yet, so that a
// node told to join by any agent's address learns its cluster.
func TestNonVoterAnswersJoiner(t *testing.T) {
	e, err := election.New(election.Config{Node: 9, Incarnation: 1, Nonce: 1,
		ID: election.ID{Priority: 14, Random: 9, Address: "a9", PID: 1, Name: "n9"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: 1, To: 9, View: view(2, 1, 2, 3), ElectionID: "14|1|a1|1|n1"})); err != nil {
		t.Fatal(err)
	}
	e.Ready()
	e.Advance()
	if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: 20, To: 9, ElectionID: "14|20|a20|1|n20"})); err != nil {
		t.Fatal(err)
	}
	rd := e.Ready()
	e.Advance()
	i := slices.IndexFunc(rd.Messages, func(m wire.Message) bool { return m.Kind == wire.KindHello && m.To == 20 })
	if i < 0 || rd.Messages[i].View.Epoch != 2 {
		t.Fatalf("no answer with the view to a node looking for its cluster: %v", rd.Messages)
	}
}

// A check-in's ack carries the member's view: a node that restarts on a
// copy whose level was stripped gets it whole before it hands it out.
func TestCheckInAckRestoresLevel(t *testing.T) {
	stripped := view(3, 1, 2, 3)
	whole := stripped
	whole.Level = uint64(wire.Version)
	p := &election.Persisted{Cluster: election.ClusterID(members(5)), Bootstrap: members(5), Valid: stripped, Accepted: stripped,
		Promised: 3, Confirmed: wire.Life{Incarnation: 1, Nonce: 1}, Since: []wire.Life{{Incarnation: 1, Nonce: 1}}}
	e, err := election.New(election.Config{Node: 1, Incarnation: 2, Nonce: 2, Codec: uint64(wire.Version),
		ID: election.ID{Priority: 14, Random: 1, Address: "a1", PID: 1, Name: "n1"}}, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []wire.NodeID{2, 3, 4} {
		if err := e.Step(in(5, wire.Message{Kind: wire.KindCheckInAck, From: o, To: 1, Incarnation: 2, Nonce: 2, View: whole})); err != nil {
			t.Fatal(err)
		}
	}
	rd := e.Ready()
	if !e.CheckedIn() || rd.View == nil || rd.View.Level != uint64(wire.Version) {
		t.Fatalf("checked in %v with view %+v, want the level %d", e.CheckedIn(), rd.View, wire.Version)
	}
}

// A voter forgets a node that is not a member once it has been silent
// for ForgetTicks (a replaced frontend): no more hellos to it, and it
// leaves the status. Members and configured peers stay however silent,
// a node that keeps greeting stays, and a forgotten node that greets
// again is greeted again.
func TestVoterForgetsSilentNodes(t *testing.T) {
	const forget = 100
	for _, never := range []bool{false, true} {
		cfg := election.Config{Node: 1, Bootstrap: members(3), Peers: []wire.NodeID{2, 30}, Incarnation: 1, Nonce: 1,
			ForgetTicks: forget, ID: election.ID{Priority: 14, Random: 1, Address: "a1", PID: 1, Name: "n1"}}
		if never {
			cfg.ForgetTicks = -1
		}
		v, err := election.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []wire.NodeID{2, 3} {
			if err := v.Step(in(3, wire.Message{Kind: wire.KindCheckInAck, From: o, To: 1, Incarnation: 1, Nonce: 1})); err != nil {
				t.Fatal(err)
			}
		}
		greet := func(from wire.NodeID) {
			t.Helper()
			if err := v.Step(in(3, wire.Message{Kind: wire.KindHello, From: from, To: 1, ElectionID: fmt.Sprintf("14|%d|a%d|1|n%d", from, from, from)})); err != nil {
				t.Fatal(err)
			}
		}
		v.AddPeer(40) // the mesh told of it; never heard
		greet(50)     // a frontend that goes away
		for range 2 * forget {
			greet(60) // a frontend that stays
			hellosTo(t, v)
		}
		got := hellosTo(t, v)
		known := map[wire.NodeID]bool{}
		for _, m := range v.Status().Members {
			known[m.Node] = true
		}
		want := []wire.NodeID{2, 3, 30, 60}
		if never {
			want = []wire.NodeID{2, 3, 30, 40, 50, 60}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("never=%v: after %d silent ticks the voter greets %v, want %v", never, 2*forget, got, want)
		}
		if !never && (known[40] || known[50] || !known[60] || !known[2] || !known[3]) {
			t.Fatalf("the status still lists a forgotten node, or lost a live one or a member: %v", v.Status().Members)
		}
		if f := v.Stats().Forgotten; !never && f != 2 || never && f != 0 {
			t.Fatalf("never=%v: Stats.Forgotten = %d", never, f)
		}
		greet(50) // back
		if got := hellosTo(t, v); !slices.Contains(got, 50) {
			t.Fatalf("never=%v: a forgotten node greeted again is not greeted back: %v", never, got)
		}
	}
}

// A node that joins greets without a cluster, and its hellos are refused
// as foreign; a voter that forgot it (it was down long) greets it again
// at its next hello, so that it learns its cluster.
func TestVoterGreetsForgottenJoiner(t *testing.T) {
	v, err := election.New(election.Config{Node: 1, Bootstrap: members(3), Incarnation: 1, Nonce: 1, ForgetTicks: 50,
		ID: election.ID{Priority: 14, Random: 1, Address: "a1", PID: 1, Name: "n1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.AddPeer(70) // the mesh told of the joiner
	if got := hellosTo(t, v); !slices.Contains(got, 70) {
		t.Fatalf("the voter does not greet the joiner the mesh told of: %v", got)
	}
	for range 30 {
		hellosTo(t, v)
	}
	if got := hellosTo(t, v); slices.Contains(got, 70) {
		t.Fatalf("the voter still greets a joiner silent for long: %v", got)
	}
	err = v.Step(wire.Message{Kind: wire.KindHello, From: 70, To: 1, ElectionID: "14|70|a70|1|n70"})
	if !errors.Is(err, election.ErrForeign) {
		t.Fatalf("a hello without a cluster: %v, want ErrForeign", err)
	}
	if got := hellosTo(t, v); !slices.Contains(got, 70) {
		t.Fatalf("the voter does not greet again a forgotten joiner that greeted it: %v", got)
	}
}

// A node that is not a voter never coordinates, however good its id: a
// leader lost, its agents leave the election to the voters (and skip the
// coordinator's checks at every tick).
func TestNonVoterNeverCoordinates(t *testing.T) {
	e, err := election.New(election.Config{Node: 9, Peers: []wire.NodeID{2}, Incarnation: 1, Nonce: 1,
		ID: election.ID{Priority: 1, Random: 0, Address: "a9", PID: 1, Name: "n9"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hello := func(from wire.NodeID) {
		t.Helper()
		m := wire.Message{Kind: wire.KindHello, From: from, To: 9, View: view(2, 1, 2, 3), ElectionID: fmt.Sprintf("14|%d|a%d|1|n%d", from, from, from)}
		if err := e.Step(in(5, m)); err != nil {
			t.Fatal(err)
		}
	}
	hello(2)
	for _, o := range []wire.NodeID{2, 3, 4} {
		if err := e.Step(in(5, wire.Message{Kind: wire.KindCheckInAck, From: o, To: 9, Incarnation: 1, Nonce: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if !e.CheckedIn() {
		t.Fatal("not checked in")
	}
	// Leader 1 stays silent; the other members greet it.
	for tick := range 200 {
		if tick%5 == 0 {
			for _, o := range []wire.NodeID{2, 3, 4, 5} {
				hello(o)
			}
		}
		e.Tick()
		rd := e.Ready()
		e.Advance()
		for _, m := range rd.Messages {
			if m.Kind != wire.KindHello && m.Kind != wire.KindCheckIn {
				t.Fatalf("tick %d: a non-voter sent %s to %d", tick, m.Kind, m.To)
			}
		}
	}
	if e.Status().Coordinator {
		t.Fatal("a non-voter says it coordinates")
	}
}
