package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Environment variables read when Config leaves the field empty.
const (
	EnvAPI   = "SLUICE_API"
	EnvToken = "SLUICE_API_TOKEN"
)

// Config configures a Client. The zero Config talks to the local agent at
// $SLUICE_API or api.DefaultAPI().
type Config struct {
	// API is the agent's Unix socket path or loopback host:port. Empty:
	// $SLUICE_API, else api.DefaultAPI().
	API string
	// Token is the bearer token a TCP address needs. Empty:
	// $SLUICE_API_TOKEN.
	Token string
	// HTTPClient is used as is when set; for a socket path its transport
	// must dial that socket (requests go to http://sluice/...). It must
	// have no overall Timeout: Acquire and watches last long. Nil: a
	// client built for API.
	HTTPClient *http.Client
	// HTTPOnly sends every call over HTTP/JSON. Otherwise, on a Unix
	// socket, acquire, release and renew use the agent's compact protocol
	// (less than a tenth of HTTP's cost to the agent), falling back to
	// HTTP for an agent that does not speak it.
	HTTPOnly bool
}

// Client is a connection to one agent; safe for concurrent use.
type Client struct {
	addr  string
	base  string
	token string
	hc    *http.Client
	// compactPool carries acquire, release and renew on a Unix socket;
	// nil on TCP or with Config.HTTPOnly.
	compactPool *compactPool
	// bg counts calls made in the background (the middleware's
	// releases); Close waits for them. closing, under bgMu, says Close
	// began: a WaitGroup must not grow while it is waited for.
	bg      sync.WaitGroup
	bgMu    sync.Mutex
	closing bool
	// closed closes when Close begins: the keepers of the middleware's
	// lent leases give them back (goUntilClosed). Made on first use.
	closed chan struct{}
}

// background runs fn on a goroutine of its own that Close waits for; once
// Close began (a request that ends as its frontend shuts down), it runs
// fn before returning instead.
func (c *Client) background(fn func()) {
	c.bgMu.Lock()
	if c.closing {
		c.bgMu.Unlock()
		fn()
		return
	}
	c.bg.Add(1)
	c.bgMu.Unlock()
	go func() {
		defer c.bg.Done()
		fn()
	}()
}

// resendTimeout bounds a release sent again after its first write
// failed.
const resendTimeout = 5 * time.Second

// resendReleases sends again, answered and in the background, releases
// sent without an answer whose write failed (the agent went away, or the
// connection was ended): a release taken twice is taken once. Those that
// fail again are left to the leases' expiry.
func (c *Client) resendReleases(held []api.CompactRequest) {
	c.background(func() {
		for _, req := range held {
			ctx, cancel := context.WithTimeout(context.Background(), resendTimeout)
			op := callName{"release", req.Lease}
			req.Op = api.OpRelease
			_, ok, err := c.compact(ctx, op, &req)
			if !ok {
				err = c.call(ctx, op.String(), http.MethodPost, "/v1/release", api.LeaseBody{Lease: req.Lease}, nil)
			}
			cancel()
			_ = err // as a release without an answer: the agent counts its failures, the leaders expire the lease
		}
	})
}

