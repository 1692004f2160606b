package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingUpstream is an httptest server running h that counts the
// connections made to it.
func countingUpstream(t *testing.T, h http.HandlerFunc) (*url.URL, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, &conns
}

func testTransport(u *url.URL, headerTimeout time.Duration) *upstreamTransport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr.DialContext = d.DialContext
	return newUpstreamTransport(u, tr, d, headerTimeout)
}

// roundTrip sends a request of method to u+path through tr, reads the
// whole answer and says its status and body.
func roundTrip(t *testing.T, tr http.RoundTripper, method string, u *url.URL, path string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, u.String()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

// Page views of every kind share one kept connection: plain, chunked,
// HEAD, no content, OPTIONS.
func TestUpstreamPageViewsKeepOneConnection(t *testing.T) {
	u, conns := countingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			for i := range 3 {
				_, _ = io.WriteString(w, strings.Repeat("x", i+1))
				w.(http.Flusher).Flush()
			}
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			_, _ = io.WriteString(w, "page "+r.URL.Path)
		}
	})
	tr := testTransport(u, time.Minute)
	defer tr.CloseIdleConnections()
	for i := range 20 {
		if code, body := roundTrip(t, tr, http.MethodGet, u, "/a", nil); code != 200 || body != "page /a" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
	}
	if code, body := roundTrip(t, tr, http.MethodGet, u, "/chunked", nil); code != 200 || body != "xxxxxx" {
		t.Fatalf("chunked: %d %q", code, body)
	}
	if code, _ := roundTrip(t, tr, http.MethodHead, u, "/a", nil); code != 200 {
		t.Fatalf("HEAD: %d", code)
	}
	if code, _ := roundTrip(t, tr, http.MethodGet, u, "/empty", nil); code != http.StatusNoContent {
		t.Fatalf("no content: %d", code)
	}
	if code, _ := roundTrip(t, tr, http.MethodOptions, u, "/a", nil); code != 200 {
		t.Fatalf("OPTIONS: %d", code)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the upstream, want 1 kept", n)
	}
}

// A request with a body goes through Go's transport, and arrives whole.
func TestUpstreamBodiesGoThroughGoTransport(t *testing.T) {
	u, _ := countingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+string(b))
	})
	tr := testTransport(u, time.Minute)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, u.String()+"/form", strings.NewReader("a=1"))
	if tr.pageView(req) {
		t.Fatal("a POST with a body taken as a page view")
	}
	if code, body := roundTrip(t, tr, http.MethodPost, u, "/form", strings.NewReader("a=1")); code != 200 || body != "POST a=1" {
		t.Fatalf("POST: %d %q", code, body)
	}
	get, _ := http.NewRequest(http.MethodGet, u.String()+"/ws", nil)
	get.Header.Set("Upgrade", "websocket")
	if tr.pageView(get) {
		t.Fatal("an upgrade taken as a page view")
	}
}

// rawUpstream serves on a loopback port with serve, one call per
// connection, and counts the connections.
func rawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (*url.URL, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return &url.URL{Scheme: "http", Host: l.Addr().String()}, &conns
}

// An upstream that closes a kept connection without a word (its idle
// timeout): the next page view is sent again on a new connection, and
// answered.
func TestUpstreamSendsAgainOnAConnectionClosedWhileIdle(t *testing.T) {
	u, conns := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// Says nothing of closing, and closes.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tr := testTransport(u, time.Minute)
	defer tr.CloseIdleConnections()
	for i := range 3 {
		if code, body := roundTrip(t, tr, http.MethodGet, u, "/", nil); code != 200 || body != "ok" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (one per page view)", n)
	}
}

// An answer that says to close, or a body the visitor stops reading,
// leaves its connection closed, not kept; an early hint comes before the
// answer and is passed over.
func TestUpstreamKeepsOnlyConnectionsReadToTheEnd(t *testing.T) {
	u, conns := countingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/long":
			_, _ = io.WriteString(w, strings.Repeat("y", 1<<20))
			return
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		_, _ = io.WriteString(w, "done")
	})
	tr := testTransport(u, time.Minute)
	defer tr.CloseIdleConnections()
	if code, body := roundTrip(t, tr, http.MethodGet, u, "/close", nil); code != 200 || body != "done" {
		t.Fatalf("close: %d %q", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, u.String()+"/long", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if code, body := roundTrip(t, tr, http.MethodGet, u, "/hints", nil); code != 200 || body != "done" {
		t.Fatalf("hints: %d %q", code, body)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (none kept after a close or a body left unread)", n)
	}
}

// The request's end (the visitor left, its lock was lost) ends the wait
// for a slow upstream with the context's error, which the proxy's error
// handler keeps quiet about; an upstream that never answers ends the wait
// at the header timeout.
func TestUpstreamWaitsEndWithTheRequestAndTheTimeout(t *testing.T) {
	release := make(chan struct{})
	u, _ := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		<-release
	})
	defer close(release)
	tr := testTransport(u, time.Minute)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+"/slow", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a page view whose request ended: %v, want context.Canceled", err)
	}

	short := testTransport(u, 20*time.Millisecond)
	defer short.CloseIdleConnections()
	req, _ = http.NewRequest(http.MethodGet, u.String()+"/never", nil)
	if _, err := short.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("an upstream that never answers: %v", err)
	}
}
