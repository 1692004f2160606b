package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// floor is what this machine can do at best for the steps a lock is made
// of, measured before the workloads: a round trip between two libp2p hosts
// as the agents set them up (TCP, Noise, yamux, one long-lived stream), a
// round trip on a Unix socket (a client's call to its agent, without the
// agent's work), and an fsync of a small write in the directory the
// durable clusters keep their data in. Medians, in milliseconds; nil
// when the step could not be measured.
type floor struct {
	P2PRoundTripMS *float64 `json:"p2p_round_trip_ms,omitempty"`
	SocketCallMS   *float64 `json:"socket_call_ms,omitempty"`
	FsyncMS        *float64 `json:"fsync_ms,omitempty"`
	// ProxyHopMS is what a bare reverse proxy in a process of its own
	// (Go's httputil.ReverseProxy, no lock) adds to a request to an HTTP
	// server in this process: the hop any proxy in front of a site costs
	// here, sluice proxy's included.
	ProxyHopMS *float64 `json:"proxy_hop_ms,omitempty"`
	// CrowdCallP99MS is the p99 of a Unix-socket call to an echo process
	// while crowdCallers call at once, each on its connection: W4's load
	// without the agent's work, the tail any server shows at that load
	// on this machine (the callers wait for the cores, not the server).
	CrowdCallP99MS *float64 `json:"crowd_call_p99_ms,omitempty"`
}

// crowdCallers is the crowd of CrowdCallP99MS, W4's clients.
const crowdCallers = 64

// floorSamples is how many times each step is timed.
const floorSamples = 2000

// measureFloor times the three steps; a step that fails is left nil and
// noted.
func (b *bench) measureFloor(ctx context.Context) {
	if v, err := p2pRoundTrip(ctx, floorSamples); err != nil {
		b.note("the floor's libp2p round trip was not measured: %v", err)
	} else {
		b.floor.P2PRoundTripMS = &v
	}
	if v, err := socketRoundTrip(ctx, floorSamples); err != nil {
		b.note("the floor's Unix-socket call was not measured: %v", err)
	} else {
		b.floor.SocketCallMS = &v
	}
	if v, err := fsyncTime(os.TempDir(), floorSamples/10); err != nil {
		b.note("the floor's fsync was not measured: %v", err)
	} else {
		b.floor.FsyncMS = &v
	}
	if v, err := socketCrowdP99(ctx, crowdCallers, floorSamples/10); err != nil {
		b.note("the floor's crowded Unix-socket call was not measured: %v", err)
	} else {
		b.floor.CrowdCallP99MS = &v
	}
	if v, err := proxyHop(ctx, floorSamples/2); err != nil {
		b.note("the floor's reverse-proxy hop was not measured: %v", err)
	} else {
		b.floor.ProxyHopMS = &v
	}
	logf("%s", b.floor.line())
}

func (f floor) line() string {
	show := func(v *float64) string {
		if v == nil {
			return "not measured"
		}
		return fmt.Sprintf("%.0f µs", 1000**v)
	}
	return fmt.Sprintf("Floor (medians on this machine): libp2p round trip %s, Unix-socket call %s, fsync %s, a bare reverse proxy's hop %s; "+
		"p99 of a Unix-socket call with %d callers at once %s",
		show(f.P2PRoundTripMS), show(f.SocketCallMS), show(f.FsyncMS), show(f.ProxyHopMS), crowdCallers, show(f.CrowdCallP99MS))
}

// floorModel is one operation of a workload in the floor's steps: the
// fewest round trips, socket calls and fsyncs on its critical path.
type floorModel struct {
	// hops: reverse-proxy hops (floor.ProxyHopMS); crowd: calls among
	// crowdCallers at once, at their p99 (floor.CrowdCallP99MS).
	trips, calls, fsyncs, hops, crowd float64
	// per: how many of the operation run at once at best (the clients
	// that cannot wait for each other), for a rate's floor.
	per  float64
	what string
}