// New returns a client for cfg. It does not dial.
func New(cfg Config) (*Client, error) {
	addr := cmp.Or(cfg.API, os.Getenv(EnvAPI), api.DefaultAPI())
	token := cmp.Or(cfg.Token, os.Getenv(EnvToken))
	c := &Client{addr: addr, token: token, hc: cfg.HTTPClient}
	tcp := api.IsTCPAddr(addr)
	if tcp {
		if token == "" {
			return nil, fmt.Errorf("%w: client: %s is a TCP address and needs a token (Config.Token or $%s)", semaphore.ErrInvalid, addr, EnvToken)
		}
		c.base = "http://" + addr
	} else {
		c.base = "http://sluice" // the host is ignored: the transport dials the socket
	}
	if !tcp && !cfg.HTTPOnly {
		c.compactPool = newCompactPool(addr)
		c.compactPool.resend = c.resendReleases
	}
	if c.hc == nil {
		tr := &http.Transport{
			// Middleware takes a lock per request: keep enough
			// connections to the agent for a busy frontend.
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}
		var d net.Dialer
		if tcp {
			tr.DialContext = d.DialContext
		} else {
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", addr)
			}
		}
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// Addr is the agent's address the client uses.
func (c *Client) Addr() string { return c.addr }

// Close waits for the releases the middleware runs in the background
// (with an agent that answers every release; others get them at once,
// sent without an answer), gives back the leases the middleware lends to
// page views (once their page views are done: stop serving first), and
// closes the client's idle connections. Other leases are not touched:
// release them first.
func (c *Client) Close() error {
	c.bgMu.Lock()
	if !c.closing && c.closed != nil {
		close(c.closed)
	}
	c.closing = true
	c.bgMu.Unlock()
	c.bg.Wait()
	c.hc.CloseIdleConnections()
	if c.compactPool != nil {
		c.compactPool.close()
	}
	return nil
}

// APIError is an error answer of the agent. It unwraps to the sentinel of
// its code, so errors.Is(err, semaphore.ErrDraining) and the like work.
type APIError struct {
	Op      string // what the client did: "acquire /site", "renew 1.2.3"
	Status  int    // HTTP status
	Code    string // the API's code: "draining", "timedout", ...
	Message string // the agent's message
}

func (e *APIError) Error() string {
	return fmt.Sprintf("client: %s: %s (%d): %s", e.Op, cmp.Or(e.Code, "no code"), e.Status, e.Message)
}

// Unwrap is the sentinel of e.Code in the table (core/codes): bad_request
// is an ErrInvalid, canceled an ErrUnavailable; codes it does not know,
// and answers that are not the agent's, count as ErrUnavailable.
func (e *APIError) Unwrap() error { return sentinel(e.Code) }

// sentinel is the sentinel of an API code (an error answer's, a watch
// event's); ErrUnavailable for a code the table lacks.
func sentinel(code string) error {
	if r, ok := codes.ByCode(code); ok {
		return r.Err
	}
	return semaphore.ErrUnavailable
}

// send does one request and returns the answer when it is a 200; every
// other outcome is an error as the package documents.
func (c *Client) send(ctx context.Context, op, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("client: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: %s: %w", op, ctx.Err())
		}
		return nil, fmt.Errorf("client: %s: %w: %w", op, semaphore.ErrUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var ej api.ErrorJSON
	if json.Unmarshal(raw, &ej) != nil || ej.Error == "" {
		// Not the agent's answer: something else listens there.
		return nil, &APIError{Op: op, Status: resp.StatusCode, Message: fmt.Sprintf("not an agent's answer: %.200q", raw)}
	}
	return nil, &APIError{Op: op, Status: resp.StatusCode, Code: ej.Error, Message: ej.Message}
}

// call does one request and decodes the answer into out (when not nil).
func (c *Client) call(ctx context.Context, op, method, path string, in, out any) error {
	resp, err := c.send(ctx, op, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body) // keeps the connection reusable
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s: %w", op, ctx.Err())
		}
		return fmt.Errorf("client: %s: reading the answer: %w: %w", op, semaphore.ErrUnavailable, err)
	}
	return nil
}

// Status is the agent's status: readiness (State LOCK_READY or NO_LOCK),
// view, members.
func (c *Client) Status(ctx context.Context) (api.StatusJSON, error) {
	var s api.StatusJSON
	err := c.call(ctx, "status", http.MethodGet, "/v1/status", nil, &s)
	return s, err
}

// Locks is the agent's lock table (when it is a leader) and its clients'
// requests, for the names starting with prefix.
func (c *Client) Locks(ctx context.Context, prefix string) (api.Table, error) {
	var t api.Table
	err := c.call(ctx, "locks "+prefix, http.MethodGet, "/v1/locks?prefix="+url.QueryEscape(prefix), nil, &t)
	return t, err
}

// ReleaseID releases the lease id on name that no Lease of this client
// holds: one a process that ended left (a failed drain kept, say). The
// agent lets its owner (the same user, or token) or an operator do it.
func (c *Client) ReleaseID(ctx context.Context, id, name string) error {
	var out api.Released
	return c.call(ctx, "release "+id, http.MethodPost, "/v1/release", api.LeaseBody{Lease: id, Name: name}, &out)
}

// RevokeReaders drops every READ_ONLY holder of name: a drain's grace is
// over. A writer of name may ask it, not only an operator. It returns the
// request ids dropped, and how many readers they were (Readers).
func (c *Client) RevokeReaders(ctx context.Context, name, by string) (api.ForceUnlocked, error) {
	var out api.ForceUnlocked
	err := c.call(ctx, "revoke readers "+name, http.MethodPost, "/v1/force-unlock",
		api.ForceBody{Name: name, Readers: true, By: by}, &out)
	return out, err
}

// ForceUnlock is the operator's release of someone else's lease on name,
// given by its lease id or, when lease is "", by its fencing token; by
// says who asks (user@host, may be empty), for the agent's log. It
// returns the request ids the leaders were asked to drop. The holder
// learns it at its next renewal.
func (c *Client) ForceUnlock(ctx context.Context, name, lease string, token uint64, by string) ([]string, error) {
	var out api.ForceUnlocked
	err := c.call(ctx, "force-unlock "+name, http.MethodPost, "/v1/force-unlock",
		api.ForceBody{Name: name, Lease: lease, Token: token, By: by}, &out)
	return out.Released, err
}
