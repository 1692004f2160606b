package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// frontUnderTest is a page front serving h on a loopback port, and how
// many connections it handed to Go's server.
type frontUnderTest struct {
	front    *pageFront
	addr     string
	handed   atomic.Int64
	served   chan error
	shutdown sync.Once
}

func startFront(t testing.TB, h http.Handler) *frontUnderTest {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ft := &frontUnderTest{addr: lis.Addr().String(), served: make(chan error, 1)}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				ft.handed.Add(1)
			}
		}}
	ft.front = newPageFront(h, srv, slog.New(slog.DiscardHandler))
	go func() { ft.served <- ft.front.Serve(lis) }()
	t.Cleanup(func() { ft.stop(t) })
	return ft
}

func (ft *frontUnderTest) stop(t testing.TB) {
	ft.shutdown.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ft.front.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
			_ = ft.front.Close()
		}
		if err := <-ft.served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
	})
}

// rawConn is a visitor writing requests by hand and reading answers
// with Go's client-side parser.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialFront(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// answer reads one answer to a request of method, body included.
func (rc *rawConn) answer(method string) (*http.Response, string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("reading a body: %v", err)
	}
	return resp, string(b)
}

// closed says whether the front end closed the connection.
func (rc *rawConn) closed() bool {
	_, err := rc.br.ReadByte()
	return errors.Is(err, io.EOF)
}

func TestFrontAnswersPageViewsItself(t *testing.T) {
	big := strings.Repeat("x", 3*frontBuffered)
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "hello %s from %s", r.Host, r.RemoteAddr)
		case "/big": // no length: chunks
			io.WriteString(w, big)
		case "/sniff":
			io.WriteString(w, "<html><body>hi</body></html>")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, big)
			w.Header().Set("X-Sum", "42")
		}
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET /small HTTP/1.1\r\nHost: site.example\r\n\r\n")
	resp, body := rc.answer("GET")
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) || !strings.HasPrefix(body, "hello site.example from 127.0.0.1:") ||
		resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain" || resp.Close {
		t.Fatalf("small: %+v %q", resp, body)
	}
	rc.send("GET /big HTTP/1.1\r\nHost: site.example\r\n\r\n")
	resp, body = rc.answer("GET")
	if body != big || resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("big: %+v, %d bytes", resp, len(body))
	}
	rc.send("HEAD /small HTTP/1.1\r\nHost: site.example\r\n\r\n")
	if resp, body = rc.answer("HEAD"); resp.StatusCode != 200 || body != "" || resp.ContentLength <= 0 {
		t.Fatalf("head: %+v %q", resp, body)
	}
	rc.send("GET /sniff HTTP/1.1\r\nHost: site.example\r\n\r\n")
	if resp, _ = rc.answer("GET"); resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("sniffed: %q", resp.Header.Get("Content-Type"))
	}
	rc.send("GET /empty HTTP/1.1\r\nHost: site.example\r\n\r\n")
	if resp, body = rc.answer("GET"); resp.StatusCode != 204 || body != "" || resp.Header.Get("Content-Length") != "" {
		t.Fatalf("204: %+v %q", resp, body)
	}
	rc.send("GET /trailer HTTP/1.1\r\nHost: site.example\r\n\r\n")
	if resp, body = rc.answer("GET"); body != big || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("trailer: %+v", resp.Trailer)
	}
	// Two requests at once (pipelined): two answers, in order.
	rc.send("GET /small HTTP/1.1\r\nHost: a\r\n\r\nGET /small HTTP/1.1\r\nHost: b\r\n\r\n")
	_, first := rc.answer("GET")
	_, second := rc.answer("GET")
	if !strings.HasPrefix(first, "hello a ") || !strings.HasPrefix(second, "hello b ") {
		t.Fatalf("pipelined: %q then %q", first, second)
	}
	if n := ft.handed.Load(); n != 0 {
		t.Fatalf("%d connections handed to Go's server, want 0", n)
	}
	// The visitor asks to close: the answer says so, and the front end
	// closes.
	rc.send("GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	if resp, _ = rc.answer("GET"); !resp.Close || !rc.closed() {
		t.Fatalf("Connection: close: close=%v", resp.Close)
	}
}

func TestFrontHTTP10(t *testing.T) {
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flush" {
			io.WriteString(w, "streamed")
			w.(http.Flusher).Flush()
			return
		}
		io.WriteString(w, "ok")
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	resp, body := rc.answer("GET")
	if body != "ok" || resp.Close || resp.Header.Get("Connection") != "keep-alive" {
		t.Fatalf("1.0 keep-alive: %+v %q", resp, body)
	}
	// Unknown length on HTTP/1.0: the body ends with the connection.
	rc.send("GET /flush HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	if resp, body = rc.answer("GET"); body != "streamed" || !resp.Close {
		t.Fatalf("1.0 stream: %+v %q", resp, body)
	}
	rc = dialFront(t, ft.addr)
	rc.send("GET / HTTP/1.0\r\n\r\n")
	if resp, body = rc.answer("GET"); body != "ok" || !rc.closed() {
		t.Fatalf("1.0: %+v %q", resp, body)
	}
}

