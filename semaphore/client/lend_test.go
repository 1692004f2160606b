package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
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

// heldPages serves page views that each wait for one value on next (or
// their request's end), reporting their lease on seen.
func heldPages(seen chan<- *client.Lease, next <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- client.LeaseFrom(r.Context())
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "page")
	})
}

// drainOnce takes name as a priority writer (a drain) and lets it go at
// once; the outcome arrives on the channel.
func drainOnce(ctx context.Context, c *client.Client, name string) <-chan error {
	granted := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, name, semaphore.ReadWritePriority, client.Options{Timeout: time.Minute})
		if err == nil {
			err = w.Release(ctx)
		}
		granted <- err
	}()
	return granted
}

// waitReaders waits until the cluster's table counts want readers
// holding name (what a drain waits for), within settle.
func waitReaders(t *testing.T, c *client.Client, name string, want int) {
	t.Helper()
	ctx := ctxT(t)
	got := -1
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if tab, err := c.Locks(ctx, name); err == nil && len(tab.Locks) == 1 {
			if got = tab.Locks[0].ReadersHolding(); got == want {
				return
			}
		}
	}
	t.Fatalf("readers holding %s: %d, want %d", name, got, want)
}

// The page views on a lent lease are counted in the cluster's table, not
// the lease alone: its keeper tells the agent how many run on it, while
// it is lent and after a drain's writer made it go, so the drain sees
// them leave one by one, and is granted once the last is done.
func TestMiddlewareLentLeaseCountsPageViews(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	seen := make(chan *client.Lease, 3)
	next := make(chan struct{})
	srv := httptest.NewServer(c.Middleware("/counted", client.MiddlewareOptions{})(heldPages(seen, next)))
	defer srv.Close()
	replies := []<-chan reply{getAsync(t, srv)}
	lent := <-seen
	for range 2 {
		replies = append(replies, getAsync(t, srv))
		if l := <-seen; l.ID() != lent.ID() {
			t.Fatalf("a page view on %s, want the lent %s", l.ID(), lent.ID())
		}
	}
	waitReaders(t, c, "/counted", 3)

	granted := drainOnce(ctx, c, "/counted")
	if !closed(client.Yielding(lent), settle) {
		t.Fatal("the lent lease never heard that a writer waits")
	}
	for left := 2; left > 0; left-- {
		next <- struct{}{}
		waitReaders(t, c, "/counted", left)
	}
	next <- struct{}{}
	if err := <-granted; err != nil {
		t.Fatalf("the drain's writer: %v", err)
	}
	for _, r := range replies {
		if got := <-r; got.status != 200 || got.body != "page" {
			t.Fatalf("a page view: %+v", got)
		}
	}
}

// An agent without POST /v1/page-views (an older one) is asked once: the
// client tells it no more counts, and lending goes on as before.
func TestMiddlewareLentLeaseCountsToOldAgent(t *testing.T) {
	a, direct := startAgent(t)
	ctx := ctxT(t)
	// The old agent: the real one behind a proxy that has no such endpoint.
	agent := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "sluice" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.APIAddr())
		}},
		FlushInterval: -1, // the watch streams
	}
	var asked atomic.Int32
	firstAsk := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/", agent)
	mux.HandleFunc("/v1/page-views", func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			close(firstAsk)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"bad_request","message":"no endpoint POST /v1/page-views"}`)
	})
	old := serveFake(t, mux)
	defer agent.Transport.(*http.Transport).CloseIdleConnections()

	seen := make(chan *client.Lease, 2)
	next := make(chan struct{})
	srv := httptest.NewServer(old.Middleware("/old", client.MiddlewareOptions{})(heldPages(seen, next)))
	defer srv.Close()
	replies := []<-chan reply{getAsync(t, srv)}
	lent := <-seen
	replies = append(replies, getAsync(t, srv))
	if l := <-seen; l.ID() != lent.ID() {
		t.Fatalf("a page view on %s, want the lent %s", l.ID(), lent.ID())
	}
	if !closed(firstAsk, settle) {
		t.Fatal("the client never said its page views")
	}
	// A writer waits: the lease goes once idle, and its keeper would say
	// each change from then on; it says none.
	granted := drainOnce(ctx, direct, "/old")
	if !closed(client.Yielding(lent), settle) {
		t.Fatal("the lent lease never heard that a writer waits")
	}
	next <- struct{}{}
	next <- struct{}{}
	if err := <-granted; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	for _, r := range replies {
		if got := <-r; got.status != 200 {
			t.Fatalf("a page view: %+v", got)
		}
	}
	old.Close() // waits for the lease's keeper
	if n := asked.Load(); n != 1 {
		t.Fatalf("the old agent was asked %d times, want once", n)
	}
}
