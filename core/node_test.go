package core_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/mutation"
	"github.com/sluicehq/sluice/core/wire"
)

func newLeader(t *testing.T, mutant core.Mutant) *core.Node {
	t.Helper()
	n, err := core.New(core.Config{ID: 1, Incarnation: 1, View: wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2, 3}},
		Mutant: mutant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	return n
}

func drain(n *core.Node) core.Ready {
	var all core.Ready
	for n.HasReady() {
		rd := n.Ready()
		all.Persist = append(all.Persist, rd.Persist...)
		all.Messages = append(all.Messages, rd.Messages...)
		all.Events = append(all.Events, rd.Events...)
		all.Snapshots = append(all.Snapshots, rd.Snapshots...)
		n.Advance()
	}
	return all
}

// snapshot is what a bad input must not change.
type snapshot struct {
	reqs    []core.RequestStatus
	table   []wire.Entry
	hw      uint64
	handoff core.HandoffStatus
}

func take(n *core.Node) snapshot {
	e, hw := n.Table("a")
	return snapshot{n.Requests(), e, hw, n.Handoff()}
}

func TestBadMessagesAreRejectedCountedAndChangeNothing(t *testing.T) {
	n := newLeader(t, 0)
	if _, err := n.Acquire(core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	if err := n.Step(wire.Message{Kind: wire.KindEnter, From: 2, To: 1, Epoch: 3, Name: "a",
		Req: wire.RequestID{Node: 2, Seq: 1<<32 | 1}, Mode: wire.ModeExclusive, Lifetime: 100}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	good := wire.Message{Kind: wire.KindEnter, From: 2, To: 1, Epoch: 3, Name: "a",
		Req: wire.RequestID{Node: 2, Seq: 1<<32 | 2}, Mode: wire.ModeExclusive, Lifetime: 100}
	with := func(f func(*wire.Message)) wire.Message { m := good; f(&m); return m }
	cases := []struct {
		name string
		m    wire.Message
		want error
	}{
		{"older epoch", with(func(m *wire.Message) { m.Epoch = 2 }), core.ErrStaleEpoch},
		{"newer epoch", with(func(m *wire.Message) { m.Epoch = 9 }), core.ErrStaleEpoch},
		{"empty name", with(func(m *wire.Message) { m.Name = "" }), core.ErrBadMessage},
		{"oversized name", with(func(m *wire.Message) { m.Name = strings.Repeat("x", wire.MaxNameLen+1) }), core.ErrBadMessage},
		{"unknown kind", with(func(m *wire.Message) { m.Kind = 99 }), core.ErrBadMessage},
		{"election kind", with(func(m *wire.Message) { m.Kind = wire.KindHello }), core.ErrBadMessage},
		{"unknown mode", with(func(m *wire.Message) { m.Mode = 42 }), core.ErrBadMessage},
		{"absurd lifetime", with(func(m *wire.Message) { m.Lifetime = 1 << 62 }), core.ErrBadMessage},
		{"for another node", with(func(m *wire.Message) { m.To = 7 }), core.ErrWrongTarget},
		{"no sender", with(func(m *wire.Message) { m.From = 0 }), core.ErrBadMessage},
		{"restart with no incarnation", with(func(m *wire.Message) { m.Kind = wire.KindRestarted; m.Incarnation = 0 }), core.ErrBadMessage},
		{"snapshot request from a non-leader", wire.Message{Kind: wire.KindSnapshotRequest, From: 9, To: 1,
			View: wire.View{Epoch: 1 << 40, Leaders: []wire.NodeID{2, 3, 4}, PrevEpoch: 3, PrevLeaders: []wire.NodeID{1, 2, 3}}}, core.ErrBadMessage},
		{"snapshot request to a node not in the previous view", wire.Message{Kind: wire.KindSnapshotRequest, From: 2, To: 1,
			View: wire.View{Epoch: 9, Leaders: []wire.NodeID{2, 3, 4}, PrevEpoch: 3, PrevLeaders: []wire.NodeID{2, 3, 4}}}, core.ErrBadMessage},
		{"snapshot without an epoch", wire.Message{Kind: wire.KindSnapshot, From: 2, To: 1, Name: "a"}, core.ErrBadMessage},
	}
	for _, c := range cases {
		before, stats := take(n), n.Stats()
		err := n.Step(c.m)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if n.HasReady() {
			t.Errorf("%s: produced output %+v", c.name, n.Ready())
			n.Advance()
		}
		if after := take(n); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: state changed:\n%+v\n%+v", c.name, before, after)
		}
		if n.Stats() == stats {
			t.Errorf("%s: not counted", c.name)
		}
	}
}

func TestNonLeaderRefusesReplicaWork(t *testing.T) {
	n, err := core.New(core.Config{ID: 5, Incarnation: 1, View: wire.View{Epoch: 1, Leaders: []wire.NodeID{1, 2, 3}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	err = n.Step(wire.Message{Kind: wire.KindAddTicket, From: 4, To: 5, Epoch: 1, Name: "a", Ticket: 1})
	if !errors.Is(err, core.ErrWrongTarget) || n.HasReady() {
		t.Fatalf("got %v", err)
	}
}

func TestAcquireValidation(t *testing.T) {
	n := newLeader(t, 0)
	ok := core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 1, Duration: 1}
	for name, a := range map[string]core.Acquire{
		"empty name":        {Mode: wire.ModeExclusive, Duration: 1},
		"oversized name":    {Name: strings.Repeat("n", 1025), Mode: wire.ModeExclusive, Duration: 1},
		"unknown mode":      {Name: "a", Mode: 77, Duration: 1},
		"negative timeout":  {Name: "a", Mode: wire.ModeExclusive, Timeout: -1, Duration: 1},
		"zero duration":     {Name: "a", Mode: wire.ModeExclusive},
		"negative duration": {Name: "a", Mode: wire.ModeExclusive, Duration: -5},
		"negative grace":    {Name: "a", Mode: wire.ModeExclusive, Duration: 1, Grace: -1},
		"absurd duration":   {Name: "a", Mode: wire.ModeExclusive, Duration: 1 << 50},
		"negative quiet":    {Name: "a", Mode: wire.ModeReadWriteGentle, Duration: 1, Quiet: -1},
		"negative limit":    {Name: "a", Mode: wire.ModeReadOnly, Duration: 1, Limit: -1},
		"absurd limit":      {Name: "a", Mode: wire.ModeReadOnly, Duration: 1, Limit: 1 << 30},
	} {
		if _, err := n.Acquire(a); !errors.Is(err, codes.ErrInvalid) {
			t.Errorf("%s: got %v", name, err)
		}
		if n.HasReady() || len(n.Requests()) != 0 {
			t.Errorf("%s: changed state", name)
		}
	}
	if _, err := n.Acquire(ok); err != nil {
		t.Fatal(err)
	}
}

func TestOverflowAtTheMaster(t *testing.T) {
	n, err := core.New(core.Config{ID: 1, Incarnation: 1, MaxWaiters: 2,
		View: wire.View{Epoch: 1, Leaders: []wire.NodeID{1, 2, 3}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}
	for range 2 {
		if _, err := n.Acquire(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Acquire(a); !errors.Is(err, codes.ErrOverflow) || codes.Of(err).Wire != wire.CodeOverflow {
		t.Fatalf("got %v", err)
	}
}

// TestStaleAckAfterRestart pins the incarnation rule: an ENTERING ack for
// the previous life's request 4.1.1 must not advance the new life's first
// request. With MutantStaleIncarnation the ids of both lives are equal and
// the stale acks are counted, which this test must notice.
func TestStaleAckAfterRestart(t *testing.T) {
	for _, c := range []struct {
		mutant    core.Mutant
		wantPhase string
	}{{0, "entering"}, {core.MutantStaleIncarnation, "add-ticket"}} {
		if c.mutant != 0 && !mutation.Need(t) {
			continue
		}
		if got := phaseAfterStaleAcks(t, c.mutant); got != c.wantPhase {
			t.Errorf("mutant %d: phase %s after stale acks, want %s", c.mutant, got, c.wantPhase)
		}
	}
}

// phaseAfterStaleAcks is the phase of node 4's first request of its
// second life after two ENTERING acks for its first life's request.
func phaseAfterStaleAcks(t *testing.T, mutant core.Mutant) string {
	t.Helper()
	cfg := core.Config{ID: 4, View: wire.View{Epoch: 1, Leaders: []wire.NodeID{1, 2, 3}}, Mutant: mutant}
	cfg.Incarnation = 1
	old, _ := core.New(cfg, nil)
	drain(old)
	oldID, _ := old.Acquire(core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 50, Duration: 5})
	cfg.Incarnation = 2
	n, _ := core.New(cfg, nil)
	drain(n)
	if _, err := n.Acquire(core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 50, Duration: 5}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	for _, from := range []wire.NodeID{1, 2} {
		_ = n.Step(wire.Message{Kind: wire.KindEnterAck, From: from, To: 4, Epoch: 1, Name: "a", Req: oldID, Incarnation: 1})
	}
	return n.Requests()[0].Phase
}

func TestReadyHandsOutOnlyWhatAdvanceDrops(t *testing.T) {
	n := newLeader(t, 0)
	if _, err := n.Acquire(core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}); err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	k := len(rd.Messages)
	// Input arriving between Ready and Advance is kept for the next Ready.
	if _, err := n.Acquire(core.Acquire{Name: "b", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}); err != nil {
		t.Fatal(err)
	}
	n.Advance()
	next := n.Ready()
	if k == 0 || len(next.Messages) != k {
		t.Fatalf("first ready had %d messages, second %d", k, len(next.Messages))
	}
	for _, m := range next.Messages {
		if m.Name != "b" {
			t.Fatalf("message of the first Ready handed out again: %v", m)
		}
	}
}

func TestDurableApply(t *testing.T) {
	d := core.NewDurable()
	e := wire.Entry{Req: wire.RequestID{Node: 1, Seq: 1}, Ticket: 7, Mode: wire.ModeExclusive, State: wire.StateChoosing}
	d.Apply([]core.Write{{Kind: core.WriteTicket, Name: "a", Entry: e, Lifetime: 10}})
	d.Apply([]core.Write{{Kind: core.WriteLifetime, Name: "a", Entry: e, Lifetime: 30}})
	if got := d.Tickets["a"][e.Req]; got.Lifetime != 30 || got.Entry.Ticket != 7 {
		t.Fatalf("got %+v", got)
	}
	d.Apply([]core.Write{{Kind: core.WriteDelete, Name: "a", Entry: e}})
	if len(d.Tickets) != 0 || d.HighWater["a"] != 7 {
		t.Fatalf("delete must keep the high-water mark: %+v", d)
	}
	lower := e
	lower.Ticket = 3
	d.Apply([]core.Write{{Kind: core.WriteTicket, Name: "a", Entry: lower}})
	if d.HighWater["a"] != 7 {
		t.Fatal("the high-water mark went down")
	}
}

// TestActivationRounds: a replica keeps the newest round's mark; a late
// mark of an older round changes nothing and is not acknowledged.
func TestActivationRounds(t *testing.T) {
	n := newLeader(t, 0)
	req := wire.RequestID{Node: 2, Seq: 1<<32 | 1}
	steps := []wire.Message{
		{Kind: wire.KindEnter, Mode: wire.ModeReadWrite, Lifetime: 500},
		{Kind: wire.KindAddTicket, Ticket: 1, Incarnation: 1, Mode: wire.ModeReadWrite, Lifetime: 500},
		{Kind: wire.KindActivate, Round: 2},
	}
	for _, m := range steps {
		m.From, m.To, m.Epoch, m.Name, m.Req = 2, 1, 3, "a", req
		if err := n.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	drain(n)
	late := wire.Message{Kind: wire.KindActivate, From: 2, To: 1, Epoch: 3, Name: "a", Req: req, Round: 1, Reject: true}
	if err := n.Step(late); err != nil {
		t.Fatal(err)
	}
	if rd := drain(n); len(rd.Messages) != 0 {
		t.Fatalf("a late mark was answered: %v", rd.Messages)
	}
	if e, _ := n.Table("a"); len(e) != 1 || !e[0].Active {
		t.Fatalf("a late mark of round 1 undid round 2: %+v", e)
	}
	newer := late
	newer.Round = 3
	if err := n.Step(newer); err != nil {
		t.Fatal(err)
	}
	if e, _ := n.Table("a"); e[0].Active {
		t.Fatalf("round 3 cleared nothing: %+v", e)
	}
	if rd := drain(n); len(rd.Messages) != 1 || rd.Messages[0].Round != 3 {
		t.Fatalf("round 3 must be acknowledged with its round: %v", rd.Messages)
	}
}

// With SnapshotsFromStore, a previous leader asked for its table fences
// durably and hands the sending to the caller (Ready.Snapshots) in the same
// Ready, instead of sending entries from memory.
func TestSnapshotsFromStore(t *testing.T) {
	for _, fromStore := range []bool{false, true} {
		n, err := core.New(core.Config{ID: 1, Incarnation: 1, View: wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2, 3}},
			SnapshotsFromStore: fromStore}, nil)
		if err != nil {
			t.Fatal(err)
		}
		drain(n)
		if _, err := n.Acquire(core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10}); err != nil {
			t.Fatal(err)
		}
		drain(n)
		err = n.Step(wire.Message{Kind: wire.KindSnapshotRequest, From: 4, To: 1,
			View: wire.View{Epoch: 4, Leaders: []wire.NodeID{2, 3, 4}, PrevEpoch: 3, PrevLeaders: []wire.NodeID{1, 2, 3}}})
		if err != nil {
			t.Fatal(err)
		}
		rd := n.Ready()
		fenced := slices.ContainsFunc(rd.Persist, func(w core.Write) bool { return w.Kind == core.WriteFence && w.Epoch == 4 })
		var entries int
		for _, m := range rd.Messages {
			if m.Kind == wire.KindSnapshot || m.Kind == wire.KindSnapshotDone {
				entries++
			}
		}
		switch {
		case !fenced:
			t.Fatalf("fromStore=%v: no fence in the Ready: %+v", fromStore, rd.Persist)
		case fromStore && (entries != 0 || len(rd.Snapshots) != 1 || rd.Snapshots[0] != core.SnapshotDue{To: 4, Epoch: 4, Answer: 1<<32 | 1, Complete: 3}):
			t.Fatalf("from the store: %d snapshot messages, snapshots %+v", entries, rd.Snapshots)
		case !fromStore && (entries == 0 || len(rd.Snapshots) != 0):
			t.Fatalf("from memory: %d snapshot messages, snapshots %+v", entries, rd.Snapshots)
		}
		n.Advance()
	}
}

// A handoff's answers are matched to the request they answer: the rest of
// an answer to an earlier request is ignored, SnapshotDone may overtake
// the entries, a short answer is asked for again only once it has gone
// quiet, and an answer still arriving is not interrupted by a new request.
func TestHandoffAnswersMatchTheirRequest(t *testing.T) {
	n, err := core.New(core.Config{ID: 4, Incarnation: 1, View: wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2, 3}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	n.SetView(wire.View{Epoch: 4, Leaders: []wire.NodeID{2, 3, 4}, PrevEpoch: 3, PrevLeaders: []wire.NodeID{1, 2, 3}})
	requests := func() map[wire.NodeID]uint64 {
		got := map[wire.NodeID]uint64{}
		for _, m := range drain(n).Messages {
			if m.Kind == wire.KindSnapshotRequest {
				got[m.To] = m.SnapshotID
			}
		}
		return got
	}
	asked := requests()
	if len(asked) != 3 {
		t.Fatalf("the new leader asked %v, want the three previous leaders", asked)
	}
	holder := wire.RequestID{Node: 5, Seq: 1<<32 | 1}
	answerOf := func(id uint64) func(wire.NodeID, uint64, ...wire.Kind) {
		return func(from wire.NodeID, nonce uint64, kinds ...wire.Kind) {
			t.Helper()
			for _, k := range kinds {
				m := wire.Message{Kind: k, From: from, To: 4, Epoch: 4, SnapshotID: nonce, Answer: id, View: wire.View{Epoch: 4}, Name: "a"}
				switch k {
				case wire.KindSnapshotDone:
					m.Name, m.AnswerSize, m.HandoffEpoch = "", 2, 3
				case wire.KindSnapshot:
					m.Ticket = 1 // the high-water mark
				case wire.KindAddTicket: // stands for the ticket entry
					m.Kind, m.Req, m.Ticket, m.Mode, m.Lifetime = wire.KindSnapshot, holder, 1, wire.ModeExclusive, 100
				}
				if err := n.Step(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	answer, another := answerOf(1), answerOf(2)
	// Leader 2: Done first, then entries of an earlier request and of a
	// second answer to this one (both ignored), then its high-water mark:
	// short. Leader 3: its mark, then Done: short. Leader 1: silent.
	answer(2, asked[2], wire.KindSnapshotDone)
	answer(2, asked[2]-1, wire.KindSnapshot, wire.KindAddTicket)
	another(2, asked[2], wire.KindAddTicket)
	answer(2, asked[2], wire.KindSnapshot)
	answer(3, asked[3], wire.KindSnapshot, wire.KindSnapshotDone)
	tick := func(ticks int) map[wire.NodeID]uint64 {
		t.Helper()
		for i := range ticks {
			n.Tick()
			if again := requests(); len(again) != 0 || i == ticks-1 {
				if i != ticks-1 {
					t.Fatalf("asked %v again after %d ticks", again, i+1)
				}
				return again
			}
		}
		return nil
	}
	// The silent leader is asked again after a retry period, and its
	// answer to the first request still counts.
	if again := tick(10); len(again) != 1 || again[1] <= asked[1] {
		t.Fatalf("after a retry period asked %v, want leader 1 again", again)
	}
	answer(1, asked[1], wire.KindSnapshot, wire.KindAddTicket, wire.KindSnapshotDone)
	if n.Serving() {
		t.Fatal("serving on one whole answer and two short ones")
	}
	// The short answers count as broken once quiet for 4 retry periods.
	again := tick(30)
	if _, ok := again[1]; ok || again[2] <= asked[2] || again[3] <= asked[3] {
		t.Fatalf("after a quiet period asked %v (first %v): want 2 and 3 again with new numbers, not 1", again, asked)
	}
	answer(3, asked[3], wire.KindSnapshot, wire.KindAddTicket, wire.KindSnapshotDone) // the broken request's: ignored
	if n.Serving() {
		t.Fatal("serving on an answer to a request given up")
	}
	answer(3, again[3], wire.KindAddTicket, wire.KindSnapshot, wire.KindSnapshotDone)
	drain(n)
	if !n.Serving() {
		t.Fatalf("not serving on two whole answers: %+v", n.Handoff())
	}
	if e, hw := n.Table("a"); len(e) != 1 || e[0].Req != holder || hw != 1 {
		t.Fatalf("table taken over: %+v high-water %d", e, hw)
	}
}

// TestOneReportPerReady: a leader reports a name's table to a watcher once
// per Ready, however many changes and watches of that name it stepped: a
// master with a thousand waiters on a name watches for each of them, and
// a report per message made a busy name's table go out a thousand times.
// A watcher that asked for nothing and saw no change gets nothing.
func TestOneReportPerReady(t *testing.T) {
	n := newLeader(t, 0)
	step := func(m wire.Message) {
		t.Helper()
		m.To, m.Epoch, m.Name, m.Mode, m.Lifetime = 1, 3, "a", wire.ModeExclusive, 100
		if err := n.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	reports := func() map[wire.NodeID][]int {
		got := map[wire.NodeID][]int{}
		for _, m := range drain(n).Messages {
			if m.Kind == wire.KindReport {
				got[m.To] = append(got[m.To], len(m.Entries))
			}
		}
		return got
	}
	for seq := range uint64(50) {
		step(wire.Message{Kind: wire.KindEnter, From: 4, Req: wire.RequestID{Node: 4, Seq: 1<<32 | seq + 1}})
		step(wire.Message{Kind: wire.KindWatch, From: 4, WatchSeq: seq + 1})
	}
	step(wire.Message{Kind: wire.KindWatch, From: 5, WatchSeq: 1})
	if got := reports(); !reflect.DeepEqual(got, map[wire.NodeID][]int{4: {50}, 5: {50}}) {
		t.Fatalf("reports after 50 entries and 51 watches, by watcher (their entries): %v; want one each", got)
	}
	step(wire.Message{Kind: wire.KindWatch, From: 5, WatchSeq: 2})
	if got := reports(); !reflect.DeepEqual(got, map[wire.NodeID][]int{5: {50}}) {
		t.Fatalf("reports after a watch of node 5 alone: %v; want one, to node 5", got)
	}
	// A change goes out as itself, on top of the last report.
	step(wire.Message{Kind: wire.KindEnter, From: 4, Req: wire.RequestID{Node: 4, Seq: 1<<32 | 51}})
	if got := reports(); !reflect.DeepEqual(got, map[wire.NodeID][]int{4: {1}, 5: {1}}) {
		t.Fatalf("reports after a change: %v; want one to each watcher, with the one entry that changed", got)
	}
}

// A lease ends the event's TTL after its call was sent, on the sender's
// clock.
func TestExpiryFrom(t *testing.T) {
	e := core.Event{Name: "site", Kind: core.EventGranted, Token: 7, Elapsed: 12, Duration: 100, TTL: 112}
	if got := e.ExpiryFrom(1000); got != 1112 {
		t.Fatalf("expiry %d, want 1112", got)
	}
}

// TestPhasesTellEveryChange: Ready.Phases lists every phase a client's
// request enters, then its end, so the runtime times phases without
// walking every request.
func TestPhasesTellEveryChange(t *testing.T) {
	c := newBenchCluster(t, true, nil)
	c.phases = make([][]core.PhaseChange, len(c.nodes))
	id := c.acquire(t, 1, core.Acquire{Name: "a", Mode: wire.ModeExclusive, Timeout: 10, Duration: 10})
	c.settle(t)
	c.expect(t, core.EventGranted, id)
	if rs := c.nodes[0].Requests(); len(rs) != 1 || rs[0].Phase != "held" {
		t.Fatalf("requests %+v, want one held", rs)
	}
	c.release(t, 1, id)
	c.settle(t)
	var got []string
	for _, p := range c.phases[0] {
		if p.Handle != id {
			t.Fatalf("phase change of %s, the only request is %s", p.Handle, id)
		}
		got = append(got, p.Phase)
	}
	// Released, the request is gone for its client at once (Requests no
	// longer lists it) while the leaders are told.
	want := []string{"entering", "add-ticket", "waiting", "held", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("phases %q, want %q", got, want)
	}
	if rs := c.nodes[0].Requests(); len(rs) != 0 {
		t.Fatalf("requests %+v after the release", rs)
	}
}

// TestMutantsCompiledOut: in a build without the sluicemutants tag (every
// build but the mutation tests', the released binary's among them) a
// mutant set in the Config changes nothing: the stale acks of
// TestStaleAckAfterRestart stay stale under MutantStaleIncarnation, as
// on the real core. (The mutants' branches sit behind Mutant.on, a
// constant false there, which the compiler drops.)
func TestMutantsCompiledOut(t *testing.T) {
	if mutation.Built {
		t.Skip("this build has the mutants")
	}
	if got := phaseAfterStaleAcks(t, ^core.Mutant(0)); got != "entering" {
		t.Errorf("every mutant set: phase %s after stale acks, want entering (the mutants are built in)", got)
	}
}
