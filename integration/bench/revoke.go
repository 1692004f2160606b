package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The revocation workload (sluice only): every agent grants its local
// readers of a name itself, on one shared READ_ONLY ticket; a writer
// makes the leaders ask each agent to yield it, and the agent then turns
// its new readers away with `draining`. How long that takes, from the
// writer's ask to the last agent's first refusal, is how long a site's
// frontends keep letting visitors in after a drain began.
const revokeReadersPerAgent = 16

// revokeSample is one drain of the revocation workload.
type revokeSample struct {
	// AgentMS are, per agent (n1, n2, n3), the writer's ask to the first
	// draining refusal a reader of that agent saw (when its call
	// returned); null when none saw one before the writer's release.
	AgentMS []*float64 `json:"agent_ms"`
	// RevocationMS is the latest of AgentMS, when every agent saw one.
	RevocationMS *float64 `json:"revocation_ms,omitempty"`
	// Drain is the writer's side, as W5 measures it; nil when no reader
	// released before the grant or came back after the release.
	Drain *drainSample `json:"drain,omitempty"`
}

// instants collects instants from many goroutines.
type instants struct {
	mu sync.Mutex
	ts []time.Time
}

func (s *instants) add(t time.Time) {
	s.mu.Lock()
	s.ts = append(s.ts, t)
	s.mu.Unlock()
}

// sorted is a copy of the instants in time order.
func (s *instants) sorted() []time.Time {
	s.mu.Lock()
	ts := slices.Clone(s.ts)
	s.mu.Unlock()
	slices.SortFunc(ts, time.Time.Compare)
	return ts
}

// errSluiceOnly: a workload that only sluice has was given another
// system (runStorage does not do that).
var errSluiceOnly = errors.New("a sluice-only workload")

// runRevoke has revokeReadersPerAgent readers on each agent try+release
// the name without holding it, each through its own agent's socket, and
// a READ_WRITE_PRIORITY writer through n1 drain it b.cfg.drains times
// (as W5's writer: hold writerHold, then drainGap apart).
func runRevoke(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error) {
	c, ok := sys.(*sluiceCluster)
	if !ok {
		return nil, fmt.Errorf("%w: %s", errSluiceOnly, sys.name())
	}
	name := prefix + "/site"
	agents := len(c.clients)
	var readers []locker
	var agentOf []int
	for a, cl := range c.clients {
		for range revokeReadersPerAgent {
			readers = append(readers, sluiceLocker{cl})
			agentOf = append(agentOf, a)
		}
	}
	writer := sluiceLocker{c.clients[0]}

	soft, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	hard, cancelHard := context.WithCancel(ctx)
	defer cancelHard()
	var trace drainTrace
	refusals := make([]instants, agents)
	tallies := make([]tally, len(readers)+1)
	var wg sync.WaitGroup
	for i, l := range readers {
		wg.Go(func() { readLoop(soft, hard, l, name, 0, &tallies[i], &trace, &refusals[agentOf[i]]) })
	}
	drains := writeDrains(ctx, hard, b, writer, name, &tallies[len(readers)])
	stopReaders()
	stopHard := time.AfterFunc(stopGrace, cancelHard)
	defer stopHard.Stop()
	waitOrAbort(hard, &wg, readers)

	r := &runResult{}
	for i := range tallies {
		r.addTally(&tallies[i])
	}
	r.finishErrors()
	grants, releases := trace.sorted()
	perAgent := make([][]time.Time, agents)
	for a := range refusals {
		perAgent[a] = refusals[a].sorted()
	}
	for _, d := range drains {
		s := revokeSample{RevocationMS: new(float64)}
		for a := range agents {
			v := firstRefusal(d, perAgent[a])
			s.AgentMS = append(s.AgentMS, v)
			if v == nil || s.RevocationMS == nil {
				s.RevocationMS = nil
			} else {
				*s.RevocationMS = max(*s.RevocationMS, *v)
			}
		}
		if ds, ok := measureDrain(d, grants, releases); ok {
			s.Drain = &ds
		}
		r.Revocations = append(r.Revocations, s)
	}
	return r, nil
}

// firstRefusal is the writer's ask to the first of the sorted refusals
// at or after it and before the writer's release, in ms; nil for none.
func firstRefusal(d writerDrain, refusals []time.Time) *float64 {
	i, _ := slices.BinarySearchFunc(refusals, d.ask, time.Time.Compare)
	if i == len(refusals) || !refusals[i].Before(d.release) {
		return nil
	}
	v := ms(refusals[i].Sub(d.ask))
	return &v
}
