package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicehq/sluice/semaphore/client"
)

// The middleware workload (sluice only): what client.Middleware adds to
// a request. A few HTTP clients keep an in-process loopback server busy,
// first with a trivial handler as it is, then with the same handler
// behind the middleware (page views on the READ_ONLY lease it lends them,
// taken by a try through n1, which grants it on its shared read ticket). Two
// clients: their requests overlap on the agent as on a busy frontend,
// and on the 2 cores the default run is sized for, more would make the
// latency a queue for the cores rather than the middleware's cost. Then
// the site's throughput with a crowd of clients, plain and behind the
// middleware: what a busy frontend keeps when the lock shares its cores.
const middlewareClients = 2

// crowdClients is the crowd of the throughput phases: as many clients as
// a busy frontend serves at once, so that the site's rate, plain and
// behind the middleware, is bound by the cores the agent shares with it.
const crowdClients = 200

// middlewareResult is the request latency (ms) and rate, plain, behind
// the middleware, and through `sluice proxy` (the real binary, on n1's
// socket) in front of the plain handler.
type middlewareResult struct {
	Plain   *latency `json:"plain_ms"`
	Wrapped *latency `json:"middleware_ms"`
	Proxied *latency `json:"proxy_ms,omitempty"`
	// BareProxied is through a bare reverse proxy (the floor's, in a
	// process of its own) under the same clients: the hop any proxy
	// costs at this load, beside which sluice proxy's is read.
	BareProxied *latency `json:"bare_proxy_ms,omitempty"`
	PlainRate   float64  `json:"plain_rate"`
	WrappedRate float64  `json:"middleware_rate"`
	ProxiedRate float64  `json:"proxy_rate,omitempty"`
	// CrowdPlainRate and CrowdWrappedRate are the rates with
	// crowdClients clients, plain and behind the middleware.
	CrowdPlainRate   float64 `json:"crowd_plain_rate,omitempty"`
	CrowdWrappedRate float64 `json:"crowd_middleware_rate,omitempty"`
}

// okBody is the trivial handler's answer.
var okBody = []byte("ok\n")

func runMiddleware(ctx context.Context, b *bench, sys system, prefix string) (*runResult, error) {
	c, ok := sys.(*sluiceCluster)
	if !ok {
		return nil, fmt.Errorf("%w: %s", errSluiceOnly, sys.name())
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(okBody)
	})
	r := &runResult{Middleware: &middlewareResult{}}
	// httptest.NewServer listens on 127.0.0.1, a port of its own.
	plain := httptest.NewServer(handler)
	defer plain.Close()
	wrapped := httptest.NewServer(c.clients[0].Middleware(prefix+"/site", client.MiddlewareOptions{})(handler))
	defer wrapped.Close()
	for _, phase := range []string{"plain", "middleware", "proxy", "bare proxy", "crowd plain", "crowd middleware"} {
		url, clients := plain.URL, middlewareClients
		switch phase {
		case "middleware":
			url = wrapped.URL
		case "crowd plain":
			clients = crowdClients
		case "crowd middleware":
			url, clients = wrapped.URL, crowdClients
		case "proxy":
			proxy, err := startProxy(ctx, c, plain.URL, prefix+"/site")
			if err != nil {
				return nil, err
			}
			defer proxy.stop()
			url = proxy.url
		case "bare proxy":
			bare, stop, err := startEcho(ctx, "proxy", upstreamEnv+"="+plain.URL)
			if err != nil {
				return nil, err
			}
			defer stop()
			url = bare
		}
		win, tallies := runRequests(ctx, url, clients, b.cfg.warmup, b.cfg.window)
		var lat []time.Duration
		cycles := 0
		for i := range tallies {
			r.addTally(&tallies[i])
			lat = append(lat, tallies[i].acquire...)
			cycles += tallies[i].cycles
		}
		rate := float64(cycles) / win.end.Sub(win.start).Seconds()
		switch phase {
		case "plain":
			r.Middleware.Plain, r.Middleware.PlainRate = summarizeLatency(lat), rate
		case "middleware":
			r.Middleware.Wrapped, r.Middleware.WrappedRate = summarizeLatency(lat), rate
		case "proxy":
			r.Middleware.Proxied, r.Middleware.ProxiedRate = summarizeLatency(lat), rate
		case "bare proxy":
			r.Middleware.BareProxied = summarizeLatency(lat)
		case "crowd plain":
			r.Middleware.CrowdPlainRate = rate
		default:
			r.Middleware.CrowdWrappedRate = rate
		}
		if ctx.Err() != nil {
			break
		}
	}
	r.finishErrors()
	return r, nil
}

// runningProxy is a `sluice proxy` process and the URL it serves.
type runningProxy struct {
	*process
	url string
}

// startProxy runs `sluice proxy` on n1's socket in front of upstream, and
// waits until it serves.
func startProxy(ctx context.Context, c *sluiceCluster, upstream, name string) (*runningProxy, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p, err := startProcess("sluice proxy", filepath.Join(c.logDir, fmt.Sprintf("sluice-%s-proxy.log", c.storage)), c.bin,
		"proxy", "--api", c.socks[0], "--listen", addr, "--upstream", upstream, "--name", name, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: time.Second}
	err = waitFor(ctx, "sluice proxy", readyTimeout, []*process{p}, func(ctx context.Context) bool {
		return get(ctx, hc, "http://"+addr+"/") == nil
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return &runningProxy{process: p, url: "http://" + addr}, nil
}

// runRequests has clients clients GET url back to back for warmup then
// length; a request counts (its latency in tally.acquire, a
// cycle) when it ends in the window. Anything but a 200 with the whole
// body is an error.
func runRequests(ctx context.Context, url string, clients int, warmup, length time.Duration) (window, []tally) {
	now := time.Now()
	win := window{start: now.Add(warmup), end: now.Add(warmup + length)}
	soft, cancelSoft := context.WithDeadline(ctx, win.end)
	defer cancelSoft()
	hard, cancelHard := context.WithDeadline(ctx, win.end.Add(stopGrace))
	defer cancelHard()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	tallies := make([]tally, clients)
	var wg sync.WaitGroup
	for i := range tallies {
		wg.Go(func() {
			t := &tallies[i]
			for soft.Err() == nil {
				t.attempts++
				start := time.Now()
				err := get(hard, hc, url)
				end := time.Now()
				if err != nil {
					t.fail(err)
					pause(soft, errorPause)
					continue
				}
				if win.has(end) {
					t.acquire = append(t.acquire, end.Sub(start))
					t.cycles++
				}
			}
		})
	}
	wg.Wait()
	return win, tallies
}

// get is one request: its status must be 200 and its body okBody.
func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("reading the body: %w", err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("HTTP %s", resp.Status)
	case string(body) != string(okBody):
		return fmt.Errorf("body %q, want %q", body, okBody)
	}
	return nil
}
