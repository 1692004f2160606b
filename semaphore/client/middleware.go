package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// DefaultMaintenancePage is what visitors see while a writer holds the
// site's name, unless MiddlewareOptions.MaintenancePage says otherwise.
var DefaultMaintenancePage = []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Down for maintenance</title></head>
<body><h1>Down for maintenance</h1><p>We will be back shortly. Please try again in a moment.</p></body></html>
`)

// DefaultMaintenanceTemplate is the page visitors see while a writer
// holds the site's name, unless MiddlewareOptions say otherwise: the
// writer's reason and expected end, when it gave them.
var DefaultMaintenanceTemplate = template.Must(template.New("maintenance").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Down for maintenance</title></head>
<body><h1>Down for maintenance</h1>
{{with .Reason}}<p>{{.}}</p>
{{end}}<p>{{if .ETA.IsZero}}We will be back shortly.{{else}}We expect to be back at {{.ETA.UTC.Format "15:04 MST"}}.{{end}} Please try again in {{.RetryAfter}} seconds.</p></body></html>
`))

// MiddlewareOptions configure Middleware. Zero values are the documented
// defaults.
type MiddlewareOptions struct {
	// Duration is how long each request's lease lasts at its grant and how
	// far each renewal extends it: the middleware renews the lease at
	// about half its remaining time for as long as the handler runs, so a
	// long request keeps its lock. An agent that aggregates readers caps
	// it at its --share-lease (default 10s). It also bounds how long a
	// frontend that dies mid-request keeps a writer out. Zero: 1m.
	Duration time.Duration
	// RetryAfter is sent, in whole seconds, with every 503. Zero: 30s.
	RetryAfter time.Duration
	// MaintenancePage is the body of every 503. Nil: Template's.
	MaintenancePage []byte
	// Template, when set, makes each 503's body instead, executed with a
	// MaintenanceInfo: the writer's reason and expected end, when it gave
	// them. A visitor that asks for JSON (Accept: application/json) gets
	// {"error": "maintenance", "name", "reason", "eta", "retry_after"}
	// either way. Nil, and no MaintenancePage: DefaultMaintenanceTemplate.
	Template *template.Template
	// ContentType of MaintenancePage. Empty: text/html; charset=utf-8.
	ContentType string
	// FailOpen serves requests without a lock when the lock's state cannot
	// be learned before the handler runs (agent unreachable or not ready,
	// or any error other than a writer holding the name). The default,
	// false, answers 503: the lock exists so that a writer can count on no
	// request running while it drains the site, and a frontend that cannot
	// ask cannot know whether a writer is in; set FailOpen when staying up
	// matters more than that guarantee. FailOpen does not keep a request
	// whose lease was lost mid-request running: a writer may be in by
	// then, so its context is cancelled either way.
	FailOpen bool
	// AgentWait is how long a request waits for an agent that cannot be
	// reached or is not ready (it restarts, for an upgrade) before FailOpen
	// decides: the request is tried again meanwhile, and served as soon as
	// the agent answers. It counts from the start of the outage, so once
	// an agent has been gone that long, requests are answered at once.
	// Zero: 2s; negative: no wait.
	AgentWait time.Duration
	// Logger gets the failures visitors are not shown (agent errors,
	// release errors, leases lost mid-request). Nil: discarded.
	Logger *slog.Logger
	// PathLevels, with an agent of nested names (sluice agent
	// --nested-names), makes each request lock the site's name joined
	// with the first PathLevels segments of its path (RequestName): a
	// drain of part of the site (sluice drain https://shop.example/shop)
	// then turns away only that part's visitors, and the whole site's
	// drain all of them. Each distinct name costs the agents a shared
	// ticket, so keep it to the parts you drain apart (1 or 2). Zero:
	// every request locks the site's name.
	PathLevels int
	// LeasePerRequest gives each request a lease of its own, taken and
	// given back through the agent (a call each), so that the cluster's
	// table counts page views. By default the page views of a name share
	// one lease of the process while no writer waits (the first takes it,
	// the others only count themselves in): a page view then costs no
	// call, and the table shows one reader per frontend process. A drain
	// waits for the last page view on it either way.
	LeasePerRequest bool
}

