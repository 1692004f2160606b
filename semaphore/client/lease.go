package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/internal/bootclock"
)

// Options of one Acquire. Zero values are the agent's defaults.
type Options struct {
	// Timeout is how long to wait for the grant. Zero: the agent's
	// default (30s). Ignored with Try.
	Timeout time.Duration
	// Duration is how long the lease lasts once granted, and how far each
	// renewal extends it. Zero: the agent's default (1m).
	Duration time.Duration
	// Grace is how long after the expiry the leaders keep the ticket
	// before they release it by force. Zero: none.
	Grace time.Duration
	// Quiet is READ_WRITE_GENTLE's quiet period. Zero: the default (10m).
	Quiet time.Duration
	// Try answers at once: ErrTimedOut (or ErrDraining, for a reader)
	// when the lock is not free now. A writer's try that only agents'
	// shared read tickets keep out waits up to a second for them to go
	// once their page views end.
	Try bool
	// Limit caps the READ_ONLY holders among the readers that ask for it.
	// Zero: no limit.
	Limit int
	// Owner says who holds the lock, for operators' tables (`sluice
	// locks`): "user@host pid N: command", say. At most 256 bytes. A call
	// with an Owner goes over HTTP (the compact protocol has no room for
	// it): for long-held locks, not per-request ones.
	Owner string
	// Reason and ETA are a writer's word for visitors and operators: why
	// it holds, and how long from the call it expects to (0: unknown).
	// The maintenance pages of the middleware and `sluice proxy` show
	// them. Calls with them go over HTTP, as with Owner.
	Reason string
	ETA    time.Duration
	// ReadersGrace is how long a drain lets the readers that hold go on
	// before it revokes them (RevokeReaders), shown to operators; Preview
	// is the SHA-256, in lowercase hex, of a preview token (PreviewHash):
	// while this writer holds the name, the middleware serves requests
	// that carry the token. Calls with them go over HTTP, as with Owner.
	ReadersGrace time.Duration
	Preview      string
	// AutoRenew renews the lease at about half its remaining time until
	// Release. A renewal that fails is retried while time is left; the
	// lease is lost when none is.
	AutoRenew bool
}

// compactTimeout is o's timeout as the compact protocol carries it: there
// a 0 is an answer at once, so the default (Options.Timeout's zero value)
// is sent as itself.
func compactTimeout(o Options) time.Duration {
	if o.Timeout == 0 && !o.Try {
		return api.DefaultTimeout
	}
	return o.Timeout
}

func span(d time.Duration) api.Span {
	if d == 0 {
		return "" // the agent's default
	}
	return api.Span(d.String())
}

// clock reads Go's clock and the boot clock at once (bootclock.Clock): a
// lease is over when the boot clock says so, while its timers follow Go's
// clock, which stands still while the machine is suspended.
type clock interface {
	Now() (time.Time, time.Duration)
}

// processClock is every lease's clock but tests': made at the first
// Acquire, so that importing the package costs nothing.
var processClock = sync.OnceValue(bootclock.New)

// checkEvery bounds how long a live lease goes without a look at the boot
// clock: a lease that ran out during a suspend ends at most this long after
// the resume. A lease that ends sooner never has its expiry looked at.
const checkEvery = time.Second

// instant is a moment on both of a lease's clocks.
type instant struct {
	at   time.Time     // Go's clock, with the monotonic reading
	boot time.Duration // the boot clock
}

func now(clk clock) instant {
	at, boot := clk.Now()
	return instant{at, boot}
}

func (i instant) add(d time.Duration) instant { return instant{i.at.Add(d), i.boot + d} }

// Acquire asks the agent for name in mode and waits until it is granted,
// refused, timed out, or ctx ends (which abandons the request).
func (c *Client) Acquire(ctx context.Context, name string, mode semaphore.Mode, o Options) (*Lease, error) {
	return c.acquire(ctx, name, mode, o, processClock())
}

