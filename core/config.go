package core

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// Sentinel errors of the core's own. The failures a client can see
// (invalid, overflow, not ready, timed out, draining, lost, unknown
// request) are the sentinels of the table in core/codes.
var (
	ErrStaleEpoch  = errors.New("core: message from another epoch")
	ErrBadMessage  = errors.New("core: malformed message")
	ErrWrongTarget = errors.New("core: message for another node")
	// ErrNotServing: this leader is fenced, or has not finished taking the
	// lock table over from the previous view's leaders.
	ErrNotServing = errors.New("core: not serving the lock table")
)

// Config configures a Node. The zero value of every field but ID and
// Incarnation is usable and means the documented default.
type Config struct {
	// ID is this node. Required, non-zero.
	ID wire.NodeID
	// Incarnation is this life of the node: persisted by the caller and
	// increased before every start. Required, non-zero. Request ids embed it.
	Incarnation uint32
	// View is the initial view: its leaders, and the previous view's,
	// whose leaders hand the lock table over to these (PrevEpoch 0: the
	// leaders start from their own tables); the core keeps only that part
	// (wire.View.Leadership). Given by the caller: the election supplies it
	// in the runtime; tests and the simulator may fix it. An empty view
	// means not ready: requests wait for SetView until their obtain
	// timeout.
	View wire.View
	// Peers are all nodes of the cluster; a restarted node tells them so.
	Peers []wire.NodeID
	// RetransmitTicks is how long a phase message waits for its ack before it
	// is sent again. Default 4.
	RetransmitTicks int64
	// RefreshTicks is how often a waiting master renews its watches, to
	// recover from lost reports. Default 40.
	RefreshTicks int64
	// TryTicks bounds a try (obtain timeout 0): the doorway and the one check
	// must finish within it. Default 40.
	TryTicks int64
	// DoorwayTicks bounds a request's doorway (its ENTERING and
	// ADD_TICKET): one that lasts longer is given up for a fresh one under
	// a new id, and a leader keeps the tombstone of an operator's release
	// of a request it has not seen for as long (plus the drift margin).
	// Every node of a cluster must use the same. A bound much longer than
	// a doorway takes keeps a herd of doorways on overloaded leaders from
	// starting over and over. Default TryTicks.
	DoorwayTicks int64
	// MaxNameLen caps object names in bytes. Default and maximum wire.MaxNameLen.
	MaxNameLen int
	// MaxWaiters caps the requests one name may have at a replica, and at a
	// master. Default DefaultMaxWaiters.
	MaxWaiters int
	// Admit is the admission policy. Default Exclusive.
	Admit Admit
	// ChoosingMatters is the policy's word on which doorways below a
	// waiter it must wait for (see the type). Nil: all of them.
	ChoosingMatters ChoosingMatters
	// ShareLease turns read-lease aggregation on when above 0: this
	// node's READ_ONLY requests without a reader limit are granted on one
	// cluster-wide READ_ONLY ticket per name that the node holds for all
	// of them (see share.go), asked for this many ticks and renewed while
	// local readers hold it. A local reader's lease never outlives it.
	// Zero: off, every request runs the whole bakery.
	ShareLease int64
	// ShareLinger is how long a shared read ticket is kept with no local
	// reader before it is let go. Default ShareLease/8.
	ShareLinger int64
	// DrainMemo is how many ticks a node that saw a drain of a name (its
	// share let go for a draining writer, or its share's try refused with
	// draining) refuses that name's shared tries itself, without asking
	// the leaders, unless a leader says sooner that the drain is over
	// (KindYield with YieldNone). Default 20. Only with ShareLease.
	DrainMemo int64
	// RefuseEarly, if set, lets a replica refuse a try at ENTERING (see
	// the type). Nil: tries are decided by Admit only.
	RefuseEarly RefuseEarly
	// SnapshotsFromStore: as a previous view's leader, hand the table over
	// by Ready.Snapshots, for the caller to stream from its store, instead
	// of sending it from memory. Both send the same table: every change is
	// durable before anything resting on it leaves the node.
	SnapshotsFromStore bool
	// CheckIncremental checks the node's incremental bookkeeping against
	// the whole walk it saves: every tick also walks all requests and
	// counts in Stats.MissedTimers those whose timers were due but not
	// armed, and every report also asks each waiter it let sleep whether
	// deciding would have done anything (Stats.MissedDecisions). It costs
	// what the timer heap and the blocked waiters exist to avoid: tests
	// only.
	CheckIncremental bool
	// PlainDoorway makes the node's doorway the one releases before 0.9
	// had: as a master it never proposes a number with ENTERING, and as a
	// replica it answers a proposal as a plain ENTERING (the flag and the
	// mark, the number left for ADD_TICKET) and tells every master its
	// mark, not a number above those it told others (suggest). The zero value proposes the
	// number after the last this node knew of the name, so a quorum that
	// takes it grants in one round fewer. Tests use it to run an older
	// agent beside newer ones, and schedules built on the plain doorway.
	PlainDoorway bool
	// EagerReports makes the node, as a replica, send every watcher a
	// report at each change of the name, as releases before 0.9 did. The
	// zero value holds back a report from a master waiting with no soft
	// writer when all it would carry are newcomers' flags and tickets,
	// which cannot matter to it (see holdsBack). Tests use it for
	// schedules built on every report.
	EagerReports bool
	// Mutant deliberately breaks the core. Only the mutation tests set it,
	// to prove that the simulator catches broken variants. It takes
	// effect only in builds with the sluicemutants tag (core/mutation);
	// in every other build it is ignored. Never set it.
	Mutant Mutant
}

