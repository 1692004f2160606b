package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/api"
)

// compactPool keeps idle connections of the compact protocol to the
// agent's Unix socket (see semaphore/api's compact.go): acquire, release
// and renew go over them; everything else over HTTP.
type compactPool struct {
	addr string
	// mu guards idle and the held releases' flush (held, flushArmed,
	// flushTimer).
	mu sync.Mutex
	// idle is a stack: the connection put back last is taken first, so
	// that a release held on it goes out with the next call, and the
	// agent's goroutines of the others stay parked.
	idle []*compactConn
	// held are the connections put back with releases not written yet
	// (some may have been taken and written since); flushHeld writes
	// them heldFor after the first, unless a call took them first.
	held       []*compactConn
	heldFor    time.Duration // heldFor, or a test's
	flushArmed bool
	flushTimer *time.Timer
	// resend gives back, answered and in the background, the releases a
	// failed write held (the Client's resendReleases); nil: dropped (the
	// leaders drop their leases at expiry).
	resend func([]api.CompactRequest)
	// version is the protocol's version the agent answered: 0 until it
	// answered one (new connections offer 2), 1 once it refused 2 (they
	// offer 1), 2 once it answered on 2. An agent that goes away may come
	// back as another release: it is asked again (0).
	version atomic.Int32
	// http: the agent does not speak the compact protocol (an older
	// one answered HTTP): every call goes over HTTP from then on.
	http atomic.Bool
}

// maxIdleCompact bounds the idle connections. A busy frontend has about
// as many calls in flight as page views at once (200 concurrent clients:
// 200), and a connection closed on its return is dialled again by the
// next burst, an accept and a goroutine at the agent each time (with 64,
// one page view in fifteen); an idle one costs the agent a parked
// goroutine.
const maxIdleCompact = 256

// heldFor bounds how long a release without an answer waits for the
// next call on its connection, which takes it along in one write (and
// the agent reads both at once): a busy frontend's next page view comes
// within microseconds; an idle one's release goes alone after heldFor.
// A drain's writer waits for the last page view's release, so this is
// a small part of the drain's budget.
const heldFor = 200 * time.Microsecond

// maxHeld bounds the releases held on one connection: more are written
// at once.
const maxHeld = 32

type compactConn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
	// held are the releases in buf, not written yet: they go with the
	// next call's write, or the pool's flush. Whoever took the
	// connection from the pool has them to itself.
	held    []api.CompactRequest
	pool    *compactPool // for the releases of a failed write; may be nil
	version int32        // of the preface it opened with
	fresh   bool         // no call answered on it yet
	// spoiled: a call's context ended as the call did, and its deadline
	// in the past may be on the connection (or about to be): not reused.
	spoiled bool
}

func newCompactPool(addr string) *compactPool {
	return &compactPool{addr: addr, heldFor: heldFor}
}

// errSpeaksHTTP: the agent answered the preface as HTTP.
var errSpeaksHTTP = errors.New("client: the agent speaks HTTP only")

// get is an idle connection, or a new one.
func (p *compactPool) get(ctx context.Context) (*compactConn, error) {
	if cc := p.takeIdle(); cc != nil {
		return cc, nil
	}
	return p.dial(ctx)
}

// takeIdle is the connection put back last, or nil.
func (p *compactPool) takeIdle() *compactConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	cc := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return cc
}

// dial is a new connection.
func (p *compactPool) dial(ctx context.Context) (*compactConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", p.addr)
	if err != nil {
		return nil, err
	}
	cc := &compactConn{c: c, br: bufio.NewReaderSize(c, 4096), pool: p, version: 2, fresh: true}
	if p.version.Load() == 1 {
		cc.version = 1
	}
	// The preface goes with the first call, in one write.
	cc.buf = append(cc.buf, api.CompactPreface2...)
	if cc.version == 1 {
		cc.buf = append(cc.buf[:0], api.CompactPreface...)
	}
	return cc, nil
}

// put keeps cc for the next call, or closes it when enough are idle.
func (p *compactPool) put(cc *compactConn) {
	if cc.fresh {
		// Its first answer came: the agent speaks cc's version.
		p.version.CompareAndSwap(0, cc.version)
	}
	cc.fresh = false
	p.keep(cc)
}

