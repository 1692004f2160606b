package daemon

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// detailOf is a table's detail with only its entries filled in.
func detailOf(entries ...wire.Entry) []core.TableEntry {
	out := make([]core.TableEntry, len(entries))
	for i, e := range entries {
		out[i].Entry = e
	}
	return out
}

// A holder stays the holder while other requests are in their doorway
// (no number yet): the table's Holder, which an agent that restarted
// reads to take a lease over, must not count them as ahead of it.
func TestHolderWithDoorwaysUnderWay(t *testing.T) {
	req := func(node, seq uint64) wire.RequestID { return wire.RequestID{Node: wire.NodeID(node), Seq: seq} }
	holder := wire.Entry{Req: req(1, 1), Ticket: 77, Mode: wire.ModeExclusive, State: wire.StateTicket}
	waiter := wire.Entry{Req: req(2, 1), Ticket: 78, Mode: wire.ModeExclusive, State: wire.StateTicket}
	choosing := wire.Entry{Req: req(3, 1), Mode: wire.ModeExclusive, State: wire.StateChoosing}
	proposed := wire.Entry{Req: req(4, 1), Ticket: 79, Mode: wire.ModeExclusive, State: wire.StateChoosing}
	table := []wire.Entry{choosing, holder, waiter, proposed}
	ticketed := ticketedEntries(detailOf(table...))
	for _, c := range []struct {
		e    wire.Entry
		want bool
	}{{holder, true}, {waiter, false}, {choosing, false}, {proposed, false}} {
		if got := isHolder(c.e, ticketed); got != c.want {
			t.Errorf("%s (ticket %d, %s) beside %v: holder %v, want %v", c.e.Req, c.e.Ticket, c.e.State, table, got, c.want)
		}
	}
	earlier := wire.Entry{Req: req(5, 1), Ticket: 76, Mode: wire.ModeReadOnly, State: wire.StateTicket}
	if isHolder(holder, ticketedEntries(detailOf(append(table, earlier)...))) {
		t.Errorf("an exclusive ticket behind a reader's earlier one is taken for a holder")
	}
}
