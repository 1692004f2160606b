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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// pageFront is `sluice proxy`'s HTTP/1.1 front end. It reads each request
// of a connection itself (http.ReadRequest) and answers a page view (GET
// or HEAD of an origin-form URL, no body, no upgrade, no Expect) on the
// connection's goroutine with a writer of its own. net/http's server
// starts a goroutine per request that reads the connection in the
// background, to notice a visitor who leaves, and stops it after the
// answer: wake-ups that cost 25-35 µs a page view on a 2-core machine,
// more than the rest of the proxy. Here that reader starts only when a
// page view runs longer than frontWatchAfter (a slow page, an event
// stream), so that a visitor who leaves still ends the request (and its
// lock) at once after that.
//
// Any other request (a body, an upgrade, 100-continue, HTTP/2, a request
// that does not parse) is handed, with the bytes read of it and the rest
// of its connection, to srv, Go's own server, which answers it (and
// every later request of that connection) as it would have alone: errors
// included (400, 431, 505).
type pageFront struct {
	handler http.Handler
	srv     *http.Server
	log     *slog.Logger
	// readHeaderTimeout bounds the reading of a request once its first
	// byte came; idleTimeout a kept-alive connection's wait for one
	// (zero: none).
	readHeaderTimeout, idleTimeout time.Duration

	handoff *handoffListener

	mu    sync.Mutex
	lis   net.Listener
	conns map[*frontConn]bool // true: a request is being read or served
	// closing is set under mu; every answer reads it (Connection: close),
	// so it is read without mu.
	closing atomic.Bool
	wg      sync.WaitGroup // the connections' goroutines
}

const (
	// frontWatchAfter is how long a page view runs before its connection
	// is read in the background, to notice a visitor who left.
	frontWatchAfter = 5 * time.Millisecond
	// frontMaxHeader bounds a request's head, as net/http's default
	// (http.DefaultMaxHeaderBytes and its 4 KiB of slack).
	frontMaxHeader = http.DefaultMaxHeaderBytes + 4096
	// frontBuffered is what an answer may write before its header goes
	// out: an answer that ends within it gets a Content-Length (net/http
	// does the same, with the same size).
	frontBuffered = 2048
)

// newPageFront serves handler; srv (whose Handler should be handler too)
// answers what the front end hands it.
func newPageFront(handler http.Handler, srv *http.Server, log *slog.Logger) *pageFront {
	return &pageFront{handler: handler, srv: srv, log: log, readHeaderTimeout: srv.ReadHeaderTimeout,
		idleTimeout: srv.IdleTimeout, conns: map[*frontConn]bool{}}
}

// Serve accepts lis's connections until Shutdown or Close (then it
// returns http.ErrServerClosed) or until lis fails for good.
func (f *pageFront) Serve(lis net.Listener) error {
	f.mu.Lock()
	if f.closing.Load() {
		f.mu.Unlock()
		return http.ErrServerClosed
	}
	f.lis = lis
	f.handoff = newHandoffListener(lis.Addr())
	f.mu.Unlock()
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(f.handoff) }()
	defer func() {
		f.handoff.Close()
		<-served
	}()
	var backoff time.Duration
	for {
		c, err := lis.Accept()
		if err != nil {
			if f.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.Is(err, net.ErrClosed) || !errors.As(err, &ne) {
				return err
			}
			// Out of file descriptors and such: wait and try again, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.log.Warn("proxy: accept", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-f.handoff.done:
				t.Stop()
				return http.ErrServerClosed
			}
			continue
		}
		backoff = 0
		fc := &frontConn{f: f, c: c}
		f.mu.Lock()
		if f.closing.Load() {
			f.mu.Unlock()
			c.Close()
			return http.ErrServerClosed
		}
		f.conns[fc] = false
		f.wg.Add(1)
		f.mu.Unlock()
		go fc.serve()
	}
}

func (f *pageFront) isClosing() bool { return f.closing.Load() }

// Shutdown stops accepting, closes the connections that wait for a
// request, and waits for the requests in flight (its own and srv's)
// until ctx ends.
func (f *pageFront) Shutdown(ctx context.Context) error {
	f.stop(false)
	err := f.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		// Close ends the requests, so the waiter above ends too.
		return ctx.Err()
	}
}

// Close closes every connection at once and ends the requests in flight.
func (f *pageFront) Close() error {
	f.stop(true)
	err := f.srv.Close()
	f.wg.Wait()
	return err
}

func (f *pageFront) stop(all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing.Store(true)
	if f.lis != nil {
		f.lis.Close()
	}
	for fc, busy := range f.conns {
		if all || !busy {
			fc.c.Close()
			if all {
				fc.r.abort()
			}
		}
	}
}

