package core

import (
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// tombSet is a name's tombstones. A churn of names leaves most of them
// with exactly one for a while, so the first is kept inline and only
// more go into a map: a map of one entry costs a name some 300 bytes.
type tombSet struct {
	one   wire.RequestID // the inline tombstone's request; zero: none
	oneTb tomb
	more  map[wire.RequestID]tomb
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
	s.more[req] = tb
}

func (s *tombSet) del(req wire.RequestID) {
	if req == s.one {
		s.one, s.oneTb = wire.RequestID{}, tomb{}
		return
	}
	delete(s.more, req)
	if len(s.more) == 0 {
		s.more = nil
	}
}

func (s *tombSet) len() int {
	n := len(s.more)
	if s.one != (wire.RequestID{}) {
		n++
	}
	return n
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
