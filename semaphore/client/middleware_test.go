package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
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

// getAsync is get for a goroutine of its own: the reply arrives on the
// channel, and a failed request is reported as status 0 with the error
// as body (t.Fatal belongs to the test's goroutine).
func getAsync(t *testing.T, srv *httptest.Server) <-chan reply {
	ctx := ctxT(t)
	out := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/page", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			out <- reply{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- reply{body: err.Error()}
			return
		}
		out <- reply{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), string(body)}
	}()
	return out
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
	if got.status != 503 || got.retry != "30" || got.body != defaultPage("/site") ||
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
	c.Close()
	// The last release went without an answer, on a connection of its
	// own: the agent runs it soon, not before the HTTP call's answer.
	waitRequests(t, c, "/site", 0)
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
		srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{FailOpen: open, Logger: log, AgentWait: -1})(page(seen)))
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

// notReadyThenGrant is an agent that answers not_ready to the first
// refusals acquires, as one does while it restarts, and grants after; it
// counts the acquires.
func notReadyThenGrant(t *testing.T, refusals int64) (*client.Client, *atomic.Int64) {
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/acquire", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= refusals {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(api.ErrorJSON{Error: "not_ready", Message: "not ready: this agent is starting"})
			return
		}
		json.NewEncoder(w).Encode(api.LeaseJSON{Lease: "9.1.1", Name: "/site", Mode: "read-only", Token: 7,
			Expires: time.Now().Add(time.Minute), TTL: "1m0s", TTLMillis: 60000})
	})
	mux.HandleFunc("POST /v1/release", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	return serveFake(t, mux), &calls
}

