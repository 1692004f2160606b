package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// A one-node agent in the process, then a lock cycle through its API.
func Example() {
	ctx := context.Background()
	// Socket paths must stay under ~100 bytes: a short temporary directory.
	dir, _ := os.MkdirTemp("", "sl")
	defer os.RemoveAll(dir)
	agent, err := daemon.StartAgent(ctx, daemon.AgentConfig{InMemory: true,
		API: filepath.Join(dir, "api.sock")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Stop(ctx)

	c, err := client.New(client.Config{API: agent.APIAddr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	// A fresh agent elects itself first: wait for LOCK_READY, bounded.
	ready, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for s, err := c.Status(ready); !s.Ready; s, err = c.Status(ready) {
		if ready.Err() != nil {
			fmt.Println("agent not ready:", err, s.Reason)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}

	lease, err := c.Acquire(ctx, "/site", semaphore.ReadWritePriority, client.Options{Duration: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("granted:", lease.Token() > 0, lease.Mode())

	_, err = c.Acquire(ctx, "/site", semaphore.Exclusive, client.Options{Try: true})
	fmt.Println("writer's try while held:", errors.Is(err, semaphore.ErrTimedOut))
	_, err = c.Acquire(ctx, "/site", semaphore.ReadOnly, client.Options{Try: true})
	fmt.Println("reader's try while held:", errors.Is(err, semaphore.ErrDraining))

	fmt.Println("release:", lease.Release(ctx), lease.Err())
	// Output:
	// granted: true read-write-priority
	// writer's try while held: true
	// reader's try while held: true
	// release: <nil> <nil>
}

// exampleAgent starts a one-node agent on a temporary socket and returns
// a client for it, ready; stop undoes both.
func exampleAgent() (c *client.Client, stop func()) {
	_, c, stop, err := runAgent() // as in Example: daemon.StartAgent, then wait for LOCK_READY
	if err != nil {
		panic(err)
	}
	return c, stop
}

// The agent unlocks a lease by force; the holder learns it at its next
// renewal, and Done closes.
func ExampleLease_Done() {
	c, stop := exampleAgent()
	defer stop()
	ctx := context.Background()

	lease, err := c.Acquire(ctx, "/jobs/report", semaphore.Exclusive, client.Options{Duration: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx) // frees the agent's record, lost or not

	if _, err := c.ForceUnlock(ctx, "/jobs/report", lease.ID(), 0, "example"); err != nil {
		fmt.Println(err)
		return
	}
	err = lease.Renew(ctx)
	fmt.Println("renewal refused as lost:", errors.Is(err, semaphore.ErrLost))
	<-lease.Done()
	fmt.Println("lost:", errors.Is(lease.Err(), semaphore.ErrLost))
	// Output:
	// renewal refused as lost: true
	// lost: true
}

// A frontend behind the middleware: a drain (a READ_WRITE_PRIORITY lease on
// the site's name) turns visitors away with the maintenance page.
func ExampleClient_Middleware() {
	c, stop := exampleAgent()
	defer stop()
	ctx := context.Background()

	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := client.LeaseFrom(r.Context())
		fmt.Fprintf(w, "hello (reader lease: %v)", l.Mode())
	})
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{})(site))
	defer srv.Close()
	visit := func() {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			body = []byte("maintenance page, Retry-After " + resp.Header.Get("Retry-After"))
		}
		fmt.Println(resp.StatusCode, string(body))
	}

	visit()
	drain, err := c.Acquire(ctx, "/site", semaphore.ReadWritePriority, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	visit()
	drain.Release(ctx)
	visit()
	// Output:
	// 200 hello (reader lease: read-only)
	// 503 maintenance page, Retry-After 30
	// 200 hello (reader lease: read-only)
}
