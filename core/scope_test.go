package core_test

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// The scopes that let a name's answers go before other names' writes are
// durable: the lock work of one name rests on that name's writes; the
// handoff's, election's and membership's messages rest on every write, and
// so do writes about the whole table.
func TestScopes(t *testing.T) {
	n, err := core.New(core.Config{ID: 1, Incarnation: 1}, core.NewDurable())
	if err != nil {
		t.Fatal(err)
	}
	ofName := map[wire.Kind]bool{}
	for _, k := range []wire.Kind{wire.KindEnter, wire.KindEnterAck, wire.KindGetMax, wire.KindGetMaxAck,
		wire.KindAddTicket, wire.KindAddTicketAck, wire.KindWatch, wire.KindUnwatch, wire.KindReport,
		wire.KindRelease, wire.KindReleaseAck, wire.KindRenew, wire.KindRenewAck, wire.KindExit,
		wire.KindActivate, wire.KindActivateAck, wire.KindRevoked, wire.KindFormer, wire.KindHolds,
		wire.KindHoldsAck, wire.KindConfirm, wire.KindConfirmAck, wire.KindYield} {
		ofName[k] = true
	}
	for k := wire.KindEnter; k <= wire.KindYield; k++ {
		want := ""
		if ofName[k] {
			want = "/a"
		}
		if got := n.MessageScope(wire.Message{Kind: k, Name: "/a"}); got != want {
			t.Errorf("%s: scope %q, want %q", k, got, want)
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
