package semaphore

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// CheckName checks a lock's name: not empty, at most wire.MaxNameLen
// bytes, UTF-8 without control characters (a newline would add rows to
// `sluice locks`, an escape sequence would rewrite an operator's
// terminal). ErrInvalid otherwise.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalid)
	case len(name) > wire.MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes is over %d", ErrInvalid, len(name), wire.MaxNameLen)
	case plainASCII(name):
		return nil
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %q is not valid UTF-8", ErrInvalid, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: name %q has a control character", ErrInvalid, name)
	}
	return nil
}

// plainASCII reports whether name is printable ASCII, which CheckName
// lets through without decoding runes (every page view's name is checked).
func plainASCII(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// Mode is a semaphore mode.
type Mode = wire.Mode

// The modes.
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
	// while readers keep coming. That is the mode's point, not a bug. It
	// also lets a later READ_WRITE_PRIORITY or exclusive writer go first.
	ReadWrite = wire.ModeReadWrite
	// ReadWriteGentle is ReadWrite that also waits for a quiet period with
	// no reader in the table, so visitors can finish browsing.
	ReadWriteGentle = wire.ModeReadWriteGentle
	// Exclusive is the core's own exclusive lock, as `sluice lock` takes it:
	// the same admission as ReadWritePriority.
	Exclusive = wire.ModeExclusive
	// IntentShared and IntentExclusive are held on the parents of a nested
	// name (NamePath) read, or written, below them: the agent takes them,
	// never a client. IntentShared is admitted as READ_ONLY is, without a
	// limit; IntentExclusive also waits for earlier READ_ONLY tickets, and
	// READ_ONLY for earlier IntentExclusive ones.
	IntentShared    = wire.ModeIntentShared
	IntentExclusive = wire.ModeIntentExclusive
)

// Version is this release of sluice, in semantic versioning: agents of
// two adjacent minor versions form one cluster, and a store written by
// one opens with the next (the manual's "Upgrading sluice" says how). Its
// agents announce it to the mesh; `sluice version` and `sluice members`
// show it.
const Version = "0.9.0"

// The wire codecs this release reads and writes: MinCodec, the previous
// release's, to Codec. An agent writes to each peer in the newest both
// read (package core/wire).
const (
	MinCodec = int(wire.MinVersion)
	Codec    = int(wire.Version)
)

// The failures a client may see, each under its one Go name: these are
// the sentinels of the table in core/codes (the core and the agent return
// them, the client turns an answer's code back into them), so errors.Is
// works on an error from any of them. Each has one stable JSON code, the
// "error" of an API answer (sluice's manual lists them), and its message
// begins with that failure's name, for people.
var (
	// ErrDraining: a writer holds or waits for the name, so a reader's
	// request is refused at once (code draining).
	ErrDraining = codes.ErrDraining
	// ErrTimedOut: others held the name for the whole wait (timedout).
	ErrTimedOut = codes.ErrTimedOut
	// ErrNotReady: the cluster cannot decide requests now: no leaders in
	// agreement, a quorum of them lost, or this agent stopping or its
	// store failed (not_ready). Try again.
	ErrNotReady = codes.ErrNotReady
	// ErrLost: a granted lease ended before its holder released it
	// (lost).
	ErrLost = codes.ErrLost
	// ErrInvalid: a request that cannot be served as asked (invalid, and
	// bad_request for one the API could not read).
	ErrInvalid = codes.ErrInvalid
	// ErrOverflow: too many requests wait on the name (overflow).
	ErrOverflow = codes.ErrOverflow
	// ErrUnknownLease: no such lease or request: released, or ended and
	// forgotten (unknown_lease).
	ErrUnknownLease = codes.ErrUnknownLease
	// ErrUnauthorized: the bearer token is missing or wrong
	// (unauthorized).
	ErrUnauthorized = codes.ErrUnauthorized
	// ErrForbidden: the agent knows the caller, and its role does not
	// allow the call on that name (forbidden).
	ErrForbidden = codes.ErrForbidden
	// ErrUnavailable: the agent could not be reached (no socket,
	// connection refused or broken), did not answer as an agent does, or
	// answered with a code the table does not know (unavailable).
	ErrUnavailable = codes.ErrUnavailable
	// ErrConflict: a membership change lost to another, met one under
	// way, or had nothing to vouch for (conflict). Try again.
	ErrConflict = codes.ErrConflict
	// ErrChangeTimedOut: a membership change was not confirmed in time
	// (change_timedout). It may still commit: list the members to see.
	ErrChangeTimedOut = codes.ErrChangeTimedOut
)

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
		return 0, fmt.Errorf("%w: unknown mode %q (read-only, read-write-priority, read-write, read-write-gentle, exclusive)", ErrInvalid, s)
	}
	return m, nil
}

