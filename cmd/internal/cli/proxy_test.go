package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/client"
)

// BenchmarkProxyAddedLatency measures what `sluice proxy` adds to a page
// view: the same GET of a small page, one at a time over kept-alive
// connections, from the upstream directly and through the proxy (a
// READ_ONLY try on the agent's shared read ticket, the reverse proxy, the
// release), in front of a one-node `sluice dev` cluster. It reports both
// p50s and p99s and the differences.
//
//	go test ./cmd/internal/cli -run '^$' -bench ProxyAddedLatency -benchtime 5000x
func BenchmarkProxyAddedLatency(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "api.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	cluster, err := startDev(ctx, 1, sock, "", "", "", false, log)
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.stop(context.Background())
	c, err := client.New(client.Config{API: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if st, err := c.Status(ctx); err == nil && st.Ready {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the dev cluster is not ready")
		}
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	f := proxyFlags{name: "/site", retryAfter: 30 * time.Second, duration: time.Minute, dialTimeout: 5 * time.Second,
		headerTimeout: time.Minute, pageType: "text/html"}
	// Served as `sluice proxy` serves it: the page front, Go's server
	// behind it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := f.handler(c, u, nil, nil, log)
	front := newPageFront(h, &http.Server{Handler: h}, log)
	served := make(chan error, 1)
	go func() { served <- front.Serve(lis) }()
	defer func() {
		_ = front.Close()
		<-served
	}()
	proxy := struct{ URL string }{"http://" + lis.Addr().String()}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	measure := func(base string) (p50, p99 time.Duration) {
		lat := make([]time.Duration, 0, b.N)
		for range 200 { // warm: connections, the shared read ticket
			get(b, hc, base)
		}
		for range b.N {
			start := time.Now()
			get(b, hc, base)
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100]
	}
	// The same reverse proxy without the lock: the hop's own cost.
	bare := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }})
	defer bare.Close()
	b.ResetTimer()
	d50, d99 := measure(up.URL)
	p50, p99 := measure(proxy.URL)
	h50, _ := measure(bare.URL)
	b.StopTimer()
	b.ReportMetric(float64((h50 - d50).Microseconds()), "bare-hop-p50-µs")
	b.ReportMetric(float64((p50 - h50).Microseconds()), "lock-p50-µs")
	b.ReportMetric(float64(d50.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(p50.Microseconds()), "proxy-p50-µs")
	b.ReportMetric(float64((p50 - d50).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64((p99 - d99).Microseconds()), "added-p99-µs")
}

func get(b *testing.B, hc *http.Client, url string) {
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
}
