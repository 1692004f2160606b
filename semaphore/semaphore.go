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
	// earlier READ_WRITE_PRIORITY or exclusive ticket and for an active soft
	// writer; a try gets ErrDraining while one is there.
	ReadOnly = wire.ModeReadOnly
	// ReadWritePriority is exclusive and blocks every reader that comes
	// after it, so it runs as soon as the earlier holders are done: the
	// default way to drain a site.
	ReadWritePriority = wire.ModeReadWritePriority
	// ReadWrite is exclusive but lets later readers in while it waits: it
	// goes in only at a moment no reader is in the table, so it may starve
	// while readers keep coming. That is the mode's point, not a bug.
	ReadWrite = wire.ModeReadWrite
	// ReadWriteGentle is ReadWrite that also waits for a quiet period with
	// no reader in the table, so visitors can finish browsing.
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

// ParseMode reads a mode as users write it ("read-only", "hard", ...).
func ParseMode(s string) (Mode, error) {
	m, ok := modeNames[s]
	if !ok {
		return 0, fmt.Errorf("%w: unknown mode %q (read-only, read-write-priority, read-write, read-write-gentle)", ErrInvalid, s)
	}
	return m, nil
}

// DefaultQuietTicks is READ_WRITE_GENTLE's quiet period when a request
// names none: 10 minutes at the agent's tick of 10 ms.
const DefaultQuietTicks = 60_000

// Options are the semaphore's own request options.
type Options struct {
	// QuietPeriod, in ticks, is how long READ_WRITE_GENTLE waits without a
	// reader coming or going. Zero means the default of 10 minutes.
	QuietPeriod int64
	// ReaderLimit caps concurrent READ_ONLY holders among the readers that
	// ask for it: such a reader goes in only while fewer readers than the
	// limit are ahead of it in the line (a fair counting semaphore, as
	// `consul lock -n`). Zero means no limit.
	ReaderLimit int
}

// ValidateOptions refuses options that make no sense: a negative quiet
// period, a reader limit below zero (zero means none).
func ValidateOptions(o Options) error {
	var errs []error
	if o.QuietPeriod < 0 {
		errs = append(errs, fmt.Errorf("%w: negative quiet period %d", ErrInvalid, o.QuietPeriod))
	}
	if o.ReaderLimit < 0 {
		errs = append(errs, fmt.Errorf("%w: reader limit %d is below 1", ErrInvalid, o.ReaderLimit))
	}
	return errors.Join(errs...)
}

// ParseLimit reads a reader limit as a user gives it: a whole number of at
// least 1 (a user who wants no limit leaves it out).
func ParseLimit(n int) (int, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: reader limit %d is below 1", ErrInvalid, n)
	}
	return n, nil
}

// Lease is a granted lock as a client holds it.
type Lease struct {
	Name string
	Mode Mode
	// Token is the fencing token: it grows with every writer's grant of the
	// name, and a reader's token is above every earlier writer's.
	Token uint64
	// Expiry is when the holder must stop acting under the lease, in the
	// clock of whoever made the request (see core.Event.TTL).
	Expiry int64
}

func writer(m Mode) bool { return m != ReadOnly }

// soft writers let later readers pass while they wait.
func soft(m Mode) bool { return m == ReadWrite || m == ReadWriteGentle }

// Admit is the core.Admit policy of the semaphore. Tickets are in bakery
// order (number, then request id); others are every other ticket of the
// name that is not released (an entry of me itself is skipped). Readers never announce themselves, so a soft
// writer takes every reader ticket in the table as possibly active.
//
//   - READ_ONLY waits for every earlier READ_WRITE_PRIORITY or exclusive
//     ticket, and for any active soft writer; a try is told ErrDraining.
//     With a limit L it also waits while L reader tickets are ahead of it
//     (a try is told ErrTimedOut): of L+1 readers holding at once, the last
//     in line would have seen the L before it, so that cannot happen.
//   - READ_WRITE_PRIORITY and exclusive wait for every earlier ticket and
//     for any active soft writer; a try is told ErrTimedOut.
//   - READ_WRITE waits while any reader ticket is in the table, any earlier
//     writer ticket, or any other active writer; then it must be activated
//     (announced at a quorum) and asked again before it is granted.
//   - READ_WRITE_GENTLE is READ_WRITE that also waits until, on the
//     reports decided on, no reader ticket was in the table for its quiet
//     period.
func Admit(me core.Candidate, others []wire.Entry) core.Decision {
	wait := core.Decision{}
	if me.Try {
		wait.Refuse = wire.CodeTimedOut
		if me.Mode == ReadOnly {
			wait.Refuse = wire.CodeDraining
		}
	}
	if !me.Mode.Valid() {
		return core.Decision{Refuse: wire.CodeInvalid}
	}
	readersAhead := 0
	for _, o := range others {
		if o.Req == me.Req {
			continue
		}
		earlier := core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req)
		if earlier && o.Mode == ReadOnly {
			readersAhead++
		}
		activeSoft := soft(o.Mode) && o.Active
		var blocked bool
		switch {
		case me.Mode == ReadOnly:
			blocked = earlier && writer(o.Mode) && !soft(o.Mode) || activeSoft
		case soft(me.Mode):
			blocked = o.Mode == ReadOnly || earlier && writer(o.Mode) || activeSoft
		default:
			blocked = earlier || activeSoft
		}
		if blocked {
			return wait
		}
	}
	if me.Mode == ReadOnly && me.Limit > 0 && readersAhead >= me.Limit {
		if me.Try {
			return core.Decision{Refuse: wire.CodeTimedOut} // full, not draining
		}
		return core.Decision{}
	}
	if !soft(me.Mode) {
		return core.Decision{Grant: true}
	}
	if me.Mode == ReadWriteGentle {
		quiet := me.Quiet
		if quiet == 0 {
			quiet = DefaultQuietTicks
		}
		if me.SinceReaders < quiet {
			wait.RetryIn = quiet - me.SinceReaders // ask again when it may be over
			return wait
		}
	}
	return core.Decision{Grant: true, Activate: true}
}

// LeaseOf is the lease a grant event gives a request that was sent at tick
// sent, in the requester's own clock. It expires the event's TTL after the
// send: never later than the master ends it, even when the request
// travelled before the master saw it (DESIGN.md §4).
func LeaseOf(e core.Event, mode Mode, sent int64) Lease {
	return Lease{Name: e.Name, Mode: mode, Token: e.Token, Expiry: ExpiryOf(e, sent)}
}

// ExpiryOf is the one definition of a lease's end, shared by the agent,
// the client and the simulator: the TTL of a grant or renewal event
// counted from the tick its call (Acquire or Renew) was sent, in the
// sender's own clock.
func ExpiryOf(e core.Event, sent int64) int64 { return sent + e.TTL }