// busy marks fc as reading or serving a request (b) or waiting for the
// next; false when the front end closes, and fc must end.
func (f *pageFront) busy(fc *frontConn, b bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing.Load() && !b {
		return false
	}
	f.conns[fc] = b
	return true
}

func (f *pageFront) forget(fc *frontConn) {
	f.mu.Lock()
	delete(f.conns, fc)
	f.mu.Unlock()
	f.wg.Done()
}

// frontConn is one visitor's connection while the front end serves it.
type frontConn struct {
	f      *pageFront
	c      net.Conn
	r      frontReader
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context // the connection's, under every request's
	remote string
	w      frontResponse
}

func (fc *frontConn) serve() {
	defer fc.f.forget(fc)
	handedOff := false
	defer func() {
		if !handedOff {
			fc.c.Close()
		}
	}()
	fc.r.conn, fc.r.limit = fc.c, -1
	fc.r.cond.L = &fc.r.mu
	fc.br = bufio.NewReader(&fc.r)
	fc.bw = bufio.NewWriterSize(fc.c, 4<<10)
	fc.remote = fc.c.RemoteAddr().String()
	fc.ctx = context.WithValue(context.WithValue(context.Background(), http.ServerContextKey, fc.f.srv),
		http.LocalAddrContextKey, fc.c.LocalAddr())
	for {
		if !fc.f.busy(fc, false) {
			return
		}
		fc.r.record(fc.br)
		fc.r.limit = frontMaxHeader
		if d := fc.f.idleTimeout; d > 0 {
			_ = fc.c.SetReadDeadline(time.Now().Add(d))
		} else {
			_ = fc.c.SetReadDeadline(time.Time{})
		}
		if _, err := fc.br.Peek(1); err != nil {
			return // the visitor closed, or stayed idle too long
		}
		if !fc.f.busy(fc, true) {
			return
		}
		if d := fc.f.readHeaderTimeout; d > 0 {
			_ = fc.c.SetReadDeadline(time.Now().Add(d))
		}
		req, err := http.ReadRequest(fc.br)
		fc.r.limit = -1
		_ = fc.c.SetReadDeadline(time.Time{})
		if err != nil || !frontPageView(req) {
			// Go's server reads it again, and answers it.
			handedOff = fc.f.handoff.give(&replayConn{Conn: fc.c, pending: fc.r.recorded()})
			return
		}
		fc.r.recording = false
		if !fc.serveOne(req) {
			return
		}
	}
}

// frontPageView says whether the front end answers req itself: what
// net/http's server would pass to the handler as it is, with no body to
// read and no connection to hand over.
func frontPageView(req *http.Request) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor > 1 || req.Method != http.MethodGet && req.Method != http.MethodHead ||
		req.Body != http.NoBody || len(req.TransferEncoding) > 0 || !strings.HasPrefix(req.RequestURI, "/") ||
		req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	if req.Header["Expect"] != nil || req.Header["Upgrade"] != nil || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// serveOne runs the handler for req and finishes its answer; false: the
// connection ends.
func (fc *frontConn) serveOne(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(fc.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = fc.remote
	w := &fc.w
	w.reset(fc, req)
	fc.r.watchAfter(frontWatchAfter, cancel)
	panicked := fc.run(w, req)
	fc.r.stopWatch()
	if panicked {
		return false
	}
	return w.finish()
}

// run calls the handler; true when it panicked (http.ErrAbortHandler is
// how a handler asks for its connection to be cut).
func (fc *frontConn) run(w http.ResponseWriter, req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				fc.f.log.Error("proxy: panic serving a request", "remote", fc.remote, "panic", fmt.Sprint(v),
					"stack", string(debug.Stack()))
			}
		}
	}()
	fc.f.handler.ServeHTTP(w, req)
	return false
}

// frontReader is the connection as its bufio.Reader reads it. It records
// what is read of a request until the front end knows whether it answers
// it (Go's server gets the bytes otherwise), bounds a request's head, and
// reads in the background while a slow page view runs, to notice a
// visitor who leaves (a byte read then, the next request's, is kept).
type frontReader struct {
	conn      net.Conn
	limit     int // bytes left to read of a request's head; -1: no bound
	recording bool
	rec       []byte

	mu       sync.Mutex
	cond     sync.Cond
	timer    *time.Timer
	armed    bool // the timer may start the background read
	reading  bool // a background read is running
	aborting bool // stopWatch interrupted it
	hasByte  bool
	byteBuf  [1]byte
	err      error              // what the background read met (the visitor left)
	cancel   context.CancelFunc // the request's, when the visitor leaves
}

