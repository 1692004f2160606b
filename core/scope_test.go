package core_test

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// The scopes that let a name's answers go before other names' writes are
// durable: a replica's answers and reports about one name rest on that
// name's writes; a master's messages rest on no write of their name
// (core.RequestScope: only on the whole table's); the handoff's,
// election's and membership's messages rest on every write, and so do
// writes about the whole table.
func TestScopes(t *testing.T) {
	n, err := core.New(core.Config{ID: 1, Incarnation: 1}, core.NewDurable())
	if err != nil {
		t.Fatal(err)
	}
	want := map[wire.Kind]string{}
	for _, k := range []wire.Kind{wire.KindEnterAck, wire.KindGetMaxAck, wire.KindAddTicketAck,
		wire.KindReport, wire.KindReleaseAck, wire.KindRenewAck, wire.KindActivateAck,
		wire.KindRevoked, wire.KindFormer, wire.KindHolds, wire.KindHoldsAck, wire.KindConfirmAck,
		wire.KindYield} {
		want[k] = "/a"
	}
	for _, k := range []wire.Kind{wire.KindEnter, wire.KindGetMax, wire.KindAddTicket, wire.KindWatch,
		wire.KindUnwatch, wire.KindRelease, wire.KindRenew, wire.KindExit, wire.KindActivate,
		wire.KindConfirm} {
		want[k] = core.RequestScope
	}
	for k := wire.KindEnter; k <= wire.KindYield; k++ {
		if got := n.MessageScope(wire.Message{Kind: k, Name: "/a"}); got != want[k] {
			t.Errorf("%s: scope %q, want %q", k, got, want[k])
		}
	}
	for k := core.WriteTicket; k <= core.WriteFloor; k++ {
		w := core.Write{Kind: k, Name: "/a"}
		want := "/a"
		switch k {
		case core.WriteFence, core.WriteComplete, core.WriteLedView, core.WriteFloor:
			want = ""
		}
		if got := w.Scope(); got != want {
			t.Errorf("write kind %d: scope %q, want %q", k, got, want)
		}
	}
}