// An agent that restarts (not ready, or not there) holds a request back
// for AgentWait, tried again meanwhile, and the page is served once it
// answers; an outage older than AgentWait is answered at once.
func TestMiddlewareWaitsForAgent(t *testing.T) {
	c, calls := notReadyThenGrant(t, 3)
	seen := make(chan *client.Lease, 1)
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{AgentWait: time.Minute})(page(seen)))
	if got := get(t, srv, "GET"); got.status != 200 || len(seen) != 1 || <-seen == nil || calls.Load() != 4 {
		t.Fatalf("through a restart: %+v after %d acquires; want 200 under a lease after 4", got, calls.Load())
	}
	srv.Close()

	c, calls = notReadyThenGrant(t, 1<<40)
	const wait = 300 * time.Millisecond
	srv = httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{AgentWait: wait})(page(seen)))
	defer srv.Close()
	start := time.Now()
	if got := get(t, srv, "GET"); got.status != 503 || time.Since(start) < wait || calls.Load() < 2 {
		t.Fatalf("an agent that stays down: %+v after %s and %d acquires; want 503 after %s of tries", got, time.Since(start), calls.Load(), wait)
	}
	before := calls.Load()
	if got := get(t, srv, "GET"); got.status != 503 || calls.Load() != before+1 {
		t.Fatalf("the outage is older than AgentWait: %+v after %d more acquires; want 503 after 1", got, calls.Load()-before)
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

// startAgentShare is startAgent with the agent's --share-lease set, so
// that a request's lease is short and must be renewed.
func startAgentShare(t *testing.T, share time.Duration) (*daemon.Agent, *client.Client) {
	t.Helper()
	return startAgentWith(t, daemon.AgentConfig{ShareLease: share})
}

// startAgentWith is startAgent with cfg's options (an in-memory agent
// named solo, on a socket of its own).
func startAgentWith(t *testing.T, cfg daemon.AgentConfig) (*daemon.Agent, *client.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := ctxT(t)
	cfg.Name, cfg.InMemory, cfg.API = "solo", true, filepath.Join(dir, "api.sock")
	a, err := daemon.StartAgent(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		a.Stop(ctx)
	})
	c, err := client.New(client.Config{API: a.APIAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // before the agent stops: cleanups run last first
	if err := waitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	return a, c
}

// events is an ordered log of what happened, written from any goroutine.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, fmt.Sprintf(format, args...))
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// A request that runs past its lease's first expiry keeps the lease
// (renewed) and its context, and a writer that asks meanwhile is granted
// only after the handler returned.
func TestMiddlewareRenewsLongRequest(t *testing.T) {
	_, c := startAgentShare(t, 2*time.Second)
	ctx := ctxT(t)
	var log events
	entered := make(chan *client.Lease, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := client.LeaseFrom(r.Context())
		first := l.Expires()
		entered <- l
		// Until the lease outlived the expiry it was granted with.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !time.Now().After(first) || !l.Expires().After(first) {
			select {
			case <-r.Context().Done():
				log.add("handler cancelled: %v", context.Cause(r.Context()))
				return
			case <-tick.C:
			}
		}
		if err := r.Context().Err(); err != nil {
			log.add("handler cancelled: %v", context.Cause(r.Context()))
			return
		}
		io.WriteString(w, "done")
		log.add("handler returned")
	})
	srv := httptest.NewServer(c.Middleware("/long", client.MiddlewareOptions{})(h))
	defer srv.Close()
	replied := getAsync(t, srv)
	l := <-entered
	if ttl := time.Until(l.Expires()); ttl > 2*time.Second {
		t.Fatalf("request lease of %s, over the agent's 2s share", ttl)
	}
	granted := make(chan *client.Lease, 1)
	go func() {
		w, err := c.Acquire(ctx, "/long", semaphore.ReadWritePriority, client.Options{Timeout: settle})
		if err != nil {
			log.add("writer: %v", err)
		} else {
			log.add("writer granted")
		}
		granted <- w
	}()
	if got := <-replied; got.status != 200 || got.body != "done" {
		t.Fatalf("long request: %+v; events %q", got, log.get())
	}
	if w := <-granted; w != nil {
		w.Release(ctx)
	}
	if got, want := log.get(), []string{"handler returned", "writer granted"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// lostReply is what a visitor and the handler saw of a request whose
// lease was lost.
type lostReply struct {
	status  int
	body    string
	readErr error    // reading the body to its end
	events  []string // the handler's
	logs    string   // the middleware's
}

// leaseLost serves one request whose handler waits for its context, and
// force-unlocks the request's lease, as an operator would, once the
// handler runs; write is what the handler did first.
func leaseLost(t *testing.T, name string, write func(http.ResponseWriter)) lostReply {
	t.Helper()
	_, c := startAgent(t)
	ctx := ctxT(t)
	var log events
	var logs syncBuffer
	entered := make(chan *client.Lease, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(w)
		entered <- client.LeaseFrom(r.Context())
		<-r.Context().Done()
		cause := context.Cause(r.Context())
		log.add("handler cancelled, lost %v", errors.Is(cause, semaphore.ErrLost))
		_, err := io.WriteString(w, "late")
		log.add("late write: lost %v", errors.Is(err, client.ErrLeaseLost))
	})
	mw := c.Middleware(name, client.MiddlewareOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	srv := httptest.NewServer(mw(h))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	answered := make(chan lostReply, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			answered <- lostReply{readErr: err}
			return
		}
		defer resp.Body.Close()
		// To its end: the handler has returned by then.
		body, err := io.ReadAll(resp.Body)
		answered <- lostReply{status: resp.StatusCode, body: string(body), readErr: err}
	}()
	l := <-entered
	if _, err := c.ForceUnlock(ctx, name, l.ID(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	got := <-answered
	if got.status == 0 {
		t.Fatalf("no answer: %v", got.readErr)
	}
	if !closed(l.Done(), settle) || !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("lease after the force-unlock: %v", l.Err())
	}
	got.events, got.logs = log.get(), logs.String()
	return got
}

// A lease lost mid-request cancels the handler's context; with nothing
// written yet the visitor gets the maintenance page.
func TestMiddlewareLeaseLostCancels(t *testing.T) {
	got := leaseLost(t, "/lost", func(http.ResponseWriter) {})
	if got.readErr != nil || got.status != 503 || got.body != defaultPage("/site") {
		t.Fatalf("answer after the loss: %d %q %v", got.status, got.body, got.readErr)
	}
	if want := []string{"handler cancelled, lost true", "late write: lost true"}; !slices.Equal(got.events, want) {
		t.Fatalf("events %q, want %q", got.events, want)
	}
	if !strings.Contains(got.logs, "lock was lost; answering 503") {
		t.Fatalf("the loss is not logged: %q", got.logs)
	}
}

// A lease lost while the body streams aborts the response: the visitor
// cannot take the part sent for a whole page.
func TestMiddlewareLeaseLostAbortsStream(t *testing.T) {
	got := leaseLost(t, "/stream", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "first part\n")
		http.NewResponseController(w).Flush()
	})
	if got.status != 200 || got.readErr == nil || got.body != "first part\n" {
		t.Fatalf("answer %d %q, err %v: want the 200 and first part sent, then a broken connection", got.status, got.body, got.readErr)
	}
	if want := []string{"handler cancelled, lost true", "late write: lost true"}; !slices.Equal(got.events, want) {
		t.Fatalf("events %q, want %q", got.events, want)
	}
	if !strings.Contains(got.logs, "lock was lost; aborting the response") {
		t.Fatalf("the loss is not logged: %q", got.logs)
	}
}

