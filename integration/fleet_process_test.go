package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A fleet of real `sluice agent` processes: three voters (the initial
// members) and the others joining them by address (--join --peers), each
// with its own data directory (Badger on disk), API socket and cluster
// secret, all on 127.0.0.1. What a joined agent costs at idle is read
// from /proc (resident set, CPU time) and from its /metrics (goroutines,
// mesh connections): the figures semaphore/daemon's TestFleet can only
// divide out of one process's totals. By default one small fleet runs
// and only the structural bounds are checked; with -process-fleet each
// size runs in turn and a table is printed, and the acceptance bounds
// (RSS, CPU) are checked too:
//
//	go test ./integration -run TestProcessFleet -count=1 -v -process-fleet=50,100,200 -process-fleet-idle=3m -timeout=90m
var (
	processFleetSizes = flag.String("process-fleet", "", "fleets of agent processes to measure, comma-separated sizes (e.g. 50,100,200); empty: one small fleet, checked for its bounds only")
	processFleetIdle  = flag.Duration("process-fleet-idle", 0, "the measured idle window at each size (default 2m with -process-fleet, 5s without)")
	processFleetWarm  = flag.Duration("process-fleet-warmup", 0, "idle time after every agent is ready and before the window (default 30s with -process-fleet, 3s without)")
)

const (
	procFleetVoters = 3
	// procFleetSmall is the default fleet: big enough that a bounded mesh
	// leaves every joined agent unconnected to some others (it may not
	// connect to all the others and stay under procFleetMaxConns), small
	// enough to start in seconds on a loaded 2-core machine.
	procFleetSmall = 24
	// procFleetMaxConns bounds a joined agent's connections once the fleet
	// is idle: the voters and a few gossip peers.
	procFleetMaxConns = 16
	// procFleetSample is how many joined agents are measured, spread over
	// the fleet (all of them in a smaller fleet).
	procFleetSample = 20
	// The acceptance bounds of a joined agent at idle.
	procFleetMaxRSSMiB = 64
	procFleetMaxCPU    = 1.0 // % of one core
	// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
	// every Linux architecture Go runs on (getconf CLK_TCK).
	clockTicks = 100
	// procFleetBatch agents are started, then waited for, at a time.
	procFleetBatch = 10
)

// procFleetRow is one fleet's measured figures.
type procFleetRow struct {
	n                         int
	ready                     time.Duration // from the first voter's start to every agent ready
	sampled                   int           // joined agents measured
	rssStartMean, rssStartMax float64       // MiB
	rssEndMean, rssEndMax     float64       // MiB
	rssGrowMean, rssGrowMax   float64       // MiB over the window
	anonEnd, anonGrow         float64       // mean MiB: RssAnon at the end, its growth
	fileEnd, fileGrow         float64       // mean MiB: RssFile (the binary, Badger's maps)
	heapEnd, heapGrow         float64       // mean MiB: the Go heap in use (go_memstats_heap_inuse_bytes)
	cpuMean, cpuMax           float64       // % of one core
	goroutines                float64       // mean at the window's end
	connsMean, connsMax       float64       // mesh peers (sluice_p2p_connections)
	tcpMean, tcpMax           float64       // ESTABLISHED TCP sockets of the process
	voterRSS, voterCPU        float64       // voters' mean: MiB at the end, % of a core
	voterConns, voterTCP      float64       // voters' mean
	voterGoroutines           float64
}

func TestProcessFleet(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("the process fleet reads /proc (Linux)")
	}
	sizes := []int{procFleetSmall}
	idle, warm := 5*time.Second, 3*time.Second
	measuring := *processFleetSizes != ""
	if measuring {
		sizes = nil
		for s := range strings.SplitSeq(*processFleetSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= procFleetVoters {
				t.Fatalf("-process-fleet: %q is not a size above %d", s, procFleetVoters)
			}
			sizes = append(sizes, n)
		}
		idle, warm = 2*time.Minute, 30*time.Second
	}
	if *processFleetIdle > 0 {
		idle = *processFleetIdle
	}
	if *processFleetWarm > 0 {
		warm = *processFleetWarm
	}
	raiseFileLimit(t, slices.Max(sizes))
	var rows []procFleetRow
	for _, n := range sizes {
		t.Run(fmt.Sprintf("agents=%d", n), func(t *testing.T) {
			rows = append(rows, runProcessFleet(t, n, warm, idle, measuring))
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agent processes at idle (warm-up %v, window %v, %d voters; joined agents: mean/max over the sample; voters: mean):\n", warm, idle, procFleetVoters)
	fmt.Fprintf(&b, "%6s %7s %6s %15s %15s %13s %13s %6s %9s %9s | %8s %7s %6s %5s %5s\n",
		"agents", "ready", "sample", "rss start MiB", "rss end MiB", "rss grow MiB", "cpu %", "gor", "conns", "tcp",
		"v rss", "v cpu%", "v gor", "v con", "v tcp")
	for _, r := range rows {
		fmt.Fprintf(&b, "%6d %7s %6d %7.1f/%-7.1f %7.1f/%-7.1f %6.2f/%-6.2f %6.3f/%-6.3f %6.0f %4.1f/%-4.0f %4.1f/%-4.0f | %8.1f %7.3f %6.0f %5.0f %5.0f\n",
			r.n, r.ready.Round(time.Second), r.sampled, r.rssStartMean, r.rssStartMax, r.rssEndMean, r.rssEndMax,
			r.rssGrowMean, r.rssGrowMax, r.cpuMean, r.cpuMax, r.goroutines, r.connsMean, r.connsMax, r.tcpMean, r.tcpMax,
			r.voterRSS, r.voterCPU, r.voterGoroutines, r.voterConns, r.voterTCP)
	}
	fmt.Fprintf(&b, "joined agents' resident set by kind, mean MiB at the window's end (growth over the window):\n")
	fmt.Fprintf(&b, "%6s %16s %16s %16s\n", "agents", "anonymous", "file-backed", "Go heap in use")
	for _, r := range rows {
		fmt.Fprintf(&b, "%6d %7.1f (%+6.2f) %7.1f (%+6.2f) %7.1f (%+6.2f)\n",
			r.n, r.anonEnd, r.anonGrow, r.fileEnd, r.fileGrow, r.heapEnd, r.heapGrow)
	}
	t.Log("\n" + b.String())
}

// raiseFileLimit makes sure the test process has the descriptors its
// fleet needs (each agent's output pipe, API connections): it raises the
// soft limit up to the hard one, and says so. Each agent is a process
// with a limit of its own, inherited.
func raiseFileLimit(t *testing.T, n int) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	need := uint64(256 + 8*n)
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Fatalf("%d agents need about %d file descriptors in the test process; the hard limit is %d (ulimit -Hn)", n, need, lim.Max)
	}
	old := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising the file descriptor limit from %d to %d: %v", old, lim.Max, err)
	}
	t.Logf("raised the soft file descriptor limit from %d to %d for %d agents", old, lim.Max, n)
}

