package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// compactCall is a call a compactFake read: the connection's version and
// the request.
type compactCall struct {
	version int
	req     api.CompactRequest
}

// compactFake is an agent's socket that speaks the compact protocol up to
// version max and answers everything else as the agent does: through an
// HTTP server, which refuses a preface it does not know as a malformed
// request. It grants every acquire and every release, and reports each
// call, and each preface HTTP got, on calls and refused.
type compactFake struct {
	max     int
	calls   chan compactCall
	refused chan string
	lis     net.Listener
	conns   chan net.Conn // to the HTTP server
	done    chan struct{}
	wg      sync.WaitGroup
}

func startCompactFake(t *testing.T, max int) (*compactFake, *client.Client) {
	t.Helper()
	lis := fakeSocket(t)
	f := &compactFake{max: max, calls: make(chan compactCall, 100), refused: make(chan string, 100), lis: lis,
		conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		_ = srv.Serve(f)
	}()
	go func() {
		defer f.wg.Done()
		f.accept()
	}()
	c, err := client.New(client.Config{API: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		_ = srv.Close() // closes f, and so the socket
		f.wg.Wait()
	})
	return f, c
}

func (f *compactFake) accept() {
	for {
		c, err := f.lis.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.route(c)
		}()
	}
}

func (f *compactFake) route(c net.Conn) {
	br := bufio.NewReader(c)
	head, err := br.Peek(len(api.CompactPreface))
	if err != nil {
		_ = c.Close()
		return
	}
	if v := api.CompactVersion(head); v > 0 && v <= f.max {
		_, _ = br.Discard(len(head))
		f.serve(c, br, v)
		return
	}
	f.refused <- string(head)
	select {
	case f.conns <- &readerConn{Conn: c, r: br}:
	case <-f.done:
		_ = c.Close()
	}
}

// serve answers c's calls; a release without an answer gets none.
func (f *compactFake) serve(c net.Conn, br *bufio.Reader, version int) {
	defer c.Close()
	go func() { // the fake's end ends its connections
		<-f.done
		_ = c.Close()
	}()
	for {
		req, err := api.ReadRequest(br)
		if err != nil {
			return
		}
		f.calls <- compactCall{version, req}
		var reply api.CompactReply
		switch req.Op {
		case api.OpReleaseNoReply:
			continue
		case api.OpAcquire:
			reply = api.CompactReply{LeaseJSON: api.LeaseJSON{Lease: "1.1.1", Name: req.Name, Mode: req.Mode, Token: 1},
				TTLNanos: time.Minute}
		}
		if _, err := c.Write(api.AppendReply(nil, &reply)); err != nil {
			return
		}
	}
}

// The listener the HTTP server serves.
func (f *compactFake) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *compactFake) Close() error {
	select {
	case <-f.done:
	default:
		close(f.done)
		_ = f.lis.Close()
	}
	return nil
}

func (f *compactFake) Addr() net.Addr { return f.lis.Addr() }

type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// next is the fake's next call.
func (f *compactFake) next(t *testing.T) compactCall {
	t.Helper()
	select {
	case call := <-f.calls:
		return call
	case <-time.After(settle):
		t.Fatal("no call reached the fake agent")
		return compactCall{}
	}
}

// An agent of version 1 refuses version 2's preface as HTTP: the client
// sends the call again on version 1, keeps to it, and releases with an
// answer there, ReleaseNoWait as Release; the middleware works as before.
func TestCompactFallsBackToVersion1(t *testing.T) {
	f, c := startCompactFake(t, 1)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/v1", semaphore.ReadOnly, client.Options{Try: true})
	if err != nil {
		t.Fatalf("acquire from an agent of version 1: %v", err)
	}
	if got := <-f.refused; got != string(api.CompactPreface2) {
		t.Fatalf("the preface HTTP got: %q", got)
	}
	if call := f.next(t); call.version != 1 || call.req.Op != api.OpAcquire || call.req.Name != "/v1" {
		t.Fatalf("the acquire, sent again: %+v", call)
	}
	if err := l.ReleaseNoWait(ctx); err != nil {
		t.Fatal(err)
	}
	if call := f.next(t); call.version != 1 || call.req.Op != api.OpRelease || call.req.Lease != "1.1.1" {
		t.Fatalf("the release: %+v, want an answered release on version 1", call)
	}
	if !client.UsesCompact(c) || client.ReleasesNoReply(c) {
		t.Fatalf("compact %v, releases without an answer %v", client.UsesCompact(c), client.ReleasesNoReply(c))
	}
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{LeasePerRequest: true})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })))
	defer srv.Close()
	if got := get(t, srv, "GET"); got.status != 200 || got.body != "hello" {
		t.Fatalf("a page view: %+v", got)
	}
	for _, op := range []byte{api.OpAcquire, api.OpRelease} {
		if call := f.next(t); call.version != 1 || call.req.Op != op {
			t.Fatalf("the page view's call %+v, want operation %d on version 1", call, op)
		}
	}
	if len(f.refused) != 0 {
		t.Fatalf("version 2 asked again: %q", <-f.refused)
	}
}

// On an agent of version 2, a page view is one answered call (the try)
// and a release without an answer, on the same connection.
func TestMiddlewareReleasesWithoutAnswer(t *testing.T) {
	f, c := startCompactFake(t, 2)
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{LeasePerRequest: true})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })))
	defer srv.Close()
	for i := range 3 {
		if got := get(t, srv, "GET"); got.status != 200 || got.body != "hello" {
			t.Fatalf("page view %d: %+v", i, got)
		}
		if call := f.next(t); call.version != 2 || call.req.Op != api.OpAcquire || !call.req.Try {
			t.Fatalf("page view %d's try: %+v", i, call)
		}
		// The try's answer told the client the agent's version.
		if call := f.next(t); call.version != 2 || call.req.Op != api.OpReleaseNoReply || call.req.Lease != "1.1.1" ||
			call.req.Name != "/site" {
			t.Fatalf("page view %d's release: %+v, want one without an answer", i, call)
		}
	}
	if len(f.refused) != 0 {
		t.Fatalf("prefaces refused: %q", <-f.refused)
	}
}