// keep keeps cc as it is, or closes it (its held releases written) when
// enough are idle.
func (p *compactPool) keep(cc *compactConn) {
	p.mu.Lock()
	if len(p.idle) < maxIdleCompact {
		p.idle = append(p.idle, cc)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = cc.flush()
	_ = cc.c.Close()
}

// hold keeps cc, on which a release waits in buf, and has it written
// within heldFor if no call takes it first.
func (p *compactPool) hold(cc *compactConn) {
	p.mu.Lock()
	if len(p.idle) == maxIdleCompact {
		p.mu.Unlock()
		_ = cc.flush()
		_ = cc.c.Close()
		return
	}
	p.idle = append(p.idle, cc)
	p.held = append(p.held, cc)
	if !p.flushArmed {
		p.flushArmed = true
		if p.flushTimer == nil {
			p.flushTimer = time.AfterFunc(p.heldFor, p.flushHeld)
		} else {
			p.flushTimer.Reset(p.heldFor)
		}
	}
	p.mu.Unlock()
}

// flushHeld writes the releases still held on the connections hold
// kept, those no call took meanwhile (a call's write takes them along).
// It takes each from the idle ones while it writes, so that no call
// shares the connection.
func (p *compactPool) flushHeld() {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.flushArmed = false
	var mine []*compactConn
	for i, cc := range held {
		held[i] = nil
		// A connection a call took is the call's (its write took the
		// releases along); an idle one is the pool's, under mu.
		if j := slices.Index(p.idle, cc); j >= 0 && len(cc.held) > 0 {
			p.idle = slices.Delete(p.idle, j, j+1)
			mine = append(mine, cc)
		}
	}
	if p.held == nil {
		p.held = held[:0] // its array again, for the next ones
	}
	p.mu.Unlock()
	for _, cc := range mine {
		if cc.flush() == nil {
			p.keep(cc)
		}
	}
}

// close closes the idle connections, once their held releases are
// written.
func (p *compactPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.held = nil
	if p.flushArmed {
		p.flushTimer.Stop()
		p.flushArmed = false
	}
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.flush()
		_ = cc.c.Close()
	}
}

// flushTimeout bounds the write of held releases (a connection whose
// agent stopped reading).
const flushTimeout = 5 * time.Second

// flush writes cc's held releases, if any; its caller has cc to itself.
// On a failure the connection is closed and the releases are sent again.
func (cc *compactConn) flush() error {
	if len(cc.held) == 0 {
		return nil
	}
	err := cc.c.SetWriteDeadline(time.Now().Add(flushTimeout))
	if err == nil {
		_, err = cc.c.Write(cc.buf)
	}
	cc.buf = cc.buf[:0]
	if err == nil {
		err = cc.c.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		_ = cc.c.Close()
		cc.lostHeld()
		return err
	}
	cc.sentHeld()
	return nil
}

// write writes buf with req appended (after the preface and the held
// releases: one write). The held releases of a failed write are sent
// again.
func (cc *compactConn) write(req *api.CompactRequest) error {
	cc.buf = api.AppendRequest(cc.buf, req)
	_, err := cc.c.Write(cc.buf)
	cc.buf = cc.buf[:0]
	if err != nil {
		cc.lostHeld()
		return err
	}
	cc.sentHeld()
	return nil
}

// sentHeld forgets the held releases, written: their array serves the
// next ones.
func (cc *compactConn) sentHeld() {
	clear(cc.held)
	cc.held = cc.held[:0]
}

// lostHeld hands the held releases, whose write failed, to the pool's
// resend, which keeps them.
func (cc *compactConn) lostHeld() {
	held := cc.held
	cc.held = nil
	if len(held) > 0 && cc.pool != nil && cc.pool.resend != nil {
		cc.pool.resend(held)
	}
}

// compact runs req over the compact protocol. ok is false when the call
// must go over HTTP instead (no compact pool, or an agent that speaks
// HTTP only); nothing was done then.
// callName names a call in its errors ("acquire /site"): built only when
// one is made, not for every page view.
type callName struct{ verb, arg string }

func (o callName) String() string { return o.verb + " " + o.arg }

func (c *Client) compact(ctx context.Context, op callName, req *api.CompactRequest) (reply api.CompactReply, ok bool, err error) {
	p := c.compactPool
	if p == nil || p.http.Load() {
		return reply, false, nil
	}
	cc, err := p.get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return reply, true, fmt.Errorf("client: %s: %w", op, ctx.Err())
		}
		return reply, true, fmt.Errorf("client: %s: %w: %w", op, semaphore.ErrUnavailable, err)
	}
	reply, err = cc.call(ctx, req)
	if stale(cc, err, req.Op) && ctx.Err() == nil {
		// The agent this idle connection led to is gone (it restarted, or
		// stopped): the call never reached it, and the other idle
		// connections are as dead. Once more, on a new connection.
		_ = cc.c.Close()
		p.close()
		p.version.Store(0) // the agent that comes back may be another release
		if cc, err = p.dial(ctx); err != nil {
			if ctx.Err() != nil {
				return reply, true, fmt.Errorf("client: %s: %w", op, ctx.Err())
			}
			return reply, true, fmt.Errorf("client: %s: %w: %w", op, semaphore.ErrUnavailable, err)
		}
		reply, err = cc.call(ctx, req)
	}
	if errors.Is(err, errSpeaksHTTP) && cc.version == 2 && ctx.Err() == nil {
		// An agent of version 1 answers version 2's preface as HTTP, and
		// never ran the call: once more, on version 1.
		_ = cc.c.Close()
		p.version.Store(1)
		if cc, err = p.dial(ctx); err != nil {
			if ctx.Err() != nil {
				return reply, true, fmt.Errorf("client: %s: %w", op, ctx.Err())
			}
			return reply, true, fmt.Errorf("client: %s: %w: %w", op, semaphore.ErrUnavailable, err)
		}
		reply, err = cc.call(ctx, req)
	}
	switch {
	case errors.Is(err, errSpeaksHTTP) && cc.version == 1:
		_ = cc.c.Close()
		p.http.Store(true)
		return reply, false, nil
	case err != nil:
		// The call's fate is unknown, or it was abandoned: the closed
		// connection tells the agent to give it up.
		_ = cc.c.Close()
		if ctx.Err() != nil {
			return reply, true, fmt.Errorf("client: %s: %w", op, ctx.Err())
		}
		return reply, true, fmt.Errorf("client: %s: %w: %w", op, semaphore.ErrUnavailable, err)
	}
	if cc.spoiled {
		_ = cc.c.Close()
	} else {
		p.put(cc)
	}
	if reply.Error != "" {
		status := 0
		if r, ok := codes.ByCode(reply.Error); ok {
			status = r.Status
		}
		return reply, true, &APIError{Op: op.String(), Status: status, Code: reply.Error, Message: reply.Message}
	}
	return reply, true, nil
}