// fleetAgent is one agent process of the fleet.
type fleetAgent struct {
	name, sock string
	p          *proc
	c          *http.Client
}

func (a *fleetAgent) pid() int { return a.p.cmd.Process.Pid }

// runProcessFleet starts n agent processes, waits until all are ready and
// the mesh is bounded, lets them idle for warm, measures a window of
// idle and returns the figures; the processes are killed at the end.
func runProcessFleet(t *testing.T, n int, warm, idle time.Duration, measuring bool) procFleetRow {
	root := shortDir(t)
	psk := writeSwarmKey(t, root)
	// Generous: a loaded 2-core machine starts a few hundred processes slowly.
	wait := bound + time.Duration(n)*time.Second
	begin := time.Now()

	voters := agents(t, root, procFleetVoters)
	fleet := make([]*fleetAgent, 0, n)
	var voterAddrs []string
	for i, v := range voters {
		run(t, voters, i, "--psk-file", psk)
		fleet = append(fleet, &fleetAgent{name: fmt.Sprintf("n%d", i+1), sock: v.sock, p: v.p, c: quietClient(v.sock)})
		voterAddrs = append(voterAddrs, v.addr)
	}
	allReady(t, voters)

	// The others join by the voters' addresses alone, a batch at a time:
	// a batch is started, then each of its agents waited for on its API.
	for first := procFleetVoters; first < n; first += procFleetBatch {
		var batch []*fleetAgent
		for i := first; i < min(first+procFleetBatch, n); i++ {
			name := fmt.Sprintf("a%d", i+1)
			data := filepath.Join(root, name)
			a := &fleetAgent{name: name, sock: filepath.Join(root, name+".sock")}
			a.p = start(t, "agent", "--name", name, "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0",
				"--peers", strings.Join(voterAddrs, ","), "--join", "--api", a.sock, "--psk-file", psk, "--log-level", "warn")
			a.c = quietClient(a.sock)
			batch = append(batch, a)
		}
		for _, a := range batch {
			a.p.waitLine(t, "API on "+a.sock)
		}
		fleet = append(fleet, batch...)
	}
	waitFleetProcsReady(t, fleet, wait)
	ready := time.Since(begin)
	t.Logf("%d agent processes ready after %v", n, ready.Round(100*time.Millisecond))

	// Warm-up: the start's traffic (announcements, first dials) dies down
	// and the connections the bounded mesh does not keep are closed.
	time.Sleep(warm) // a timed idle period: nothing is waited for
	waitProcsBounded(t, fleet[procFleetVoters:], wait)

	sample := spread(fleet[procFleetVoters:], procFleetSample)
	voting := fleet[:procFleetVoters]
	measured := append(slices.Clone(voting), sample...)
	before := make([]procSample, len(measured))
	for i, a := range measured {
		before[i] = sampleProc(t, a)
	}
	time.Sleep(idle) // the measured window: the fleet is left alone
	after := make([]procSample, len(measured))
	for i := range measured {
		after[i] = sampleProc(t, measured[i])
	}
	for _, a := range fleet {
		if a.p.exited() {
			t.Fatalf("agent %s ended during the window: %s", a.name, a.p.output)
		}
	}

	row := procFleetRow{n: n, ready: ready, sampled: len(sample)}
	var joined int
	for i, a := range measured {
		b, e := before[i], after[i]
		cpu := 100 * float64(e.ticks-b.ticks) / clockTicks / e.at.Sub(b.at).Seconds()
		rssStart, rssEnd := mib(b.rss), mib(e.rss)
		if i < procFleetVoters {
			row.voterRSS += rssEnd / procFleetVoters
			row.voterCPU += cpu / procFleetVoters
			row.voterConns += float64(e.conns) / procFleetVoters
			row.voterTCP += float64(e.tcp) / procFleetVoters
			row.voterGoroutines += float64(e.goroutines) / procFleetVoters
			continue
		}
		joined++
		row.rssStartMean += rssStart
		row.rssStartMax = max(row.rssStartMax, rssStart)
		row.rssEndMean += rssEnd
		row.rssEndMax = max(row.rssEndMax, rssEnd)
		row.rssGrowMean += rssEnd - rssStart
		row.rssGrowMax = max(row.rssGrowMax, rssEnd-rssStart)
		row.anonEnd += mib(e.anon)
		row.anonGrow += mib(e.anon) - mib(b.anon)
		row.fileEnd += mib(e.file)
		row.fileGrow += mib(e.file) - mib(b.file)
		row.heapEnd += mib(e.heap)
		row.heapGrow += mib(e.heap) - mib(b.heap)
		row.cpuMean += cpu
		row.cpuMax = max(row.cpuMax, cpu)
		row.goroutines += float64(e.goroutines)
		row.connsMean += float64(e.conns)
		row.connsMax = max(row.connsMax, float64(e.conns))
		row.tcpMean += float64(e.tcp)
		row.tcpMax = max(row.tcpMax, float64(e.tcp))
		if e.conns > procFleetMaxConns || e.tcp > procFleetMaxConns {
			t.Errorf("agent %s: %d mesh peers, %d TCP connections at the window's end, over %d", a.name, e.conns, e.tcp, procFleetMaxConns)
		}
		if measuring && rssEnd > procFleetMaxRSSMiB {
			t.Errorf("agent %s: RSS %.1f MiB at the window's end, over %d MiB", a.name, rssEnd, procFleetMaxRSSMiB)
		}
		if measuring && cpu > procFleetMaxCPU {
			t.Errorf("agent %s: %.3f%% of a core over the window, over %.0f%%", a.name, cpu, procFleetMaxCPU)
		}
	}
	for _, f := range []*float64{&row.rssStartMean, &row.rssEndMean, &row.rssGrowMean,
		&row.anonEnd, &row.anonGrow, &row.fileEnd, &row.fileGrow, &row.heapEnd, &row.heapGrow, &row.cpuMean, &row.goroutines, &row.connsMean, &row.tcpMean} {
		*f /= float64(joined)
	}
	t.Logf("%d agents: joined (%d sampled) RSS %.1f→%.1f MiB mean (max %.1f, growth max %+.2f), CPU %.3f%% mean (max %.3f%%), %.0f goroutines, %.1f mesh peers (max %.0f), %.1f TCP (max %.0f); voters RSS %.1f MiB, CPU %.3f%%, %.0f mesh peers",
		n, joined, row.rssStartMean, row.rssEndMean, row.rssEndMax, row.rssGrowMax, row.cpuMean, row.cpuMax, row.goroutines,
		row.connsMean, row.connsMax, row.tcpMean, row.tcpMax, row.voterRSS, row.voterCPU, row.voterConns)
	return row
}

