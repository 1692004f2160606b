package wire

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// NodeID names one node of the cluster. The runtime derives it from the
// node's peer id; the simulator uses small numbers.
type NodeID uint64

// RequestID names one lock request for its whole life. Seq is
// incarnation<<32 | counter, where the incarnation is persisted and grows at
// every start of the node, so an id never repeats, even across restarts.
type RequestID struct {
	Node NodeID
	Seq  uint64
}

// Incarnation is the life of the node that created the id.
func (r RequestID) Incarnation() uint32 { return uint32(r.Seq >> 32) }

func (r RequestID) String() string {
	// Every lease's id is one: formatted by hand, not by fmt, as it is
	// made for each page view's try.
	var buf [64]byte // on the stack: the string is the one copy
	b := strconv.AppendUint(buf[:0], uint64(r.Node), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, r.Seq>>32, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(uint32(r.Seq)), 10)
	return string(b)
}

// Compare orders request ids; it breaks ties between equal ticket numbers.
func (r RequestID) Compare(o RequestID) int {
	if c := cmp.Compare(r.Node, o.Node); c != 0 {
		return c
	}
	return cmp.Compare(r.Seq, o.Seq)
}

// Mode is the semaphore mode of a request. The core treats it as opaque and
// hands it to the admission policy, save for the traits below.
type Mode uint8

const (
	ModeExclusive Mode = iota + 1
	ModeReadOnly
	ModeReadWritePriority
	ModeReadWrite
	ModeReadWriteGentle
	// ModeIntentShared (IS) is held on each parent of a name read in
	// READ_ONLY, ModeIntentExclusive (IX) on each parent of a name held in
	// a writer's mode: a holder of a name then meets the holders of its
	// parents and of its descendants on the names they share (multiple
	// granularity locking). Written in codec 4 only.
	ModeIntentShared
	ModeIntentExclusive
	modeEnd
)

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return m >= ModeExclusive && m < modeEnd }

var modeNames = [...]string{"", "exclusive", "read-only", "read-write-priority", "read-write", "read-write-gentle",
	"intent-shared", "intent-exclusive"}

// modeTraits is the one table of what each mode is: the core and the
// semaphore's policy both read it.
var modeTraits = [modeEnd]struct{ shared, soft, intent bool }{
	ModeReadOnly:        {shared: true},
	ModeReadWrite:       {soft: true},
	ModeReadWriteGentle: {soft: true},
	ModeIntentShared:    {shared: true, intent: true},
	ModeIntentExclusive: {intent: true},
}

// Shared: held beside other readers, and taken by a node's shared read
// ticket for its local clients (READ_ONLY, INTENT_SHARED).
func (m Mode) Shared() bool { return m.Valid() && modeTraits[m].shared }

// Writer: held alone, whatever else holds the name (EXCLUSIVE and the
// READ_WRITE modes).
func (m Mode) Writer() bool { return m.Valid() && !modeTraits[m].shared && !modeTraits[m].intent }

// Soft: a writer that lets later readers pass while it waits, and is
// marked active before it goes in (READ_WRITE, READ_WRITE_GENTLE).
func (m Mode) Soft() bool { return m.Valid() && modeTraits[m].soft }

// Intent: held on a parent for a holder below it (INTENT_SHARED,
// INTENT_EXCLUSIVE).
func (m Mode) Intent() bool { return m.Valid() && modeTraits[m].intent }

// Reader: any mode but a writer's. A soft writer waits for every one of
// them, and a gentle one's quiet period counts from the last.
func (m Mode) Reader() bool { return m.Valid() && !m.Writer() }

// IntentOf is the mode held on each parent of a name held in m:
// INTENT_SHARED under a reader, INTENT_EXCLUSIVE under anything else.
func (m Mode) IntentOf() Mode {
	if m == ModeReadOnly || m == ModeIntentShared {
		return ModeIntentShared
	}
	return ModeIntentExclusive
}

// Conflicts reports whether holders of modes a and b may not hold one
// name at once: a writer conflicts with everything, READ_ONLY with
// INTENT_EXCLUSIVE (a reader of a whole subtree and a writer inside it);
// readers and intents are otherwise compatible.
func Conflicts(a, b Mode) bool {
	switch {
	case a.Writer() || b.Writer():
		return true
	case a == ModeReadOnly:
		return b == ModeIntentExclusive
	case b == ModeReadOnly:
		return a == ModeIntentExclusive
	}
	return false
}

