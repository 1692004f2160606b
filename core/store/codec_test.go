package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
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
		if err != nil || !reflect.DeepEqual(normal(&core.Durable{Led: map[uint64]wire.View{0: v}}).Led, normal(&core.Durable{Led: map[uint64]wire.View{0: w.View}}).Led) {
			t.Fatalf("view %+v: got %+v, %v", w.View, v, err)
		}
		p := randElection(r)
		enc := encodeElection(p)
		got, err := decodeElection(keyElection, enc)
		if err != nil || !reflect.DeepEqual(normalElection(got), normalElection(p)) {
			t.Fatalf("election %+v: got %+v, %v", p, got, err)
		}
		if again := encodeElection(got); !bytes.Equal(again, enc) {
			t.Fatalf("election %+v: encodes as %x, then %x", p, enc, again)
		}
		// The first version, as records written before it changed hold
		// them, loads with the fields it lacked empty.
		got, err = decodeElection(keyElection, encodeElectionV1(p))
		old := &ElectionRecord{Promised: p.Promised, Accepted: p.Accepted, Valid: p.Valid}
		old.Accepted.Members, old.Accepted.PrevMembers, old.Valid.Members, old.Valid.PrevMembers = nil, nil, nil, nil
		old.Accepted.Level, old.Valid.Level = 0, 0
		if err != nil || !reflect.DeepEqual(normalElection(got), normalElection(old)) {
			t.Fatalf("election version 1 %+v: got %+v, %v", old, got, err)
		}
	}
}

// encodeElectionV1 is the encoding of the election record before version 2.
func encodeElectionV1(p *ElectionRecord) []byte {
	b := binary.AppendUvarint([]byte{1}, p.Promised)
	a, v := p.Accepted, p.Valid
	b = appendView(b, a.Epoch, a.Leaders, a.PrevEpoch, a.PrevLeaders)
	return appendView(b, v.Epoch, v.Leaders, v.PrevEpoch, v.PrevLeaders)
}

