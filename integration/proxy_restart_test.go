package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestVisitorsThroughAgentRestart: the agent of a `sluice proxy` restarts
// (as for an upgrade) while visitors keep coming; with --agent-wait
// longer than the restart, none of them gets the maintenance page or an
// error: their requests wait for the agent and are served when it is
// back. The run says how long the longest request took.
func TestVisitorsThroughAgentRestart(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	for i := range nodes {
		run(t, nodes, i)
	}
	allReady(t, nodes)
	site := newUpstreamSite(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--listen", addr, "--upstream", site.srv.URL, "--name", "/site",
		"--api", nodes[0].sock, "--agent-wait", bound.String())
	proxy.waitLine(t, "proxying")

	var (
		served, failed atomic.Int64
		mu             sync.Mutex
		longest        time.Duration
		failures       []string
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := &http.Client{Timeout: 2 * bound}
			for ctx.Err() == nil {
				began := time.Now()
				resp, err := c.Get("http://" + addr + "/")
				took := time.Since(began)
				mu.Lock()
				longest = max(longest, took)
				switch {
				case err != nil:
					failures = append(failures, err.Error())
					failed.Add(1)
				case resp.StatusCode != 200:
					failures = append(failures, resp.Status)
					failed.Add(1)
				default:
					served.Add(1)
				}
				mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	servedAtLeast := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(bound); served.Load() < n; time.Sleep(10 * time.Millisecond) { // polling the visitors' progress, bounded
			if time.Now().After(deadline) {
				t.Fatalf("visitors served %d, want %d", served.Load(), n)
			}
		}
	}
	servedAtLeast(50)
	down := time.Now()
	stopAgent(t, nodes[0].p)
	run(t, nodes, 0)
	waitReady(t, nodes[0].c)
	restart := time.Since(down)
	servedAtLeast(served.Load() + 50)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the agent was restarted in %s; visitors were served %d pages, the longest in %s",
		restart.Round(time.Millisecond), served.Load(), longest.Round(time.Millisecond))
	if failed.Load() > 0 {
		t.Fatalf("%d visitors were not served while the agent restarted: %v", failed.Load(), failures[:min(len(failures), 5)])
	}
}