func (r *frontReader) Read(p []byte) (int, error) {
	if r.limit == 0 {
		return 0, io.EOF
	}
	if r.limit > 0 && len(p) > r.limit {
		p = p[:r.limit]
	}
	var n int
	var err error
	r.mu.Lock()
	switch {
	case r.hasByte:
		p[0], n, r.hasByte = r.byteBuf[0], 1, false
	case r.err != nil:
		err = r.err
	}
	r.mu.Unlock()
	if n == 0 && err == nil {
		n, err = r.conn.Read(p)
	}
	if r.limit > 0 {
		r.limit -= n
	}
	if r.recording {
		r.rec = append(r.rec, p[:n]...)
	}
	return n, err
}

// record starts recording a request: what br holds already, and what is
// read from now on.
func (r *frontReader) record(br *bufio.Reader) {
	buffered, _ := br.Peek(br.Buffered())
	if cap(r.rec) > 64<<10 {
		r.rec = nil // one large head is not kept for the connection's life
	}
	r.rec = append(r.rec[:0], buffered...)
	r.recording = true
}

// recorded is the request's bytes read so far, for Go's server.
func (r *frontReader) recorded() []byte {
	r.recording = false
	return r.rec
}

// watchAfter starts a background read of the connection after d, which
// calls cancel if the visitor leaves.
func (r *frontReader) watchAfter(d time.Duration, cancel context.CancelFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel, r.armed = cancel, true
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.startWatch)
		return
	}
	r.timer.Reset(d)
}

func (r *frontReader) startWatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed || r.reading || r.hasByte || r.err != nil {
		return
	}
	r.reading = true
	go r.watch()
}

func (r *frontReader) watch() {
	n, err := r.conn.Read(r.byteBuf[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == 1 {
		// The next request (pipelined): kept for the reader. Like
		// net/http, a pipelined request does not end this one.
		r.hasByte = true
	}
	var ne net.Error
	switch {
	case err == nil:
	case r.aborting && errors.As(err, &ne) && ne.Timeout():
		// stopWatch's doing.
	default:
		r.err = err
		r.cancel()
	}
	r.reading, r.aborting = false, false
	r.cond.Broadcast()
}

// stopWatch stops the timer and any background read, before the
// connection is read for the next request or closed.
func (r *frontReader) stopWatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	r.timer.Stop()
	if !r.reading {
		return
	}
	r.aborting = true
	_ = r.conn.SetReadDeadline(aLongTimeAgo)
	for r.reading {
		r.cond.Wait()
	}
	_ = r.conn.SetReadDeadline(time.Time{})
}

// abort ends the request in flight (Close).
func (r *frontReader) abort() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed && r.cancel != nil {
		r.cancel()
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// frontResponse is a page view's http.ResponseWriter: HTTP/1.1 framing
// as net/http's server writes it (status line, Date, a Content-Length
// for an answer that ends within its first 2 KiB, chunks otherwise,
// Content-Type sniffed when the handler set none, Connection: close when
// the visitor or the handler asked, or the length is unknown on
// HTTP/1.0).
type frontResponse struct {
	fc     *frontConn
	req    *http.Request
	header http.Header
	head   bool // a HEAD: no body goes out

	wroteHeader bool
	status      int
	committed   bool  // the header went out
	declared    int64 // the handler's Content-Length; -1: none
	written     int64
	chunked     bool
	closeAfter  bool
	pre         []byte // the body before the header goes out
	err         error
}

func (w *frontResponse) reset(fc *frontConn, req *http.Request) {
	pre := w.pre[:0]
	if pre == nil {
		pre = make([]byte, 0, frontBuffered)
	}
	*w = frontResponse{fc: fc, req: req, header: make(http.Header), head: req.Method == http.MethodHead, declared: -1,
		pre: pre}
}

func (w *frontResponse) Header() http.Header { return w.header }

func (w *frontResponse) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer (103 Early Hints): out at once, the
		// real one follows.
		w.writeStatus(code)
		_ = w.header.Write(w.fc.bw)
		_, _ = w.fc.bw.WriteString("\r\n")
		w.flushConn()
		return
	}
	w.wroteHeader, w.status = true, code
	if v := w.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.fc.f.log.Warn("proxy: invalid Content-Length in an answer", "value", v)
			w.header.Del("Content-Length")
		}
	}
}

