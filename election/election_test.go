package election_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/quick"

	"github.com/sluicehq/sluice/core/mutation"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

func members(n int) []wire.NodeID {
	var out []wire.NodeID
	for i := 1; i <= n; i++ {
		out = append(out, wire.NodeID(i))
	}
	return out
}

// node starts node id of a cluster bootstrapped with nodes 1..size, and
// checks it in: every other member confirms its life.
func node(t *testing.T, id wire.NodeID, size int, mutant election.Mutant) *election.Election {
	t.Helper()
	e, err := election.New(election.Config{Node: id, Bootstrap: members(size), Peers: []wire.NodeID{1, 2, 3, 4, 5}, Mutant: mutant,
		Incarnation: 1, Nonce: 1,
		ID: election.ID{Priority: 14, Random: uint32(id), Address: fmt.Sprintf("a%d", id), PID: 1, Name: fmt.Sprintf("n%d", id)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range members(size) {
		if o != id {
			if err := e.Step(in(size, wire.Message{Kind: wire.KindCheckInAck, From: o, To: id, Incarnation: 1, Nonce: 1})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !e.CheckedIn() {
		t.Fatal("not checked in")
	}
	for e.HasReady() {
		e.Ready()
		e.Advance()
	}
	return e
}

// in stamps m with the cluster id of a cluster bootstrapped with 1..size.
func in(size int, m wire.Message) wire.Message {
	m.Cluster, m.ClusterSize = election.ClusterID(members(size)), uint64(size)
	return m
}

// view is a view of members 1..5 after one of the same members.
func view(epoch uint64, leaders ...wire.NodeID) wire.View {
	return wire.View{Epoch: epoch, Leaders: leaders, Members: members(5), PrevMembers: members(5)}
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
		if _, err := election.ParsePriority(s); !errors.Is(err, election.ErrBadPriority) {
			t.Errorf("priority %q: got %v, want ErrBadPriority", s, err)
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
	good := view(3, 1, 2, 3)
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: good})); err != nil {
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
		{"hello with a bad id", wire.Message{Kind: wire.KindHello, From: 2, To: 1, ElectionID: "garbage"}, election.ErrBadID},
		{"stale commit", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: view(2, 1, 2, 3)}, election.ErrStaleView},
		{"leader that is not a member", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: view(9, 1, 2, 77)}, election.ErrBadView},
		{"view with no leaders", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: view(9)}, election.ErrBadView},
		{"view with no members", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 9, Leaders: []wire.NodeID{1}}}, election.ErrBadView},
		{"members out of order", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: wire.View{Epoch: 9, Leaders: []wire.NodeID{1}, Members: []wire.NodeID{2, 1}, PrevMembers: []wire.NodeID{1}}}, election.ErrBadView},
		{"view with a leader twice", wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: view(9, 2, 2, 3)}, election.ErrBadView},
		{"previous view not older", wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: func() wire.View { v := view(9, 1, 2, 3); v.PrevEpoch = 9; return v }()}, election.ErrBadView},
		{"prepare without epoch", wire.Message{Kind: wire.KindPrepare, From: 2, To: 1}, election.ErrBadView},
		{"hello carrying a bad view", wire.Message{Kind: wire.KindHello, From: 2, To: 1, ElectionID: "14|1|a|1|n", View: wire.View{Epoch: 9, Leaders: []wire.NodeID{99}}}, election.ErrBadView},
		{"lock message", wire.Message{Kind: wire.KindEnter, From: 2, To: 1, View: wire.View{Epoch: 9}}, election.ErrBadView},
		{"for another node", wire.Message{Kind: wire.KindCommit, From: 2, To: 4, View: good}, election.ErrBadView},
		{"check-in of incarnation 0", wire.Message{Kind: wire.KindCheckIn, From: 2, To: 1}, election.ErrBadView},
	}
	for _, c := range cases {
		stats := e.Stats()
		if err := e.Step(in(5, c.m)); !errors.Is(err, c.want) {
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
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		e := node(t, 1, 5, c.mutant)
		first := view(4, 1, 2, 3)
		other := view(4, 3, 4, 5)
		_ = e.Step(in(5, wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: first}))
		e.Ready()
		e.Advance()
		_ = e.Step(in(5, wire.Message{Kind: wire.KindAccept, From: 4, To: 1, View: other}))
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
	_ = e.Step(in(5, wire.Message{Kind: wire.KindPrepare, From: 2, To: 1, View: wire.View{Epoch: 7}}))
	rd := e.Ready()
	if rd.Persist == nil || rd.Persist.Promised != 7 || len(rd.Messages) != 1 || rd.Messages[0].Kind != wire.KindPromise {
		t.Fatalf("a promise must come with its persisted state: %+v", rd)
	}
	e.Advance()
	// A lower or equal epoch is refused after that, with the promise.
	_ = e.Step(in(5, wire.Message{Kind: wire.KindPrepare, From: 3, To: 1, View: wire.View{Epoch: 7}}))
	rd = e.Ready()
	if !rd.Messages[0].Reject || rd.Messages[0].Promised != 7 || rd.Persist != nil {
		t.Fatalf("got %+v", rd)
	}
}