func (c *Client) acquire(ctx context.Context, name string, mode semaphore.Mode, o Options, clk clock) (*Lease, error) {
	sent := now(clk)
	op := callName{"acquire", name}
	var (
		reply api.CompactReply
		ok    bool
		err   error
	)
	if o.Owner == "" && o.Reason == "" && o.ETA == 0 && o.ReadersGrace == 0 && o.Preview == "" {
		reply, ok, err = c.compact(ctx, op, &api.CompactRequest{Op: api.OpAcquire, Name: name, Mode: mode.String(), Try: o.Try,
			Timeout: compactTimeout(o), Duration: o.Duration, Grace: o.Grace, Quiet: o.Quiet, Limit: o.Limit})
	}
	lj, expires := reply.LeaseJSON, sent.add(reply.TTLNanos)
	switch {
	case ok && err != nil:
		return nil, err
	case !ok:
		body := api.AcquireBody{Name: name, Mode: mode.String(), Timeout: span(o.Timeout), Duration: span(o.Duration),
			Grace: span(o.Grace), Quiet: span(o.Quiet), Limit: o.Limit, Try: o.Try, Owner: o.Owner, Reason: o.Reason,
			ETA: span(o.ETA), ReadersGrace: span(o.ReadersGrace), Preview: o.Preview}
		if err := c.call(ctx, op.String(), http.MethodPost, "/v1/acquire", body, &lj); err != nil {
			return nil, err
		}
		expires = sent.add(ttlOf(lj))
	}
	if m, err := semaphore.ParseMode(lj.Mode); err == nil {
		mode = m
	}
	return c.newLease(lj, expires, mode, o, clk), nil
}

// ttlOf is how long a lease answered by lj lasts, counted from its call's
// send, so that neither the call's travel nor a step of the wall clock
// lengthens it. An agent that gives no TTL is read by its wall-clock
// expiry, as from now.
func ttlOf(lj api.LeaseJSON) time.Duration {
	if ttl, err := api.ParseSpan(lj.TTL); err == nil && lj.TTL != "" {
		return ttl
	}
	return time.Until(lj.Expires)
}

// Lease is a granted lock. Its methods are safe for concurrent use.
type Lease struct {
	c     *Client
	id    string
	name  string
	mode  semaphore.Mode
	token uint64
	// duration and grace are the acquire's (zero: the agent's defaults):
	// a renewal through an agent that restarted since the grant sends
	// them, with the name and mode, to take the lease over.
	duration, grace time.Duration

	done chan struct{}
	// run is what the lease's watch and renewer need: made when the first
	// of them starts (or Draining is asked), never for the page views that
	// end before either, which then cost a channel and a timer.
	run atomic.Pointer[leaseRun]
	// lent: the middleware shares the lease among the page views of its
	// process; only it gives it back (Release refuses: ErrLeaseLent).
	lent atomic.Bool
	wg   sync.WaitGroup // the watch and the renewer
	// renewing: one renewal at a time (the renewer, the watch and the
	// caller may each renew; the agent answers one renewal of a lease at
	// a time).
	renewing sync.Mutex

	clock clock // the boot clock, or a test's

	mu sync.Mutex
	// expires is the last grant's or renewal's TTL counted from its send:
	// its boot reading decides (Go's clock did not count a suspend).
	expires   instant
	timer     *time.Timer // looks at the boot clock by the expiry, every checkEvery at least
	ended     bool
	err       error
	watching  bool
	renews    bool  // the renewer was started
	released  bool  // the agent confirmed the release
	renewFail error // the last renewal's error, for the expiry's report
}

// leaseRun is a watched or renewed lease's state for its goroutines.
type leaseRun struct {
	// ctx bounds the watch and the renewer; the lease's end cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// draining closes when the agent says a writer waits for the name
	// (a reader's lease, watched: Draining).
	draining  chan struct{}
	drainOnce sync.Once
	// yielding closes when the agent says a writer of any kind waits for
	// the name, or it stops (yield, or draining): a lent lease goes once
	// its page views are done. told closes at the first event of a
	// watch; tellsYield, written before, says whether the agent sends
	// yield at all (api.Event.Yields).
	yielding   chan struct{}
	yieldOnce  sync.Once
	told       chan struct{}
	toldOnce   sync.Once
	tellsYield bool
	changed    chan struct{} // the expiry moved: the renewer plans again
}

