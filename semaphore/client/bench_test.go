package client_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// BenchmarkMiddleware measures what Middleware adds to a page view, in
// front of a one-node agent (Badger in memory) on its Unix socket, each
// request granted on the agent's shared read ticket: "serial" is one
// request at a time over a kept-alive connection, plain and behind the
// middleware, and reports both p50s and the difference; "concurrent" is
// 200 clients at once (as many connections), and reports both rates and
// the share of the plain rate the middleware keeps.
//
//	go test ./semaphore/client -run '^$' -bench Middleware -benchtime 20000x
func BenchmarkMiddleware(b *testing.B) {
	_, c, stop, err := runAgent()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	plain := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	direct := httptest.NewServer(plain)
	defer direct.Close()
	wrapped := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{})(plain))
	defer wrapped.Close()

	b.Run("serial", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		defer hc.CloseIdleConnections()
		measure := func(url string) time.Duration {
			for range 200 { // warm: connections, the shared read ticket
				benchGet(b, hc, url)
			}
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				benchGet(b, hc, url)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			return lat[len(lat)/2]
		}
		b.ResetTimer()
		d50 := measure(direct.URL)
		m50 := measure(wrapped.URL)
		b.StopTimer()
		b.ReportMetric(float64(d50.Microseconds()), "plain-p50-µs")
		b.ReportMetric(float64(m50.Microseconds()), "middleware-p50-µs")
		b.ReportMetric(float64((m50 - d50).Microseconds()), "added-p50-µs")
	})

	b.Run("concurrent", func(b *testing.B) {
		const clients = 200
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
		defer hc.CloseIdleConnections()
		rate := func(url string) float64 {
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			start := time.Now()
			for range clients {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						benchGet(b, hc, url)
					}
				})
			}
			wg.Wait()
			return float64(b.N) / time.Since(start).Seconds()
		}
		b.ResetTimer()
		rate(direct.URL) // warm: connections
		rate(wrapped.URL)
		p := rate(direct.URL)
		m := rate(wrapped.URL)
		b.StopTimer()
		b.ReportMetric(p, "plain-req/s")
		b.ReportMetric(m, "middleware-req/s")
		b.ReportMetric(100*m/p, "kept-%")
	})
}

// benchGet GETs url and reads the page; b.Error (not Fatal: it runs on
// many goroutines) when it fails.
func benchGet(b *testing.B, hc *http.Client, url string) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("GET %s: %d", url, resp.StatusCode)
	}
}

// BenchmarkReadTryRelease measures a page view's lock traffic without the
// HTTP server: 64 goroutines each take a READ_ONLY try on one name and
// release it without an answer, as a frontend does per request.
//
//	go test ./semaphore/client -run '^$' -bench ReadTryRelease -benchtime 100000x
func BenchmarkReadTryRelease(b *testing.B) {
	_, c, stop, err := runAgent()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	opts := client.Options{Try: true, Timeout: 5 * time.Second, Duration: 30 * time.Second}
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Acquire(ctx, "/bench/one", semaphore.ReadOnly, opts)
			if err != nil {
				b.Error(err)
				return
			}
			_ = l.ReleaseNoWait(ctx)
		}
	})
}