// A node learned after the start (AddPeer) is greeted like a configured
// peer; adding a known peer, itself or 0 changes nothing.
func TestAddPeerGetsHellos(t *testing.T) {
	e, err := election.New(election.Config{Node: 1, Bootstrap: []wire.NodeID{1}, Incarnation: 1,
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

// TestMembershipRules pins the three membership rules, each against the
// mutant that breaks it: a view needs a majority of its members and of
// its previous members; votes of non-members never count; a node answers
// no vote before a majority of the other members confirmed its life.
func TestMembershipRules(t *testing.T) {
	set := func(ids ...wire.NodeID) map[wire.NodeID]bool {
		m := map[wire.NodeID]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	shrunk := wire.View{Epoch: 5, Leaders: []wire.NodeID{1, 2, 3}, Members: members(3), PrevMembers: members(5)}
	for _, c := range []struct {
		name    string
		v       wire.View
		accepts map[wire.NodeID]bool
		mutant  election.Mutant
		want    bool
	}{
		{"majority of both", shrunk, set(1, 2, 3), 0, true},
		{"no majority of the old members", shrunk, set(1, 2), 0, false},
		{"no majority of the old members, mutant", shrunk, set(1, 2), election.MutantNoOldQuorum, true},
		{"non-members' accepts", view(6, 1, 2, 3), set(1, 8, 9), 0, false},
		{"non-members' accepts, mutant", view(6, 1, 2, 3), set(1, 8, 9), election.MutantNonMemberVotes, true},
	} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		if got := election.Valid(c.v, c.accepts, c.mutant); got != c.want {
			t.Errorf("%s: valid %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		mutant  election.Mutant
		answers bool
	}{{0, false}, {election.MutantNoCheckIn, true}} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		e, err := election.New(election.Config{Node: 1, Bootstrap: members(5), Incarnation: 2, Nonce: 9, Mutant: c.mutant,
			ID: election.ID{Priority: 14, Address: "a", Name: "n1"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = e.Step(in(5, wire.Message{Kind: wire.KindPrepare, From: 2, To: 1, View: wire.View{Epoch: 3}}))
		promised := false
		for _, m := range e.Ready().Messages {
			promised = promised || m.Kind == wire.KindPromise
		}
		e.Advance()
		if promised != c.answers || !c.answers && !errors.Is(err, election.ErrNotCheckedIn) {
			t.Errorf("mutant %d: promised %v (%v) before checking in", c.mutant, promised, err)
		}
	}
	// A member that knows a newer life refuses the check-in, and the
	// refused node stops for good.
	m := node(t, 2, 5, 0)
	_ = m.Step(in(5, wire.Message{Kind: wire.KindCheckIn, From: 1, To: 2, Incarnation: 4, Nonce: 1, Unconfirmed: true})) // a fresh store
	m.Ready()
	m.Advance()
	if err := m.Step(in(5, wire.Message{Kind: wire.KindCheckIn, From: 1, To: 2, Incarnation: 4, Nonce: 2})); !errors.Is(err, election.ErrStale) {
		t.Fatalf("same incarnation, other nonce: %v", err)
	}
	rd := m.Ready()
	m.Advance()
	if len(rd.Messages) != 1 || !rd.Messages[0].Reject || rd.Messages[0].KnownIncarnation != 4 {
		t.Fatalf("answer to a stale check-in: %+v", rd.Messages)
	}
	e, _ := election.New(election.Config{Node: 1, Bootstrap: members(5), Incarnation: 4, Nonce: 2,
		ID: election.ID{Priority: 14, Address: "a", Name: "n1"}}, nil)
	_ = e.Step(rd.Messages[0])
	if !errors.Is(e.Stale(), election.ErrStale) || e.Status().Ready {
		t.Fatalf("refused node: stale %v", e.Stale())
	}

	// A store must remember the life a member knows (4, nonce 1), however
	// high its incarnation: the mutant lets a wiped store pass once it
	// climbed past it.
	wiped := make([]election.Life, 8)
	for i := range wiped {
		wiped[i] = election.Life{Incarnation: uint32(i + 1), Nonce: 100 + uint64(i)}
	}
	for _, c := range []struct {
		name   string
		lives  []election.Life
		none   bool // no confirmed life on the store
		mutant election.Mutant
		ok     bool
	}{
		{"wiped store, climbed to 9", wiped, true, 0, false},
		{"wiped store, climbed to 9, mutant", wiped, true, election.MutantClimbingLives, true},
		{"older copy, climbed to 9", []election.Life{{Incarnation: 3, Nonce: 7}, {Incarnation: 4, Nonce: 8}, {Incarnation: 8}}, false, 0, false},
		{"plain restart", []election.Life{{Incarnation: 3, Nonce: 7}, {Incarnation: 4, Nonce: 1}}, false, 0, true},
		{"member behind the confirmed life", []election.Life{{Incarnation: 6, Nonce: 7}}, false, 0, true},
		{"no confirmed life, member behind", []election.Life{{Incarnation: 6, Nonce: 7}}, true, 0, false},
	} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		m, err := election.New(election.Config{Node: 2, Bootstrap: members(5), Incarnation: 1, Nonce: 1, Mutant: c.mutant,
			ID: election.ID{Priority: 13, Address: "a", Name: "n2"}}, &election.Persisted{
			Lives: map[wire.NodeID]election.Life{1: {Incarnation: 4, Nonce: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Step(in(5, wire.Message{Kind: wire.KindCheckIn, From: 1, To: 2, Incarnation: 9, Nonce: 5, Lives: c.lives, Unconfirmed: c.none}))
		rd := m.Ready()
		m.Advance()
		refused := len(rd.Messages) == 1 && rd.Messages[0].Reject
		if refused == c.ok || c.ok != (err == nil) {
			t.Errorf("%s: refused %v (%v), want accepted %v", c.name, refused, err, c.ok)
		}
	}

	// A store older than the age its last life told in its hellos (a copy
	// of that life, restored) is refused; the mutant lets it pass.
	for _, c := range []struct {
		name   string
		age    uint64 // of the store the check-in shows
		mutant election.Mutant
		ok     bool
	}{
		{"store as old as told", 10, 0, true},
		{"store older than told", 7, 0, false},
		{"store older than told, mutant", 7, election.MutantNoWriteMarks, true},
	} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		m, err := election.New(election.Config{Node: 2, Bootstrap: members(5), Incarnation: 1, Nonce: 1, Mutant: c.mutant,
			ID: election.ID{Priority: 13, Address: "a", Name: "n2"}}, &election.Persisted{
			Lives: map[wire.NodeID]election.Life{1: {Incarnation: 4, Nonce: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		// Life 4, checked in (its nonce), told age 10; then life 5's first
		// hello, ahead of its check-in, tells the age its store starts at.
		name := election.ID{Priority: 14, Address: "a", Name: "n1"}.String()
		for _, hello := range []wire.Message{{Kind: wire.KindHello, From: 1, To: 2, ElectionID: name, Incarnation: 4, StoreAge: 10, Nonce: 1},
			{Kind: wire.KindHello, From: 1, To: 2, ElectionID: name, Incarnation: 5, StoreAge: c.age}} {
			if err := m.Step(in(5, hello)); err != nil {
				t.Fatal(err)
			}
		}
		m.Ready()
		m.Advance()
		err = m.Step(in(5, wire.Message{Kind: wire.KindCheckIn, From: 1, To: 2, Incarnation: 5, Nonce: 5, StoreAge: c.age,
			Lives: []election.Life{{Incarnation: 3, Nonce: 7}, {Incarnation: 4, Nonce: 1}}}))
		rd := m.Ready()
		m.Advance()
		refused := len(rd.Messages) == 1 && rd.Messages[0].Reject
		if refused == c.ok || c.ok != (err == nil) {
			t.Errorf("%s: refused %v (%v), want accepted %v", c.name, refused, err, c.ok)
		}
		if refused {
			e, _ := election.New(election.Config{Node: 1, Bootstrap: members(5), Incarnation: 5, Nonce: 5,
				ID: election.ID{Priority: 14, Address: "a", Name: "n1"}}, &election.Persisted{Writes: c.age})
			_ = e.Step(rd.Messages[0])
			if want := "reach write 10, its store holds 7"; e.Stale() == nil || !strings.Contains(e.Stale().Error(), want) {
				t.Errorf("%s: the refused node says %v, want %q", c.name, e.Stale(), want)
			}
		}
	}
}

// TestLevelNeverFalls: a node whose valid view has codec 4 refuses to
// accept a view of a lower codec (a coordinator of the release before,
// whose views have no level) and one above what this build reads; the
// mutant that lets the level fall accepts the first.
func TestLevelNeverFalls(t *testing.T) {
	for _, c := range []struct {
		mutant election.Mutant
		reject bool
	}{{0, true}, {election.MutantLevelBackwards, false}} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		e := node(t, 1, 5, c.mutant)
		at4 := view(3, 1, 2, 3)
		at4.Level = 4
		if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: at4})); err != nil {
			t.Fatal(err)
		}
		e.Ready()
		e.Advance()
		lower := view(5, 2, 3, 4)
		lower.PrevEpoch, lower.PrevLeaders = 3, []wire.NodeID{1, 2, 3}
		err := e.Step(in(5, wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: lower}))
		rd := e.Ready()
		e.Advance()
		if len(rd.Messages) != 1 || rd.Messages[0].Reject != c.reject || c.reject != errors.Is(err, election.ErrBelowLevel) {
			t.Fatalf("mutant %d: a view lowering the codec: %v, answer %+v", c.mutant, err, rd.Messages)
		}
		if c.reject && e.Stats().BelowLevel != 1 {
			t.Fatalf("refusal not counted: %+v", e.Stats())
		}
	}

	e := node(t, 1, 5, 0)
	newer := view(4, 1, 2, 3)
	newer.Level = uint64(wire.Version) + 1
	err := e.Step(in(5, wire.Message{Kind: wire.KindAccept, From: 2, To: 1, View: newer}))
	rd := e.Ready()
	e.Advance()
	if !errors.Is(err, election.ErrBelowLevel) || len(rd.Messages) != 1 || !rd.Messages[0].Reject {
		t.Fatalf("a view of a codec this build does not read: %v, answer %+v", err, rd.Messages)
	}
	// Learned as valid all the same (the cluster moved on without this
	// node), it says why it cannot serve.
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: newer})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []wire.NodeID{2, 3} {
		_ = e.Step(in(5, wire.Message{Kind: wire.KindHello, From: id, To: 1, ElectionID: fmt.Sprintf("14|%d|a%d|1|n%d", id, id, id)}))
	}
	if ready, why := e.LockReady(); ready || !strings.Contains(why, fmt.Sprintf("reads codecs up to %d: run a newer release", wire.Version)) {
		t.Fatalf("ready %v: %s", ready, why)
	}
}

// TestLevelOfVotes: at codec 4, the promises and accepts of a node whose
// hellos offer codec 3 are not counted.
func TestLevelOfVotes(t *testing.T) {
	e, err := election.New(election.Config{Node: 1, Bootstrap: members(5), Peers: members(5), Incarnation: 1, Nonce: 1, Codec: 4,
		ID: election.ID{Priority: 1, Random: 1, Address: "a1", PID: 1, Name: "n1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []wire.NodeID{2, 3, 4, 5} {
		_ = e.Step(in(5, wire.Message{Kind: wire.KindCheckInAck, From: o, To: 1, Incarnation: 1, Nonce: 1}))
	}
	at4 := wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 3, 4}, Members: members(5), PrevMembers: members(5), Level: 4}
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: at4})); err != nil {
		t.Fatal(err)
	}
	hello := func(id wire.NodeID, codec uint64) {
		if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: id, To: 1, Codec: codec, Release: "r",
			ElectionID: fmt.Sprintf("14|%d|a%d|1|n%d", id, id, id)})); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []wire.NodeID{2, 3, 4, 5} {
		hello(id, 4)
	}
	if err := e.ChangeMembers(election.Change{Remove: 5}); err != nil {
		t.Fatal(err)
	}
	// The coordinator's own prepare and promise go through its messages.
	deliver := func(kind wire.Kind) (sent []wire.Message) {
		rd := e.Ready()
		e.Advance()
		for _, m := range rd.Messages {
			if m.To == 1 && m.Kind == kind {
				if err := e.Step(m); err != nil {
					t.Fatal(err)
				}
			}
			sent = append(sent, m)
		}
		return sent
	}
	var epoch uint64
	for _, m := range deliver(wire.KindPrepare) {
		if m.Kind == wire.KindPrepare {
			epoch = m.View.Epoch
		}
	}
	deliver(wire.KindPromise)
	accepts := func() bool {
		rd := e.Ready()
		e.Advance()
		return slices.ContainsFunc(rd.Messages, func(m wire.Message) bool { return m.Kind == wire.KindAccept })
	}
	// Node 2 runs the release before again: its promise says no codec.
	err = e.Step(in(5, wire.Message{Kind: wire.KindPromise, From: 2, To: 1, PrepareEpoch: epoch}))
	if !errors.Is(err, election.ErrBelowLevel) || !strings.Contains(err.Error(), "node 2 (release r) votes offering codec 3") {
		t.Fatalf("promise of a node below the codec: %v", err)
	}
	if accepts() {
		t.Fatal("proposed with its own promise and one not counted")
	}
	if err := e.Step(in(5, wire.Message{Kind: wire.KindPromise, From: 3, To: 1, PrepareEpoch: epoch, Codec: 4})); err != nil {
		t.Fatal(err)
	}
	if accepts() {
		t.Fatal("proposed with two counted promises of five")
	}
	if err := e.Step(in(5, wire.Message{Kind: wire.KindPromise, From: 4, To: 1, PrepareEpoch: epoch, Codec: 4})); err != nil {
		t.Fatal(err)
	}
	if !accepts() {
		t.Fatal("no proposal with three counted promises of five")
	}
}

// A view that lost its level on the way (relayed by a release before
// levels) is not adopted over a view with a level, by hello or commit.
func TestStrippedViewNotAdopted(t *testing.T) {
	e := node(t, 1, 5, 0)
	at4 := view(3, 1, 2, 3)
	at4.Level = 4
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: at4})); err != nil {
		t.Fatal(err)
	}
	stripped := view(4, 1, 2, 3)
	stripped.PrevEpoch, stripped.PrevLeaders = 3, []wire.NodeID{1, 2, 3}
	for _, kind := range []wire.Kind{wire.KindHello, wire.KindCommit} {
		err := e.Step(in(5, wire.Message{Kind: kind, From: 4, To: 1, View: stripped, ElectionID: "14|4|a4|1|n4"}))
		if !errors.Is(err, election.ErrBelowLevel) || e.View().Epoch != 3 {
			t.Fatalf("%s of a view without its level: %v, valid epoch %d", kind, err, e.View().Epoch)
		}
	}
	whole := stripped
	whole.Level = 4
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: whole})); err != nil || e.View().Epoch != 4 {
		t.Fatalf("the same view whole: %v, valid epoch %d", err, e.View().Epoch)
	}
}