// writeSwarmKey writes a new cluster secret (a libp2p swarm key) under dir.
func writeSwarmKey(t *testing.T, dir string) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "swarm.key")
	if err := os.WriteFile(path, fmt.Appendf(nil, "/key/swarm/psk/1.0.0/\n/base16/\n%x\n", key), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// quietClient is an API client that keeps no connection open between
// calls: an idle keep-alive connection would be a goroutine of the agent
// measured.
func quietClient(sock string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
}

// waitFleetProcsReady waits until every agent says it is ready, failing
// at once if one ended.
func waitFleetProcsReady(t *testing.T, fleet []*fleetAgent, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for _, a := range fleet {
		for {
			if a.p.exited() {
				t.Fatalf("agent %s ended before it was ready: %s", a.name, a.p.output)
			}
			s, err := status(a.c)
			if err == nil && s["ready"] == true {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s not ready after %v: %v %v", a.name, wait, s["state"], err)
			}
			time.Sleep(100 * time.Millisecond) // polling another process's state
		}
	}
}

// waitProcsBounded waits until no joined agent holds more than
// procFleetMaxConns mesh connections: gossip peers picked while the
// members were being learned stay connected a while after the start.
func waitProcsBounded(t *testing.T, joined []*fleetAgent, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		worst, who := 0, ""
		for _, a := range joined {
			m, err := scrape(a.c)
			if err != nil {
				t.Fatalf("agent %s: /metrics: %v", a.name, err)
			}
			if c := int(m["sluice_p2p_connections"]); c > worst {
				worst, who = c, a.name
			}
		}
		if worst <= procFleetMaxConns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, agent %s still has %d mesh connections, over %d: the mesh is not bounded", wait, who, worst, procFleetMaxConns)
		}
		time.Sleep(time.Second) // polling a condition no agent signals
	}
}

