package cli

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// proxyFlags are the flags of `sluice proxy`.
type proxyFlags struct {
	clientFlags
	listen, upstream, name, page, pageType, logLevel string
	hosts                                            []string
	retryAfter, duration, dialTimeout                time.Duration
	headerTimeout, shutdown, agentWait               time.Duration
	failOpen, trustForwarded, leasePerRequest        bool
	pathLevels                                       int
}

func newProxyCmd() *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy --upstream URL [--name NAME] [flags]",
		Short: "Serve a site through a reverse proxy that holds a read lock for every request",
		Long: "Serve --listen as a reverse proxy of --upstream (any HTTP site: nginx,\n" +
			"Apache, PHP-FPM behind them, Python, Ruby, Node, Java). Every request\n" +
			"holds a READ_ONLY lock of NAME for as long as it runs (streamed\n" +
			"responses, uploads and websockets too), renewed meanwhile: the\n" +
			"requests of a name share one lease of the proxy, given back as soon\n" +
			"as a writer waits and they are done (--lease-per-request: one each); while a\n" +
			"writer holds or drains NAME (sluice drain NAME -- CMD) visitors get the\n" +
			"maintenance page (503, Retry-After). A request whose lock is lost is\n" +
			"cut: its connection is closed, never answered beside the writer. It is\n" +
			"the Go client's middleware around Go's httputil.ReverseProxy, and needs\n" +
			"only the frontend role. SIGTERM lets the requests in flight finish\n" +
			"(up to --shutdown-timeout).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd) },
	}
	fl := cmd.Flags()
	f.clientFlags.add(cmd)
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on, host:port")
	fl.StringVar(&f.upstream, "upstream", "", "the site's URL, http://host:port (required)")
	fl.StringVar(&f.name, "name", "/site", "lock name of the site")
	fl.StringSliceVar(&f.hosts, "host", nil, "HOST=NAME: requests for that Host take that lock name instead of --name (repeat for more)")
	fl.StringVar(&f.page, "page", "", "file of the maintenance page, a Go html/template given .Name, .Reason, .ETA (a time.Time, zero when unknown) and .RetryAfter (seconds) (default: a short built-in page that shows them)")
	fl.StringVar(&f.pageType, "page-type", "text/html; charset=utf-8", "Content-Type of --page")
	fl.DurationVar(&f.retryAfter, "retry-after", 30*time.Second, "Retry-After of the maintenance page")
	fl.DurationVar(&f.duration, "duration", time.Minute, "each request's lease, renewed while it runs (the agent caps it at its --share-lease)")
	fl.DurationVar(&f.dialTimeout, "dial-timeout", 5*time.Second, "how long connecting to the upstream may take")
	fl.DurationVar(&f.headerTimeout, "upstream-timeout", time.Minute, "how long the upstream may take to begin its answer")
	fl.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for the requests in flight")
	fl.IntVar(&f.pathLevels, "path-levels", 0, "with agents of nested names (--nested-names): each request locks NAME joined with the first N segments of its path, so that sluice drain NAME/PART turns away only that part's visitors (0: every request locks NAME)")
	fl.BoolVar(&f.leasePerRequest, "lease-per-request", false, "give every request a lease of its own, a call to the agent each, so that sluice locks counts requests (default: the requests of a name share one lease of the proxy while no writer waits; a drain waits for them all either way)")
	fl.BoolVar(&f.failOpen, "fail-open", false, "serve without the lock when the agent cannot be asked (default: answer 503)")
	fl.DurationVar(&f.agentWait, "agent-wait", 2*time.Second, "how long a request waits for an agent that restarts before --fail-open decides; 0: no wait")
	fl.BoolVar(&f.trustForwarded, "trust-forwarded", false, "keep the X-Forwarded-For of requests (behind a load balancer you trust); otherwise it starts with the client's address")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// check reads the flags: the upstream's URL, the lock names by host and
