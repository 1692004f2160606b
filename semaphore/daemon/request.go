package daemon

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Request is a client's lock request, in the client's units.
type Request struct {
	Name string
	Mode wire.Mode
	// Timeout is how long to wait for the grant; 0 with Try.
	Timeout time.Duration
	// Try: answer at once (Timeout is ignored).
	Try bool
	// Duration is how long the lease lasts once granted; > 0.
	Duration time.Duration
	// Grace is how long after Duration the lease is released by force.
	Grace time.Duration
	// Quiet is the quiet period of READ_WRITE_GENTLE (0: the default,
	// semaphore.DefaultQuiet).
	Quiet time.Duration
	// Limit caps the readers ahead of a READ_ONLY request (0: none).
	Limit int
	// Owner is who the client says it is, for operators (api.AcquireBody).
	Owner string
	// Reason and ETA are a writer's word for visitors (api.AcquireBody):
	// checked as Owner is; ETA from the call, at most maxSpan.
	Reason string
	ETA    time.Duration
	// etaAt is ETA from the Acquire call, on the wall clock.
	etaAt time.Time
	// ReadersGrace is a drain's grace for its readers, and Preview its
	// preview token's hash (api.AcquireBody); graceAt is ReadersGrace
	// from the Acquire call, on the wall clock.
	ReadersGrace time.Duration
	Preview      string
	graceAt      time.Time
	// by is who took it, as the kernel or a token says (WithCaller): its
	// releases, renewals and watches are this caller's or an operator's.
	by *Caller
}

// maxOwner caps Request.Owner.
const maxOwner = 256

// Limits on what a client may ask for, and the defaults of the API.
const (
	maxSpan         = 30 * 24 * time.Hour // timeouts, durations, grace, quiet
	defaultDuration = api.DefaultDuration
	defaultTimeout  = api.DefaultTimeout
	// maxLimit: a reader limit above the requests a name may have at all
	// can never bind.
	maxLimit = core.DefaultMaxWaiters
)

// Validate is the one check of a lock request against what users may ask
// for, at the agent's edge: Node.Acquire runs it on every request, from
// the API or from Go, and the CLI on its flags before it calls the agent.
// Every failure is an ErrInvalid that says which field is wrong and why.
// (The core keeps a check of its own bounds, not of these rules.)
func (r Request) Validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if !r.Mode.Valid() {
		return fmt.Errorf("%w: unknown mode %s", codes.ErrInvalid, r.Mode)
	}
	if r.Mode.Intent() {
		return fmt.Errorf("%w: mode %s is the agent's own, held on the names above a nested name", codes.ErrInvalid, r.Mode)
	}
	for _, f := range []struct {
		field string
		d     time.Duration
	}{{"timeout", r.Timeout}, {"duration", r.Duration}, {"grace", r.Grace}, {"quiet", r.Quiet},
		{"readers_grace", r.ReadersGrace}} {
		if f.d < 0 || f.d > maxSpan {
			return fmt.Errorf("%w: %s %s is not between 0 and %s", codes.ErrInvalid, f.field, f.d, maxSpan)
		}
	}
	if r.Duration < MinDuration {
		return fmt.Errorf("%w: duration %s is under %s (the agents count time in ticks of %s)", codes.ErrInvalid, r.Duration, MinDuration, MinDuration)
	}
	if len(r.Owner) > maxOwner || !utf8.ValidString(r.Owner) || strings.IndexFunc(r.Owner, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: owner %q: at most %d bytes of UTF-8 without control characters", codes.ErrInvalid, r.Owner, maxOwner)
	}
	if len(r.Reason) > maxOwner || !utf8.ValidString(r.Reason) || strings.IndexFunc(r.Reason, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: reason: at most %d bytes of UTF-8 without control characters (got %d bytes)", codes.ErrInvalid, maxOwner, len(r.Reason))
	}
	if r.ETA < 0 || r.ETA > maxSpan {
		return fmt.Errorf("%w: eta %s is not between 0 and %s", codes.ErrInvalid, r.ETA, maxSpan)
	}
	if r.Preview != "" && !isSHA256Hex(r.Preview) {
		return fmt.Errorf("%w: preview: the SHA-256 of the preview token, 64 lowercase hex digits (got %d bytes)", codes.ErrInvalid, len(r.Preview))
	}
	if r.Mode == semaphore.ReadOnly && (r.Preview != "" || r.ReadersGrace != 0) {
		return fmt.Errorf("%w: preview and readers_grace are a writer's, not a reader's", codes.ErrInvalid)
	}
	if r.Limit < 0 || r.Limit > maxLimit {
		return fmt.Errorf("%w: reader limit %d is not 1..%d (0 or none: no limit)", codes.ErrInvalid, r.Limit, maxLimit)
	}
	return nil
}

func isSHA256Hex(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// MinDuration is the shortest lease: one tick of the agents' clock.
const MinDuration = DefaultTick

// validName checks a lock's name, for requests and force-unlocks
// (semaphore.CheckName).
func validName(name string) error { return semaphore.CheckName(name) }

// compactAcquire reads an acquire of the compact protocol with
// ParseAcquire, the one reader of an acquire: the same defaults and the
// same checks as HTTP's. The frame has no "not given": a duration, grace
// or quiet of 0 is the default, and a timeout of 0, as "0s" in HTTP, is
// an answer at once (the Go client sends its default timeout itself).
func compactAcquire(req api.CompactRequest) (Request, error) {
	// The durations are set on what ParseAcquire read, not formatted for
	// it to parse back (a page view's try is read so): a timeout as
	// given, and a duration, grace or quiet of 0 left at its default.
	r, err := ParseAcquire(api.AcquireBody{Name: req.Name, Mode: req.Mode, Try: req.Try, Limit: req.Limit, Timeout: "0s"})
	if err != nil {
		return r, err
	}
	r.Timeout = req.Timeout
	for _, f := range [...]struct{ given, to *time.Duration }{{&req.Duration, &r.Duration}, {&req.Grace, &r.Grace}, {&req.Quiet, &r.Quiet}} {
		if *f.given != 0 {
			*f.to = *f.given
		}
	}
	return r, nil
}

// ParseAcquire reads the body of POST /v1/acquire into a Request, with the
// API's defaults for what it leaves out (mode exclusive, timeout 30s,
// duration 1m). It only reads: a duration that is not a Go duration or a
// mode without a name is an ErrInvalid here; Validate judges the values.
func ParseAcquire(b api.AcquireBody) (Request, error) {
	r := Request{Name: b.Name, Try: b.Try, Limit: b.Limit, Mode: semaphore.Exclusive, Owner: b.Owner, Reason: b.Reason,
		Preview: b.Preview}
	if b.Mode != "" {
		m, err := semaphore.ParseMode(b.Mode)
		if err != nil {
			return r, err
		}
		r.Mode = m
	}
	for _, f := range []struct {
		field string
		s     api.Span
		to    *time.Duration
		def   time.Duration
	}{{"timeout", b.Timeout, &r.Timeout, defaultTimeout}, {"duration", b.Duration, &r.Duration, defaultDuration},
		{"grace", b.Grace, &r.Grace, 0}, {"quiet", b.Quiet, &r.Quiet, 0}, {"eta", b.ETA, &r.ETA, 0},
		{"readers_grace", b.ReadersGrace, &r.ReadersGrace, 0}} {
		*f.to = f.def
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(string(f.s))
		if err != nil {
			return r, fmt.Errorf("%w: %s: %v", codes.ErrInvalid, f.field, err)
		}
		*f.to = d
	}
	return r, nil
}
