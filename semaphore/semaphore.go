package semaphore

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// Mode is a semaphore mode.
type Mode = wire.Mode

// The modes (DESIGN.md §6).
const (
	// ReadOnly is shared with other readers. A reader waits for every
	// earlier writer; a try gets ErrDraining while one is there.
	ReadOnly = wire.ModeReadOnly
	// ReadWritePriority is exclusive and blocks every reader that comes
	// after it, so it runs as soon as the earlier holders are done: the
	// default way to drain a site.
	ReadWritePriority = wire.ModeReadWritePriority
	// ReadWrite is exclusive but lets later readers in (not built yet).
	ReadWrite = wire.ModeReadWrite
	// ReadWriteGentle is ReadWrite plus a quiet period (not built yet).
	ReadWriteGentle = wire.ModeReadWriteGentle
	// Exclusive is the core's own exclusive lock, as `sluice lock` takes it:
	// the same admission as ReadWritePriority.
	Exclusive = wire.ModeExclusive
)

// Errors a client may see; each has a stable wire and JSON spelling
// (Code). They are the core's sentinels, so errors.Is works across both.
var (
	ErrDraining = core.ErrDraining
	ErrTimedOut = core.ErrTimedOut
	ErrNotReady = core.ErrNotReady
	ErrLost     = core.ErrLost
	ErrInvalid  = core.ErrInvalid
	ErrOverflow = core.ErrOverflow
	// ErrUnsupported: a mode or option this build cannot grant safely yet.
	ErrUnsupported = fmt.Errorf("%w: not supported yet", core.ErrInvalid)
)

// Code is the stable spelling of err on the wire and in JSON ("draining",
// "timedout", ...), or "" when err is none of the errors above.
func Code(err error) string { return core.CodeOf(err).String() }

var modeNames = map[string]Mode{
	"read-only": ReadOnly, "read-write-priority": ReadWritePriority, "read-write": ReadWrite,
	"read-write-gentle": ReadWriteGentle, "exclusive": Exclusive,
	// The drain verbs' names for the writer modes.
	"hard": ReadWritePriority, "soft": ReadWrite, "gentle": ReadWriteGentle,
}

// ParseMode reads a mode as users write it ("read-only", "hard", ...). It
// refuses unknown names, and the modes this build cannot grant yet.
func ParseMode(s string) (Mode, error) {
	m, ok := modeNames[s]
	if !ok {
		return 0, fmt.Errorf("%w: unknown mode %q (read-only, read-write-priority, read-write, read-write-gentle)", ErrInvalid, s)
	}
	if err := Supported(m); err != nil {
		return 0, err
	}
	return m, nil
}

// Supported reports whether this build grants mode m.
func Supported(m Mode) error {
	switch m {
	case ReadOnly, ReadWritePriority, Exclusive:
		return nil
	case ReadWrite, ReadWriteGentle:
		return fmt.Errorf("%w: mode %s needs active-ticket tracking in the core", ErrUnsupported, m)
	}
	return fmt.Errorf("%w: unknown mode %d", ErrInvalid, m)
}

// Options are the semaphore's own request options.
type Options struct {
	// QuietPeriod, in ticks, is how long READ_WRITE_GENTLE waits without a
	// reader coming or going. Zero means the default of 10 minutes.
	QuietPeriod int64
	// ReaderLimit caps concurrent READ_ONLY holders of the name. Zero means
	// no limit.
	ReaderLimit int
}

// ValidateOptions refuses options that make no sense: a negative quiet
// period, a negative reader limit; and a reader limit, which this build
// cannot enforce yet.
func ValidateOptions(o Options) error {
	var errs []error
	if o.QuietPeriod < 0 {
		errs = append(errs, fmt.Errorf("%w: negative quiet period %d", ErrInvalid, o.QuietPeriod))
	}
	switch {
	case o.ReaderLimit < 0:
		errs = append(errs, fmt.Errorf("%w: reader limit %d is below 1", ErrInvalid, o.ReaderLimit))
	case o.ReaderLimit > 0:
		errs = append(errs, fmt.Errorf("%w: reader limits need active-ticket tracking in the core", ErrUnsupported))
	}
	return errors.Join(errs...)
}

// Lease is a granted lock as a client holds it.
type Lease struct {
	Name string
	Mode Mode
	// Token is the fencing token: it grows with every writer's grant of the
	// name, and a reader's token is above every earlier writer's.
	Token uint64
	// Expiry is when the holder must stop acting under the lease, in the
	// clock of whoever made the request (see core.Event.Elapsed).
	Expiry int64
}

func writer(m Mode) bool { return m != ReadOnly }

// Admit is the core.Admit policy of the semaphore. Tickets are in bakery
// order (number, then request id); others are every other ticket of the
// name that is not released.
//
//   - READ_ONLY waits while any earlier ticket is a writer's; a try is told
//     ErrDraining at once instead.
//   - READ_WRITE_PRIORITY and Exclusive wait while any earlier ticket
//     exists; a try is told ErrTimedOut.
func Admit(me core.Candidate, others []wire.Entry) core.Decision {
	for _, o := range others {
		if !core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req) {
			continue
		}
		if !writer(me.Mode) && !writer(o.Mode) {
			continue // readers share
		}
		switch {
		case !me.Try:
			return core.Decision{}
		case writer(me.Mode):
			return core.Decision{Refuse: wire.CodeTimedOut}
		default:
			return core.Decision{Refuse: wire.CodeDraining}
		}
	}
	if Supported(me.Mode) != nil {
		return core.Decision{Refuse: wire.CodeInvalid}
	}
	return core.Decision{Grant: true}
}
