package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// leaseOf serves page views that hand their lease to the test, each
// returning once hold (when not nil) is closed.
func leaseOf(seen chan<- *client.Lease, hold <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- client.LeaseFrom(r.Context())
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "page")
	})
}

// viewLease runs one page view and returns its lease.
func viewLease(t *testing.T, srv *httptest.Server, seen <-chan *client.Lease) *client.Lease {
	t.Helper()
	if got := get(t, srv, "GET"); got.status != 200 || got.body != "page" {
		t.Fatalf("a page view: %+v", got)
	}
	return <-seen
}

// The page views of a name share one lease, the first one's, while no
// writer waits; with LeasePerRequest each takes its own. A handler
// cannot give the shared lease back.
func TestMiddlewareLendsOneLease(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	seen := make(chan *client.Lease, 1)
	srv := httptest.NewServer(c.Middleware("/lent", client.MiddlewareOptions{})(leaseOf(seen, nil)))
	defer srv.Close()
	first := viewLease(t, srv, seen)
	for i := range 3 {
		if l := viewLease(t, srv, seen); l.ID() != first.ID() {
			t.Fatalf("page view %d: lease %s, want the lent %s", i+2, l.ID(), first.ID())
		}
	}
	if err := first.Release(ctx); !errors.Is(err, client.ErrLeaseLent) {
		t.Fatalf("a lent lease's Release: %v, want ErrLeaseLent", err)
	}
	if first.Err() != nil || isClosed(first.Done()) {
		t.Fatalf("the lent lease ended: %v", first.Err())
	}

	own := httptest.NewServer(c.Middleware("/own", client.MiddlewareOptions{LeasePerRequest: true})(leaseOf(seen, nil)))
	defer own.Close()
	a, b := viewLease(t, own, seen), viewLease(t, own, seen)
	if a.ID() == b.ID() || !isClosed(a.Done()) {
		t.Fatalf("leases per request: %s then %s (first ended: %v)", a.ID(), b.ID(), isClosed(a.Done()))
	}
}

// A soft writer (READ_WRITE) that waits is told to the lent lease
// (yield): page views from then on take leases of their own, as readers
// may under a soft writer, and the lent lease goes once its page view is
// done; the writer is granted after it. Without the word, the lease would
// stay lent while page views come.
func TestMiddlewareLentLeaseYieldsToSoftWriter(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	seen := make(chan *client.Lease, 1)
	var holdFirst atomic.Bool
	holdFirst.Store(true)
	hold := make(chan struct{})
	srv := httptest.NewServer(c.Middleware("/soft", client.MiddlewareOptions{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			seen <- client.LeaseFrom(r.Context())
			if holdFirst.CompareAndSwap(true, false) {
				select {
				case <-hold:
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, "page")
		})))
	defer srv.Close()
	var log events
	firstDone := getAsync(t, srv)
	lent := <-seen
	granted := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "/soft", semaphore.ReadWrite, client.Options{Timeout: time.Minute})
		if err == nil {
			log.add("writer granted")
			err = w.Release(ctx)
		}
		granted <- err
	}()
	select {
	case <-client.Yielding(lent):
	case <-ctx.Done():
		t.Fatal("the lent lease never heard that a soft writer waits")
	}
	if isClosed(lent.Draining()) {
		t.Fatal("a soft writer's wait was told as a drain")
	}
	if l := viewLease(t, srv, seen); l.ID() == lent.ID() {
		t.Fatalf("a page view while a soft writer waits was lent %s", l.ID())
	}
	log.add("first page view returns")
	close(hold)
	if got := <-firstDone; got.status != 200 {
		t.Fatalf("the first page view: %+v", got)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	if !closed(lent.Done(), settle) || lent.Err() != nil {
		t.Fatalf("the lent lease was not given back: %v", lent.Err())
	}
	if got := log.get(); len(got) != 2 || got[0] != "first page view returns" {
		t.Fatalf("order: %q", got)
	}
}

// An idle lent lease goes as soon as a writer waits: the writer is
// granted by the agent's word (yield), not after the lease's idle end.
func TestMiddlewareIdleLentLeaseGoesForWriter(t *testing.T) {
	for _, mode := range []semaphore.Mode{semaphore.ReadWrite, semaphore.ReadWriteGentle, semaphore.ReadWritePriority} {
		t.Run(mode.String(), func(t *testing.T) {
			_, c := startAgent(t)
			ctx := ctxT(t)
			seen := make(chan *client.Lease, 1)
			srv := httptest.NewServer(c.Middleware("/idle", client.MiddlewareOptions{})(leaseOf(seen, nil)))
			defer srv.Close()
			lent := viewLease(t, srv, seen)
			w, err := c.Acquire(ctx, "/idle", mode, client.Options{Timeout: time.Minute, Quiet: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Release(ctx)
			if !isClosed(client.Yielding(lent)) || !isClosed(lent.Done()) {
				t.Fatalf("writer granted; the lent lease heard yield %v, ended %v", isClosed(client.Yielding(lent)), isClosed(lent.Done()))
			}
		})
	}
}

// An agent that does not say it sends yield (here: one that does not
// share read tickets) is lent nothing: each page view takes its own lease.
func TestMiddlewareLendsNothingWithoutYield(t *testing.T) {
	_, c := startAgentWith(t, daemon.AgentConfig{ShareLease: -1})
	seen := make(chan *client.Lease, 1)
	srv := httptest.NewServer(c.Middleware("/plain", client.MiddlewareOptions{})(leaseOf(seen, nil)))
	defer srv.Close()
	first := viewLease(t, srv, seen)
	if !closed(client.Told(first), settle) || client.TellsYield(first) {
		t.Fatalf("the agent's word on yield: told %v, yields %v", isClosed(client.Told(first)), client.TellsYield(first))
	}
	if !closed(first.Done(), settle) {
		t.Fatal("the lease was kept lent")
	}
	a, b := viewLease(t, srv, seen), viewLease(t, srv, seen)
	if a.ID() == first.ID() || a.ID() == b.ID() {
		t.Fatalf("page views' leases %s, %s, %s: want one each", first.ID(), a.ID(), b.ID())
	}
}