// TestFrontHandsOverTheRest: requests with bodies, upgrades, 100-continue
// and malformed ones are Go's server's, with every byte of them.
func TestFrontHandsOverTheRest(t *testing.T) {
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			line, _ := brw.ReadString('\n')
			brw.WriteString("echo " + line)
			brw.Flush()
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.Path, b)
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := rc.answer("GET"); body != `GET /first ""` {
		t.Fatalf("get: %q", body)
	}
	rc.send("POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
	if _, body := rc.answer("POST"); body != `POST /form "hello"` {
		t.Fatalf("post: %q", body)
	}
	// The rest of the connection is Go's server's.
	rc.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := rc.answer("GET"); body != `GET /after ""` {
		t.Fatalf("get after a post: %q", body)
	}
	rc = dialFront(t, ft.addr)
	rc.send("PUT /up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil || resp.StatusCode != 100 {
		t.Fatalf("100-continue: %v %v", resp, err)
	}
	rc.send("ok")
	if _, body := rc.answer("PUT"); body != `PUT /up "ok"` {
		t.Fatalf("put: %q", body)
	}
	rc = dialFront(t, ft.addr)
	rc.send("GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	if resp, err = http.ReadResponse(rc.br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	rc.send("ping\n")
	if line, err := rc.br.ReadString('\n'); line != "echo ping\n" {
		t.Fatalf("upgraded: %q %v", line, err)
	}
	for _, c := range []struct{ req, status string }{
		{"GET / HTTP/1.1\r\n\r\n", "400"}, // no Host
		{"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "400"},
		{"GARBAGE\r\n\r\n", "400"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("y", frontMaxHeader) + "\r\n\r\n", "431"},
		{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "505"},
	} {
		rc = dialFront(t, ft.addr)
		rc.send(c.req)
		line, _ := rc.br.ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 "+c.status) {
			t.Errorf("%.40q: %q, want %s", c.req, line, c.status)
		}
	}
	if n := ft.handed.Load(); n != 8 {
		t.Fatalf("%d connections handed to Go's server, want 8", n)
	}
}

// TestFrontNoticesAVisitorWhoLeaves: a slow page view's request ends when
// its visitor closes the connection (the proxy's lock with it).
func TestFrontNoticesAVisitorWhoLeaves(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(time.Minute):
			ended <- errors.New("the request outlived its visitor")
		}
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	<-started
	rc.c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestFrontKeepsAPipelinedRequestWhileAPageViewRuns: the background read
// of a slow page view takes the next request's first byte; it is not
// lost, and it does not end the page view.
func TestFrontKeepsAPipelinedRequestWhileAPageViewRuns(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			close(started)
			<-release
		}
		if err := r.Context().Err(); err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
		}
		io.WriteString(w, r.URL.Path)
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
	// The second request comes while the first runs, past the time the
	// background read starts; the first is let go once the front end
	// has the byte (the request is sent in two writes, the first one
	// byte, so the background read can take only that).
	<-started
	rc.send("G")
	waitFor(t, func() bool {
		ft.front.mu.Lock()
		defer ft.front.mu.Unlock()
		for fc := range ft.front.conns {
			fc.r.mu.Lock()
			has := fc.r.hasByte
			fc.r.mu.Unlock()
			if has {
				return true
			}
		}
		return false
	})
	rc.send("ET /two HTTP/1.1\r\nHost: a\r\n\r\n")
	close(release)
	if _, body := rc.answer("GET"); body != "/one" {
		t.Fatalf("first: %q", body)
	}
	if _, body := rc.answer("GET"); body != "/two" {
		t.Fatalf("second: %q", body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

func TestFrontStreamsAndCuts(t *testing.T) {
	next := make(chan struct{})
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			io.WriteString(w, "first\n")
			http.NewResponseController(w).Flush()
			<-next
			io.WriteString(w, "second\n")
		case "/cut":
			io.WriteString(w, strings.Repeat("z", 3*frontBuffered))
			panic(http.ErrAbortHandler)
		case "/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/long":
			w.Header().Set("Content-Length", "2")
			if _, err := io.WriteString(w, "abc"); !errors.Is(err, http.ErrContentLength) {
				t.Errorf("writing past Content-Length: %v", err)
			}
		}
	}))
	rc := dialFront(t, ft.addr)
	rc.send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "first\n" {
		t.Fatalf("first: %q", line)
	}
	close(next)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("rest: %q", rest)
	}
	// Cut, or shorter than its Content-Length (a write past it fails, as
	// with net/http): the visitor never sees a whole answer.
	for _, path := range []string{"/cut", "/short", "/long"} {
		rc = dialFront(t, ft.addr)
		rc.send("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(rc.br, nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
		}
		if err == nil {
			t.Fatalf("%s: a whole answer", path)
		}
	}
}

// TestFrontShutdown: idle connections close, a request in flight is
// answered first, and new connections are refused.
func TestFrontShutdown(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	ft := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(inFlight)
			<-release
		}
		io.WriteString(w, "done")
	}))
	idle := dialFront(t, ft.addr)
	idle.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	idle.answer("GET")
	busy := dialFront(t, ft.addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	<-inFlight
	stopped := make(chan struct{})
	go func() {
		ft.stop(t)
		close(stopped)
	}()
	if !idle.closed() {
		t.Fatal("the idle connection stayed open")
	}
	close(release)
	resp, body := busy.answer("GET")
	if body != "done" || !resp.Close {
		t.Fatalf("in flight: %q close=%v", body, resp.Close)
	}
	<-stopped
	if c, err := net.Dial("tcp", ft.addr); err == nil {
		c.Close()
		t.Fatal("a new connection after Shutdown")
	}
}

// FuzzFrontRequests: whatever a visitor sends, the front end neither
// panics nor stops serving: the connection is answered or handed over,
// and closed at its end; a page view on a new connection is answered
// after it.
//
//	go test ./cmd/internal/cli -run '^$' -fuzz FuzzFrontRequests -fuzztime 20000x
func FuzzFrontRequests(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\nPOST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
		"HEAD / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://other/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHo",
		"\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	ft := startFront(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", ft.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = c.Write(in)
		_ = c.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open after %q", in)
			}
		}
		rc := dialFront(t, ft.addr)
		rc.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
		if _, body := rc.answer("GET"); body != "GET /after 0" {
			t.Fatalf("after %q: %q", in, body)
		}
	})
}