// TestElectionVersions pins the encodings byte by byte: versions 1 and 2
// as stores of earlier releases hold them, version 3 (written while no view
// has a level, so the previous release still opens the store) and 4.
func TestElectionVersions(t *testing.T) {
	v1 := []byte{1, 4, 3, 2, 1, 2, 1, 1, 5, 2, 1, 7, 0, 0}
	got, err := decodeElection(keyElection, v1)
	want := &ElectionRecord{Promised: 4,
		Accepted: wire.View{Epoch: 3, Leaders: []wire.NodeID{1, 2}, PrevEpoch: 1, PrevLeaders: []wire.NodeID{5}},
		Valid:    wire.View{Epoch: 2, Leaders: []wire.NodeID{7}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1: got %+v, %v", got, err)
	}
	want.Cluster, want.Bootstrap = 300, []wire.NodeID{1, 2, 5}
	want.Accepted.Members, want.Accepted.PrevMembers = []wire.NodeID{1, 2, 5}, []wire.NodeID{1, 2, 5}
	want.Valid.Members, want.Valid.PrevMembers = []wire.NodeID{7}, []wire.NodeID{1, 2, 5}
	want.Lives = map[wire.NodeID]wire.Life{5: {Incarnation: 2, Nonce: 9}, 1: {Incarnation: 1, Nonce: 128}}
	v2 := []byte{2, 0xac, 0x02, 3, 1, 2, 5, 4,
		3, 2, 1, 2, 1, 1, 5, 3, 1, 2, 5, 3, 1, 2, 5,
		2, 1, 7, 0, 0, 1, 7, 3, 1, 2, 5,
		2, 1, 1, 0x80, 0x01, 5, 2, 9}
	if got, err := decodeElection(keyElection, v2); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 2: got %+v, %v", got, err)
	}
	want.Confirmed, want.Since = wire.Life{Incarnation: 2, Nonce: 9}, []wire.Life{{Incarnation: 3, Nonce: 1}, {Incarnation: 4, Nonce: 200}}
	want.Writes = 300
	v3 := append(append([]byte{3}, v2[1:]...), 2, 9, 2, 3, 1, 4, 0xc8, 0x01, 0xac, 0x02)
	if enc := encodeElection(want); !bytes.Equal(enc, v3) {
		t.Fatalf("version 3 encodes as %v, want %v", enc, v3)
	}
	if got, err := decodeElection(keyElection, v3); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 3: got %+v, %v", got, err)
	}
	// Version 4 once a view has a level: version 3 and the two levels.
	want.Valid.Level = 4
	v4 := append(append([]byte{4}, v3[1:]...), 0, 4)
	if enc := encodeElection(want); !bytes.Equal(enc, v4) {
		t.Fatalf("version 4 encodes as %v, want %v", enc, v4)
	}
	if got, err := decodeElection(keyElection, v4); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 4: got %+v, %v", got, err)
	}
	own := v3[:len(v3)-8]   // up to the count of own lives
	lives := v2[:len(v2)-8] // up to the count of lives
	withLives := func(b ...byte) []byte { return append(slices.Clone(lives), b...) }
	bad := []struct {
		name string
		v    []byte
		why  string
	}{
		{"version 0", append([]byte{0}, v1[1:]...), "unknown value version 0"},
		{"version 5", append([]byte{5}, v4[1:]...), "unknown value version 5"},
		{"version 3 as 4", append([]byte{4}, v3[1:]...), "truncated"},
		{"version 4 without levels", append(append([]byte{4}, v3[1:]...), 0, 0), "levels of a record that has them are zero"},
		{"version 4 as 3", append([]byte{3}, v4[1:]...), "trailing bytes"},
		{"version 3 as 2", append([]byte{2}, v3[1:]...), "trailing bytes"},
		{"own lives over cap", append(slices.Clone(own), 65, 1, 1), "own lives over their cap"},
		{"own life truncated", append(slices.Clone(own), 1, 1, 0x80, 0x80), "truncated"},
		{"version 1 trailing", append(slices.Clone(v1), 0), "trailing bytes"},
		{"version 2 as 1", append([]byte{1}, v2[1:]...), "trailing bytes"},
		{"version 1 as 2", append([]byte{2}, v1[1:]...), "truncated"},
		{"version 2 truncated", v2[:len(v2)-1], "truncated"},
		{"version 2 trailing", append(slices.Clone(v2), 0), "trailing bytes"},
		{"lives out of order", withLives(2, 5, 2, 9, 1, 1, 0), "not in node order"},
		{"life twice", withLives(2, 5, 2, 9, 5, 1, 0), "not in node order"},
		{"incarnation over 32 bits", withLives(1, 5, 0x80, 0x80, 0x80, 0x80, 0x10, 0), "over 32 bits"},
		{"life count over size", withLives(3, 1, 1, 0, 5, 2, 9), "life count over value size"},
		{"life truncated", withLives(2, 1, 1, 0, 5, 2, 0x80), "truncated"},
		{"huge life count", withLives(0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1, 0), "life count over value size"},
	}
	for _, c := range bad {
		if _, err := decodeElection(keyElection, c.v); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want ErrCorrupt: %s", c.name, err, c.why)
		}
	}
}

// FuzzDecode: no bytes make a decoder panic; every failure is ErrCorrupt.
func FuzzDecode(f *testing.F) {
	f.Add(ticketKey("a\x00b", wire.RequestID{Node: 1, Seq: 2}), encodeTicket(wire.Entry{Ticket: 3, Mode: 1, State: 2, Active: true}, -4))
	f.Add(highKey("\x00"), encodeUint(9))
	f.Add(ledKey(5), encodeLed(wire.View{Epoch: 5, Leaders: []wire.NodeID{1, 2}, PrevLeaders: []wire.NodeID{3}}))
	f.Add(keyElection, encodeElection(&ElectionRecord{Promised: 4, Valid: wire.View{Epoch: 2, Leaders: []wire.NodeID{7}}}))
	f.Add(keyElection, encodeElection(&ElectionRecord{Cluster: 9, Bootstrap: []wire.NodeID{1, 7}, Promised: 4,
		Valid: wire.View{Epoch: 2, Leaders: []wire.NodeID{7}, Members: []wire.NodeID{1, 7}, PrevMembers: []wire.NodeID{1}},
		Lives: map[wire.NodeID]wire.Life{1: {Incarnation: 3, Nonce: 1 << 60}, 7: {Incarnation: 1}}}))
	f.Add(keyElection, encodeElectionV1(&ElectionRecord{Promised: 4, Valid: wire.View{Epoch: 2, Leaders: []wire.NodeID{7}}}))
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
