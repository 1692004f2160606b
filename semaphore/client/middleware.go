package client

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/semaphore"
)

// DefaultMaintenancePage is what visitors see while a writer holds the
// site's name, unless MiddlewareOptions.MaintenancePage says otherwise.
var DefaultMaintenancePage = []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Down for maintenance</title></head>
<body><h1>Down for maintenance</h1><p>We will be back shortly. Please try again in a moment.</p></body></html>
`)

// MiddlewareOptions configure Middleware. Zero values are the documented
// defaults.
type MiddlewareOptions struct {
	// Duration of each request's lease; a request running longer loses
	// it (the handler can watch LeaseFrom(ctx).Done()). Zero: 1m.
	Duration time.Duration
	// RetryAfter is sent, in whole seconds, with every 503. Zero: 30s.
	RetryAfter time.Duration
	// MaintenancePage is the body of every 503. Nil: DefaultMaintenancePage.
	MaintenancePage []byte
	// ContentType of MaintenancePage. Empty: text/html; charset=utf-8.
	ContentType string
	// FailOpen serves requests without a lock when the lock's state cannot
	// be learned (agent unreachable or not ready, or any error other than
	// a writer holding the name). The default, false, answers 503: the
	// lock exists so that a writer can count on no request running while
	// it drains the site, and a frontend that cannot ask cannot know
	// whether a writer is in; set FailOpen when staying up matters more
	// than that guarantee.
	FailOpen bool
	// Logger gets the failures visitors are not shown (agent errors,
	// release errors). Nil: discarded.
	Logger *slog.Logger
}

type leaseKey struct{}

// LeaseFrom is the request's lease taken by Middleware, or nil (no
// middleware, or served without a lock under FailOpen).
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// releaseTimeout bounds the release after a request, which runs even when
// the visitor hung up.
const releaseTimeout = 5 * time.Second

// Middleware puts handlers behind a READ_ONLY try-lock on name, one per
// request, released when the handler returns. While a writer holds or
// drains the name (the try gets ErrDraining or ErrTimedOut) it answers 503
// with Retry-After and the maintenance page; when the lock's state cannot
// be learned, FailOpen decides.
func (c *Client) Middleware(name string, o MiddlewareOptions) func(http.Handler) http.Handler {
	o.Duration = cmp.Or(o.Duration, time.Minute)
	o.RetryAfter = cmp.Or(o.RetryAfter, 30*time.Second)
	if o.MaintenancePage == nil {
		o.MaintenancePage = DefaultMaintenancePage
	}
	o.ContentType = cmp.Or(o.ContentType, "text/html; charset=utf-8")
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := strconv.FormatInt(int64((o.RetryAfter+time.Second-1)/time.Second), 10)
	unavailable := func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Retry-After", retry)
		h.Set("Content-Type", o.ContentType)
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusServiceUnavailable)
		if r.Method != http.MethodHead {
			_, _ = w.Write(o.MaintenancePage)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			l, err := c.Acquire(ctx, name, semaphore.ReadOnly, Options{Try: true, Duration: o.Duration})
			switch {
			case err == nil:
			case errors.Is(err, semaphore.ErrDraining), errors.Is(err, semaphore.ErrTimedOut):
				unavailable(w, r) // a writer holds or waits for the site
				return
			case ctx.Err() != nil:
				return // the visitor left; nobody to answer
			case o.FailOpen:
				log.Warn("serving without the lock", "name", name, "err", err)
				next.ServeHTTP(w, r)
				return
			default:
				log.Error("no lock, answering 503", "name", name, "err", err)
				unavailable(w, r)
				return
			}
			// Released once the handler returns, off the visitor's path:
			// the response goes out while the agent hears of it.
			defer c.background(func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer cancel()
				if err := l.Release(ctx); err != nil {
					log.Warn("releasing the request's lock", "name", name, "lease", l.ID(), "err", err)
				}
			})
			next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, leaseKey{}, l)))
		})
	}
}
