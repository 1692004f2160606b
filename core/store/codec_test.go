package store

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// TestCodecRoundTrip: every field survives encoding, and keys parse back to
// the name and request they were made of.
func TestCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		w := randWrite(r)
		e, err := decodeNameEntry(ticketKey(w.Name, w.Entry.Req), encodeTicket(w.Entry, w.Lifetime))
		if err != nil || e.name != w.Name || e.high || e.req != w.Entry.Req ||
			e.ticket != (core.DurableTicket{Entry: w.Entry, Lifetime: w.Lifetime}) {
			t.Fatalf("ticket %+v: got %+v, %v", w, e, err)
		}
		e, err = decodeNameEntry(highKey(w.Name), encodeUint(w.Entry.Ticket))
		if err != nil || e.name != w.Name || !e.high || e.value != w.Entry.Ticket {
			t.Fatalf("high water %q: got %+v, %v", w.Name, e, err)
		}
		v, err := decodeLed(ledKey(w.View.Epoch), encodeLed(w.View))
		if err != nil || !reflect.DeepEqual(normal(&core.Durable{Led: map[uint64]core.View{0: v}}).Led, normal(&core.Durable{Led: map[uint64]core.View{0: w.View}}).Led) {
			t.Fatalf("view %+v: got %+v, %v", w.View, v, err)
		}
		p := randElection(r)
		got, err := decodeElection(keyElection, encodeElection(p))
		if err != nil || !reflect.DeepEqual(normalElection(got), normalElection(p)) {
			t.Fatalf("election %+v: got %+v, %v", p, got, err)
		}
	}
}

// FuzzDecode: no bytes make a decoder panic; every failure is ErrCorrupt.
func FuzzDecode(f *testing.F) {
	f.Add(ticketKey("a\x00b", wire.RequestID{Node: 1, Seq: 2}), encodeTicket(wire.Entry{Ticket: 3, Mode: 1, State: 2, Active: true}, -4))
	f.Add(highKey("\x00"), encodeUint(9))
	f.Add(ledKey(5), encodeLed(core.View{Epoch: 5, Leaders: []wire.NodeID{1, 2}, PrevLeaders: []wire.NodeID{3}}))
	f.Add(keyElection, encodeElection(&election.Persisted{Promised: 4, Valid: wire.View{Epoch: 2, Leaders: []wire.NodeID{7}}}))
	f.Add([]byte("n\x00"), []byte{1, 0x80})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
		}
		_, err := decodeNameEntry(k, v)
		check(err)
		_, err = decodeLed(k, v)
		check(err)
		_, err = decodeElection(k, v)
		check(err)
		_, err = decodeInc(k, v)
		check(err)
	})
}