// RequestName is the lock name of a request for path (its escaped URL
// path) under site, the site's name, with levels path segments at most
// (MiddlewareOptions.PathLevels): "https://shop.example/" and "/shop/cart/1"
// with 2 give "https://shop.example/shop/cart". It stops before an empty,
// "." or ".." segment, which name no part of the site.
func RequestName(site, path string, levels int) string {
	var segs []string
	for seg := range strings.SplitSeq(strings.TrimPrefix(path, "/"), "/") {
		if len(segs) == levels || seg == "" || seg == "." || seg == ".." {
			break
		}
		segs = append(segs, seg)
	}
	if len(segs) == 0 {
		return site
	}
	return strings.TrimSuffix(site, "/") + "/" + strings.Join(segs, "/")
}

type leaseKey struct{}

// LeaseFrom is the request's lease taken by Middleware, or nil (no
// middleware, or served without a lock under FailOpen). Unless
// MiddlewareOptions.LeasePerRequest, it may be a lease that the page
// views of the process on the name share: its Release then refuses
// (ErrLeaseLent), for the middleware gives it back once they are done.
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// releaseTimeout bounds the release after a request, which runs even when
// the visitor hung up.
const releaseTimeout = 5 * time.Second

// ErrLeaseLost is what a handler's writes and flushes return once the
// request's lease was lost: the response must not go on as a success. It
// wraps semaphore.ErrLost.
var ErrLeaseLost = fmt.Errorf("client: the request's lease was lost: %w", semaphore.ErrLost)

// watchAfter is how long a request runs before the middleware watches its
// lease's end as it happens (Lease.Done: one stream to the agent) and
// renews it. Most page views end sooner, and a stream for each would cost
// the agent far more than the lock itself; until then an expiry cannot
// come (a lease that ends sooner is watched and renewed at once: a
// renewal is due at half the time left) and a loss the agent reports is
// checked when the handler returns.
const watchAfter = 100 * time.Millisecond

