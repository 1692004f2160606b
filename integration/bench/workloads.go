package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// release gives a lock back.
type release func(context.Context) error

// locker is one benchmark client of a system.
type locker interface {
	// lock takes name exclusively, waiting for it.
	lock(ctx context.Context, name string) (release, error)
	// read takes name shared: sluice's is a try, answered at once and
	// maybe refused (timedout, draining); etcd's waits.
	read(ctx context.Context, name string) (release, error)
	// write takes name as a draining writer: it waits for the readers in
	// and turns later ones away (or makes them wait) meanwhile.
	write(ctx context.Context, name string) (release, error)
	// abort ends the calls in flight that no context reaches.
	abort()
	close() error
}

// system is a running cluster of one of the compared systems.
type system interface {
	name() string
	// lockers makes n clients spread round-robin over the members; ctx
	// bounds everything they do.
	lockers(ctx context.Context, n int) ([]locker, error)
	memory() []memberRSS
	stop()
}

// memberRSS is one server's resident set.
type memberRSS struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Err   string `json:"error,omitempty"`
}

func rssOf(procs []*process) []memberRSS {
	var out []memberRSS
	for _, p := range procs {
		m := memberRSS{Name: p.name}
		b, err := p.rssBytes()
		if err != nil {
			m.Err = err.Error()
		}
		m.Bytes = b
		out = append(out, m)
	}
	return out
}

// stopGrace is how long the calls in flight at a window's end may take
// to finish before they are cancelled (and counted as errors).
const stopGrace = 10 * time.Second

// retryPause is how long a refused reader waits before it asks again,
// and a client after an error (so a failing system is not spun on).
const (
	retryPause = time.Millisecond
	errorPause = 10 * time.Millisecond
)

// refusal names a try's refusal ("timedout", "draining"), or "" when
// err is none: refusals are answers, not errors.
func refusal(err error) string {
	switch {
	case errors.Is(err, semaphore.ErrDraining):
		return "draining"
	case errors.Is(err, semaphore.ErrTimedOut):
		return "timedout"
	}
	return ""
}

// errorKind is what an error is counted as: the sluice API's code, a
// cancellation at the run's end, or the error's own text (etcd's).
func errorKind(err error) string {
	var ae *client.APIError
	switch {
	case errors.As(err, &ae) && ae.Code != "":
		return ae.Code
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// tally counts what one client did during a run; each client has its
// own, merged at the end, so the loops share no lock.
type tally struct {
	cycles   int             // completed in the window
	acquire  []time.Duration // of the grants in the window
	attempts int             // over the whole run, warm-up included
	errors   map[string]int  // likewise
	samples  []string        // a few error messages
	refused  map[string]int  // tries refused, by reason
}

func (t *tally) fail(err error) {
	if t.errors == nil {
		t.errors = map[string]int{}
	}
	t.errors[errorKind(err)]++
	if len(t.samples) < 3 {
		t.samples = append(t.samples, err.Error())
	}
}

func (t *tally) refuse(reason string) {
	if t.refused == nil {
		t.refused = map[string]int{}
	}
	t.refused[reason]++
}

// window is the part of a run that counts: after the warm-up.
type window struct{ start, end time.Time }

func (w window) has(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// cycleOp is one client's acquire for the loop workloads.
type cycleOp func(ctx context.Context, l locker, i int) (release, error)

// runCycles has every locker repeat acquire then release until the
// window ends; a cycle counts in the window when its release returns in
// it, its acquire latency when its grant does. With tries, op is a try:
// its refusals are counted apart and asked again after retryPause.
func runCycles(ctx context.Context, ls []locker, warmup, length time.Duration, op cycleOp, tries bool) (window, []tally) {
	now := time.Now()
	win := window{start: now.Add(warmup), end: now.Add(warmup + length)}
	soft, cancelSoft := context.WithDeadline(ctx, win.end)
	defer cancelSoft()
	hard, cancelHard := context.WithDeadline(ctx, win.end.Add(stopGrace))
	defer cancelHard()
	tallies := make([]tally, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			t := &tallies[i]
			for soft.Err() == nil {
				t.attempts++
				start := time.Now()
				rel, err := op(hard, l, i)
				granted := time.Now()
				if err != nil {
					if r := refusal(err); r != "" && tries {
						t.refuse(r)
						pause(soft, retryPause)
						continue
					}
					t.fail(err)
					pause(soft, errorPause)
					continue
				}
				if err := rel(hard); err != nil {
					t.fail(fmt.Errorf("release: %w", err))
					continue
				}
				if win.has(granted) {
					t.acquire = append(t.acquire, granted.Sub(start))
				}
				if win.has(time.Now()) {
					t.cycles++
				}
			}
		})
	}
	waitOrAbort(hard, &wg, ls)
	return win, tallies
}

// waitOrAbort waits for the clients' loops; when hard ends first, it
// aborts the lockers so that calls no context reaches end too.
func waitOrAbort(hard context.Context, wg *sync.WaitGroup, ls []locker) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-hard.Done():
		for _, l := range ls {
			l.abort()
		}
		<-done
	}
}

