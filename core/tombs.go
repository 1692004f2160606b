package core

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// tombSet is a name's tombstones. A churn of names leaves most of them
// with exactly one for a while, so the first is kept inline and only
// more go into a map: a map of one entry costs a name some 300 bytes. A
// busy name has thousands (each release leaves one for its lifetime):
// those in the map are also in a heap by end, so expiring them costs the
// ones that end, not a sort of them all at every check.
type tombSet struct {
	one   wire.RequestID // the inline tombstone's request; zero: none
	oneTb tomb
	more  map[wire.RequestID]tomb
	// ends has an entry per put into more; one whose tombstone is gone
	// or ends later is stale, and skipped.
	ends tombEnds
}

// tombEnd is when req's tombstone ends, as put.
type tombEnd struct {
	until int64
	req   wire.RequestID
}

type tombEnds []tombEnd

func (h tombEnds) Len() int { return len(h) }
func (h tombEnds) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(h[i].until, h[j].until), h[i].req.Compare(h[j].req)) < 0
}
func (h tombEnds) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *tombEnds) Push(x any)   { *h = append(*h, x.(tombEnd)) }
func (h *tombEnds) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// live reports whether e still says when its tombstone ends.
func (s *tombSet) live(e tombEnd) bool {
	tb, ok := s.more[e.req]
	return ok && tb.until == e.until
}

// expire drops the tombstones that ended before now and returns their
// requests, in request order.
func (s *tombSet) expire(now int64) []wire.RequestID {
	var gone []wire.RequestID
	if s.one != (wire.RequestID{}) && s.oneTb.until < now {
		gone = append(gone, s.one)
		s.one, s.oneTb = wire.RequestID{}, tomb{}
	}
	for len(s.ends) > 0 && s.ends[0].until < now {
		e := heap.Pop(&s.ends).(tombEnd)
		if s.live(e) {
			delete(s.more, e.req)
			gone = append(gone, e.req)
		}
	}
	if len(s.more) == 0 {
		s.more, s.ends = nil, nil
	}
	slices.SortFunc(gone, wire.RequestID.Compare)
	return gone
}

func (s *tombSet) get(req wire.RequestID) (tomb, bool) {
	if req == s.one && req != (wire.RequestID{}) {
		return s.oneTb, true
	}
	tb, ok := s.more[req]
	return tb, ok
}

func (s *tombSet) put(req wire.RequestID, tb tomb) {
	if _, inMap := s.more[req]; !inMap && (s.one == req || s.one == (wire.RequestID{})) {
		s.one, s.oneTb = req, tb
		return
	}
	if s.more == nil {
		s.more = map[wire.RequestID]tomb{}
	}
	if old, ok := s.more[req]; !ok || old.until != tb.until {
		heap.Push(&s.ends, tombEnd{until: tb.until, req: req})
	}
	s.more[req] = tb
}

func (s *tombSet) del(req wire.RequestID) {
	if req == s.one {
		s.one, s.oneTb = wire.RequestID{}, tomb{}
		return
	}
	delete(s.more, req)
	if len(s.more) == 0 {
		s.more, s.ends = nil, nil
	}
}

func (s *tombSet) len() int {
	n := len(s.more)
	if s.one != (wire.RequestID{}) {
		n++
	}
	return n
}

// earliest is the first tombstone's end; false when there is none.
func (s *tombSet) earliest() (int64, bool) {
	until, ok := s.oneTb.until, s.one != (wire.RequestID{})
	for len(s.ends) > 0 && !s.live(s.ends[0]) {
		heap.Pop(&s.ends)
	}
	if len(s.ends) > 0 && (!ok || s.ends[0].until < until) {
		until, ok = s.ends[0].until, true
	}
	return until, ok
}

// sorted is the tombstones' requests in request order.
func (s *tombSet) sorted() []wire.RequestID {
	reqs := make([]wire.RequestID, 0, s.len())
	if s.one != (wire.RequestID{}) {
		reqs = append(reqs, s.one)
	}
	for req := range s.more {
		reqs = append(reqs, req)
	}
	slices.SortFunc(reqs, wire.RequestID.Compare)
	return reqs
}
