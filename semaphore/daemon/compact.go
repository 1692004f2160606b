package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// apiMux serves the API's Unix socket: a connection that opens with
// api.CompactPreface or api.CompactPreface2 speaks the compact protocol,
// version 1 or 2 (see semaphore/api's compact.go), any other goes to the
// HTTP server through HTTP(). With a lock granted on the agent's shared
// read ticket, HTTP and JSON are most of a page view's cost; the Go
// client and the middleware use the compact calls, everything else HTTP.
type apiMux struct {
	lis  net.Listener
	node *Node
	http *handoffListener
	// access, when set, gives each connection's caller its roles, from
	// the kernel's word on its peer (nil: every caller may do everything).
	access *Access

	mu     sync.Mutex
	conns  map[net.Conn]bool // connections being routed or served compact
	closed bool
	wg     sync.WaitGroup
}

// prefaceWait bounds how long a new connection may take to say which
// protocol it speaks (the HTTP server's header timeout is as long).
const prefaceWait = 10 * time.Second

func newAPIMux(lis net.Listener, node *Node, access *Access) *apiMux {
	m := &apiMux{lis: lis, node: node, access: access, conns: map[net.Conn]bool{},
		http: &handoffListener{addr: lis.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}}
	m.http.mux = m
	return m
}

// HTTP is the listener the HTTP server serves: the connections that are
// not compact. Closing it closes the mux.
func (m *apiMux) HTTP() net.Listener { return m.http }

