package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

// lateCancelConn is a connection whose call's context ends just after
// its answer was read, before the call is over: the reply comes, then
// cancel runs, and Read returns only once the context's deadline was put
// on the connection (the race of a renewal cancelled as it answered).
type lateCancelConn struct {
	net.Conn
	cancel   context.CancelFunc
	deadline chan struct{}
}

func (c *lateCancelConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
		select {
		case <-c.deadline:
		case <-time.After(10 * time.Second):
		}
	}
	return n, err
}

func (c *lateCancelConn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	close(c.deadline)
	return err
}

// TestCompactLateCancelSpoilsConn: a connection whose call's context
// ended as the call did is not put back in the pool, where its deadline in
// the past would fail the next call with an i/o timeout.
func TestCompactLateCancelSpoilsConn(t *testing.T) {
	agent, mine := net.Pipe()
	defer agent.Close()
	served := make(chan error, 1)
	go func() {
		br := bufio.NewReader(agent)
		if _, err := api.ReadRequest(br); err != nil {
			served <- err
			return
		}
		_, err := agent.Write(api.AppendReply(nil, &api.CompactReply{}))
		served <- err
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := &lateCancelConn{Conn: mine, cancel: cancel, deadline: make(chan struct{})}
	pool := newCompactPool("not dialled")
	pool.keep(&compactConn{c: conn, br: bufio.NewReader(conn)})
	c := &Client{compactPool: pool}
	if _, ok, err := c.compact(ctx, callName{"release", ""}, &api.CompactRequest{Op: 2, Lease: "1.1.1"}); !ok || err != nil {
		t.Fatalf("the call: %v %v", ok, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if len(pool.idle) != 0 {
		t.Fatal("a connection whose call's context ended as it answered is kept for the next call")
	}
}

// countingConn counts its writes.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// heldPool is a pool of version 2 holding one connection, mine, whose
// other end is the agent's; releases wait heldFor for the next call.
func heldPool(t *testing.T, heldFor time.Duration) (*Client, *countingConn, net.Conn, *[]api.CompactRequest) {
	t.Helper()
	agent, mine := net.Pipe()
	t.Cleanup(func() { agent.Close(); mine.Close() })
	_ = agent.SetDeadline(time.Now().Add(time.Minute))
	conn := &countingConn{Conn: mine}
	pool := newCompactPool("not dialled")
	pool.heldFor = heldFor
	pool.version.Store(2)
	var resent []api.CompactRequest
	pool.resend = func(held []api.CompactRequest) { resent = append(resent, held...) }
	pool.keep(&compactConn{c: conn, br: bufio.NewReader(conn), pool: pool, version: 2})
	t.Cleanup(pool.close)
	return &Client{compactPool: pool}, conn, agent, &resent
}

// A release without an answer waits on its connection for the next call,
// and goes with it in one write, before it.
func TestHeldReleaseGoesWithNextCall(t *testing.T) {
	c, conn, agent, _ := heldPool(t, time.Hour)
	ctx := context.Background()
	if ok, err := c.releaseNoReply(ctx, callName{"release", ""}, api.CompactRequest{Lease: "1.1.1", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if n := conn.writes.Load(); n != 0 {
		t.Fatalf("%d writes after a held release, want none yet", n)
	}
	served := make(chan error, 1)
	go func() {
		br := bufio.NewReader(agent)
		rel, err := api.ReadRequest(br)
		if err == nil && (rel.Op != api.OpReleaseNoReply || rel.Lease != "1.1.1") {
			err = fmt.Errorf("first frame %+v, want the held release", rel)
		}
		var acq api.CompactRequest
		if err == nil {
			acq, err = api.ReadRequest(br)
		}
		if err == nil && (acq.Op != api.OpAcquire || acq.Name != "/b") {
			err = fmt.Errorf("second frame %+v, want the acquire", acq)
		}
		if err == nil {
			_, err = agent.Write(api.AppendReply(nil, &api.CompactReply{}))
		}
		served <- err
	}()
	if _, ok, err := c.compact(ctx, callName{"acquire", ""}, &api.CompactRequest{Op: api.OpAcquire, Name: "/b", Mode: "read-only", Try: true}); !ok || err != nil {
		t.Fatalf("the call after the release: %v %v", ok, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if n := conn.writes.Load(); n != 1 {
		t.Fatalf("%d writes for a held release and a call, want 1", n)
	}
}

// A held release that no call takes along is written alone, by the
// pool's flush, heldFor after it; the connection stays in the pool.
func TestHeldReleaseFlushedAlone(t *testing.T) {
	c, conn, agent, _ := heldPool(t, time.Millisecond)
	if ok, err := c.releaseNoReply(context.Background(), callName{"release", ""}, api.CompactRequest{Lease: "1.1.2", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	rel, err := api.ReadRequest(bufio.NewReader(agent)) // the pipe's deadline bounds the wait
	if err != nil || rel.Op != api.OpReleaseNoReply || rel.Lease != "1.1.2" {
		t.Fatalf("the agent read %+v, %v; want the held release", rel, err)
	}
	if n := conn.writes.Load(); n != 1 {
		t.Fatalf("%d writes, want 1", n)
	}

	// The flush itself, called here rather than by its timer, so that
	// its end is known.
	c, _, agent, resent := heldPool(t, time.Hour)
	if ok, err := c.releaseNoReply(context.Background(), callName{"release", ""}, api.CompactRequest{Lease: "1.1.3", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	read := make(chan error, 1)
	go func() {
		rel, err := api.ReadRequest(bufio.NewReader(agent))
		if err == nil && rel.Lease != "1.1.3" {
			err = fmt.Errorf("read %+v, want the held release", rel)
		}
		read <- err
	}()
	c.compactPool.flushHeld()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if idle := len(c.compactPool.idle); idle != 1 || len(*resent) != 0 {
		t.Fatalf("after the flush: %d idle, %d sent again; want 1 and 0", idle, len(*resent))
	}
	c.compactPool.flushHeld() // nothing held: no write (the pipe would block it)
}

// Held releases whose write fails (the agent went away) are sent again,
// answered: by the flush, and by the next call's write.
func TestHeldReleaseResentWhenWriteFails(t *testing.T) {
	c, _, agent, resent := heldPool(t, time.Hour)
	ctx := context.Background()
	if ok, err := c.releaseNoReply(ctx, callName{"release", ""}, api.CompactRequest{Lease: "1.1.3", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	agent.Close()
	c.compactPool.flushHeld()
	if len(*resent) != 1 || (*resent)[0].Lease != "1.1.3" {
		t.Fatalf("sent again after a failed flush: %+v, want lease 1.1.3", *resent)
	}

	c, _, agent, resent = heldPool(t, time.Hour)
	if ok, err := c.releaseNoReply(ctx, callName{"release", ""}, api.CompactRequest{Lease: "1.1.4", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	agent.Close()
	// The call fails: its redial goes to no socket.
	if _, ok, err := c.compact(ctx, callName{"acquire", ""}, &api.CompactRequest{Op: api.OpAcquire, Name: "/b", Mode: "read-only", Try: true}); !ok || err == nil {
		t.Fatalf("a call to a closed agent: %v %v, want its failure", ok, err)
	}
	if len(*resent) != 1 || (*resent)[0].Lease != "1.1.4" {
		t.Fatalf("sent again after a failed call: %+v, want lease 1.1.4", *resent)
	}
}

// Closing the pool writes the held releases before it closes their
// connections.
func TestCloseWritesHeldReleases(t *testing.T) {
	c, _, agent, _ := heldPool(t, time.Hour)
	if ok, err := c.releaseNoReply(context.Background(), callName{"release", ""}, api.CompactRequest{Lease: "1.1.5", Name: "/a"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	read := make(chan error, 1)
	go func() {
		br := bufio.NewReader(agent)
		rel, err := api.ReadRequest(br)
		if err == nil && rel.Lease != "1.1.5" {
			err = fmt.Errorf("read %+v, want the held release", rel)
		}
		if err == nil {
			if _, err = br.ReadByte(); errors.Is(err, io.EOF) {
				err = nil
			} else {
				err = fmt.Errorf("after the release: %v, want the connection's end", err)
			}
		}
		read <- err
	}()
	c.compactPool.close()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}
