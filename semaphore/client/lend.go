package client

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Lent leases: the page views of one middleware on one name share a
// READ_ONLY lease of their process, so that a page view costs no call to
// the agent, only a count here. The first page view that finds no lent
// lease takes its own (a try, as always) and lends it on; the lease is
// renewed and watched (one stream) while it is lent, and goes, given back
// once its last page view ends, when:
//   - the agent says a writer waits for the name, of any mode, or that it
//     stops (the watch's yield, or draining): the share it holds within
//     must go once idle, and page views from then on take leases of their
//     own, as they did before lending (a priority drain refuses them, a
//     soft writer lets them pass), for lendQuiet;
//   - it is lost (its page views' contexts are cancelled, as a lease of
//     their own would be), or no page view used it for lendIdle;
//   - the agent does not say that it sends yield (an agent before it, or
//     one that does not share read tickets): a writer would wait for the
//     lease's idle end, so lending stops for lendRefused;
//   - the client closes.
//
// Safety does not change: every page view runs while a granted lease
// that the leaders keep covers it, renewed as its own would be; a writer
// is granted only after the lease is given back, which waits for the
// last page view on it. So that tables and drains still count page views,
// not one reader per process and name, the lease's keeper tells the agent
// how many run on it (POST /v1/page-views) when that changed: every
// lendCheck while it is lent, every lendCount once it goes (a drain
// watches those leave). An agent before that call is told nothing more.
const (
	lendIdle    = 5 * time.Second
	lendQuiet   = time.Second
	lendRefused = time.Minute
	// lendTold bounds the wait for the watch's first event, which says
	// whether the agent sends yield: without it the lease goes.
	lendTold  = 2 * time.Second
	lendCheck = time.Second
	lendCount = 250 * time.Millisecond
	// lendSayWait bounds one call that says a lease's page views.
	lendSayWait = time.Second
	// maxLent bounds the names lent at once per middleware: with
	// PathLevels, visitors choose the names.
	maxLent = 64
)

// lender lends the leases of one middleware.
type lender struct {
	c   *Client
	log *slog.Logger

	mu     sync.Mutex
	byName map[string]*lentLease
	// quietUntil: no lease of the name is lent before (after a yield).
	quietUntil map[string]time.Time
	// refusedUntil: no lease is lent before (the agent does not yield).
	refusedUntil time.Time
	// countsRefused: the agent has no POST /v1/page-views (an older
	// one): lent leases' page views are not said.
	countsRefused atomic.Bool
}

// lentLease is a lease and its page views.
type lentLease struct {
	d    *lender
	l    *Lease
	name string
	// Under d.mu: views counts the page views on it now; closed, no new
	// one is lent it (it goes once views is 0); idleSince is when views
	// last fell to 0.
	views     int
	closed    bool
	idleSince time.Time
	// said is the count of page views the agent was last told (its
	// keeper's alone); -1 before the first.
	said int
}

func newLender(c *Client, log *slog.Logger) *lender {
	return &lender{c: c, log: log, byName: map[string]*lentLease{}, quietUntil: map[string]time.Time{}}
}

// borrow counts a page view on name's lent lease, if one may take it. A
// nil lender (MiddlewareOptions.LeasePerRequest) lends nothing.
func (d *lender) borrow(name string) *lentLease {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ll := d.byName[name]
	if ll == nil || ll.closed || ll.l.endedNow() || ll.l.yieldingNow() {
		return nil // its keeper closes it soon
	}
	ll.views++
	return ll
}

// lend makes l, a page view's own lease of name just granted, the lent
// lease of name, with that page view on it; nil when it may not be.
func (d *lender) lend(name string, l *Lease) *lentLease {
	if d == nil {
		return nil
	}
	now := time.Now()
	d.mu.Lock()
	if d.byName[name] != nil || len(d.byName) >= maxLent || now.Before(d.refusedUntil) || now.Before(d.quietUntil[name]) {
		d.mu.Unlock()
		return nil
	}
	delete(d.quietUntil, name)
	ll := &lentLease{d: d, l: l, name: name, views: 1, said: -1}
	l.lent.Store(true)
	d.byName[name] = ll
	d.mu.Unlock()
	if !d.c.goUntilClosed(ll.keep) {
		// The client closes: lent no more, given back by its last page
		// view (others may have borrowed it already).
		ll.close(context.Background(), 0, 0)
	}
	return ll
}

// giveBack ends a page view on ll: the last one of a closed lease gives
// it back.
func (d *lender) giveBack(ctx context.Context, ll *lentLease) {
	d.mu.Lock()
	ll.views--
	last := ll.views == 0 && ll.closed
	if ll.views == 0 {
		ll.idleSince = time.Now()
	}
	d.mu.Unlock()
	if last {
		d.release(ctx, ll)
	}
}

