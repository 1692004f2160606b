package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

func TestAcquireRenewRelease(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/a", semaphore.Exclusive, client.Options{Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == 0 || l.Name() != "/a" || l.Mode() != semaphore.Exclusive || l.ID() == "" {
		t.Fatalf("lease: token %d name %q mode %v id %q", l.Token(), l.Name(), l.Mode(), l.ID())
	}
	if left := time.Until(l.Expires()); left <= 0 || left > 11*time.Second {
		t.Fatalf("expires in %s, want about 10s", left)
	}
	done := l.Done()
	before := l.Expires()
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Expires().Before(before) {
		t.Fatalf("renewal moved the expiry back: %s -> %s", before, l.Expires())
	}
	if isClosed(done) || l.Err() != nil {
		t.Fatalf("held lease ended: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(done) || l.Err() != nil {
		t.Fatalf("after Release: done closed %v, err %v", isClosed(done), l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("Renew after Release: %v, want semaphore.ErrUnknownLease", err)
	}
	// The name is free again, with a higher token.
	next, err := c.Acquire(ctx, "/a", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("token %d after %d", next.Token(), l.Token())
	}
}

func TestTryRefusals(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	w, err := c.Acquire(ctx, "/site", semaphore.ReadWritePriority, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	_, err = c.Acquire(ctx, "/site", semaphore.Exclusive, client.Options{Try: true})
	var apiErr *client.APIError
	if !errors.Is(err, semaphore.ErrTimedOut) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("writer's try on a held name: %v, want ErrTimedOut (409)", err)
	}
	_, err = c.Acquire(ctx, "/site", semaphore.ReadOnly, client.Options{Try: true})
	if !errors.Is(err, semaphore.ErrDraining) || !errors.As(err, &apiErr) || apiErr.Code != "draining" {
		t.Fatalf("reader's try during a writer: %v, want ErrDraining", err)
	}
	if _, err := c.Acquire(ctx, "", semaphore.ReadOnly, client.Options{}); !errors.Is(err, semaphore.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	if _, err := c.Acquire(ctx, "/x", semaphore.ReadOnly, client.Options{Duration: -time.Second}); !errors.Is(err, semaphore.ErrInvalid) {
		t.Fatalf("negative duration: %v, want ErrInvalid", err)
	}
}

func TestUnavailable(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	c, err := client.New(client.Config{API: filepath.Join(dir, "nobody.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Acquire(ctx, "/a", semaphore.Exclusive, client.Options{}); !errors.Is(err, semaphore.ErrUnavailable) {
		t.Fatalf("acquire without an agent: %v, want semaphore.ErrUnavailable", err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, semaphore.ErrUnavailable) {
		t.Fatalf("status without an agent: %v, want semaphore.ErrUnavailable", err)
	}
	// TCP: a port nobody listens on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	tc, err := client.New(client.Config{API: addr, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := tc.Locks(ctx, ""); !errors.Is(err, semaphore.ErrUnavailable) {
		t.Fatalf("locks on a closed port: %v, want semaphore.ErrUnavailable", err)
	}
	// Something else answers at the address: not an agent.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	oc, _ := client.New(client.Config{API: other.Listener.Addr().String(), Token: "t"})
	defer oc.Close()
	var apiErr *client.APIError
	if _, err := oc.Status(ctx); !errors.Is(err, semaphore.ErrUnavailable) || !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("status from a web server: %v, want semaphore.ErrUnavailable (404)", err)
	}
	// A canceled context is the caller's doing, not the agent's.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Status(canceled); !errors.Is(err, context.Canceled) || errors.Is(err, semaphore.ErrUnavailable) {
		t.Fatalf("status with a canceled context: %v", err)
	}
}

func TestConfig(t *testing.T) {
	t.Setenv(client.EnvAPI, "")
	t.Setenv(client.EnvToken, "")
	c, err := client.New(client.Config{})
	if err != nil || c.Addr() != api.DefaultAPI() {
		t.Fatalf("zero Config: %v, %v; want %s", c, err, api.DefaultAPI())
	}
	t.Setenv(client.EnvAPI, "/run/x/api.sock")
	if c, _ := client.New(client.Config{}); c.Addr() != "/run/x/api.sock" {
		t.Fatalf("$%s not used: %s", client.EnvAPI, c.Addr())
	}
	if _, err := client.New(client.Config{API: "127.0.0.1:7000"}); !errors.Is(err, semaphore.ErrInvalid) {
		t.Fatalf("TCP without a token: %v, want ErrInvalid", err)
	}
	t.Setenv(client.EnvToken, "s3cret")
	if _, err := client.New(client.Config{API: "127.0.0.1:7000"}); err != nil {
		t.Fatalf("TCP with $%s: %v", client.EnvToken, err)
	}
}

// A TCP API needs the bearer token; the client sends it.
func TestTCPToken(t *testing.T) {
	ctx := ctxT(t)
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "tcp", InMemory: true, API: "127.0.0.1:0", APIToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	good, _ := client.New(client.Config{API: a.APIAddr(), Token: "s3cret"})
	defer good.Close()
	if err := waitReady(ctx, good); err != nil {
		t.Fatal(err)
	}
	bad, _ := client.New(client.Config{API: a.APIAddr(), Token: "wrong"})
	defer bad.Close()
	if _, err := bad.Status(ctx); !errors.Is(err, semaphore.ErrUnauthorized) {
		t.Fatalf("wrong token: %v, want semaphore.ErrUnauthorized", err)
	}
	l, err := good.Acquire(ctx, "/t", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStatusLocks(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	s, err := c.Status(ctx)
	if err != nil || !s.Ready || s.State != "LOCK_READY" {
		t.Fatalf("status: %+v, %v", s.Status, err)
	}
	l, err := c.Acquire(ctx, "/locks/a", semaphore.ReadOnly, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	tab, err := c.Locks(ctx, "/locks/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tab.Requests, func(r api.OwnRequest) bool { return r.Request == l.ID() }) {
		t.Fatalf("lease %s not in %+v", l.ID(), tab.Requests)
	}
	if tab, _ := c.Locks(ctx, "/other"); len(tab.Requests) != 0 {
		t.Fatalf("prefix not applied: %+v", tab.Requests)
	}
}

// Force-unlocked: the agent ends the lease at once; a renewal says lost.
func TestForceUnlockThenRenew(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/f", semaphore.Exclusive, client.Options{Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ids, err := c.ForceUnlock(ctx, "/f", l.ID(), 0, "test")
	if err != nil || !slices.Equal(ids, []string{l.ID()}) {
		t.Fatalf("force-unlock: %v, %v", ids, err)
	}
	if err := l.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("renew after force-unlock: %v, want ErrLost", err)
	}
	if !isClosed(l.Done()) || !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("after the refused renewal: done %v, err %v", isClosed(l.Done()), l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release of a lost lease: %v", err)
	}
	if !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("Release hid the loss: %v", l.Err())
	}
	if _, err := c.ForceUnlock(ctx, "/f", "", 12345, "test"); !errors.Is(err, semaphore.ErrUnknownLease) {
		t.Fatalf("force-unlock of an unknown token: %v", err)
	}
}

// With AutoRenew nobody calls Renew: the renewer finds the loss.
func TestForceUnlockAutoRenew(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/f", semaphore.Exclusive, client.Options{Duration: time.Second, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	done := l.Done()
	if _, err := c.ForceUnlock(ctx, "/f", "", l.Token(), "test"); err != nil {
		t.Fatal(err)
	}
	if !closed(done, 3*time.Second) {
		t.Fatal("Done still open 3s after a force-unlock of a 1s auto-renewed lease")
	}
	if !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("Err: %v, want ErrLost", l.Err())
	}
}

func TestExpiry(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	start := time.Now()
	l, err := c.Acquire(ctx, "/e", semaphore.Exclusive, client.Options{Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if !closed(l.Done(), 3*time.Second) {
		t.Fatal("a 300ms lease still held after 3s")
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("lease ended after %s, before its 300ms", took)
	}
	if !errors.Is(l.Err(), semaphore.ErrLost) {
		t.Fatalf("Err: %v, want ErrLost", l.Err())
	}
}

func TestAutoRenew(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	// Renewals start at half the time left: 1.5 s for the first to come
	// back, however loaded the machine.
	l, err := c.Acquire(ctx, "/r", semaphore.Exclusive, client.Options{Duration: 3 * time.Second, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	first := l.Expires()
	// Past the first expiry, only renewals hold the lease.
	if closed(l.Done(), time.Until(first)+200*time.Millisecond) {
		t.Fatalf("auto-renewed lease lost: %v", l.Err())
	}
	if !l.Expires().After(first) || time.Until(l.Expires()) <= 0 {
		t.Fatalf("expiry %s not moved on from %s", l.Expires(), first)
	}
	// Still the holder at the agent: a try is refused.
	if _, err := c.Acquire(ctx, "/r", semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrTimedOut) {
		t.Fatalf("try on the renewed name: %v", err)
	}
	if err := l.Release(ctx); err != nil || l.Err() != nil {
		t.Fatalf("release: %v, err %v", err, l.Err())
	}
}

// The agent going away does not end a lease at once (it may be
// restarting): the lease runs to its expiry, which nobody renews.
func TestAgentStopLeaseRunsToExpiry(t *testing.T) {
	_, c, stop, err := runAgent()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "/s", semaphore.Exclusive, client.Options{Duration: 2 * time.Second, AutoRenew: true})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	done := l.Done()
	stop()
	if !closed(done, settle) {
		t.Fatalf("lease still held %s after its agent stopped", settle)
	}
	if !errors.Is(l.Err(), semaphore.ErrLost) || !strings.Contains(l.Err().Error(), "expired") {
		t.Fatalf("Err: %v, want ErrLost by the expiry", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, semaphore.ErrUnavailable) {
		t.Fatalf("release with the agent gone: %v, want semaphore.ErrUnavailable", err)
	}
	c.Close()
}

// fakeAgent serves a scripted API on a Unix socket: a lease of the given
// duration, a watch that reports the grant and then says nothing, and
// not_ready for renew and release. It stands for an agent that cannot
// help, which only the local timer can cover.
func fakeAgent(t *testing.T, duration time.Duration) *client.Client {
	t.Helper()
	notReady := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(api.ErrorJSON{Error: "not_ready", Message: "no valid view"})
	}
	var mu sync.Mutex
	var expires time.Time
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/acquire", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		// The agent's wall clock is an hour ahead (stepped): only the TTL,
		// counted on the client's monotonic clock, may set the end.
		expires = time.Now().Add(time.Hour)
		lj := api.LeaseJSON{Lease: "9.1.1", Name: "/fake", Mode: "read-only", Token: 7, Expires: expires,
			TTL: duration.String(), TTLMillis: duration.Milliseconds()}
		mu.Unlock()
		json.NewEncoder(w).Encode(lj)
	})
	mux.HandleFunc("GET /v1/watch", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		e := api.Event{Lease: "9.1.1", Name: "/fake", Kind: "granted", Token: 7, Expires: expires}
		mu.Unlock()
		json.NewEncoder(w).Encode(e)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /v1/renew", func(w http.ResponseWriter, r *http.Request) { notReady(w) })
	mux.HandleFunc("POST /v1/release", func(w http.ResponseWriter, r *http.Request) { notReady(w) })
	return serveFake(t, mux)
}

// The agent stays silent, and its wall clock is an hour off: the lease
// still ends at its TTL, counted from the acquire's send (a client that
// once trusted the wall-clock expiry held for an hour).
func TestExpiryWithSilentAgent(t *testing.T) {
	for _, auto := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "auto-renew"}[auto]
		t.Run(name, func(t *testing.T) {
			// A TTL long enough for a renewal's answer on a loaded machine.
			c := fakeAgent(t, time.Second)
			ctx := ctxT(t)
			l, err := c.Acquire(ctx, "/fake", semaphore.ReadOnly, client.Options{AutoRenew: auto})
			if err != nil {
				t.Fatal(err)
			}
			if !closed(l.Done(), 10*time.Second) {
				t.Fatal("lease not ended 10s after its 1s expiry")
			}
			err = l.Err()
			if !errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "expired") {
				t.Fatalf("Err: %v, want an expiry (ErrLost)", err)
			}
			if auto && !errors.Is(err, semaphore.ErrNotReady) {
				t.Fatalf("Err: %v, want the failed renewal's ErrNotReady in it", err)
			}
			if err := l.Release(ctx); !errors.Is(err, semaphore.ErrNotReady) {
				t.Fatalf("release: %v, want ErrNotReady", err)
			}
		})
	}
}

// TestAPIErrorSentinels pins the sentinel each code of the agent's
// answers unwraps to: the same as before the codes had one table.
func TestAPIErrorSentinels(t *testing.T) {
	for code, want := range map[string]error{
		"timedout": semaphore.ErrTimedOut, "draining": semaphore.ErrDraining, "not_ready": semaphore.ErrNotReady,
		"invalid": semaphore.ErrInvalid, "bad_request": semaphore.ErrInvalid, "overflow": semaphore.ErrOverflow,
		"lost": semaphore.ErrLost, "unknown_lease": semaphore.ErrUnknownLease, "unauthorized": semaphore.ErrUnauthorized,
		"unavailable": semaphore.ErrUnavailable, "canceled": semaphore.ErrUnavailable, "from-a-newer-agent": semaphore.ErrUnavailable,
		"": semaphore.ErrUnavailable,
	} {
		if err := (&client.APIError{Op: "op", Status: 500, Code: code}); !errors.Is(err, want) {
			t.Errorf("%q: %v is not %v", code, err, want)
		}
	}
}
