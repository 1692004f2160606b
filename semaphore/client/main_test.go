package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// Every lease a test takes is released and every agent stopped; no
// goroutine (watch, renewer, idle connection) may outlive that.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// settle bounds every wait of the tests.
const settle = 10 * time.Second

// runAgent starts a one-node agent, Badger in memory, serving the API on
// a Unix socket in a short temporary directory (socket paths are limited
// to ~100 bytes), and a client for it, once the agent is ready. stop
// closes the client and stops the agent.
func runAgent() (_ *daemon.Agent, _ *client.Client, stop func(), err error) {
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "solo", InMemory: true,
		API: filepath.Join(dir, "api.sock")})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	c, err := client.New(client.Config{API: a.APIAddr()})
	stop = func() {
		if c != nil {
			c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		a.Stop(ctx)
		os.RemoveAll(dir)
	}
	if err == nil {
		err = waitReady(ctx, c)
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return a, c, stop, nil
}

// waitReady polls the agent's status until it is LOCK_READY.
func waitReady(ctx context.Context, c *client.Client) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := c.Status(ctx)
		if err == nil && s.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not ready: %v (last: %v, %s)", ctx.Err(), err, s.Reason)
		case <-tick.C:
		}
	}
}

func startAgent(t *testing.T) (*daemon.Agent, *client.Client) {
	t.Helper()
	a, c, stop, err := runAgent()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return a, c
}

// closed waits for ch to close, within d.
func closed(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	t.Cleanup(cancel)
	return ctx
}

// fakeSocket listens on a Unix socket of its own under a short path
// (socket paths are capped), removed when the test ends.
func fakeSocket(t *testing.T) net.Listener {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "fake.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// serveFake serves a scripted agent's mux on a Unix socket of its own
// (a short path: socket paths are capped), and returns a client of it;
// both end with the test.
func serveFake(t *testing.T, mux *http.ServeMux) *client.Client {
	t.Helper()
	lis := fakeSocket(t)
	srv := &http.Server{Handler: mux}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	c, err := client.New(client.Config{API: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		<-served
	})
	return c
}
