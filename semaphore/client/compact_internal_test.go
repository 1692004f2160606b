package client

import (
	"bufio"
	"context"
	"net"
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
	pool.idle <- &compactConn{c: conn, br: bufio.NewReader(conn)}
	c := &Client{compactPool: pool}
	if _, ok, err := c.compact(ctx, "release", &api.CompactRequest{Op: 2, Lease: "1.1.1"}); !ok || err != nil {
		t.Fatalf("the call: %v %v", ok, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if len(pool.idle) != 0 {
		t.Fatal("a connection whose call's context ended as it answered is kept for the next call")
	}
}
