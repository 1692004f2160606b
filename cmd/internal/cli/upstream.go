package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamTransport is the proxy's way to an http:// upstream. A page
// view (GET, HEAD or OPTIONS without a body, no upgrade, no Expect) is
// written and answered on the request's own goroutine, over kept-alive
// connections of its own: Go's transport hands every request to a
// connection's writer and reader goroutines and back, wake-ups that cost
// 15-50 µs of the 120-140 µs a bare httputil.ReverseProxy in a process of
// its own adds on a 2-core machine. Everything else (bodies, upgrades,
// 100-continue, https) goes through Go's transport, which handles them.
//
// A page view may be sent again once, on a new connection, when a kept
// connection fails before any byte of an answer: the upstream closed it
// while it was idle. That is what Go's transport does for such requests,
// which are replayable: they have no body and their methods are safe.
type upstreamTransport struct {
	fallback *http.Transport
	// host is the upstream URL's host as requests carry it; addr is
	// where to dial it (host with the port of the scheme when it has
	// none).
	host, addr string
	dialer     *net.Dialer
	// headerTimeout bounds the wait for an answer's header (0: none).
	headerTimeout time.Duration
	// maxIdle and idleTimeout bound the kept connections: how many, and
	// for how long one unused is kept.
	maxIdle     int
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*upstreamConn // the most recently used last
	closed bool
}

// upstreamConn is a connection to the upstream and its buffers.
type upstreamConn struct {
	net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// errUpstreamSilent: the upstream closed a connection before answering.
var errUpstreamSilent = errors.New("the upstream closed the connection without an answer")

func newUpstreamTransport(up *url.URL, fallback *http.Transport, dialer *net.Dialer, headerTimeout time.Duration) *upstreamTransport {
	addr := up.Host
	if up.Port() == "" {
		addr = net.JoinHostPort(up.Hostname(), "80")
	}
	return &upstreamTransport{fallback: fallback, host: up.Host, addr: addr, dialer: dialer,
		headerTimeout: headerTimeout, maxIdle: fallback.MaxIdleConnsPerHost, idleTimeout: fallback.IdleConnTimeout}
}

// pageView says whether r is one this transport answers itself.
func (t *upstreamTransport) pageView(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	return r.URL.Scheme == "http" && r.URL.Host == t.host && (r.Body == nil || r.Body == http.NoBody) &&
		r.ContentLength == 0 && len(r.TransferEncoding) == 0 && r.Header.Get("Upgrade") == "" &&
		r.Header.Get("Expect") == "" && len(r.Trailer) == 0
}

func (t *upstreamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !t.pageView(r) {
		return t.fallback.RoundTrip(r)
	}
	ctx := r.Context()
	c, kept, err := t.conn(ctx, true)
	if err != nil {
		return nil, err
	}
	resp, err := t.exchange(ctx, c, r)
	if err != nil && kept && errors.Is(err, errUpstreamSilent) && ctx.Err() == nil {
		if c, _, err = t.conn(ctx, false); err != nil {
			return nil, err
		}
		resp, err = t.exchange(ctx, c, r)
	}
	return resp, err
}

// conn is a kept connection (kept true) when reuse allows one and there
// is, or a new one.
func (t *upstreamTransport) conn(ctx context.Context, reuse bool) (c *upstreamConn, kept bool, err error) {
	now := time.Now()
	var stale []*upstreamConn
	t.mu.Lock()
	for reuse && c == nil && len(t.idle) > 0 {
		last := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if t.idleTimeout > 0 && now.Sub(last.idleSince) > t.idleTimeout {
			stale = append(stale, last)
			continue
		}
		c = last
	}
	t.mu.Unlock()
	for _, s := range stale {
		_ = s.Close()
	}
	if c != nil {
		return c, true, nil
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, false, err
	}
	return &upstreamConn{Conn: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, false, nil
}

// exchange sends r on c and reads the answer's header. The answer's body
// gives c back (or closes it) when it is read to its end or closed; on an
// error c is closed. An error that is errUpstreamSilent left nothing
// answered, so the request may be sent again.
func (t *upstreamTransport) exchange(ctx context.Context, c *upstreamConn, r *http.Request) (*http.Response, error) {
	// The request's end (the visitor left, its lock was lost) closes the
	// connection under whatever waits on it.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, err
	}
	if err := r.Write(c.bw); err != nil {
		return fail(fmt.Errorf("%w: %w", errUpstreamSilent, err))
	}
	if err := c.bw.Flush(); err != nil {
		return fail(fmt.Errorf("%w: %w", errUpstreamSilent, err))
	}
	if t.headerTimeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(t.headerTimeout))
	}
	if _, err := c.br.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fail(fmt.Errorf("timeout awaiting response headers: %w", err))
		}
		return fail(fmt.Errorf("%w: %w", errUpstreamSilent, err))
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, r); err != nil {
			return fail(err)
		}
		// An informational answer (103 Early Hints) comes before the
		// real one; a switch of protocols was not asked for.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return fail(errors.New("the upstream switched protocols unasked"))
	}
	_ = c.SetReadDeadline(time.Time{})
	b := &upstreamBody{ReadCloser: resp.Body, t: t, c: c, stop: stop, keep: !resp.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// put keeps c for the next page view, or closes it when enough are kept.
func (t *upstreamTransport) put(c *upstreamConn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if !t.closed && len(t.idle) < max(t.maxIdle, 1) {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// CloseIdleConnections closes the kept connections, and every one given
// back later: the proxy is shutting down.
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.closed = nil, true
	t.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
	t.fallback.CloseIdleConnections()
}

// upstreamBody is an answer's body: read to its end, it gives its
// connection back to be kept; closed before, it closes the connection
// (what is left of the answer would come first on it).
type upstreamBody struct {
	io.ReadCloser
	t    *upstreamTransport
	c    *upstreamConn
	stop func() bool
	keep bool
	done atomic.Bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	b.finish(false)
	return nil
}

// finish ends the body once: read to its end, the connection is kept
// unless the answer said to close it, the request ended meanwhile (its
// context closed the connection), or the upstream sent more than asked.
func (b *upstreamBody) finish(atEnd bool) {
	if b.done.Swap(true) {
		return
	}
	if b.stop() && atEnd && b.keep && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	_ = b.c.Close()
}