// runLocked is l's run, made at the first call; a lease that ended
// already gets one whose context is done. Called with l.mu held.
func (l *Lease) runLocked() *leaseRun {
	if r := l.run.Load(); r != nil {
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaseRun{ctx: ctx, cancel: cancel, draining: make(chan struct{}), yielding: make(chan struct{}),
		told: make(chan struct{}), changed: make(chan struct{}, 1)}
	if l.ended {
		cancel()
	}
	l.run.Store(r)
	return r
}

// running is runLocked, for a caller without l.mu.
func (l *Lease) running() *leaseRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runLocked()
}

func (c *Client) newLease(lj api.LeaseJSON, expires instant, mode semaphore.Mode, o Options, clk clock) *Lease {
	l := &Lease{c: c, id: lj.Lease, name: lj.Name, mode: mode, token: lj.Token, duration: o.Duration, grace: o.Grace,
		done: make(chan struct{}), clock: clk, expires: expires}
	l.mu.Lock()
	// A local timer, so the lease ends at its expiry even when the agent
	// says nothing (unreachable, stopped, slow).
	_, left := l.leftLocked()
	l.timer = time.AfterFunc(wake(left), l.expire)
	l.mu.Unlock()
	if o.AutoRenew {
		l.autoRenew()
	}
	return l
}

// autoRenew starts the renewals of Options.AutoRenew once, unless the
// lease ended. The middleware starts them only for a request that lasts:
// most page views end long before a renewal is due, without the
// renewer's goroutine and timer.
func (l *Lease) autoRenew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.renews {
		return
	}
	l.renews = true
	l.wg.Add(1)
	go l.renewLoop(l.runLocked())
}

// ID is the agent's handle of the lease ("node.incarnation.counter").
func (l *Lease) ID() string { return l.id }

// Name is the locked name.
func (l *Lease) Name() string { return l.name }

// Mode is the mode the lease was granted in.
func (l *Lease) Mode() semaphore.Mode { return l.mode }

// Token is the fencing token: it grows with every writer's grant of the
// name, and a reader's is above every earlier writer's.
func (l *Lease) Token() uint64 { return l.token }

// Expires is when the lease ends unless renewed: the last grant's or
// renewal's TTL counted from when its call was sent, on a clock that runs
// on while the machine is suspended. It carries the monotonic clock
// reading, so time.Until(Expires()) is immune to steps of the wall clock;
// as the monotonic clock stands still during a suspend, a later call
// answers earlier by the time suspended since.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, _ := l.leftLocked()
	return at
}

// leftLocked is the expiry on Go's clock, and the time left until it, by
// the boot clock: Go's clock did not count the time suspended since the
// send, so it is taken off.
func (l *Lease) leftLocked() (time.Time, time.Duration) {
	t := now(l.clock)
	left := l.expires.boot - t.boot
	slept := l.expires.at.Sub(t.at) - left // zero until a suspend
	return l.expires.at.Add(-slept), left
}

// wake is when the timer of a lease with left to live looks again.
func wake(left time.Duration) time.Duration { return min(left, checkEvery) }

// Done is closed when the lease is released or lost; Err says which. The
// first call starts watching the agent's events for the lease (one
// streaming request), so that an unlock by the agent is seen at once;
// leases whose Done is never called rely on renewals and the expiry timer
// alone, and cost no stream. A watch that breaks (the agent restarts) is
// made again, with backoff, while the lease has time left; an agent that
// no longer knows the lease (it restarted) is asked to renew it, which
// takes it over when the leaders still keep it and ends it as lost when
// they do not.
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.watching && !l.ended {
		l.watching = true
		l.wg.Add(1)
		go l.watch(l.runLocked())
	}
	return l.done
}