func (m Mode) String() string { return NameOf(modeNames[:], m, "mode") }

// EntryState is how far a request has come at one replica. States only move
// forward while a replica lives; a merge of reports keeps the highest.
type EntryState uint8

const (
	// StateChoosing: the request is in the doorway. Ticket is 0 until an
	// ADD_TICKET arrived; while choosing, the number may still be raised.
	StateChoosing EntryState = iota + 1
	// StateTicket: the request left the doorway (EXITING); Ticket is final.
	StateTicket
	// StateReleased: the request is gone (released, abandoned or
	// expired). A stored entry in this state is a tombstone.
	StateReleased
	stateEnd
)

var stateNames = [...]string{"", "choosing", "ticket", "released"}

func (s EntryState) String() string { return NameOf(stateNames[:], s, "state") }

// Entry is one request of one name as a replica knows it.
type Entry struct {
	Req    RequestID
	Ticket uint64
	Mode   Mode
	State  EntryState
	// Active: the request announced that it is going in (a writer of a mode
	// that lets later readers pass must say so before it is granted). For
	// a READ_ONLY entry: it is a node's shared read ticket, which yields
	// to a waiting writer when asked.
	Active bool
}

// Kind is the type of a message.
type Kind uint8

const (
	// KindEnter (master → replica): set the choosing flag of Req (phase
	// ENTERING). With Ticket, the master proposes that number too: a
	// replica whose mark of Name is below it takes it in the same step,
	// as KindAddTicket with WatchSeq and Lifetime would, and answers with
	// KindAddTicketAck (and the report of the watch); otherwise, and in
	// releases before 0.9, it answers with KindEnterAck.
	KindEnter Kind = iota + 1
	// KindEnterAck (replica → master): choosing set; Incarnation is the
	// replica's, HighWater its high-water ticket of Name, read in the same
	// step (a number proposed with KindEnter was not above it). Reject
	// with Code when the replica refuses the request.
	KindEnterAck
	// KindGetMax (master → replica): read the name's high-water ticket
	// (GET_MAX_TICKET). Masters read it with KindEnter now; replicas still
	// answer it.
	KindGetMax
	// KindGetMaxAck: HighWater is the replica's for Name.
	KindGetMaxAck
	// KindAddTicket (master → replica): store Ticket for Req durably (ADD_TICKET),
	// only if the replica is still in Incarnation, the one that acked
	// ENTERING, and Ticket is above the replica's high-water mark. The
	// choosing flag stays set: the master may still raise the number. A
	// replica that takes the ticket also watches Name for the master, as
	// KindWatch with WatchSeq and Lifetime would, so a report with the
	// ticket in it follows the ack.
	KindAddTicket
	// KindAddTicketAck: Ticket is on disk. With Reject, HighWater is the
	// replica's when the ticket was too low (the master raises it), or 0
	// when the choosing flag it rests on is gone. Held: the replica took
	// the ticket with nothing ahead of it and marked it held (a quorum of
	// such acks stands for the confirmation; older masters ignore it).
	KindAddTicketAck
	// KindWatch (master → replica): push reports of Name to me for
	// Lifetime ticks; reports echo WatchSeq.
	KindWatch
	// KindUnwatch (master → replica): stop pushing Name to me, for the
	// watches up to WatchSeq.
	KindUnwatch
	// KindReport (replica → master): the Entries of Name at the replica,
	// with ReadersAgo. Incarnation and ReportSeq order reports of one
	// replica; WatchSeq echoes the highest the replica has seen from that
	// master for Name. With BaseSeq, Entries are only the changes since
	// that report (the first after a watch is whole). With Held, the
	// replica marked the master's request Req held as it made the report
	// (nothing is left ahead of it there), as a confirmation would.
	KindReport
	// KindRelease (master → replica): Req is gone; drop it durably, and
	// keep its tombstone for at least Lifetime ticks.
	KindRelease
	// KindReleaseAck: the release is on disk; Held when the request was
	// held there (confirmed, renewed, or restored: may be held).
	// Reject when the replica did not have Req (an operator's force-unlock
	// of an unknown lease).
	KindReleaseAck
	// KindRenew (master → replica): extend Req's lifetime to Lifetime ticks, durably.
	KindRenew
	// KindRenewAck: the renewal is on disk; Reject when Req has no ticket there.
	KindRenewAck
	// KindRestarted (any node → all): From restarted as Incarnation. Replicas
	// drop From's requests of older incarnations; masters re-send pending work.
	KindRestarted
	// KindExit (master → replica): Req's number Ticket is durable at a
	// quorum and final; clear its choosing flag (EXITING).
	KindExit

	// Election (see package election). Messages of the election carry the
	// epoch they are about in View.Epoch, not in Epoch.

	// KindHello (any → all): From is alive; ElectionID is its id; View is
	// the valid view it knows (how late joiners learn the leaders);
	// Incarnation, Nonce and StoreAge tell its life and its store's age;
	// Codec the level it offers the cluster, Release its release (both
	// absent from a release that wrote codec 3 only).
	KindHello
	// KindPrepare (coordinator → all): promise no view below View.Epoch.
	KindPrepare
	// KindPromise: the promise for PrepareEpoch, with the view this node
	// accepted last in View; Reject when it promised a higher one
	// (Promised).
	KindPromise
	// KindAccept (coordinator → all): accept View.
	KindAccept
	// KindAccepted: View.Epoch was accepted; Reject when it was not, for
	// the sender promised a higher epoch (Promised).
	KindAccepted
	// KindCommit (coordinator → all): View is valid: a quorum accepted it.
	KindCommit

	// Leader handoff (package core).

	// KindSnapshotRequest (new leader → leader of the previous view): View
	// is the new view, SnapshotID numbers the request, and SnapshotSince is
	// the first request whose answer the asker still takes. The receiver
	// first fences: it refuses lock work of any epoch below View.Epoch,
	// durably; then it sends its lock table, every message with the
	// request's SnapshotID and an Answer number of its own: a request
	// delivered twice is answered twice, and the two answers must not be
	// mixed.
	KindSnapshotRequest
	// KindSnapshot: one entry of the table: Name, Req, Ticket, Mode and
	// Lifetime of a ticket, or, with a zero Req, Name's HighWater.
	// View.Epoch is the epoch of the request it answers.
	KindSnapshot
	// KindSnapshotDone: the Answer was AnswerSize entries; HandoffEpoch is
	// the epoch of the last view the sender completed a handoff for;
	// HighWater is the sender's floor, at least the high-water mark of
	// every name it forgot.
	KindSnapshotDone

	// KindActivate (master → replica): mark Req active (Reject unset) or
	// not active any more (Reject set), as of the master's Round; a
	// replica ignores rounds older than the newest it has seen.
	KindActivate
	// KindActivateAck: the mark of Round is set.
	KindActivateAck

	// Membership (package election).

	// KindCheckIn (node → members): From runs as life Incarnation with
	// boot Nonce and a store of StoreAge; Lives are the earlier lives its
	// store remembers: the newest one a majority confirmed (a store that
	// never had one confirmed says Unconfirmed), then every later one. A member records the newest life of every node durably
	// and answers; a node votes and serves only once a majority of the
	// other members confirmed that its store remembers the life they know.
	KindCheckIn
	// KindCheckInAck: the life Incarnation/Nonce is recorded; Reject when
	// the member knows a newer life of To (KnownIncarnation), or heard its
	// last life tell a store age (KnownStoreAge) above the one the
	// check-in shows: To's store was rolled back or lost.
	KindCheckInAck

	// KindRevoked (replica → master; package core): an operator's forced
	// release dropped Req on Name. The master ends it at once: a held
	// lease tells its holder (unlocked, lost), a waiting request fails.
	KindRevoked
	// KindFormer (replica → a restarted node; package core): the replica
	// keeps Req, a ticket of an earlier life of To, on Name until its own
	// deadline (Lifetime ticks from now), for it may be a granted lease
	// whose client still holds it. The new life can release it.
	KindFormer
	// KindHolds (leader → the other leaders of the view; package core):
	// which of Entries, tickets of Name this leader restored from its
	// store after a restart, does the receiver hold? A ticket that fewer
	// than a quorum of the view's leaders hold is no live lease (it was
	// released or expired while this leader was away), and is dropped.
	KindHolds
	// KindHoldsAck: Entries are the asked ones, in the view of the
	// message's Epoch: with their Ticket in StateTicket where the sender
	// holds them, ticket 0 in StateReleased where it does not.
	KindHoldsAck
	// KindSnapshotTomb: one tombstone of a snapshot answer (see
	// KindSnapshot): Req on Name was released, and the sender keeps that
	// fact for Lifetime more ticks. The new leader drops any copy of the
	// ticket, from whichever answer it comes. Counted in the Size of
	// KindSnapshotDone.
	KindSnapshotTomb
	// KindConfirm (master → replica; package core): the master decided to
	// grant Req; does the replica still have its ticket? The replica marks
	// the ticket held (a force-unlock of it is then a holder's), and takes
	// it as exited with the number Ticket, as KindExit does.
	KindConfirm
	// KindConfirmAck: the ticket is marked held; Reject when the replica
	// does not have it (released, force-unlocked or expired there).
	KindConfirmAck
	// KindYield (replica → master; package core): a writer waits on Name
	// while Req, a READ_ONLY ticket of To numbered Ticket, is in the
	// replica's table. A
	// master that holds Req for local readers (an agent's shared read
	// ticket) lets it go as Yield says; any other master ignores it.
	KindYield
	kindEnd
)

