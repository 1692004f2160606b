package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// restartable is a one-node agent that can be stopped and started again
// on the same socket: on a data directory, where its table outlives it,
// or in memory, where a restart is a new cluster that never had a lease.
type restartable struct {
	t        *testing.T
	data     string // "": in memory
	sock     string
	a        *daemon.Agent
	restarts int
}

func newRestartable(t *testing.T, onDisk bool) *restartable {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl") // short: socket paths are capped
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{t: t, sock: filepath.Join(dir, "api.sock")}
	if onDisk {
		r.data = t.TempDir()
	}
	t.Cleanup(func() {
		r.stop()
		os.RemoveAll(dir)
	})
	r.start()
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "solo", DataDir: r.data, InMemory: r.data == "", API: r.sock})
	if err != nil {
		r.t.Fatalf("start the agent: %v", err)
	}
	r.a = a
}

func (r *restartable) stop() {
	if r.a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	r.a.Stop(ctx)
	r.a = nil
}

func (r *restartable) restart() {
	r.t.Helper()
	r.stop()
	r.start()
	r.restarts++
}

// heldBy waits until the agent lists id among its own requests as held.
func heldBy(ctx context.Context, t *testing.T, c *client.Client, name, id string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last api.Table
	for {
		tab, err := c.Locks(ctx, name)
		if err == nil && slices.ContainsFunc(tab.Requests, func(r api.OwnRequest) bool { return r.Request == id && r.Phase == "held" }) {
			return
		}
		last = tab
		select {
		case <-ctx.Done():
			t.Fatalf("lease %s never held by the restarted agent: %v; its requests: %+v", id, err, last.Requests)
		case <-tick.C:
		}
	}
}

// A lease outlives a restart of its agent: the watch reconnects, the
// restarted agent takes the lease over from the leaders' table when it is
// renewed, the name stays held meanwhile, and the release through the
// restarted agent frees it. Another client's idle compact connection to
// the old agent is dialled anew, not reported as an error.
func TestLeaseOutlivesAgentRestart(t *testing.T) {
	agent := newRestartable(t, true)
	ctx := ctxT(t)
	c, err := client.New(client.Config{API: agent.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, "/job", semaphore.Exclusive, client.Options{Duration: time.Minute, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	other, err := client.New(client.Config{API: agent.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	warm, err := other.Acquire(ctx, "/warm", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil { // its compact connection goes back to the pool
		t.Fatal(err)
	}

	agent.restart()
	if err := waitReady(ctx, other); err != nil { // over HTTP: the compact pool is untouched
		t.Fatal(err)
	}
	// The pooled connection leads to the stopped agent: dialled anew.
	if _, err := other.Acquire(ctx, "/job", semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrTimedOut) {
		t.Fatalf("try on the held name after the restart, on a pooled connection: %v, want timed out", err)
	}
	heldBy(ctx, t, c, "/job", l.ID())
	if isClosed(done) {
		t.Fatalf("lease ended by the restart: %v", l.Err())
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew through the restarted agent: %v", err)
	}
	if _, err := other.Acquire(ctx, "/job", semaphore.Exclusive, client.Options{Try: true}); !errors.Is(err, semaphore.ErrTimedOut) {
		t.Fatalf("try on the held name: %v, want timed out", err)
	}
	if err := l.Release(ctx); err != nil || l.Err() != nil {
		t.Fatalf("release through the restarted agent: %v, err %v", err, l.Err())
	}
	next, err := other.Acquire(ctx, "/job", semaphore.Exclusive, client.Options{Try: true})
	if err != nil {
		t.Fatalf("try after the release: %v", err)
	}
	if next.Token() <= l.Token() {
		t.Fatalf("token %d after the release, %d before", next.Token(), l.Token())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lease the cluster no longer has after the agent restarted (here an
// agent in memory: a new cluster) is lost as soon as the restarted agent
// says so, long before its expiry.
func TestLeaseLostWhenRestartedClusterLacksIt(t *testing.T) {
	agent := newRestartable(t, false)
	ctx := ctxT(t)
	c, err := client.New(client.Config{API: agent.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, "/job", semaphore.Exclusive, client.Options{Duration: 10 * time.Minute, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	agent.restart()
	if !closed(done, settle) {
		t.Fatalf("lease unknown to the restarted agent still held after %s", settle)
	}
	if err := l.Err(); !errors.Is(err, semaphore.ErrLost) || strings.Contains(err.Error(), "expired") {
		t.Fatalf("Err: %v, want ErrLost by the agent's word", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release of a lost lease: %v", err)
	}
}
