package daemon_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// A fleet: a few voters and many agents that join them by address, all
// real agents (libp2p on 127.0.0.1, Badger in memory) in this process.
// What an agent costs at idle must not grow with the fleet. By default
// one small fleet runs and only structural bounds are checked; with
// -fleet=50,100,200 each size runs and a table of per-agent figures is
// printed:
//
//	go test ./semaphore/daemon -run TestFleet -fleet=50,100,200 -fleet-idle=30s -v -timeout=60m
var (
	fleetSizes = flag.String("fleet", "", "fleet sizes to measure, comma-separated (e.g. 50,100,200); empty: one small fleet, checked for its bounds only")
	fleetIdle  = flag.Duration("fleet-idle", 0, "idle window measured at each size (default 20s with -fleet, 2s without)")
	fleetCPU   = flag.String("fleet-cpu", "", "write a CPU profile of each size's window and of its drain to this file (suffixed with the size, and .drain)")
	fleetHeap  = flag.String("fleet-heap", "", "write a heap profile at the end of each size's window to this file (suffixed with the size)")
)

const (
	fleetVoters = 3
	// fleetSmall is the size run by default: big enough that a bounded
	// mesh leaves some agents unconnected, small enough for a quick test.
	fleetSmall = 24
	// maxAgentConns bounds a non-voter's connections once the fleet is
	// idle: the voters and a few gossip peers (p2p's bounded mesh).
	maxAgentConns = 16
)

// fleetFigures are one fleet's idle figures, per agent.
type fleetFigures struct {
	n                   int
	ready               time.Duration // from the first start to every agent ready
	connMax, connMean   float64       // non-voters' connections
	voterConns          float64       // the voters' connections, mean
	goroutines          float64
	cpu                 float64 // % of one core
	heapMiB, rssMiB     float64 // live heap after a collection; resident set
	rssGrowMiB          float64 // per agent, over the window
	heapGrowMiB         float64 // per agent, over the window
	framesOut, announce float64 // lock frames sent, announcements received, per second
	drain               fleetDrainFigures
}

