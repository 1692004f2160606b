package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// churnClients take the names between them.
	churnClients = 32
	// intervalLength is the span of each rate the churn reports.
	intervalLength = 5 * time.Second
)

// churnResult is one churn: how far it got, its rate over time, and the
// servers' memory after it.
type churnResult struct {
	Names   int     `json:"names"` // asked for
	Done    int     `json:"done"`  // locked and released
	Seconds float64 `json:"seconds"`
	// Intervals are the rates (names/s) of the successive intervalLength
	// spans; a last, shorter span is left out of the flatness check.
	Intervals []churnInterval `json:"intervals"`
	// Stalled: no name was done for the stall limit; the churn was
	// stopped then. Capped: it ran out of its time cap.
	Stalled bool `json:"stalled"`
	Capped  bool `json:"capped"`
	// Abandoned are the calls in flight when the churn was stopped.
	Abandoned int         `json:"abandoned"`
	RSS       []memberRSS `json:"rss_after"`
}

type churnInterval struct {
	EndSeconds float64 `json:"end_s"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"rate"`
}

// flat: every full interval is at least flatShare of their median rate.
const flatShare = 0.75

// flat reports whether the rate held over the full intervals; known is
// false with fewer than two of them.
func (c *churnResult) flat() (flat, known bool) {
	var rates []float64
	for _, iv := range c.Intervals {
		if iv.Seconds >= intervalLength.Seconds()-0.01 {
			rates = append(rates, iv.Rate)
		}
	}
	if len(rates) < 2 {
		return false, false
	}
	m := median(rates)
	for _, r := range rates {
		if r < flatShare*m {
			return false, true
		}
	}
	return true, true
}

func runChurn(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ls, err := sys.lockers(lctx, churnClients)
	if err != nil {
		return nil, fmt.Errorf("%s clients: %w", sys.name(), err)
	}
	defer closeAll(ls)

	// stop ends the churn: all names done, a stall, the cap, or ctx.
	stop, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	hard, cancelHard := context.WithCancel(ctx)
	defer cancelHard()
	var next, done atomic.Int64
	tallies := make([]tally, len(ls))
	abandoned := make([]int, len(ls))
	var wg sync.WaitGroup
	start := time.Now()
	for i, l := range ls {
		wg.Go(func() {
			t := &tallies[i]
			for stop.Err() == nil {
				n := next.Add(1) - 1
				if n >= int64(b.cfg.names) {
					return
				}
				t.attempts++
				name := fmt.Sprintf("%s/%07d", prefix, n)
				rel, err := l.lock(stop, name)
				if err == nil {
					err = rel(stop)
				}
				switch {
				case err == nil:
					done.Add(1)
				case stop.Err() != nil:
					abandoned[i]++ // cut off by the stop, not the system's failure
				default:
					t.fail(err)
					pause(stop, errorPause)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	res := &churnResult{Names: b.cfg.names}
	watchChurn(ctx, b, start, &done, finished, res)
	stopChurn()
	if res.Stalled {
		logf("churn on %s stalled: no name done for %s, %d of %d done", sys.name(), b.cfg.churnStall, done.Load(), b.cfg.names)
	}
	stopHard := time.AfterFunc(stopGrace, cancelHard)
	defer stopHard.Stop()
	waitOrAbort(hard, &wg, ls)

	res.Seconds = time.Since(start).Seconds()
	res.Done = int(done.Load())
	res.RSS = sys.memory()
	r := &runResult{Cycles: res.Done, Rate: float64(res.Done) / res.Seconds, Churn: res}
	for i, t := range tallies {
		r.Attempts += t.attempts - abandoned[i]
		r.addErrors(t.errors, t.samples)
		res.Abandoned += abandoned[i]
	}
	r.finishErrors()
	return r, nil
}

// watchChurn samples the progress every second until the workers are
// finished, recording each interval's rate; it returns early, marking
// res, when nothing was done for the stall limit or the cap is reached.
func watchChurn(ctx context.Context, b *bench, start time.Time, done *atomic.Int64, finished <-chan struct{}, res *churnResult) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastDone, lastProgress := int64(0), start
	ivStart, ivDone := start, int64(0)
	closeInterval := func(now time.Time, d int64) {
		if secs := now.Sub(ivStart).Seconds(); secs > 0 {
			res.Intervals = append(res.Intervals, churnInterval{EndSeconds: now.Sub(start).Seconds(), Seconds: secs,
				Rate: float64(d-ivDone) / secs})
		}
		ivStart, ivDone = now, d
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-finished:
			closeInterval(time.Now(), done.Load())
			return
		case now := <-tick.C:
			d := done.Load()
			if d != lastDone {
				lastDone, lastProgress = d, now
			}
			if now.Sub(ivStart) >= intervalLength {
				closeInterval(now, d)
			}
			switch {
			case now.Sub(lastProgress) >= b.cfg.churnStall:
				res.Stalled = true
				closeInterval(now, d)
				return
			case now.Sub(start) >= b.cfg.churnCap:
				res.Capped = true
				closeInterval(now, d)
				return
			}
		}
	}
}
