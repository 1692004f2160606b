package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The drain workload (W5): readers keep cycling on a site's name while a
// writer drains it now and then.
const (
	drainReaders = 32
	readerHold   = time.Millisecond
	writerHold   = 50 * time.Millisecond
	// drainGap separates drains, so that every drain starts among readers
	// in full swing.
	drainGap = 150 * time.Millisecond
)

// drainSample is one drain. Reader instants are taken after their calls
// return: a grant when Acquire returned, a release when Release did.
type drainSample struct {
	// WriterWaitMS: from the writer's ask to its grant.
	WriterWaitMS float64 `json:"writer_wait_ms"`
	// AfterLastReleaseMS: the writer's grant minus the latest reader
	// release before it: what the drain adds once the readers are out.
	AfterLastReleaseMS float64 `json:"after_last_release_ms"`
	// ReadmitMS: the first reader grant after the writer's release call
	// began, minus that instant: how soon readers are back.
	ReadmitMS float64 `json:"readmit_ms"`
}

// drainTrace collects the readers' grant and release instants.
type drainTrace struct {
	mu       sync.Mutex
	grants   []time.Time
	releases []time.Time
}

func (t *drainTrace) add(grant, release time.Time) {
	t.mu.Lock()
	t.grants = append(t.grants, grant)
	t.releases = append(t.releases, release)
	t.mu.Unlock()
}

// writerDrain is what the writer saw of one drain.
type writerDrain struct{ ask, grant, release time.Time }

func runDrain(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ls, err := sys.lockers(lctx, drainReaders+1)
	if err != nil {
		return nil, fmt.Errorf("%s clients: %w", sys.name(), err)
	}
	defer closeAll(ls)
	readers, writer := ls[:drainReaders], ls[drainReaders]
	name := prefix + "/site"

	soft, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	hard, cancelHard := context.WithCancel(ctx)
	defer cancelHard()
	var trace drainTrace
	tallies := make([]tally, drainReaders+1)
	var wg sync.WaitGroup
	for i, l := range readers {
		wg.Go(func() { readLoop(soft, hard, l, name, readerHold, &tallies[i], &trace, nil) })
	}

	drains := writeDrains(ctx, hard, b, writer, name, &tallies[drainReaders])
	stopReaders()
	stopHard := time.AfterFunc(stopGrace, cancelHard)
	defer stopHard.Stop()
	waitOrAbort(hard, &wg, ls)

	r := &runResult{}
	for i := range tallies {
		r.addTally(&tallies[i])
	}
	r.finishErrors()
	r.Drains = drainSamples(drains, &trace)
	return r, nil
}

// writeDrains has writer drain name b.cfg.drains times after the
// warm-up: ask, hold writerHold, release, wait drainGap. A failed ask is
// counted in wt and gives no drain.
func writeDrains(ctx, hard context.Context, b *bench, writer locker, name string, wt *tally) []writerDrain {
	var drains []writerDrain
	pause(ctx, b.cfg.warmup)
	for range b.cfg.drains {
		if ctx.Err() != nil {
			break
		}
		wt.attempts++
		ask := time.Now()
		// etcd's RWMutex takes no context: a writer stuck past opTimeout
		// is aborted (its client closed), as sluice's times out.
		abort := time.AfterFunc(opTimeout, writer.abort)
		rel, err := writer.write(hard, name)
		abort.Stop()
		if err != nil {
			wt.fail(fmt.Errorf("writer: %w", err))
			pause(ctx, drainGap)
			continue
		}
		grant := time.Now()
		pause(ctx, writerHold)
		released := time.Now()
		if err := rel(hard); err != nil {
			wt.fail(fmt.Errorf("writer release: %w", err))
		}
		drains = append(drains, writerDrain{ask: ask, grant: grant, release: released})
		pause(ctx, drainGap)
	}
	return drains
}

// readLoop is one reader: take the name, hold it for hold, give it
// back; a refused try asks again after retryPause. Each cycle goes into
// trace, and each draining refusal into refusals when it is not nil. It
// stops taking when soft ends; hard bounds the calls.
func readLoop(soft, hard context.Context, l locker, name string, hold time.Duration, t *tally, trace *drainTrace, refusals *instants) {
	for soft.Err() == nil {
		t.attempts++
		rel, err := l.read(hard, name)
		if err != nil {
			if r := refusal(err); r != "" {
				if r == "draining" && refusals != nil {
					refusals.add(time.Now())
				}
				t.refuse(r)
				pause(soft, retryPause)
				continue
			}
			t.fail(err)
			pause(soft, errorPause)
			continue
		}
		granted := time.Now()
		if hold > 0 {
			pause(hard, hold)
		}
		if err := rel(hard); err != nil {
			t.fail(fmt.Errorf("release: %w", err))
			continue
		}
		trace.add(granted, time.Now())
		t.cycles++
	}
}

// drainSamples measures each drain against the readers' trace. A drain
// without a reader release before its grant, or without a reader grant
// after its release, gives no sample (it had no reader to wait for or
// to let back in).
func drainSamples(drains []writerDrain, trace *drainTrace) []drainSample {
	grants, releases := trace.sorted()
	var out []drainSample
	for _, d := range drains {
		if s, ok := measureDrain(d, grants, releases); ok {
			out = append(out, s)
		}
	}
	return out
}

// sorted are copies of the trace's grants and releases, each in time
// order.
func (t *drainTrace) sorted() (grants, releases []time.Time) {
	t.mu.Lock()
	grants, releases = slices.Clone(t.grants), slices.Clone(t.releases)
	t.mu.Unlock()
	slices.SortFunc(grants, time.Time.Compare)
	slices.SortFunc(releases, time.Time.Compare)
	return grants, releases
}

// measureDrain measures drain d against the readers' sorted grants and
// releases; ok is false when no reader released before its grant or
// none was granted after its release.
func measureDrain(d writerDrain, grants, releases []time.Time) (_ drainSample, ok bool) {
	// releases[i-1] is the last release before the grant.
	i, _ := slices.BinarySearchFunc(releases, d.grant, time.Time.Compare)
	// grants[j] is the first grant at or after the release began.
	j, _ := slices.BinarySearchFunc(grants, d.release, time.Time.Compare)
	if i == 0 || j == len(grants) {
		return drainSample{}, false
	}
	return drainSample{WriterWaitMS: ms(d.grant.Sub(d.ask)),
		AfterLastReleaseMS: ms(d.grant.Sub(releases[i-1])), ReadmitMS: ms(grants[j].Sub(d.release))}, true
}