func TestFleet(t *testing.T) {
	sizes := []int{fleetSmall}
	idle := 2 * time.Second
	if *fleetSizes != "" {
		sizes = nil
		for s := range strings.SplitSeq(*fleetSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= fleetVoters {
				t.Fatalf("-fleet: %q is not a size above %d", s, fleetVoters)
			}
			sizes = append(sizes, n)
		}
		idle = 20 * time.Second
	}
	if *fleetIdle > 0 {
		idle = *fleetIdle
	}
	var rows []fleetFigures
	for _, n := range sizes {
		t.Run(fmt.Sprintf("agents=%d", n), func(t *testing.T) {
			rows = append(rows, runFleet(t, n, idle))
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fleet idle figures per agent (window %v, %d voters, GOMAXPROCS %d):\n", idle, fleetVoters, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "%6s %8s %9s %10s %10s %11s %9s %8s %8s %9s %9s %10s %10s\n",
		"agents", "ready", "conns max", "conns mean", "voter conn", "goroutines", "cpu %", "heap MiB", "rss MiB", "heap grow", "rss grow", "frames/s", "announce/s")
	for _, r := range rows {
		fmt.Fprintf(&b, "%6d %8s %9.0f %10.1f %10.1f %11.1f %9.3f %8.2f %8.2f %9.3f %9.3f %10.2f %10.2f\n",
			r.n, r.ready.Round(100*time.Millisecond), r.connMax, r.connMean, r.voterConns, r.goroutines, r.cpu,
			r.heapMiB, r.rssMiB, r.heapGrowMiB, r.rssGrowMiB, r.framesOut, r.announce)
	}
	fmt.Fprintf(&b, "a drain of a site every agent serves (a page view held on each, a priority writer through a voter):\n")
	fmt.Fprintf(&b, "%6s %14s %16s %16s %16s %14s %14s %16s\n", "agents", "all told", "granted after", "all readmitted", "doorway restarts", "long doorways", "ticket raises", "voter msgs out")
	for _, r := range rows {
		d := r.drain
		fmt.Fprintf(&b, "%6d %14s %16s %16s %16d %14d %14d %16d\n", r.n, d.told.Round(100*time.Microsecond), d.granted.Round(100*time.Microsecond),
			d.readmitted.Round(100*time.Microsecond), d.counts.restarts, d.counts.long, d.counts.raises, d.counts.voterOut)
	}
	t.Log("\n" + b.String())
}

// runFleet starts n agents, waits until every one is ready on one view,
// measures the idle window and stops them.
func runFleet(t *testing.T, n int, idle time.Duration) fleetFigures {
	agents := make([]*daemon.Agent, n)
	t.Cleanup(func() { stopFleet(t, agents) })
	// Generous: a loaded 2-core machine starts a few hundred agents slowly.
	wait := settle + time.Duration(n)*time.Second
	start := time.Now()
	keys := make([]p2p.PrivKey, fleetVoters)
	var voters []string
	for i := range keys {
		k, err := p2p.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := p2p.PeerIDOf(k)
		if err != nil {
			t.Fatal(err)
		}
		keys[i], voters = k, append(voters, pid.String())
	}
	var voterAddrs []string
	for i := range fleetVoters {
		agents[i] = startFleetAgent(t, daemon.AgentConfig{Name: fmt.Sprintf("v%d", i+1), Key: keys[i],
			InitialMembers: voters, Peers: slices.Clone(voterAddrs)})
		voterAddrs = append(voterAddrs, agents[i].Host().Addrs()...)
	}
	// The others join by the voters' addresses alone, a few at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := fleetVoters; i < n; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			agents[i] = startFleetAgent(t, daemon.AgentConfig{Name: fmt.Sprintf("a%d", i+1), Join: true, Peers: voterAddrs})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitFleetReady(t, agents, wait)
	ready := time.Since(start)

	// Let the start's traffic (announcements, first dials) die down, and
	// the connections of the start that the bounded mesh does not keep
	// close.
	settleFleet(t, agents, wait)
	waitBounded(t, agents, wait)

	if *fleetHeap != "" {
		writeHeapProfile(t, fmt.Sprintf("%s.%d.before", *fleetHeap, n))
	}
	before := sampleFleet(agents)
	stopProfile := startFleetProfile(t, fmt.Sprintf("%d", n))
	time.Sleep(idle) // the measured window: nothing is waited for, the fleet is left alone
	stopProfile()
	after := sampleFleet(agents)
	if *fleetHeap != "" {
		writeHeapProfile(t, fmt.Sprintf("%s.%d", *fleetHeap, n))
	}

	f := fleetFigures{n: n, ready: ready}
	secs := idle.Seconds()
	var sum float64
	nonVoters := 0
	for i, a := range agents {
		in, out := a.Host().Conns()
		c := float64(in + out)
		if i < fleetVoters {
			f.voterConns += c / fleetVoters
			continue
		}
		nonVoters++
		sum += c
		f.connMax = max(f.connMax, c)
	}
	f.connMean = sum / float64(nonVoters)
	f.goroutines = float64(after.goroutines) / float64(n)
	f.cpu = 100 * (after.cpu - before.cpu).Seconds() / secs / float64(n)
	f.heapMiB = float64(after.heap) / float64(n) / (1 << 20)
	f.rssMiB = float64(after.rss) / float64(n) / (1 << 20)
	f.rssGrowMiB = (float64(after.rss) - float64(before.rss)) / float64(n) / (1 << 20)
	f.heapGrowMiB = (float64(after.heap) - float64(before.heap)) / float64(n) / (1 << 20)
	f.framesOut = float64(after.framesOut-before.framesOut) / secs / float64(n)
	f.announce = float64(after.announcements-before.announcements) / secs / float64(n)
	t.Logf("%d agents: ready after %v; non-voters' connections max %.0f mean %.1f; per agent: %.1f goroutines, %.3f%% of a core, heap %.2f MiB, RSS %.2f MiB (%+.3f over the window), %.2f frames/s, %.2f announcements/s",
		n, ready.Round(time.Millisecond), f.connMax, f.connMean, f.goroutines, f.cpu, f.heapMiB, f.rssMiB, f.rssGrowMiB, f.framesOut, f.announce)
	counted := fleetCounts(t, agents)
	stopProfile = startFleetProfile(t, fmt.Sprintf("%d.drain", n))
	f.drain = fleetDrain(t, agents, wait)
	stopProfile()
	f.drain.counts = fleetCounts(t, agents).minus(counted)
	t.Logf("%d agents: the voters' messages to other agents during the drain, by kind: %s", n, f.drain.counts.kinds())
	t.Logf("%d agents: a drain reached every agent's page view in %v; the writer was granted %v after the last page view ended; every agent granted a page view again within %v of its release; %d doorways started again, %d of them for lasting too long; %d numbers raised; %d page views went through the bakery by themselves; the voters sent %d messages",
		n, f.drain.told, f.drain.granted, f.drain.readmitted, f.drain.counts.restarts, f.drain.counts.long, f.drain.counts.raises, f.drain.counts.bypasses, f.drain.counts.voterOut)
	return f
}

// fleetDrainFigures: how a drain of a site that the whole fleet serves
// goes. told: from the writer's ask until the last agent told its page
// view that the site drains; granted: from the end of the last page view
// to the writer's grant; readmitted: from the writer's release until the
// last agent granted a new page view.
type fleetDrainFigures struct {
	told, granted, readmitted time.Duration
	// counts: what the fleet's counters moved by during the drain.
	counts fleetCounters
}

// fleetDrain drains /site while every agent holds a page view on it, the
// way a site's maintenance drain meets its frontends: a priority writer
// asks through the first voter; every agent must then tell its page view
// (the "draining" event a frontend shows its maintenance page on) and
// refuse a new one with draining; the writer must not be granted while a
// page view runs, and must be once they end; after its release every
// agent must grant page views again.
func fleetDrain(t *testing.T, agents []*daemon.Agent, wait time.Duration) fleetDrainFigures {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const site = "/site"
	// Leases last the drain's whole bound: a loaded machine takes long to
	// hand a few hundred agents their page views, and one that ran out
	// before the drain began would never hear of it.
	pageView := daemon.Request{Name: site, Mode: semaphore.ReadOnly, Timeout: wait, Duration: wait}
	views := make([]daemon.Lease, len(agents))
	told := make([]time.Time, len(agents))
	last := make([]string, len(agents)) // the last event before the watch ended
	var watching sync.WaitGroup
	each(t, agents, 16, func(i int, a *daemon.Agent) error {
		l, err := a.Node().Acquire(ctx, pageView)
		if err != nil {
			return err
		}
		views[i] = l
		events, err := a.Node().Watch(ctx, l.ID)
		if err != nil {
			return err
		}
		watching.Go(func() {
			for e := range events {
				last[i] = e.Kind
				if e.Kind == "granted" && !e.Yields {
					last[i] = "granted on a plain ticket" // not on the agent's share
				}
				if e.Kind == "draining" {
					told[i] = time.Now()
					return
				}
			}
		})
		return nil
	})

	type outcome struct {
		l   daemon.Lease
		err error
		at  time.Time
	}
	granted := make(chan outcome, 1)
	ask := time.Now()
	go func() {
		l, err := agents[0].Node().Acquire(ctx, daemon.Request{Name: site, Mode: semaphore.ReadWritePriority, Timeout: wait, Duration: wait})
		granted <- outcome{l, err, time.Now()}
	}()
	watching.Wait()
	var f fleetDrainFigures
	for i, at := range told {
		if at.IsZero() {
			t.Fatalf("agent %d never told its page view that the site drains (its watch ended after %q)", i+1, last[i])
		}
		f.told = max(f.told, at.Sub(ask))
	}
	try := pageView
	try.Try, try.Timeout = true, 0
	each(t, agents, 16, func(i int, a *daemon.Agent) error {
		if l, err := a.Node().Acquire(ctx, try); !errors.Is(err, semaphore.ErrDraining) {
			return fmt.Errorf("agent %d: a new page view during the drain: %+v, %v; want draining", i+1, l, err)
		}
		return nil
	})
	select {
	case o := <-granted:
		t.Fatalf("the writer was granted (%v) while every agent held a page view", o.err)
	default:
	}

	ends := make([]time.Time, len(agents))
	each(t, agents, len(agents), func(i int, a *daemon.Agent) error {
		err := a.Node().Release(ctx, views[i].ID, views[i].Name)
		ends[i] = time.Now()
		return err
	})
	var w outcome
	select {
	case w = <-granted:
	case <-ctx.Done():
		t.Fatalf("the writer was not granted within %v of the page views' end", wait)
	}
	if w.err != nil {
		t.Fatalf("the drain's writer: %v", w.err)
	}
	f.granted = w.at.Sub(slices.MaxFunc(ends, time.Time.Compare))
	if err := agents[0].Node().Release(ctx, w.l.ID, w.l.Name); err != nil {
		t.Fatalf("the writer's release: %v", err)
	}
	released := time.Now()
	readmitted := make([]time.Duration, len(agents))
	each(t, agents, len(agents), func(i int, a *daemon.Agent) error {
		l, err := a.Node().Acquire(ctx, pageView)
		if err != nil {
			return fmt.Errorf("agent %d: a page view after the drain: %w", i+1, err)
		}
		readmitted[i] = time.Since(released)
		return a.Node().Release(ctx, l.ID, l.Name)
	})
	f.readmitted = slices.Max(readmitted)
	return f
}

// startFleetProfile starts a CPU profile into -fleet-cpu's file, suffixed
// with suffix, when the flag is set; the function it returns stops it.
func startFleetProfile(t *testing.T, suffix string) func() {
	t.Helper()
	if *fleetCPU == "" {
		return func() {}
	}
	f, err := os.Create(*fleetCPU + "." + suffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Errorf("CPU profile %s: %v", f.Name(), err)
		}
	}
}

// fleetCounters are sums over a fleet: its doorway restarts, those of
// them for lasting too long, and the messages its voters sent (reports
// to every waiting master among them: what grows with the fleet).
type fleetCounters struct {
	restarts, long, voterOut uint64
	// bypasses: page views that went through the bakery by themselves
	// (their agent's share could not be had at once).
	bypasses uint64
	// raises: numbers proposed again above a taken one (the herd of a
	// crowd's doorways on one name).
	raises uint64
	// voterKinds: the voters' messages to other nodes, by kind.
	voterKinds map[string]float64
}

func (c fleetCounters) minus(o fleetCounters) fleetCounters {
	d := fleetCounters{c.restarts - o.restarts, c.long - o.long, c.voterOut - o.voterOut, c.bypasses - o.bypasses, c.raises - o.raises, map[string]float64{}}
	for k, v := range c.voterKinds {
		if v -= o.voterKinds[k]; v > 0 {
			d.voterKinds[k] = v
		}
	}
	return d
}

// kinds lists the kinds of the voters' messages, most first.
func (c fleetCounters) kinds() string {
	keys := slices.Collect(maps.Keys(c.voterKinds))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(c.voterKinds[b], c.voterKinds[a]) })
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.0f", k, c.voterKinds[k]))
	}
	return strings.Join(out, ", ")
}