// lastCodec3Kind is the newest kind codec 3 has: a kind added after it is
// sent only to peers that read a codec that has it.
const lastCodec3Kind = KindYield

// Yield is how a shared read ticket must let a waiting writer in.
type Yield uint32

const (
	// YieldNone: no writer waits.
	YieldNone Yield = iota
	// YieldIdle: a writer that lets readers pass (READ_WRITE,
	// READ_WRITE_GENTLE) waits: let the ticket go as soon as no local
	// reader holds it, without lingering.
	YieldIdle
	// YieldDrain: a writer that blocks later readers (READ_WRITE_PRIORITY,
	// exclusive) waits: refuse new local readers (draining), and let the
	// ticket go once the local holders are done.
	YieldDrain
)

// MaxLeaders caps the leader lists of a view on the wire.
const MaxLeaders = 16

// MaxMembers caps the member lists of a view on the wire.
const MaxMembers = 128

// MaxLives caps the lives of a check-in.
const MaxLives = 64

// Life is one run of a node: the incarnation its store counted and the
// random nonce it drew at start. Two runs never share a Life, even when a
// store was restored from a copy.
type Life struct {
	Incarnation uint32
	Nonce       uint64
}

// View is a set of leaders for one epoch with the voting members of the
// cluster, and the view before it, whose leaders hand the lock table over
// to these. A view is valid once a majority of Members and a majority of
// PrevMembers accepted it (for the first view, PrevMembers are the
// bootstrap members).
type View struct {
	Epoch       uint64
	Leaders     []NodeID
	PrevEpoch   uint64
	PrevLeaders []NodeID
	// Members are the voters, in id order.
	Members []NodeID
	// PrevMembers are the voters of the previous view (the bootstrap
	// members when PrevEpoch is 0), in id order.
	PrevMembers []NodeID
	// Level is the cluster's codec: the newest codec every member offered
	// when the view was made, never lower than the previous view's. What
	// an older release cannot read (the store's record of a level, a
	// future field or kind that must be understood) waits for it. Zero:
	// MinVersion, as in every view made before levels existed. It travels
	// as a field of its own ("view-level"), written in codec 4 only.
	Level uint64
}

