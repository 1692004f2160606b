package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/client"
)

// eventLog is an ordered record of what happened, from any goroutine;
// tests compare orders, never times.
type eventLog struct {
	mu   sync.Mutex
	list []string
}

func (e *eventLog) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *eventLog) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.list, s)
}

func (e *eventLog) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// TestMiddlewareKeepsDrainOut: a page view behind the Go middleware runs
// well past the agent's --share-lease (2s) while `sluice drain` waits.
// The middleware renews the request's lease, so the drain's command runs
// only once the handler returned, never beside it; a visitor arriving
// meanwhile gets the maintenance page.
func TestMiddlewareKeepsDrainOut(t *testing.T) {
	const share = 2 * time.Second
	dir := shortDir(t)
	sock := filepath.Join(dir, "api.sock")
	data := filepath.Join(dir, "0")
	agent := start(t, "agent", "--data", data, "--initial-members", peerID(t, data),
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--share-lease", share.String(), "--log-level", "warn")
	agent.waitLine(t, "API on")
	waitReady(t, unixClient(sock))

	c, err := client.New(client.Config{API: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var log eventLog
	entered := make(chan *client.Lease, 1)
	finish := make(chan struct{}) // the test ends the first page view
	var views atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if views.Add(1) > 1 {
			// A visitor admitted before the drain's word reached the
			// agent's shared read ticket: a short page view.
			log.add("visitor admitted")
			io.WriteString(w, "visitor")
			return
		}
		log.add("handler started")
		entered <- client.LeaseFrom(r.Context())
		select {
		case <-finish:
			io.WriteString(w, "done")
			log.add("handler returned")
		case <-r.Context().Done():
			log.add("handler cancelled")
		}
	})
	srv := httptest.NewServer(c.Middleware("/site", client.MiddlewareOptions{})(h))
	defer srv.Close()
	end := sync.OnceFunc(func() { close(finish) })
	defer end() // a failing test lets the page view go, before the server closes
	get := func() (int, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	type answer struct {
		status int
		body   string
		err    error
	}
	first := make(chan answer, 1)
	go func() {
		s, b, err := get()
		first <- answer{s, b, err}
	}()
	l := <-entered
	expiry := l.Expires()
	if ttl := time.Until(expiry); ttl > share {
		t.Fatalf("request lease of %s, over --share-lease %s", ttl, share)
	}

	drain := start(t, "drain", "/site", "--api", sock, "--", "echo", "drain command runs")
	waiting, outDone := make(chan struct{}), make(chan struct{})
	go func() { // the drain's output, as events
		defer close(outDone)
		seen := false
		for line := range drain.lines {
			switch {
			case !seen && strings.Contains(line, "draining /site (hard): 1 readers left"):
				seen = true
				log.add("drain waiting")
				close(waiting)
			case line == "drain command runs": // the command's own line
				log.add("drain command runs")
			}
		}
	}()
	select {
	case <-waiting:
	case <-time.After(bound):
		t.Fatalf("the drain never reported the reader; events %q", log.get())
	}
	// The drain reports the reader from the table, which may be before
	// its word to let the agent's shared read ticket go reached the
	// agent (a loaded machine widens that gap): visitors until then are
	// admitted, and one after it gets the maintenance page.
	for deadline := time.Now().Add(bound); ; {
		s, b, err := get()
		if err == nil && s == http.StatusServiceUnavailable && strings.Contains(b, "Down for maintenance") {
			break
		}
		if err != nil || s != http.StatusOK || b != "visitor" || time.Now().After(deadline) {
			t.Fatalf("a visitor during the drain: %d %q %v; events %q", s, b, err, log.get())
		}
		time.Sleep(10 * time.Millisecond) // polling: the agent signals nothing to a visitor
	}
	log.add("visitor turned away")

	// The page view goes on until --share-lease past the expiry it was
	// granted with, its lease renewed beyond that: without renewals the
	// drain's command would have run from the first expiry on.
	deadline := time.Now().Add(bound)
	for !time.Now().After(expiry.Add(share)) || !l.Expires().After(expiry.Add(share)) {
		if log.has("drain command runs") || log.has("handler cancelled") || time.Now().After(deadline) {
			t.Fatalf("the request's lease was not kept: expires %s (granted until %s), err %v; events %q",
				l.Expires(), expiry, l.Err(), log.get())
		}
		time.Sleep(20 * time.Millisecond) // polling the lease's renewals: they signal nothing
	}
	end()
	if a := <-first; a.err != nil || a.status != 200 || a.body != "done" {
		t.Fatalf("the long page view: %d %q %v", a.status, a.body, a.err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d; events %q", code, log.get())
	}
	select {
	case <-outDone: // the drain's output read to its end
	case <-time.After(bound):
		t.Fatalf("the drain's output is still open; events %q", log.get())
	}
	want := []string{"handler started", "drain waiting", "visitor turned away", "handler returned", "drain command runs"}
	got := slices.DeleteFunc(log.get(), func(e string) bool { return e == "visitor admitted" })
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