// An agent that stops mid-request cannot renew the lease: the handler's
// context is cancelled by the lease's expiry at the latest, and the
// visitor gets the maintenance page.
func TestMiddlewareAgentGoneCancels(t *testing.T) {
	a, c := startAgentShare(t, time.Second)
	var log events
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		log.add("handler cancelled, lost %v", errors.Is(context.Cause(r.Context()), semaphore.ErrLost))
	})
	srv := httptest.NewServer(c.Middleware("/gone", client.MiddlewareOptions{})(h))
	defer srv.Close()
	replied := getAsync(t, srv)
	<-entered
	if err := a.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := <-replied; got.status != 503 || got.body != defaultPage("/site") {
		t.Fatalf("answer with the agent gone: %+v", got)
	}
	if got, want := log.get(), []string{"handler cancelled, lost true"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// A handler that took the connection over (a websocket, say) has it
// closed when the lease is lost.
func TestMiddlewareLeaseLostClosesHijacked(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	var log events
	entered, finished := make(chan *client.Lease, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(finished)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			log.add("hijack: %v", err)
			entered <- nil
			return
		}
		defer conn.Close()
		entered <- client.LeaseFrom(r.Context())
		<-r.Context().Done()
		_, err = conn.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
		log.add("write after the loss fails: %v", err != nil)
	})
	srv := httptest.NewServer(c.Middleware("/hijack", client.MiddlewareOptions{})(h))
	defer srv.Close()
	replied := getAsync(t, srv)
	l := <-entered
	if l == nil {
		t.Fatalf("events %q", log.get())
	}
	if _, err := c.ForceUnlock(ctx, "/hijack", l.ID(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	if got := <-replied; got.status != 0 {
		t.Fatalf("answer on a closed connection: %+v", got)
	}
	<-finished // the server does not wait for a hijacked connection's handler
	if got, want := log.get(), []string{"write after the loss fails: true"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// defaultPage is the default maintenance page of name when the writer
// gave no reason and no expected end.
func defaultPage(name string) string {
	var b bytes.Buffer
	if err := client.DefaultMaintenanceTemplate.Execute(&b, client.MaintenanceInfo{Name: name, RetryAfter: 30}); err != nil {
		panic(err)
	}
	return b.String()
}

// TestMiddlewareTellsReadersAWriterWaits: a request running when a drain
// starts hears it (Lease.Draining), and its response asks the visitor's
// connection to close: a long poll ends early, and the visitor's next
// request meets the maintenance page on a new connection.
func TestMiddlewareTellsReadersAWriterWaits(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	heard, polling := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(c.Middleware("/poll", client.MiddlewareOptions{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			draining := client.LeaseFrom(r.Context()).Draining()
			close(polling)
			select { // a long poll: it answers when a writer waits
			case <-draining:
				close(heard)
				io.WriteString(w, "ended early")
			case <-r.Context().Done():
			}
		})))
	defer srv.Close()
	type pollReply struct {
		status int
		body   string
		close  bool // the response asked for the connection's end
		err    error
	}
	answer := make(chan pollReply, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/poll", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			answer <- pollReply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answer <- pollReply{resp.StatusCode, string(b), resp.Close, err}
	}()
	// The poll holds its read lock; a drain asks for the name.
	select {
	case <-polling:
	case <-ctx.Done():
		t.Fatal("the long poll never ran")
	}
	drained := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "/poll", semaphore.ReadWritePriority, client.Options{Timeout: time.Minute})
		if err == nil {
			err = w.Release(ctx)
		}
		drained <- err
	}()
	select {
	case <-heard:
	case <-ctx.Done():
		t.Fatal("the long poll never heard that a writer waits")
	}
	got := <-answer
	if got.err != nil || got.status != 200 || got.body != "ended early" || !got.close {
		t.Fatalf("the long poll's answer: %+v (want 200, ended early, Connection: close)", got)
	}
	if err := <-drained; err != nil {
		t.Fatalf("the drain: %v", err)
	}
}

// TestMiddlewareRequestEndsAfterClose: a request that ends after its
// client's Close (a frontend shutting down) still gives its lock back.
// (A Close that waits while such a release starts was a WaitGroup grown
// during its Wait: the race detector caught it in the websocket tests.)
func TestMiddlewareRequestEndsAfterClose(t *testing.T) {
	a, c := startAgent(t)
	ctx := ctxT(t)
	c2, err := client.New(client.Config{API: a.APIAddr()})
	if err != nil {
		t.Fatal(err)
	}
	entered, let := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(c2.Middleware("/closing", client.MiddlewareOptions{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-let
			io.WriteString(w, "done")
		})))
	defer srv.Close()
	replied := getAsync(t, srv)
	<-entered
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	close(let)
	if got := <-replied; got.status != 200 || got.body != "done" {
		t.Fatalf("the request: %+v", got)
	}
	// Its release ran before the handler's return reached net/http: a
	// writer gets the name at once.
	w, err := c.Acquire(ctx, "/closing", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatalf("a writer after the request: %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