// fleetCounts reads the fleet's counters.
func fleetCounts(t *testing.T, agents []*daemon.Agent) fleetCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := fleetCounters{voterKinds: map[string]float64{}}
	for i, a := range agents {
		st, err := a.Node().Status(ctx)
		if err != nil {
			t.Fatalf("agent %d's status: %v", i+1, err)
		}
		c.restarts += st.Core.DoorwayRestarts
		c.long += st.Core.LongDoorways
		c.raises += st.Core.TicketRaises
		c.bypasses += st.Core.ShareBypasses
		if i >= fleetVoters {
			continue
		}
		c.voterOut += st.Stats.MessagesOut
		families, err := a.Node().Registry().Gather()
		if err != nil {
			t.Fatalf("agent %d's metrics: %v", i+1, err)
		}
		for _, f := range families {
			if f.GetName() != "sluice_peer_messages_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						c.voterKinds[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return c
}

// each runs fn for every agent, atOnce of them at a time, and fails the
// test with their errors.
func each(t *testing.T, agents []*daemon.Agent, atOnce int, fn func(int, *daemon.Agent) error) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, atOnce)
	errs := make([]error, len(agents))
	for i, a := range agents {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(i, a)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func startFleetAgent(t *testing.T, cfg daemon.AgentConfig) *daemon.Agent {
	cfg.InMemory = true
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, cfg)
	if err != nil {
		t.Errorf("start %s: %v", cfg.Name, err)
		return nil
	}
	return a
}