// close lends ll no more; quiet keeps name's page views on leases of
// their own that long, refuse keeps every name's so. Once idle, ll goes.
func (ll *lentLease) close(ctx context.Context, quiet, refuse time.Duration) {
	d := ll.d
	now := time.Now()
	d.mu.Lock()
	if ll.closed {
		d.mu.Unlock()
		return
	}
	ll.closed = true
	if d.byName[ll.name] == ll {
		delete(d.byName, ll.name)
	}
	if quiet > 0 {
		for name, t := range d.quietUntil { // visitors choose the names: keep few
			if now.After(t) {
				delete(d.quietUntil, name)
			}
		}
		d.quietUntil[ll.name] = now.Add(quiet)
	}
	if refuse > 0 {
		d.refusedUntil = now.Add(refuse)
	}
	idle := ll.views == 0
	d.mu.Unlock()
	if idle {
		d.release(ctx, ll)
	}
}

// idleFor says how long ll has had no page view (0 while it has one).
func (ll *lentLease) idleFor(now time.Time) time.Duration {
	ll.d.mu.Lock()
	defer ll.d.mu.Unlock()
	if ll.views > 0 {
		return 0
	}
	return now.Sub(ll.idleSince)
}

// release gives ll's lease back, as a page view gives its own back.
func (d *lender) release(ctx context.Context, ll *lentLease) {
	ll.l.lent.Store(false)
	d.c.releaseAfterRequest(ctx, ll.l, d.log)
}

// keep renews and watches ll while it is lent, and closes it when it
// must go (see the top of the file); then it tells the agent of the page
// views that are left on it until it is given back. It runs until then,
// or until the client closes (closed).
func (ll *lentLease) keep(closed <-chan struct{}) {
	ll.lendOut(closed)
	tick := time.NewTicker(lendCount)
	defer tick.Stop()
	for {
		select {
		case <-ll.l.done:
			return
		case <-closed:
			return
		default:
		}
		ll.sayViews(context.Background())
		select {
		case <-ll.l.done:
			return
		case <-closed:
			return
		case <-tick.C:
		}
	}
}

// sayViews tells the agent how many page views run on ll, if that
// changed since it was last told.
func (ll *lentLease) sayViews(ctx context.Context) {
	d, l := ll.d, ll.l
	d.mu.Lock()
	views := ll.views
	d.mu.Unlock()
	if views == ll.said || d.countsRefused.Load() || l.endedNow() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, lendSayWait)
	defer cancel()
	err := d.c.call(ctx, "page views "+l.id, http.MethodPost, "/v1/page-views",
		api.PageViewsBody{Lease: l.id, Name: l.name, InFlight: views}, nil)
	var ae *APIError
	switch {
	case err == nil:
		ll.said = views
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == codes.BadRequest:
		// No such endpoint: the table counts this lease as one reader.
		if !d.countsRefused.Swap(true) {
			d.log.Info("the agent does not take counts of page views: its tables count a process's lent lease as one reader")
		}
	}
	// Any other failure (the agent restarting): said again next time.
}

// lendOut renews and watches ll while it is lent, until it closes it.
func (ll *lentLease) lendOut(closed <-chan struct{}) {
	l := ll.l
	ctx := context.Background()
	l.autoRenew()
	done := l.Done() // starts the watch
	r := l.running()
	told := r.told
	toldBy := time.Now().Add(lendTold)
	tick := time.NewTicker(lendCheck)
	defer tick.Stop()
	for {
		select {
		case <-r.yielding:
			if l.refusesYield() {
				ll.refuse(ctx)
				return
			}
			ll.close(ctx, lendQuiet, 0)
			return
		case <-done:
			ll.close(ctx, 0, 0)
			return
		case <-closed:
			ll.close(ctx, 0, 0)
			return
		case <-told:
			told = nil
			if l.refusesYield() {
				ll.refuse(ctx)
				return
			}
		case now := <-tick.C:
			ll.sayViews(ctx)
			switch {
			case told != nil && now.After(toldBy):
				ll.close(ctx, 0, 0) // no word from the agent's watch: not lent on
				return
			case ll.idleFor(now) >= lendIdle:
				ll.close(ctx, 0, 0)
				return
			}
		}
	}
}

// refuse closes ll, and lends nothing for lendRefused: the agent does not
// say when a writer waits.
func (ll *lentLease) refuse(ctx context.Context) {
	ll.d.log.Info("the agent does not say when a writer waits: page views take leases of their own", "name", ll.name)
	ll.close(ctx, 0, lendRefused)
}

// refusesYield reports whether the watch's first event said that the
// agent does not send yield for l.
func (l *Lease) refusesYield() bool {
	r := l.run.Load()
	return r != nil && closedNow(r.told) && !r.tellsYield
}

// endedNow reports whether the lease was released or lost, without
// watching.
func (l *Lease) endedNow() bool { return closedNow(l.done) }

// yieldingNow reports whether the agent said the lease should go once
// idle (yield or draining).
func (l *Lease) yieldingNow() bool {
	r := l.run.Load()
	return r != nil && closedNow(r.yielding)
}

// goUntilClosed runs fn on a goroutine that Close waits for, with a
// channel that closes when Close begins; false, and fn does not run, once
// Close began.
func (c *Client) goUntilClosed(fn func(closed <-chan struct{})) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closing {
		return false
	}
	if c.closed == nil {
		c.closed = make(chan struct{})
	}
	closed := c.closed
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		fn(closed)
	}()
	return true
}
