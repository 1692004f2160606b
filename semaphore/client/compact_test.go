package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
)

// The agent's socket speaks both protocols: a client on the compact one
// and one on HTTP see the same locks.
func TestCompactAndHTTPShareTheSocket(t *testing.T) {
	a, c := startAgent(t)
	ctx := ctxT(t)
	h, err := client.New(client.Config{API: a.APIAddr(), HTTPOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := c.Acquire(ctx, "/x", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	if !client.UsesCompact(c) || client.UsesCompact(h) {
		t.Fatalf("compact in use: default client %v, HTTPOnly client %v", client.UsesCompact(c), client.UsesCompact(h))
	}
	if l.Token() == 0 || l.Name() != "/x" || l.Mode() != semaphore.Exclusive || time.Until(l.Expires()) <= 0 {
		t.Fatalf("lease over the compact protocol: token %d name %q mode %v expires %v", l.Token(), l.Name(), l.Mode(), l.Expires())
	}
	if _, err := h.Acquire(ctx, "/x", semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrTimedOut) {
		t.Fatalf("HTTP try on the held lock: %v, want ErrTimedOut", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew over the compact protocol: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release over the compact protocol: %v", err)
	}
	l2, err := h.Acquire(ctx, "/x", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatalf("HTTP try after the compact release: %v", err)
	}
	if _, err := c.Acquire(ctx, "/x", semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrTimedOut) {
		t.Fatalf("compact try on the lock HTTP holds: %v, want ErrTimedOut", err)
	}
	// Errors keep their codes: a bad request, an unknown lease.
	if _, err := c.Acquire(ctx, "/y", semaphore.Exclusive, client.Options{Duration: -time.Second}); !errors.Is(err, semaphore.ErrInvalid) {
		t.Fatalf("negative duration over the compact protocol: %v, want ErrInvalid", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A client that goes away while its acquire waits abandons the request,
// as over HTTP: the lock is free for the next one once the holder leaves.
func TestCompactAbandon(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	holder, err := c.Acquire(ctx, "/w", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(short, "/w", semaphore.Exclusive, client.Options{Timeout: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting acquire whose context ends: %v", err)
	}
	// The agent learns of it when the connection closes: the request
	// leaves its list (the holder alone is left). Until then a release
	// of the holder could still grant it, and the grant would wait for
	// its expiry: a client that went away, as over HTTP.
	for deadline := time.Now().Add(10 * time.Second); ; {
		tab, err := c.Locks(ctx, "/w")
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.Requests) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned request is still at the agent: %+v", tab.Requests)
		}
		time.Sleep(10 * time.Millisecond) // polling a list that has no signal of its own
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The abandoned waiter would be granted now if the agent kept it.
	l, err := c.Acquire(ctx, "/w", semaphore.Exclusive, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire after the abandoned waiter: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Bad compact frames get a bad_request answer and the connection ends;
// the agent goes on serving.
func TestCompactBadFrames(t *testing.T) {
	a, c := startAgent(t)
	for _, frame := range [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0x0f}, // a length over the cap
		{3, 9, 0, 0},                   // an unknown operation
		api.AppendRequest(nil, &api.CompactRequest{Op: 1})[:2],                               // cut short, then closed
		append(api.AppendRequest(nil, &api.CompactRequest{Op: 2, Lease: "1.1.1"})[:1], 0xff), // a string past the end
	} {
		conn, err := net.Dial("unix", a.APIAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(append(append([]byte(nil), api.CompactPreface...), frame...)); err != nil {
			t.Fatal(err)
		}
		if uc, ok := conn.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		br := bufio.NewReader(conn)
		if reply, err := api.ReadReply(br); err != nil || reply.Error != "bad_request" {
			t.Errorf("frame %x: answer %+v, %v; want bad_request", frame, reply, err)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("frame %x: the connection goes on after a bad frame", frame)
		}
		conn.Close()
	}
	ctx := ctxT(t)
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("status over HTTP after bad frames: %v", err)
	}
	l, err := c.Acquire(ctx, "/after", semaphore.ReadOnly, client.Options{Try: true})
	if err != nil {
		t.Fatalf("compact acquire after bad frames: %v", err)
	}
	_ = l.Release(ctx)
}