// Middleware puts handlers behind a READ_ONLY try-lock on name, one per
// request, released when the handler returns. While a writer holds or
// drains the name (the try gets ErrDraining or ErrTimedOut) it answers 503
// with Retry-After and the maintenance page; when the lock's state cannot
// be learned, FailOpen decides.
//
// A writer that waits for the name is heard: the request's
// LeaseFrom(ctx).Draining() closes, and a response whose headers go out
// after that asks for the connection's end (Connection: close).
//
// The lease is renewed while the handler runs. When it is lost (revoked by
// the agent or an operator, expired unrenewed, or the agent unreachable
// past its expiry) the request's context is cancelled with a cause
// wrapping semaphore.ErrLost, the handler's later writes fail with
// ErrLeaseLost, and once the handler returns the visitor gets the
// maintenance page (503) when nothing was written yet, or an aborted
// connection (the handler panics with http.ErrAbortHandler) when the
// response had begun: never a response completed as a success. (A
// middleware around this one that recovers panics should re-panic
// http.ErrAbortHandler, as net/http expects.)
func (c *Client) Middleware(name string, o MiddlewareOptions) func(http.Handler) http.Handler {
	o.Duration = cmp.Or(o.Duration, time.Minute)
	o.RetryAfter = cmp.Or(o.RetryAfter, 30*time.Second)
	if o.MaintenancePage == nil {
		o.MaintenancePage = DefaultMaintenancePage // when the template fails
		if o.Template == nil {
			o.Template = DefaultMaintenanceTemplate
		}
	}
	o.ContentType = cmp.Or(o.ContentType, "text/html; charset=utf-8")
	o.AgentWait = cmp.Or(o.AgentWait, 2*time.Second)
	var outage agentOutage
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lend *lender
	if !o.LeasePerRequest {
		lend = newLender(c, log)
	}
	writer := &writerWord{c: c, name: name, checks: make(chan struct{}, maxPreviewChecks)}
	if path, err := semaphore.NamePath(name); err == nil && o.PathLevels > 0 {
		writer.name = path[len(path)-1] // as an agent of nested names keeps it
	}
	unavailable := func(w http.ResponseWriter, r *http.Request, name string) {
		info := writer.get(r.Context(), writer.levels(name, o.PathLevels))
		info.RetryAfter = int((o.RetryAfter + time.Second - 1) / time.Second)
		if left := time.Until(info.ETA); left > 0 {
			info.RetryAfter = int((left + time.Second - 1) / time.Second)
		}
		h := w.Header()
		h.Set("Retry-After", strconv.Itoa(info.RetryAfter))
		h.Set("Cache-Control", "no-store")
		body, ctype := o.MaintenancePage, o.ContentType
		switch {
		case strings.Contains(r.Header.Get("Accept"), "application/json"):
			ctype = "application/json"
			body, _ = json.Marshal(maintenanceJSON{Error: "maintenance", Name: name, Reason: info.Reason, ETA: info.ETA,
				RetryAfter: info.RetryAfter})
			body = append(body, '\n')
		case o.Template != nil:
			var b bytes.Buffer
			if err := o.Template.Execute(&b, info); err != nil {
				log.Error("the maintenance page's template", "err", err)
			} else {
				body = b.Bytes()
			}
		}
		h.Set("Content-Type", ctype)
		w.WriteHeader(http.StatusServiceUnavailable)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}
	return func(next http.Handler) http.Handler {
		serve := serveUnder(next, log, unavailable)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			name := name
			if o.PathLevels > 0 {
				name = RequestName(name, r.URL.EscapedPath(), o.PathLevels)
			}
			r.Header.Del(PreviewHeader) // the middleware's word to the handler, not the visitor's
			if ll := lend.borrow(name); ll != nil {
				// Given back once the handler returns. Deferred first,
				// so that it runs after an abort's panic too.
				defer lend.giveBack(ctx, ll)
				serve(w, r, ll.l, name)
				return
			}
			// Renewed from watchAfter on (leaseGuard.watch), not from
			// the grant: most page views end before.
			l, err := outage.acquire(ctx, c, name, Options{Try: true, Duration: o.Duration}, o.AgentWait)
			switch {
			case err == nil:
			case errors.Is(err, semaphore.ErrDraining), errors.Is(err, semaphore.ErrTimedOut):
				// A writer holds or waits for the site: the maintenance
				// page, unless the request is the holding drain's preview.
				if !preview(w, r, next, writer, writer.levels(name, o.PathLevels), log) {
					unavailable(w, r, name)
				}
				return
			case ctx.Err() != nil:
				return // the visitor left; nobody to answer
			case o.FailOpen:
				log.Warn("serving without the lock", "name", name, "err", err)
				next.ServeHTTP(w, r)
				return
			default:
				log.Error("no lock, answering 503", "name", name, "err", err)
				unavailable(w, r, name)
				return
			}
			// Released (or given back, lent) once the handler returns.
			// Deferred first, so that it runs after an abort's panic too.
			if ll := lend.lend(name, l); ll != nil {
				defer lend.giveBack(ctx, ll)
			} else {
				defer c.releaseAfterRequest(ctx, l, log)
			}
			serve(w, r, l, name)
		})
	}
}