// A coordinator whose own copy of the valid view lost its level still
// proposes at least the level its promisers accepted: the newest valid
// view's, which one of them holds.
func TestLevelFromPromises(t *testing.T) {
	e, err := election.New(election.Config{Node: 1, Bootstrap: members(5), Peers: members(5), Incarnation: 1, Nonce: 1, Codec: 4,
		ID: election.ID{Priority: 1, Random: 1, Address: "a1", PID: 1, Name: "n1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []wire.NodeID{2, 3, 4, 5} {
		_ = e.Step(in(5, wire.Message{Kind: wire.KindCheckInAck, From: o, To: 1, Incarnation: 1, Nonce: 1}))
	}
	stripped := wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 3, 4}, Members: members(5), PrevMembers: members(5)}
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 3, To: 1, View: stripped})); err != nil {
		t.Fatal(err)
	}
	for id, codec := range map[wire.NodeID]uint64{2: 3, 3: 4, 4: 4, 5: 4} {
		_ = e.Step(in(5, wire.Message{Kind: wire.KindHello, From: id, To: 1, Codec: codec, ElectionID: fmt.Sprintf("14|%d|a%d|1|n%d", id, id, id)}))
	}
	if err := e.ChangeMembers(election.Change{Remove: 5}); err != nil {
		t.Fatal(err)
	}
	rd := e.Ready()
	e.Advance()
	var epoch uint64
	for _, m := range rd.Messages {
		if m.Kind == wire.KindPrepare {
			epoch = m.View.Epoch
			if m.To == 1 {
				_ = e.Step(m)
			}
		}
	}
	rd = e.Ready()
	e.Advance()
	for _, m := range rd.Messages {
		if m.Kind == wire.KindPromise && m.To == 1 {
			_ = e.Step(m)
		}
	}
	whole := stripped
	whole.Level = 4
	for _, id := range []wire.NodeID{3, 4} {
		if err := e.Step(in(5, wire.Message{Kind: wire.KindPromise, From: id, To: 1, PrepareEpoch: epoch, View: whole, Codec: 4})); err != nil {
			t.Fatal(err)
		}
	}
	rd = e.Ready()
	e.Advance()
	for _, m := range rd.Messages {
		if m.Kind == wire.KindAccept {
			if m.View.Level != 4 {
				t.Fatalf("proposed codec %d after promises of codec 4 (node 2 offers 3)", m.View.Level)
			}
			return
		}
	}
	t.Fatalf("no proposal: %v", rd.Messages)
}

