package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"
)

// serveBareProxy serves, on a loopback port of its own, a reverse proxy
// to upstream with nothing else on the way (no lock, no logging), as a
// site's operator would put one in front of it; it prints its URL. stop
// closes it.
func serveBareProxy(upstream string) (stop func(), err error) {
	target, err := url.Parse(upstream)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("%s=%q: want an http:// URL", upstreamEnv, upstream)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: tr,
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Printf("http://%s\n", l.Addr())
	return func() { _ = srv.Close() }, nil
}

// proxyHop is the median latency of n requests to an HTTP server in this
// process through a bare reverse proxy in another, minus the median of n
// requests to it directly, one at a time: what the hop through any proxy
// costs on this machine.
func proxyHop(ctx context.Context, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(okBody)
	}))
	defer site.Close()
	proxy, stop, err := startEcho(ctx, "proxy", upstreamEnv+"="+site.URL)
	if err != nil {
		return 0, err
	}
	defer stop()
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	median := func(u string) (float64, error) {
		ds := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if err := get(ctx, hc, u); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		return medianMS(ds)
	}
	direct, err := median(site.URL)
	if err != nil {
		return 0, fmt.Errorf("direct: %w", err)
	}
	via, err := median(proxy)
	if err != nil {
		return 0, fmt.Errorf("through the proxy: %w", err)
	}
	if via < direct {
		return 0, errors.New("the proxy's median is below the direct one: too noisy to tell")
	}
	return via - direct, nil
}