// pause sleeps d, or less when ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// workload is one of the measured workloads.
type workload struct {
	id    string // W1 ... W5, revoke, middleware, churn
	title string // for the table's legend
	// systems are the systems it runs on: sluice and etcd for the
	// comparisons, redis too for W4 (the read path's reference), sluice alone
	// for what only sluice has (revocation, the HTTP middleware).
	systems []string
	// nested: it runs on sluice agents with --nested-names, a cluster of
	// their own (W4n); every other workload runs on flat names.
	nested bool
	// run measures on sys; prefix keeps its names apart from every
	// other run's.
	run func(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error)
}

// runsOn reports whether w runs on the system called sys.
func (w workload) runsOn(sys string) bool { return slices.Contains(w.systems, sys) }

// The systems' names, and the sets of them workloads run on.
var (
	allSystems = []string{"sluice", "etcd", "redis"}
	compared   = []string{"sluice", "etcd"}
	sluiceOnly = []string{"sluice"}
)

// loopWorkload is a workload of acquire/release loops with clients
// clients; op gives client i's acquire on the system called sys, a try
// when tries.
func loopWorkload(id, title string, clients int, tries bool, op func(sys, prefix string) cycleOp) workload {
	return workload{id: id, title: title, systems: compared,
		run: func(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error) {
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ls, err := sys.lockers(lctx, clients)
			if err != nil {
				return nil, fmt.Errorf("%s clients: %w", sys.name(), err)
			}
			before := agentCountersOf(ctx, sys)
			win, tallies := runCycles(ctx, ls, b.cfg.warmup, b.cfg.window, op(sys.name(), prefix), tries)
			closeAll(ls)
			res := summarize(win, tallies)
			res.PerCycle = perCycle(before, agentCountersOf(ctx, sys), res.Attempts-res.errorCount())
			return res, nil
		}}
}

// closeAll closes the lockers; a failure to clean up is logged, not
// counted: the measurement is over.
func closeAll(ls []locker) {
	for _, l := range ls {
		if err := l.close(); err != nil {
			logf("closing a client: %v", err)
		}
	}
}

// lockOwn is client i's exclusive lock of a name of its own.
func lockOwn(p string) cycleOp {
	return func(ctx context.Context, l locker, i int) (release, error) {
		return l.lock(ctx, fmt.Sprintf("%s/%02d", p, i))
	}
}

// nestedName is a three-level URL name of its own for the run of prefix:
// "/bench/memory/r1/W4n" is "https://bench-memory-r1-w4n.example/section/page",
// whose levels are the site, the section and the page.
func nestedName(prefix string) string {
	site := strings.ToLower(strings.ReplaceAll(strings.Trim(prefix, "/"), "/", "-"))
	return "https://" + site + ".example/section/page"
}

