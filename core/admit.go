package core

import "github.com/sluicehq/sluice/core/wire"

// Candidate is the request whose grant is being decided.
type Candidate struct {
	Req    wire.RequestID
	Ticket uint64
	Mode   wire.Mode
	// Try is set for an obtain timeout of 0: the policy must grant or refuse,
	// never wait on another holder.
	Try bool
	// Quiet is the quiet period the request asked for, in ticks (0: none;
	// the runtime fills in a default before it proposes the request).
	Quiet int64
	// SinceReaders is how many ticks ago, at the least on the quorum of
	// reports decided on, a READ_ONLY ticket of the name was in the table.
	SinceReaders int64
	// Activated: the request is marked active at a quorum, and the reports
	// decided on were made after that.
	Activated bool
	// Limit is the reader limit the request asked for (0: none).
	Limit int
}

// Decision is an admission policy's answer. Neither Grant nor a Refuse code
// means wait for the next report.
type Decision struct {
	Grant  bool
	Refuse wire.Code
	// Activate, with Grant: grant only once the request is marked active at
	// a quorum and the policy, asked again on reports made after that,
	// still says Grant. For modes whose grant others must see before it
	// happens (a writer that lets later readers pass).
	Activate bool
	// RetryIn, when waiting, asks to be asked again on fresh reports after
	// that many ticks even if nothing changes: for a wait that ends with
	// time (a quiet period), not with a change replicas would push.
	RetryIn int64
	// BlockedBy, with a wait (neither Grant nor Refuse, no RetryIn), is the
	// entry the wait rests on, when it stands whatever else the table holds
	// and however SinceReaders moves, as long as that entry is in it
	// unchanged: the core then asks again only once a report changes that
	// entry or the candidate's own. Zero when the wait rests on more than
	// one entry (a reader limit) or on time.
	BlockedBy wire.RequestID
	// Requeue, with a wait, gives the ticket up and takes a new one, behind
	// every ticket there is now (the same client request, a new doorway):
	// for a request that lets later ones pass while it waits (a soft
	// writer), whose place in line would hold up a later request that the
	// ones it waits for wait for in turn.
	Requeue bool
}

// Admit decides whether me may be granted, given every other request of the
// name that holds a ticket on a quorum's merged view. The core has already
// waited for every request still choosing below me that matters
// (ChoosingMatters); Admit only orders tickets.
//
// others may list me itself, which the policy skips: the core hands every
// waiter of a name one shared list. It is the caller's, read-only, valid
// during the call only.
type Admit func(me Candidate, others []wire.Entry) Decision

// ChoosingMatters says whether choosing, a request still in its doorway
// (its number not known yet), could change the decision on me once its
// ticket is known: a waiter waits only for those of the doorways below it.
// The bakery's rule is that every one matters (a nil ChoosingMatters). A
// policy may leave out a request whose ticket Admit never looks at when it
// decides on me, at any place in line and in any state: two readers
// without a reader limit, which never keep each other out. It must keep
// every request Admit could wait for, or count.
type ChoosingMatters func(me Candidate, choosing wire.Entry) bool

// RefuseEarly is a replica's look at a try (obtain timeout 0) of mode at
// its ENTERING, given the replica's table of the name: its tickets
// (StateTicket) and the requests still choosing theirs (StateChoosing,
// no number yet): a code other than CodeNone refuses it right there.
// Every number the try can get is above all of those tickets, so it
// should refuse what Admit would refuse whatever ticket the request got.
// A request still choosing may end up before the try or after it; a
// writer in its doorway has asked the name's shared tickets to yield
// already (askYields), so the policy may count it as a drain begun: a
// try let in then would take a ticket for nothing, and its choosing flag
// would hold the writer in the doorway rule. Refusing is always safe (a
// refused try holds nothing); refusing more than Admit would only makes
// tries fail that could have passed.
type RefuseEarly func(mode wire.Mode, tickets []wire.Entry) wire.Code

// Earlier reports whether ticket (t, r) comes before ticket (u, s) in bakery
// order: by number, then by request id.
func Earlier(t uint64, r wire.RequestID, u uint64, s wire.RequestID) bool {
	if t != u {
		return t < u
	}
	return r.Compare(s) < 0
}

// Exclusive is the bakery's own rule: the earliest ticket goes in alone.
func Exclusive(me Candidate, others []wire.Entry) Decision {
	for _, o := range others {
		if Earlier(o.Ticket, o.Req, me.Ticket, me.Req) { // never me: no ticket is earlier than itself
			if me.Try {
				return Decision{Refuse: wire.CodeTimedOut}
			}
			return Decision{BlockedBy: o.Req}
		}
	}
	return Decision{Grant: true}
}