// the page.
func (f *proxyFlags) check() (*url.URL, map[string]string, *template.Template, error) {
	if f.upstream == "" {
		return nil, nil, nil, usageErrorf("proxy: --upstream URL is required")
	}
	up, err := url.Parse(f.upstream)
	if err != nil || up.Scheme != "http" && up.Scheme != "https" || up.Host == "" {
		return nil, nil, nil, usageErrorf("proxy: --upstream %q is not an http:// or https:// URL with a host", f.upstream)
	}
	if err := semaphore.CheckName(f.name); err != nil {
		return nil, nil, nil, usageErrorf("proxy: --name: %v", err)
	}
	hosts := map[string]string{}
	for _, h := range f.hosts {
		host, name, ok := strings.Cut(h, "=")
		if !ok || host == "" {
			return nil, nil, nil, usageErrorf("proxy: --host %q is not HOST=NAME", h)
		}
		if err := semaphore.CheckName(name); err != nil {
			return nil, nil, nil, usageErrorf("proxy: --host %q: %v", h, err)
		}
		hosts[strings.ToLower(host)] = name
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--retry-after", f.retryAfter}, {"--duration", f.duration}, {"--dial-timeout", f.dialTimeout},
		{"--upstream-timeout", f.headerTimeout}, {"--shutdown-timeout", f.shutdown}} {
		if d.v <= 0 {
			return nil, nil, nil, usageErrorf("proxy: %s must be above 0, got %s", d.flag, d.v)
		}
	}
	if f.agentWait < 0 {
		return nil, nil, nil, usageErrorf("proxy: --agent-wait must be 0 or above, got %s", f.agentWait)
	}
	if f.pathLevels < 0 || f.pathLevels > semaphore.MaxDepth-1 {
		return nil, nil, nil, usageErrorf("proxy: --path-levels must be 0 to %d, got %d", semaphore.MaxDepth-1, f.pathLevels)
	}
	var page *template.Template
	if f.page != "" {
		b, err := os.ReadFile(f.page)
		if err != nil {
			return nil, nil, nil, usageErrorf("proxy: --page: %v", err)
		}
		if page, err = template.New("page").Parse(string(b)); err != nil {
			return nil, nil, nil, usageErrorf("proxy: --page %s: %v", f.page, err)
		}
		// A template that fails on the fields it is given fails now,
		// not in front of visitors.
		if err := page.Execute(io.Discard, client.MaintenanceInfo{Name: f.name, Reason: "a reason", ETA: time.Now(),
			RetryAfter: 30}); err != nil {
			return nil, nil, nil, usageErrorf("proxy: --page %s: %v", f.page, err)
		}
	}
	return up, hosts, page, nil
}

func (f *proxyFlags) run(cmd *cobra.Command) error {
	up, hosts, page, err := f.check()
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), f.logLevel)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	defer c.Close()
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return usageErrorf("proxy: --listen: %v", err)
	}
	h := f.handler(c, up, hosts, page, log)
	// Page views are read and answered by the front end; Go's server
	// gets the rest (bodies, upgrades, what does not parse).
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: proxyIdleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	front := newPageFront(h, srv, log)
	fmt.Fprintf(cmd.OutOrStdout(), "proxying http://%s to %s under the lock %q (agent: %s)\n", lis.Addr(), up, f.name, c.Addr())

	ctx, stop := signalContext(cmd)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- front.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The requests in flight finish, so that their locks are released.
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	if err := front.Shutdown(sctx); err != nil {
		_ = front.Close()
		return fmt.Errorf("proxy: requests still running after %s: %w", f.shutdown, err)
	}
	return nil
}

// proxyIdleTimeout is how long a visitor's kept-alive connection may
// wait for its next request (nginx keeps one 75 s).
const proxyIdleTimeout = 2 * time.Minute

// handler is the proxy: the middleware of the request's lock name around
// a reverse proxy of up.
func (f *proxyFlags) handler(c *client.Client, up *url.URL, hosts map[string]string, page *template.Template,
	log *slog.Logger) http.Handler {
	dialer := &net.Dialer{Timeout: f.dialTimeout, KeepAlive: 30 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = dialer.DialContext
	tr.ResponseHeaderTimeout = f.headerTimeout
	tr.MaxIdleConnsPerHost = 256
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host // the site sees the Host the visitor asked for
			if f.trustForwarded {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			}
			pr.SetXForwarded()
		},
		// Page views on the request's goroutine, the rest through tr.
		Transport:  newUpstreamTransport(up, tr, dialer, f.headerTimeout),
		BufferPool: copyBuffers{},
		// Zero: a response of unknown length or an event stream is
		// flushed at every write (ReverseProxy's rule), so streams go out
		// as they come; others leave in full buffers, without a flush
		// (a write to the visitor) per copy.
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the visitor left, or the request's lock was lost
			}
			log.Warn("upstream", "url", up.String(), "err", err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "502 bad gateway: the site behind this proxy did not answer (%s)\n", up.Host)
		},
	}
	o := client.MiddlewareOptions{Duration: f.duration, RetryAfter: f.retryAfter, Template: page,
		ContentType: f.pageType, FailOpen: f.failOpen, AgentWait: noWaitIfZero(f.agentWait), Logger: log, PathLevels: f.pathLevels,
		LeasePerRequest: f.leasePerRequest}
	byName := map[string]http.Handler{}
	for _, name := range append([]string{f.name}, valuesOf(hosts)...) {
		if byName[name] == nil {
			byName[name] = c.Middleware(name, o)(rp)
		}
	}
	if len(hosts) == 0 {
		return byName[f.name]
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		name, ok := hosts[host]
		if !ok {
			name = f.name
		}
		byName[name].ServeHTTP(w, r)
	})
}

// copyBuffers lends the reverse proxy its 32 KiB copy buffers: one made
// and cleared for every request cost more than the lock.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (copyBuffers) Get() []byte  { return copyBufferPool.Get().(*[32 << 10]byte)[:] }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put((*[32 << 10]byte)(b[:32<<10])) }

func valuesOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// noWaitIfZero is --agent-wait as MiddlewareOptions.AgentWait takes it:
// the flag's 0 (no wait) is the option's negative.
func noWaitIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