// workloads are the measured workloads, in the order they run (the
// churn last: see runStorage).
func workloads() []workload {
	w4 := loopWorkload("W4", "64 clients, READ_ONLY try+release of one name (etcd: RWMutex RLock, which waits; "+
		"redis: go-redsync Mutex lock+unlock, a key per client, 64 keys, in the memory mode only: "+
		"the read path's reference \"Redis with go-redsync, 64 clients on 64 keys\")", 64, true, func(sys, p string) cycleOp {
		if sys == "redis" {
			return lockOwn(p)
		}
		return func(ctx context.Context, l locker, _ int) (release, error) { return l.read(ctx, p+"/one") }
	})
	w4.systems = allSystems
	// W4n is W4 on agents of nested names: one name as W4's, three levels
	// deep, so that every grant goes through the agent's shares of the
	// site and the section as well as the page's.
	w4n := loopWorkload("W4n", "W4 with nested names (sluice only: etcd and redis have none): 64 clients, READ_ONLY "+
		"try+release of one three-level URL name (https://SITE.example/section/page) on agents with --nested-names, "+
		"which hold intent-shared tickets on the site and the section besides the page's READ_ONLY; the ratios are to "+
		"W4's sluice figures in the same storage (flat names, agents without --nested-names)", 64, true, func(_, p string) cycleOp {
		name := nestedName(p)
		return func(ctx context.Context, l locker, _ int) (release, error) { return l.read(ctx, name) }
	})
	w4n.systems, w4n.nested = sluiceOnly, true
	return []workload{
		loopWorkload("W1", "1 client, exclusive lock+unlock of one name", 1, false, func(_, p string) cycleOp {
			return func(ctx context.Context, l locker, _ int) (release, error) { return l.lock(ctx, p+"/one") }
		}),
		loopWorkload("W2", "16 clients, exclusive lock+unlock of one name", 16, false, func(_, p string) cycleOp {
			return func(ctx context.Context, l locker, _ int) (release, error) { return l.lock(ctx, p+"/one") }
		}),
		loopWorkload("W3", "64 clients, exclusive lock+unlock, a name each", 64, false, func(_, p string) cycleOp { return lockOwn(p) }),
		w4,
		w4n,
		{id: "W5", title: fmt.Sprintf("drain: %d readers cycling (%s holds), a READ_WRITE_PRIORITY writer holding %s",
			drainReaders, readerHold, writerHold), systems: compared, run: runDrain},
		{id: "revoke", title: fmt.Sprintf("revocation: %d readers per agent doing READ_ONLY try+release of one name through "+
			"their agent; a READ_WRITE_PRIORITY writer through n1 holding %s; from the writer's ask to the first draining "+
			"refusal at each agent, the latest of the agents", revokeReadersPerAgent, writerHold), systems: sluiceOnly, run: runRevoke},
		{id: "middleware", title: fmt.Sprintf("%d HTTP clients on an in-process loopback server with a trivial handler, "+
			"plain, behind client.Middleware (page views on the READ_ONLY lease it lends them, a try through n1) and through sluice proxy; "+
			"then %d clients, plain and behind the middleware; one window each", middlewareClients, crowdClients),
			systems: sluiceOnly, run: runMiddleware},
		{id: "churn", title: fmt.Sprintf("%d clients, exclusive lock+release of distinct names", churnClients), systems: compared, run: runChurn},
	}
}

// workloadByID is the workload called id; it must be one.
func workloadByID(id string) workload {
	for _, w := range workloads() {
		if w.id == id {
			return w
		}
	}
	panic("bench: no workload " + id)
}

// agentCountersOf reads sys's agent counters when it is sluice (nil
// otherwise, or when they could not be read: the run goes on without).
func agentCountersOf(ctx context.Context, sys system) map[string]float64 {
	c, ok := sys.(*sluiceCluster)
	if !ok {
		return nil
	}
	m, err := c.counters(ctx)
	if err != nil {
		logf("reading the agents' counters: %v", err)
		return nil
	}
	return m
}

// perCycle is each counter's growth from before to after over cycles
// (warm-up and window both: the counters cover the whole run); nil
// without both readings or cycles.
func perCycle(before, after map[string]float64, cycles int) map[string]float64 {
	if before == nil || after == nil || cycles <= 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		out[k] = (v - before[k]) / float64(cycles)
	}
	return out
}