// serveUnder is the middleware's service of one request under a held
// lease: the handler runs guarded (leaseGuard), and a loss while it ran
// ends the response as the maintenance page or an abort.
func serveUnder(next http.Handler, log *slog.Logger, unavailable func(http.ResponseWriter, *http.Request, string)) func(http.ResponseWriter, *http.Request, *Lease, string) {
	return func(w http.ResponseWriter, r *http.Request, l *Lease, name string) {
		ctx := r.Context()
		g := guardLease(ctx, l, w, isWebsocket(r))
		func() {
			defer g.stop()
			next.ServeHTTP(g.w, r.WithContext(g.ctx))
		}()
		lerr := l.Err() // non-nil: lost while the handler ran (or just after)
		switch {
		case lerr == nil:
		case g.w.hijacked():
			// The handler took the connection over: close it, if the
			// guard has not (a loss found only now).
			g.w.lose()
			log.Warn("the request's lock was lost; its connection was closed", "name", name, "lease", l.ID(), "err", lerr)
		case !g.w.wrote:
			log.Warn("the request's lock was lost; answering 503", "name", name, "lease", l.ID(), "err", lerr)
			clear(w.Header()) // the handler's headers (a Content-Length, say) are not the page's
			unavailable(w, r, name)
		default:
			// Part of the response may be out (or buffered, and sent
			// once this returns): only an abort keeps the visitor from
			// taking it for a whole one. http.ErrAbortHandler is
			// net/http's way for HTTP/1 (the connection is closed
			// without the buffered rest or the final chunk) and HTTP/2
			// (the stream is reset) alike, where Hijack exists for
			// HTTP/1 only and ResponseController has no abort.
			log.Warn("the request's lock was lost; aborting the response", "name", name, "lease", l.ID(), "err", lerr)
			panic(http.ErrAbortHandler)
		}
	}
}

// releaseAfterRequest releases a request's lease once its handler
// returned. An agent that takes releases without an answer (the compact
// protocol's version 2) gets it without one, in the write of the next
// call on its connection or alone within 200 µs: a request costs one
// round trip to the agent, its try. Otherwise the release waits for its
// answer off the visitor's path, while the response goes out.
func (c *Client) releaseAfterRequest(ctx context.Context, l *Lease, log *slog.Logger) {
	release := func(noReply bool) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		var err error
		if noReply {
			err = l.ReleaseNoWait(ctx)
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			log.Warn("releasing the request's lock", "name", l.Name(), "lease", l.ID(), "err", err)
		}
	}
	if c.compactPool.speaksNoReply() {
		release(true)
		return
	}
	c.background(func() { release(false) })
}

// Previews: while a drain holds a site's name, requests that carry its
// preview token are served (under the drain's lease: no reader's lock is
// taken), so the operator can check the new version before visitors come
// back. The token is asked for in a link's query (?sluice-preview=TOKEN),
// which answers with a cookie and a redirect to the same URL without it;
// the handler sees PreviewHeader set on preview requests.
const (
	PreviewCookie = "sluice_preview"
	PreviewQuery  = "sluice-preview"
	PreviewHeader = "Sluice-Preview"
)

// NewPreviewToken makes a drain's preview token: 256 random bits, in
// base64url, and its hash for Options.Preview.
func NewPreviewToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("client: a preview token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, PreviewHash(token), nil
}

// PreviewHash is what travels of a preview token (Options.Preview): its
// SHA-256 in lowercase hex.
func PreviewHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// previewWait bounds the look at the cluster's table that checks a
// preview token; maxPreviewChecks bounds how many run at once, per name.
const (
	previewWait      = 2 * time.Second
	maxPreviewChecks = 4
)

// previewTokenLen is the length of a token NewPreviewToken makes.
var previewTokenLen = base64.RawURLEncoding.EncodedLen(32)