// Codec is v's level as a codec: Level, or MinVersion when it is zero.
func (v View) Codec() uint64 { return max(v.Level, uint64(MinVersion)) }

// Quorum is the number of distinct leaders that make a quorum.
func (v View) Quorum() int { return len(v.Leaders)/2 + 1 }

// IsLeader reports whether id is one of the view's leaders.
func (v View) IsLeader(id NodeID) bool { return slices.Contains(v.Leaders, id) }

// Clone is a copy of v that shares no memory with it.
func (v View) Clone() View {
	v.Leaders, v.PrevLeaders = slices.Clone(v.Leaders), slices.Clone(v.PrevLeaders)
	v.Members, v.PrevMembers = slices.Clone(v.Members), slices.Clone(v.PrevMembers)
	return v
}

// Leadership is the part of v the lock core uses: the leaders of v and of
// the view before it, without the voters.
func (v View) Leadership() View {
	return View{Epoch: v.Epoch, Leaders: slices.Clone(v.Leaders), PrevEpoch: v.PrevEpoch, PrevLeaders: slices.Clone(v.PrevLeaders)}
}

var kindNames = [...]string{"", "enter", "enter-ack", "get-max", "get-max-ack",
	"add-ticket", "add-ticket-ack", "watch", "unwatch", "report", "release",
	"release-ack", "renew", "renew-ack", "restarted", "exit",
	"hello", "prepare", "promise", "accept", "accepted", "commit",
	"snapshot-request", "snapshot", "snapshot-done", "activate", "activate-ack",
	"check-in", "check-in-ack", "revoked", "former", "holds", "holds-ack",
	"snapshot-tomb", "confirm", "confirm-ack", "yield"}