func (w *frontResponse) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.declared >= 0 && w.written > w.declared {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.pre)+len(p) <= frontBuffered {
			w.pre = append(w.pre, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	w.body(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// FlushError sends what was written (http.ResponseController.Flush).
func (w *frontResponse) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	w.flushConn()
	return w.err
}

// Flush is http.Flusher's.
func (w *frontResponse) Flush() { _ = w.FlushError() }

// finish ends the answer after the handler returned; false: the
// connection must close.
func (w *frontResponse) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	if w.chunked {
		_, _ = w.fc.bw.WriteString("0\r\n")
		w.trailers()
		_, _ = w.fc.bw.WriteString("\r\n")
	}
	w.flushConn()
	if w.err != nil || w.closeAfter {
		return false
	}
	// A body shorter than its Content-Length leaves the visitor waiting
	// for the rest: only closing ends it.
	return w.declared < 0 || w.head || !bodyAllowed(w.status) || w.written == w.declared
}

// commit writes the status line and the header, with the framing the
// answer needs; done: the handler returned, so what is buffered is the
// whole body.
func (w *frontResponse) commit(done bool) {
	w.committed = true
	h := w.header
	_, hasType := h["Content-Type"]
	te := h.Get("Transfer-Encoding")
	allowed := bodyAllowed(w.status)
	var extra [4][2]string
	n := 0
	if _, ok := h["Date"]; !ok {
		extra[n] = [2]string{"Date", time.Now().UTC().Format(http.TimeFormat)}
		n++
	}
	if !hasType && te == "" && allowed && len(w.pre) > 0 {
		extra[n] = [2]string{"Content-Type", http.DetectContentType(w.pre)}
		n++
	}
	length := w.declared
	if length < 0 && done && te == "" && allowed && !(w.head && len(w.pre) == 0) {
		length = int64(len(w.pre))
		extra[n] = [2]string{"Content-Length", strconv.Itoa(len(w.pre))}
		n++
	}
	is11 := w.req.ProtoAtLeast(1, 1)
	w.closeAfter = w.req.Close || httpguts.HeaderValuesContainsToken(h["Connection"], "close") || w.fc.f.isClosing()
	switch {
	case !allowed || w.head:
	case length >= 0:
	case is11 && (te == "" || te == "chunked"):
		w.chunked = true
	default:
		// HTTP/1.0, or a coding other than chunked: the body ends with
		// the connection.
		w.closeAfter = true
	}
	if w.closeAfter {
		if !httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
			extra[n] = [2]string{"Connection", "close"}
			n++
		}
	} else if !is11 && h.Get("Connection") == "" {
		extra[n] = [2]string{"Connection", "keep-alive"}
		n++
	}
	w.writeStatus(w.status)
	// Trailer:-prefixed keys are not valid names: WriteSubset leaves
	// them out.
	_ = h.WriteSubset(w.fc.bw, excludeFraming)
	bw := w.fc.bw
	for _, kv := range extra[:n] {
		_, _ = bw.WriteString(kv[0])
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(kv[1])
		_, _ = bw.WriteString("\r\n")
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	pre := w.pre
	w.pre = w.pre[:0]
	w.body(pre)
}

// excludeFraming: the front end writes Transfer-Encoding itself.
var excludeFraming = map[string]bool{"Transfer-Encoding": true}

func (w *frontResponse) writeStatus(code int) {
	bw := w.fc.bw
	if w.req.ProtoAtLeast(1, 1) {
		_, _ = bw.WriteString("HTTP/1.1 ")
	} else {
		_, _ = bw.WriteString("HTTP/1.0 ")
	}
	var num [3]byte
	_, _ = bw.Write(strconv.AppendInt(num[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(text)
	} else {
		_, _ = bw.WriteString("status code ")
		_, _ = bw.Write(strconv.AppendInt(num[:0], int64(code), 10))
	}
	_, _ = bw.WriteString("\r\n")
}

// body writes p as the framing says.
func (w *frontResponse) body(p []byte) {
	if len(p) == 0 || w.head || !bodyAllowed(w.status) || w.err != nil {
		return
	}
	bw := w.fc.bw
	if w.chunked {
		var size [16]byte
		_, _ = bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	if _, err := bw.Write(p); err != nil {
		w.err = err
		return
	}
	if w.chunked {
		_, _ = bw.WriteString("\r\n")
	}
}

// trailers writes the trailer fields the handler announced (Trailer)
// or set with http.TrailerPrefix.
func (w *frontResponse) trailers() {
	bw := w.fc.bw
	for _, k := range w.header["Trailer"] {
		for _, name := range strings.Split(k, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			for _, v := range w.header[name] {
				writeField(bw, name, v)
			}
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vv {
				writeField(bw, name, v)
			}
		}
	}
}

func writeField(bw *bufio.Writer, name, v string) {
	if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(v) {
		return
	}
	_, _ = bw.WriteString(name)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

func (w *frontResponse) flushConn() {
	if w.err != nil {
		return
	}
	if err := w.fc.bw.Flush(); err != nil {
		w.err = err
	}
}

// bodyAllowed: an answer of this status may have a body (RFC 9110).
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}

// handoffListener is how the front end gives Go's server a connection.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c over; false when the server is gone (c is not taken).
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// replayConn is a connection whose first bytes were read already: Read
// gives them first.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
