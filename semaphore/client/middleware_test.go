package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

type reply struct {
	status int
	retry  string
	ctype  string
	body   string
}

func get(t *testing.T, srv *httptest.Server, method string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, srv.URL+"/page", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), string(body)}
}

// page is the frontend's handler: it reports the request's lease.
func page(seen chan<- *client.Lease) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- client.LeaseFrom(r.Context())
		io.WriteString(w, "hello")
	})
}

func TestMiddleware(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	seen := make(chan *client.Lease, 1)
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{})(page(seen)))
	defer srv.Close()

	if got := get(t, srv, "GET"); got.status != 200 || got.body != "hello" {
		t.Fatalf("normal request: %+v", got)
	}
	l := <-seen
	if l == nil || l.Mode() != semaphore.ReadOnly || l.Name() != "/site" || l.Token() == 0 {
		t.Fatalf("handler's lease: %+v", l)
	}
	// Released when the handler returned: an exclusive try gets it.
	w, err := c.Acquire(ctx, "/site", semaphore.ReadWritePriority, client.Options{Try: true})
	if err != nil {
		t.Fatalf("the request's lock was kept: %v", err)
	}
	if err := l.Err(); err != nil || !isClosed(l.Done()) {
		t.Fatalf("request lease after the request: done %v err %v", isClosed(l.Done()), err)
	}
	// A writer holds the site: the maintenance page, and no handler.
	got := get(t, srv, "GET")
	if got.status != 503 || got.retry != "30" || got.body != string(client.DefaultMaintenancePage) ||
		!strings.HasPrefix(got.ctype, "text/html") {
		t.Fatalf("during the drain: %+v", got)
	}
	if head := get(t, srv, "HEAD"); head.status != 503 || head.body != "" {
		t.Fatalf("HEAD during the drain: %+v", head)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, srv, "GET"); got.status != 200 || got.body != "hello" {
		t.Fatalf("after the drain: %+v", got)
	}
	<-seen
	c.Close() // waits for the middleware's releases, which run off the visitor's path
	tab, err := c.Locks(ctx, "/site")
	if err != nil || len(tab.Requests) != 0 {
		t.Fatalf("requests left at the agent: %+v, %v", tab.Requests, err)
	}
	if len(seen) != 0 {
		t.Fatal("the handler ran during the drain")
	}
}

func TestMiddlewareOptions(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	seen := make(chan *client.Lease, 1)
	mw := c.Middleware("/opt", client.MiddlewareOptions{RetryAfter: 1500 * time.Millisecond,
		MaintenancePage: []byte("back soon\n"), ContentType: "text/plain", Duration: 5 * time.Second})
	srv := httptest.NewServer(mw(page(seen)))
	defer srv.Close()
	if got := get(t, srv, "GET"); got.status != 200 {
		t.Fatalf("normal request: %+v", got)
	}
	if l := <-seen; time.Until(l.Expires()) > 5*time.Second {
		t.Fatalf("request lease expires in %s, over its 5s", time.Until(l.Expires()))
	}
	w, err := c.Acquire(ctx, "/opt", semaphore.ReadWritePriority, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if got := get(t, srv, "GET"); got.status != 503 || got.retry != "2" || got.body != "back soon\n" || got.ctype != "text/plain" {
		t.Fatalf("during the drain: %+v", got)
	}
}

func TestMiddlewareAgentUnreachable(t *testing.T) {
	c, err := client.New(client.Config{API: filepath.Join(t.TempDir(), "nobody.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, open := range []bool{false, true} {
		seen := make(chan *client.Lease, 1)
		var logs syncBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{FailOpen: open, Logger: log})(page(seen)))
		got := get(t, srv, "GET")
		srv.Close()
		switch {
		case open && (got.status != 200 || len(seen) != 1 || <-seen != nil):
			t.Errorf("fail open: %+v; want 200 served without a lease", got)
		case !open && (got.status != 503 || got.retry != "30" || len(seen) != 0):
			t.Errorf("fail closed: %+v; want 503 without the handler", got)
		}
		if !strings.Contains(logs.String(), "agent unavailable") || strings.Contains(got.body, "unavailable") {
			t.Errorf("FailOpen %v: the error went to the visitor or not to the log: log %q body %q", open, logs.String(), got.body)
		}
	}
}

// A release the agent refuses is logged; the visitor gets the page.
func TestMiddlewareReleaseError(t *testing.T) {
	c := fakeAgent(t, time.Minute)
	seen := make(chan *client.Lease, 1)
	var logs syncBuffer
	srv := httptest.NewServer(c.Middleware("/fake", client.MiddlewareOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})(page(seen)))
	defer srv.Close()
	got := get(t, srv, "GET")
	if got.status != 200 || got.body != "hello" {
		t.Fatalf("request with a failing release: %+v", got)
	}
	<-seen
	c.Close() // the release runs off the visitor's path: wait for it
	if !strings.Contains(logs.String(), "releasing the request's lock") || !strings.Contains(logs.String(), "not_ready") {
		t.Fatalf("release error not logged: %q", logs.String())
	}
}

// The visitor hanging up during the handler does not skip the release.
func TestMiddlewareVisitorLeaves(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	entered, finished := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	})
	mw := c.Middleware("/leave", client.MiddlewareOptions{})(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(finished)
		mw.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, "GET", srv.URL, nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("request: %v", err)
	}
	if !closed(finished, settle) {
		t.Fatal("middleware did not return")
	}
	l, err := c.Acquire(ctx, "/leave", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatalf("lock kept after the visitor left: %v", err)
	}
	l.Release(ctx)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