func (k Kind) String() string { return NameOf(kindNames[:], k, "kind") }

// NameOf is the name of v in names (the spelling of a small enum), or
// what(v) for a value without one.
func NameOf[T ~uint8](names []string, v T, what string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", what, uint8(v))
}

// Election reports whether k belongs to the election (package election)
// rather than to the lock core.
func (k Kind) Election() bool {
	return k >= KindHello && k <= KindCommit || k == KindCheckIn || k == KindCheckInAck
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k > 0 && k < kindEnd }

// Code is the stable reason carried by failures; its String is the wire and
// JSON spelling and never changes.
type Code uint8

const (
	CodeNone Code = iota
	CodeTimedOut
	CodeDraining
	CodeNotReady
	CodeInvalid
	CodeOverflow
	CodeLost
	CodeUnknownLease
	codeEnd
)

var codeNames = [...]string{"", "timedout", "draining", "not_ready", "invalid", "overflow", "lost", "unknown_lease"}

func (c Code) String() string {
	if c == CodeNone {
		return "" // the spelling of no failure, on the wire and in JSON
	}
	return NameOf(codeNames[:], c, "code")
}

// ParseCode is the inverse of Code.String.
func ParseCode(s string) (Code, bool) {
	for i, n := range codeNames {
		if n == s {
			return Code(i), true
		}
	}
	return CodeNone, false
}