// A release without an answer releases: a writer that waits gets the
// lock, and the releaser's next call on its connection comes after it.
func TestReleaseNoWaitReleases(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/nw", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	if !client.ReleasesNoReply(c) {
		t.Fatal("the agent's version 2 is not known after an answered call")
	}
	// A writer of another client waits for the lock.
	w, err := client.New(client.Config{API: c.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan error, 1)
	go func() {
		wl, err := w.Acquire(ctx, "/nw", semaphore.Exclusive, client.Options{Timeout: settle})
		if err == nil {
			err = wl.Release(ctx)
		}
		got <- err
	}()
	waitRequests(t, c, "/nw", 2)
	if err := l.ReleaseNoWait(ctx); err != nil {
		t.Fatalf("release without an answer: %v", err)
	}
	if err := l.Err(); err != nil || !isClosed(l.Done()) {
		t.Fatalf("the lease after ReleaseNoWait: done %v, err %v", isClosed(l.Done()), err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting writer: %v", err)
	}
	// Released twice is released once, without a word.
	if err := l.ReleaseNoWait(ctx); err != nil {
		t.Fatal(err)
	}
	// One connection for one caller: the try after the release rides
	// behind it.
	l2, err := c.Acquire(ctx, "/nw2", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.ReleaseNoWait(ctx); err != nil {
		t.Fatal(err)
	}
	if l3, err := c.Acquire(ctx, "/nw2", semaphore.Exclusive, client.Options{Try: true}); err != nil {
		t.Fatalf("a try after a release without an answer, on its connection: %v", err)
	} else if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitRequests polls name's requests at c's agent until there are n.
func waitRequests(t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	ctx := ctxT(t)
	for {
		tab, err := c.Locks(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Requests) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d requests on %s, want %d", len(tab.Requests), name, n)
		case <-time.After(10 * time.Millisecond): // polling a list that has no signal of its own
		}
	}
}

// A release without an answer that fails reaches no client: the agent
// counts it by code, and goes on serving the connection. Version 1 has no
// such release: it is a bad request there.
func TestReleaseNoReplyFailureCounted(t *testing.T) {
	a, c := startAgent(t)
	ctx := ctxT(t)
	conn := dialAPI(t, a)
	var out []byte
	out = append(out, api.CompactPreface2...)
	out = api.AppendRequest(out, &api.CompactRequest{Op: api.OpReleaseNoReply, Lease: "1.1.1", Name: "/gone"})
	out = api.AppendRequest(out, &api.CompactRequest{Op: api.OpAcquire, Name: "/after", Mode: "read-only", Try: true})
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	reply, err := api.ReadReply(br)
	if err != nil || reply.Error != "" || reply.Name != "/after" {
		t.Fatalf("the answer after a failed release without one: %+v, %v", reply, err)
	}
	m := metricsOf(t, ctx, c)
	if want := `sluice_api_unanswered_release_failures_total{code="unknown_lease"} 1`; !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}

	v1, err := net.Dial("unix", a.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer v1.Close()
	_ = v1.SetDeadline(time.Now().Add(settle))
	out = append(append(out[:0], api.CompactPreface...),
		api.AppendRequest(nil, &api.CompactRequest{Op: api.OpReleaseNoReply, Lease: "1.1.1"})...)
	if _, err := v1.Write(out); err != nil {
		t.Fatal(err)
	}
	br = bufio.NewReader(v1)
	if reply, err := api.ReadReply(br); err != nil || reply.Error != "bad_request" {
		t.Fatalf("a release without an answer on version 1: %+v, %v; want bad_request", reply, err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the version 1 connection after a bad request: %v, want its end", err)
	}
}

// Releases without an answer sent back to back, more than a connection
// keeps unanswered: each is taken and counted, and the call after them is
// answered after all of them ran.
func TestReleasesNoReplyInARow(t *testing.T) {
	a, c := startAgent(t)
	ctx := ctxT(t)
	conn := dialAPI(t, a)
	const releases = 150 // past the 64 a connection keeps unanswered
	out := append([]byte(nil), api.CompactPreface2...)
	for i := range releases {
		out = api.AppendRequest(out, &api.CompactRequest{Op: api.OpReleaseNoReply, Lease: fmt.Sprintf("1.1.%d", i+1), Name: "/gone"})
	}
	out = api.AppendRequest(out, &api.CompactRequest{Op: api.OpAcquire, Name: "/after", Mode: "read-only", Try: true})
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	reply, err := api.ReadReply(bufio.NewReader(conn))
	if err != nil || reply.Error != "" || reply.Name != "/after" {
		t.Fatalf("the answer after %d releases without one: %+v, %v", releases, reply, err)
	}
	want := fmt.Sprintf(`sluice_api_unanswered_release_failures_total{code="unknown_lease"} %d`, releases)
	if m := metricsOf(t, ctx, c); !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// dialAPI opens a raw connection to a's socket, closed at the test's end,
// with a deadline of settle.
func dialAPI(t *testing.T, a *daemon.Agent) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", a.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(settle))
	return conn
}

// metricsOf is the agent's /metrics.
func metricsOf(t *testing.T, ctx context.Context, c *client.Client) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Addr())
	}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://sluice/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatal(fmt.Errorf("metrics: %d %v", resp.StatusCode, err))
	}
	return string(b)
}