// preview serves r when it carries the preview token of the writer that
// holds the name now, and says whether it answered. The table is asked
// afresh for every preview request (an operator's few, not visitors'
// many): a token is good only while its drain holds, never for a later
// drain, nor while its drain still waits for readers.
func preview(w http.ResponseWriter, r *http.Request, next http.Handler, writer *writerWord, levels []string, log *slog.Logger) bool {
	token, fromQuery := r.URL.Query().Get(PreviewQuery), true
	if token == "" {
		fromQuery = false
		c, err := r.Cookie(PreviewCookie)
		if err != nil || c.Value == "" {
			return false
		}
		token = c.Value
	}
	if len(token) != previewTokenLen {
		return false // not one NewPreviewToken made: no table is asked
	}
	// A flood of made-up tokens must not become a flood of tables: past
	// maxPreviewChecks at once, the maintenance page.
	select {
	case writer.checks <- struct{}{}:
		defer func() { <-writer.checks }()
	default:
		log.Warn("preview checks at their limit: answering the maintenance page", "name", writer.name)
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), previewWait)
	defer cancel()
	t, err := writer.c.Locks(ctx, writer.name)
	if err != nil {
		log.Warn("a preview token could not be checked", "name", writer.name, "err", err)
		return false
	}
	if !previewHolds(t, levels, PreviewHash(token)) {
		log.Info("a preview token refused: no drain of the name that holds it gave it", "name", writer.name)
		return false
	}
	if fromQuery {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return false
		}
		// The token moves to a cookie, and out of the address bar,
		// history and Referer headers.
		http.SetCookie(w, &http.Cookie{Name: PreviewCookie, Value: token, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
		u := *r.URL
		q := u.Query()
		q.Del(PreviewQuery)
		u.RawQuery = q.Encode()
		u.Scheme, u.Host = "", ""
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return true
	}
	w.Header().Set("Cache-Control", "no-store")
	r.Header.Set(PreviewHeader, "1")
	next.ServeHTTP(w, r)
	return true
}

// previewHolds says whether a writer that holds one of names in t gave
// hash.
func previewHolds(t api.Table, names []string, hash string) bool {
	for _, l := range t.Locks {
		if !slices.Contains(names, l.Name) {
			continue
		}
		for _, e := range l.Entries {
			if e.Holder && e.Mode != semaphore.ReadOnly.String() && e.Preview != "" &&
				subtle.ConstantTimeCompare([]byte(e.Preview), []byte(hash)) == 1 {
				return true
			}
		}
	}
	return false
}

// MaintenanceInfo is what a maintenance page's template gets: the name,
// the reason and expected end the writer gave (empty and zero when it
// gave none, or they could not be asked), and the Retry-After sent, in
// seconds (from the expected end when it is known).
type MaintenanceInfo struct {
	Name       string
	Reason     string
	ETA        time.Time
	RetryAfter int
}

type maintenanceJSON struct {
	Error      string    `json:"error"`
	Name       string    `json:"name"`
	Reason     string    `json:"reason,omitempty"`
	ETA        time.Time `json:"eta,omitzero"`
	RetryAfter int       `json:"retry_after"`
}

// writerWord is what the writers of a name said of their hold, asked of
// the cluster's table at most every writerWordTTL and for at most
// writerWordWait: a drain's visitors must not each cost a table, nor wait
// for one.
type writerWord struct {
	c    *Client
	name string
	// checks holds a place for each preview check under way.
	checks chan struct{}
	mu     sync.Mutex
	table  api.Table // the names under name (Locks), as last asked
	at     time.Time
	busy   bool
}

// levels are the names whose writers keep a request on name out: name
// itself and, when requests lock parts of the site (PathLevels), the
// names above it, canonical as the agent keeps them (semaphore.NamePath).
func (w *writerWord) levels(name string, pathLevels int) []string {
	if path, err := semaphore.NamePath(name); err == nil && pathLevels > 0 {
		slices.Reverse(path) // the request's own name first
		return path
	}
	return []string{name}
}

const (
	writerWordTTL  = 2 * time.Second
	writerWordWait = 300 * time.Millisecond
)