// Message is every message of the protocol: the lock core's, the
// election's and the handoff's. Each field means one thing in every kind
// that carries it; the Kind constants say which fields a kind uses, and a
// kind leaves the others zero. The header (Kind to Clock) is in every
// message.
type Message struct {
	Kind Kind
	From NodeID
	To   NodeID
	// Epoch is the epoch of the sender's view.
	Epoch uint64
	// Clock is the sender's Lamport clock.
	Clock uint64

	// Lock requests (package core).

	// Name is the lock's name.
	Name string
	Req  RequestID
	Mode Mode
	// Ticket is Req's ticket number (its fencing token once granted).
	Ticket uint64
	// HighWater is a replica's highest ticket of Name (of every name it
	// forgot, in KindSnapshotDone).
	HighWater uint64
	// Incarnation is a life of the sender (acks, reports, restarts,
	// hellos, check-ins) or of the addressee (ADD_TICKET: the one that
	// acked ENTERING; check-in acks: the life recorded).
	Incarnation uint32
	// Lifetime is how many ticks the receiver keeps Req (or a watch).
	Lifetime uint64
	// Reject: the receiver refused what the message acks.
	Reject bool
	// Held: a released request was held at the replica (confirmed,
	// renewed, marked held with nothing ahead, or restored: it may have
	// been granted); on an ADD_TICKET ack or a report, that the replica
	// marked the ticket held.
	Held bool
	// Code is why a request was refused.
	Code Code
	// Entries are requests of Name (reports, holds).
	Entries []Entry
	// WatchSeq numbers a master's watches of Name; reports echo the
	// highest one the replica has seen.
	WatchSeq uint64
	// ReportSeq orders the reports of one replica incarnation.
	ReportSeq uint64
	// BaseSeq: a report's Entries are only what changed since the report
	// of this ReportSeq (entries gone are in StateReleased); 0: the whole
	// table.
	BaseSeq uint64
	// Yield (KindYield, KindRenewAck of a READ_ONLY ticket): how a
	// shared read ticket must let a waiting writer in.
	Yield Yield
	// Shared: an ENTER of a node's shared read ticket (core's share.go);
	// the replica keeps its entry Active (see Entry.Active).
	Shared bool
	// Try: an ENTER of a request that must be answered at once (obtain
	// timeout 0), which a replica may refuse right there (see
	// core.Config.RefuseEarly).
	Try bool
	// ReadersAgo is how many ticks ago a READ_ONLY ticket of Name was last
	// in the reporting replica's table (0 while one is). On the RELEASE of
	// a shared read ticket: how many ticks ago, on its master's clock, its
	// last local reader let go.
	ReadersAgo uint64
	// Round numbers a master's activation marks of Req, and its renewals
	// (KindRenew; the KindRenewAck echoes it).
	Round uint64

	// The election and membership (package election).

	// View is a view of the election: the one proposed, accepted,
	// committed or known.
	View View
	// ElectionID is the sender's election id (see election.ID).
	ElectionID string
	// PrepareEpoch is the epoch of the prepare a promise answers.
	PrepareEpoch uint64
	// Promised is the highest epoch the sender promised (in a refusal:
	// the one above what was asked).
	Promised uint64
	// Cluster is the id of the sender's cluster, a hash of its bootstrap
	// members, so that nodes of two clusters never count each other;
	// ClusterSize is the number of those members, for the log line that
	// says what differs.
	Cluster     uint64
	ClusterSize uint64
	// Nonce is drawn at random at every start of the sender: with
	// Incarnation it names one life, so two lives with the same
	// incarnation, one from a restored copy of the store, never pass for
	// one.
	Nonce uint64
	// StoreAge is how many changes the sender's store holds.
	StoreAge uint64
	// Lives are a check-in's earlier lives of the sender; Unconfirmed
	// when its store never had one confirmed by a majority.
	Lives       []Life
	Unconfirmed bool
	// KnownIncarnation and KnownStoreAge are the newest life of the
	// addressee the sender knows, and the store age that life told.
	KnownIncarnation uint32
	KnownStoreAge    uint64
	// Codec is, in a hello, a promise or an accept, the newest codec the
	// sender offers to the cluster's level (View.Level): the newest it
	// reads, or less while its operator holds the level back. Zero:
	// MinVersion (a release before levels).
	Codec uint64
	// Release is, in a hello, the sender's release ("0.9.0").
	Release string

	// The leader handoff (package core).

	// SnapshotID numbers a new leader's snapshot requests; every message
	// of an answer echoes the request's. SnapshotSince is the first
	// request whose answer the asker still takes.
	SnapshotID    uint64
	SnapshotSince uint64
	// Answer numbers the sender's answers, so that two answers to one
	// request are never mixed; AnswerSize is how many entries an answer
	// had.
	Answer     uint64
	AnswerSize uint64
	// HandoffEpoch is the epoch of the last view the sender completed a
	// handoff for.
	HandoffEpoch uint64
}

// header are the fields Message.String prints first.
var header = []string{"from", "to", "epoch", "name"}

func (m Message) String() string {
	s := fmt.Sprintf("%s %d->%d e%d %q req=%s", m.Kind, m.From, m.To, m.Epoch, m.Name, m.Req)
	for _, f := range fields {
		if _, set := f.put(nil, &m); set && f.show != nil && !slices.Contains(header, f.name) {
			s += " " + f.name + "=" + f.show(&m)
		}
	}
	if m.View.Epoch != 0 {
		s += fmt.Sprintf(" view=%d", m.View.Epoch)
	}
	if len(m.Lives) > 0 {
		s += fmt.Sprintf(" lives=%v", m.Lives)
	}
	if len(m.Entries) > 0 {
		s += fmt.Sprintf(" entries=%d", len(m.Entries))
	}
	return s
}