// spread picks up to k of xs, evenly over them.
func spread[T any](xs []T, k int) []T {
	if len(xs) <= k {
		return slices.Clone(xs)
	}
	out := make([]T, 0, k)
	for i := range k {
		out = append(out, xs[i*len(xs)/k])
	}
	return out
}

// procSample is one look at an agent process.
type procSample struct {
	at         time.Time
	rss        uint64 // bytes (VmRSS)
	anon, file uint64 // bytes: RssAnon, RssFile (and RssShmem) of VmRSS
	heap       uint64 // bytes: the Go heap in use
	ticks      uint64 // utime+stime, in clockTicks
	goroutines int
	conns      int // mesh peers (sluice_p2p_connections)
	tcp        int // ESTABLISHED TCP sockets the process holds
}

// sampleProc looks at a: its /metrics first, then /proc, so that the
// scrape's own cost falls outside a window that starts here, and the other
// way round at a window's end.
func sampleProc(t *testing.T, a *fleetAgent) procSample {
	t.Helper()
	m, err := scrape(a.c)
	if err != nil {
		t.Fatalf("agent %s: /metrics: %v", a.name, err)
	}
	s := procSample{goroutines: int(m["go_goroutines"]), conns: int(m["sluice_p2p_connections"]),
		heap: uint64(m["go_memstats_heap_inuse_bytes"])}
	s.tcp = tcpEstablished(t, a.pid())
	st := procStatus(t, a.pid())
	s.rss, s.anon, s.file = st["VmRSS"], st["RssAnon"], st["RssFile"]+st["RssShmem"]
	s.ticks, s.at = procTicks(t, a.pid()), time.Now()
	return s
}

// scrape reads an agent's /metrics: each series' value, summed over its
// labels.
func scrape(c *http.Client) (map[string]float64, error) {
	resp, err := c.Get("http://sluice/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// NAME{LABELS} VALUE, or NAME VALUE: the value is the last field
		i := strings.IndexAny(line, "{ ")
		if i <= 0 {
			continue
		}
		name, f := line[:i], strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, s.Err()
}

// procStatus reads the sizes of /proc/PID/status ("VmRSS: 123 kB"),
// in bytes.
func procStatus(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		key, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			out[key] = kb << 10
		}
	}
	if out["VmRSS"] == 0 {
		t.Fatalf("/proc/%d/status: no VmRSS", pid)
	}
	return out
}

// procTicks is the process's CPU time, user and system, in clockTicks.
func procTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields counted from after its closing one, state being field 3.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return utime + stime
}

// tcpEstablished counts the process's TCP sockets (v4 and v6) that are
// ESTABLISHED: its descriptors' socket inodes looked up in /proc/net/tcp.
func tcpEstablished(t *testing.T, pid int) int {
	t.Helper()
	established := map[string]bool{}
	for _, file := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			continue // no IPv6
		}
		for i, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if i == 0 || len(f) < 10 {
				continue
			}
			if f[3] == "01" { // TCP_ESTABLISHED
				established[f[9]] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && established[strings.TrimSuffix(inode, "]")] {
			n++
		}
	}
	return n
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