// get is the writers' word, asked again when it is old and no other
// request is asking.
func (w *writerWord) get(ctx context.Context, levels []string) MaintenanceInfo {
	w.mu.Lock()
	if w.busy || time.Since(w.at) < writerWordTTL {
		t := w.table
		w.mu.Unlock()
		return writerOf(t, levels)
	}
	w.busy = true
	w.mu.Unlock()
	var t api.Table
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writerWordWait)
	defer cancel()
	if got, err := w.c.Locks(qctx, w.name); err == nil {
		t = got
	}
	w.mu.Lock()
	w.table, w.at, w.busy = t, time.Now(), false
	w.mu.Unlock()
	return writerOf(t, levels)
}

// writerOf is what the first writer in line for the first of names (the
// request's own; the others are the names above it) said of its hold,
// in t: the holder, if one holds, of any of names.
func writerOf(t api.Table, names []string) MaintenanceInfo {
	info := MaintenanceInfo{Name: names[0]}
	var best *api.Entry
	for _, l := range t.Locks {
		if !slices.Contains(names, l.Name) {
			continue
		}
		for i := range l.Entries {
			e := &l.Entries[i]
			if e.Mode == semaphore.ReadOnly.String() || e.Mode == semaphore.IntentShared.String() ||
				e.Mode == semaphore.IntentExclusive.String() || e.Ticket == 0 || e.Reason == "" && e.ETA.IsZero() {
				continue
			}
			if best == nil || e.Holder && !best.Holder || e.Holder == best.Holder && e.Ticket < best.Ticket {
				best = e
			}
		}
	}
	if best != nil {
		info.Reason, info.ETA = best.Reason, best.ETA
	}
	return info
}

// leaseGuard ends a request whose lease is lost: it cancels the handler's
// context and stops its writer.
type leaseGuard struct {
	l      *Lease
	ctx    context.Context // the handler's
	cancel context.CancelCauseFunc
	w      *leaseWriter
	timer  *time.Timer   // starts watch
	done   chan struct{} // closed when the handler returned
	exited chan struct{} // closed when watch returned
}

// guardLease guards the request of ctx, served on w, under l.
func guardLease(ctx context.Context, l *Lease, w http.ResponseWriter, websocket bool) *leaseGuard {
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, l))
	g := &leaseGuard{l: l, ctx: hctx, cancel: cancel, w: &leaseWriter{ResponseWriter: w, l: l, websocket: websocket},
		done: make(chan struct{}), exited: make(chan struct{})}
	delay := watchAfter
	if time.Until(l.Expires()) <= 2*watchAfter {
		delay = 0 // a short lease could expire before a late watch
	}
	g.timer = time.AfterFunc(delay, g.watch)
	return g
}

// watch renews the lease and waits for it to end while the handler runs.
func (g *leaseGuard) watch() {
	defer close(g.exited)
	select {
	case <-g.done:
		return // no stream for a lease that is being released
	default:
	}
	g.l.autoRenew()
	select {
	case <-g.l.Done():
		// A nil Err is a release by the handler itself: its choice.
		if err := g.l.Err(); err != nil {
			g.w.lose()
			g.cancel(err)
		}
	case <-g.done:
	}
}

// stop ends the guard once the handler returned, and waits for its watch.
func (g *leaseGuard) stop() {
	close(g.done)
	if !g.timer.Stop() {
		<-g.exited
	}
	g.cancel(nil)
}

// leaseWriter is the handler's ResponseWriter: it refuses writes after
// the lease was lost and records whether the response was begun.
type leaseWriter struct {
	http.ResponseWriter
	// l is the request's lease: once a writer waits (Lease.Draining), the
	// response asks the visitor's connection to close, so a kept-alive
	// visitor's next request meets the maintenance page at once.
	l    *Lease
	lost atomic.Bool
	// wrote: a final status or body bytes were passed on. Only the
	// handler's goroutine writes it, and the middleware reads it after
	// the handler returned.
	wrote bool

	// websocket: the request asks for a websocket upgrade; its hijacked
	// connection gets a close frame on a loss (closingConn).
	websocket bool

	mu   sync.Mutex
	conn net.Conn // hijacked, closed on a loss
}