// A copy of the valid view that lost its level gets it back from a hello
// carrying the same view whole; never a level this build does not read.
func TestLevelRestoredByHello(t *testing.T) {
	e := node(t, 1, 5, 0)
	stripped := view(3, 1, 2, 3)
	if err := e.Step(in(5, wire.Message{Kind: wire.KindCommit, From: 2, To: 1, View: stripped})); err != nil {
		t.Fatal(err)
	}
	hello := func(level uint64) {
		v := stripped
		v.Level = level
		if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: 2, To: 1, View: v, ElectionID: "14|2|a2|1|n2"})); err != nil {
			t.Fatal(err)
		}
	}
	hello(uint64(wire.Version) + 1)
	if got := e.View().Level; got != 0 {
		t.Fatalf("level %d from a hello of a codec this build does not read", got)
	}
	other := view(3, 1, 2, 4) // another view of the same epoch: not ours
	other.Level = 4
	if err := e.Step(in(5, wire.Message{Kind: wire.KindHello, From: 2, To: 1, View: other, ElectionID: "14|2|a2|1|n2"})); err != nil || e.View().Level != 0 {
		t.Fatalf("a hello of another view: %v, level %d", err, e.View().Level)
	}
	hello(4)
	if got := e.View().Level; got != 4 {
		t.Fatalf("level %d after a hello of the same view at codec 4", got)
	}
}

// MembersAre says what comparing Members with a list would, without a
// copy: the bootstrap members before the first view.
func TestMembersAre(t *testing.T) {
	e, err := election.New(election.Config{Node: 1, Bootstrap: members(3), Incarnation: 1, Nonce: 1,
		ID: election.ID{Priority: 14, Address: "a", Name: "n1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !e.MembersAre(e.Members()) || !e.MembersAre(members(3)) {
		t.Errorf("MembersAre(%v) is false for the members themselves", e.Members())
	}
	for _, other := range [][]wire.NodeID{nil, members(2), members(4), {1, 2, 4}} {
		if e.MembersAre(other) {
			t.Errorf("MembersAre(%v) is true; the members are %v", other, e.Members())
		}
	}
}