// run accepts connections until the socket closes.
func (m *apiMux) run() {
	defer m.close()
	for {
		c, err := m.lis.Accept()
		if err != nil {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// route reads the first bytes of c to pick its protocol.
func (m *apiMux) route(c net.Conn) {
	// Tracked until it is handed over, so that closing the mux does not
	// wait for a silent connection's preface deadline.
	if !m.track(c, true) {
		_ = c.Close()
		return
	}
	caller := m.caller(c)
	_ = c.SetReadDeadline(time.Now().Add(prefaceWait))
	br := bufio.NewReaderSize(c, 4096)
	head, err := br.Peek(len(api.CompactPreface))
	if version := api.CompactVersion(head); err == nil && version > 0 {
		_, _ = br.Discard(len(head))
		_ = c.SetReadDeadline(time.Time{})
		m.serveCompact(c, br, caller, version)
		return
	}
	// HTTP (or garbage, which HTTP refuses): what was read goes with it,
	// and the HTTP server owns it from here.
	m.track(c, false)
	if !m.http.deliver(&peekedConn{Conn: c, r: br, caller: caller}) {
		_ = c.Close()
	}
}

// caller is who is at the other end of c, with its roles: nil without
// an Access; a caller with none when the kernel does not say.
func (m *apiMux) caller(c net.Conn) *Caller {
	if m.access == nil {
		return nil
	}
	uid, gid, pid, err := peerCred(c)
	if err != nil {
		m.node.log.Warn("an API caller whose credentials cannot be read may do nothing", "err", err)
		return &Caller{}
	}
	return m.access.Peer(uid, gid, pid)
}

// serveCompact answers c's calls, one at a time and in order, until it
// closes; version is the protocol's, from the preface.
func (m *apiMux) serveCompact(c net.Conn, br *bufio.Reader, caller *Caller, version int) {
	base := context.Background()
	if caller != nil {
		base = WithCaller(base, caller)
	}
	var sent []sentRelease
	defer func() {
		m.track(c, false)
		_ = c.Close()
		m.settleReleases(base, sent, true)
	}()
	var (
		out []byte
		req api.CompactRequest // its name's string is kept from call to call
	)
	for {
		sent = m.settleReleases(base, sent, false)
		err := api.ReadRequestInto(br, &req)
		if errors.Is(err, io.EOF) {
			return
		}
		if err == nil && req.Op == api.OpReleaseNoReply && version < 2 {
			err = fmt.Errorf("%w: operation %d is of version 2, the connection's is %d", api.ErrCompact, req.Op, version)
		}
		if err != nil {
			out = api.AppendReply(out[:0], &api.CompactReply{Error: "bad_request", Message: err.Error()})
			_, _ = c.Write(out)
			return
		}
		if req.Op == api.OpReleaseNoReply {
			// On the loop before the next frame is read, so that the
			// client's next call on the connection comes after it, as it
			// was sent; its answer is taken later (settleReleases).
			if s, ok := m.sendReleaseNoReply(base, req); ok {
				sent = append(sent, s)
			}
			continue
		}
		if req.Op != api.OpAcquire || req.Try {
			// A call that does not wait (a try, a release, a renewal) is
			// answered as it comes: a try's grant whose answer cannot be
			// written is given back, as a call abandoned after the grant.
			reply := m.call(base, req)
			// The loop took the releases sent before the call first: the
			// answers of those it answered at once are counted before this
			// one leaves.
			sent = m.settleReleases(base, sent, false)
			out = api.AppendReply(out[:0], &reply)
			if _, err := c.Write(out); err != nil {
				if req.Op == api.OpAcquire && reply.Lease != "" {
					m.giveBack(reply.Lease)
				}
				return
			}
			continue
		}
		// The client going away abandons a waiting call, as HTTP's does:
		// the next bytes are the next call's, or the end of the connection.
		ctx, cancel := context.WithCancel(base)
		next := make(chan error, 1)
		go func() {
			_, err := br.Peek(1)
			if err != nil {
				cancel()
			}
			next <- err
		}()
		reply := m.call(ctx, req)
		sent = m.settleReleases(base, sent, false)
		out = api.AppendReply(out[:0], &reply)
		_, werr := c.Write(out)
		err = <-next
		cancel()
		if werr != nil || err != nil {
			return
		}
	}
}

// call runs one compact call on the node.
func (m *apiMux) call(ctx context.Context, req api.CompactRequest) api.CompactReply {
	var (
		l   Lease
		err error
	)
	switch req.Op {
	case api.OpAcquire:
		var r Request
		if r, err = compactAcquire(req); err == nil {
			l, err = m.node.Acquire(ctx, r)
		}
	case api.OpRelease:
		err = m.node.Release(ctx, req.Lease, req.Name)
		l.ID = req.Lease
	case api.OpRenew:
		// The lease as the client knows it: an agent that restarted since
		// the grant takes it over with that (Node.RenewHeld).
		as := Held{Name: req.Name, Duration: req.Duration, Grace: req.Grace}
		if req.Mode != "" {
			as.Mode, err = semaphore.ParseMode(req.Mode)
		}
		if err == nil {
			l, err = m.node.RenewHeld(ctx, req.Lease, as)
		}
	}
	if err != nil {
		return api.CompactReply{Error: codes.Of(err).Code, Message: err.Error()}
	}
	return api.CompactReply{LeaseJSON: api.LeaseJSON{Lease: l.ID, Name: l.Name, Mode: l.Mode.String(), Token: l.Token},
		TTLNanos: l.TTL}
}

// sentRelease is a release its client does not wait for, handed to the
// loop at at; its answer comes on done.
type sentRelease struct {
	req    api.CompactRequest
	done   chan error
	writer *atomic.Pointer[Request]
	at     time.Time
}

// maxSentReleases bounds a connection's releases whose answers are not
// in: past it, the connection waits for the oldest before it reads on.
const maxSentReleases = 64

// sendReleaseNoReply hands a release its client does not wait for to the
// loop. The connection's goroutine does not wait for the answer, which
// would cost it a wake-up a page view: settleReleases takes it later. A
// release that could not be handed over has failed, and is counted now.
func (m *apiMux) sendReleaseNoReply(base context.Context, req api.CompactRequest) (sentRelease, bool) {
	s := sentRelease{req: req, writer: new(atomic.Pointer[Request]), at: time.Now()}
	done, err := m.node.sendRelease(base, req.Lease, req.Name, s.writer, m.node.sendBounded)
	if err != nil {
		m.releaseAnswered(base, s, err)
		return s, false
	}
	s.done = done
	return s, true
}

// settleReleases takes the answers of sent releases, oldest first: those
// already in, and when wait (or past maxSentReleases), the others too,
// each within giveBackWait of its sending. It returns those still out.
func (m *apiMux) settleReleases(base context.Context, sent []sentRelease, wait bool) []sentRelease {
	i := 0
settle:
	for ; i < len(sent); i++ {
		s := sent[i]
		var err error
		select {
		case err = <-s.done:
		default:
			left := giveBackWait - time.Since(s.at)
			if !wait && len(sent)-i <= maxSentReleases && left > 0 {
				break settle
			}
			ctx, cancel := context.WithTimeout(base, max(left, 0))
			err = m.node.released(ctx, s.req.Lease, s.done)
			cancel()
		}
		m.releaseAnswered(base, s, err)
	}
	n := copy(sent, sent[i:])
	clear(sent[n:])
	return sent[:n]
}

// releaseAnswered finishes a release its client does not wait for, whose
// loop turn answered err. A failure reaches no client: it is counted and
// logged, and the lease ends at its expiry at the latest.
func (m *apiMux) releaseAnswered(base context.Context, s sentRelease, err error) {
	if errors.Is(err, errNameNeeded) {
		ctx, cancel := context.WithTimeout(base, giveBackWait)
		err = m.node.releaseAnswered(ctx, s.req.Lease, s.writer, err)
		cancel()
	}
	m.node.auditRelease(base, s.req.Lease, s.writer, err)
	if err == nil {
		return
	}
	code := codes.Of(err).Code
	m.node.metrics.releasesUnanswered.WithLabelValues(code).Inc()
	level := slog.LevelWarn
	if errors.Is(err, semaphore.ErrUnknownLease) {
		level = slog.LevelInfo // ended already (expired, revoked): nothing is held
	}
	m.node.log.Log(base, level, "a release sent without waiting for its answer failed; the lease ends at its expiry",
		"lease", s.req.Lease, "name", s.req.Name, "code", code, "err", err)
}

// giveBack releases a lease whose grant could not be told to its client.
func (m *apiMux) giveBack(lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), giveBackWait)
	defer cancel()
	if err := m.node.Release(ctx, lease, ""); err != nil {
		m.node.log.Debug("a lease whose grant was not delivered is released at its expiry", "lease", lease, "err", err)
	}
}

// giveBackWait bounds the release of a grant nobody heard of.
const giveBackWait = 5 * time.Second

// track adds c to the connections close ends (false once closed), or
// removes it.
func (m *apiMux) track(c net.Conn, add bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !add {
		delete(m.conns, c)
		return true
	}
	if m.closed {
		return false
	}
	m.conns[c] = true
	return true
}

// close stops accepting, ends the compact connections and the HTTP
// listener, and waits for the connections' goroutines.
func (m *apiMux) close() {
	m.mu.Lock()
	already := m.closed
	m.closed = true
	for c := range m.conns {
		_ = c.Close()
	}
	m.mu.Unlock()
	if already {
		return
	}
	_ = m.lis.Close()
	m.http.shut()
}

// wait waits for every connection's goroutine to end (after close).
func (m *apiMux) wait() { m.wg.Wait() }

// handoffListener is a net.Listener whose connections the mux hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mux   *apiMux
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close is the HTTP server's: it closes the whole socket.
func (l *handoffListener) Close() error {
	l.shut()
	if l.mux != nil {
		l.mux.close()
	}
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

func (l *handoffListener) shut() { l.once.Do(func() { close(l.done) }) }

// deliver hands c to the HTTP server; false once it is closed.
func (l *handoffListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r      *bufio.Reader
	caller *Caller
}

// ConnContext is the HTTP server's: a request carries its connection's
// caller (WithCaller).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peekedConn); ok && pc.caller != nil {
		return WithCaller(ctx, pc.caller)
	}
	return ctx
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