// speaksNoReply reports whether the agent is known to take releases
// without an answer (the protocol's version 2).
func (p *compactPool) speaksNoReply() bool {
	return p != nil && !p.http.Load() && p.version.Load() == 2
}

// releaseNoReply sends req, a release, without waiting for its answer,
// once the agent answered on version 2: the agent runs it before the
// connection's next call, and counts and logs its failure. Until then (or
// when it cannot be sent) it is an answered release, which learns the
// version for the next ones. ok and err are compact's.
func (c *Client) releaseNoReply(ctx context.Context, op callName, req api.CompactRequest) (ok bool, err error) {
	p := c.compactPool
	var cc *compactConn
	if p.speaksNoReply() {
		if cc = p.takeIdle(); cc == nil {
			// Every connection is busy: a new one, rather than a wait
			// for an answer. It stays fresh (unanswered) in the pool, so
			// that its next call still hears an agent that, restarted
			// meanwhile as an older release, refused its preface.
			if cc, err = p.dial(ctx); err != nil {
				cc = nil
			}
		}
	}
	if cc == nil || cc.version != 2 {
		if cc != nil {
			p.keep(cc)
		}
		req.Op = api.OpRelease
		_, ok, err = c.compact(ctx, op, &req)
		return ok, err
	}
	// The release waits in the connection's buffer for the next call
	// on it (the pool hands out the connection put back last), or for
	// the pool's flush: one write and one read at the agent less per
	// page view. A failed write sends it again, answered.
	req.Op = api.OpReleaseNoReply
	cc.buf = api.AppendRequest(cc.buf, &req)
	cc.held = append(cc.held, req)
	if len(cc.held) < maxHeld {
		p.hold(cc)
	} else if cc.flush() == nil { // else sent again by flush
		p.keep(cc)
	}
	return true, nil
}

// call writes req and reads its answer; ctx ending closes the wait.
func (cc *compactConn) call(ctx context.Context, req *api.CompactRequest) (api.CompactReply, error) {
	stop := context.AfterFunc(ctx, func() { _ = cc.c.SetDeadline(time.Unix(1, 0)) })
	reply, err := cc.roundTrip(req)
	if !stop() {
		// ctx ended as the call did: the deadline may be set after this
		// answer, and would fail the next call on the connection.
		cc.spoiled = true
	}
	return reply, err
}

// errUnsent: the call could not be written, so the agent never read it.
type errUnsent struct{ err error }

func (e *errUnsent) Error() string { return e.err.Error() }
func (e *errUnsent) Unwrap() error { return e.err }

// stale reports whether err, from a call on cc, says that cc is a pooled
// connection to an agent that has gone away, and that the call may be
// made again on a new one: it was never sent, or it is a release or a
// renewal, which the agent takes twice as once. (An acquire whose answer
// did not come may have been granted before the agent went: not again.)
func stale(cc *compactConn, err error, op byte) bool {
	if err == nil || cc.fresh || errors.Is(err, errSpeaksHTTP) {
		return false
	}
	var unsent *errUnsent
	if errors.As(err, &unsent) {
		return true
	}
	// Closed before its answer (an agent that stops ends its connections).
	closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	return closed && op != api.OpAcquire
}

// roundTrip writes req and reads its answer.
func (cc *compactConn) roundTrip(req *api.CompactRequest) (api.CompactReply, error) {
	if err := cc.write(req); err != nil {
		return api.CompactReply{}, &errUnsent{err}
	}
	if cc.fresh {
		// An agent from before the compact protocol answers the preface
		// as a malformed HTTP request.
		if head, err := cc.br.Peek(5); err == nil && bytes.Equal(head, []byte("HTTP/")) {
			return api.CompactReply{}, errSpeaksHTTP
		}
	}
	return api.ReadReplyTo(cc.br, req.Name)
}