// Draining is closed once the agent says that a writer waits for the
// lease's name (a drain): a reader's long poll or stream should end soon,
// and a response should close its connection. Like Done, it watches the
// lease. A writer's lease never hears it.
func (l *Lease) Draining() <-chan struct{} {
	l.Done()
	return l.running().draining
}

// drainingNow reports whether Draining is closed, without watching.
func (l *Lease) drainingNow() bool {
	r := l.run.Load()
	return r != nil && closedNow(r.draining)
}

// closedNow reports whether ch is closed, without waiting.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Err is nil while the lease is held and after Release; after a loss it
// wraps semaphore.ErrLost (or the sentinel of the agent's failure code)
// with what happened.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// end stops the lease once: err nil for a release, else why it was lost.
// It does not wait for the goroutines (it may run on one of them).
func (l *Lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended, l.err = true, err
	l.timer.Stop()
	if r := l.run.Load(); r != nil {
		r.cancel()
	}
	close(l.done)
}

func (l *Lease) lost(format string, args ...any) error {
	return fmt.Errorf("client: lease %s on %q %s: %w", l.id, l.name, fmt.Sprintf(format, args...), semaphore.ErrLost)
}

// expire ends the lease if the boot clock says it is over, and else sets
// the timer to look again. It runs on the timer.
func (l *Lease) expire() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if _, left := l.leftLocked(); left > 0 {
		l.timer.Reset(wake(left))
		l.mu.Unlock()
		return
	}
	// The wall clock runs on through a suspend: the send's wall time plus
	// the TTL is the expiry's, but for steps of the wall clock.
	err := l.lost("expired at %s", l.expires.at.Format(time.RFC3339Nano))
	if l.renewFail != nil {
		err = fmt.Errorf("%w; last renewal: %w", err, l.renewFail)
	}
	l.mu.Unlock()
	l.end(err)
}

