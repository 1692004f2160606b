package daemon

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"time"
)

// ServeCompact serves in, the bytes after a compact preface of version,
// as a connection that sent them and closed, and returns what the agent
// wrote back.
func ServeCompact(node *Node, in []byte, version int) []byte {
	m := &apiMux{node: node, conns: map[net.Conn]bool{}}
	c := &recordConn{}
	m.serveCompact(c, bufio.NewReader(bytes.NewReader(in)), nil, version)
	return c.out.Bytes()
}

// recordConn is a connection's writing end, kept in out; serveCompact
// reads through its bufio.Reader only.
type recordConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *recordConn) Write(b []byte) (int, error) { return c.out.Write(b) }
func (c *recordConn) Close() error                { return nil }

// TickPeriods are how often node's loop wakes for its timers now, and
// its tick, read on the loop.
func TickPeriods(ctx context.Context, node *Node) (now, tick time.Duration, err error) {
	err = node.do(ctx, func() { now, tick = node.period, node.cfg.Tick })
	return now, tick, err
}

// OnLoop runs fn on node's loop, as one of its calls.
func OnLoop(ctx context.Context, node *Node, fn func()) error { return node.do(ctx, fn) }

// TicksAcrossStop runs an op on node's loop that calls jump (a clock
// moved on while the process was stopped, as it finds it when it runs on)
// and queues a second op, which the loop takes in the same batch; it
// returns the ticks the loop had counted when each of the two ran.
func TicksAcrossStop(ctx context.Context, node *Node, jump func()) (before, after int64, err error) {
	ran := make(chan struct{})
	err = node.do(ctx, func() {
		before = node.ticks
		jump()
		node.ops <- func() { after = node.ticks; close(ran) }
	})
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-ran:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return before, after, nil
}