// DefaultQuiet is READ_WRITE_GENTLE's quiet period when a request names
// none. The runtime turns it into ticks; Admit takes the
// period a request carries as it is.
const DefaultQuiet = 10 * time.Minute

// writer and soft read the modes' traits (wire.Mode's one table).
func writer(m Mode) bool { return m.Writer() }

// soft writers let later readers pass while they wait.
func soft(m Mode) bool { return m.Soft() }

// Admit is the core.Admit policy of the semaphore. Tickets are in bakery
// order (number, then request id); others are every other ticket of the
// name that is not released (an entry of me itself is skipped). Readers
// never announce themselves, so a soft writer takes every reader ticket in
// the table as possibly active.
//
//   - READ_ONLY waits for every earlier READ_WRITE_PRIORITY, exclusive or
//     INTENT_EXCLUSIVE ticket, and for any active soft writer; a try is
//     told ErrDraining. With a limit L it also waits while L reader
//     tickets are ahead of it, or any node's shared read ticket (a
//     READ_ONLY entry marked Active), whose page views the table does not
//     count (a try is told ErrTimedOut): of L+1 readers holding at once,
//     the last in line would have seen the L before it, so that cannot
//     happen.
//   - INTENT_SHARED (a reader's, on a parent) waits as READ_ONLY does,
//     but not for INTENT_EXCLUSIVE: a reader of /site/blog and a writer of
//     /site/shop share /site. INTENT_EXCLUSIVE (a writer's, on a parent)
//     waits for earlier priority, exclusive and READ_ONLY tickets, and
//     for an active soft writer; a try is told ErrTimedOut. So the holder
//     of a name meets the holders of its parents and descendants on the
//     names they share, by the modes' rules (wire.Conflicts).
//   - READ_WRITE_PRIORITY and exclusive wait for every earlier ticket and
//     for any active soft writer; a try is told ErrTimedOut.
//   - READ_WRITE waits while any reader ticket (READ_ONLY or an intent)
//     is in the table, any earlier writer ticket, or any other active
//     writer; then it must be activated (announced at a quorum) and asked
//     again before it is granted.
//   - READ_WRITE_GENTLE is READ_WRITE that also waits until, on the
//     reports decided on, no reader ticket was in the table for its quiet
//     period (me.Quiet ticks; the runtime fills in DefaultQuiet).
//   - A soft writer (READ_WRITE, READ_WRITE_GENTLE) that must wait while a
//     priority or exclusive ticket is behind it takes a new place in line,
//     behind that one (Decision.Requeue). Hard writers wait for every
//     earlier ticket, readers for earlier hard writers, and the soft
//     writer for any reader: kept, its place would close a cycle (soft
//     waits for a later reader, the reader for the hard writer, the hard
//     writer for the soft one) that only a timeout breaks. So soft writers
//     may starve behind hard writers as behind readers, as their mode
//     says, and fencing tokens still grow: the soft writer's new ticket is
//     above the hard writer's. A later INTENT_EXCLUSIVE needs no such
//     move: it waits for the soft writer only while that one is active.
//
// No one waits on a cycle: readers, intents and hard writers wait only for
// earlier tickets and for an active soft writer, which backs off (clears
// its mark) as soon as it cannot go in, and a waiting soft writer holds up
// no hard writer. Across names, a nested acquire takes the parents first
// and every name of one acquire in byte order (the agent's rule), so a
// request waits only on a name above every one it holds.
func Admit(me core.Candidate, others []wire.Entry) core.Decision {
	d := admit(me, others)
	if d.Refuse == wire.CodeNone || !me.Try || !writer(me.Mode) && me.Mode != IntentExclusive {
		return d
	}
	// A writer's try that only nodes' shared read tickets keep out (entries
	// of a shared mode marked Active) waits for them to yield instead of
	// failing at once: their nodes are asked as its ticket is taken, an
	// idle one goes within a round trip, and the core still ends the try at
	// its bound.
	shared := wire.RequestID{} // one that keeps it out
	rest := make([]wire.Entry, 0, len(others))
	for _, o := range others {
		if !o.Mode.Shared() || !o.Active || o.Req == me.Req || !wire.Conflicts(me.Mode, o.Mode) {
			rest = append(rest, o)
		} else if shared == (wire.RequestID{}) && (soft(me.Mode) || core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req)) {
			shared = o.Req
		}
	}
	if shared != (wire.RequestID{}) && admit(me, rest).Grant {
		// Not blocked by that one alone (BlockedBy): any other ticket
		// that comes makes it a refusal again.
		return core.Decision{}
	}
	return d
}