// floorModels are the workloads' operations as sluice does them:
//   - a lock cycle on a name the agent used before (W1, W3): one round
//     trip to the grant (ENTERING with the next number, the leaders'
//     acks with their first reports), one for the release, an fsync of
//     the ticket, two calls (acquire, release); a name new to the agent
//     (churn) costs a round trip more, to read the number first;
//   - a handoff on one name (W2): the holder's release reaches the
//     leaders and their report, which marks the next waiter held, the
//     waiter's agent (a round trip), and the two calls of a cycle; the
//     next waiter's ticket is on disk already;
//   - a page view on the agent's shared read ticket (W4, W4n): the try
//     and the release, two calls, no message; behind the middleware, on
//     the lease it lends to the page views of its process, no call;
//   - a drain's writer after the last reader (W5, revoke): the reader's
//     release call, the release to the leaders and their report to the
//     writer's agent (a round trip).
func floorModelOf(w string, st storage, clients int) (floorModel, bool) {
	fs := 1.0
	if st == memory {
		fs = 0
	}
	switch w {
	case "W1":
		return floorModel{trips: 2, calls: 2, fsyncs: fs, per: 1, what: "cycle: 2 round trips, 2 calls, " + fsyncWord(fs)}, true
	case "W3":
		return floorModel{trips: 2, calls: 2, fsyncs: fs, per: float64(clients), what: "cycle: 2 round trips, 2 calls, " + fsyncWord(fs) + fmt.Sprintf(", %d at once", clients)}, true
	case "W2":
		return floorModel{trips: 1, calls: 2, per: 1, what: "handoff: 1 round trip, 2 calls"}, true
	case "W4", "W4n":
		return floorModel{calls: 2, per: float64(clients), what: fmt.Sprintf("page view: 2 calls, %d at once", clients)}, true
	case "W5":
		return floorModel{trips: 1, calls: 1, per: 1, what: "drain: 1 call, 1 round trip"}, true
	case "grant": // an uncontended acquire alone, on a name its agent used before
		return floorModel{trips: 1, calls: 1, fsyncs: fs, per: 1, what: "grant: 1 round trip, 1 call, " + fsyncWord(fs)}, true
	case "call": // a page view's try on a held share
		return floorModel{calls: 1, per: 1, what: "try: 1 call"}, true
	case "crowd call": // the p99 of a page view's try among W4's clients
		return floorModel{crowd: 1, per: 1, what: fmt.Sprintf("try: p99 of 1 call, %d callers at once", crowdCallers)}, true
	}
	return floorModel{}, false
}

func fsyncWord(n float64) string {
	if n == 0 {
		return "no fsync"
	}
	return "1 fsync"
}

// latencyMS is the model's floor for one operation, nil when a step it
// uses was not measured.
func (f floor) latencyMS(m floorModel) *float64 {
	var v float64
	for _, s := range []struct {
		n    float64
		step *float64
	}{{m.trips, f.P2PRoundTripMS}, {m.calls, f.SocketCallMS}, {m.fsyncs, f.FsyncMS}, {m.hops, f.ProxyHopMS}, {m.crowd, f.CrowdCallP99MS}} {
		if s.n == 0 {
			continue
		}
		if s.step == nil {
			return nil
		}
		v += s.n * *s.step
	}
	return &v
}

// echoEnv, set in the environment, makes this program an echo server of
// the kind it names ("p2p" or "unix"), or a bare reverse proxy ("proxy")
// to the URL in upstreamEnv, instead of the harness: the floor's far end
// runs in a process of its own, as an agent's peer does, so each round
// trip pays the wake-ups of two processes. It prints its address (a
// multiaddr with /p2p/ID, a socket path, a URL) on a line, and serves
// until its standard input closes.
const (
	echoEnv     = "SLUICE_BENCH_FLOOR_ECHO"
	upstreamEnv = "SLUICE_BENCH_FLOOR_UPSTREAM"
)

// echoProto is the echo's libp2p protocol.
const echoProto = "/sluice-bench/echo/1"

func p2pOptions() []libp2p.Option {
	return []libp2p.Option{
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(), libp2p.DisableMetrics(), libp2p.Ping(false),
	}
}

