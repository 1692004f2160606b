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
	idle chan *compactConn
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

type compactConn struct {
	c       net.Conn
	br      *bufio.Reader
	buf     []byte
	version int32 // of the preface it opened with
	fresh   bool  // no call answered on it yet
	// spoiled: a call's context ended as the call did, and its deadline
	// in the past may be on the connection (or about to be): not reused.
	spoiled bool
}

func newCompactPool(addr string) *compactPool {
	return &compactPool{addr: addr, idle: make(chan *compactConn, maxIdleCompact)}
}

// errSpeaksHTTP: the agent answered the preface as HTTP.
var errSpeaksHTTP = errors.New("client: the agent speaks HTTP only")

// get is an idle connection, or a new one.
func (p *compactPool) get(ctx context.Context) (*compactConn, error) {
	select {
	case cc := <-p.idle:
		return cc, nil
	default:
	}
	return p.dial(ctx)
}

// dial is a new connection.
func (p *compactPool) dial(ctx context.Context) (*compactConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", p.addr)
	if err != nil {
		return nil, err
	}
	cc := &compactConn{c: c, br: bufio.NewReaderSize(c, 4096), version: 2, fresh: true}
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

// keep keeps cc as it is, or closes it when enough are idle.
func (p *compactPool) keep(cc *compactConn) {
	select {
	case p.idle <- cc:
	default:
		_ = cc.c.Close()
	}
}

// close closes the idle connections.
func (p *compactPool) close() {
	for {
		select {
		case cc := <-p.idle:
			_ = cc.c.Close()
		default:
			return
		}
	}
}

// compact runs req over the compact protocol. ok is false when the call
// must go over HTTP instead (no compact pool, or an agent that speaks
// HTTP only); nothing was done then.
func (c *Client) compact(ctx context.Context, op string, req *api.CompactRequest) (reply api.CompactReply, ok bool, err error) {
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
		return reply, true, &APIError{Op: op, Status: status, Code: reply.Error, Message: reply.Message}
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
func (c *Client) releaseNoReply(ctx context.Context, op string, req api.CompactRequest) (ok bool, err error) {
	p := c.compactPool
	var cc *compactConn
	if p.speaksNoReply() {
		select {
		case cc = <-p.idle:
		default:
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
	req.Op = api.OpReleaseNoReply
	stop := context.AfterFunc(ctx, func() { _ = cc.c.SetDeadline(time.Unix(1, 0)) })
	cc.buf = api.AppendRequest(cc.buf, &req)
	_, err = cc.c.Write(cc.buf)
	cc.buf = cc.buf[:0]
	if !stop() {
		cc.spoiled = true
	}
	switch {
	case err == nil && !cc.spoiled:
		p.keep(cc)
		return true, nil
	case err == nil:
		_ = cc.c.Close()
		return true, nil
	}
	// A connection that takes no write leads to an agent that is gone
	// (a Unix socket refuses at once what its closed peer cannot read),
	// as are the other idle ones. A release taken twice is taken once:
	// once more, answered, on a new connection.
	_ = cc.c.Close()
	if ctx.Err() != nil {
		return true, fmt.Errorf("client: %s: %w", op, ctx.Err())
	}
	p.close()
	p.version.Store(0)
	req.Op = api.OpRelease
	_, ok, err = c.compact(ctx, op, &req)
	return ok, err
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
	cc.buf = api.AppendRequest(cc.buf, req)
	_, err := cc.c.Write(cc.buf)
	cc.buf = cc.buf[:0]
	if err != nil {
		return api.CompactReply{}, &errUnsent{err}
	}
	if cc.fresh {
		// An agent from before the compact protocol answers the preface
		// as a malformed HTTP request.
		if head, err := cc.br.Peek(5); err == nil && bytes.Equal(head, []byte("HTTP/")) {
			return api.CompactReply{}, errSpeaksHTTP
		}
	}
	return api.ReadReply(cc.br)
}