// stopFleet stops the agents, several at a time.
func stopFleet(t *testing.T, agents []*daemon.Agent) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, a := range agents {
		if a == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), settle)
			defer cancel()
			if err := a.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	wg.Wait()
}

// waitFleetReady waits until every agent is ready on one epoch whose
// leaders they all name.
func waitFleetReady(t *testing.T, agents []*daemon.Agent, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var epoch uint64
	for {
		agreed := true
		for _, a := range agents {
			s, err := a.Node().WaitStatus(ctx, func(s api.Status) bool { return s.Ready && s.View.Epoch >= epoch })
			if err != nil {
				t.Fatalf("agent %s not ready on epoch %d or later after %v: %v; %s", s.Name, epoch, wait, err, s.Reason)
			}
			if s.View.Epoch != epoch {
				epoch, agreed = s.View.Epoch, false
			}
		}
		if agreed {
			return
		}
	}
}

// settleFleet waits until the mesh is done with the start: no agent
// learns of a new member or dials between two looks a second apart.
func settleFleet(t *testing.T, agents []*daemon.Agent, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	look := func() (out []uint64) {
		for _, a := range agents {
			st := a.Host().Stats()
			_, known := a.Host().Reach()
			out = append(out, st.Dials, uint64(known))
		}
		return out
	}
	last := look()
	for {
		time.Sleep(time.Second) // polling a condition no agent signals
		now := look()
		if slices.Equal(now, last) {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("the mesh still dials or learns after %v; measuring anyway", wait)
			return
		}
		last = now
	}
}