// ChoosingMatters is the core.ChoosingMatters of the semaphore: a request
// still choosing matters to a waiter whose mode conflicts with its own
// (wire.Conflicts), and to a reader with a limit whatever its mode, since
// the limit counts the reader tickets ahead of it. Admit looks at no other
// ticket: readers and intents without a limit wait only for conflicting
// tickets and active soft writers, which conflict with them too. So page
// views never wait for each other's doorways.
func ChoosingMatters(me core.Candidate, choosing wire.Entry) bool {
	return me.Limit > 0 || wire.Conflicts(me.Mode, choosing.Mode)
}

// requeueBehindHard turns wait, a soft writer's wait that is not a try,
// into a new place in line behind the priority and exclusive writers
// after it: they wait for every earlier ticket, and readers wait for them,
// while the soft writer waits for those readers: kept, its place would
// close a cycle that only a timeout breaks.
func requeueBehindHard(me core.Candidate, others []wire.Entry, wait core.Decision) core.Decision {
	if !soft(me.Mode) || me.Try {
		return wait
	}
	for _, o := range others {
		if o.Req != me.Req && writer(o.Mode) && !soft(o.Mode) && !core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req) {
			return core.Decision{Requeue: true}
		}
	}
	// Not blocked by one entry alone: a hard writer that comes behind
	// changes the answer.
	wait.BlockedBy = wire.RequestID{}
	return wait
}

// admit is Admit without the wait for shared read tickets to yield.
func admit(me core.Candidate, others []wire.Entry) core.Decision {
	wait := core.Decision{}
	if me.Try {
		wait.Refuse = wire.CodeTimedOut
		if me.Mode == ReadOnly || me.Mode == IntentShared {
			wait.Refuse = wire.CodeDraining
		}
	}
	if !me.Mode.Valid() {
		return core.Decision{Refuse: wire.CodeInvalid}
	}
	readersAhead, sharedAhead := 0, false
	for _, o := range others {
		if o.Req == me.Req {
			continue
		}
		earlier := core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req)
		if earlier && o.Mode == ReadOnly {
			readersAhead++
			sharedAhead = sharedAhead || o.Active
		}
		activeSoft := soft(o.Mode) && o.Active
		var blocked bool
		switch {
		case !writer(me.Mode):
			// A reader or an intent: earlier tickets it conflicts with,
			// save a soft writer's until it is active.
			blocked = earlier && wire.Conflicts(me.Mode, o.Mode) && !soft(o.Mode) || activeSoft
		case soft(me.Mode):
			blocked = o.Mode.Reader() || earlier && writer(o.Mode) || activeSoft
		default:
			blocked = earlier || activeSoft
		}
		if blocked {
			if wait.Refuse == wire.CodeNone {
				wait.BlockedBy = o.Req // blocked by o alone, whatever else comes
			}
			return requeueBehindHard(me, others, wait)
		}
	}

	if me.Mode == ReadOnly && me.Limit > 0 && (readersAhead >= me.Limit || sharedAhead) {
		if me.Try {
			return core.Decision{Refuse: wire.CodeTimedOut} // full, not draining
		}
		return core.Decision{}
	}
	if !soft(me.Mode) {
		return core.Decision{Grant: true}
	}
	if me.Mode == ReadWriteGentle && me.SinceReaders < me.Quiet {
		wait.RetryIn = me.Quiet - me.SinceReaders // ask again when it may be over
		return requeueBehindHard(me, others, wait)
	}
	return core.Decision{Grant: true, Activate: true}
}

// RefuseEarly is the core.RefuseEarly of the semaphore: a READ_ONLY or
// INTENT_SHARED try meets a draining name at its first replica, a round
// and a durable ticket before Admit would say the same (every ticket the
// try can get is after the ones the replica has): a priority or exclusive
// writer's ticket, a soft writer marked active, or for READ_ONLY an
// INTENT_EXCLUSIVE ticket (a writer below), answers `draining`. So does
// such a writer still choosing its number: its drain has begun (the
// shares were asked to yield at its ENTER), and a reader's try let in
// would only take a ticket to give back, its choosing flag keeping the
// writer waiting in the doorway meanwhile. A soft writer is never
// active while choosing, so readers still pass it.
func RefuseEarly(mode wire.Mode, tickets []wire.Entry) wire.Code {
	if mode != ReadOnly && mode != IntentShared {
		return wire.CodeNone
	}
	for _, o := range tickets {
		if writer(o.Mode) && !soft(o.Mode) || soft(o.Mode) && o.Active || mode == ReadOnly && o.Mode == IntentExclusive {
			return wire.CodeDraining
		}
	}
	return wire.CodeNone
}
