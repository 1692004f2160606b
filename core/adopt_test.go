package core_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// Adopt takes only a request of an earlier life of its own node; anything
// else is refused and changes nothing. An adoption renews at once, by the
// request's id and name, at every leader.
func TestAdopt(t *testing.T) {
	n, err := core.New(core.Config{ID: 4, Incarnation: 3, View: wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2, 3}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	a := core.Acquire{Name: "a", Mode: wire.ModeExclusive, Duration: 100}
	earlier := wire.RequestID{Node: 4, Seq: 2<<32 | 7}
	for name, id := range map[string]wire.RequestID{
		"another node's":   {Node: 5, Seq: 2<<32 | 7},
		"this life's":      {Node: 4, Seq: 3<<32 | 7},
		"a later life's":   {Node: 4, Seq: 4<<32 | 7},
		"no incarnation's": {Node: 4, Seq: 7},
	} {
		if err := n.Adopt(id, a, 1); !errors.Is(err, codes.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if err := n.Adopt(earlier, core.Acquire{Name: "a", Mode: wire.ModeExclusive}, 1); !errors.Is(err, codes.ErrInvalid) {
		t.Errorf("no duration: %v, want invalid", err)
	}
	if n.HasReady() || len(n.Requests()) != 0 {
		t.Fatal("a refused adoption changed the node")
	}
	if err := n.Adopt(earlier, a, 9); err != nil {
		t.Fatal(err)
	}
	if err := n.Adopt(earlier, a, 9); !errors.Is(err, codes.ErrInvalid) {
		t.Errorf("adopted twice: %v, want invalid", err)
	}
	rd := drain(n)
	to := map[wire.NodeID]bool{}
	var round uint64 // the leaders echo it
	for _, m := range rd.Messages {
		if m.Kind == wire.KindRenew && m.Req == earlier && m.Name == "a" && m.Lifetime == 100 {
			to[m.To], round = true, m.Round
		}
	}
	if len(to) != 3 {
		t.Fatalf("renewals sent to %v, want every leader: %+v", to, rd.Messages)
	}
	if rs := n.Requests(); len(rs) != 1 || rs[0].Handle != earlier || rs[0].Phase != "held" || rs[0].Ticket != 9 {
		t.Fatalf("requests after the adoption: %+v", rs)
	}
	// The leaders refuse it (they keep no such ticket): renew-failed,
	// and Disown forgets it without a message.
	for _, l := range []wire.NodeID{1, 2} {
		if err := n.Step(wire.Message{Kind: wire.KindRenewAck, From: l, To: 4, Epoch: 3, Name: "a", Req: earlier, Reject: true, Round: round}); err != nil {
			t.Fatal(err)
		}
	}
	rd = drain(n)
	if len(rd.Events) != 1 || rd.Events[0].Kind != core.EventRenewFailed || rd.Events[0].Code != wire.CodeLost {
		t.Fatalf("events after the refusals: %+v", rd.Events)
	}
	n.Disown(earlier)
	if rd := drain(n); len(rd.Messages) != 0 || len(n.Requests()) != 0 {
		t.Fatalf("after Disown: requests %+v, messages %+v", n.Requests(), rd.Messages)
	}
}

// A leader answers the renewal of a ticket of a restarted node's earlier
// life that its new life sends (it refuses one it does not keep), where
// it drops every other message of that life.
func TestLeaderAnswersRenewalOfEarlierLife(t *testing.T) {
	n := newLeader(t, 0)
	if err := n.Step(wire.Message{Kind: wire.KindRestarted, From: 4, To: 1, Incarnation: 3}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	earlier := wire.RequestID{Node: 4, Seq: 2<<32 | 7}
	if err := n.Step(wire.Message{Kind: wire.KindRenew, From: 4, To: 1, Epoch: 3, Name: "a", Req: earlier, Lifetime: 100}); err != nil {
		t.Fatal(err)
	}
	rd := drain(n)
	if len(rd.Messages) != 1 || rd.Messages[0].Kind != wire.KindRenewAck || !rd.Messages[0].Reject || rd.Messages[0].To != 4 {
		t.Fatalf("answer to the renewal of an earlier life's unknown ticket: %+v", rd.Messages)
	}
}