// DefaultMaxWaiters is Config.MaxWaiters' default: the agent's cap on the
// requests of one name, and so on a reader limit.
const DefaultMaxWaiters = 1000

// Mutant names a deliberate bug, for mutation testing of the simulator.
type Mutant uint64

const (
	// MutantQuorumOfOne: every phase completes with a single ack.
	MutantQuorumOfOne Mutant = 1 << iota
	// MutantStaleIncarnation: request ids forget the incarnation, so a reply
	// addressed to a previous life of the master counts as an ack.
	MutantStaleIncarnation
	// MutantIgnoreChoosing: the master does not wait for requests still in
	// the doorway.
	MutantIgnoreChoosing
	// MutantNotDurable: a replica acknowledges a ticket it never persists.
	MutantNotDurable
	// MutantSharedTickets: replicas accept a ticket number another request
	// holds, so two grants may carry the same fencing token.
	MutantSharedTickets
	// MutantStaleReports: a master decides on reports made before its
	// ticket was durable.
	MutantStaleReports
	// MutantHandoffFromOne: a new leader takes the table over from a single
	// leader of the previous view instead of a quorum.
	MutantHandoffFromOne
	// MutantNoFence: a leader of the previous view sends its table without
	// fencing, and goes on serving the old epoch.
	MutantNoFence
	// MutantNoConfirm: a request whose policy asks for activation is
	// granted without it.
	MutantNoConfirm
	// MutantRenewFromDecision: a renewal's TTL is counted from the
	// leaders' confirmation instead of the Renew call (the agent's old
	// arithmetic), so the client's lease outlives the master's.
	MutantRenewFromDecision
	// MutantDropFormerTickets: a replica drops every request of a node's
	// earlier life when the node restarts, granted leases included.
	MutantDropFormerTickets
	// MutantNoOwnTicket: a waiting master grants without checking that its
	// own ticket is still there: neither in a quorum of the fresh reports
	// nor by a confirmation round (startConfirm).
	MutantNoOwnTicket
	// MutantNoDriftMargin: replicas keep a request exactly the lifetime
	// its master asked for, on their own clock, with no room for clocks
	// that run at different rates.
	MutantNoDriftMargin
	// MutantDropRestoredAtOnce: a restarted leader drops a ticket it
	// restored as soon as one other leader does not hold it, instead of
	// when fewer than a quorum can.
	MutantDropRestoredAtOnce
	// MutantMemoryTombs: tombstones of released requests live in memory
	// only: they are neither stored nor sent with snapshots, so a copy of
	// the ticket that a release missed comes back at a restart or in a
	// handoff.
	MutantMemoryTombs
	// MutantUnconfirmedGrant: a master grants as soon as it decides, on
	// reports that may be older than a force-unlock of its request,
	// without asking the leaders whether they still have the ticket.
	MutantUnconfirmedGrant
	// MutantForgetMarks: a replica forgets an idle name without keeping
	// its high-water mark in the floor, so the name's next fencing token
	// may be below an earlier one.
	MutantForgetMarks
	// MutantUncheckedTicketReports: a master decides on any report that
	// echoes its ADD_TICKET's watch, without checking that the report lists
	// its ticket: one made before the replica took the ticket (another
	// request of the master watching the name) may lack a request that
	// read a lower mark there.
	MutantUncheckedTicketReports
	// MutantDeltaAnyBase: a master applies a report's delta to whatever
	// report of that replica it has, not only to the one it was made on,
	// so a lost or reordered report leaves requests out of its view.
	MutantDeltaAnyBase
	// MutantSleepBlocked: a waiter whose last decision was a wait on one
	// entry is never asked again on reports, even when that entry changes
	// or leaves.
	MutantSleepBlocked
	// MutantAdmitAfterYield: an agent keeps granting local readers on its
	// shared read ticket after a priority writer asked it to drain.
	MutantAdmitAfterYield
	// MutantYieldWithHolders: an agent lets its shared read ticket go as
	// soon as a writer asks, while local readers still hold on it.
	MutantYieldWithHolders
	// MutantShareIdleFromGrant: the release of a shared read ticket says
	// its readers left when the ticket was granted, not when its last
	// local reader did.
	MutantShareIdleFromGrant
	// MutantNumberlessChoosing: a replica that missed a request's
	// ADD_TICKET keeps its choosing flag without a number after EXITING,
	// until the request's deadline (a stale flag the operators' view showed).
	MutantNumberlessChoosing
	// MutantTryDrains: a writer's try asks shared read tickets to drain
	// (turn new readers away) as a waiting writer does, and a failed try
	// leaves frontends refusing readers until the readers then are done.
	MutantTryDrains
	// MutantLazyForcedTomb: a force-unlock's tombstone is written lazily,
	// as a holder's own release is: a leader that crashes before its
	// store commits comes back with the ticket, and the forced request's
	// still running master gets it confirmed.
	MutantLazyForcedTomb
	// MutantSoftIgnoresLaterDoorways: an activated soft writer waits only
	// for the doorways that were there at its first look, as any request
	// does, so a later reader that decided on a report made before the
	// activation mark reached it holds beside the writer.
	MutantSoftIgnoresLaterDoorways
	// MutantLimitIgnoresShares: a limited reader asks no shared read
	// ticket ahead of it to go, so it waits while page views keep one busy
	// (the policy counting a share as full is the safety half; this is
	// the liveness half).
	MutantLimitIgnoresShares
	// MutantSoftKeepsPlace: a waiting soft writer keeps its place in line
	// when the policy asks it to take a new one behind a later hard
	// writer, and the three of them (it waiting for a later reader, the
	// reader for the hard writer, the hard writer for it) stall until
	// someone's timeout.
	MutantSoftKeepsPlace
	// MutantRenewAnyAck: a master counts any renewal ack of the request
	// for its current renewal, also a late one of an earlier renewal,
	// which extended the ticket from that one's time only.
	MutantRenewAnyAck
	// MutantNoRestartFromRequests: a replica learns of a node's restart
	// only from its announcement, so a lost one leaves the earlier life's
	// choosing flags to hold waiters up until their deadlines.
	MutantNoRestartFromRequests
	// MutantKeepStrays: a master leaves alone a request of its own that
	// it forgot and a late phase message made a replica take again, so
	// the replica's choosing flag holds waiters until its deadline.
	MutantKeepStrays
	// MutantRestoreSharesAsReaders: a restarted leader, or a new one
	// taking the table over, restores a node's shared read ticket as a
	// plain reader's, so a limited reader counts its page views as one.
	MutantRestoreSharesAsReaders
	// MutantStopWithHolders: an agent that begins a graceful stop
	// (StopSharing) lets its shared read tickets go while local readers
	// still hold on them.
	MutantStopWithHolders
	// MutantNoParentTickets: a nested name's request takes no ticket on
	// its parents, so a drain of /site goes in beside a reader of
	// /site/shop.
	MutantNoParentTickets
	// MutantParentsInnermostFirst: a nested name's request takes its
	// parents innermost first (/site/shop before /site), against the one
	// order every request follows: a request of a shallower name that
	// holds /site and waits for /site/shop then closes a cycle with it
	// through a drain of /site.
	MutantParentsInnermostFirst
	// MutantStaleRestoredMark: a master does not correct a leader whose
	// report shows its waiting soft writer active when it is not, so a
	// restarted leader that restored the ticket as active keeps it so
	// once the correction at its announcement is lost, and readers behind
	// it stall.
	MutantStaleRestoredMark
	// MutantClearNotHeld: a replica tells a master that took an
	// uncontended ticket that it holds it (so no confirmation round is
	// run) without marking it held, and a force-unlock that meets the
	// ticket there after its grant answers that it found a waiter.
	MutantClearNotHeld
	// MutantStuckDrainMemo: an agent's drain memo never ends (its ticks
	// and the leaders' word that the drain is over are ignored), so its
	// page views are refused with draining long after the writer left.
	MutantStuckDrainMemo
	// MutantAnswersBeforeWrites: MessageScope puts every replica's answer
	// and report outside its name's scope, so a caller sends an answer (an
	// ADD_TICKET's ack, a renewal's) before the write it rests on is
	// durable.
	MutantAnswersBeforeWrites
	// MutantEnterTicketUnchecked: a leader takes the number ENTERING
	// proposes even when it is not above the name's high-water mark, so a
	// request that entered after a waiter's ticket was taken may be ahead
	// of it.
	MutantEnterTicketUnchecked
	// MutantHoldBackAny: a leader holds back a report from a master that
	// waits with hard writers whatever changed, a holder's release
	// included, so the next waiter waits for its own watch to come round.
	MutantHoldBackAny
	// MutantUnboundedDoorway: a master's doorway goes on for as long as
	// its request may wait, so an ENTERING that reaches a leader after the
	// tombstone of an operator's force-unlock there went is taken, and the
	// request the operator was told was dropped is granted.
	MutantUnboundedDoorway
	// MutantTombForATry: a leader keeps the tombstone of an operator's
	// release of a request it has not seen for a try (TryTicks), not for
	// the doorway bound, so a doorway that outlasts the tombstone but not
	// its bound is taken there and granted.
	MutantTombForATry
	// MutantHoldBackForReaders: a leader holds back from the master of any
	// reader the changes of requests it does not conflict with, as it does
	// from a share's, so a reader with a limit does not hear that an
	// earlier reader left.
	MutantHoldBackForReaders
	// MutantPlainReaderUntold: leaders ask only shares to yield, and a
	// master keeps no yield asked of a plain reader's ticket, so a page
	// view that took the bakery by itself (its share's try failed, or it
	// has a limit) never hears that the site drains.
	MutantPlainReaderUntold
	// MutantHoldsUnknownAsGone: a leader asked whether it holds a
	// restarted leader's restored ticket answers "released" when it does
	// not hold it, not only when it keeps its tombstone, so a ticket in
	// its doorway, taken at the restarted leader and not yet at the
	// others, is dropped there although its master counts that take.
	MutantHoldsUnknownAsGone
	// MutantStrayReleaseOnce: a master sends the release of a stray (a
	// forgotten request a leader took again) once, not until the leader
	// answers, so a lost one leaves the stray holding the name's waiters
	// up until the request's deadline there.
	MutantStrayReleaseOnce
	// MutantHoldsDropUntold: a leader that drops a restored ticket on the
	// other leaders' word keeps no tombstone of it, so an operator's
	// force-unlock of the request that arrives next hears from it that it
	// never had the request, and may conclude that nobody held it.
	MutantHoldsDropUntold
	// MutantFloorSkipsHeldNames: a handoff raises the node's floor to the
	// old leaders' but leaves the marks of the names it already holds,
	// so a name one old leader forgot (its mark in that leader's floor)
	// and this node kept from before with a lower mark takes a ticket
	// number that was granted already.
	MutantFloorSkipsHeldNames
)

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ID == 0 || out.Incarnation == 0 {
		return out, fmt.Errorf("%w: config needs a non-zero ID and Incarnation", codes.ErrInvalid)
	}
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	if out.ShareLease > 0 {
		def(&out.ShareLinger, max(out.ShareLease/8, 1))
		def(&out.DrainMemo, 20)
	}
	def(&out.RetransmitTicks, 4)
	def(&out.RefreshTicks, 40)
	def(&out.TryTicks, 40)
	def(&out.DoorwayTicks, out.TryTicks)
	if out.MaxNameLen <= 0 || out.MaxNameLen > wire.MaxNameLen {
		out.MaxNameLen = wire.MaxNameLen
	}
	if out.MaxWaiters <= 0 {
		out.MaxWaiters = DefaultMaxWaiters
	}
	if out.Admit == nil {
		out.Admit = Exclusive
	}
	out.View = out.View.Leadership()
	out.Peers = slices.Clone(out.Peers)
	return out, nil
}

