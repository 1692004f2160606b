package core

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

// TestTombSet: the inline tombstone and the map behave as one set.
func TestTombSet(t *testing.T) {
	var s tombSet
	req := func(seq uint64) wire.RequestID { return wire.RequestID{Node: 4, Seq: 1<<32 | seq} }
	check := func(want map[uint64]int64) {
		t.Helper()
		if s.len() != len(want) {
			t.Fatalf("len %d, want %d", s.len(), len(want))
		}
		var reqs []wire.RequestID
		for seq, until := range want {
			reqs = append(reqs, req(seq))
			if tb, ok := s.get(req(seq)); !ok || tb.until != until {
				t.Fatalf("get %d: %+v %v, want until %d", seq, tb, ok, until)
			}
		}
		slices.SortFunc(reqs, wire.RequestID.Compare)
		first, has := int64(0), false
		for _, until := range want {
			if !has || until < first {
				first, has = until, true
			}
		}
		if got, ok := s.earliest(); got != first || ok != has {
			t.Fatalf("earliest %d %v, want %d %v", got, ok, first, has)
		}
		if got := s.sorted(); !slices.Equal(got, reqs) {
			t.Fatalf("sorted %v, want %v", got, reqs)
		}
	}
	if _, ok := s.get(wire.RequestID{}); ok {
		t.Fatal("the zero request is in an empty set")
	}
	s.put(req(2), tomb{until: 20})
	check(map[uint64]int64{2: 20})
	s.put(req(1), tomb{until: 10})
	s.put(req(3), tomb{until: 30})
	s.put(req(2), tomb{until: 21}) // the inline one, replaced in place
	check(map[uint64]int64{1: 10, 2: 21, 3: 30})
	s.del(req(2)) // the inline slot is free; 1 and 3 stay in the map
	check(map[uint64]int64{1: 10, 3: 30})
	s.put(req(1), tomb{until: 11}) // in the map: updated there, not copied inline
	s.put(req(4), tomb{until: 40}) // takes the free inline slot
	check(map[uint64]int64{1: 11, 3: 30, 4: 40})
	s.del(req(1))
	s.del(req(3))
	s.del(req(9)) // absent: nothing happens
	check(map[uint64]int64{4: 40})
	if s.more != nil {
		t.Fatalf("an emptied map is kept: %v", s.more)
	}
	s.del(req(4))
	check(map[uint64]int64{})

	// Expiry: what ended before now goes, in request order, whether inline
	// or in the map, extended or not.
	s.put(req(5), tomb{until: 50}) // inline
	s.put(req(3), tomb{until: 30})
	s.put(req(1), tomb{until: 70})
	s.put(req(2), tomb{until: 20})
	s.put(req(2), tomb{until: 60}) // extended: its first end is stale
	s.put(req(4), tomb{until: 40})
	s.del(req(4)) // gone: its end is stale
	if got := s.expire(50); !slices.Equal(got, []wire.RequestID{req(3)}) {
		t.Fatalf("expired before 50: %v, want [%v]", got, req(3))
	}
	check(map[uint64]int64{1: 70, 2: 60, 5: 50})
	if got := s.expire(61); !slices.Equal(got, []wire.RequestID{req(2), req(5)}) {
		t.Fatalf("expired before 61: %v, want [%v %v]", got, req(2), req(5))
	}
	check(map[uint64]int64{1: 70})
	if got := s.expire(100); !slices.Equal(got, []wire.RequestID{req(1)}) || s.more != nil || s.ends != nil {
		t.Fatalf("expired before 100: %v, left %+v", got, s)
	}
	check(map[uint64]int64{})
}