// waitBounded waits until no agent but the voters has more than
// maxAgentConns connections: the voters and a few gossip peers. Gossip
// peers picked while the members were still being learned stay connected
// a while after, so the bound is waited for, with a deadline.
func waitBounded(t *testing.T, agents []*daemon.Agent, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		worst, who := 0, ""
		var debug string
		for i, a := range agents[fleetVoters:] {
			if in, out := a.Host().Conns(); in+out > worst {
				worst, who = in+out, fmt.Sprintf("a%d (%d in, %d out)", i+fleetVoters+1, in, out)
				debug = a.Host().MeshDebug()
			}
		}
		if worst <= maxAgentConns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, agent %s still has %d connections, over %d: the mesh is not bounded: %s", wait, who, worst, maxAgentConns, debug)
		}
		time.Sleep(500 * time.Millisecond) // polling a condition no agent signals
	}
}

type fleetSample struct {
	cpu                      time.Duration
	goroutines               int
	heap, rss                uint64
	framesOut, announcements uint64
}

func sampleFleet(agents []*daemon.Agent) fleetSample {
	var s fleetSample
	for _, a := range agents {
		st := a.Host().Stats()
		s.framesOut += st.FramesOut
		s.announcements += st.Announcements
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.goroutines = runtime.NumGoroutine()
	// The live heap, after the CPU time was read: the collection's own
	// cost is no agent's.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapAlloc
	s.rss = vmRSS()
	return s
}

func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
}

// vmRSS is the process's resident set in bytes (0 where /proc is not).
func vmRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