// Acquire is a lock request made by a local client.
type Acquire struct {
	Name string
	Mode wire.Mode
	// Timeout is the obtain timeout in ticks; 0 means try once and answer at
	// once (bounded by Config.TryTicks for the round trips).
	Timeout int64
	// Duration is how long the lease lasts once granted, in ticks; > 0.
	Duration int64
	// Grace is how long after Duration the lease is released by force; >= 0.
	Grace int64
	// Quiet is the quiet period of READ_WRITE_GENTLE, in ticks; >= 0 (0:
	// none; the agent fills in the default of 10 minutes).
	Quiet int64
	// Limit caps the readers ahead of a READ_ONLY request; >= 0 (0: none).
	Limit int
	// Parents are the names above Name that its holder holds too, in the
	// intent mode of Mode (Mode.IntentOf), outermost first: each below the
	// next in byte order and all below Name, at most MaxParents. They are
	// taken one by one before Name, and go with it (nested.go). Empty: a
	// flat name. The agent derives them (semaphore.NamePath); every agent
	// must derive the same ones for a name.
	Parents []string
	// ParentModes, when set, are the parents' modes, one each, instead of
	// Mode.IntentOf(): for several names taken together as one request
	// (the agent's acquire of several nested names), whose steps are the
	// names and the levels above them, in byte order. A step of a
	// reader's or writer's mode is granted with its own limit (Limit,
	// for READ_ONLY) and quiet period (Quiet).
	ParentModes []wire.Mode
}