// isWebsocket says whether r asks for a websocket upgrade.
func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// closeConn ends a hijacked connection: a websocket's with a close frame.
func closeConn(c net.Conn) {
	if cc, ok := c.(*closingConn); ok {
		cc.end()
		return
	}
	_ = c.Close()
}

// closeIfDraining asks for the connection's end with the response's
// headers, once a writer waits.
func (w *leaseWriter) closeIfDraining() {
	if !w.wrote && w.l != nil && w.l.drainingNow() {
		w.Header().Set("Connection", "close")
	}
}

// lose stops the writer and closes a hijacked connection.
func (w *leaseWriter) lose() {
	w.lost.Store(true)
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	if conn != nil {
		closeConn(conn)
	}
}

func (w *leaseWriter) hijacked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn != nil
}

func (w *leaseWriter) WriteHeader(code int) {
	if w.lost.Load() {
		return // the maintenance page's status goes instead
	}
	// An informational status (103 Early Hints) leaves the response open.
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.closeIfDraining()
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *leaseWriter) Write(b []byte) (int, error) {
	if w.lost.Load() {
		return 0, ErrLeaseLost
	}
	w.closeIfDraining() // the first write sends the headers
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *leaseWriter) FlushError() error {
	if w.lost.Load() {
		return ErrLeaseLost
	}
	w.wrote = true
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is http.Flusher's, for handlers that stream.
func (w *leaseWriter) Flush() { _ = w.FlushError() }

// Hijack is http.Hijacker's (websockets, say); a loss closes the
// connection it hands over.
func (w *leaseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.lost.Load() {
		return nil, nil, ErrLeaseLost
	}
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if w.websocket {
		// Whatever the handler writes goes through the close frame's
		// watch; net/http's hijacked writer is a new, empty one.
		cc := newClosingConn(conn)
		conn, rw = cc, bufio.NewReadWriter(rw.Reader, bufio.NewWriter(cc))
	}
	w.wrote = true
	w.mu.Lock()
	w.conn = conn
	w.mu.Unlock()
	if w.lost.Load() { // lost meanwhile: lose may have missed conn
		_ = conn.Close()
		return nil, nil, ErrLeaseLost
	}
	return conn, rw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *leaseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// agentOutage is what the requests of one middleware know of their
// agent's outage: since when (Unix nanoseconds) it cannot be reached or is
// not ready; 0 while it answers. An atomic, not a lock: every page view
// reads it.
type agentOutage struct{ since atomic.Int64 }

// agentRetryEvery is how often a waiting request tries an unreachable
// agent again: an agent's restart takes a fraction of a second, and one
// try costs a failed connect.
const agentRetryEvery = 50 * time.Millisecond

// acquire takes a READ_ONLY lease of name through c; while the agent
// cannot be reached or is not ready, it tries again until wait has passed
// since the outage began (or the visitor left), and gives the last answer.
func (a *agentOutage) acquire(ctx context.Context, c *Client, name string, o Options, wait time.Duration) (*Lease, error) {
	var t *time.Timer
	for {
		l, err := c.Acquire(ctx, name, semaphore.ReadOnly, o)
		if !errors.Is(err, semaphore.ErrUnavailable) && !errors.Is(err, semaphore.ErrNotReady) {
			if a.since.Load() != 0 {
				a.since.Store(0)
			}
			return l, err
		}
		now := time.Now().UnixNano()
		a.since.CompareAndSwap(0, now)
		since := a.since.Load()
		if since == 0 {
			since = now // another request's answer ended the outage meanwhile: count from now
		}
		left := wait - time.Duration(now-since)
		if left <= 0 || ctx.Err() != nil {
			return l, err
		}
		if t == nil {
			t = time.NewTimer(min(agentRetryEvery, left))
			defer t.Stop()
		} else {
			t.Reset(min(agentRetryEvery, left))
		}
		select {
		case <-ctx.Done():
			return l, err
		case <-t.C:
		}
	}
}