// serveEcho is the echo process's whole life.
func serveEcho(kind string) error {
	echo := func(rw io.ReadWriteCloser) {
		defer rw.Close()
		_, _ = io.Copy(rw, rw)
	}
	switch kind {
	case "p2p":
		h, err := libp2p.New(p2pOptions()...)
		if err != nil {
			return err
		}
		defer h.Close()
		h.SetStreamHandler(echoProto, func(s network.Stream) { echo(s) })
		fmt.Printf("%s/p2p/%s\n", h.Addrs()[0], h.ID())
	case "unix":
		dir, err := os.MkdirTemp("", "bench-floor-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		l, err := net.Listen("unix", filepath.Join(dir, "echo.sock"))
		if err != nil {
			return err
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go echo(c)
			}
		}()
		fmt.Println(l.Addr().String())
	case "proxy":
		stop, err := serveBareProxy(os.Getenv(upstreamEnv))
		if err != nil {
			return err
		}
		defer stop()
	default:
		return fmt.Errorf("%s=%q: want p2p, unix or proxy", echoEnv, kind)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// startEcho runs this program as an echo server of kind, with env added
// to its environment, and returns the address it printed; stop ends it.
func startEcho(ctx context.Context, kind string, env ...string) (addr string, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(append(os.Environ(), echoEnv+"="+kind), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		in.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the %s echo process: %w", kind, err)
	}
	return strings.TrimSpace(line), stop, nil
}

// p2pRoundTrip is the median round trip of a 64-byte frame on one stream
// to a libp2p host in another process, on loopback.
func p2pRoundTrip(ctx context.Context, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr, stop, err := startEcho(ctx, "p2p")
	if err != nil {
		return 0, err
	}
	defer stop()
	info, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return 0, err
	}
	a, err := libp2p.New(p2pOptions()...)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	if err := a.Connect(ctx, *info); err != nil {
		return 0, err
	}
	s, err := a.NewStream(ctx, info.ID, echoProto)
	if err != nil {
		return 0, err
	}
	defer s.Reset()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	return pingPong(s, n)
}

// socketRoundTrip is the median round trip of a 64-byte frame on a Unix
// socket to another process.
func socketRoundTrip(ctx context.Context, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	path, stop, err := startEcho(ctx, "unix")
	if err != nil {
		return 0, err
	}
	defer stop()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return pingPong(c, n)
}

// socketCrowdP99 is the p99 round trip of a 64-byte frame on Unix
// sockets to another process, callers calling at once on a connection
// each, n times each.
func socketCrowdP99(ctx context.Context, callers, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	path, stop, err := startEcho(ctx, "unix")
	if err != nil {
		return 0, err
	}
	defer stop()
	conns := make([]net.Conn, 0, callers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range callers {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return 0, err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		conns = append(conns, c)
	}
	samples := make([][]time.Duration, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { samples[i], errs[i] = roundTrips(c, n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	all := slices.Concat(samples...)
	if len(all) == 0 {
		return 0, errors.New("no samples")
	}
	slices.Sort(all)
	return ms(all[len(all)*99/100]), nil
}

// pingPong writes a 64-byte frame and reads it back n times, and returns
// the median round trip in milliseconds.
func pingPong(rw io.ReadWriter, n int) (float64, error) {
	ds, err := roundTrips(rw, n)
	if err != nil {
		return 0, err
	}
	return medianMS(ds)
}

// roundTrips writes a 64-byte frame and reads it back n times, and
// returns the round trips.
func roundTrips(rw io.ReadWriter, n int) ([]time.Duration, error) {
	buf := make([]byte, 64)
	r := bufio.NewReader(rw)
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := rw.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

// fsyncTime is the median time of writing 4 KiB to a file in dir and
// syncing it.
func fsyncTime(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(dir, "bench-fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	return medianMS(ds)
}

func medianMS(ds []time.Duration) (float64, error) {
	if len(ds) == 0 {
		return 0, errors.New("no samples")
	}
	slices.Sort(ds)
	return ms(ds[len(ds)/2]), nil
}