// MaxParents is the most parents a request may have: the levels of
// api.MaxNames names of semaphore.MaxDepth levels each.
const MaxParents = 2047

// validate keeps the core's own invariants for whoever proposes: the
// agent, whose edge (daemon.Request.Validate) has already refused what
// users must not ask for, in their units and with clear errors, and the
// simulator, which drives the core directly. It stays because the core
// cannot run a request outside these bounds at all: a name the wire does
// not carry (every replica would refuse its messages), a mode the policy
// does not know, spans that would overflow tick arithmetic, a lease of no
// tick, a reader limit above the waiters a name may have. It is not the
// users' rules, so it says only which bound a request broke.
func (n *Node) validate(a Acquire) error {
	span := func(t int64) bool { return t >= 0 && t <= maxSpan }
	if a.Name != "" && len(a.Name) <= n.cfg.MaxNameLen && a.Mode.Valid() && span(a.Timeout) && span(a.Grace) &&
		span(a.Quiet) && span(a.Duration) && a.Duration > 0 && a.Limit >= 0 && a.Limit <= n.cfg.MaxWaiters {
		if len(a.Parents) == 0 {
			return nil
		}
		ordered := len(a.Parents) <= MaxParents && !a.Mode.Intent() && (a.ParentModes == nil || len(a.ParentModes) == len(a.Parents))
		for i, p := range a.Parents {
			if a.ParentModes != nil && !a.ParentModes[i].Valid() {
				ordered = false
			}
			next := a.Name
			if i+1 < len(a.Parents) {
				next = a.Parents[i+1]
			}
			ordered = ordered && p != "" && len(p) <= n.cfg.MaxNameLen && p < next
		}
		if ordered {
			return nil
		}
		return fmt.Errorf("%w: outside what the core runs: %d parents of %q in mode %s (at most %d, each below the next "+
			"and the name in byte order, of a mode that is not an intent, with a known mode each if modes are given)", codes.ErrInvalid, len(a.Parents), a.Name, a.Mode, MaxParents)
	}
	return fmt.Errorf("%w: outside what the core runs (a name of 1..%d bytes, a known mode, spans of 0..%d ticks, "+
		"a duration of at least one, a reader limit of 0..%d): name of %d bytes, mode %d, timeout %d, duration %d, "+
		"grace %d, quiet %d, limit %d", codes.ErrInvalid, n.cfg.MaxNameLen, int64(maxSpan), n.cfg.MaxWaiters,
		len(a.Name), a.Mode, a.Timeout, a.Duration, a.Grace, a.Quiet, a.Limit)
}

// maxSpan keeps tick arithmetic far from overflow.
const maxSpan = 1 << 40