// extend records a later expiry (renewals, watch events); an earlier one
// is stale news and ignored.
func (l *Lease) extend(t instant) {
	l.mu.Lock()
	if l.ended || t.boot <= l.expires.boot {
		l.mu.Unlock()
		return
	}
	l.expires = t
	l.renewFail = nil
	_, left := l.leftLocked()
	l.timer.Reset(wake(left))
	r := l.run.Load()
	l.mu.Unlock()
	if r == nil {
		return // no renewer to tell
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Release gives the lease back and stops its watch, renewals and timer.
// Done closes (Err stays nil unless the lease was lost before). It returns
// once a quorum of the leaders dropped the lease, durably. It is safe to
// call more than once and after a loss; an agent that no longer knows the
// lease is not an error. When the agent cannot be reached, or answers that
// the release is not confirmed yet (ErrNotReady), the error says so and the
// leaders drop the lease at its expiry at the latest; calling Release
// again retries.
func (l *Lease) Release(ctx context.Context) error {
	if l.lent.Load() {
		return l.refuseLent()
	}
	return l.release(ctx, false)
}

// ErrLeaseLent is what Release and ReleaseNoWait return for a lease the
// middleware lends to the page views of its process (LeaseFrom): the
// middleware gives it back once they are done.
var ErrLeaseLent = errors.New("client: the lease is shared by the middleware's page views, which gives it back")

func (l *Lease) refuseLent() error {
	return fmt.Errorf("release %s: %w", l.id, ErrLeaseLent)
}

// ReleaseNoWait is Release without the agent's answer, on an agent that
// takes releases so (the socket's compact protocol, version 2): it
// returns at once. The release waits on its connection for the client's
// next call, which takes it along in the same write (a busy frontend's
// next page view comes within microseconds), or goes alone 200 µs later;
// the agent gives the lease back before that call. Close writes the
// releases still waiting. A failure to write it sends it again, answered,
// in the background (Close waits for it). A failure of the agent's
// is not returned: the agent counts it
// (sluice_api_unanswered_release_failures_total) and logs it, and the
// leaders drop the lease at its expiry at the latest. The error says only
// that the release could not be sent. Where the agent's version is not
// known yet, or it has none (HTTP), it is Release. The middleware and
// `sluice proxy` release each request's lock so; use Release to learn that
// the release is durable.
func (l *Lease) ReleaseNoWait(ctx context.Context) error {
	if l.lent.Load() {
		return l.refuseLent()
	}
	return l.release(ctx, true)
}

// release is Release, without the answer when noReply.
func (l *Lease) release(ctx context.Context, noReply bool) error {
	l.end(nil)
	l.wg.Wait()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil
	}
	op := callName{"release", l.id}
	// The lock's name goes with the compact call, which agents before it
	// ignore; not in HTTP's body, which they would refuse.
	req := api.CompactRequest{Op: api.OpRelease, Lease: l.id, Name: l.name}
	var (
		ok  bool
		err error
	)
	if noReply {
		ok, err = l.c.releaseNoReply(ctx, op, req)
	} else {
		_, ok, err = l.c.compact(ctx, op, &req)
	}
	if !ok {
		err = l.c.call(ctx, op.String(), http.MethodPost, "/v1/release", api.LeaseBody{Lease: l.id}, nil)
	}
	if err != nil && !errors.Is(err, semaphore.ErrUnknownLease) {
		return err
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	return nil
}

// Renew extends the lease by its duration, counted from now, once the
// leaders confirmed it. When the agent answers that the lease is lost or
// unknown, the lease ends: Done closes and Err wraps semaphore.ErrLost.
// Other errors (agent unreachable, not ready) leave the lease running
// until its expiry. An agent that restarted since the grant takes the
// lease over from the leaders, who keep it meanwhile: the renewal sends
// its name, mode and duration along (on the socket's compact protocol).
func (l *Lease) Renew(ctx context.Context) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	// Run out during a suspend, before the timer's look: a renewal is
	// worth nothing now, and the loss is known.
	l.expire()
	l.mu.Lock()
	ended, lerr := l.ended, l.err
	l.mu.Unlock()
	if ended {
		if lerr != nil {
			return lerr
		}
		return fmt.Errorf("client: renew %s: released: %w", l.id, semaphore.ErrUnknownLease)
	}
	sent := now(l.clock)
	op := callName{"renew", l.id}
	reply, ok, err := l.c.compact(ctx, op, &api.CompactRequest{Op: api.OpRenew, Lease: l.id, Name: l.name,
		Mode: l.mode.String(), Duration: l.duration, Grace: l.grace})
	expires := sent.add(reply.TTLNanos)
	if !ok {
		var lj api.LeaseJSON
		err = l.c.call(ctx, op.String(), http.MethodPost, "/v1/renew", api.LeaseBody{Lease: l.id}, &lj)
		expires = sent.add(ttlOf(lj))
	}
	switch {
	case err == nil:
		l.extend(expires)
		return nil
	case errors.Is(err, semaphore.ErrLost):
		l.end(err)
	case errors.Is(err, semaphore.ErrUnknownLease):
		// The agent ended it (an operator's unlock reaches it at once)
		// before this renewal: lost, as for the watcher.
		err = fmt.Errorf("%w: %w", semaphore.ErrLost, err)
		l.end(err)
	}
	return err
}

// Retries of a renewal that failed, and of a broken watch: from
// retryFirst, doubling up to retryMost, while the lease has time left (an
// agent restarting takes a second or two).
const (
	retryFirst = 50 * time.Millisecond
	retryMost  = time.Second
)

// renewLoop renews at about half the remaining time until the lease ends,
// and sooner again after a failure.
func (l *Lease) renewLoop(r *leaseRun) {
	defer l.wg.Done()
	retry := retryFirst
	for {
		l.mu.Lock()
		_, left := l.leftLocked()
		failing := l.renewFail != nil
		l.mu.Unlock()
		if left <= 0 {
			l.expire() // over (a suspend, or failed renewals): now, not at the timer's look
			return
		}
		wait := max(left/2, 10*time.Millisecond)
		if failing {
			wait = min(wait, retry)
			retry = min(2*retry, retryMost)
		} else {
			retry = retryFirst
		}
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.changed:
			t.Stop()
			continue
		case <-t.C:
		}
		// A renewal is worth nothing after the expiry (read again: a
		// suspend during the wait brought it nearer on Go's clock).
		l.mu.Lock()
		expires, _ := l.leftLocked()
		l.mu.Unlock()
		ctx, cancel := context.WithDeadline(r.ctx, expires)
		err := l.Renew(ctx)
		cancel()
		if err != nil && r.ctx.Err() == nil {
			l.mu.Lock()
			// A renewal the expiry cut short says less than an earlier
			// one the agent answered (not ready, unknown lease): keep that.
			if l.renewFail == nil || !errors.Is(err, context.DeadlineExceeded) {
				l.renewFail = err
			}
			l.mu.Unlock()
		}
	}
}

// watch follows the agent's events for the lease until it ends. A lost
// lease ends it by an event, a renewal's answer or the expiry timer; the
// agent going away does not (it may be restarting).
func (l *Lease) watch(r *leaseRun) {
	defer l.wg.Done()
	retry := retryFirst
	for {
		n, err := l.watchOnce(r)
		if r.ctx.Err() != nil {
			return // ended, by an event or otherwise
		}
		if n > 0 {
			// The stream ended without a last event (the agent drops slow
			// watchers, or stopped): look again at once; a new watch
			// starts with the state.
			retry = retryFirst
			continue
		}
		if err == nil || errors.Is(err, semaphore.ErrUnknownLease) {
			// Not even the state a new watch starts with: the agent does
			// not have the lease. A restarted agent lost it from its
			// memory while the leaders keep it: a renewal takes it over,
			// or says it is lost (and ends it).
			l.mu.Lock()
			expires, _ := l.leftLocked()
			l.mu.Unlock()
			ctx, cancel := context.WithDeadline(r.ctx, expires)
			rerr := l.Renew(ctx)
			cancel()
			if r.ctx.Err() != nil {
				return
			}
			if rerr == nil {
				retry = retryFirst
				continue
			}
		}
		// Unreachable or not ready (restarting): again after a while; the
		// expiry timer ends the lease if that takes too long.
		t := time.NewTimer(retry)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, retryMost)
	}
}

// watchOnce reads one watch stream; it returns how many events it read.
func (l *Lease) watchOnce(r *leaseRun) (int, error) {
	resp, err := l.c.send(r.ctx, "watch "+l.id, http.MethodGet, "/v1/watch?lease="+url.QueryEscape(l.id), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	n := 0
	for {
		var e api.Event
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return n, err
		}
		n++
		if n == 1 {
			r.toldOnce.Do(func() {
				r.tellsYield = e.Yields
				close(r.told)
			})
			if !e.Yields {
				// The agent does not (or no longer: it restarted, and
				// took the lease over outside its shared read ticket)
				// say when a writer waits: a lent lease goes once idle.
				r.yieldOnce.Do(func() { close(r.yielding) })
			}
		}
		// Granted and renewed events do not move the expiry: their send
		// time is unknown here, so only this client's own calls extend it.
		switch e.Kind {
		case "draining":
			// Yielding first: once Draining is closed, no page view is
			// lent the lease.
			r.yieldOnce.Do(func() { close(r.yielding) })
			r.drainOnce.Do(func() { close(r.draining) })
		case "yield":
			r.yieldOnce.Do(func() { close(r.yielding) })
		case "renew-failed":
			if errors.Is(sentinel(e.Code), semaphore.ErrLost) {
				l.end(l.lost("was dropped by the leaders (renewal refused)"))
			}
		case "unlocked":
			l.end(l.lost("was unlocked by the agent (%s)", cmp.Or(e.Code, "no code")))
		case "failed":
			err := sentinel(e.Code)
			if errors.Is(err, semaphore.ErrUnavailable) {
				err = semaphore.ErrLost
			}
			l.end(fmt.Errorf("client: lease %s on %q failed (%s): %w", l.id, l.name, e.Code, err))
		}
	}
}
